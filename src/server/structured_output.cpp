// response_format, grammar and forced tool calls -> a Grammar (see structured_output.h).
#include "server/structured_output.h"

#include <vector>

#include "grammar/json_schema.h"
#include "server/api_error.h"
#include "server/json_fields.h"

namespace ridge::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::shared_ptr<const grammar::Grammar> compile(const std::string& gbnf, const std::string& param) {
  try {
    return std::make_shared<const grammar::Grammar>(grammar::parse_gbnf(gbnf));
  } catch (const grammar::GrammarError& e) {
    throw ApiError(400, str_cat("Invalid '", param, "': ", e.what()), param, "invalid_value");
  }
}

std::string schema_gbnf(const std::string& schema_text, const std::string& param) {
  try {
    return grammar::json_schema_to_gbnf(schema_text);
  } catch (const grammar::SchemaError& e) {
    throw ApiError(400, str_cat("Invalid '", param, "': ", e.what()), param, "invalid_value");
  }
}

std::shared_ptr<const grammar::Grammar> response_format(std::string_view body_text, const json& format) {
  if (!format.is_object()) wrong_type("response_format", "an object", format);
  const json* type = field(format, "type");
  if (type == nullptr)
    throw ApiError(400, "Missing required parameter: 'response_format.type'.", "response_format.type",
                   "missing_required_parameter");
  const std::string t = get_string(*type, "response_format.type");
  if (t == "text") return nullptr;
  if (t == "json_object") return compile(grammar::json_object_gbnf(), "response_format");
  if (t != "json_schema")
    throw ApiError(400, str_cat("Invalid value for 'response_format.type': '", t,
                                "'; expected 'text', 'json_object' or 'json_schema'."),
                   "response_format.type", "invalid_value");
  const json* spec = field(format, "json_schema");
  if (spec == nullptr)
    throw ApiError(400, "Missing required parameter: 'response_format.json_schema'.", "response_format.json_schema",
                   "missing_required_parameter");
  if (!spec->is_object()) wrong_type("response_format.json_schema", "an object", *spec);
  const json* name = field(*spec, "name");
  if (name == nullptr)
    throw ApiError(400, "Missing required parameter: 'response_format.json_schema.name'.",
                   "response_format.json_schema.name", "missing_required_parameter");
  get_string(*name, "response_format.json_schema.name");
  if (const json* d = field(*spec, "description")) get_string(*d, "response_format.json_schema.description");
  if (const json* s = field(*spec, "strict")) get_bool(*s, "response_format.json_schema.strict");
  const json* schema = field(*spec, "schema");
  if (schema == nullptr) return compile(grammar::json_object_gbnf(), "response_format");  // OpenAI: any object
  if (!schema->is_object()) wrong_type("response_format.json_schema.schema", "an object (a JSON Schema)", *schema);
  // The schema's own text, key order kept: properties come out in the order it lists them.
  const std::string text = ordered_field(body_text, "response_format")["json_schema"]["schema"].dump();
  const std::string param = "response_format.json_schema.schema";
  return compile(schema_gbnf(text, param), param);
}

}  // namespace

std::shared_ptr<const grammar::Grammar> structured_output_grammar(std::string_view body_text, const json& body) {
  std::shared_ptr<const grammar::Grammar> from_format;
  if (const json* v = field(body, "response_format")) from_format = response_format(body_text, *v);
  const json* g = field(body, "grammar");
  if (g == nullptr) return from_format;
  const std::string text = get_string(*g, "grammar");
  if (from_format)
    throw ApiError(400, "Invalid 'grammar': give either 'grammar' or a 'response_format' other than text, not both.",
                   "grammar", "invalid_value");
  return compile(text, "grammar");
}

std::shared_ptr<const grammar::Grammar> tool_call_grammar(const std::string& tools_json, const std::string& only,
                                                          bool several) {
  const ordered_json tools = ordered_json::parse(tools_json);
  std::vector<grammar::NamedSchema> schemas;
  std::string calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& function = tools[i]["function"];
    const std::string name = function["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    const std::string args = str_cat("args_", i);
    const std::string label = str_cat("tools[", i, "].function.parameters");
    const bool has_schema = function.contains("parameters") && !function["parameters"].is_null();
    schemas.push_back({args, has_schema ? function["parameters"].dump() : R"({"type": "object"})", label});
    // The model writes the call as its template taught it: the name first, then the arguments.
    const std::string head = str_cat("<tool_call>\n{\"name\": ", ordered_json(name).dump(), ", \"arguments\": ");
    calls += str_cat(calls.empty() ? "" : " | ", grammar::gbnf_literal(head), " ", args, " ",
                     grammar::gbnf_literal("}\n</tool_call>"));
  }
  if (schemas.empty())
    throw ApiError(400, str_cat("Invalid value for 'tool_choice': no function named '", only, "' among 'tools'."),
                   "tool_choice", "invalid_value");
  std::string rules;
  try {
    rules = grammar::json_schema_rules(schemas);
  } catch (const grammar::SchemaError& e) {
    throw ApiError(400, str_cat("Invalid 'tools': ", e.what()), "tools", "invalid_value");
  }
  const std::string gbnf =
      str_cat("root ::= call_any", several ? " (\"\\n\" call_any)*" : "", "\ncall_any ::= ", calls, "\n", rules);
  return compile(gbnf, "tools");
}

}  // namespace ridge::server
