// str methods and string filters. Results keep provenance byte by byte: a stripped or
// split message is still content, text the template passes in (a replacement, the
// indent) is whatever it was where the template wrote it. Case mapping is ASCII only.
#include <algorithm>
#include <charconv>
#include <memory>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/unicode.h"

namespace ridge::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
char to_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char to_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || static_cast<unsigned char>(c) >= 0x80; }

const Str& string_arg(const Value& v, std::string_view what) {
  if (!v.is_string()) fail(str_cat(what, " must be a string, not '", v.type_name(), "'"));
  return v.as_str();
}

int64_t int_arg(const Value& v, std::string_view what) {
  if (!v.is_int() && !v.is_bool()) fail(str_cat(what, " must be an integer, not '", v.type_name(), "'"));
  return v.as_int();
}

// [begin, end) of s without the characters to strip at either end: whitespace, or the
// code points of `chars`.
std::pair<size_t, size_t> strip_bounds(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<uint32_t> set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    const std::string& c = string_arg(chars, "strip argument").text();
    for (size_t p = 0; p < c.size();) set.push_back(unicode::decode_utf8(c, p));
  }
  const std::vector<size_t> offsets = code_point_offsets(s);
  auto strippable = [&](size_t i) {
    size_t p = offsets[i];
    const uint32_t cp = unicode::decode_utf8(s, p);
    if (whitespace) return cp < 0x80 ? is_space(static_cast<char>(cp)) || (cp >= 0x1C && cp <= 0x1F) : unicode::is_whitespace(cp);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t first = 0;
  size_t last = offsets.size() - 1;  // number of code points
  if (left)
    while (first < last && strippable(first)) ++first;
  if (right)
    while (last > first && strippable(last - 1)) --last;
  return {offsets[first], offsets[last]};
}

Value strip(const Value& self, const Value& chars, bool left, bool right) {
  const Str& s = self.as_str();
  auto [b, e] = strip_bounds(s.text(), chars, left, right);
  return Value(s.slice(b, e));
}

Value split(const Str& s, const Value& sep, int64_t maxsplit) {
  List parts;
  const std::string& t = s.text();
  if (sep.is_undefined() || sep.is_none()) {
    size_t p = 0;
    while (true) {
      while (p < t.size() && is_space(t[p])) ++p;
      if (p >= t.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = t.size();
        while (e > p && is_space(t[e - 1])) --e;
        parts.emplace_back(s.slice(p, e));
        break;
      }
      size_t e = p;
      while (e < t.size() && !is_space(t[e])) ++e;
      parts.emplace_back(s.slice(p, e));
      p = e;
    }
    return Value(std::move(parts));
  }
  const std::string& d = string_arg(sep, "split separator").text();
  if (d.empty()) fail("empty separator");
  size_t p = 0;
  while (true) {
    const size_t hit = t.find(d, p);
    if (hit == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.emplace_back(s.slice(p, t.size()));
      break;
    }
    parts.emplace_back(s.slice(p, hit));
    p = hit + d.size();
  }
  return Value(std::move(parts));
}

Value replace(const Str& s, const Str& old, const Str& replacement, int64_t count) {
  Str out;
  const std::string& t = s.text();
  if (old.empty()) {
    // Python inserts the replacement before every character and at the end.
    const std::vector<size_t> offsets = code_point_offsets(t);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || done < count) out.append(replacement), ++done;
      out.append(s.slice(offsets[i], offsets[i + 1]));
    }
    if (count < 0 || done < count) out.append(replacement);
    return Value(std::move(out));
  }
  size_t p = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = t.find(old.text(), p);
    if (hit == std::string::npos) break;
    out.append(s.slice(p, hit));
    out.append(replacement);
    p = hit + old.size();
    ++done;
  }
  out.append(s.slice(p, t.size()));
  return Value(std::move(out));
}

bool affix_matches(const std::string& t, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    const std::string& x = string_arg(a, prefix ? "startswith argument" : "endswith argument").text();
    if (x.size() > t.size()) return false;
    return prefix ? t.compare(0, x.size(), x) == 0 : t.compare(t.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  return one(affix);
}

std::string title_case(std::string t) {
  bool prev_letter = false;
  for (char& c : t) {
    const bool letter = is_alpha(c);
    c = letter && !prev_letter ? to_upper(c) : to_lower(c);
    prev_letter = letter;
  }
  return t;
}

std::string capitalize(std::string t) {
  for (size_t i = 0; i < t.size(); ++i) t[i] = i == 0 ? to_upper(t[i]) : to_lower(t[i]);
  return t;
}

std::string map_chars(std::string t, char (*f)(char)) {
  std::transform(t.begin(), t.end(), t.begin(), f);
  return t;
}

int64_t index_of(const std::string& t, const std::string& sub, bool from_right) {
  const size_t hit = from_right ? t.rfind(sub) : t.find(sub);
  if (hit == std::string::npos) return -1;
  return static_cast<int64_t>(code_point_offsets(t.substr(0, hit)).size() - 1);
}

Value bound(std::string name, std::function<Value(CallArgs&)> call) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->call = std::move(call);
  return Value(std::shared_ptr<const Function>(std::move(f)));
}

// Python's str.join: each item must be a string.
Value join_strings(const Str& sep, const Value& items) {
  Str out;
  const List list = iterate(items);
  for (size_t i = 0; i < list.size(); ++i) {
    if (i) out.append(sep);
    out.append(string_arg(list[i], str_cat("sequence item ", i)));
  }
  return Value(std::move(out));
}

Value indent(const Str& s, const Value& width, bool first, bool blank) {
  std::string unit;
  if (width.is_string()) unit = width.as_str().text();
  else unit = std::string(static_cast<size_t>(std::max<int64_t>(0, width.is_undefined() ? 4 : int_arg(width, "width"))), ' ');
  // Jinja2: lines = (s + "\n").splitlines(); every line after the first gets the indent
  // unless it is empty (blank=False); `first` indents the first line too.
  Str out;
  if (first) out.append_markup(unit);
  const std::string& t = s.text();
  size_t line_begin = 0;
  while (true) {
    const size_t nl = t.find('\n', line_begin);
    const size_t line_end = nl == std::string::npos ? t.size() : nl;
    out.append(s.slice(line_begin, line_end));
    if (nl == std::string::npos) break;
    out.append(s.slice(nl, nl + 1));
    line_begin = nl + 1;
    const bool empty_next = t.find('\n', line_begin) == line_begin || line_begin == t.size();
    if (blank || !empty_next) out.append_markup(unit);
  }
  return Value(std::move(out));
}

Value html_escape(const Str& s) {
  Str out;
  const std::string& t = s.text();
  for (size_t i = 0; i < t.size(); ++i) {
    std::string_view entity;
    switch (t[i]) {
      case '&': entity = "&amp;"; break;
      case '<': entity = "&lt;"; break;
      case '>': entity = "&gt;"; break;
      case '"': entity = "&#34;"; break;
      case '\'': entity = "&#39;"; break;
      default: break;
    }
    Str one = s.slice(i, i + 1);
    if (entity.empty()) out.append(one);
    else if (one.all_markup()) out.append_markup(entity);
    else out.append_content(entity);
  }
  return Value(std::move(out));
}

}  // namespace

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t p = 0; p < s.size();) {
    offsets.push_back(p);
    unicode::decode_utf8(s, p);
  }
  offsets.push_back(s.size());
  return offsets;
}

namespace {

// Python's str.format for the fields templates write: {}, {0}, {name}, and {{ }} for braces.
// Each field's text keeps its provenance (a message's content stays content).
Value format_string(const Str& s, const CallArgs& a) {
  const std::string& t = s.text();
  Str out;
  size_t next_auto = 0;
  for (size_t i = 0; i < t.size();) {
    const char c = t[i];
    if ((c == '{' || c == '}') && i + 1 < t.size() && t[i + 1] == c) {  // {{ or }}
      out.append(s.slice(i, i + 1));
      i += 2;
      continue;
    }
    if (c == '}') fail("Single '}' encountered in format string");
    if (c != '{') {
      const size_t j = std::min(t.find_first_of("{}", i), t.size());
      out.append(s.slice(i, j));
      i = j;
      continue;
    }
    const size_t close = t.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    const std::string field = t.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!{[.") != std::string::npos)
      fail(str_cat("str.format: the field '{", field, "}' is not supported (only {}, {N} and {name})"));
    const bool numbered = !field.empty() && std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; });
    if (field.empty() || numbered) {
      size_t index = next_auto;
      if (!numbered) {
        ++next_auto;
      } else if (std::from_chars(field.data(), field.data() + field.size(), index).ec != std::errc()) {
        fail("Too many decimal digits in format string");
      }
      if (index >= a.positional.size())
        fail(str_cat("Replacement index ", index, " out of range for positional args tuple"));
      out.append(to_str(a.positional[index]));
    } else {
      const auto it = std::find_if(a.keyword.begin(), a.keyword.end(), [&](const auto& kv) { return kv.first == field; });
      if (it == a.keyword.end()) fail(str_cat("KeyError: '", field, "'"));
      out.append(to_str(it->second));
    }
    i = close + 1;
  }
  return Value(std::move(out));
}

}  // namespace

Value string_method(const Value& object, std::string_view name) {
  const Value self = object;
  const Str& s = object.as_str();
  const std::string n(name);
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return bound(n, [self, n](CallArgs& a) {
      a.expect_at_most(1, n);
      return strip(self, a.get(0, "chars"), n != "rstrip", n != "lstrip");
    });
  if (name == "split")
    return bound(n, [s](CallArgs& a) {
      a.expect_at_most(2, "split");
      const Value m = a.get(1, "maxsplit", Value(-1));
      return split(s, a.get(0, "sep"), int_arg(m, "maxsplit"));
    });
  if (name == "startswith" || name == "endswith")
    return bound(n, [s, n](CallArgs& a) {
      a.expect_at_most(1, n);
      return Value(affix_matches(s.text(), a.get(0, n == "startswith" ? "prefix" : "suffix"), n == "startswith"));
    });
  if (name == "upper") return bound(n, [s](CallArgs&) { return Value(s.with_text(map_chars(s.text(), to_upper))); });
  if (name == "lower") return bound(n, [s](CallArgs&) { return Value(s.with_text(map_chars(s.text(), to_lower))); });
  if (name == "title") return bound(n, [s](CallArgs&) { return Value(s.with_text(title_case(s.text()))); });
  if (name == "capitalize") return bound(n, [s](CallArgs&) { return Value(s.with_text(capitalize(s.text()))); });
  if (name == "replace")
    return bound(n, [s](CallArgs& a) {
      a.expect_at_most(3, "replace");
      const Value count = a.get(2, "count", Value(-1));
      return replace(s, string_arg(a.get(0, "old"), "replace argument 1"),
                     string_arg(a.get(1, "new"), "replace argument 2"), int_arg(count, "count"));
    });
  if (name == "find" || name == "rfind")
    return bound(n, [s, n](CallArgs& a) {
      return Value(index_of(s.text(), string_arg(a.get(0, "sub"), n + " argument").text(), n == "rfind"));
    });
  if (name == "count")
    return bound(n, [s](CallArgs& a) {
      const std::string& sub = string_arg(a.get(0, "sub"), "count argument").text();
      if (sub.empty()) return Value(static_cast<int64_t>(code_point_offsets(s.text()).size()));
      int64_t c = 0;
      for (size_t p = s.text().find(sub); p != std::string::npos; p = s.text().find(sub, p + sub.size())) ++c;
      return Value(c);
    });
  if (name == "join") return bound(n, [s](CallArgs& a) { return join_strings(s, a.get(0, "iterable")); });
  if (name == "format") return bound(n, [s](CallArgs& a) { return format_string(s, a); });
  if (name == "splitlines")
    return bound(n, [s](CallArgs&) {
      List lines;
      const std::string& t = s.text();
      size_t b = 0;
      while (b < t.size()) {
        size_t nl = t.find('\n', b);
        const size_t e = nl == std::string::npos ? t.size() : nl;
        lines.emplace_back(s.slice(b, e > b && t[e - 1] == '\r' ? e - 1 : e));
        b = e + 1;
      }
      return Value(std::move(lines));
    });
  auto predicate = [&](bool (*test)(char)) {
    return bound(n, [s, test](CallArgs&) {
      return Value(!s.empty() && std::all_of(s.text().begin(), s.text().end(), test));
    });
  };
  if (name == "isspace") return predicate(is_space);
  if (name == "isdigit") return predicate([](char c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha") return predicate([](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); });
  if (name == "isalnum")
    return predicate([](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); });
  if (name == "islower" || name == "isupper") {
    const bool lower = name == "islower";
    return bound(n, [s, lower](CallArgs&) {
      bool cased = false;
      for (char c : s.text()) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          cased = true;
          if ((c >= 'a' && c <= 'z') != lower) return Value(false);
        }
      }
      return Value(cased);
    });
  }
  return Value::undefined(str_cat("'str object' has no attribute '", name, "'"));
}

bool string_filter(std::string_view name, const Value& value, const CallArgs& args, Value& result) {
  auto self = [&]() -> const Str& {
    if (!value.is_string()) fail(str_cat("filter '", name, "' needs a string, not '", value.type_name(), "'"));
    return value.as_str();
  };
  if (name == "trim") {
    if (value.is_undefined()) fail_undefined(value);
    Value s = value.is_string() ? value : Value(to_str(value));
    result = strip(s, args.get(0, "chars"), true, true);
  } else if (name == "upper" || name == "lower") {
    Str s = to_str(value);
    result = Value(s.with_text(map_chars(s.text(), name == "upper" ? to_upper : to_lower)));
  } else if (name == "capitalize") {
    Str s = to_str(value);
    result = Value(s.with_text(capitalize(s.text())));
  } else if (name == "title") {
    Str s = to_str(value);
    result = Value(s.with_text(title_case(s.text())));
  } else if (name == "replace") {
    Str s = to_str(value);
    const Value count = args.get(2, "count", Value(None{}));
    result = replace(s, to_str(args.get(0, "old")), to_str(args.get(1, "new")),
                     count.is_none() ? -1 : int_arg(count, "count"));
  } else if (name == "indent") {
    result = indent(to_str(value), args.get(0, "width"), args.get(1, "first", Value(false)).truthy(),
                    args.get(2, "blank", Value(false)).truthy());
  } else if (name == "e" || name == "escape" || name == "forceescape") {
    result = html_escape(to_str(value));
  } else if (name == "wordcount") {
    result = split(to_str(value), Value(), -1);
    result = Value(static_cast<int64_t>(result.as_list().size()));
  } else {
    (void)self;
    return false;
  }
  return true;
}

}  // namespace ridge::jinja
