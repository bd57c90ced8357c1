#include "server/json_fields.h"

#include <cmath>
#include <limits>
#include <vector>

#include "server/api_error.h"

namespace ridge::server {

using nlohmann::json;

namespace {

// Bodies nested deeper than this are refused while parsing: what reads them later (the
// schema converter, dump(), the chat template) recurses once per level.
constexpr int kMaxBodyDepth = 256;

// Objects in the fields read again keeping their key order (tools, response_format) hold at
// most this many keys: nlohmann's ordered_json inserts by linear search, so a 5 MB schema of
// one object with 200000 properties would cost minutes of CPU.
constexpr size_t kMaxOrderedKeys = 1000;

struct TooDeep {};
struct TooManyKeys {
  std::string field;
};

bool keeps_key_order(const std::string& top_level_key) {
  return top_level_key == "tools" || top_level_key == "response_format";
}

}  // namespace

json parse_json_body(std::string_view body_text) {
  json body;
  std::string last_key;
  try {
    // The last key read names the field when a number overflows a double (1e400).
    std::string top_key;
    std::vector<size_t> keys;  // per open object, the keys read so far
    body = json::parse(body_text, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth > kMaxBodyDepth) throw TooDeep{};
      if (event == json::parse_event_t::object_start) keys.push_back(0);
      if (event == json::parse_event_t::object_end) keys.pop_back();
      if (event == json::parse_event_t::key) {
        last_key = parsed.get<std::string>();
        if (depth == 1) top_key = last_key;
        if (++keys.back() > kMaxOrderedKeys && depth > 1 && keeps_key_order(top_key)) throw TooManyKeys{top_key};
      }
      return true;
    });
  } catch (const TooManyKeys& e) {
    throw ApiError(400, str_cat("Invalid '", e.field, "': objects with more than ", kMaxOrderedKeys,
                                " keys are not supported."),
                   e.field, "invalid_value");
  } catch (const TooDeep&) {
    throw ApiError(400, str_cat("Invalid JSON body: values nested deeper than ", kMaxBodyDepth,
                                " levels (inside '", last_key, "') are not supported."),
                   last_key, "invalid_value");
  } catch (const json::parse_error& e) {
    throw ApiError(400, str_cat("We could not parse the JSON body of your request: ", e.what()), "", "invalid_json");
  } catch (const json::exception& e) {
    throw ApiError(400, str_cat("Invalid '", last_key, "': the number is out of range (", e.what(), ")."), last_key,
                   "invalid_value");
  }
  if (!body.is_object()) wrong_type("body", "a JSON object", body);
  return body;
}

nlohmann::ordered_json ordered_field(std::string_view body_text, const std::string& name) {
  // Every other top-level field is discarded unread into the ordered form.
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(
      body_text, [&name](int depth, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json& parsed) {
        return !(depth == 1 && event == nlohmann::ordered_json::parse_event_t::key && parsed.get<std::string>() != name);
      });
  return body[name];
}

const char* json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const json& got) {
  throw ApiError(400, str_cat("Invalid type for '", field, "': expected ", expected, ", but got ", json_type_name(got),
                              " instead."),
                 field, "invalid_type");
}

[[noreturn]] void out_of_range(const std::string& field, const std::string& expected, double got) {
  throw ApiError(400, str_cat("Invalid '", field, "': expected ", expected, ", but got ", got, " instead."), field,
                 "invalid_value");
}

[[noreturn]] void unsupported(const std::string& field, const std::string& why) {
  throw ApiError(400, str_cat("Unsupported parameter '", field, "': ", why), field, "unsupported_parameter");
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double get_number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) wrong_type(name, "a number", v);
  double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) out_of_range(name, str_cat("a value in [", lo, ", ", hi, "]"), x);
  return x;
}

int64_t get_integer(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  bool integral = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                           std::floor(v.get<double>()) == v.get<double>());
  if (!integral) wrong_type(name, "an integer", v);
  double x = v.get<double>();
  if (x < static_cast<double>(lo) || x > static_cast<double>(hi)) {
    if (x < static_cast<double>(lo))
      throw ApiError(400, str_cat("Invalid '", name, "': integer below minimum value. Expected a value >= ", lo,
                                  ", but got ", v.dump(), " instead."),
                     name, "integer_below_min_value");
    throw ApiError(400, str_cat("Invalid '", name, "': integer above maximum value. Expected a value <= ", hi,
                                ", but got ", v.dump(), " instead."),
                   name, "integer_above_max_value");
  }
  return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
}

bool get_bool(const json& v, const std::string& name) {
  if (!v.is_boolean()) wrong_type(name, "a boolean", v);
  return v.get<bool>();
}

std::string get_string(const json& v, const std::string& name) {
  if (!v.is_string()) wrong_type(name, "a string", v);
  return v.get<std::string>();
}

std::vector<int32_t> get_token_ids(const json& v, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    ids.push_back(static_cast<int32_t>(
        get_integer(v[i], str_cat(name, "[", i, "]"), 0, std::numeric_limits<int32_t>::max())));
  return ids;
}

bool is_token_array(const json& v) { return v.is_array() && !v.empty() && v[0].is_number(); }

}  // namespace ridge::server
