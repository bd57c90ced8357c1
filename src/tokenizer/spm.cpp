// SentencePiece BPE merging (llama.cpp "SPM" semantics) and the per-call word cache.
#include <algorithm>

#include "core/error.h"
#include "tokenizer/encoders.h"

namespace ridge {

namespace tokenizer_detail {

bool WordCache::emit(std::string_view word, std::vector<int32_t>& out) const {
  auto it = spans_.find(word);
  if (it == spans_.end()) return false;
  const auto [offset, count] = it->second;
  out.insert(out.end(), ids_.begin() + offset, ids_.begin() + offset + count);
  return true;
}

void WordCache::store(std::string_view word, const std::vector<int32_t>& out, size_t from) {
  if (word.size() > kMaxWordBytes) return;
  const auto offset = static_cast<uint32_t>(ids_.size());
  ids_.insert(ids_.end(), out.begin() + static_cast<std::ptrdiff_t>(from), out.end());
  spans_.emplace(std::string(word),
                 std::pair{offset, static_cast<uint32_t>(out.size() - from)});
}

}  // namespace tokenizer_detail

using tokenizer_detail::kSpaceMark;
using tokenizer_detail::utf8_sequence_length;

namespace {

// A U+2581 at byte k that does not follow another U+2581.
bool space_mark_after_other(std::string_view text, size_t k) {
  return text.compare(k, kSpaceMark.size(), kSpaceMark) == 0 &&
         (k < kSpaceMark.size() ||
          text.compare(k - kSpaceMark.size(), kSpaceMark.size(), kSpaceMark) != 0);
}

// Heap order: highest score on top, ties to the leftmost pair (as llama.cpp).
struct SpmBigramLess {
  template <class B>
  bool operator()(const B& l, const B& r) const {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  }
};

}  // namespace

std::unique_ptr<SpmTables> SpmTables::build(const Vocab& vocab) {
  auto t = std::make_unique<SpmTables>();
  for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
    const std::string_view text = vocab.text(id);
    for (size_t k = text.find(kSpaceMark, 1); k != std::string_view::npos;
         k = text.find(kSpaceMark, k + 1)) {
      if (!space_mark_after_other(text, k)) continue;
      if (t->spanning.size() == kMaxSpanningTokens) {
        t->split_words = false;
        t->spanning.clear();
        return t;
      }
      t->spanning.emplace_back(text, static_cast<uint32_t>(k));
    }
  }
  return t;
}

bool SpmTables::can_break_at(std::string_view text, size_t pos) const {
  if (!space_mark_after_other(text, pos)) return false;
  // A merge can only build a token, so a symbol crosses pos only if such a token is
  // written out in the text with its U+2581 at pos.
  for (const auto& [token, offset] : spanning) {
    if (pos >= offset && text.compare(pos - offset, token.size(), token) == 0) return false;
  }
  return true;
}

void SpmEncoder::encode(std::string_view text, std::vector<int32_t>& out) {
  if (!tables_.split_words) {
    encode_segment(text, out);
    return;
  }
  size_t start = 0;
  for (size_t pos = 0; pos < text.size();) {
    if (pos > start && tables_.can_break_at(text, pos)) {
      encode_segment(text.substr(start, pos - start), out);
      start = pos;
    }
    pos += utf8_sequence_length(static_cast<uint8_t>(text[pos]));
  }
  if (start < text.size()) encode_segment(text.substr(start), out);
}

void SpmEncoder::encode_segment(std::string_view segment, std::vector<int32_t>& out) {
  if (segment.empty()) return;
  if (cache_.emit(segment, out)) return;
  const size_t first_out = out.size();

  symbols_.clear();
  for (size_t offset = 0; offset < segment.size();) {
    const size_t len = std::min(utf8_sequence_length(static_cast<uint8_t>(segment[offset])),
                                segment.size() - offset);
    const auto index = static_cast<int32_t>(symbols_.size());
    offset += len;
    symbols_.push_back({static_cast<uint32_t>(offset - len), static_cast<uint32_t>(len),
                        index - 1, offset == segment.size() ? -1 : index + 1});
  }

  heap_.clear();
  for (int32_t i = 1; i < static_cast<int32_t>(symbols_.size()); ++i) {
    try_add_bigram(segment, i - 1, i);
  }
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), SpmBigramLess{});
    const Bigram bigram = heap_.back();
    heap_.pop_back();
    Symbol& left = symbols_[static_cast<size_t>(bigram.left)];
    Symbol& right = symbols_[static_cast<size_t>(bigram.right)];
    // Stale: one side was merged away or grew since this pair was queued.
    if (left.len == 0 || right.len == 0 || left.len + right.len != bigram.size) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols_[static_cast<size_t>(right.next)].prev = bigram.left;
    try_add_bigram(segment, left.prev, bigram.left);
    try_add_bigram(segment, bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols_[static_cast<size_t>(i)].next) {
    const Symbol& symbol = symbols_[static_cast<size_t>(i)];
    const std::string_view text = segment.substr(symbol.start, symbol.len);
    if (const int32_t id = vocab_.find(text); id != Vocab::kNoToken) {
      out.push_back(id);
      continue;
    }
    // Merges only build tokens, so this is one unmerged character: spell it in bytes.
    for (char c : text) {
      int32_t id = vocab_.byte_token(static_cast<uint8_t>(c));
      if (id == Vocab::kNoToken) id = vocab_.unk();
      if (id == Vocab::kNoToken) {
        throw Error(str_cat("tokenizer: byte 0x", std::hex, static_cast<int>(static_cast<uint8_t>(c)),
                            " has no <0xXX> token and the vocabulary has no unknown token"));
      }
      out.push_back(id);
    }
  }
  cache_.store(segment, out, first_out);
}

void SpmEncoder::try_add_bigram(std::string_view segment, int32_t left, int32_t right) {
  if (left == -1 || right == -1) return;
  const Symbol& l = symbols_[static_cast<size_t>(left)];
  const Symbol& r = symbols_[static_cast<size_t>(right)];
  const std::string_view text = segment.substr(l.start, l.len + r.len);
  const int32_t id = vocab_.find(text);
  if (id == Vocab::kNoToken) return;
  heap_.push_back({vocab_.score(id), left, right, static_cast<uint32_t>(text.size())});
  std::push_heap(heap_.begin(), heap_.end(), SpmBigramLess{});
}

}  // namespace ridge
