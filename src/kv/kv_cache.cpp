#include "kv/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "core/error.h"

namespace ridge {
namespace {

constexpr size_t kBaseAlignment = 4096;  // page-aligned base, so huge pages can back it
constexpr size_t kPoolAlignment = 64;    // every K or V pool starts on a cache line

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %s", bytes, units[unit]);
  return buffer;
}

void validate(const KvCacheConfig& c) {
  if (c.layers.empty()) throw Error("kv cache: config has no layers");
  bool any_attention = false;
  for (size_t il = 0; il < c.layers.size(); ++il) {
    const KvLayerSpec& l = c.layers[il];
    if (l.state_floats < 0 || l.state_tail_floats < 0 || l.state_tail_floats > l.state_floats)
      throw Error(str_cat("kv cache: layer ", il, ": state_floats ", l.state_floats, " and its tail ",
                          l.state_tail_floats, " must satisfy 0 <= tail <= state_floats"));
    if (l.recurrent()) {
      if (l.n_kv_head != 0 || l.d_head != 0 || l.window != 0)
        throw Error(str_cat("kv cache: layer ", il, ": a recurrent layer (state_floats ", l.state_floats,
                            ") holds no K/V: n_kv_head, d_head and window must be 0"));
      continue;
    }
    any_attention = true;
    if (l.n_kv_head < 1) {
      throw Error(str_cat("kv cache: layer ", il, ": n_kv_head must be positive, got ",
                          l.n_kv_head));
    }
    if (l.d_head < 1) {
      throw Error(str_cat("kv cache: layer ", il, ": d_head must be positive, got ", l.d_head));
    }
    if (l.window < 0) {
      throw Error(str_cat("kv cache: layer ", il,
                          ": window must be positive (or 0 for global attention), got ",
                          l.window));
    }
  }
  if (!any_attention)
    throw Error("kv cache: every layer is recurrent; a model without attention layers is not supported yet");
  if (c.block_size < 1) {
    throw Error(str_cat("kv cache: block_size must be positive, got ", c.block_size));
  }
  if (!is_kv_dtype(c.dtype)) {
    throw Error(str_cat("kv cache: dtype ", dtype_name(c.dtype),
                        " is not supported for K/V (", kv_dtype_names(), ")"));
  }
  for (size_t il = 0; il < c.layers.size(); ++il) {
    if (!c.layers[il].recurrent() && !kv_dtype_fits(c.dtype, c.layers[il])) {
      throw Error(str_cat("kv cache: layer ", il, ": head size ", c.layers[il].d_head,
                          " is not a multiple of ", dtype_name(c.dtype), "'s block of ",
                          type_traits(c.dtype).block_size, " values; use f16 or bf16"));
    }
  }
  if (c.state_snapshots < 0) throw Error(str_cat("kv cache: state_snapshots must be >= 0, got ", c.state_snapshots));
  if (c.state_checkpoints < 0)
    throw Error(str_cat("kv cache: state_checkpoints must be >= 0, got ", c.state_checkpoints));
  if (c.max_sequences < 1) {
    throw Error(str_cat("kv cache: max_sequences must be positive, got ", c.max_sequences));
  }
  if (c.max_context < 1) {
    throw Error(str_cat("kv cache: max_context must be positive, got ", c.max_context));
  }
  if (c.max_step_tokens < 1) {
    throw Error(str_cat("kv cache: max_step_tokens must be positive, got ",
                        c.max_step_tokens));
  }
}

}  // namespace

bool is_kv_dtype(DType dtype) {
  return std::find(std::begin(kKvDtypes), std::end(kKvDtypes), dtype) != std::end(kKvDtypes);
}

std::string kv_dtype_names() {
  std::string names;
  for (size_t i = 0; i < std::size(kKvDtypes); ++i)
    names += str_cat(i == 0 ? "" : i + 1 == std::size(kKvDtypes) ? " or " : ", ", dtype_name(kKvDtypes[i]));
  return names;
}

bool kv_dtype_fits(DType dtype, const KvLayerSpec& layer) {
  return layer.d_head % type_traits(dtype).block_size == 0;
}

size_t kv_row_bytes(DType dtype, const KvLayerSpec& layer) {
  return row_size(dtype, static_cast<int64_t>(layer.n_kv_head) * layer.d_head);
}

size_t kv_bytes_per_token(const KvCacheConfig& config) {
  size_t bytes = 0;
  for (const KvLayerSpec& l : config.layers) bytes += 2 * kv_row_bytes(config.dtype, l);
  return bytes;
}

std::vector<KvLayerSpec> uniform_kv_layers(int32_t n_layer, int32_t n_kv_head, int32_t d_head,
                                           int32_t window) {
  return std::vector<KvLayerSpec>(static_cast<size_t>(std::max(n_layer, 0)),
                                  KvLayerSpec{n_kv_head, d_head, window});
}

int32_t kv_window_blocks(int32_t window, int32_t step_tokens, int32_t block_size,
                         int32_t max_context) {
  assert(window > 0 && step_tokens > 0 && block_size > 0 && max_context > 0);
  const int64_t span_blocks = ceil_div(int64_t{window} + step_tokens - 2, block_size) + 1;
  return static_cast<int32_t>(std::min(span_blocks, ceil_div(max_context, block_size)));
}

void* KvLayerView::k_row(int32_t block, int32_t offset) const {
  assert(block >= 0 && block < n_blocks && offset >= 0 && offset < block_size);
  return static_cast<std::byte*>(k) +
         (static_cast<size_t>(block) * static_cast<size_t>(block_size) +
          static_cast<size_t>(offset)) * row_bytes;
}

void* KvLayerView::v_row(int32_t block, int32_t offset) const {
  assert(block >= 0 && block < n_blocks && offset >= 0 && offset < block_size);
  return static_cast<std::byte*>(v) +
         (static_cast<size_t>(block) * static_cast<size_t>(block_size) +
          static_cast<size_t>(offset)) * row_bytes;
}

void KvCache::FreeBytes::operator()(std::byte* p) const {
  ::operator delete[](p, std::align_val_t{kBaseAlignment});
}

KvPlan plan_kv_cache(const KvCacheConfig& config) {
  validate(config);
  KvPlan plan;
  const int32_t block_size = config.block_size;
  const int32_t max_step_tokens = std::min(config.max_step_tokens, config.max_context);
  const int32_t max_blocks_per_sequence = static_cast<int32_t>(ceil_div(config.max_context, block_size));

  // Group layers by window: global first, then ascending window.
  std::vector<int32_t> windows;
  for (const KvLayerSpec& l : config.layers)
    if (!l.recurrent()) windows.push_back(l.window);
  std::sort(windows.begin(), windows.end());
  windows.erase(std::unique(windows.begin(), windows.end()), windows.end());
  for (int32_t w : windows) plan.groups.push_back(KvGroup{w, {}, 0, 0});
  plan.group_of_layer.resize(config.layers.size());
  std::vector<size_t> row_bytes(config.layers.size());
  for (size_t il = 0; il < config.layers.size(); ++il) {
    const KvLayerSpec& l = config.layers[il];
    if (l.recurrent()) {
      plan.group_of_layer[il] = -1;
      continue;
    }
    const int g = static_cast<int>(
        std::lower_bound(windows.begin(), windows.end(), l.window) - windows.begin());
    plan.group_of_layer[il] = g;
    plan.groups[static_cast<size_t>(g)].layers.push_back(static_cast<int32_t>(il));
    row_bytes[il] = kv_row_bytes(config.dtype, l);
    plan.bytes_per_token += 2 * row_bytes[il];
    plan.groups[static_cast<size_t>(g)].bytes_per_block += 2 * row_bytes[il] * static_cast<size_t>(block_size);
  }

  // Blocks per group from the budget (policy in the header). Pools are padded to 64 bytes,
  // so the padded total is checked against the budget and the last group's count lowered
  // until it fits: the allocation never exceeds budget_bytes.
  auto padded_total = [&] {
    size_t total = plan.state_bytes;
    for (size_t il = 0; il < config.layers.size(); ++il) {
      if (plan.group_of_layer[il] < 0) continue;
      const KvGroup& g = plan.groups[static_cast<size_t>(plan.group_of_layer[il])];
      const auto n_blocks = static_cast<size_t>(g.n_blocks);
      total += 2 * round_up(n_blocks * static_cast<size_t>(block_size) * row_bytes[il], kPoolAlignment);
    }
    return total;
  };
  // Recurrent state first: every sequence slot has its own, whatever its length, and the
  // prefix cache's checkpoints come after them.
  plan.state_bytes = kv_state_bytes(config);
  if (plan.state_bytes >= config.budget_bytes && plan.state_bytes > 0)
    throw Error(str_cat("kv cache: budget of ", config.budget_bytes, " bytes is too small: the recurrent state of ",
                        config.max_sequences, " sequences",
                        config.prefix_cache && config.state_checkpoints > 0
                            ? str_cat(" and ", config.state_checkpoints, " prefix-cache checkpoints")
                            : std::string(),
                        " takes ", plan.state_bytes, " bytes (",
                        format_bytes(sizeof(float) * static_cast<double>(kv_state_live_floats(config))),
                        " each) before any K/V block"));
  const size_t kv_budget = config.budget_bytes - plan.state_bytes;
  const int64_t all_contexts = int64_t{config.max_sequences} * max_blocks_per_sequence;
  constexpr int64_t kMaxBlocks = std::numeric_limits<int32_t>::max();
  const bool has_global = plan.groups.front().window == 0;
  size_t windowed_bytes_per_block = 0;  // one block in every windowed group
  size_t windowed_need_bytes = 0;
  for (KvGroup& g : plan.groups) {
    if (g.window == 0) continue;
    const int64_t need = int64_t{config.max_sequences} *
                         kv_window_blocks(g.window, max_step_tokens, block_size, config.max_context);
    g.n_blocks = static_cast<int32_t>(std::min(need, kMaxBlocks));
    windowed_bytes_per_block += g.bytes_per_block;
    windowed_need_bytes += static_cast<size_t>(g.n_blocks) * g.bytes_per_block;
  }
  if (has_global) {
    KvGroup& global = plan.groups.front();
    const size_t rest = kv_budget > windowed_need_bytes ? kv_budget - windowed_need_bytes : 0;
    global.n_blocks = static_cast<int32_t>(std::min(
        {static_cast<int64_t>(rest / global.bytes_per_block), all_contexts, kMaxBlocks}));
    while (global.n_blocks > 0 && padded_total() > config.budget_bytes) --global.n_blocks;
    if (global.n_blocks < 1) {
      throw Error(str_cat(
          "kv cache: budget of ", config.budget_bytes, " bytes is too small: ",
          windowed_need_bytes > 0
              ? str_cat("the sliding-window layers need ", windowed_need_bytes, " bytes for ",
                        config.max_sequences, " sequences (max_step_tokens ",
                        max_step_tokens, "), plus ")
              : std::string(),
          "one block of the global layers takes ", global.bytes_per_block, " bytes"));
    }
  } else {
    // All layers windowed: every group gets the same count, capped at its need.
    std::vector<int32_t> need;
    for (const KvGroup& g : plan.groups) need.push_back(g.n_blocks);
    int64_t fit = std::min(static_cast<int64_t>(kv_budget / windowed_bytes_per_block),
                           kMaxBlocks);
    for (;;) {
      for (size_t g = 0; g < plan.groups.size(); ++g) {
        plan.groups[g].n_blocks = static_cast<int32_t>(std::min<int64_t>(need[g], fit));
      }
      if (fit < 1 || padded_total() <= config.budget_bytes) break;
      --fit;
    }
    if (fit < 1) {
      throw Error(str_cat("kv cache: budget of ", config.budget_bytes,
                          " bytes is too small for one block (", windowed_bytes_per_block,
                          " bytes over all layers)"));
    }
  }
  plan.total_bytes = padded_total();
  return plan;
}

int64_t KvPlan::tokens_held(int32_t block_size) const {
  return groups.front().window == 0 ? int64_t{groups.front().n_blocks} * block_size : 0;
}

KvCache::KvCache(const KvCacheConfig& config) : config_(config) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  KvPlan plan = plan_kv_cache(config);
  layers_ = config.layers;
  block_size_ = config.block_size;
  dtype_ = config.dtype;
  max_context_ = config.max_context;
  max_step_tokens_ = std::min(config.max_step_tokens, config.max_context);
  max_blocks_per_sequence_ = static_cast<int32_t>(ceil_div(max_context_, block_size_));
  groups_ = std::move(plan.groups);
  group_of_layer_ = std::move(plan.group_of_layer);
  bytes_per_token_ = plan.bytes_per_token;
  std::vector<size_t> row_bytes(layers_.size());
  for (size_t il = 0; il < layers_.size(); ++il) row_bytes[il] = kv_row_bytes(dtype_, layers_[il]);

  // Storage: per layer a K pool then a V pool, each [n_blocks][block_size][n_kv][d_head].
  size_t offset = 0;
  storage_layout_.resize(layers_.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    LayerStorage& s = storage_layout_[il];
    if (group_of_layer_[il] < 0) continue;  // recurrent: its state comes after the pools
    s.row_bytes = row_bytes[il];
    s.n_blocks = groups_[static_cast<size_t>(group_of_layer_[il])].n_blocks;
    const size_t pool_bytes = round_up(
        static_cast<size_t>(s.n_blocks) * static_cast<size_t>(block_size_) * s.row_bytes,
        kPoolAlignment);
    s.k_offset = offset;
    s.v_offset = offset + pool_bytes;
    offset += 2 * pool_bytes;
  }
  lay_out_state(offset);
  offset += plan.state_bytes;
  total_bytes_ = offset;
  assert(total_bytes_ == plan.total_bytes && total_bytes_ <= config.budget_bytes);
  try {
    storage_.reset(static_cast<std::byte*>(
        ::operator new[](total_bytes_, std::align_val_t{kBaseAlignment})));
  } catch (const std::bad_alloc&) {
    throw Error(str_cat("kv cache: cannot allocate ", total_bytes_, " bytes (",
                        format_bytes(static_cast<double>(total_bytes_)), ")"));
  }
  // Touching every page now makes an over-committed budget fail here, not mid-request, and
  // keeps never-written slots finite.
  std::memset(storage_.get(), 0, total_bytes_);

  for (const KvGroup& g : groups_) pools_.emplace_back(g.n_blocks);
  // Recurrent state: prefix reuse needs checkpoints (see the header).
  if (config.prefix_cache && (state_floats_per_sequence_ == 0 || config.state_checkpoints > 0)) {
    for (const KvGroup& g : groups_) prefix_.emplace_back(g.n_blocks, block_size_);
    n_cached_.assign(groups_.size(), 0);
    if (state_floats_per_sequence_ > 0) checkpoints_.resize(static_cast<size_t>(config.state_checkpoints));
  }
  sequences_.resize(static_cast<size_t>(config.max_sequences));
}

KvCache::~KvCache() = default;

const KvGroup& KvCache::group(int g) const {
  if (g < 0 || g >= n_groups()) {
    throw Error(str_cat("kv cache: group ", g, " outside 0..", n_groups() - 1));
  }
  return groups_[static_cast<size_t>(g)];
}

int KvCache::group_of_layer(int32_t il) const {
  if (il < 0 || il >= n_layer()) {
    throw Error(str_cat("kv cache: layer ", il, " outside 0..", n_layer() - 1));
  }
  return group_of_layer_[static_cast<size_t>(il)];
}

const BlockPool& KvCache::pool(int g) const {
  group(g);  // range check
  return pools_[static_cast<size_t>(g)];
}

std::string KvCache::summary() const {
  std::string blocks;
  if (groups_.size() == 1) {
    blocks = str_cat(groups_[0].n_blocks, " blocks");
  } else {
    blocks = "blocks (";
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (g > 0) blocks += ", ";
      blocks += groups_[g].window == 0
                    ? str_cat("global: ", groups_[g].n_blocks)
                    : str_cat("window ", groups_[g].window, ": ", groups_[g].n_blocks);
    }
    blocks += ")";
  }
  return str_cat("kv cache: ", blocks, " x ", block_size_, " tokens, ",
                 format_bytes(static_cast<double>(bytes_per_token_)), "/token, ",
                 format_bytes(static_cast<double>(total_bytes_)), " total (",
                 dtype_name(dtype_), ")",
                 has_recurrent_state()
                     ? str_cat(", recurrent state ", format_bytes(static_cast<double>(state_bytes_per_sequence())),
                               "/sequence",
                               checkpoints_.empty() ? std::string()
                                                    : str_cat(", ", checkpoints_.size(), " prefix checkpoints"))
                     : std::string());
}

const KvCache::Sequence& KvCache::sequence(int32_t seq, const char* what) const {
  if (seq < 0 || seq >= max_sequences()) {
    throw Error(str_cat("kv cache: ", what, ": sequence ", seq, " outside 0..",
                        max_sequences() - 1));
  }
  const Sequence& s = sequences_[static_cast<size_t>(seq)];
  if (!s.active) throw Error(str_cat("kv cache: ", what, ": sequence ", seq, " not added"));
  return s;
}

KvCache::Sequence& KvCache::sequence(int32_t seq, const char* what) {
  return const_cast<Sequence&>(std::as_const(*this).sequence(seq, what));
}

void KvCache::add_sequence(int32_t seq) {
  if (seq < 0 || seq >= max_sequences()) {
    throw Error(str_cat("kv cache: add_sequence: sequence ", seq, " outside 0..",
                        max_sequences() - 1));
  }
  Sequence& s = sequences_[static_cast<size_t>(seq)];
  if (s.active) throw Error(str_cat("kv cache: add_sequence: sequence ", seq, " already added"));
  s.table.resize(groups_.size());
  for (std::vector<int32_t>& t : s.table) {
    t.clear();
    t.reserve(static_cast<size_t>(max_blocks_per_sequence_));
  }
  s.first_live.assign(groups_.size(), 0);
  s.n_tokens = 0;
  s.snapshot_first = 0;
  s.n_snapshots = 0;
  if (has_recurrent_state())  // a new sequence's recurrences start from zero (snapshots: unread)
    std::memset(storage_.get() + state_base_ + static_cast<size_t>(seq) * state_bytes_per_sequence(), 0,
                sizeof(float) * static_cast<size_t>(state_live_floats_));
  if (prefix_cache_enabled()) {
    s.tokens.clear();
    s.tokens.reserve(static_cast<size_t>(max_context_));
    s.hashes.clear();
    s.hashes.reserve(static_cast<size_t>(max_blocks_per_sequence_));
    s.n_indexed = 0;
    s.n_matched = 0;
  }
  s.active = true;
  ++n_active_;
}

bool KvCache::has_sequence(int32_t seq) const {
  return seq >= 0 && seq < max_sequences() && sequences_[static_cast<size_t>(seq)].active;
}

int32_t KvCache::blocks_to_add(const Sequence& s, int32_t n_new_tokens) const {
  const int64_t want = ceil_div(int64_t{s.n_tokens} + n_new_tokens, block_size_);
  return static_cast<int32_t>(std::max<int64_t>(0, want - static_cast<int64_t>(s.table[0].size())));
}

bool KvCache::can_reserve(int32_t seq, int32_t n_new_tokens) const {
  const Sequence& s = sequence(seq, "reserve");
  if (n_new_tokens < 0) {
    throw Error(str_cat("kv cache: reserve: sequence ", seq, ": negative token count ",
                        n_new_tokens));
  }
  if (int64_t{s.n_tokens} + n_new_tokens > max_context_) {
    throw Error(str_cat("kv cache: reserve: sequence ", seq, " would hold ",
                        int64_t{s.n_tokens} + n_new_tokens, " tokens, past max_context ",
                        max_context_));
  }
  const int32_t need = blocks_to_add(s, n_new_tokens);
  for (const BlockPool& p : pools_) {
    if (p.n_free() < need) return false;
  }
  return true;
}

bool KvCache::reserve(int32_t seq, int32_t n_new_tokens) {
  if (!can_reserve(seq, n_new_tokens)) return false;
  Sequence& s = sequences_[static_cast<size_t>(seq)];
  const int32_t need = blocks_to_add(s, n_new_tokens);
  for (size_t g = 0; g < pools_.size(); ++g) {
    for (int32_t i = 0; i < need; ++i) {
      const int32_t block = pools_[g].allocate();
      assert(block != BlockPool::kNoBlock);
      if (!prefix_.empty() && prefix_[g].holds(block)) {  // evict the LRU cached block
        prefix_[g].erase(block);
        --n_cached_[g];
      }
      s.table[g].push_back(block);  // capacity reserved at add_sequence: no allocation
    }
  }
  return true;
}

void KvCache::commit(int32_t seq, int32_t n) {
  Sequence& s = sequence(seq, "commit");
  if (n < 0 || int64_t{s.n_tokens} + n > capacity(seq)) {
    throw Error(str_cat("kv cache: commit: sequence ", seq, ": ", n, " tokens after ",
                        s.n_tokens, " exceed the reserved ", capacity(seq)));
  }
  s.n_tokens += n;
  if (!prefix_.empty()) index_committed_blocks(s);
}

int32_t KvCache::n_tokens(int32_t seq) const { return sequence(seq, "n_tokens").n_tokens; }

int32_t KvCache::capacity(int32_t seq) const {
  return static_cast<int32_t>(sequence(seq, "capacity").table[0].size()) * block_size_;
}

std::span<const int32_t> KvCache::block_table(int32_t seq, int g) const {
  const Sequence& s = sequence(seq, "block_table");
  group(g);  // range check
  return s.table[static_cast<size_t>(g)];
}

KvSlot KvCache::slot(int32_t seq, int g, int32_t pos) const {
  const std::span<const int32_t> table = block_table(seq, g);
  const int64_t reserved = static_cast<int64_t>(table.size()) * block_size_;
  if (pos < 0 || pos >= reserved) {
    throw Error(str_cat("kv cache: slot: sequence ", seq, ": position ", pos,
                        " outside the reserved 0..", reserved - 1));
  }
  const int32_t block = table[static_cast<size_t>(pos / block_size_)];
  if (block < 0) {
    throw Error(str_cat("kv cache: slot: sequence ", seq, ": position ", pos, " of group ", g,
                        " was recycled (left the window of ",
                        groups_[static_cast<size_t>(g)].window, ")"));
  }
  return KvSlot{block, pos % block_size_};
}

int32_t KvCache::recycle_window(int32_t seq, int32_t n_tentative) {
  Sequence& s = sequence(seq, "recycle_window");
  if (n_tentative < 0 || n_tentative > s.n_tokens) {
    throw Error(str_cat("kv cache: recycle_window: sequence ", seq, ": ", n_tentative,
                        " tentative tokens outside 0..", s.n_tokens));
  }
  int32_t freed = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int32_t window = groups_[g].window;
    if (window == 0) continue;
    const int64_t first_needed = int64_t{s.n_tokens} - n_tentative - window + 1;
    std::vector<int32_t>& table = s.table[g];
    int32_t& first_live = s.first_live[g];
    while (first_live < static_cast<int32_t>(table.size()) &&
           int64_t{first_live + 1} * block_size_ <= first_needed) {
      release_block(g, table[static_cast<size_t>(first_live)]);
      table[static_cast<size_t>(first_live)] = BlockPool::kNoBlock;
      ++first_live;
      ++freed;
    }
  }
  return freed;
}

void KvCache::truncate(int32_t seq, int32_t n_tokens) {
  Sequence& s = sequence(seq, "truncate");
  if (n_tokens < 0 || n_tokens > s.n_tokens) {
    throw Error(str_cat("kv cache: truncate: sequence ", seq, ": ", n_tokens,
                        " tokens outside the committed 0..", s.n_tokens));
  }
  if (has_recurrent_state() && n_tokens < s.n_tokens &&
      !(n_tokens > s.snapshot_first && n_tokens <= s.snapshot_first + s.n_snapshots)) {
    throw Error(str_cat("kv cache: truncate: sequence ", seq, ": cannot go back from ", s.n_tokens, " to ", n_tokens,
                        " tokens: its recurrent layers' state holds every committed token and keeps no earlier one",
                        s.n_snapshots > 0 ? str_cat(" but those after positions ", s.snapshot_first, "..",
                                                    s.snapshot_first + s.n_snapshots - 1)
                                          : std::string()));
  }
  if (!prefix_.empty() && int64_t{n_tokens} < int64_t{s.n_indexed} * block_size_) {
    throw Error(str_cat("kv cache: truncate: sequence ", seq, ": ", n_tokens,
                        " tokens would cut into its ", s.n_indexed,
                        " blocks indexed for prefix reuse"));
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int32_t window = groups_[g].window;
    if (window == 0) continue;
    const int64_t first_needed = std::max<int64_t>(0, int64_t{n_tokens} - window + 1);
    if (int64_t{s.first_live[g]} * block_size_ > first_needed) {
      throw Error(str_cat("kv cache: truncate: sequence ", seq, ": position ", first_needed,
                          " left the window of ", window, " already (recycled)"));
    }
  }
  const auto keep = static_cast<size_t>(ceil_div(n_tokens, block_size_));
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int32_t>& table = s.table[g];
    while (table.size() > keep) {
      release_block(g, table.back());
      table.pop_back();
    }
  }
  if (has_recurrent_state() && n_tokens < s.n_tokens) {  // the state after token n_tokens - 1
    restore_snapshot(seq, n_tokens - s.snapshot_first - 1);
    s.n_snapshots = 0;
  }
  s.n_tokens = n_tokens;
  if (!prefix_.empty() && s.tokens.size() > static_cast<size_t>(n_tokens)) {
    s.tokens.resize(static_cast<size_t>(n_tokens));
    s.hashes.resize(std::min(s.hashes.size(), static_cast<size_t>(n_tokens / block_size_)));
  }
}

void KvCache::free_sequence(int32_t seq) {
  Sequence& s = sequence(seq, "free_sequence");
  // Last block first: when freed blocks are later kept for prefix reuse, the FIFO free
  // queue then evicts a sequence's tail before its (more shareable) head.
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<int32_t>& table = s.table[g];
    for (int32_t i = static_cast<int32_t>(table.size()) - 1; i >= s.first_live[g]; --i) {
      release_block(g, table[static_cast<size_t>(i)]);
    }
    table.clear();
  }
  s.n_tokens = 0;
  s.active = false;
  --n_active_;
}

void KvCache::release_block(size_t g, int32_t block) {
  pools_[g].release(block);
  if (!prefix_.empty() && pools_[g].is_free(block) && prefix_[g].holds(block)) ++n_cached_[g];
}

int32_t KvCache::n_cached_blocks(int g) const {
  group(g);  // range check
  return prefix_.empty() ? 0 : n_cached_[static_cast<size_t>(g)];
}

bool KvCache::block_is_cached(int g, int32_t block) const {
  group(g);  // range check
  return !prefix_.empty() && prefix_[static_cast<size_t>(g)].holds(block);
}

void KvCache::index_committed_blocks(Sequence& s) {
  const int32_t n_full = std::min(s.n_tokens / block_size_, static_cast<int32_t>(s.hashes.size()));
  const auto bs = static_cast<size_t>(block_size_);
  for (int32_t i = s.n_indexed; i < n_full; ++i) {
    const auto ii = static_cast<size_t>(i);
    const BlockHash parent = i == 0 ? kRootHash : s.hashes[ii - 1];
    const std::span<const int32_t> tokens(s.tokens.data() + ii * bs, bs);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const int32_t block = s.table[g][ii];
      if (block >= 0) prefix_[g].insert(block, s.hashes[ii], parent, tokens);
    }
  }
  s.n_indexed = std::max(s.n_indexed, n_full);
}

void KvCache::set_tokens(int32_t seq, std::span<const int32_t> tokens) {
  Sequence& s = sequence(seq, "set_tokens");
  if (prefix_.empty()) return;
  if (tokens.size() > static_cast<size_t>(max_context_)) {
    throw Error(str_cat("kv cache: set_tokens: sequence ", seq, ": ", tokens.size(),
                        " tokens, past max_context ", max_context_));
  }
  if (tokens.size() < s.tokens.size()) {
    throw Error(str_cat("kv cache: set_tokens: sequence ", seq, ": ", tokens.size(),
                        " tokens, fewer than the ", s.tokens.size(), " given before"));
  }
  s.tokens.insert(s.tokens.end(), tokens.begin() + static_cast<std::ptrdiff_t>(s.tokens.size()),
                  tokens.end());
  extend_block_hashes(s.tokens, block_size_, s.hashes);
  index_committed_blocks(s);
}

int32_t KvCache::cached_block(size_t g, const Sequence& s, int32_t i) const {
  const auto ii = static_cast<size_t>(i);
  const auto bs = static_cast<size_t>(block_size_);
  return prefix_[g].find(s.hashes[ii], i == 0 ? kRootHash : s.hashes[ii - 1],
                         std::span<const int32_t>(s.tokens.data() + ii * bs, bs));
}

int32_t KvCache::attach_prefix(int32_t seq, std::span<const int32_t> tokens) {
  Sequence& s = sequence(seq, "attach_prefix");
  if (prefix_.empty() || tokens.empty()) return 0;
  if (s.n_tokens != 0 || !s.table[0].empty()) {
    throw Error(str_cat("kv cache: attach_prefix: sequence ", seq, " already holds ",
                        s.n_tokens, " tokens"));
  }
  set_tokens(seq, tokens);
  // First block a windowed group still needs when the next query is at block k's start.
  auto first_needed = [&](const KvGroup& group, int32_t k) -> int32_t {
    if (group.window == 0) return 0;
    const int64_t first_pos = int64_t{k} * block_size_ - group.window + 1;
    return first_pos <= 0 ? 0 : static_cast<int32_t>(first_pos / block_size_);
  };
  // At least the last token is computed again, so that it has logits.
  int32_t k = static_cast<int32_t>((tokens.size() - 1) / static_cast<size_t>(block_size_));
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].window != 0) continue;
    int32_t hit = 0;
    while (hit < k && cached_block(g, s, hit) != PrefixCache::kNoBlock) ++hit;
    k = hit;
  }
  s.n_matched = k;
  int32_t checkpoint = -1;  // of block k - 1, with recurrent layers
  for (; k > 0; --k) {
    // A recurrence resumes only from a checkpoint of the prefix's last block.
    if (!checkpoints_.empty()) checkpoint = find_checkpoint(s, k - 1);
    bool all_cached = checkpoints_.empty() || checkpoint >= 0;
    for (size_t g = 0; g < groups_.size() && all_cached; ++g) {
      if (groups_[g].window == 0) continue;
      for (int32_t i = first_needed(groups_[g], k); i < k && all_cached; ++i) {
        all_cached = cached_block(g, s, i) != PrefixCache::kNoBlock;
      }
    }
    if (all_cached) break;
  }
  if (k == 0) return 0;
  if (checkpoint >= 0) {
    Checkpoint& c = checkpoints_[static_cast<size_t>(checkpoint)];
    std::memcpy(live_state(seq), checkpoint_state(checkpoint), sizeof(float) * static_cast<size_t>(state_live_floats_));
    c.last_use = ++checkpoint_clock_;
    c.provisional = false;  // it served a hit: keep it
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int32_t first = first_needed(groups_[g], k);
    std::vector<int32_t>& table = s.table[g];
    for (int32_t i = 0; i < k; ++i) {
      if (i < first) {
        table.push_back(BlockPool::kNoBlock);
        continue;
      }
      const int32_t block = cached_block(g, s, i);
      if (pools_[g].is_free(block)) {
        pools_[g].take(block);
        --n_cached_[g];
      } else {
        pools_[g].retain(block);
      }
      table.push_back(block);
    }
    s.first_live[g] = first;
  }
  s.n_tokens = k * block_size_;
  s.n_indexed = k;
  return s.n_tokens;
}

bool KvCache::can_fit(int32_t n_tokens) const {
  if (n_tokens < 0 || n_tokens > max_context_ || n_active_ == max_sequences()) return false;
  const int64_t need = ceil_div(n_tokens, block_size_);
  for (const BlockPool& p : pools_) {
    if (p.n_free() < need) return false;
  }
  return true;
}

int32_t KvCache::max_tokens_per_sequence() const {
  int64_t limit = max_context_;
  for (const KvGroup& g : groups_) {
    const int64_t held = int64_t{g.n_blocks} * block_size_;
    // A windowed pool that holds one window plus the block being filled recycles forever
    // when decoding; a smaller one stops the sequence once it is full.
    if (g.window > 0 && g.n_blocks >= kv_window_blocks(g.window, 1, block_size_, max_context_)) {
      continue;
    }
    limit = std::min(limit, held);
  }
  return static_cast<int32_t>(limit);
}

KvLayerView KvCache::layer(int32_t il) const {
  const int g = group_of_layer(il);
  if (g < 0) throw Error(str_cat("kv cache: layer ", il, " is recurrent: it has no K/V"));
  const KvLayerSpec& l = layers_[static_cast<size_t>(il)];
  const LayerStorage& s = storage_layout_[static_cast<size_t>(il)];
  KvLayerView view;
  view.k = storage_.get() + s.k_offset;
  view.v = storage_.get() + s.v_offset;
  view.n_blocks = groups_[static_cast<size_t>(g)].n_blocks;
  view.block_size = block_size_;
  view.n_kv_head = l.n_kv_head;
  view.d_head = l.d_head;
  view.dtype = dtype_;
  view.row_bytes = s.row_bytes;
  return view;
}

void* KvCache::row(int32_t il, int32_t block, int32_t offset, bool is_v) const {
  assert(il >= 0 && il < n_layer());
  const LayerStorage& s = storage_layout_[static_cast<size_t>(il)];
  assert(block >= 0 && block < s.n_blocks && offset >= 0 && offset < block_size_);
  return storage_.get() + (is_v ? s.v_offset : s.k_offset) +
         (static_cast<size_t>(block) * static_cast<size_t>(block_size_) +
          static_cast<size_t>(offset)) * s.row_bytes;
}

void* KvCache::k_row(int32_t il, int32_t block, int32_t offset) const {
  return row(il, block, offset, false);
}

void* KvCache::v_row(int32_t il, int32_t block, int32_t offset) const {
  return row(il, block, offset, true);
}

}  // namespace ridge
