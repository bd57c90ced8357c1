// KvCache's recurrent state (hybrid models): the live state of each sequence slot, its
// snapshots for speculative rollback, and the checkpoints that let a prefix-cache hit
// resume a recurrence. The layout and the rules are in kv/kv_cache.h ("Recurrent state").
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kv/kv_cache.h"

namespace ridge {

namespace {
constexpr int64_t kStateAlignFloats = 16;  // each layer's state starts on a cache line
int64_t padded_state(int64_t floats) { return (floats + kStateAlignFloats - 1) / kStateAlignFloats * kStateAlignFloats; }
}  // namespace

int64_t kv_state_floats_per_sequence(const KvCacheConfig& config) {
  int64_t floats = 0;
  const int64_t snapshots = std::max(config.state_snapshots, 0);
  for (const KvLayerSpec& l : config.layers)
    if (l.recurrent()) floats += padded_state(l.state_floats) + padded_state(snapshots * l.state_floats);
  return floats;
}

int64_t kv_state_live_floats(const KvCacheConfig& config) {
  int64_t floats = 0;
  for (const KvLayerSpec& l : config.layers)
    if (l.recurrent()) floats += padded_state(l.state_floats);
  return floats;
}

size_t kv_state_bytes(const KvCacheConfig& config) {
  const int64_t live = kv_state_live_floats(config);
  const int64_t checkpoints = config.prefix_cache && live > 0 ? std::max(config.state_checkpoints, 0) : 0;
  return sizeof(float) * static_cast<size_t>(kv_state_floats_per_sequence(config) * config.max_sequences +
                                             live * checkpoints);
}

void KvCache::lay_out_state(size_t offset) {
  // Recurrent state: [max_sequences][state_floats_per_sequence_], each layer's part aligned.
  state_base_ = offset;
  int64_t state_floats = 0;
  for (size_t il = 0; il < layers_.size(); ++il) {
    if (!layers_[il].recurrent()) continue;
    storage_layout_[il].state_offset = state_floats;
    state_floats += padded_state(layers_[il].state_floats);
  }
  state_live_floats_ = state_floats;
  for (size_t il = 0; il < layers_.size(); ++il) {  // the snapshots after every live state
    if (!layers_[il].recurrent()) continue;
    storage_layout_[il].snapshot_offset = state_floats;
    state_floats += padded_state(int64_t{config_.state_snapshots} * layers_[il].state_floats);
  }
  state_floats_per_sequence_ = state_floats;
  checkpoint_base_ = state_base_ + sizeof(float) * static_cast<size_t>(state_floats_per_sequence_) *
                                       static_cast<size_t>(config_.max_sequences);
}

float* KvCache::state(int32_t il, int32_t seq) const {
  sequence(seq, "state");
  if (il < 0 || il >= n_layer() || !layers_[static_cast<size_t>(il)].recurrent())
    throw Error(str_cat("kv cache: state: layer ", il, " is not a recurrent layer"));
  return reinterpret_cast<float*>(storage_.get() + state_base_ +
                                  static_cast<size_t>(seq) * state_bytes_per_sequence()) +
         storage_layout_[static_cast<size_t>(il)].state_offset;
}

float* KvCache::state_snapshot(int32_t il, int32_t seq, int32_t k) const {
  float* live = state(il, seq);  // checks seq and il
  if (k < 0 || k >= config_.state_snapshots)
    throw Error(str_cat("kv cache: state snapshot ", k, " outside 0..", config_.state_snapshots - 1));
  const KvLayerSpec& l = layers_[static_cast<size_t>(il)];
  const LayerStorage& s = storage_layout_[static_cast<size_t>(il)];
  return live - s.state_offset + s.snapshot_offset + int64_t{k} * (l.state_floats - l.state_tail_floats);
}

float* KvCache::state_snapshot_tail(int32_t il, int32_t seq, int32_t k) const {
  const KvLayerSpec& l = layers_[static_cast<size_t>(il)];
  return state_snapshot(il, seq, 0) + int64_t{config_.state_snapshots} * (l.state_floats - l.state_tail_floats) +
         int64_t{k} * l.state_tail_floats;
}

void KvCache::mark_snapshots(int32_t seq, int32_t first, int32_t n) {
  Sequence& s = sequence(seq, "mark_snapshots");
  if (n < 0 || n > config_.state_snapshots || first < 0)
    throw Error(str_cat("kv cache: mark_snapshots: ", n, " snapshots from position ", first, " (the cache keeps ",
                        config_.state_snapshots, ")"));
  s.snapshot_first = first;
  s.n_snapshots = n;
}

void KvCache::restore_snapshot(int32_t seq, int32_t k) {
  for (size_t il = 0; il < layers_.size(); ++il) {
    const KvLayerSpec& l = layers_[il];
    if (!l.recurrent()) continue;
    const int64_t main = l.state_floats - l.state_tail_floats;
    float* live = state(static_cast<int32_t>(il), seq);
    std::memcpy(live, state_snapshot(static_cast<int32_t>(il), seq, k), sizeof(float) * static_cast<size_t>(main));
    std::memcpy(live + main, state_snapshot_tail(static_cast<int32_t>(il), seq, k),
                sizeof(float) * static_cast<size_t>(l.state_tail_floats));
  }
}

float* KvCache::live_state(int32_t seq) const {
  return reinterpret_cast<float*>(storage_.get() + state_base_ + static_cast<size_t>(seq) * state_bytes_per_sequence());
}

float* KvCache::checkpoint_state(int32_t c) const {
  return reinterpret_cast<float*>(storage_.get() + checkpoint_base_) + int64_t{c} * state_live_floats_;
}

int32_t KvCache::find_checkpoint(const Sequence& s, int32_t i) const {
  const auto ii = static_cast<size_t>(i);
  if (i < 0 || ii >= s.hashes.size()) return -1;
  const BlockHash parent = i == 0 ? kRootHash : s.hashes[ii - 1];
  for (size_t c = 0; c < checkpoints_.size(); ++c) {
    const Checkpoint& k = checkpoints_[c];
    if (k.last_use != 0 && k.hash == s.hashes[ii] && k.parent == parent) return static_cast<int32_t>(c);
  }
  return -1;
}

int32_t KvCache::n_checkpoints_held() const {
  int32_t n = 0;
  for (const Checkpoint& c : checkpoints_) n += c.last_use != 0;
  return n;
}

int32_t KvCache::prefix_blocks_matched(int32_t seq) const {
  const Sequence& s = sequence(seq, "prefix_blocks_matched");
  return prefix_.empty() ? 0 : s.n_matched;
}

bool KvCache::save_checkpoint(int32_t seq, bool provisional) {
  Sequence& s = sequence(seq, "save_checkpoint");
  if (checkpoints_.empty() || s.n_tokens == 0 || s.n_tokens % block_size_ != 0) return false;
  const int32_t i = s.n_tokens / block_size_ - 1;
  if (static_cast<size_t>(i) >= s.hashes.size()) return false;  // tokens not given: not hashed
  if (const int32_t c = find_checkpoint(s, i); c >= 0) {
    Checkpoint& k = checkpoints_[static_cast<size_t>(c)];
    k.last_use = ++checkpoint_clock_;
    k.provisional = k.provisional && provisional;
    return false;
  }
  // The victim: an empty one, else the least recently used provisional one, else (for a
  // checkpoint that is not provisional itself) the least recently used of all.
  auto older = [&](size_t a, size_t b) {  // whether a goes before b
    const Checkpoint &x = checkpoints_[a], &y = checkpoints_[b];
    if ((x.last_use == 0) != (y.last_use == 0)) return x.last_use == 0;
    if (x.provisional != y.provisional) return x.provisional;
    return x.last_use < y.last_use;
  };
  size_t victim = 0;
  for (size_t c = 1; c < checkpoints_.size(); ++c)
    if (older(c, victim)) victim = c;
  Checkpoint& k = checkpoints_[victim];
  if (provisional && k.last_use != 0 && !k.provisional) return false;  // never evicts a kept one
  k.hash = s.hashes[static_cast<size_t>(i)];
  k.parent = i == 0 ? kRootHash : s.hashes[static_cast<size_t>(i) - 1];
  k.last_use = ++checkpoint_clock_;
  k.provisional = provisional;
  std::memcpy(checkpoint_state(static_cast<int32_t>(victim)), live_state(seq),
              sizeof(float) * static_cast<size_t>(state_live_floats_));
  return true;
}

}  // namespace ridge
