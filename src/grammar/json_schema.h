// JSON Schema -> GBNF: the grammar of the JSON texts a schema accepts, for structured output
// (response_format json_schema) and forced tool calls (a tool's parameters).
//
//   std::string gbnf = json_schema_to_gbnf(R"({"type": "object", "properties": {...}})");
//   Grammar g = parse_gbnf(gbnf);
//   std::string any = json_object_gbnf();     // response_format json_object: any JSON object
//
// The subset (OpenAI's strict mode documents it): type (one or a list of "object", "array",
// "string", "number", "integer", "boolean", "null"); properties, required,
// additionalProperties (false, true, or a schema for the values of a map); items,
// minItems, maxItems, prefixItems; enum, const; anyOf (and oneOf, allOf of one schema);
// $ref to "#", "#/$defs/..." or "#/definitions/..." (recursive ones too); string
// minLength and maxLength; annotations (title, description, default, examples, $schema,
// $id, $comment, strict). Properties come out in the order the schema lists them; optional
// ones (absent from required) may be left out. Anything else - pattern, format, minimum,
// maximum, ... - is refused with SchemaError naming the keyword and its path
// ("#/properties/age/minimum"), rather than generating output the schema would reject.
// Whitespace between tokens is bounded (at most one or two newlines and 20 indent
// characters) and numbers have at most 16 integer and 16 fraction digits, so a grammar never
// lets a model run on forever inside one value.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ridge::grammar {

class SchemaError : public Error {
 public:
  using Error::Error;
};

// schema: the JSON text of the schema (object key order is kept). Throws SchemaError.
std::string json_schema_to_gbnf(std::string_view schema);

// Several schemas in one grammar (a tool call's arguments, one per tool): rule `rule` matches
// the instances of `schema`; helper rules are shared, never named `rule` of another entry
// and never contain '_' (free for the caller's own rules). No root rule is added. label
// prefixes the paths in errors ("tools[1].function.parameters#/properties/x/format").
struct NamedSchema {
  std::string rule;
  std::string schema;
  std::string label;
};
std::string json_schema_rules(const std::vector<NamedSchema>& schemas);

// Any JSON object (whitespace bounded as above).
std::string json_object_gbnf();

}  // namespace ridge::grammar
