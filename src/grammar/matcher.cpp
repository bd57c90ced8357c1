// The grammar's lazily built DFA, the vocabulary trie and the per-state token masks (see
// matcher.h).
#include "grammar/matcher.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace ridge::grammar {
namespace {

constexpr size_t kMaxCachedMasks = 256;  // per request: 256 * n_vocab / 8 bytes at most
// Stacks in one state at most: an ambiguous grammar ((a | a)* ...) would otherwise grow them
// without bound and stall the engine's step.
constexpr size_t kMaxStacks = 4096;

}  // namespace

// ---------------------------------------------------------------- TokenTrie

TokenTrie::TokenTrie(std::vector<std::string> pieces, std::vector<int32_t> eog)
    : pieces_(std::move(pieces)), eog_(std::move(eog)), is_eog_(pieces_.size(), false) {
  for (int32_t id : eog_) {
    if (id < 0 || static_cast<size_t>(id) >= pieces_.size())
      throw Error(str_cat("grammar: end-of-generation token ", id, " is outside the vocabulary"));
    is_eog_[static_cast<size_t>(id)] = true;
  }
  for (size_t id = 0; id < pieces_.size(); ++id)
    if (!pieces_[id].empty() && !is_eog_[id]) token_order_.push_back(static_cast<int32_t>(id));
  std::sort(token_order_.begin(), token_order_.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)] || (pieces_[static_cast<size_t>(a)] == pieces_[static_cast<size_t>(b)] && a < b);
  });
  // Sorted pieces share their longest common prefix with the previous one: keep that part of
  // the path, close the rest, open nodes for the new bytes.
  std::vector<int32_t> path;  // node index per depth - 1
  const std::string* previous = nullptr;
  for (size_t k = 0; k < token_order_.size(); ++k) {
    const std::string& p = pieces_[static_cast<size_t>(token_order_[k])];
    size_t common = 0;
    if (previous != nullptr)
      while (common < previous->size() && common < p.size() && (*previous)[common] == p[common]) ++common;
    while (path.size() > common) {
      nodes_[static_cast<size_t>(path.back())].subtree_end = static_cast<int32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < p.size(); ++d) {
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(Node{static_cast<uint8_t>(p[d]), static_cast<uint16_t>(d + 1), 0, 0, 0});
    }
    Node& last = nodes_[static_cast<size_t>(path.back())];
    if (last.end_token == 0 || common < p.size()) last.first_token = static_cast<int32_t>(k);
    last.end_token = static_cast<int32_t>(k + 1);
    max_depth_ = std::max(max_depth_, static_cast<int32_t>(p.size()));
    if (p.size() > std::numeric_limits<uint16_t>::max()) throw Error("grammar: a token's piece is over 65535 bytes");
    previous = &p;
  }
  for (int32_t n : path) nodes_[static_cast<size_t>(n)].subtree_end = static_cast<int32_t>(nodes_.size());
}

TokenTrie TokenTrie::from_tokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> pieces(static_cast<size_t>(tokenizer.n_vocab()));
  for (int32_t id = 0; id < tokenizer.n_vocab(); ++id) pieces[static_cast<size_t>(id)] = tokenizer.token_to_piece(id);
  return TokenTrie(std::move(pieces), tokenizer.vocab().eog_ids());
}

// ---------------------------------------------------------------- Automaton

size_t Automaton::VectorHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001b3ULL;
  return static_cast<size_t>(h);
}

Automaton::Automaton(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  std::vector<int32_t> start;
  for (int32_t alt : grammar_->rules[static_cast<size_t>(grammar_->root)]) {
    if (grammar_->elements[static_cast<size_t>(alt)].kind == Element::Kind::kEnd)
      start.push_back(kEmpty);
    else
      expand(node(alt, kEmpty), start);
  }
  intern(start);  // state 0
}

int32_t Automaton::node(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = node_ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back(Node{pos, parent});
  return it->second;
}

// A stack whose top is a rule reference becomes one stack per alternative of the rule, with
// the reference's continuation below; expansion ends at byte sets (or the empty stack). A
// worklist, not recursion: a chain of thousands of rules must not overflow the stack.
void Automaton::expand(int32_t stack, std::vector<int32_t>& out) {
  std::vector<int32_t>& work = expand_work_;
  work.assign(1, stack);
  while (!work.empty()) {
    const int32_t top = work.back();
    work.pop_back();
    if (top == kEmpty) {
      out.push_back(kEmpty);
      continue;
    }
    const Node n = nodes_[static_cast<size_t>(top)];
    const Element& e = grammar_->elements[static_cast<size_t>(n.pos)];
    if (e.kind == Element::Kind::kBytes) {
      out.push_back(top);
      continue;
    }
    const bool last = grammar_->elements[static_cast<size_t>(n.pos) + 1].kind == Element::Kind::kEnd;
    const int32_t below = last ? n.parent : node(n.pos + 1, n.parent);
    for (int32_t alt : grammar_->rules[static_cast<size_t>(e.value)])
      work.push_back(grammar_->elements[static_cast<size_t>(alt)].kind == Element::Kind::kEnd ? below
                                                                                                : node(alt, below));
  }
}

int32_t Automaton::intern(std::vector<int32_t>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty()) return kDead;
  if (stacks.size() > kMaxStacks)
    throw GrammarError(str_cat("grammar: too ambiguous to match (over ", kMaxStacks,
                               " ways to parse the text so far); make its alternatives distinct"));
  auto [it, inserted] = state_ids_.emplace(stacks, static_cast<int32_t>(stacks_.size()));
  if (inserted) {
    stacks_.push_back(stacks);
    transitions_.resize(transitions_.size() + 256, kUnknown);
    complete_.push_back(stacks.front() == kEmpty);  // sorted: kEmpty (-1) comes first
    continues_.push_back(stacks.back() != kEmpty);
  }
  return it->second;
}

int32_t Automaton::compute(int32_t state, uint8_t byte) {
  std::vector<int32_t> next;
  for (int32_t stack : stacks_[static_cast<size_t>(state)]) {
    if (stack == kEmpty) continue;
    const Node n = nodes_[static_cast<size_t>(stack)];
    const Element& e = grammar_->elements[static_cast<size_t>(n.pos)];
    if (!grammar_->byte_sets[static_cast<size_t>(e.value)].has(byte)) continue;
    const bool last = grammar_->elements[static_cast<size_t>(n.pos) + 1].kind == Element::Kind::kEnd;
    expand(last ? n.parent : node(n.pos + 1, n.parent), next);
  }
  const int32_t result = intern(next);
  transitions_[static_cast<size_t>(state) * 256 + byte] = result;
  return result;
}

int32_t Automaton::step(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    state = step(state, static_cast<uint8_t>(c));
    if (state == kDead) return kDead;
  }
  return state;
}

// ---------------------------------------------------------------- GrammarMatcher

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
    : automaton_(std::move(grammar)), trie_(std::move(trie)), state_(automaton_.start()) {
  walk_.resize(static_cast<size_t>(trie_->max_depth()) + 1);
}

int32_t GrammarMatcher::next_state(int32_t state, int32_t token) {
  if (state == Automaton::kDead || token < 0 || token >= trie_->n_tokens()) return Automaton::kDead;
  if (trie_->is_eog(token)) return automaton_.complete(state) ? state : Automaton::kDead;
  const std::string& piece = trie_->piece(token);
  if (piece.empty()) return Automaton::kDead;
  return automaton_.step(state, piece);
}

bool GrammarMatcher::accept(int32_t token) {
  const int32_t next = next_state(state_, token);
  if (next == Automaton::kDead) return false;
  state_ = next;
  return true;
}

void GrammarMatcher::compute_mask(int32_t state, TokenMask& out) {
  out.words.assign((static_cast<size_t>(trie_->n_tokens()) + 63) / 64, 0);
  const std::span<const TokenTrie::Node> nodes = trie_->nodes();
  const std::span<const int32_t> order = trie_->token_order();
  int32_t* walk = walk_.data();
  walk[0] = state;
  const auto n = static_cast<int32_t>(nodes.size());
  for (int32_t i = 0; i < n;) {
    const TokenTrie::Node& node = nodes[static_cast<size_t>(i)];
    const int32_t s = automaton_.step(walk[node.depth - 1], node.byte);
    if (s == Automaton::kDead) {
      i = node.subtree_end;  // no token with this prefix can follow
      continue;
    }
    walk[node.depth] = s;
    for (int32_t k = node.first_token; k < node.end_token; ++k) {
      const auto id = static_cast<uint32_t>(order[static_cast<size_t>(k)]);
      out.words[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
  if (automaton_.complete(state))
    for (int32_t id : trie_->eog()) out.words[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  out.n_allowed = 0;
  for (uint64_t w : out.words) out.n_allowed += std::popcount(w);
}

const TokenMask& GrammarMatcher::mask(int32_t state) {
  if (auto it = cache_.find(state); it != cache_.end()) return it->second;
  TokenMask m;
  compute_mask(state, m);  // may throw (too ambiguous): nothing half-computed is cached
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  return cache_.emplace(state, std::move(m)).first->second;
}

int32_t GrammarMatcher::apply_mask(int32_t state, std::span<float> logits) {
  const TokenMask& m = mask(state);
  const float refused = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), static_cast<size_t>(trie_->n_tokens()));
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = m.words[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i)
      if (!((bits >> (i - w * 64)) & 1)) logits[i] = refused;
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = refused;
  return m.n_allowed;
}

}  // namespace ridge::grammar
