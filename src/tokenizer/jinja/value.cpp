#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/unicode.h"

namespace ridge::jinja {

// --- Str -----------------------------------------------------------------------------

Str Str::markup(std::string text) {
  Str s;
  s.text_ = std::move(text);
  s.add_range(0, s.text_.size());
  return s;
}

Str Str::content(std::string text) {
  Str s;
  s.text_ = std::move(text);
  return s;
}

bool Str::all_markup() const {
  return text_.empty() || (markup_.size() == 1 && markup_[0].begin == 0 && markup_[0].end == text_.size());
}

void Str::add_range(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!markup_.empty() && markup_.back().end == begin) {
    markup_.back().end = end;
  } else {
    markup_.push_back({begin, end});
  }
}

void Str::reserve_more(size_t n) const {
  if (n > kMaxStrBytes - text_.size())
    fail(str_cat("the template built a string of over ", kMaxStrBytes >> 20, " MiB"));
}

void Str::append(const Str& other) {
  reserve_more(other.size());
  const size_t offset = text_.size();
  text_ += other.text_;
  for (const TextRange& r : other.markup_) add_range(offset + r.begin, offset + r.end);
}

void Str::append_markup(std::string_view text) {
  reserve_more(text.size());
  const size_t offset = text_.size();
  text_ += text;
  add_range(offset, text_.size());
}

void Str::append_content(std::string_view text) {
  reserve_more(text.size());
  text_ += text;
}

Str Str::slice(size_t begin, size_t end) const {
  end = std::min(end, text_.size());
  Str s;
  if (begin >= end) return s;
  s.text_ = text_.substr(begin, end - begin);
  for (const TextRange& r : markup_) {
    const size_t b = std::max(r.begin, begin);
    const size_t e = std::min(r.end, end);
    if (b < e) s.add_range(b - begin, e - begin);
  }
  return s;
}

Str Str::with_text(std::string text) const {
  Str s = *this;
  s.text_ = std::move(text);
  return s;
}

// --- Dict, CallArgs ------------------------------------------------------------------

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.text() == key) return &v;
  return nullptr;
}

void Dict::set(Str key, Value value) {
  for (auto& [k, v] : entries) {
    if (k.text() == key.text()) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

void fail(std::string message) { throw Failure{std::move(message)}; }

Value CallArgs::get(size_t index, std::string_view name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : keyword)
    if (k == name) return v;
  return fallback;
}

void CallArgs::expect_at_most(size_t n_positional, std::string_view function) const {
  if (positional.size() > n_positional)
    fail(str_cat(function, "() takes at most ", n_positional, " positional arguments (", positional.size(), " given)"));
}

// --- Value ---------------------------------------------------------------------------

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_double() != 0.0;
    case Kind::kString: return !as_str().empty();
    case Kind::kList: return !as_list().empty();
    case Kind::kDict: return !as_dict().entries.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

std::string_view Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return as_dict().is_namespace ? "Namespace" : "dict";
    case Kind::kFunction: return as_function().is_macro ? "Macro" : "function";
  }
  return "?";
}

// --- Python str() and repr() ---------------------------------------------------------

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then laid out as Python's float.__repr__ does:
  // positional for exponents -4 <= e < 16, else scientific with a two-digit exponent.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, end);  // "-1.2345e+02"
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mantissa)
    if (c != '.' && c != '-') digits += c;
  std::string out = mantissa[0] == '-' ? "-" : "";
  if (exponent >= 16 || exponent < -4) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + e;
  }
  if (exponent < 0) {
    out.append("0.").append(static_cast<size_t>(-exponent - 1), '0').append(digits);
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
  }
  return out;
}

namespace {

bool printable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp >= 0x80 && cp < 0xA0) return false;
  using unicode::Category;
  const Category c = unicode::category(cp);
  // Python's str.isprintable: not Other (Cc Cf Cs Co Cn) nor Separator, space excepted.
  if (cp == ' ') return true;
  return !(unicode::category_bit(c) & (unicode::kOtherMask | unicode::kSeparatorMask));
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const uint32_t cp = unicode::decode_utf8(s, pos);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == unicode::kInvalid && pos - start == 1) {
      out += s.substr(start, 1);  // not UTF-8: Python would not have this string at all
    } else if (!printable(cp)) {
      char buf[16];
      if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", cp);
      else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      else std::snprintf(buf, sizeof buf, "\\U%08x", cp);
      out += buf;
    } else {
      out += s.substr(start, pos - start);
    }
  }
  out += quote;
  return out;
}

bool strings_all_markup(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString: return v.as_str().all_markup();
    case Value::Kind::kList:
      return std::all_of(v.as_list().begin(), v.as_list().end(), strings_all_markup);
    case Value::Kind::kDict:
      for (const auto& [k, item] : v.as_dict().entries)
        if (!k.all_markup() || !strings_all_markup(item)) return false;
      return true;
    default: return true;
  }
}

}  // namespace

std::string python_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return format_float(v.as_double());
    case Value::Kind::kString: return string_repr(v.as_str().text());
    case Value::Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < v.as_list().size(); ++i) out += (i ? ", " : "") + python_repr(v.as_list()[i]);
      return out + "]";
    }
    case Value::Kind::kDict: {
      std::string out = v.as_dict().is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, item] : v.as_dict().entries) {
        out += (first ? "" : ", ") + string_repr(k.text()) + ": " + python_repr(item);
        first = false;
      }
      return out + (v.as_dict().is_namespace ? "}>" : "}");
    }
    case Value::Kind::kFunction:
      return v.as_function().is_macro ? str_cat("<Macro '", v.as_function().name, "'>")
                                       : str_cat("<built-in function ", v.as_function().name, ">");
  }
  return "";
}

Str to_str(const Value& v) {
  if (v.is_string()) return v.as_str();
  std::string text = python_repr(v);
  return strings_all_markup(v) ? Str::markup(std::move(text)) : Str::content(std::move(text));
}

// --- comparisons ---------------------------------------------------------------------

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_str().text() == b.as_str().text();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, item] : x.entries) {
        const Value* other = y.find(k.text());
        if (other == nullptr || !equals(item, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_str().text() < b.as_str().text();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (less_than(x[i], y[i])) return true;
      if (less_than(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  fail(str_cat("'<' not supported between instances of '", a.type_name(), "' and '", b.type_name(), "'"));
}

// --- JSON ----------------------------------------------------------------------------

namespace {

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  const std::string item_sep = o.separators ? o.separators->first : (o.indent ? "," : ", ");
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  auto newline = [&](int d) {
    if (!o.indent) return;
    out += '\n';
    for (int i = 0; i < d; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined: fail("Object of type Undefined is not JSON serializable");
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += format_float(d);
      return;
    }
    case Value::Kind::kString: json_string(out, v.as_str().text()); return;
    case Value::Kind::kList: {
      const List& list = v.as_list();
      if (list.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_value(out, list[i], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.as_dict().is_namespace) fail("Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<Str, Value>*> entries;
      for (const auto& e : v.as_dict().entries) entries.push_back(&e);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return a->first.text() < b->first.text(); });
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, entries[i]->first.text());
        out += key_sep;
        json_value(out, entries[i]->second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::kFunction: fail(str_cat("Object of type ", v.type_name(), " is not JSON serializable"));
  }
}

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_space();
    if (pos_ != s_.size()) error("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void error(std::string_view what) const {
    throw Error(str_cat("JSON: ", what, " at byte ", pos_));
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool consume(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value parse_value(int depth) {
    if (depth > 512) error("nesting deeper than 512");
    skip_space();
    if (pos_ >= s_.size()) error("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return Value(Str::content(parse_string()));
    if (consume("true")) return Value(true);
    if (consume("false")) return Value(false);
    if (consume("null")) return Value(None{});
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    error(str_cat("unexpected character '", std::string(1, c), "'"));
  }

  Value parse_object(int depth) {
    ++pos_;
    auto dict = std::make_shared<Dict>();
    skip_space();
    if (consume("}")) return Value(dict);
    while (true) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"') error("expected a string key");
      std::string key = parse_string();
      skip_space();
      if (!consume(":")) error("expected ':'");
      dict->set(Str::content(std::move(key)), parse_value(depth + 1));
      skip_space();
      if (consume("}")) return Value(dict);
      if (!consume(",")) error("expected ',' or '}'");
    }
  }

  Value parse_array(int depth) {
    ++pos_;
    List list;
    skip_space();
    if (consume("]")) return Value(std::move(list));
    while (true) {
      list.push_back(parse_value(depth + 1));
      skip_space();
      if (consume("]")) return Value(std::move(list));
      if (!consume(",")) error("expected ',' or ']'");
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
      else error("bad hex digit in \\u escape");
    }
    return v;
  }

  std::string parse_string() {
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) error("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) error("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(pos_, 2) == "\\u") {
            const size_t save = pos_;
            pos_ += 2;
            const uint32_t low = hex4();
            if (low >= 0xDC00 && low < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            else pos_ = save;
          }
          unicode::append_utf8(out, cp);
          break;
        }
        default: error(str_cat("bad escape '\\", std::string(1, e), "'"));
      }
    }
  }

  Value parse_number() {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    bool is_float = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || ((c == '+' || c == '-') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E'))) {
        is_float = true;
        ++pos_;
      } else {
        break;
      }
    }
    const std::string_view num = s_.substr(start, pos_ - start);
    if (!is_float) {
      int64_t i = 0;
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), i);
      if (ec == std::errc() && p == num.data() + num.size()) return Value(i);
    }
    double d = 0;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), d);
    if (p != num.data() + num.size() || num == "-") {
      pos_ = start;
      error("malformed number");
    }
    return Value(d);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

Value parse_json(std::string_view text) { return JsonParser(text).parse_document(); }

bool is_all_markup(const Value& v) { return strings_all_markup(v); }

}  // namespace ridge::jinja
