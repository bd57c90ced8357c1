// What templates can call: filters (x | trim), tests (x is string), methods of str, dict
// and list (x.strip()), attribute and item access with Jinja2's rules, and the globals
// Hugging Face provides (range, namespace, dict, raise_exception, strftime_now). Each
// follows Python's behaviour where chat templates can see it; failures throw Failure.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace ridge::jinja {

// object.name: a method of a str, dict or list first, then a dict key; Undefined when
// neither (Jinja2's getattr). object[key]: the item first, then the attribute.
Value get_attribute(const Value& object, std::string_view name);
Value get_item(const Value& object, const Value& key);
// object[start:stop:step] of a str or list, Python's rules (negative indices, clamping).
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);
// The items a for loop visits: a list's items, a dict's keys, a string's characters.
List iterate(const Value& v);

// Whether a filter or test of this name exists (Jinja2 checks at compile time).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Value apply_filter(std::string_view name, const Value& value, const CallArgs& args);
bool apply_test(std::string_view name, const Value& value, const CallArgs& args);
// A global function by name, or Undefined.
Value global_function(std::string_view name);

// Methods of str (in builtins_string.cpp); Undefined when `name` is none of them.
Value string_method(const Value& object, std::string_view name);
// Filters on strings: trim, upper, lower, capitalize, title, replace, indent, escape;
// false when `name` is none of them.
bool string_filter(std::string_view name, const Value& value, const CallArgs& args, Value& result);
// Number of code points, and the byte offset of each (plus the end).
std::vector<size_t> code_point_offsets(std::string_view s);

// Undefined used as a value: fails with the name it was looked up by.
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace ridge::jinja
