#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <memory>

namespace ridge::jinja {
namespace {

// Jinja2's sandbox refuses larger ranges; so do we, for the same reason.
constexpr int64_t kMaxRange = 100000;

Value make_function(std::string name, std::function<Value(CallArgs&)> call) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->call = std::move(call);
  return Value(std::shared_ptr<const Function>(std::move(f)));
}

int64_t int_arg(const Value& v, std::string_view what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int() && !v.is_bool()) fail(str_cat(what, " must be an integer, not '", v.type_name(), "'"));
  return v.as_int();
}

// Python's index normalization: negative counts from the end; out of range is nullopt.
std::optional<size_t> normalize_index(int64_t i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(i);
}

Value dict_method(const Value& object, std::string_view name) {
  const Value self = object;
  if (name == "items")
    return make_function("items", [self](CallArgs&) {
      List out;
      for (const auto& [k, v] : self.as_dict().entries) out.emplace_back(List{Value(k), v});
      return Value(std::move(out));
    });
  if (name == "keys")
    return make_function("keys", [self](CallArgs&) {
      List out;
      for (const auto& [k, v] : self.as_dict().entries) out.emplace_back(k);
      return Value(std::move(out));
    });
  if (name == "values")
    return make_function("values", [self](CallArgs&) {
      List out;
      for (const auto& [k, v] : self.as_dict().entries) out.push_back(v);
      return Value(std::move(out));
    });
  if (name == "get")
    return make_function("get", [self](CallArgs& a) {
      a.expect_at_most(2, "get");
      const Value key = a.get(0, "key");
      const Value* v = key.is_string() ? self.as_dict().find(key.as_str().text()) : nullptr;
      return v != nullptr ? *v : a.get(1, "default", Value(None{}));
    });
  return Value();
}

// Python's sorted() key for the sort/unique/min/max filters: case-insensitive strings
// unless case_sensitive.
Value sort_key(const Value& v, const Value& attribute, bool case_sensitive) {
  Value key = v;
  if (attribute.is_string()) {
    for (size_t p = 0, e; p <= attribute.as_str().text().size(); p = e + 1) {
      const std::string& path = attribute.as_str().text();
      e = path.find('.', p);
      if (e == std::string::npos) e = path.size();
      key = get_item(key, Value(Str::markup(path.substr(p, e - p))));
    }
  }
  if (!case_sensitive && key.is_string()) {
    std::string lower = key.as_str().text();
    for (char& c : lower)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return Value(Str::content(std::move(lower)));
  }
  return key;
}

// Arguments after the first of select/reject/selectattr/rejectattr: a test name and its
// arguments. No test name: truthiness.
bool passes(const Value& v, const CallArgs& args, size_t first) {
  if (args.positional.size() <= first) return v.truthy();
  const Value& test = args.positional[first];
  if (!test.is_string()) fail("a test name must be a string");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1, args.positional.end());
  return apply_test(test.as_str().text(), v, rest);
}

Value select_filter(std::string_view name, const Value& value, const CallArgs& args) {
  const bool by_attribute = name == "selectattr" || name == "rejectattr";
  const bool keep_passing = name == "select" || name == "selectattr";
  List out;
  for (const Value& item : iterate(value)) {
    Value subject = item;
    if (by_attribute) {
      if (args.positional.empty()) fail(str_cat(name, " needs an attribute name"));
      subject = sort_key(item, args.positional[0], true);
    }
    if (passes(subject, args, by_attribute ? 1 : 0) == keep_passing) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map_filter(const Value& value, const CallArgs& args) {
  List out;
  const Value attribute = args.get(99, "attribute");
  for (const Value& item : iterate(value)) {
    if (!attribute.is_undefined()) {
      Value v = sort_key(item, attribute, true);
      if (v.is_undefined()) v = args.get(99, "default", v);
      out.push_back(v);
    } else {
      if (args.positional.empty() || !args.positional[0].is_string()) fail("map needs a filter name or attribute=");
      CallArgs rest;
      rest.positional.assign(args.positional.begin() + 1, args.positional.end());
      rest.keyword = args.keyword;
      out.push_back(apply_filter(args.positional[0].as_str().text(), item, rest));
    }
  }
  return Value(std::move(out));
}

Value sorted(const Value& value, const CallArgs& args) {
  List items = iterate(value);
  const bool reverse = args.get(0, "reverse", Value(false)).truthy();
  const bool case_sensitive = args.get(1, "case_sensitive", Value(false)).truthy();
  const Value attribute = args.get(2, "attribute");
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const Value ka = sort_key(a, attribute, case_sensitive);
    const Value kb = sort_key(b, attribute, case_sensitive);
    return reverse ? less_than(kb, ka) : less_than(ka, kb);
  });
  return Value(std::move(items));
}

Value unique(const Value& value, const CallArgs& args) {
  const bool case_sensitive = args.get(0, "case_sensitive", Value(false)).truthy();
  const Value attribute = args.get(1, "attribute");
  List out;
  List seen;
  for (const Value& item : iterate(value)) {
    const Value key = sort_key(item, attribute, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value(std::move(out));
}

Value length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value(0);
    case Value::Kind::kString: return Value(static_cast<int64_t>(code_point_offsets(v.as_str().text()).size() - 1));
    case Value::Kind::kList: return Value(static_cast<int64_t>(v.as_list().size()));
    case Value::Kind::kDict: return Value(static_cast<int64_t>(v.as_dict().entries.size()));
    default: fail(str_cat("object of type '", v.type_name(), "' has no len()"));
  }
}

Value to_int(const Value& v, const CallArgs& args) {
  const Value fallback = args.get(0, "default", Value(0));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return std::isfinite(v.as_double()) ? Value(static_cast<int64_t>(v.as_double())) : fallback;
  if (v.is_string()) {
    std::string t = v.as_str().text();
    t.erase(0, t.find_first_not_of(" \t\n\r"));
    t.erase(t.find_last_not_of(" \t\n\r") + 1);
    try {
      size_t used = 0;
      const long long i = std::stoll(t, &used, 10);
      if (used == t.size()) return Value(static_cast<int64_t>(i));
      const double d = std::stod(t, &used);
      if (used == t.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value to_float(const Value& v, const CallArgs& args) {
  const Value fallback = args.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    try {
      size_t used = 0;
      const double d = std::stod(v.as_str().text(), &used);
      if (used == v.as_str().text().size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value json_filter(const Value& v, const CallArgs& args) {
  JsonOptions o;
  const Value indent = args.get(1, "indent", Value(None{}));
  if (indent.is_int()) o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  else if (indent.is_string()) o.indent = indent.as_str().text();
  const Value separators = args.get(2, "separators", Value(None{}));
  if (separators.is_list() && separators.as_list().size() == 2 && separators.as_list()[0].is_string() &&
      separators.as_list()[1].is_string())
    o.separators = std::make_pair(separators.as_list()[0].as_str().text(), separators.as_list()[1].as_str().text());
  o.sort_keys = args.get(3, "sort_keys", Value(false)).truthy();
  if (args.get(0, "ensure_ascii", Value(false)).truthy()) fail("tojson(ensure_ascii=True) is not supported");
  std::string text = to_json(v, o);
  return Value(is_all_markup(v) ? Str::markup(std::move(text)) : Str::content(std::move(text)));
}

Value join_filter(const Value& v, const CallArgs& args) {
  const Value sep = args.get(0, "d", Value(Str::markup("")));
  const Value attribute = args.get(1, "attribute");
  Str out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out.append(to_str(sep));
    out.append(to_str(attribute.is_undefined() ? item : sort_key(item, attribute, true)));
    first = false;
  }
  return Value(std::move(out));
}

Value round_filter(const Value& v, const CallArgs& args) {
  const int64_t precision = int_arg(args.get(0, "precision", Value(0)), "precision");
  const Value method_value = args.get(1, "method", Value(Str::markup("common")));
  const std::string method = method_value.is_string() ? method_value.as_str().text() : "common";
  if (!v.is_number()) fail(str_cat("round needs a number, not '", v.type_name(), "'"));
  const double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  if (method == "common") x = std::round(x);
  else if (method == "ceil") x = std::ceil(x);
  else if (method == "floor") x = std::floor(x);
  else fail("round method must be 'common', 'ceil' or 'floor'");
  return Value(x / scale);
}

Value min_max(const Value& v, const CallArgs& args, bool max) {
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("min/max of an empty sequence");
  const bool case_sensitive = args.get(0, "case_sensitive", Value(false)).truthy();
  const Value attribute = args.get(1, "attribute");
  const Value* best = &items[0];
  for (const Value& item : items) {
    const Value a = sort_key(item, attribute, case_sensitive);
    const Value b = sort_key(*best, attribute, case_sensitive);
    if (max ? less_than(b, a) : less_than(a, b)) best = &item;
  }
  return *best;
}

constexpr std::string_view kFilters[] = {
    "abs", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "forceescape", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
    "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique",
    "upper", "wordcount"};
constexpr std::string_view kTests[] = {
    "!=", "<", "<=", "==", ">", ">=", "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped",
    "even", "false", "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan", "lower", "lt",
    "mapping", "ne", "none", "number", "odd", "sameas", "sequence", "string", "true", "undefined", "upper"};

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

void fail_undefined(const Value& v) {
  fail(v.undefined_hint().empty() ? std::string("a value is undefined") : v.undefined_hint());
}

Value get_attribute(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined: fail_undefined(object);
    case Value::Kind::kString: {
      Value m = string_method(object, name);
      return m;
    }
    case Value::Kind::kDict: {
      if (!object.as_dict().is_namespace) {
        Value m = dict_method(object, name);
        if (!m.is_undefined()) return m;
      }
      if (const Value* v = object.as_dict().find(name)) return *v;
      return Value::undefined(str_cat("'", object.as_dict().is_namespace ? "Namespace" : "dict object",
                                      "' has no attribute '", name, "'"));
    }
    default:
      return Value::undefined(str_cat("'", object.type_name(), " object' has no attribute '", name, "'"));
  }
}

Value get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined: fail_undefined(object);
    case Value::Kind::kDict: {
      if (key.is_string()) {
        if (const Value* v = object.as_dict().find(key.as_str().text())) return *v;
        if (!object.as_dict().is_namespace) {
          Value m = dict_method(object, key.as_str().text());
          if (!m.is_undefined()) return m;
        }
      }
      return Value::undefined(str_cat("'dict object' has no attribute ", python_repr(key)));
    }
    case Value::Kind::kList: {
      if (!key.is_int() && !key.is_bool()) return Value::undefined(str_cat("list indices must be integers, not ", key.type_name()));
      const auto i = normalize_index(key.as_int(), object.as_list().size());
      if (!i) return Value::undefined(str_cat("list object has no element ", key.as_int()));
      return object.as_list()[*i];
    }
    case Value::Kind::kString: {
      if (key.is_string()) return string_method(object, key.as_str().text());
      if (!key.is_int() && !key.is_bool()) return Value::undefined("string indices must be integers");
      const std::vector<size_t> offsets = code_point_offsets(object.as_str().text());
      const auto i = normalize_index(key.as_int(), offsets.size() - 1);
      if (!i) return Value::undefined(str_cat("str object has no element ", key.as_int()));
      return Value(object.as_str().slice(offsets[*i], offsets[*i + 1]));
    }
    default:
      if (key.is_string()) return get_attribute(object, key.as_str().text());
      return Value::undefined(str_cat("'", object.type_name(), "' object is not subscriptable"));
  }
}

Value get_slice(const Value& object, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (object.is_undefined()) fail_undefined(object);
  auto opt = [](const Value& v, std::string_view what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    return int_arg(v, what);
  };
  const int64_t step = opt(step_v, "slice step").value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  std::vector<size_t> offsets;
  int64_t n = 0;
  if (object.is_string()) {
    offsets = code_point_offsets(object.as_str().text());
    n = static_cast<int64_t>(offsets.size()) - 1;
  } else if (object.is_list()) {
    n = static_cast<int64_t>(object.as_list().size());
  } else {
    fail(str_cat("'", object.type_name(), "' object is not subscriptable"));
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v < 0 ? *v + n : *v;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t start = clamp(opt(start_v, "slice start"), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(opt(stop_v, "slice stop"), step > 0 ? n : -1);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
  if (object.is_string()) {
    Str out;
    for (int64_t i : picked) out.append(object.as_str().slice(offsets[static_cast<size_t>(i)], offsets[static_cast<size_t>(i) + 1]));
    return Value(std::move(out));
  }
  List out;
  for (int64_t i : picked) out.push_back(object.as_list()[static_cast<size_t>(i)]);
  return Value(std::move(out));
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.as_list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, item] : v.as_dict().entries) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const std::vector<size_t> offsets = code_point_offsets(v.as_str().text());
      for (size_t i = 0; i + 1 < offsets.size(); ++i) chars.emplace_back(v.as_str().slice(offsets[i], offsets[i + 1]));
      return chars;
    }
    default: fail(str_cat("'", v.type_name(), "' object is not iterable"));
  }
}

Value apply_filter(std::string_view name, const Value& value, const CallArgs& args) {
  Value result;
  if (string_filter(name, value, args, result)) return result;
  if (name == "default" || name == "d") {
    const bool boolean = args.get(1, "boolean", Value(false)).truthy();
    const bool use_default = value.is_undefined() || (boolean && !value.truthy());
    return use_default ? args.get(0, "default_value", Value(Str::markup(""))) : value;
  }
  if (value.is_undefined() && name != "length" && name != "count" && name != "list" && name != "string" &&
      name != "tojson" && name != "join" && name != "safe")
    fail_undefined(value);
  if (name == "length" || name == "count") return length(value);
  if (name == "string") return Value(to_str(value));
  if (name == "safe") return value;
  if (name == "tojson") return json_filter(value, args);
  if (name == "int") return to_int(value, args);
  if (name == "float") return to_float(value, args);
  if (name == "abs") {
    if (value.is_float()) return Value(std::fabs(value.as_double()));
    if (value.is_number()) return Value(value.as_int() < 0 ? -value.as_int() : value.as_int());
    fail(str_cat("bad operand type for abs(): '", value.type_name(), "'"));
  }
  if (name == "round") return round_filter(value, args);
  if (name == "list") return Value(iterate(value));
  if (name == "first" || name == "last") {
    const List items = iterate(value);
    if (items.empty()) return Value::undefined(str_cat("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (value.is_string()) return get_slice(value, Value(), Value(), Value(-1));
    List items = iterate(value);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "join") return join_filter(value, args);
  if (name == "map") return map_filter(value, args);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return select_filter(name, value, args);
  if (name == "sort") return sorted(value, args);
  if (name == "unique") return unique(value, args);
  if (name == "min" || name == "max") return min_max(value, args, name == "max");
  if (name == "sum") {
    Value total = args.get(1, "start", Value(0));
    const Value attribute = args.get(0, "attribute");
    for (const Value& item : iterate(value)) {
      const Value x = sort_key(item, attribute, true);
      if (!x.is_number() || !total.is_number()) fail("sum needs numbers");
      total = total.is_float() || x.is_float() ? Value(total.as_double() + x.as_double()) : Value(total.as_int() + x.as_int());
    }
    return total;
  }
  if (name == "items" || name == "dictsort") {
    if (!value.is_dict()) fail(str_cat(name, " needs a dict, not '", value.type_name(), "'"));
    List out;
    for (const auto& [k, v] : value.as_dict().entries) out.emplace_back(List{Value(k), v});
    if (name == "dictsort") {
      const bool case_sensitive = args.get(0, "case_sensitive", Value(false)).truthy();
      std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
        return less_than(sort_key(a.as_list()[0], Value(), case_sensitive), sort_key(b.as_list()[0], Value(), case_sensitive));
      });
    }
    return Value(std::move(out));
  }
  fail(str_cat("no filter named '", name, "'"));
}

bool apply_test(std::string_view name, const Value& v, const CallArgs& args) {
  auto arg = [&]() {
    const Value a = args.get(0, "other");
    return a;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.as_dict().is_namespace;
  // Jinja2's Undefined is iterable and a sequence (empty).
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.as_dict().is_namespace);
  if (name == "callable") return v.is_function();
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    return string_method(v, name == "lower" ? "islower" : "isupper").as_function().call(const_cast<CallArgs&>(args)).truthy();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.is_undefined()) fail_undefined(v);
    const int64_t x = int_arg(v, str_cat("the value of test '", name, "'"));
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    const int64_t d = int_arg(arg(), "divisibleby argument");
    if (d == 0) fail("integer division or modulo by zero");
    return x % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg());
  if (name == "ne" || name == "!=") return !equals(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, arg());
  if (name == "le" || name == "<=") return !less_than(arg(), v);
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(arg(), v);
  if (name == "ge" || name == ">=") return !less_than(v, arg());
  if (name == "in") {
    const Value container = arg();
    if (container.is_string()) return v.is_string() && container.as_str().text().find(v.as_str().text()) != std::string::npos;
    for (const Value& item : iterate(container))
      if (equals(item, v)) return true;
    return false;
  }
  if (name == "sameas") return equals(v, arg()) && v.kind() == arg().kind();
  if (name == "escaped") return false;
  fail(str_cat("no test named '", name, "'"));
}

Value global_function(std::string_view name) {
  if (name == "range")
    return make_function("range", [](CallArgs& a) {
      a.expect_at_most(3, "range");
      if (a.positional.empty()) fail("range expected at least 1 argument, got 0");
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.size() == 1) {
        stop = int_arg(a.positional[0], "range argument");
      } else {
        start = int_arg(a.positional[0], "range argument");
        stop = int_arg(a.positional[1], "range argument");
        if (a.positional.size() == 3) step = int_arg(a.positional[2], "range argument");
      }
      if (step == 0) fail("range() arg 3 must not be zero");
      const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                 : (start > stop ? (start - stop - step - 1) / -step : 0);
      if (n > kMaxRange) fail(str_cat("Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ")."));
      List out;
      for (int64_t i = 0; i < n; ++i) out.emplace_back(start + i * step);
      return Value(std::move(out));
    });
  if (name == "namespace" || name == "dict")
    return make_function(std::string(name), [ns = name == "namespace"](CallArgs& a) {
      auto d = std::make_shared<Dict>();
      d->is_namespace = ns;
      for (const Value& p : a.positional) {
        if (!p.is_dict()) fail("namespace() and dict() take keyword arguments or a dict");
        for (const auto& [k, v] : p.as_dict().entries) d->set(k, v);
      }
      for (const auto& [k, v] : a.keyword) d->set(Str::markup(k), v);
      return Value(d);
    });
  if (name == "raise_exception")
    return make_function("raise_exception", [](CallArgs& a) -> Value {
      throw Failure{to_str(a.get(0, "message", Value(Str::markup("")))).text(), /*raised=*/true};
    });
  if (name == "strftime_now")
    return make_function("strftime_now", [](CallArgs& a) {
      const Value format = a.get(0, "format");
      if (!format.is_string()) fail("strftime_now needs a format string");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[512];
      const size_t n = std::strftime(buf, sizeof buf, format.as_str().text().c_str(), &local);
      return Value(Str::markup(std::string(buf, n)));
    });
  return Value::undefined(str_cat("'", name, "' is undefined"));
}

}  // namespace ridge::jinja
