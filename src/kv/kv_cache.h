// The paged KV cache: K/V storage for every layer, allocated once from a memory budget,
// and per-sequence block tables that map token positions to (block, offset) slots.
//
//   KvCacheConfig config;
//   config.layers = uniform_kv_layers(/*n_layer=*/28, /*n_kv_head=*/2, /*d_head=*/128);
//   config.budget_bytes = size_t{1} << 30;
//   config.max_sequences = 8;
//   KvCache cache(config);                 // log cache.summary()
//   cache.add_sequence(0);
//   if (cache.reserve(0, n_prompt)) {      // false: not enough free blocks, nothing changed
//     KvSlot s = cache.slot(0, cache.group_of_layer(il), pos);
//     float* k = static_cast<float*>(cache.k_row(il, s.block, s.offset));  // [n_kv_head][d_head]
//                                         // (config.dtype F32; F16: uint16_t halves)
//     ...                                  // write K/V of every new token, run attention
//     cache.commit(0, n_prompt);
//     cache.recycle_window(0);             // sliding-window layers drop what left the window
//   }
//   cache.free_sequence(0);
//
// Layer groups. Layers with the same sliding window (0 = global attention) form a group
// with its own block pool and its own block table per sequence: all layers of a group
// store token j in the same slot, and a windowed group can free blocks no future query can
// see (their table entry becomes -1) while the global group keeps everything. Gemma 3
// (5 local : 1 global) has two groups, Mistral one windowed group, Llama and Qwen one
// global group. A sequence's tables have the same length in every group: logical block i
// holds positions [i * block_size, (i + 1) * block_size).
//
// Budget policy (how budget_bytes becomes blocks per group):
//  - A windowed group gets exactly what max_sequences sequences can have live at once:
//    kv_window_blocks(window, max_step_tokens) blocks each (see below), since recycling
//    caps what one sequence holds no matter how long it grows.
//  - The global group gets the rest of the budget, but never more blocks than
//    max_sequences sequences at max_context tokens can use.
//  - With no global group (all layers windowed) every group gets
//    min(its need, budget / sum of the groups' bytes per block) blocks.
//  A budget that cannot give each group one block, or that cannot cover the windowed
//  groups' need when a global group exists, is an error naming the numbers.
//
// Recycling rule. Keys a query at position q may attend in a layer with window W are
// positions q - W + 1 .. q. Every query not yet computed is at a position >= n_tokens
// (committed tokens), so positions < n_tokens - W + 1 can never be read again, even by
// the first query of a long prefill chunk. recycle_window frees a block when all its
// positions are below that bound. Call it after commit, once per step.
//
// Sequence ids are slots 0 .. max_sequences - 1 chosen by the caller (the engine maps
// requests to slots); tables are preallocated at add_sequence so that reserve, commit,
// slot, recycle_window and free_sequence never allocate.
//
// Prefix caching (config.prefix_cache). The caller tells the cache a sequence's token ids
// (set_tokens); every block that becomes full and committed is then indexed by its hash
// chain (kv/prefix_cache.h) in every group. A freed block keeps its K/V and its index
// entry ("cached free"): it still counts as free, and the free queue hands out the least
// recently freed first, so cached blocks are evicted LRU and only when the pool needs them
// (the index entry is dropped the moment reserve takes the block). attach_prefix gives a
// new sequence the longest run of cached full blocks that begins its tokens, shared
// (refcounted) with whoever else holds them. Shared blocks are read-only by construction:
// only FULL blocks are shared and the sequence's first new token starts a fresh block, and
// at least the last token is always left to compute so that it gets logits.
// Windowed groups: resuming at position p needs, in each windowed group, the blocks of
// positions p - window + 1 .. p - 1 (older ones are -1 in the table, as if recycled).
// attach_prefix reuses p only if all of those are cached too, shortening the prefix
// until they are; reused windowed blocks are the ones recycle_window released into the
// free queue, so a prefix is found while they have not been evicted.
// Recurrent state (hybrid models: Qwen 3.5, Qwen3-Next, Granite 4, Nemotron-H). A layer
// spec with state_floats > 0 is a recurrent layer: it joins no group and holds no K/V; each
// sequence slot has its own fixed-size f32 state for it instead (state(il, seq)), zeroed by
// add_sequence, allocated with the K/V storage and taken from the same budget first
// (max_sequences states; the K/V pools get the rest). The state holds the sequence's
// committed tokens, so it can only be cut back to a position the step that wrote it kept a
// snapshot of: with config.state_snapshots = S, each slot also holds S copies of every
// recurrent layer's state, which the forward pass fills with the state after each token of
// a speculative verify chunk (mark_snapshots); truncate then restores the snapshot of the
// last accepted token instead of recomputing (any other cut back throws).
// Prefix caching with recurrent state: cached K/V blocks alone cannot resume a recurrence,
// which needs the state after the prefix's last token. With config.state_checkpoints = C > 0
// (and prefix_cache) the cache keeps C checkpoints: copies of a sequence's live state taken
// when it had committed exactly k full, hashed blocks (save_checkpoint), keyed by block k's
// chain hash, evicted least recently used. attach_prefix then reuses k blocks only where a
// checkpoint of block k exists (and copies it into the slot's state), so a hit is the longest
// cached run that ends on a checkpoint; prefix_blocks_matched says how far the K/V alone
// reached, so the caller can end a chunk there and checkpoint it for the next request. The
// caller decides where chunks end (the scheduler ends them on block boundaries and at the
// prompt's last full block, vLLM's "align" idea) and calls save_checkpoint after those
// steps, provisional for a chunk's end inside a prompt. Without checkpoints
// (C = 0) prefix caching is off on a hybrid (prefix_cache_enabled() false).
// Preemption frees the slot and recomputes, as for attention layers. At least one layer
// must be an attention layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kv/block_pool.h"
#include "kv/prefix_cache.h"

namespace ridge {

// The element types a cache can hold, K and V alike. F16 halves the bytes of F32 and is
// what the engine uses unless told otherwise (EngineOptions::kv_type); BF16 keeps f32's
// range at f16's size; Q8_0 and Q4_0 (GGML's blocks of 32 values with an f16 scale: 34
// and 18 bytes) need head sizes that are multiples of 32.
inline constexpr DType kKvDtypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};
bool is_kv_dtype(DType dtype);
std::string kv_dtype_names();  // "f32, f16, bf16, q8_0 or q4_0", for messages

struct KvLayerSpec {
  int32_t n_kv_head = 0;
  int32_t d_head = 0;
  int32_t window = 0;  // sliding window in tokens (q attends q - window + 1 .. q); 0 = global
  // A recurrent layer (a hybrid model's gated DeltaNet or Mamba2 layer; n_kv_head and d_head
  // 0): no K/V rows, but this many f32 of state per sequence (its conv tail and its
  // recurrence's state). See "Recurrent state" above.
  int64_t state_floats = 0;
  // Of those, the last state_tail_floats (the conv tail) are stored apart in snapshots, so
  // the first part of every snapshot is contiguous: [S][state_floats - tail] then [S][tail].
  int64_t state_tail_floats = 0;
  bool recurrent() const { return state_floats > 0; }
};

// n_layer identical layers with the same window.
std::vector<KvLayerSpec> uniform_kv_layers(int32_t n_layer, int32_t n_kv_head, int32_t d_head,
                                           int32_t window = 0);

// Bytes of one K (or V) row of a layer: n_kv_head * d_head values of dtype.
size_t kv_row_bytes(DType dtype, const KvLayerSpec& layer);
// Whether the layer's heads split into dtype's blocks (q8_0, q4_0: multiples of 32).
bool kv_dtype_fits(DType dtype, const KvLayerSpec& layer);

struct KvCacheConfig {
  std::vector<KvLayerSpec> layers;  // one per model layer, in layer order (il)
  int32_t block_size = 16;          // tokens per block
  DType dtype = DType::F32;         // K/V element type, one of kKvDtypes
  size_t budget_bytes = 0;          // memory for all K/V pools together
  int32_t max_sequences = 1;        // sequence slots; windowed groups are sized for all of them
  int32_t max_context = 4096;       // most tokens one sequence may hold (the model's context)
  int32_t max_step_tokens = 512;    // most tokens one sequence adds in one step (prefill chunk)
  bool prefix_cache = false;        // index full blocks for reuse (see "Prefix caching");
                                    // ignored when a layer is recurrent
  int32_t state_snapshots = 0;      // recurrent layers: states kept per slot for rolling back
                                    // one step's tokens (speculative decoding), see above
  int32_t state_checkpoints = 0;    // recurrent layers with prefix_cache: states kept at block
                                    // boundaries for prefix reuse, see above
};

// Floats of recurrent state one sequence holds over all recurrent layers, snapshots included
// (0 without any).
int64_t kv_state_floats_per_sequence(const KvCacheConfig& config);
// Floats of one live state over all recurrent layers (what a checkpoint holds; 0 without any).
int64_t kv_state_live_floats(const KvCacheConfig& config);
// All recurrent-state bytes of the configuration: max_sequences slots and, when prefix caching
// is on, state_checkpoints checkpoints. Taken from budget_bytes before any K/V block.
size_t kv_state_bytes(const KvCacheConfig& config);

// K and V bytes one token costs in every layer of this configuration (what
// KvCache::bytes_per_token() will report), for sizing a budget before building the cache.
size_t kv_bytes_per_token(const KvCacheConfig& config);

// Blocks one sequence can have live in a group with this window when each step adds at
// most step_tokens tokens and recycle_window runs after every commit: the keys of a step
// span window + step_tokens - 1 positions, which touch at most
// ceil((window + step_tokens - 2) / block_size) + 1 blocks; never more than a whole
// context's worth, ceil(max_context / block_size).
int32_t kv_window_blocks(int32_t window, int32_t step_tokens, int32_t block_size,
                         int32_t max_context);

struct KvGroup {
  int32_t window = 0;            // 0 = global attention
  std::vector<int32_t> layers;   // il of the member layers, ascending
  int32_t n_blocks = 0;          // blocks in this group's pool
  size_t bytes_per_block = 0;    // K and V of one block in every member layer
};

// How a configuration's budget is laid out, before anything is allocated: what the
// KvCache built from it will hold. Lets the engine report what a budget holds in every
// cache type without building a cache for each.
struct KvPlan {
  std::vector<KvGroup> groups;       // global first, then ascending window; n_blocks set
  std::vector<int> group_of_layer;   // [n_layer]; -1 for a recurrent layer
  size_t bytes_per_token = 0;        // K and V of one token in every layer
  size_t state_bytes = 0;            // recurrent state of all max_sequences slots, checkpoints too
  size_t total_bytes = 0;            // the allocation, pools padded to 64 bytes

  // Tokens of context the global layers' blocks hold, over all sequences together; 0 when
  // every layer is windowed (the windows recycle, so only max_context bounds a sequence).
  int64_t tokens_held(int32_t block_size) const;
};
// Throws ridge::Error as KvCache's constructor does for a bad or too small configuration.
KvPlan plan_kv_cache(const KvCacheConfig& config);

struct KvSlot {
  int32_t block = 0;   // block id in the group's pool
  int32_t offset = 0;  // 0 .. block_size - 1
};

// One layer's storage as the attention kernel reads it. Both pools are
// [n_blocks][block_size][n_kv_head][d_head] of dtype, 64-byte aligned.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  int32_t n_blocks = 0;
  int32_t block_size = 0;
  int32_t n_kv_head = 0;
  int32_t d_head = 0;
  DType dtype = DType::F32;
  size_t row_bytes = 0;  // one slot: n_kv_head * d_head elements

  void* k_row(int32_t block, int32_t offset) const;  // [n_kv_head][d_head]
  void* v_row(int32_t block, int32_t offset) const;
};

class KvCache {
 public:
  // Validates the configuration (throws ridge::Error naming the field and value) and
  // allocates and zeroes all K/V storage in one allocation.
  explicit KvCache(const KvCacheConfig& config);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // --- identity
  // The configuration the cache was built from (a tensor-parallel rank builds its twin
  // from it), and an id unique in the process, never reused (which cache a step is for).
  const KvCacheConfig& config() const { return config_; }
  uint64_t id() const { return id_; }

  // --- shape and size
  int32_t n_layer() const { return static_cast<int32_t>(layers_.size()); }
  int32_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  int32_t max_sequences() const { return static_cast<int32_t>(sequences_.size()); }
  int32_t max_context() const { return max_context_; }
  int32_t max_step_tokens() const { return max_step_tokens_; }
  int n_groups() const { return static_cast<int>(groups_.size()); }
  // Groups are ordered global first (if any), then by ascending window.
  const KvGroup& group(int g) const;
  int group_of_layer(int32_t il) const;
  // K and V bytes of one token in all layers: sum over layers of 2 * n_kv_head * d_head *
  // element size. What a token costs in a cache without windows.
  size_t bytes_per_token() const { return bytes_per_token_; }
  size_t total_bytes() const { return total_bytes_; }  // the one allocation
  // Recurrent layers: whether there are any, and the state bytes one sequence holds.
  bool has_recurrent_state() const { return state_floats_per_sequence_ > 0; }
  size_t state_bytes_per_sequence() const { return sizeof(float) * static_cast<size_t>(state_floats_per_sequence_); }
  // "kv cache: 1024 blocks x 16 tokens, 18.0 KiB/token, 288.0 MiB total (f16)"; with
  // several groups the block counts are listed per group.
  std::string summary() const;

  // --- blocks
  const BlockPool& pool(int g) const;
  int32_t n_free_blocks(int g) const { return pool(g).n_free(); }
  int32_t n_used_blocks(int g) const { return pool(g).n_used(); }
  // Free blocks of group g that still hold an indexed prefix block (part of n_free_blocks).
  int32_t n_cached_blocks(int g) const;
  bool prefix_cache_enabled() const { return !prefix_.empty(); }

  // --- sequences (seq is a slot in 0 .. max_sequences - 1; misuse throws ridge::Error)
  void add_sequence(int32_t seq);
  bool has_sequence(int32_t seq) const;
  int32_t n_sequences() const { return n_active_; }
  // Makes room for n_new_tokens more tokens after the committed ones (capacity covers
  // n_tokens + n_new_tokens), taking blocks in every group. Returns false, changing
  // nothing, if some group lacks free blocks. Throws past max_context.
  bool reserve(int32_t seq, int32_t n_new_tokens);
  bool can_reserve(int32_t seq, int32_t n_new_tokens) const;
  // Marks n more tokens as written (K/V stored); they must lie within the reservation.
  void commit(int32_t seq, int32_t n);
  int32_t n_tokens(int32_t seq) const;
  int32_t capacity(int32_t seq) const;  // tokens reserved: table length * block_size
  // Block ids of logical blocks 0, 1, ...; -1 for blocks recycled out of the window.
  std::span<const int32_t> block_table(int32_t seq, int g) const;
  // Where position pos (reserved, not recycled) lives in group g.
  KvSlot slot(int32_t seq, int g, int32_t pos) const;
  // Frees windowed-group blocks whose positions are all < n_tokens - n_tentative - window + 1
  // (see the rule above). The last n_tentative committed tokens are speculative (drafted,
  // not yet verified) and may be truncated away, so the keys the next query would need
  // after that truncation stay. Returns how many blocks were freed over all groups.
  int32_t recycle_window(int32_t seq, int32_t n_tentative = 0);
  // Rolls the sequence back to its first n_tokens committed tokens (speculative tokens
  // the verifier rejected) and frees the blocks wholly past them, last first, so the pools
  // look as if those tokens had never been reserved. Throws ridge::Error, changing
  // nothing, for n_tokens above the committed count, below the tokens already indexed for
  // prefix reuse (those blocks may be shared), or where a windowed group already recycled
  // keys the next query would need (recycle_window with n_tentative prevents that).
  // Token ids given to set_tokens past n_tokens are forgotten (their hashes too).
  void truncate(int32_t seq, int32_t n_tokens);
  // Returns all of the sequence's blocks (last block first) and frees its slot.
  void free_sequence(int32_t seq);

  // --- prefix caching (no-ops returning 0 when config.prefix_cache is off)
  // The sequence's token ids so far, oldest first: at least its committed tokens, and each
  // call extends the previous one. Full blocks are hashed now and indexed once committed.
  // Throws past max_context.
  void set_tokens(int32_t seq, std::span<const int32_t> tokens);
  // For a sequence just added (no tokens, no blocks): takes the longest cached run of full
  // blocks that starts tokens (at most (tokens.size() - 1) / block_size blocks), as
  // committed tokens, and calls set_tokens(seq, tokens). Returns the tokens reused (a
  // multiple of block_size; 0 on a miss). Reused blocks leave the free queue.
  int32_t attach_prefix(int32_t seq, std::span<const int32_t> tokens);
  // Whether group g's block is indexed (holds a reusable full block); for tests.
  bool block_is_cached(int g, int32_t block) const;
  // With recurrent layers: the full blocks of the last attach_prefix's tokens whose K/V were
  // cached, counted before the hit was cut back to a checkpoint (>= the blocks attached).
  int32_t prefix_blocks_matched(int32_t seq) const;

  // --- recurrent state checkpoints (prefix caching on a hybrid; see above)
  int32_t state_checkpoints() const { return static_cast<int32_t>(checkpoints_.size()); }
  int32_t n_checkpoints_held() const;
  // Copies the sequence's live state into a checkpoint keyed by its last committed block, when
  // it has committed exactly k >= 1 full blocks that set_tokens hashed. Returns whether a
  // checkpoint was written: false when the position is not such a boundary, when that block
  // is already checkpointed (then it only becomes the most recently used) or without
  // checkpoints. A full pool evicts its least recently used provisional checkpoint, else
  // its least recently used one; a provisional checkpoint (a chunk's end in the middle of a
  // prompt: worth keeping only while there is room) evicts only provisional ones and is not
  // written when none is left. A hit makes a provisional checkpoint a kept one.
  bool save_checkpoint(int32_t seq, bool provisional = false);

  // --- capacity
  // Whether a new sequence holding n_tokens could be added and reserved now: a free
  // sequence slot, n_tokens <= max_context, and ceil(n_tokens / block_size) free blocks in
  // every group.
  bool can_fit(int32_t n_tokens) const;
  // The longest sequence the cache could hold if it were the only one, decoding one token
  // per step: limited by max_context, the global pool, and any windowed pool too small to
  // hold one window.
  int32_t max_tokens_per_sequence() const;

  // --- storage
  // A recurrent layer's state of one sequence: [layers[il].state_floats] f32, 64-byte aligned.
  float* state(int32_t il, int32_t seq) const;
  // Snapshot k (0 .. state_snapshots() - 1) of that state: its first part ([state_floats -
  // tail], consecutive k contiguous) and its tail ([tail]).
  int32_t state_snapshots() const { return config_.state_snapshots; }
  float* state_snapshot(int32_t il, int32_t seq, int32_t k) const;
  float* state_snapshot_tail(int32_t il, int32_t seq, int32_t k) const;
  // The forward pass wrote snapshots 0 .. n - 1: the states after positions first .. first +
  // n - 1 (one step's tokens, the first at position first). Truncating the sequence to t
  // tokens, first < t <= first + n, restores snapshot t - first - 1.
  void mark_snapshots(int32_t seq, int32_t first, int32_t n);
  KvLayerView layer(int32_t il) const;
  void* k_row(int32_t il, int32_t block, int32_t offset) const;  // [n_kv_head][d_head]
  void* v_row(int32_t il, int32_t block, int32_t offset) const;

 private:
  struct LayerStorage {
    size_t k_offset = 0;  // bytes into storage_
    size_t v_offset = 0;
    size_t row_bytes = 0;
    int32_t n_blocks = 0;  // of the layer's group
    int64_t state_offset = -1;     // recurrent: floats into a sequence's state
    int64_t snapshot_offset = -1;  // recurrent: floats into a sequence's state, its snapshots
  };
  struct Sequence {
    bool active = false;
    int32_t n_tokens = 0;                     // committed
    std::vector<std::vector<int32_t>> table;  // [group][logical block]
    std::vector<int32_t> first_live;          // [group] first table entry not recycled
    // Prefix caching only:
    std::vector<int32_t> tokens;              // [<= max_context] ids given to set_tokens
    std::vector<BlockHash> hashes;            // [full blocks of tokens] chain hashes
    int32_t n_indexed = 0;                    // logical blocks already offered to the index
    int32_t n_matched = 0;                    // prefix_blocks_matched
    // Recurrent state snapshots (mark_snapshots): after positions snapshot_first ...
    int32_t snapshot_first = 0;
    int32_t n_snapshots = 0;
  };
  struct Checkpoint {  // the live state after a block whose chain hash is hash
    BlockHash hash = 0;
    BlockHash parent = 0;   // the previous block's hash (kRootHash for the first): a second key
    uint64_t last_use = 0;  // 0: empty
    bool provisional = false;
  };
  struct FreeBytes {
    void operator()(std::byte* p) const;
  };

  const Sequence& sequence(int32_t seq, const char* what) const;
  Sequence& sequence(int32_t seq, const char* what);
  int32_t blocks_to_add(const Sequence& s, int32_t n_new_tokens) const;
  void* row(int32_t il, int32_t block, int32_t offset, bool is_v) const;
  void release_block(size_t g, int32_t block);
  void index_committed_blocks(Sequence& s);
  int32_t cached_block(size_t g, const Sequence& s, int32_t i) const;  // kNoBlock on a miss
  void restore_snapshot(int32_t seq, int32_t k);  // live state = snapshot k
  // Sets the recurrent layers' state offsets and the state's base (offset bytes into storage_).
  void lay_out_state(size_t offset);
  // The checkpoint of the sequence's block i (its first i + 1 blocks), or -1.
  int32_t find_checkpoint(const Sequence& s, int32_t i) const;
  float* checkpoint_state(int32_t c) const;  // [state_live_floats_]
  float* live_state(int32_t seq) const;      // [state_live_floats_]

  KvCacheConfig config_;
  uint64_t id_ = 0;
  std::vector<KvLayerSpec> layers_;
  std::vector<int> group_of_layer_;  // [n_layer]
  std::vector<KvGroup> groups_;
  std::vector<BlockPool> pools_;     // [n_groups]
  std::vector<LayerStorage> storage_layout_;  // [n_layer]
  std::vector<Sequence> sequences_;  // [max_sequences]
  std::vector<PrefixCache> prefix_;  // [n_groups] when prefix caching, else empty
  std::vector<int32_t> n_cached_;    // [n_groups] free blocks that are indexed
  std::unique_ptr<std::byte[], FreeBytes> storage_;
  int32_t block_size_ = 0;
  int32_t max_context_ = 0;
  int32_t max_step_tokens_ = 0;
  int32_t max_blocks_per_sequence_ = 0;  // ceil(max_context / block_size)
  int32_t n_active_ = 0;
  DType dtype_ = DType::F32;
  size_t bytes_per_token_ = 0;
  size_t total_bytes_ = 0;
  int64_t state_floats_per_sequence_ = 0;  // padded to 16 floats per layer, snapshots included
  int64_t state_live_floats_ = 0;          // of those, the live states (before the snapshots)
  size_t state_base_ = 0;                  // bytes into storage_ of sequence 0's state
  size_t checkpoint_base_ = 0;             // bytes into storage_ of checkpoint 0
  std::vector<Checkpoint> checkpoints_;    // [state_checkpoints] when prefix caching a hybrid
  uint64_t checkpoint_clock_ = 0;          // last_use of the most recent touch
};

}  // namespace ridge
