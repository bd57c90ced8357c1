#include "tokenizer/regex.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "core/error.h"
#include "tokenizer/regex_syntax.h"
#include "tokenizer/unicode.h"

namespace ridge {
namespace {

using regex_syntax::Assertion;
using regex_syntax::CharClass;
using regex_syntax::is_ascii_word;
using regex_syntax::kUnbounded;
using regex_syntax::Node;

constexpr size_t kNoMatch = std::numeric_limits<size_t>::max();
constexpr size_t kMaxProgramSize = 1u << 20;  // instructions, after expanding {n,m}

uint8_t make_info(uint32_t cp) {
  return static_cast<uint8_t>(unicode::category(cp)) |
         (unicode::is_whitespace(cp) ? DecodedText::kWhitespaceBit : 0);
}

// A function-local static, so it is built on first use and never before unicode's tables.
const std::array<uint8_t, 128>& ascii_info() {
  static const std::array<uint8_t, 128> table = [] {
    std::array<uint8_t, 128> t{};
    for (uint32_t cp = 0; cp < 128; ++cp) t[cp] = make_info(cp);
    return t;
  }();
  return table;
}

enum class Op : uint8_t {
  kChar,         // a: code point
  kClass,        // a: class
  kRepeatClass,  // a: class, b: min, c: max; greedy run that gives back one at a time
  kSplit,        // try a, on failure b
  kJump,         // a
  kMatch,
  kAssert,       // a: Assertion
  kLookahead,    // a: body (ends in kMatch), b: continuation, c: 1 if negative
};

struct Inst {
  Op op;
  uint32_t a = 0;
  uint32_t b = 0;
  uint32_t c = 0;
};

}  // namespace

struct Regex::Program {
  std::vector<Inst> code;
  std::vector<CharClass> classes;
  // Which code points can begin a match (only when the pattern cannot match empty).
  bool use_first_filter = false;
  std::array<uint64_t, 2> first_ascii{};
  bool first_non_ascii = true;
  bool non_ascii_space_as_vt = false;  // RegexOptions::llama_cpp
};

namespace {

class Compiler {
 public:
  explicit Compiler(Regex::Program& program) : p_(program) {}

  void emit(const Node& n) {
    if (p_.code.size() > kMaxProgramSize) throw Error("regex: pattern too large after expanding repeats");
    switch (n.kind) {
      case Node::Kind::kEmpty:
        break;
      case Node::Kind::kChar:
        push({Op::kChar, n.value});
        break;
      case Node::Kind::kClass:
        push({Op::kClass, n.value});
        break;
      case Node::Kind::kConcat:
        for (const Node& child : n.children) emit(child);
        break;
      case Node::Kind::kAlternation: {
        std::vector<uint32_t> exits;
        for (size_t k = 0; k < n.children.size(); ++k) {
          const bool last = k + 1 == n.children.size();
          const uint32_t split = last ? 0 : push({Op::kSplit});
          if (!last) p_.code[split].a = here();
          emit(n.children[k]);
          if (!last) {
            exits.push_back(push({Op::kJump}));
            p_.code[split].b = here();
          }
        }
        for (uint32_t e : exits) p_.code[e].a = here();
        break;
      }
      case Node::Kind::kRepeat:
        emit_repeat(n);
        break;
      case Node::Kind::kLookahead: {
        const uint32_t look = push({Op::kLookahead, 0, 0, n.negated ? 1u : 0u});
        p_.code[look].a = here();
        emit(n.children[0]);
        push({Op::kMatch});
        p_.code[look].b = here();
        break;
      }
      case Node::Kind::kAssert:
        push({Op::kAssert, n.value});
        break;
    }
  }

 private:
  uint32_t here() const { return static_cast<uint32_t>(p_.code.size()); }
  uint32_t push(Inst inst) {
    p_.code.push_back(inst);
    return here() - 1;
  }

  void emit_repeat(const Node& n) {
    const Node& child = n.children[0];
    // One code point per iteration and greedy: a single instruction that scans the run.
    if (n.greedy && (child.kind == Node::Kind::kClass || child.kind == Node::Kind::kChar)) {
      uint32_t cls = child.value;
      if (child.kind == Node::Kind::kChar) {
        CharClass single;
        single.add_range(child.value, child.value);
        single.finalize();
        p_.classes.push_back(std::move(single));
        cls = static_cast<uint32_t>(p_.classes.size() - 1);
      }
      push({Op::kRepeatClass, cls, n.min, n.max});
      return;
    }
    for (uint32_t k = 0; k < n.min; ++k) emit(child);
    if (n.max == kUnbounded) {
      const uint32_t loop = push({Op::kSplit});
      emit(child);
      push({Op::kJump, loop});
      set_split(loop, loop + 1, here(), n.greedy);
      return;
    }
    std::vector<uint32_t> splits;
    for (uint32_t k = n.min; k < n.max; ++k) {
      splits.push_back(push({Op::kSplit}));
      emit(child);
    }
    for (uint32_t s : splits) set_split(s, s + 1, here(), n.greedy);
  }

  void set_split(uint32_t at, uint32_t body, uint32_t exit, bool greedy) {
    p_.code[at].a = greedy ? body : exit;
    p_.code[at].b = greedy ? exit : body;
  }

  Regex::Program& p_;
};

// Adds the code points that can start a match of n to the filter; true if n can match empty.
bool add_first_set(const Node& n, Regex::Program& p) {
  switch (n.kind) {
    case Node::Kind::kChar:
      if (n.value < 128) {
        p.first_ascii[n.value >> 6] |= uint64_t{1} << (n.value & 63);
      } else {
        p.first_non_ascii = true;
      }
      return false;
    case Node::Kind::kClass: {
      const CharClass& cls = p.classes[n.value];
      p.first_ascii[0] |= cls.ascii[0];
      p.first_ascii[1] |= cls.ascii[1];
      p.first_non_ascii |= cls.may_match_non_ascii();
      return false;
    }
    case Node::Kind::kConcat:
      for (const Node& child : n.children) {
        if (!add_first_set(child, p)) return false;
      }
      return true;
    case Node::Kind::kAlternation: {
      bool any_empty = false;
      for (const Node& child : n.children) any_empty |= add_first_set(child, p);
      return any_empty;
    }
    case Node::Kind::kRepeat:
      return add_first_set(n.children[0], p) || n.min == 0;
    default:
      return true;  // empty, assertions and lookaheads consume nothing
  }
}

// One backtracking frame: resume at pc with pos, or (give_back) retry a greedy run of
// kRepeatClass one code point shorter, down to lowest.
struct Frame {
  uint32_t pc;
  bool give_back;
  size_t pos;
  size_t lowest;
};

class Machine {
 public:
  Machine(const Regex::Program& p, const DecodedText& t, size_t begin, size_t end)
      : p_(p), t_(t), begin_(begin), end_(end), stack_(scratch()) {
    stack_.clear();
  }

  // The code point the pattern sees at pos (see RegexOptions::llama_cpp).
  uint32_t code_point(size_t pos) const {
    const uint32_t cp = t_.code_point(pos);
    if (p_.non_ascii_space_as_vt && cp >= 128 && t_.is_whitespace(pos)) return '\v';
    return cp;
  }

  // End of the first match starting at pos in priority order, or kNoMatch.
  size_t match_at(size_t pos, bool allow_empty) { return run(0, pos, pos, allow_empty, true); }

  bool may_start(size_t pos) const {
    if (!p_.use_first_filter) return true;
    if (pos >= end_) return false;
    const uint32_t cp = code_point(pos);
    if (cp < 128) return (p_.first_ascii[cp >> 6] >> (cp & 63)) & 1;
    return p_.first_non_ascii;
  }

 private:
  static std::vector<Frame>& scratch() {
    thread_local std::vector<Frame> frames;
    return frames;
  }

  bool is_word_at(size_t pos) const {
    return pos >= begin_ && pos < end_ && is_ascii_word(t_.code_point(pos));
  }

  bool check(Assertion a, size_t pos) const {
    switch (a) {
      case Assertion::kBegin: return pos == begin_;
      case Assertion::kEnd: return pos == end_;
      case Assertion::kWordBoundary: return is_word_at(pos - 1) != is_word_at(pos);
      case Assertion::kNotWordBoundary: return is_word_at(pos - 1) == is_word_at(pos);
    }
    return false;
  }

  bool class_at(uint32_t cls, size_t pos) const {
    return p_.classes[cls].matches(code_point(pos), t_.info(pos));
  }

  size_t run(uint32_t pc, size_t pos, size_t start, bool allow_empty, bool top_level) {
    const size_t base = stack_.size();
    for (;;) {
      const Inst& in = p_.code[pc];
      bool ok = false;
      switch (in.op) {
        case Op::kChar:
          if (pos < end_ && code_point(pos) == in.a) ++pos, ++pc, ok = true;
          break;
        case Op::kClass:
          if (pos < end_ && class_at(in.a, pos)) ++pos, ++pc, ok = true;
          break;
        case Op::kRepeatClass: {
          const size_t limit = in.c == kUnbounded ? end_ : std::min(end_, pos + in.c);
          size_t run_end = pos;
          while (run_end < limit && class_at(in.a, run_end)) ++run_end;
          if (run_end - pos < in.b) break;
          if (run_end > pos + in.b) stack_.push_back({pc + 1, true, run_end, pos + in.b});
          pos = run_end, ++pc, ok = true;
          break;
        }
        case Op::kSplit:
          stack_.push_back({in.b, false, pos, 0});
          pc = in.a, ok = true;
          break;
        case Op::kJump:
          pc = in.a, ok = true;
          break;
        case Op::kMatch:
          if (top_level && !allow_empty && pos == start) break;
          stack_.resize(base);
          return pos;
        case Op::kAssert:
          if (check(static_cast<Assertion>(in.a), pos)) ++pc, ok = true;
          break;
        case Op::kLookahead: {
          // A lookahead is atomic: its first match decides, its alternatives are dropped.
          const bool found = run(in.a, pos, pos, true, false) != kNoMatch;
          if (found != (in.c != 0)) pc = in.b, ok = true;
          break;
        }
      }
      if (ok) continue;
      // Backtrack.
      if (stack_.size() == base) return kNoMatch;
      Frame& f = stack_.back();
      pc = f.pc;
      if (f.give_back) {
        pos = --f.pos;
        if (f.pos == f.lowest) stack_.pop_back();
      } else {
        pos = f.pos;
        stack_.pop_back();
      }
    }
  }

  const Regex::Program& p_;
  const DecodedText& t_;
  size_t begin_;
  size_t end_;
  std::vector<Frame>& stack_;
};

}  // namespace

DecodedText::DecodedText(std::string_view utf8) : utf8_(utf8) {
  if (utf8.size() >= std::numeric_limits<uint32_t>::max()) {
    throw Error(str_cat("pre-tokenizer: text of ", utf8.size(), " bytes is too long (limit 4 GiB)"));
  }
  code_points_.reserve(utf8.size());
  info_.reserve(utf8.size());
  byte_offsets_.reserve(utf8.size() + 1);
  const std::array<uint8_t, 128>& ascii = ascii_info();
  size_t pos = 0;
  while (pos < utf8.size()) {
    byte_offsets_.push_back(static_cast<uint32_t>(pos));
    const auto byte = static_cast<uint8_t>(utf8[pos]);
    uint32_t cp = byte;
    if (byte < 0x80) {
      ++pos;
      info_.push_back(ascii[byte]);
    } else {
      cp = unicode::decode_utf8(utf8, pos);
      info_.push_back(make_info(cp));
    }
    code_points_.push_back(cp);
  }
  byte_offsets_.push_back(static_cast<uint32_t>(pos));
}

Regex::Regex(std::string_view pattern, RegexOptions options)
    : pattern_(pattern), program_(nullptr) {
  auto program = std::make_unique<Program>();
  const Node root = regex_syntax::parse(pattern, options, program->classes);
  Compiler compiler(*program);
  compiler.emit(root);
  program->code.push_back({Op::kMatch});
  program->non_ascii_space_as_vt = options.llama_cpp;
  program->first_non_ascii = false;
  program->use_first_filter = !add_first_set(root, *program);
  if (!program->use_first_filter) program->first_non_ascii = true;
  program_ = std::move(program);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::optional<size_t> Regex::match_at(const DecodedText& text, size_t begin, size_t end, size_t pos,
                                      bool allow_empty) const {
  Machine m(*program_, text, begin, end);
  const size_t r = m.match_at(pos, allow_empty);
  if (r == kNoMatch) return std::nullopt;
  return r;
}

void Regex::find_all(const DecodedText& text, size_t begin, size_t end, std::vector<Match>& out) const {
  Machine m(*program_, text, begin, end);
  size_t pos = begin;
  bool after_empty = false;
  while (pos <= end) {
    size_t found = kNoMatch;
    size_t found_at = pos;
    if (after_empty) {
      found = m.match_at(pos, false);
      if (found == kNoMatch) ++pos;
    }
    if (found == kNoMatch) {
      for (size_t p = pos; p <= end; ++p) {
        if (!m.may_start(p)) continue;
        found = m.match_at(p, true);
        if (found != kNoMatch) {
          found_at = p;
          break;
        }
      }
    }
    if (found == kNoMatch) break;
    out.push_back({found_at, found});
    after_empty = found == found_at;
    pos = found;
  }
}

std::optional<size_t> Regex::match_prefix(std::string_view utf8, size_t byte_pos) const {
  const DecodedText text(utf8);
  // Code point index of byte_pos: the first code point starting at or after it.
  size_t index = 0;
  while (index < text.size() && text.byte_offset(index) < byte_pos) ++index;
  const auto end = match_at(text, 0, text.size(), index);
  if (!end) return std::nullopt;
  return text.byte_offset(*end) - text.byte_offset(index);
}

std::vector<std::string_view> Regex::find_all(std::string_view utf8) const {
  const DecodedText text(utf8);
  std::vector<Match> matches;
  find_all(text, 0, text.size(), matches);
  std::vector<std::string_view> out;
  out.reserve(matches.size());
  for (const Match& m : matches) {
    out.push_back(utf8.substr(text.byte_offset(m.begin), text.byte_offset(m.end) - text.byte_offset(m.begin)));
  }
  return out;
}

}  // namespace ridge
