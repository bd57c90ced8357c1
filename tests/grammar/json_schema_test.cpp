// JSON Schema -> GBNF: instances the schema accepts are complete sentences of the grammar,
// instances it rejects are not, and unsupported keywords are refused by name and path.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace ridge::grammar {
namespace {

bool accepts_text(const std::string& gbnf, const std::string& text) {
  Automaton a(std::make_shared<const Grammar>(parse_gbnf(gbnf)));
  const int32_t s = a.step(a.start(), text);
  return s != Automaton::kDead && a.complete(s);
}

bool schema_accepts(const std::string& schema, const std::string& text) {
  return accepts_text(json_schema_to_gbnf(schema), text);
}

std::string schema_error(const std::string& schema) {
  try {
    json_schema_to_gbnf(schema);
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, Primitives) {
  EXPECT_TRUE(schema_accepts(R"({"type": "string"})", R"("a \"quoted\" \u00e9 word")"));
  EXPECT_FALSE(schema_accepts(R"({"type": "string"})", "\"raw\nnewline\""));
  EXPECT_TRUE(schema_accepts(R"({"type": "integer"})", "-42"));
  EXPECT_FALSE(schema_accepts(R"({"type": "integer"})", "4.2"));
  EXPECT_FALSE(schema_accepts(R"({"type": "integer"})", "007"));
  EXPECT_TRUE(schema_accepts(R"({"type": "number"})", "-0.5e10"));
  EXPECT_TRUE(schema_accepts(R"({"type": "boolean"})", "false"));
  EXPECT_TRUE(schema_accepts(R"({"type": ["string", "null"]})", "null"));
  EXPECT_FALSE(schema_accepts(R"({"type": ["string", "null"]})", "1"));
}

TEST(JsonSchema, ObjectsKeepPropertyOrderAndRequireWhatIsRequired) {
  const std::string s = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                            "required": ["name", "age"], "additionalProperties": false})";
  EXPECT_TRUE(schema_accepts(s, R"({"name": "Ada", "age": 36})"));
  EXPECT_TRUE(schema_accepts(s, "{\n  \"name\":\"Ada\",\n  \"age\": 36\n}"));
  EXPECT_FALSE(schema_accepts(s, R"({"name": "Ada"})"));
  EXPECT_FALSE(schema_accepts(s, R"({"age": 36, "name": "Ada"})"));
  EXPECT_FALSE(schema_accepts(s, R"({"name": "Ada", "age": 36, "x": 1})"));
}

TEST(JsonSchema, OptionalPropertiesMayBeLeftOut) {
  const std::string s = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                            "c": {"type": "integer"}}, "required": ["b"]})";
  EXPECT_TRUE(schema_accepts(s, R"({"b": 1})"));
  EXPECT_TRUE(schema_accepts(s, R"({"b": 1, "a": 2, "c": 3})"));
  EXPECT_TRUE(schema_accepts(s, R"({"b": 1, "c": 3})"));
  EXPECT_FALSE(schema_accepts(s, R"({"a": 2})"));
  const std::string none = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}})";
  EXPECT_TRUE(schema_accepts(none, "{}"));
  EXPECT_TRUE(schema_accepts(none, R"({"b": 2})"));
  EXPECT_TRUE(schema_accepts(none, R"({"a": 1, "b": 2})"));
  EXPECT_FALSE(schema_accepts(none, R"({"b": 2, "a": 1})"));
}

TEST(JsonSchema, ArraysEnumsConstAnyOf) {
  const std::string s = R"({"type": "array", "items": {"enum": ["red", "green", 3]}, "minItems": 1, "maxItems": 3})";
  EXPECT_TRUE(schema_accepts(s, R"(["red"])"));
  EXPECT_TRUE(schema_accepts(s, R"(["red", 3, "green"])"));
  EXPECT_FALSE(schema_accepts(s, "[]"));
  EXPECT_FALSE(schema_accepts(s, R"(["red", 3, "green", "red"])"));
  EXPECT_FALSE(schema_accepts(s, R"(["blue"])"));
  EXPECT_TRUE(schema_accepts(R"({"const": {"k": [1, true]}})", R"({"k":[1,true]})"));
  const std::string any = R"({"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"x": {"type": "string"}},
                             "required": ["x"]}]})";
  EXPECT_TRUE(schema_accepts(any, "12"));
  EXPECT_TRUE(schema_accepts(any, R"({"x": "y"})"));
  EXPECT_FALSE(schema_accepts(any, R"("y")"));
}

TEST(JsonSchema, StringLengths) {
  const std::string s = R"({"type": "string", "minLength": 2, "maxLength": 3})";
  EXPECT_FALSE(schema_accepts(s, R"("a")"));
  EXPECT_TRUE(schema_accepts(s, R"("ab")"));
  EXPECT_TRUE(schema_accepts(s, R"("a\nb")"));  // an escape is one character
  EXPECT_FALSE(schema_accepts(s, R"("abcd")"));
}

TEST(JsonSchema, RecursiveRefsAndDefs) {
  const std::string s = R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value", "children"],
      "additionalProperties": false}}, "$ref": "#/$defs/node"})";
  EXPECT_TRUE(schema_accepts(s, R"({"value": 1, "children": [{"value": 2, "children": []}]})"));
  EXPECT_FALSE(schema_accepts(s, R"({"value": 1, "children": [{"value": 2}]})"));
}

TEST(JsonSchema, MapsThroughAdditionalProperties) {
  const std::string s = R"({"type": "object", "additionalProperties": {"type": "number"}})";
  EXPECT_TRUE(schema_accepts(s, R"({"a": 1, "b": 2.5})"));
  EXPECT_FALSE(schema_accepts(s, R"({"a": "x"})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamedWithTheirPath) {
  EXPECT_NE(schema_error(R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}})")
                .find("#/properties/age/minimum: the keyword 'minimum' is not supported"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "string", "pattern": "^a"})").find("#/pattern"), std::string::npos);
  EXPECT_NE(schema_error(R"({"$ref": "#/$defs/missing"})").find("does not name a schema"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(schema_error("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})")
                .find("'b' is required but not among the properties"),
            std::string::npos);
}

TEST(JsonSchema, SchemasNestedTooDeeplyAreRefusedNotACrash) {
  // A $ref chain: each hop is one level of the converter's recursion (20000 overflowed the
  // server's stack; the request body caps how many a client can send).
  const int n = 2000;
  std::string defs;
  for (int i = 0; i < n; ++i) defs += "\"d" + std::to_string(i) + "\": {\"$ref\": \"#/$defs/d" + std::to_string(i + 1) + "\"}, ";
  defs += "\"d" + std::to_string(n) + "\": {\"type\": \"string\"}";
  const std::string e = schema_error(R"({"$ref": "#/$defs/d0", "$defs": {)" + defs + "}}");
  EXPECT_NE(e.find("schemas nested deeper than 64 levels"), std::string::npos) << e.substr(0, 300);
  // Nesting through items.
  std::string items = R"({"type": "string"})";
  for (int i = 0; i < 70; ++i) items = R"({"type": "array", "items": )" + items + "}";
  EXPECT_NE(schema_error(items).find("#/items/items/items"), std::string::npos);
  // What real schemas do is well inside the bound.
  std::string ok = R"({"type": "string"})";
  for (int i = 0; i < 20; ++i) ok = R"({"type": "array", "items": )" + ok + "}";
  EXPECT_TRUE(schema_accepts(ok, std::string(20, '[') + "\"x\"" + std::string(20, ']')));
}

TEST(JsonObject, AnyObjectAndNothingElse) {
  const std::string g = json_object_gbnf();
  EXPECT_TRUE(accepts_text(g, R"({"a": [1, {"b": null}, "c"], "d": -1.5e3, "e": true})"));
  EXPECT_TRUE(accepts_text(g, "{}"));
  EXPECT_FALSE(accepts_text(g, "[1]"));
  EXPECT_FALSE(accepts_text(g, R"({"a": 1,})"));
}

}  // namespace
}  // namespace ridge::grammar
