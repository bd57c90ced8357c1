// Matching generated tokens against a Grammar: which tokens may come next (a mask over the
// vocabulary, applied to the logits before sampling) and advancing by the chosen one.
//
//   auto trie = std::make_shared<const TokenTrie>(TokenTrie::from_tokenizer(tokenizer));  // once
//   GrammarMatcher m(std::make_shared<const Grammar>(parse_gbnf(text)), trie);
//   m.apply_mask(m.state(), logits);       // disallowed tokens -> -inf; returns how many remain
//   m.accept(token);                       // false (and no change) for a token the grammar refuses
//   int32_t s = m.state();  ... m.set_state(s);   // speculative decoding rolls back like this
//
// How. The grammar is a pushdown automaton over bytes: a configuration is a set of stacks of
// grammar positions (llama.cpp's grammar stacks), each stack's top a byte set still to match,
// an empty stack meaning the text so far is a complete sentence. Stacks are hash-consed
// (a stack is a node id: position + parent node), so a set of stacks is a sorted vector of
// ids, itself interned as a state id: the automaton becomes a lazily built DFA whose
// transitions (state, byte) -> state are computed once and then read from a table.
// The mask walks a trie of the vocabulary's byte strings in preorder with one table lookup
// per trie node, skipping every subtree whose prefix the grammar refuses, and is cached per
// state (JSON revisits few states: inside a string, after a comma, ...).
//
// End-of-generation tokens are allowed exactly when the state is complete (accepting).
// Tokens with no text (control tokens other than end-of-generation) are never allowed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace ridge {
class Tokenizer;
}

namespace ridge::grammar {

// The vocabulary's tokens by their bytes, as a flat preorder trie.
class TokenTrie {
 public:
  // pieces[id]: the bytes of token id (empty: never allowed by a grammar); eog: end-of-
  // generation tokens (allowed at a complete state, whatever their piece).
  TokenTrie(std::vector<std::string> pieces, std::vector<int32_t> eog);
  // The tokens' pieces as generation prints them (Tokenizer::token_to_piece).
  static TokenTrie from_tokenizer(const Tokenizer& tokenizer);

  int32_t n_tokens() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  bool is_eog(int32_t id) const { return is_eog_[static_cast<size_t>(id)]; }
  std::span<const int32_t> eog() const { return eog_; }

  // Preorder nodes: the byte on the edge into node i, its depth (1 for the root's children),
  // the node after its subtree, and the tokens whose piece ends there.
  struct Node {
    uint8_t byte;
    uint16_t depth;
    int32_t subtree_end;
    int32_t first_token, end_token;  // range of token_order_
  };
  std::span<const Node> nodes() const { return nodes_; }
  std::span<const int32_t> token_order() const { return token_order_; }
  int32_t max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  std::vector<bool> is_eog_;
  std::vector<Node> nodes_;
  std::vector<int32_t> token_order_;  // token ids sorted by piece
  int32_t max_depth_ = 0;
};

// The lazily built DFA of one grammar. Not thread-safe: one per request.
class Automaton {
 public:
  static constexpr int32_t kDead = -1;
  explicit Automaton(std::shared_ptr<const Grammar> grammar);

  int32_t start() const { return 0; }
  int32_t step(int32_t state, uint8_t byte) {
    const int32_t t = transitions_[static_cast<size_t>(state) * 256 + byte];
    return t != kUnknown ? t : compute(state, byte);
  }
  int32_t step(int32_t state, std::string_view bytes);  // kDead once any byte is refused
  bool complete(int32_t state) const { return complete_[static_cast<size_t>(state)]; }
  bool can_continue(int32_t state) const { return continues_[static_cast<size_t>(state)]; }
  int32_t n_states() const { return static_cast<int32_t>(stacks_.size()); }

 private:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kEmpty = -1;  // the empty stack: a complete sentence
  int32_t compute(int32_t state, uint8_t byte);
  int32_t node(int32_t pos, int32_t parent);
  void expand(int32_t stack, std::vector<int32_t>& out);  // until every top is a byte set
  int32_t intern(std::vector<int32_t>& stacks);

  struct Node {
    int32_t pos, parent;
  };
  struct VectorHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };
  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<std::vector<int32_t>> stacks_;  // state -> its stacks, sorted
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> state_ids_;
  std::vector<int32_t> transitions_;  // [state][256]
  std::vector<bool> complete_, continues_;
  std::vector<int32_t> scratch_;
  std::vector<int32_t> expand_work_;  // expand's worklist, kept between calls
};

// A bit per token.
struct TokenMask {
  std::vector<uint64_t> words;
  int32_t n_allowed = 0;
  bool allows(int32_t id) const { return (words[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

  int32_t state() const { return state_; }
  void set_state(int32_t state) { state_ = state; }
  // The state after token from `state`, Automaton::kDead when the grammar refuses it.
  int32_t next_state(int32_t state, int32_t token);
  bool accept(int32_t token);
  bool complete() const { return automaton_.complete(state_); }

  // The tokens allowed from `state`; the reference stays valid until the next mask() call.
  const TokenMask& mask(int32_t state);
  bool mask_cached(int32_t state) const { return cache_.count(state) != 0; }
  // Sets the logits of tokens the mask refuses to -inf; returns how many tokens remain.
  // logits may be longer than the vocabulary (padded output rows): the rest is refused too.
  int32_t apply_mask(int32_t state, std::span<float> logits);

  const Automaton& automaton() const { return automaton_; }

 private:
  void compute_mask(int32_t state, TokenMask& out);

  Automaton automaton_;
  std::shared_ptr<const TokenTrie> trie_;
  int32_t state_ = 0;
  std::unordered_map<int32_t, TokenMask> cache_;  // per state, bounded by kMaxCachedMasks
  std::vector<int32_t> walk_;  // [max_depth + 1] states along the trie path
};

}  // namespace ridge::grammar
