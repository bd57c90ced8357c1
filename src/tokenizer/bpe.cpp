// Byte-level BPE merging (llama.cpp "BPE" semantics) over raw bytes.
//
// llama.cpp maps each byte of a pre-token to its GPT-2 unicode stand-in and merges
// strings of those characters. The mapping is a bijection between bytes and characters,
// so merging the raw bytes with the vocabulary and merges mapped back gives the same
// tokens, with no re-encoding per word.
#include <algorithm>
#include <bit>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace ridge {
namespace {

// Raw bytes of a GPT-2-mapped string; false when some character stands for no byte
// (such a string can never come out of merging mapped bytes).
bool unmap_bytes(std::string_view mapped, std::string& raw) {
  raw.clear();
  for (size_t pos = 0; pos < mapped.size();) {
    const uint32_t cp = unicode::decode_utf8(mapped, pos);
    const int byte = unicode::unicode_to_byte(cp);
    if (byte < 0) return false;
    raw.push_back(static_cast<char>(byte));
  }
  return true;
}

// Heap order: lowest rank on top, ties to the leftmost pair (as llama.cpp).
struct BpeBigramLess {
  template <class B>
  bool operator()(const B& l, const B& r) const {
    return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
  }
};

}  // namespace

std::unique_ptr<BpeTables> BpeTables::build(const Vocab& vocab) {
  auto t = std::make_unique<BpeTables>();
  auto intern = [&](std::string_view raw) {
    const int32_t piece = t->pieces.intern(raw);
    if (static_cast<size_t>(piece) == t->piece_token.size()) t->piece_token.push_back(Vocab::kNoToken);
    return piece;
  };
  // Merge results are nearly all tokens too, so the tokens' count sizes the index.
  t->pieces.reserve(static_cast<size_t>(vocab.n_tokens()), 0, static_cast<size_t>(vocab.n_tokens()));
  t->piece_token.reserve(static_cast<size_t>(vocab.n_tokens()));
  std::string raw;
  for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
    const std::string_view text = vocab.text(id);
    if (text.empty() || vocab.find(text) != id) continue;  // duplicates keep the first id
    if (!unmap_bytes(text, raw)) continue;
    const int32_t piece = intern(raw);
    if (t->piece_token[static_cast<size_t>(piece)] == Vocab::kNoToken) {
      t->piece_token[static_cast<size_t>(piece)] = id;
    }
  }
  size_t slots = 16;
  while (slots * 3 < 4 * vocab.n_merges()) slots *= 2;  // at most 3/4 full
  t->merge_slots.assign(slots, MergeSlot{});
  t->merge_shift = 64 - std::countr_zero(slots);
  std::string left_raw, right_raw;
  std::string joined;
  for (size_t rank = 0; rank < vocab.n_merges(); ++rank) {
    const auto [left, right] = vocab.merge(rank);
    if (!unmap_bytes(left, left_raw) || !unmap_bytes(right, right_raw)) continue;
    const int32_t l = intern(left_raw);
    const int32_t r = intern(right_raw);
    const int32_t result = intern(joined.assign(left_raw).append(right_raw));
    t->insert_merge(l, r, Merge{static_cast<int32_t>(rank), result});
  }
  for (int b = 0; b < 256; ++b) {
    t->byte_piece[b] = t->find_piece(std::string_view(raw.assign(1, static_cast<char>(b))));
    for (char c : unicode::byte_to_unicode(static_cast<uint8_t>(b))) {
      if (int32_t id = vocab.find(std::string_view(&c, 1)); id != Vocab::kNoToken) {
        t->byte_fallback[b].push_back(id);
      }
    }
  }
  t->pieces.shrink_to_fit();
  t->piece_token.shrink_to_fit();
  return t;
}

namespace {

uint64_t merge_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

size_t merge_slot(uint64_t key, int shift) {
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift);  // Fibonacci hashing
}

}  // namespace

void BpeTables::insert_merge(int32_t left, int32_t right, Merge merge) {
  const uint64_t key = merge_key(left, right);
  const size_t mask = merge_slots.size() - 1;
  for (size_t i = merge_slot(key, merge_shift);; i = (i + 1) & mask) {
    if (merge_slots[i].key == key) return;  // a repeated pair keeps its first rank
    if (merge_slots[i].key == kEmptyKey) {
      merge_slots[i] = {key, merge};
      return;
    }
  }
}

const BpeTables::Merge* BpeTables::find_merge(int32_t left, int32_t right) const {
  if (left < 0 || right < 0) return nullptr;
  const uint64_t key = merge_key(left, right);
  const size_t mask = merge_slots.size() - 1;
  for (size_t i = merge_slot(key, merge_shift);; i = (i + 1) & mask) {
    if (merge_slots[i].key == key) return &merge_slots[i].merge;
    if (merge_slots[i].key == kEmptyKey) return nullptr;
  }
}

void BpeEncoder::encode_word(std::string_view word, std::vector<int32_t>& out) {
  if (word.empty()) return;
  if (cache_.emit(word, out)) return;
  const size_t first_out = out.size();
  if (vocab_.ignore_merges()) {
    // Llama 3: a pre-token that is a token as a whole is taken as it is.
    const int32_t piece = tables_.find_piece(word);
    if (piece >= 0 && tables_.piece_token[static_cast<size_t>(piece)] != Vocab::kNoToken) {
      out.push_back(tables_.piece_token[static_cast<size_t>(piece)]);
      cache_.store(word, out, first_out);
      return;
    }
  }
  merge_word(word, out);
  cache_.store(word, out, first_out);
}

void BpeEncoder::merge_word(std::string_view word, std::vector<int32_t>& out) {
  symbols_.clear();
  const auto n = static_cast<int32_t>(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols_.push_back({static_cast<uint32_t>(i), 1,
                        tables_.byte_piece[static_cast<uint8_t>(word[static_cast<size_t>(i)])],
                        i - 1, i + 1 == n ? -1 : i + 1});
  }
  heap_.clear();
  for (int32_t i = 1; i < n; ++i) try_add_bigram(i - 1, i);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), BpeBigramLess{});
    const Bigram bigram = heap_.back();
    heap_.pop_back();
    Symbol& left = symbols_[static_cast<size_t>(bigram.left)];
    Symbol& right = symbols_[static_cast<size_t>(bigram.right)];
    // Stale: symbols only grow, so an unchanged pair has the size it was queued with.
    if (left.len == 0 || right.len == 0 || left.len + right.len != bigram.size) continue;
    left.len += right.len;
    left.piece = bigram.result;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols_[static_cast<size_t>(right.next)].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }
  for (int32_t i = 0; i != -1; i = symbols_[static_cast<size_t>(i)].next) {
    const Symbol& symbol = symbols_[static_cast<size_t>(i)];
    const int32_t token =
        symbol.piece >= 0 ? tables_.piece_token[static_cast<size_t>(symbol.piece)] : Vocab::kNoToken;
    if (token != Vocab::kNoToken) {
      out.push_back(token);
      continue;
    }
    for (uint32_t k = symbol.start; k < symbol.start + symbol.len; ++k) {
      const auto& ids = tables_.byte_fallback[static_cast<uint8_t>(word[k])];
      out.insert(out.end(), ids.begin(), ids.end());
    }
  }
}

void BpeEncoder::try_add_bigram(int32_t left, int32_t right) {
  if (left == -1 || right == -1) return;
  const Symbol& l = symbols_[static_cast<size_t>(left)];
  const Symbol& r = symbols_[static_cast<size_t>(right)];
  const BpeTables::Merge* merge = tables_.find_merge(l.piece, r.piece);
  if (merge == nullptr) return;
  heap_.push_back({merge->rank, left, right, merge->result, l.len + r.len});
  std::push_heap(heap_.begin(), heap_.end(), BpeBigramLess{});
}

}  // namespace ridge
