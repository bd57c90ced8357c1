// Values of the Jinja interpreter that renders chat templates: Python's None, bool, int,
// float, str, list and dict, plus Jinja's Undefined and callables. Strings carry their
// provenance: which bytes the template wrote itself (markup, may become special tokens)
// and which came from the data it was given (content, always tokenized as text).
//
//   Str s = Str::markup("<|im_start|>");
//   s.append(Str::content("user text"));      // s.markup_ranges() == {[0, 12)}
//   Value v = parse_json(R"({"role": "user"})");  // keys and strings are content
//   std::string j = to_json(v, {});                // {"role": "user"} (Python json.dumps)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"  // TextRange

namespace ridge::jinja {

// No string a template builds may exceed this: a template doubling a string in a loop
// would otherwise take all the machine's memory (appending past it throws a Failure).
constexpr size_t kMaxStrBytes = size_t{256} << 20;

// Text plus the sorted, disjoint, non-adjacent byte ranges of it that are markup.
class Str {
 public:
  Str() = default;
  static Str markup(std::string text);
  static Str content(std::string text);

  const std::string& text() const { return text_; }
  const std::vector<TextRange>& markup_ranges() const { return markup_; }
  size_t size() const { return text_.size(); }
  bool empty() const { return text_.empty(); }
  bool all_markup() const;
  bool any_markup() const { return !markup_.empty(); }

  void append(const Str& other);
  void append_markup(std::string_view text);
  void append_content(std::string_view text);
  // Bytes [begin, end), keeping each byte's provenance.
  Str slice(size_t begin, size_t end) const;
  // The same provenance over new text of the same length (case mapping of ASCII).
  Str with_text(std::string text) const;

 private:
  void add_range(size_t begin, size_t end);
  void reserve_more(size_t n) const;
  std::string text_;
  std::vector<TextRange> markup_;
};

class Value;
struct CallArgs;
using List = std::vector<Value>;

// A dict keeps insertion order, as Python's does (tojson depends on it). Namespaces are
// dicts whose attributes a template may set ({% set ns.x = 1 %}).
struct Dict {
  std::vector<std::pair<Str, Value>> entries;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(Str key, Value value);
};

// A builtin or a macro. Builtins throw Failure; the interpreter adds the location.
struct Function {
  std::string name;
  bool is_macro = false;
  std::function<Value(CallArgs&)> call;
};

struct Undefined {
  std::string hint;  // "'x' is undefined", for the error when it is used
};
struct None {};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(Str s) : v_(std::move(s)) {}
  Value(List list) : v_(std::make_shared<List>(std::move(list))) {}
  Value(std::shared_ptr<List> list) : v_(std::move(list)) {}
  Value(std::shared_ptr<Dict> dict) : v_(std::move(dict)) {}
  Value(std::shared_ptr<const Function> f) : v_(std::move(f)) {}
  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value new_dict() { return Value(std::make_shared<Dict>()); }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_function() const { return kind() == Kind::kFunction; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;  // int or bool
  double as_double() const;  // int, float or bool
  const Str& as_str() const { return std::get<Str>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Dict& mutable_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const std::shared_ptr<Dict>& dict_ptr() const { return std::get<std::shared_ptr<Dict>>(v_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }

  // Python's truth value (Undefined is false).
  bool truthy() const;
  // Python's type name ("str", "dict", ...), for error messages.
  std::string_view type_name() const;

 private:
  std::variant<Undefined, None, bool, int64_t, double, Str, std::shared_ptr<List>, std::shared_ptr<Dict>,
               std::shared_ptr<const Function>>
      v_;
};

// What a builtin throws; the interpreter turns it into a TemplateError at the node that
// called the builtin. `raised` marks raise_exception().
struct Failure {
  std::string message;
  bool raised = false;
};
[[noreturn]] void fail(std::string message);

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, else `fallback`; fails on too many.
  Value get(size_t index, std::string_view name, Value fallback = Value()) const;
  void expect_at_most(size_t n_positional, std::string_view function) const;
};

// Python's str(): "None", "True", "1.5", "['a', 1]", "{'k': 'v'}". A string keeps its
// provenance; the text of anything else is markup only when every string in it is.
Str to_str(const Value& v);
// Whether every string in v (dict keys included) is all markup: the text a filter makes
// from v (tojson, join) is markup only then.
bool is_all_markup(const Value& v);
std::string python_repr(const Value& v);
std::string format_float(double d);  // Python's repr of a float

// Python ==, and < for sort and comparisons (fails on incomparable types).
bool equals(const Value& a, const Value& b);
bool less_than(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...), as
// transformers' tojson filter calls it. indent: nullopt for one line; a string is the
// indent unit itself (Python accepts both).
struct JsonOptions {
  std::optional<std::string> indent;
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// JSON text to a Value; strings (keys included) are content. Throws ridge::Error naming
// the byte offset on malformed JSON.
Value parse_json(std::string_view text);

}  // namespace ridge::jinja
