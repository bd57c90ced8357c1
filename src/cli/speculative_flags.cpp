#include "cli/speculative_flags.h"

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"

namespace ridge::cli {

SpeculativeOptions SpeculativeFlags::options() const {
  SpeculativeOptions o;
  const std::string m = method == "none" && !draft_model.empty() ? "draft" : method;
  if (m == "none")
    o.method = SpecMethod::kNone;
  else if (m == "ngram")
    o.method = SpecMethod::kNgram;
  else if (m == "draft")
    o.method = SpecMethod::kDraftModel;
  else
    throw Error(str_cat("--spec must be none, ngram or draft, got '", method, "'"));
  if (o.method == SpecMethod::kDraftModel && draft_model.empty())
    throw Error("--spec draft needs a draft model: --draft MODEL");
  if (o.method != SpecMethod::kDraftModel && !draft_model.empty())
    throw Error(str_cat("--draft is a draft model for --spec draft, not for --spec ", m));
  if (draft_max < 1 || draft_max > 32) throw Error(str_cat("--draft-max must be in 1..32, got ", draft_max));
  if (ngram_min < 1 || ngram_max < ngram_min)
    throw Error(str_cat("--ngram-min and --ngram-max must satisfy 1 <= min <= max, got ", ngram_min, " and ",
                        ngram_max));
  o.draft_max = draft_max;
  o.adaptive = !fixed;
  o.ngram = {ngram_min, ngram_max};
  return o;
}

std::unique_ptr<Model> SpeculativeFlags::load_draft(Model& target) const {
  if (options().method != SpecMethod::kDraftModel) return nullptr;
  return Model::load(resolve_model_path(draft_model),
                     {.max_batch_tokens = target.max_batch_tokens(), .pool = &target.pool()});
}

void add_speculative_flags(CLI::App& cmd, SpeculativeFlags& flags) {
  cmd.add_option("--spec", flags.method,
                 "Speculative decoding: none, ngram (prompt lookup) or draft (a draft model, --draft)")
      ->capture_default_str();
  cmd.add_option("--draft", flags.draft_model, "Draft model (GGUF file or cached name) with the target's vocabulary");
  cmd.add_option("--draft-max", flags.draft_max, "Most tokens drafted per request and step")->capture_default_str();
  cmd.add_flag("--draft-fixed", flags.fixed,
               "Always draft --draft-max tokens (default: per request, the length its measured acceptance pays for)");
  cmd.add_option("--ngram-min", flags.ngram_min, "Shortest suffix n-gram lookup may match")->capture_default_str();
  cmd.add_option("--ngram-max", flags.ngram_max, "Longest suffix n-gram lookup compares")->capture_default_str();
}

}  // namespace ridge::cli
