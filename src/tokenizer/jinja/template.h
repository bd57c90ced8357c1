// A Jinja2 interpreter for the subset chat templates use, rendering as Python's jinja2
// does under Hugging Face's apply_chat_template (ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, loop controls, raise_exception, strftime_now, and a
// tojson that is json.dumps without HTML escaping). Output keeps provenance: the bytes
// the template wrote itself are markup, those that came from the variables are content.
//
//   jinja::Template t = jinja::Template::parse(source, "tokenizer.chat_template");
//   auto vars = std::make_shared<jinja::Dict>();
//   vars->set(jinja::Str::markup("messages"), jinja::parse_json(R"([{"role":"user","content":"Hi"}])"));
//   jinja::Str out = t.render(*vars);   // out.text(), out.markup_ranges()
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace ridge::jinja {

// A syntax error, a failed operation while rendering, or the template's own
// raise_exception(); the message names the template, line and column.
class TemplateError : public Error {
 public:
  enum class Kind { kSyntax, kRender, kRaised };
  TemplateError(Kind kind, std::string_view template_name, Location where, std::string_view detail);
  Kind kind() const { return kind_; }
  Location where() const { return where_; }
  const std::string& detail() const { return detail_; }

 private:
  Kind kind_;
  Location where_;
  std::string detail_;
};

class Template {
 public:
  // Throws TemplateError (kSyntax).
  static Template parse(std::string_view source, std::string name = "template");

  // Renders with these variables (and the builtin globals: range, namespace, dict,
  // raise_exception, strftime_now). Throws TemplateError (kRender, kRaised).
  Str render(const Dict& variables) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const Body> body_;
};

}  // namespace ridge::jinja
