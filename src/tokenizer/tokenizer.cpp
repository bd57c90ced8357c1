#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cassert>
#include <iterator>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/encoders.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace ridge {
namespace {

using tokenizer_detail::kSpaceMark;

bool is_c_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// SentencePiece input: an optional dummy-prefix space, then every space as U+2581.
std::string escape_spaces(std::string_view text, bool dummy_prefix) {
  std::string out;
  out.reserve(text.size() + text.size() / 4 + kSpaceMark.size());
  if (dummy_prefix) out += kSpaceMark;
  for (char c : text) {
    if (c == ' ') {
      out += kSpaceMark;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
      out.push_back(' ');
      i += kSpaceMark.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

// A NORMAL byte-level BPE token back to bytes; characters that stand for no byte are
// shown the way llama.cpp shows them.
std::string unmap_bpe_text(std::string_view text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const uint32_t cp = unicode::decode_utf8(text, pos);
    const int byte = unicode::unicode_to_byte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    out += "[UNK_BYTE_0x";
    for (size_t i = start; i < pos; ++i) {
      const auto b = static_cast<uint8_t>(text[i]);
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 15]);
    }
    out += text;
    out += "]";
  }
  return out;
}

uint8_t byte_of_byte_token(std::string_view text) {  // "<0xXX>", validated by Vocab
  return static_cast<uint8_t>(std::stoi(std::string(text.substr(3, 2)), nullptr, 16));
}

// llama.cpp's clean_up_tokenization_spaces: drop the space before ?!., and before
// the contractions 's 'm 're 've, and around a lone apostrophe.
std::string clean_up_spaces(const std::string& text) {
  std::string a;
  a.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (i > 0 && text[i - 1] == ' ' && (c == '?' || c == '!' || c == '.' || c == ',')) a.pop_back();
    a.push_back(c);
  }
  std::string b;
  b.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = a[i];
    if (c == '\'' && i > 0 && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      b.pop_back();
      b.push_back(c);
      ++i;  // the space after it goes too
      continue;
    }
    b.push_back(c);
  }
  std::string out;
  out.reserve(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const char c = b[i];
    if (i > 0 && b[i - 1] == ' ' && c == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      const char x2 = i + 2 < b.size() ? b[i + 2] : '\0';
      if (x1 == 's' || x1 == 'm' || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) {
        out.pop_back();
      }
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  if (vocab_.type() == VocabType::kBytePairEncoding) {
    try {
      pre_ = std::make_unique<const PreTokenizer>(PreTokenizer::for_name(vocab_.pre()));
    } catch (const Error& e) {
      throw Error(str_cat("tokenizer: tokenizer.ggml.pre = '", vocab_.pre(),
                          "' is not a known pre-tokenizer (", e.what(), ")"));
    }
    bpe_ = BpeTables::build(vocab_);
  } else {
    spm_ = SpmTables::build(vocab_);
  }
  build_special_trie();
  build_pieces();
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_gguf(const gguf::File& file) { return Tokenizer(Vocab::from_gguf(file)); }

void Tokenizer::build_special_trie() {
  trie_.assign(1, TrieNode{});
  const auto& specials = vocab_.special_tokens();
  for (size_t rank = 0; rank < specials.size(); ++rank) {
    const std::string_view text = vocab_.text(specials[rank]);
    int32_t node = 0;
    for (char ch : text) {
      const auto byte = static_cast<uint8_t>(ch);
      auto& children = trie_[static_cast<size_t>(node)].children;
      auto it = std::lower_bound(children.begin(), children.end(), byte,
                                 [](const auto& child, uint8_t b) { return child.first < b; });
      if (it != children.end() && it->first == byte) {
        node = it->second;
      } else {
        const auto next = static_cast<int32_t>(trie_.size());
        children.insert(it, {byte, next});
        trie_.emplace_back();  // invalidates `children`; not used again below
        node = next;
      }
    }
    TrieNode& end = trie_[static_cast<size_t>(node)];
    if (end.rank < 0) end.rank = static_cast<int32_t>(rank);  // same text: the first wins
    trie_first_byte_[static_cast<uint8_t>(text[0])] = true;
  }
}

void Tokenizer::build_pieces() {
  const int32_t n = vocab_.n_tokens();
  // A piece is never longer than its text (decoding only shortens): one reservation.
  size_t text_bytes = 0;
  for (int32_t id = 0; id < n; ++id) text_bytes += vocab_.text(id).size();
  pieces_.reserve(static_cast<size_t>(n), text_bytes, 0);
  const bool spm = vocab_.type() == VocabType::kSentencePiece;
  for (int32_t id = 0; id < n; ++id) {
    const TokenData t = vocab_.token(id);
    switch (t.type) {
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        pieces_.append(t.text);
        break;
      case TokenType::kNormal:
        pieces_.append(spm ? unescape_spaces(t.text) : unmap_bpe_text(t.text));
        break;
      case TokenType::kByte: {
        const char byte = static_cast<char>(byte_of_byte_token(t.text));
        pieces_.append(std::string_view(&byte, 1));
        break;
      }
      case TokenType::kUnused:
      case TokenType::kUndefined:
        pieces_.append("");  // prints nothing, as in llama.cpp
        break;
    }
  }
  pieces_.shrink_to_fit();
}

std::vector<Tokenizer::Fragment> Tokenizer::split_special(std::string_view text, bool parse_special,
                                                          const std::span<const TextRange>* markup) const {
  if (text.empty()) return {};
  const auto& specials = vocab_.special_tokens();
  auto inside_markup = [&](size_t begin, size_t end) {
    // The last range starting at or before `begin` must reach `end`.
    auto it = std::upper_bound(markup->begin(), markup->end(), begin,
                               [](size_t b, const TextRange& r) { return b < r.begin; });
    return it != markup->begin() && std::prev(it)->end >= end;
  };
  auto allowed = [&](int32_t id, size_t begin, size_t end) {
    // Without parse_special only USER_DEFINED tokens are split out (llama.cpp, HF).
    if (vocab_.token_type(id) == TokenType::kUserDefined) return true;
    return parse_special && (markup == nullptr || inside_markup(begin, end));
  };

  // Every occurrence of every special token: (rank, position).
  std::vector<std::pair<int32_t, uint32_t>> found;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!trie_first_byte_[static_cast<uint8_t>(text[i])]) continue;
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const auto& children = trie_[static_cast<size_t>(node)].children;
      const auto byte = static_cast<uint8_t>(text[j]);
      auto it = std::lower_bound(children.begin(), children.end(), byte,
                                 [](const auto& child, uint8_t b) { return child.first < b; });
      if (it == children.end() || it->first != byte) break;
      node = it->second;
      const int32_t rank = trie_[static_cast<size_t>(node)].rank;
      if (rank >= 0 && allowed(specials[static_cast<size_t>(rank)], i, j + 1)) {
        found.emplace_back(rank, static_cast<uint32_t>(i));
      }
    }
  }
  if (found.empty()) return {{Vocab::kNoToken, text}};

  // llama.cpp takes the special tokens one at a time, longest first, and splits every
  // remaining stretch of raw text at that token's non-overlapping occurrences, left to
  // right. Replaying the occurrences in that order against a "consumed" map gives the
  // same split in one pass over the text.
  std::sort(found.begin(), found.end());
  std::vector<uint8_t> consumed(text.size(), 0);
  std::vector<std::pair<uint32_t, int32_t>> accepted;  // (position, token)
  for (const auto& [rank, pos] : found) {
    const int32_t id = specials[static_cast<size_t>(rank)];
    const TokenData t = vocab_.token(id);
    const size_t end = pos + t.text.size();
    if (std::any_of(consumed.begin() + pos, consumed.begin() + static_cast<std::ptrdiff_t>(end),
                    [](uint8_t c) { return c != 0; })) {
      continue;
    }
    std::fill(consumed.begin() + pos, consumed.begin() + static_cast<std::ptrdiff_t>(end), 1);
    accepted.emplace_back(pos, id);
    if (t.lstrip) {
      for (size_t k = pos; k > 0 && !consumed[k - 1] && is_c_space(text[k - 1]); --k) {
        consumed[k - 1] = 1;
      }
    }
    if (t.rstrip) {
      for (size_t k = end; k < text.size() && !consumed[k] && is_c_space(text[k]); ++k) {
        consumed[k] = 1;
      }
    }
  }
  std::sort(accepted.begin(), accepted.end());

  std::vector<Fragment> fragments;
  auto add_raw = [&](size_t from, size_t to) {
    // Stripped whitespace sits only at the ends of a stretch between two tokens.
    while (from < to && consumed[from]) ++from;
    while (to > from && consumed[to - 1]) --to;
    if (from < to) fragments.push_back({Vocab::kNoToken, text.substr(from, to - from)});
  };
  size_t cursor = 0;
  for (const auto& [pos, id] : accepted) {
    add_raw(cursor, pos);
    fragments.push_back({id, {}});
    cursor = pos + vocab_.text(id).size();
  }
  add_raw(cursor, text.size());
  return fragments;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  return encode_fragments(split_special(text, parse_special), text.size(), add_special);
}

std::vector<int32_t> Tokenizer::encode_with_markup(std::string_view text, std::span<const TextRange> markup,
                                                   bool add_special) const {
  for (size_t i = 0; i < markup.size(); ++i)
    assert(markup[i].begin <= markup[i].end && markup[i].end <= text.size() &&
           (i == 0 || markup[i - 1].end <= markup[i].begin));
  return encode_fragments(split_special(text, /*parse_special=*/true, &markup), text.size(), add_special);
}

std::vector<int32_t> Tokenizer::encode_fragments(std::span<const Fragment> fragments, size_t text_size,
                                                 bool add_special) const {
  std::vector<int32_t> out;
  out.reserve(text_size / 3 + 4);
  if (add_special && vocab_.add_bos()) out.push_back(vocab_.bos());

  if (vocab_.type() == VocabType::kSentencePiece) {
    SpmEncoder encoder(vocab_, *spm_);
    bool after_special = true;  // the dummy prefix goes at the start and after specials
    for (const Fragment& f : fragments) {
      if (f.token != Vocab::kNoToken) {
        out.push_back(f.token);
        after_special = true;
        continue;
      }
      encoder.encode(escape_spaces(f.text, vocab_.add_space_prefix() && after_special), out);
      after_special = false;
    }
  } else {
    BpeEncoder encoder(vocab_, *bpe_);
    for (const Fragment& f : fragments) {
      if (f.token != Vocab::kNoToken) {
        out.push_back(f.token);
        continue;
      }
      for (std::string_view word : pre_->split(f.text)) encoder.encode_word(word, out);
    }
  }

  if (add_special && vocab_.add_eos()) out.push_back(vocab_.eos());
  return out;
}

void Tokenizer::check_id(int32_t id) const {
  if (!vocab_.contains(id)) {
    throw Error(str_cat("tokenizer: token id ", id, " is out of range [0, ", vocab_.n_tokens(), ")"));
  }
}

std::string_view Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  check_id(id);
  if (!render_special) {
    // CONTROL and UNKNOWN tokens print only with render_special.
    const TokenType type = vocab_.token_type(id);
    if (type == TokenType::kControl || type == TokenType::kUnknown) return {};
  }
  return pieces_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string out;
  // The token that carries the dummy-prefix space: the first one after an optional BOS.
  size_t strip_at = ids.size();
  if (options.strip_leading_space && vocab_.add_space_prefix() && !ids.empty()) {
    strip_at = (ids[0] == vocab_.bos() && vocab_.bos() != Vocab::kNoToken) ? 1 : 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string_view piece = token_to_piece(ids[i], options.render_special);
    if (i == strip_at && !piece.empty() && piece[0] == ' ') {
      out += piece.substr(1);
    } else {
      out += piece;
    }
  }
  if (options.clean_up_spaces && vocab_.clean_spaces()) out = clean_up_spaces(out);
  return out;
}

std::string vocabulary_difference(const Tokenizer& a, const Tokenizer& b) {
  if (a.n_vocab() != b.n_vocab()) return str_cat(a.n_vocab(), " tokens against ", b.n_vocab());
  if (a.bos() != b.bos()) return str_cat("BOS is token ", a.bos(), " against ", b.bos());
  if (a.eos() != b.eos()) return str_cat("EOS is token ", a.eos(), " against ", b.eos());
  for (int32_t id = 0; id < a.n_vocab(); ++id) {
    const std::string_view pa = a.token_to_piece(id, /*render_special=*/true);
    const std::string_view pb = b.token_to_piece(id, /*render_special=*/true);
    if (pa != pb) {
      return str_cat("token ", id, " is '", std::string(pa), "' against '", std::string(pb), "'");
    }
    if (a.is_end_of_generation(id) != b.is_end_of_generation(id)) {
      return str_cat("token ", id, " ('", std::string(pa), "') ends generation in only one of them");
    }
  }
  return "";
}

}  // namespace ridge
