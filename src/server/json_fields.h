// Reading fields of a JSON request body the way OpenAI's API does: a field that is null
// counts as absent, and a wrong type or a value out of range is an ApiError(400) naming
// the field (OpenAI's `param`) and a code (invalid_type, invalid_value, ...). Shared by
// every endpoint's parser.
//
//   const json* t = field(body, "temperature");
//   double temperature = t ? get_number(*t, "temperature", 0, 2) : 1.0;
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ridge::server {

// A request body: a JSON object, or ApiError(400) (invalid_json; a number too large
// for a double names the field it was in).
nlohmann::json parse_json_body(std::string_view body_text);

// The top-level field `name` of a body parse_json_body accepted, parsed again keeping the
// client's key order (what chat templates and JSON schemas must see).
nlohmann::ordered_json ordered_field(std::string_view body_text, const std::string& name);

// "a string", "an integer", ...: what a value is, for error messages.
const char* json_type_name(const nlohmann::json& v);

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const nlohmann::json& got);
[[noreturn]] void out_of_range(const std::string& field, const std::string& expected, double got);
[[noreturn]] void unsupported(const std::string& field, const std::string& why);

// A field that is present and not null (OpenAI's clients send null for "not given").
const nlohmann::json* field(const nlohmann::json& body, const char* name);

double get_number(const nlohmann::json& v, const std::string& name, double lo, double hi);
// 3.0 is accepted as 3 (JavaScript clients cannot tell them apart); 3.5 is not.
int64_t get_integer(const nlohmann::json& v, const std::string& name, int64_t lo, int64_t hi);
bool get_bool(const nlohmann::json& v, const std::string& name);
std::string get_string(const nlohmann::json& v, const std::string& name);
// An array of non-negative integers; element i is named "name[i]" in errors.
std::vector<int32_t> get_token_ids(const nlohmann::json& v, const std::string& name);
// A non-empty array whose first element is a number: token ids, not a list of texts.
bool is_token_array(const nlohmann::json& v);

}  // namespace ridge::server
