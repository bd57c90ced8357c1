// `ridge template -m MODEL --messages FILE.json`: the prompt a model's chat template makes
// of a conversation, byte for byte as Hugging Face's apply_chat_template renders it (BOS
// text included). With --markup, a JSON object also giving the byte ranges that are the
// template's own markup (the only text that may become special tokens).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"

namespace ridge::cli {
namespace {

struct TemplateOptions {
  std::string model;
  std::string template_file;
  std::string messages_file;
  std::string tools_file;
  std::string vars_file;
  std::string bos_token;
  std::string eos_token;
  bool no_generation_prompt = false;
  bool markup = false;
};

jinja::Value read_json(const std::string& path, std::string_view what) {
  try {
    return jinja::parse_json(read_text_file(path));
  } catch (const jinja::TemplateError&) {
    throw;
  } catch (const Error& e) {
    throw Error(str_cat(path, " (", what, "): ", e.what()));
  }
}

void run(const TemplateOptions& opt) {
  if (opt.model.empty() && opt.template_file.empty()) throw Error("give -m MODEL or --template FILE");
  ChatTemplate tmpl;
  if (!opt.template_file.empty()) {
    tmpl = chat_template_from_jinja(read_text_file(opt.template_file), opt.template_file, opt.bos_token,
                                    opt.eos_token, false);
  } else {
    gguf::File f = gguf::File::open(resolve_model_path(opt.model));
    tmpl = detect_chat_template(f);
    if (!tmpl.uses_jinja())
      throw Error(str_cat(f.name(), " has no tokenizer.chat_template (chat uses the built-in '",
                          chat_format_name(tmpl.format), "' format)"));
  }
  const jinja::Value messages = read_json(opt.messages_file, "--messages");
  if (!messages.is_list()) throw Error(str_cat(opt.messages_file, ": --messages must hold a JSON array"));
  const jinja::Value tools = opt.tools_file.empty() ? jinja::Value(jinja::None{}) : read_json(opt.tools_file, "--tools");
  jinja::Value vars = opt.vars_file.empty() ? jinja::Value::new_dict() : read_json(opt.vars_file, "--vars");
  if (!vars.is_dict()) throw Error(str_cat(opt.vars_file, ": --vars must hold a JSON object"));
  ChatPrompt p = render_jinja_chat(tmpl, messages, tools, !opt.no_generation_prompt, &vars.as_dict());
  if (!opt.markup) {
    std::fwrite(p.text.data(), 1, p.text.size(), stdout);
    return;
  }
  nlohmann::json ranges = nlohmann::json::array();
  for (const TextRange& r : p.markup) ranges.push_back({r.begin, r.end});
  const std::string out = nlohmann::json{{"text", p.text}, {"markup", ranges}}.dump(-1, ' ', false,
                                                                                      nlohmann::json::error_handler_t::replace);
  std::printf("%s\n", out.c_str());
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto opt = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand("template", "Print the prompt a model's chat template makes of a conversation");
  cmd->add_option("-m,--model", opt->model, "GGUF file (a vocab-only one is fine) or cached model name");
  cmd->add_option("--template", opt->template_file, "A Jinja template file to use instead of the model's");
  cmd->add_option("--messages", opt->messages_file, "JSON file: the messages array, as in a chat request")->required();
  cmd->add_option("--tools", opt->tools_file, "JSON file: the tools array");
  cmd->add_option("--vars", opt->vars_file, "JSON file: an object of further template variables");
  cmd->add_option("--bos-token", opt->bos_token, "bos_token text with --template");
  cmd->add_option("--eos-token", opt->eos_token, "eos_token text with --template");
  cmd->add_flag("--no-generation-prompt", opt->no_generation_prompt, "Render with add_generation_prompt false");
  cmd->add_flag("--markup", opt->markup, "Print JSON: the text and the byte ranges that are template markup");
  cmd->callback([opt] { run(*opt); });
}

}  // namespace ridge::cli
