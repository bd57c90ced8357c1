#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <array>

#include "tokenizer/jinja/template.h"
#include "tokenizer/unicode.h"

namespace ridge::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// \r\n and \r become \n; one trailing newline goes (Jinja2's keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string rstrip(std::string_view s) {
  size_t end = s.size();
  while (end > 0 && is_space(s[end - 1])) --end;
  return std::string(s.substr(0, end));
}

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view name) : src_(normalize_newlines(source)), name_(name) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      const char opener = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      size_t raw_body = 0;
      const bool raw = opener == '%' && match_raw_begin(tag + 2 + (sign ? 1 : 0), raw_body);
      emit_text(strip_before_tag(src_.substr(pos_, tag - pos_), sign, opener != '{'), pos_);
      const size_t inside = tag + 2 + (sign ? 1 : 0);
      if (raw) {
        lex_raw(raw_body);
      } else if (opener == '#') {
        lex_comment(tag, inside);
      } else {
        lex_tag(tag, inside, opener == '{');
      }
    }
    tokens_.push_back({TokenKind::kEnd, "", location(src_.size())});
    return std::move(tokens_);
  }

 private:
  Location location(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }
  [[noreturn]] void error(size_t offset, std::string_view what) const {
    throw TemplateError(TemplateError::Kind::kSyntax, name_, location(offset), what);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos && i + 1 < src_.size(); i = src_.find('{', i + 1))
      if (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#') return i;
    return std::string::npos;
  }

  // The text before a tag, with "-" (strip all whitespace) or lstrip_blocks applied.
  std::string strip_before_tag(std::string_view text, char sign, bool block_or_comment) const {
    if (sign == '-') return rstrip(text);
    if (sign == '+' || !block_or_comment) return std::string(text);
    const size_t line_begin = text.rfind('\n') == std::string_view::npos ? 0 : text.rfind('\n') + 1;
    if (line_begin == 0 && !line_starting_) return std::string(text);
    std::string_view tail = text.substr(line_begin);
    if (!tail.empty() && std::all_of(tail.begin(), tail.end(), is_space)) return std::string(text.substr(0, line_begin));
    return std::string(text);
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back({TokenKind::kText, std::move(text), location(offset)});
  }

  // After a block end: "+%}" keeps what follows, "-%}" strips whitespace, "%}" eats one
  // newline (trim_blocks). Returns the offset after the match, or npos if none is here.
  size_t match_block_end(size_t at, const char* end) const {
    const size_t n = 2;
    if (src_.compare(at, 1, "+") == 0 && src_.compare(at + 1, n, end) == 0) return at + 1 + n;
    if (src_.compare(at, 1, "-") == 0 && src_.compare(at + 1, n, end) == 0) {
      size_t p = at + 1 + n;
      while (p < src_.size() && is_space(src_[p])) ++p;
      return p;
    }
    if (src_.compare(at, n, end) == 0) {
      size_t p = at + n;
      if (p < src_.size() && src_[p] == '\n') ++p;
      return p;
    }
    return std::string::npos;
  }

  void finish_match(size_t end) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  // {% raw %} or {%- raw -%}: sets the offset of the raw body.
  bool match_raw_begin(size_t at, size_t& body) const {
    size_t p = at;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    body = p;
    return true;
  }

  void lex_raw(size_t body) {
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (size_t tag = src_.find("{%", body); tag != std::string::npos; tag = src_.find("{%", tag + 1)) {
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      size_t p = tag + 2 + (sign ? 1 : 0);
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && is_space(src_[p])) ++p;
      const size_t end = match_block_end(p, "%}");
      if (end == std::string::npos) continue;
      emit_text(strip_before_tag(std::string_view(src_).substr(body, tag - body), sign, true), body);
      finish_match(end);
      return;
    }
    error(body, "missing end of raw directive ({% endraw %})");
  }

  void lex_comment(size_t tag, size_t inside) {
    const size_t close = src_.find("#}", inside);
    if (close == std::string::npos) error(tag, "missing end of comment tag '#}'");
    const size_t at = close > inside && (src_[close - 1] == '-' || src_[close - 1] == '+') ? close - 1 : close;
    finish_match(match_block_end(at, "#}"));
  }

  void lex_tag(size_t tag, size_t inside, bool variable) {
    tokens_.push_back({variable ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", location(tag)});
    std::vector<char> brackets;  // the closers the open brackets expect
    size_t p = inside;
    while (true) {
      if (p >= src_.size()) error(tag, variable ? "unexpected end of template: '{{' has no '}}'" : "unexpected end of template: '{%' has no '%}'");
      if (brackets.empty()) {
        size_t end = std::string::npos;
        if (variable) {
          if (src_.compare(p, 3, "-}}") == 0) {
            end = p + 3;
            while (end < src_.size() && is_space(src_[end])) ++end;
          } else if (src_.compare(p, 2, "}}") == 0) {
            end = p + 2;
          }
        } else {
          end = match_block_end(p, "%}");
        }
        if (end != std::string::npos) {
          tokens_.push_back({variable ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", location(p)});
          finish_match(end);
          return;
        }
      }
      const char c = src_[p];
      if (is_space(c)) {
        ++p;
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        tokens_.push_back({TokenKind::kName, src_.substr(p, e - p), location(p)});
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, brackets);
      }
    }
  }

  size_t lex_number(size_t p) {
    const size_t start = p;
    auto digits = [&](size_t q) {
      size_t e = q;
      while (e < src_.size() && (is_digit(src_[e]) || (src_[e] == '_' && e > q && e + 1 < src_.size() && is_digit(src_[e + 1])))) ++e;
      return e;
    };
    size_t e = digits(p);
    bool is_float = false;
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = start; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInteger, text, location(start)});
    return e;
  }

  // A quoted string with Python's escapes (as Jinja2 decodes them with unicode-escape).
  size_t lex_string(size_t p) {
    const char quote = src_[p];
    std::string out;
    size_t i = p + 1;
    auto hex = [&](size_t n) -> uint32_t {
      if (i + n > src_.size()) error(i, "truncated escape in string");
      uint32_t v = 0;
      for (size_t k = 0; k < n; ++k) {
        const char h = src_[i++];
        v <<= 4;
        if (is_digit(h)) v |= static_cast<uint32_t>(h - '0');
        else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
        else error(i - 1, "malformed \\x, \\u or \\U escape in string");
      }
      return v;
    };
    while (true) {
      if (i >= src_.size()) error(p, "unterminated string");
      const char c = src_[i++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= src_.size()) error(p, "unterminated string");
      const char e = src_[i++];
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': unicode::append_utf8(out, hex(2)); break;
        case 'u': unicode::append_utf8(out, hex(4)); break;
        case 'U': unicode::append_utf8(out, hex(8)); break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k)
              v = v * 8 + static_cast<uint32_t>(src_[i++] - '0');
            unicode::append_utf8(out, v);
          } else {
            out += '\\';  // Python keeps an unknown escape as it is
            out += e;
          }
      }
    }
    tokens_.push_back({TokenKind::kString, std::move(out), location(p)});
    return i;
  }

  size_t lex_operator(size_t p, std::vector<char>& brackets) {
    static constexpr std::array<std::string_view, 6> kTwo = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(p, 2, op) == 0) {
        tokens_.push_back({TokenKind::kOperator, std::string(op), location(p)});
        return p + 2;
      }
    }
    const char c = src_[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
      error(p, str_cat("unexpected character '", std::string(1, c), "'"));
    if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) error(p, str_cat("unexpected '", std::string(1, c), "'"));
      if (brackets.back() != c)
        error(p, str_cat("unexpected '", std::string(1, c), "', expected '", std::string(1, brackets.back()), "'"));
      brackets.pop_back();
    }
    tokens_.push_back({TokenKind::kOperator, std::string(1, c), location(p)});
    return p + 1;
  }

  std::string src_;
  std::string_view name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;  // the last match ended a line (lstrip_blocks applies)
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, std::string_view template_name) {
  return Lexer(source, template_name).run();
}

}  // namespace ridge::jinja
