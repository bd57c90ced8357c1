// The GBNF parser (see grammar.h): text -> rules of symbols -> checks (undefined rules, left
// recursion) -> the flat byte-level Grammar.
#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ridge::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr int64_t kMaxRepeat = 10000;  // bound on {m,n}: each copy is compiled out
constexpr int kMaxGroupDepth = 100;     // bound on nested ( ): the parser recurses once per level

// A symbol before flattening: a byte set or a rule reference.
struct Sym {
  bool is_rule = false;
  int32_t value = 0;
};
using Seq = std::vector<Sym>;
using Alts = std::vector<Seq>;

struct CodeRange {
  uint32_t lo, hi;
};

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Byte-range sequences whose concatenations are exactly the UTF-8 encodings of the code
// points in [lo, hi] (lo and hi of the same encoded length): split until every position
// below the first varies over its whole continuation range (the method of RE2 and Rust's
// utf8-ranges).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(lo, a);
  append_utf8(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t k = 0; k < a.size(); ++k) seq.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
  out.push_back(std::move(seq));
}

class Parser {
 public:
  explicit Parser(std::string_view text) : src_(text) {}

  Grammar run(std::string_view root_name) {
    skip_space(true);
    while (pos_ < src_.size()) {
      parse_rule();
      skip_space(true);
    }
    for (size_t r = 0; r < rules_.size(); ++r)
      if (!defined_[r]) fail_at(first_use_[r], str_cat("rule '", names_[r], "' is used but never defined"));
    const auto root = ids_.find(std::string(root_name));
    if (root == ids_.end() || !defined_[static_cast<size_t>(root->second)])
      throw GrammarError(str_cat("grammar: no rule named '", root_name, "' (the start rule)"));
    check_left_recursion();
    return flatten(root->second);
  }

 private:
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw GrammarError(str_cat("grammar: line ", line, ", column ", column, ": ", what));
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  bool eof() const { return pos_ >= src_.size(); }
  char peek() const { return eof() ? '\0' : src_[pos_]; }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  void skip_space(bool newlines) {
    while (!eof()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else if (c == '#') {
        while (!eof() && peek() != '\n') ++pos_;
      } else {
        return;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!eof() && is_name_char(peek())) ++pos_;
    if (pos_ == start) fail(str_cat("expected a rule name, found ", describe_here()));
    return std::string(src_.substr(start, pos_ - start));
  }

  std::string describe_here() const {
    if (eof()) return "the end of the grammar";
    const char c = peek();
    if (c == '\n') return "the end of the line";
    return str_cat("'", c, "'");
  }

  int32_t rule_id(const std::string& name, size_t used_at) {
    auto [it, inserted] = ids_.emplace(name, static_cast<int32_t>(rules_.size()));
    if (inserted) {
      names_.push_back(name);
      rules_.emplace_back();
      defined_.push_back(false);
      first_use_.push_back(used_at);
    }
    return it->second;
  }

  int32_t new_rule(const std::string& base, Alts alts) {
    const int32_t id = rule_id(str_cat(base, "_", ++n_generated_), pos_);
    rules_[static_cast<size_t>(id)] = std::move(alts);
    defined_[static_cast<size_t>(id)] = true;
    return id;
  }

  void parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") fail(str_cat("expected '::=' after rule name '", name, "'"));
    pos_ += 3;
    skip_space(false);
    current_ = name;
    const int32_t id = rule_id(name, start);
    if (defined_[static_cast<size_t>(id)]) fail_at(start, str_cat("rule '", name, "' is defined twice"));
    defined_[static_cast<size_t>(id)] = true;
    rules_[static_cast<size_t>(id)] = parse_alternatives(false);
    skip_space(false);
    if (!eof() && peek() != '\n') fail(str_cat("expected the end of rule '", name, "', found ", describe_here()));
  }

  Alts parse_alternatives(bool nested) {
    Alts alts;
    alts.push_back(parse_sequence(nested));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(nested));
    }
    return alts;
  }

  Seq parse_sequence(bool nested) {
    Seq seq;
    size_t last = seq.size();  // where the last item (the operand of a repetition) starts
    bool have_item = false;
    for (;;) {
      const char c = peek();
      if (c == '"') {
        last = seq.size();
        for (char b : parse_literal()) seq.push_back(bytes_sym(single(static_cast<uint8_t>(b))));
        have_item = true;
      } else if (c == '[') {
        last = seq.size();
        seq.push_back(parse_class());
        have_item = true;
      } else if (c == '.') {
        ++pos_;
        last = seq.size();
        seq.push_back(class_sym({{0, kMaxCodePoint}}));
        have_item = true;
      } else if (c == '(') {
        if (++group_depth_ > kMaxGroupDepth) fail(str_cat("groups nested deeper than ", kMaxGroupDepth, " levels"));
        ++pos_;
        skip_space(true);
        Alts group = parse_alternatives(true);
        --group_depth_;
        if (peek() != ')') fail(str_cat("expected ')' to close the group, found ", describe_here()));
        ++pos_;
        last = seq.size();
        seq.push_back(Sym{true, new_rule(current_, std::move(group))});
        have_item = true;
      } else if (is_name_char(c)) {
        const size_t at = pos_;
        const std::string name = parse_name();
        last = seq.size();
        seq.push_back(Sym{true, rule_id(name, at)});
        have_item = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) fail(str_cat("'", c, "' has nothing before it to repeat"));
        repeat(seq, last);
        have_item = false;  // "a**" is an error, as in llama.cpp
      } else {
        return seq;
      }
      skip_space(nested);
    }
  }

  // Replaces seq[last, end) by its repetition as the operator at pos_ says.
  void repeat(Seq& seq, size_t last) {
    int64_t min = 0, max = -1;  // -1: unbounded
    const char op = peek();
    ++pos_;
    if (op == '+') {
      min = 1;
    } else if (op == '?') {
      max = 1;
    } else if (op == '{') {
      skip_space(false);
      min = parse_int();
      skip_space(false);
      if (peek() == ',') {
        ++pos_;
        skip_space(false);
        max = peek() == '}' ? -1 : parse_int();
        skip_space(false);
      } else {
        max = min;
      }
      if (peek() != '}') fail(str_cat("expected '}' to close the repetition, found ", describe_here()));
      ++pos_;
      if (max >= 0 && max < min) fail(str_cat("repetition {", min, ",", max, "}: the maximum is below the minimum"));
      if (min > kMaxRepeat || max > kMaxRepeat) fail(str_cat("repetition counts above ", kMaxRepeat, " are not supported"));
    }
    Seq item(seq.begin() + static_cast<ptrdiff_t>(last), seq.end());
    seq.resize(last);
    const Sym x = item.size() == 1 ? item[0] : Sym{true, new_rule(current_, {item})};
    for (int64_t i = 0; i < min; ++i) seq.push_back(x);
    if (max < 0) {  // star ::= x star | ε
      const int32_t star = new_rule(current_, {});
      rules_[static_cast<size_t>(star)] = {{x, Sym{true, star}}, {}};
      seq.push_back(Sym{true, star});
    } else if (max > min) {  // opt_1 ::= x opt_2 | ε ... opt_k ::= x | ε: no ambiguity
      int32_t inner = -1;
      for (int64_t i = min; i < max; ++i) {
        Seq s{x};
        if (inner >= 0) s.push_back(Sym{true, inner});
        inner = new_rule(current_, {s, {}});
      }
      seq.push_back(Sym{true, inner});
    }
  }

  int64_t parse_int() {
    const size_t start = pos_;
    int64_t v = 0;
    while (!eof() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail(str_cat("repetition counts above ", kMaxRepeat, " are not supported"));
      ++pos_;
    }
    if (pos_ == start) fail(str_cat("expected a number in the repetition, found ", describe_here()));
    return v;
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  uint32_t parse_char() {
    if (eof()) fail("unexpected end of the grammar inside a literal or class");
    const auto c = static_cast<uint8_t>(src_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (eof()) fail("unexpected end of the grammar after '\\'");
      const char e = src_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint8_t>(e);
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: pos_ -= 2; fail(str_cat("unknown escape '\\", e, "'"));
      }
    }
    const int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > src_.size()) fail("invalid UTF-8 in the grammar");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<uint8_t>(src_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) fail(str_cat("expected ", digits, " hex digits in the escape"));
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint) fail(str_cat("code point ", v, " is beyond U+10FFFF"));
    return v;
  }

  std::string parse_literal() {
    ++pos_;  // the opening quote
    std::string bytes;
    while (peek() != '"') {
      if (eof() || peek() == '\n') fail("unterminated string literal");
      append_utf8(parse_char(), bytes);
    }
    ++pos_;
    return bytes;
  }

  Sym parse_class() {
    ++pos_;  // '['
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodeRange> ranges;
    while (peek() != ']') {
      if (eof() || peek() == '\n') fail("unterminated character class");
      const uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < src_.size() && src_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail("character range is reversed");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    std::sort(ranges.begin(), ranges.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
    if (negate) {
      std::vector<CodeRange> complement;
      uint32_t next = 0;
      for (const CodeRange& r : ranges) {
        if (r.lo > next) complement.push_back({next, r.lo - 1});
        next = std::max(next, r.hi + 1);
      }
      if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
      ranges = std::move(complement);
    }
    if (ranges.empty()) fail("the character class matches nothing");
    return class_sym(ranges);
  }

  // A set of code points as one byte set (ASCII only) or a helper rule of UTF-8 sequences.
  Sym class_sym(const std::vector<CodeRange>& ranges) {
    ByteSet ascii;
    bool has_ascii = false;
    std::vector<std::vector<std::pair<uint8_t, uint8_t>>> sequences;
    for (CodeRange r : ranges) {
      for (auto [lo, hi] : {std::pair<uint32_t, uint32_t>{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF},
                            {0xE000, 0xFFFF}, {0x10000, kMaxCodePoint}}) {
        const uint32_t a = std::max(lo, r.lo), b = std::min(hi, r.hi);
        if (a > b) continue;
        if (hi == 0x7F) {
          ascii.add_range(static_cast<uint8_t>(a), static_cast<uint8_t>(b));
          has_ascii = true;
        } else {
          utf8_sequences(a, b, sequences);
        }
      }
    }
    if (sequences.empty()) return bytes_sym(ascii);
    Alts alts;
    if (has_ascii) alts.push_back({bytes_sym(ascii)});
    for (const auto& s : sequences) {
      Seq seq;
      for (auto [lo, hi] : s) {
        ByteSet set;
        set.add_range(lo, hi);
        seq.push_back(bytes_sym(set));
      }
      alts.push_back(std::move(seq));
    }
    return Sym{true, new_rule(current_, std::move(alts))};
  }

  static ByteSet single(uint8_t b) {
    ByteSet s;
    s.add(b);
    return s;
  }

  Sym bytes_sym(const ByteSet& set) {
    for (size_t i = 0; i < sets_.size(); ++i)
      if (sets_[i] == set) return Sym{false, static_cast<int32_t>(i)};
    sets_.push_back(set);
    return Sym{false, static_cast<int32_t>(sets_.size() - 1)};
  }

  // A rule reachable from itself without consuming a byte would send the top-down matcher
  // into an endless expansion: refuse it, naming the cycle.
  void check_left_recursion() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& s : rules_[r]) {
          if (std::all_of(s.begin(), s.end(),
                          [&](const Sym& x) { return x.is_rule && nullable[static_cast<size_t>(x.value)]; })) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> left(n);  // rules a rule may start with
    for (size_t r = 0; r < n; ++r)
      for (const Seq& s : rules_[r])
        for (const Sym& x : s) {
          if (!x.is_rule) break;
          left[r].push_back(x.value);
          if (!nullable[static_cast<size_t>(x.value)]) break;
        }
    // Depth-first with an explicit stack (rule, next edge): a chain of thousands of rules must
    // not overflow the thread's stack.
    std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> path;
    for (size_t start = 0; start < n; ++start) {
      if (color[start] != 0) continue;
      color[start] = 1;
      path.emplace_back(static_cast<int32_t>(start), 0);
      while (!path.empty()) {
        auto& [r, edge] = path.back();
        const std::vector<int32_t>& out = left[static_cast<size_t>(r)];
        if (edge == out.size()) {
          color[static_cast<size_t>(r)] = 2;
          path.pop_back();
          continue;
        }
        const int32_t next = out[edge++];
        if (color[static_cast<size_t>(next)] == 1) {
          std::string cycle;
          auto from = std::find_if(path.begin(), path.end(), [&](const auto& p) { return p.first == next; });
          for (auto it = from; it != path.end(); ++it) cycle += names_[static_cast<size_t>(it->first)] + " -> ";
          throw GrammarError(str_cat("grammar: rule '", names_[static_cast<size_t>(next)],
                                     "' is left-recursive (", cycle, names_[static_cast<size_t>(next)],
                                     " without consuming a character); rewrite it right-recursively"));
        }
        if (color[static_cast<size_t>(next)] == 0) {
          color[static_cast<size_t>(next)] = 1;
          path.emplace_back(next, 0);
        }
      }
    }
  }

  Grammar flatten(int32_t root) const {
    Grammar g;
    g.root = root;
    g.rule_names = names_;
    g.byte_sets = sets_;
    g.rules.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Seq& s : rules_[r]) {
        g.rules[r].push_back(static_cast<int32_t>(g.elements.size()));
        for (const Sym& x : s) g.elements.push_back(Element{x.is_rule ? Element::Kind::kRule : Element::Kind::kBytes, x.value});
        g.elements.push_back(Element{});
      }
    }
    return g;
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::map<std::string, int32_t> ids_;
  std::vector<std::string> names_;
  std::vector<Alts> rules_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::vector<ByteSet> sets_;
  std::string current_;  // the rule being parsed, for naming helper rules
  int n_generated_ = 0;
  int group_depth_ = 0;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::string_view root) { return Parser(text).run(root); }

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    const auto b = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (b < 0x20 || b == 0x7F) {
      const char* hex = "0123456789ABCDEF";
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 15];
    } else {
      out += c;  // UTF-8 passes through as the same code points
    }
  }
  return out + "\"";
}

}  // namespace ridge::grammar
