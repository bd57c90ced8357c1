// The speculative-decoding flags that ridge run, serve and bench share, and the draft
// model they load beside the target (on the target's threads).
//
//   SpeculativeFlags spec;
//   add_speculative_flags(*cmd, spec);                   // --spec, --draft, --draft-max, ...
//   std::unique_ptr<Model> draft = spec.load_draft(*model);   // null unless --draft
//   engine_options.speculative = spec.options();
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace ridge::cli {

struct SpeculativeFlags {
  std::string method = "none";  // none | ngram | draft (--draft alone implies draft)
  std::string draft_model;
  int32_t draft_max = 8;
  bool fixed = false;           // always draft_max tokens (no adaptation)
  int32_t ngram_min = 2;
  int32_t ngram_max = 8;

  // Validated: throws ridge::Error naming the flag.
  SpeculativeOptions options() const;
  // The draft model on the target's thread pool and batch size; null unless one is asked.
  std::unique_ptr<Model> load_draft(Model& target) const;
};

void add_speculative_flags(CLI::App& cmd, SpeculativeFlags& flags);

}  // namespace ridge::cli
