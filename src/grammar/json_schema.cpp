// JSON Schema -> GBNF (see json_schema.h): one rule per schema node, shared primitive rules,
// $ref targets as rules of their own (so recursive schemas stay finite).
#include "grammar/json_schema.h"

#include <cctype>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace ridge::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// The primitives; each is emitted once, when first used, with the rules it needs.
const std::map<std::string, std::pair<std::string, std::vector<std::string>>>& primitives() {
  static const std::map<std::string, std::pair<std::string, std::vector<std::string>>> p = {
      {"space", {R"(| " " | "\n"{1,2} [ \t]{0,20})", {}}},
      {"char", {R"([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))", {}}},
      {"string", {R"("\"" char* "\"" space)", {"char", "space"}}},
      {"integral", {R"("-"? ([0-9] | [1-9] [0-9]{1,15}))", {}}},
      {"number", {R"(integral ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? space)", {"integral", "space"}}},
      {"integer", {R"(integral space)", {"integral", "space"}}},
      {"boolean", {R"(("true" | "false") space)", {"space"}}},
      {"null", {R"("null" space)", {"space"}}},
      {"value", {R"(object | array | string | number | boolean | null)",
                 {"object", "array", "string", "number", "boolean", "null"}}},
      {"object", {R"("{" space (string ":" space value ("," space string ":" space value)*)? "}" space)",
                  {"string", "space", "value"}}},
      {"array", {R"("[" space (value ("," space value)*)? "]" space)", {"space", "value"}}},
  };
  return p;
}

// Schemas nested (directly or through $ref) deeper than this are refused: the converter
// recurses once per level, and no real schema comes near it.
constexpr int kMaxSchemaDepth = 64;

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema",
                                            "$id", "$comment", "strict", "$defs", "definitions"};
const std::set<std::string> kKeywords = {"type", "properties", "required", "additionalProperties", "items",
                                         "minItems", "maxItems", "enum", "const", "anyOf", "allOf",
                                         "$ref", "minLength", "maxLength"};

class Converter {
 public:
  explicit Converter(const std::vector<NamedSchema>& schemas) {
    for (const NamedSchema& s : schemas) names_.insert(s.rule);
  }

  void add(const NamedSchema& s) {
    try {
      root_ = ojson::parse(s.schema);
    } catch (const ojson::exception& e) {
      throw SchemaError(str_cat("json schema: ", s.label, s.label.empty() ? "" : ": ", "not valid JSON: ", e.what()));
    }
    label_ = s.label;
    refs_.clear();
    const std::string top = visit(root_, "#", s.rule + "-value");
    out_ += str_cat(s.rule, " ::= ", top, "\n");
  }

  const std::string& text() const { return out_; }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw SchemaError(str_cat("json schema: ", label_, path, ": ", what));
  }

  std::string primitive(const std::string& name) {
    if (emitted_primitives_.insert(name).second) {
      const auto& [body, needs] = primitives().at(name);
      out_ += str_cat(name, " ::= ", body, "\n");
      for (const std::string& n : needs) primitive(n);
    }
    return name;
  }

  std::string rule(const std::string& hint, const std::string& body) {
    const std::string name = fresh(hint);
    out_ += str_cat(name, " ::= ", body, "\n");
    return name;
  }

  std::string fresh(const std::string& hint) {
    std::string base;
    for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) != 0) ? c : '-';
    if (base.empty()) base = "v";
    std::string name = base;
    for (int i = 2; primitives().count(name) != 0 || !names_.insert(name).second; ++i) name = str_cat(base, "-", i);
    return name;
  }

  std::string literal(const ojson& value) { return str_cat(gbnf_literal(value.dump()), " ", primitive("space")); }

  int64_t count(const ojson& s, const char* key, const std::string& path) {
    const ojson& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(str_cat(path, "/", key), "expected a non-negative integer");
    if (v.get<int64_t>() > 10000) fail(str_cat(path, "/", key), "values above 10000 are not supported");
    return v.get<int64_t>();
  }

  // The rule matching instances of schema s (at JSON pointer path).
  std::string visit(const ojson& s, const std::string& path, const std::string& hint) {
    struct Level {
      int& depth;
      explicit Level(int& d) : depth(++d) {}
      ~Level() { --depth; }
    } level(depth_);
    if (depth_ > kMaxSchemaDepth) fail(path, str_cat("schemas nested deeper than ", kMaxSchemaDepth, " levels (counting $ref)"));
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema false accepts nothing");
      return primitive("value");
    }
    if (!s.is_object()) fail(path, str_cat("expected a schema (an object), got ", s.type_name()));
    for (const auto& [key, v] : s.items())
      if (kAnnotations.count(key) == 0 && kKeywords.count(key) == 0)
        fail(str_cat(path, "/", key), str_cat("the keyword '", key, "' is not supported"));
    if (s.contains("$ref")) return ref(s["$ref"], path + "/$ref");
    if (s.contains("const")) return rule(hint, literal(s["const"]));
    if (s.contains("enum")) {
      const ojson& e = s["enum"];
      if (!e.is_array() || e.empty()) fail(path + "/enum", "expected a non-empty array");
      std::string body;
      for (const ojson& v : e) body += str_cat(body.empty() ? "" : " | ", literal(v));
      return rule(hint, body);
    }
    if (s.contains("anyOf") || s.contains("allOf")) {
      const char* key = s.contains("anyOf") ? "anyOf" : "allOf";
      const ojson& list = s[key];
      if (!list.is_array() || list.empty()) fail(str_cat(path, "/", key), "expected a non-empty array");
      if (std::string(key) == "allOf" && list.size() != 1)
        fail(path + "/allOf", "only allOf with a single schema is supported");
      std::string body;
      for (size_t i = 0; i < list.size(); ++i)
        body += str_cat(i == 0 ? "" : " | ", visit(list[i], str_cat(path, "/", key, "/", i), str_cat(hint, "-", i)));
      return rule(hint, body);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const ojson& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const ojson& x : t) {
          if (!x.is_string()) fail(path + "/type", "expected type names");
          types.push_back(x.get<std::string>());
        }
      } else {
        fail(path + "/type", "expected a type name or an array of them");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else {
      return primitive("value");
    }
    std::string body;
    for (const std::string& t : types) body += str_cat(body.empty() ? "" : " | ", typed(s, t, path, hint));
    return rule(hint, body);
  }

  std::string typed(const ojson& s, const std::string& type, const std::string& path, const std::string& hint) {
    if (type == "object") return object(s, path, hint);
    if (type == "array") return array(s, path, hint);
    if (type == "string") {
      if (!s.contains("minLength") && !s.contains("maxLength")) return primitive("string");
      const int64_t min = s.contains("minLength") ? count(s, "minLength", path) : 0;
      primitive("char");
      const std::string max = s.contains("maxLength") ? str_cat(count(s, "maxLength", path)) : "";
      return str_cat(R"("\"" char{)", min, ",", max, R"(} "\"" )", primitive("space"));
    }
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return primitive(type);
    fail(path + "/type", str_cat("unknown type '", type, "'"));
  }

  std::string object(const ojson& s, const std::string& path, const std::string& hint) {
    const std::string sp = primitive("space");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path + "/required", "expected an array of property names");
      for (const ojson& r : s["required"]) {
        if (!r.is_string()) fail(path + "/required", "expected an array of property names");
        required.insert(r.get<std::string>());
      }
    }
    const ojson props = s.contains("properties") ? s["properties"] : ojson::object();
    if (!props.is_object()) fail(path + "/properties", "expected an object");
    for (const std::string& r : required)
      if (!props.contains(r)) fail(path + "/required", str_cat("'", r, "' is required but not among the properties"));
    if (props.empty()) {
      // No named properties: a map whose values follow additionalProperties (any, if absent).
      const ojson extra = s.contains("additionalProperties") ? s["additionalProperties"] : ojson(true);
      if (extra.is_boolean() && !extra.get<bool>()) return str_cat(R"("{" )", sp, R"( "}" )", sp);
      const std::string v = visit(extra, path + "/additionalProperties", hint + "-value");
      const std::string key = primitive("string");
      return str_cat(R"("{" )", sp, " (", key, R"( ":" )", sp, " ", v, R"( ("," )", sp, " ", key, R"( ":" )", sp,
                     " ", v, R"()*)? "}" )", sp);
    }
    if (s.contains("additionalProperties")) {
      const ojson& extra = s["additionalProperties"];
      if (!extra.is_boolean() && !extra.is_object()) fail(path + "/additionalProperties", "expected a boolean or a schema");
    }
    std::vector<std::string> must, may;  // key-value rules
    for (const auto& [key, schema] : props.items()) {
      const std::string v = visit(schema, str_cat(path, "/properties/", key), str_cat(hint, "-", key));
      const std::string kv = rule(str_cat(hint, "-", key, "-kv"),
                                  str_cat(gbnf_literal(ojson(key).dump()), " ", sp, R"( ":" )", sp, " ", v));
      (required.count(key) != 0 ? must : may).push_back(kv);
    }
    std::string body = str_cat(R"("{" )", sp);
    auto tail = [&](size_t from) {
      std::string t;
      for (size_t i = from; i < may.size(); ++i) t += str_cat(R"( ("," )", sp, " ", may[i], ")?");
      return t;
    };
    if (!must.empty()) {
      for (size_t i = 0; i < must.size(); ++i) body += str_cat(i == 0 ? " " : R"( "," )", i == 0 ? "" : sp + " ", must[i]);
      body += tail(0);
    } else {
      std::string alts;
      for (size_t i = 0; i < may.size(); ++i) alts += str_cat(i == 0 ? "" : " | ", may[i], tail(i + 1));
      body += str_cat(" (", alts, ")?");
    }
    return body + str_cat(R"( "}" )", sp);
  }

  std::string array(const ojson& s, const std::string& path, const std::string& hint) {
    const std::string sp = primitive("space");
    const std::string item = s.contains("items") ? visit(s["items"], path + "/items", hint + "-item") : primitive("value");
    const int64_t min = s.contains("minItems") ? count(s, "minItems", path) : 0;
    const int64_t max = s.contains("maxItems") ? count(s, "maxItems", path) : -1;
    if (max >= 0 && max < min) fail(path + "/maxItems", "maxItems is below minItems");
    const std::string open = str_cat(R"("[" )", sp, " "), close = str_cat(R"( "]" )", sp);
    if (max == 0) return open + close;
    const std::string more = str_cat(R"(("," )", sp, " ", item, ")");
    const std::string upper = max < 0 ? "" : str_cat(max - 1);
    if (min == 0) return str_cat(open, "(", item, " ", more, "{0,", upper, "})?", close);
    return str_cat(open, item, " ", more, "{", min - 1, ",", upper, "}", close);
  }

  std::string ref(const ojson& target, const std::string& path) {
    if (!target.is_string()) fail(path, "expected a string");
    const std::string r = target.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    const ojson* s = nullptr;
    std::string name = "root-ref";
    if (r == "#") {
      s = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        if (r.rfind(prefix, 0) != 0) continue;
        const std::string key = r.substr(std::string(prefix).size());
        const std::string defs = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        if (root_.contains(defs) && root_[defs].is_object() && root_[defs].contains(key)) {
          s = &root_[defs][key];
          name = key;
        }
      }
    }
    if (s == nullptr) fail(path, str_cat("'", r, "' does not name a schema in #/$defs or #/definitions"));
    // Named before it is visited: a recursive reference finds the name and stops.
    const std::string rule_name = fresh(name);
    refs_[r] = rule_name;
    const std::string body = visit(*s, r, name + "-body");
    out_ += str_cat(rule_name, " ::= ", body, "\n");
    return rule_name;
  }

  ojson root_;
  std::string label_;
  std::string out_;
  std::set<std::string> names_, emitted_primitives_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

std::string json_schema_rules(const std::vector<NamedSchema>& schemas) {
  Converter c(schemas);
  for (const NamedSchema& s : schemas) c.add(s);
  return c.text();
}

std::string json_schema_to_gbnf(std::string_view schema) {
  return json_schema_rules({NamedSchema{"root", std::string(schema), ""}});
}

std::string json_object_gbnf() {
  std::string out = "root ::= object\n";
  for (const char* name : {"object", "value", "array", "string", "number", "integral", "boolean", "null", "char", "space"})
    out += str_cat(name, " ::= ", primitives().at(name).first, "\n");
  return out;
}

}  // namespace ridge::grammar
