#include "model/model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/attention/attention.h"
#include "kernels/ops/ops.h"

namespace ridge {

namespace {

// fn(begin, end) over the token rows [0, n_rows) of an elementwise or per-row step (norms,
// residual adds, activations): split over the pool for a prompt, on the caller for a
// decode step's row or few. Each row is computed alike either way.
template <class Fn>
void for_rows(ThreadPool& pool, int64_t n_rows, int64_t row_elements, Fn&& fn) {
  constexpr int64_t kParallelElements = 65536;  // below, waking the pool costs more
  if (n_rows > 1 && n_rows * row_elements >= kParallelElements)
    pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) { fn(begin, end); });
  else
    fn(0, n_rows);
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const ModelOptions& options) {
  return std::unique_ptr<Model>(new Model(gguf::File::open(path), options));
}

Model::Model(gguf::File file, const ModelOptions& options)
    : file_(std::move(file)),
      options_(options),
      config_(ModelConfig::from_gguf(file_)),
      weights_(ModelWeights::load(file_, config_)),
      owned_pool_(options.pool == nullptr ? std::make_unique<ThreadPool>(options.n_threads) : nullptr),
      pool_(options.pool == nullptr ? *owned_pool_ : *options.pool) {
  if (options_.max_batch_tokens <= 0)
    throw Error(str_cat("max_batch_tokens must be positive, got ", options_.max_batch_tokens));
  kernels::best_isa();  // a bad RIDGE_ISA is an error here, at load, not inside a step
  if (options_.comm != nullptr && options_.comm->size() > 1) comm_ = options_.comm;
  if (comm_ != nullptr && options_.weights != WeightFormat::kAsStored)
    throw Error(str_cat("tensor parallel: --weights ", weight_format_name(options_.weights),
                        " is not supported with --tp above 1 (the converted matrices are not split)"));
  if (config_.is_hybrid() && comm_ != nullptr)
    throw Error(str_cat(file_.name(), ": tensor parallelism (--tp) is not supported for ", config_.arch,
                        "'s recurrent layers yet"));
  if (options_.weights == WeightFormat::kNf4) convert_layer_matrices(DType::NF4);
  if (options_.weights == WeightFormat::kInt8) convert_layer_matrices(DType::I8_ROWS);
  shard_ = plan_tp_shard(config_, weights_, comm_ != nullptr ? comm_->rank() : 0, comm_ != nullptr ? comm_->size() : 1);
  shard_weights(weights_, config_, shard_);
  if (kernels::weight_repack_enabled()) repack_layer_matrices();  // after the split: each rank its own slices
  shard_config_ = config_;
  shard_config_.n_head = shard_.n_head;
  shard_config_.n_kv_head = shard_.n_kv_head;
  shard_config_.n_ff = shard_.n_ff;
  for (int r = 0; r <= shard_.n_ranks; ++r) tp_vocab_first_.push_back(int64_t{config_.n_vocab} * r / shard_.n_ranks);
  const ModelConfig& c = shard_config_;
  const size_t t = static_cast<size_t>(options_.max_batch_tokens);
  x_.resize(t * c.n_embd);
  h_.resize(t * c.n_embd);
  q_.resize(t * c.n_head * c.d_head);
  k_.resize(t * c.n_kv_head * c.d_head);
  v_.resize(t * c.n_kv_head * c.d_head);
  attn_.resize(t * c.n_head * c.d_head);
  gate_.resize(t * std::max({c.n_ff, c.n_ff_expert, c.n_ff_shared}));
  up_.resize(t * std::max({c.n_ff, c.n_ff_expert, c.n_ff_shared}));
  if (c.n_expert > 0) {
    router_.resize(t * c.n_expert);
    expert_first_.resize(static_cast<size_t>(c.n_expert) + 1);
    expert_tokens_.resize(t * c.n_expert_used);
    expert_weights_.resize(t * c.n_expert_used);
    token_experts_.resize(t * c.n_expert_used);
    token_weights_.resize(t * c.n_expert_used);
    expert_last_.reserve(static_cast<size_t>(c.n_expert));
    expert_in_.resize(t * c.n_embd);
    expert_out_.resize(t * c.n_embd);
    moe_sum_.resize(t * c.n_embd);
  }
  final_.resize(t * c.n_embd);
  attention_items_.reserve(t);
  if (c.attn_output_gate) q_gate_.resize(t * 2 * c.n_head * c.d_head);
  if (c.is_hybrid()) {
    const size_t channels = 2 * static_cast<size_t>(c.ssm_groups) * c.ssm_state + c.ssm_inner;
    ssm_mix_.resize(t * channels);
    ssm_conv_.resize(t * channels);
    ssm_z_.resize(t * c.ssm_inner);
    ssm_core_.resize(t * c.ssm_inner);
    ssm_beta_.resize(t * c.ssm_heads);
    ssm_g_.resize(t * c.ssm_heads);
    if (c.ssm_grouped_heads) ssm_fused_.resize(t * (channels + c.ssm_inner + 2 * static_cast<size_t>(c.ssm_heads)));
  }
  const float* freq_factors = weights_.rope_freqs;
  if (weights_.rope_factors_long != nullptr) {
    const int32_t n_ctx = options_.n_ctx > 0 ? options_.n_ctx : c.n_ctx_train;
    freq_factors = n_ctx > c.n_ctx_orig ? weights_.rope_factors_long : weights_.rope_factors_short;
  }
  for (const LayerConfig& l : c.layers) {
    const kernels::RopeParams p{c.rope_mode, c.n_rot,        l.rope_base, l.rope_scale, freq_factors,
                                l.yarn,      l.yarn_low,     l.yarn_high, l.rope_mscale};
    const auto found = std::find(rope_params_.begin(), rope_params_.end(), p);
    layer_rope_.push_back(static_cast<int>(found - rope_params_.begin()));
    if (found == rope_params_.end()) rope_params_.push_back(p);
  }
  rope_tables_.resize(rope_params_.size() * t * c.n_rot);

  size_t floats = kernels::matmul_scratch_floats(weights_.output);
  size_t shared = kernels::matmul_shared_bytes(weights_.output, options_.max_batch_tokens);
  auto size_for = [&](const kernels::WeightMatrix& w) {
    if (w.data == nullptr) return;  // a dense matrix of a mixture-of-experts layer
    floats = std::max(floats, kernels::matmul_scratch_floats(w));
    shared = std::max(shared, kernels::matmul_shared_bytes(w, options_.max_batch_tokens));
  };
  for (const LayerWeights& l : weights_.layers) {
    for (const kernels::WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.gate_inp})
      size_for(*w);
    for (const kernels::WeightMatrix* w : {&l.ssm_qkv, &l.ssm_z, &l.ssm_beta, &l.ssm_alpha, &l.ssm_out}) size_for(*w);
    for (const ExpertWeights& e : l.experts)
      for (const kernels::WeightMatrix* w : {&e.w_gate, &e.w_up, &e.w_down}) size_for(*w);
  }
  scratch_.reserve_shared(shared);
  // The block size is the KV cache's; size for the largest we allow (64).
  floats = std::max(floats, kernels::attention_scratch_floats(c.n_head, c.n_kv_head, c.d_head, 64));
  scratch_.reserve(pool_.n_threads(), floats);
}

const char* matmul_site_name(MatmulSite site) {
  switch (site) {
    case MatmulSite::kQkv: return "qkv";
    case MatmulSite::kAttnOutput: return "attn_output";
    case MatmulSite::kGateUp: return "gate_up";
    case MatmulSite::kDown: return "down";
  }
  return "unknown";
}

void Model::replace_matrix(const std::string& name, DType dtype, const uint8_t* data) {
  int layer = -1;
  char kind[32] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%31[a-z_].weight", &layer, kind) != 2 || layer < 0 || layer >= config_.n_layer)
    throw Error(str_cat("replace_matrix: '", name, "' is not a layer matrix of this model"));
  LayerWeights& l = weights_.layers[static_cast<size_t>(layer)];
  const std::string k = kind;
  kernels::WeightMatrix* w = k == "attn_q" ? &l.wq : k == "attn_k" ? &l.wk : k == "attn_v" ? &l.wv
                             : k == "attn_output" ? &l.wo : k == "ffn_gate" ? &l.w_gate : k == "ffn_up" ? &l.w_up
                             : k == "ffn_down" ? &l.w_down : nullptr;
  if (w == nullptr) throw Error(str_cat("replace_matrix: '", name, "' is not a layer matrix of this model"));
  if (w->data == nullptr)
    throw Error(str_cat("replace_matrix: '", name, "' is not in this model (its layers are mixtures of experts, "
                        "which calibration does not support yet)"));
  const kernels::WeightMatrix replaced = kernels::weight_matrix(dtype, w->n_in, w->n_out, data);
  kernels::check_weight_matrix(replaced, name);
  *w = replaced;
  // The new type may need more scratch than the old (outside any step: allocation is fine).
  scratch_.reserve_shared(kernels::matmul_shared_bytes(*w, options_.max_batch_tokens));
  scratch_.reserve(pool_.n_threads(), kernels::matmul_scratch_floats(*w));
}

void Model::replace_vector(const std::string& name, const float* data) {
  int layer = -1;
  char kind[40] = {};
  if (std::sscanf(name.c_str(), "blk.%d.%39[a-z_.]", &layer, kind) != 2 || layer < 0 || layer >= config_.n_layer)
    throw Error(str_cat("replace_vector: '", name, "' is not a layer norm or V bias of this model"));
  LayerWeights& l = weights_.layers[static_cast<size_t>(layer)];
  const std::string k = kind;
  const float** v = k == "attn_norm.weight" ? &l.attn_norm
                    : k == "ffn_norm.weight" ? &l.ffn_norm
                    : k == "attn_v.bias"     ? &l.bv
                                             : nullptr;
  if (v == nullptr || *v == nullptr || data == nullptr)
    throw Error(str_cat("replace_vector: '", name, "' is not a layer norm or V bias of this model"));
  *v = data;
}

double Model::weight_bytes_per_step() const {
  if (comm_ != nullptr) {  // this rank's slices, and one embedding row (norms: a rounding error)
    auto bytes_of = [](const kernels::WeightMatrix& w) { return double(w.n_out) * double(row_size(w.dtype, w.n_in)); };
    double bytes = bytes_of(weights_.output) + double(row_size(weights_.token_embd.dtype, config_.n_embd));
    for (const LayerWeights& l : weights_.layers)
      for (const kernels::WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
        bytes += bytes_of(*w);
    return bytes;
  }
  double bytes = 0;
  // Of the experts, a one-token step reads the n_expert_used its router picks.
  const double active = config_.n_expert > 0 ? double(config_.n_expert_used) / config_.n_expert : 1.0;
  // MTP blocks after the trunk (blk.n_layer ...) are not part of a step.
  for (const gguf::TensorInfo& t : file_.tensors()) {
    if (config_.n_nextn_layers > 0 && t.name.rfind("blk.", 0) == 0 &&
        std::atoi(t.name.c_str() + 4) >= config_.n_layer)
      continue;
    bytes += static_cast<double>(t.nbytes) * (t.name.find("_exps.") != std::string::npos ? active : 1.0);
  }
  const gguf::TensorInfo* embd = file_.find_tensor("token_embd.weight");
  const bool tied = file_.find_tensor("output.weight") == nullptr;
  if (embd != nullptr && !tied) bytes -= static_cast<double>(embd->nbytes) * (1.0 - 1.0 / static_cast<double>(embd->ne[1]));
  return bytes + converted_bytes_delta_;
}

double Model::active_expert_bytes_per_step() const {
  if (config_.n_expert == 0) return 0;
  double bytes = 0;
  for (const gguf::TensorInfo& t : file_.tensors())
    if (t.name.find("_exps.") != std::string::npos) bytes += static_cast<double>(t.nbytes);
  return bytes * config_.n_expert_used / config_.n_expert;
}

KvCacheConfig Model::kv_cache_config(size_t budget_bytes, int32_t max_sequences, int32_t max_context) const {
  KvCacheConfig kv;
  for (int32_t il = 0; il < config_.n_layer; ++il) {
    const LayerConfig& l = config_.layers[static_cast<size_t>(il)];
    if (l.kind == LayerKind::kAttention)
      kv.layers.push_back({shard_.n_kv_head, config_.d_head, l.window});
    else
      kv.layers.push_back({0, 0, 0, config_.state_floats(il), config_.state_tail_floats(il)});
  }
  kv.budget_bytes = budget_bytes;
  kv.max_sequences = max_sequences;
  kv.max_context = max_context > 0 ? max_context : config_.n_ctx_train;
  kv.max_step_tokens = options_.max_batch_tokens;
  return kv;
}

void Model::validate(const Batch& b, const KvCache& cache) const {
  const int32_t n = b.n_tokens();
  if (n == 0) throw Error("forward: empty batch");
  if (n > options_.max_batch_tokens)
    throw Error(str_cat("forward: batch of ", n, " tokens exceeds max_batch_tokens ", options_.max_batch_tokens));
  if (b.positions.size() != b.tokens.size()) throw Error("forward: positions and tokens differ in length");
  for (int32_t i = 0; i < n; ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= config_.n_vocab)
      throw Error(str_cat("forward: token id ", b.tokens[i], " at row ", i, " is outside the vocabulary [0, ",
                          config_.n_vocab, ")"));
  int32_t row = 0;
  for (const BatchSequence& s : b.sequences) {
    if (s.first != row || s.n_tokens <= 0) throw Error("forward: batch sequences must cover the rows in order");
    if (!cache.has_sequence(s.seq)) throw Error(str_cat("forward: sequence ", s.seq, " is not in the KV cache"));
    if (s.start_pos != cache.n_tokens(s.seq))
      throw Error(str_cat("forward: sequence ", s.seq, " starts at position ", s.start_pos, " but the cache holds ",
                          cache.n_tokens(s.seq), " tokens"));
    if (cache.capacity(s.seq) < s.start_pos + s.n_tokens)
      throw Error(str_cat("forward: sequence ", s.seq, " has room for ", cache.capacity(s.seq), " tokens, needs ",
                          s.start_pos + s.n_tokens, " (reserve first)"));
    for (int32_t i = 0; i < s.n_tokens; ++i)
      if (b.positions[s.first + i] != s.start_pos + i)
        throw Error(str_cat("forward: row ", s.first + i, " has position ", b.positions[s.first + i], ", expected ",
                            s.start_pos + i));
    if (s.n_tentative < 0 || s.n_tentative > s.start_pos + s.n_tokens)
      throw Error(str_cat("forward: sequence ", s.seq, " marks ", s.n_tentative, " tokens tentative of ",
                          s.start_pos + s.n_tokens));
    for (const BatchSequence& other : b.sequences)
      if (&other != &s && other.seq == s.seq) throw Error(str_cat("forward: sequence ", s.seq, " appears twice"));
    row += s.n_tokens;
  }
  if (row != n) throw Error("forward: batch sequences do not cover every row");
  for (size_t i = 0; i < b.logit_rows.size(); ++i)
    if (b.logit_rows[i] < 0 || b.logit_rows[i] >= n || (i > 0 && b.logit_rows[i] <= b.logit_rows[i - 1]))
      throw Error(str_cat("forward: logit row ", b.logit_rows[i], " is out of range or out of order"));
  for (size_t i = 0; i < b.hidden_rows.size(); ++i)
    if (b.hidden_rows[i] < 0 || b.hidden_rows[i] >= n || (i > 0 && b.hidden_rows[i] <= b.hidden_rows[i - 1]))
      throw Error(str_cat("forward: hidden row ", b.hidden_rows[i], " is out of range or out of order"));
  if (cache.block_size() > 64) throw Error("forward: KV block size above 64 is not supported");
}

void Model::forward(const Batch& b, KvCache& cache, float* logits) {
  forward(b, cache, LogitSink{logits, std::max(b.n_logit_rows(), 1), nullptr, nullptr});
}

void Model::forward(const Batch& b, KvCache& cache, const LogitSink& sink) {
  validate(b, cache);
  if (sink.max_rows < 1 || (b.n_logit_rows() > 0 && sink.buffer == nullptr))
    throw Error(str_cat("forward: logit sink of ", sink.max_rows, " rows"));
  if (b.n_hidden_rows() > 0 && !sink.on_hidden)
    throw Error(str_cat("forward: ", b.n_hidden_rows(), " hidden rows asked for and no sink for them"));
  if (comm_ != nullptr && observer_ != nullptr)
    throw Error("forward: calibration observers are not supported under tensor parallelism");
  if (comm_ != nullptr) send_tp_step(b, cache, sink.max_rows);
  load_step_tables(b, cache);
  const bool stopped = !run_layers(b, cache);
  for (const BatchSequence& s : b.sequences) {
    // A verify chunk's recurrent states after each of its tokens (delta_net_layer wrote them):
    // rejected drafts roll back to the last accepted one.
    if (cache.has_recurrent_state())
      cache.mark_snapshots(s.seq, s.start_pos, snapshots_states(s, cache) ? s.n_tokens : 0);
    cache.commit(s.seq, s.n_tokens);
    cache.recycle_window(s.seq, s.n_tentative);
  }
  if (stopped) return;

  // Final hidden states (embeddings): the output norm of the wanted rows, gathered into h_,
  // which the layers no longer need.
  const int32_t n_hidden = b.n_hidden_rows();
  if (n_hidden > 0) {
    output_norm_rows(b.hidden_rows, h_.data());
    sink.on_hidden(n_hidden, h_.data());
  }

  output_logits(b, sink);
}

bool Model::run_layers(const Batch& b, KvCache& cache) {
  const int32_t n = b.n_tokens();
  embed(b, x_.data());
  prepare_rope(b);
  for (int il = 0; il < config_.n_layer; ++il) {
    if (config_.layers[static_cast<size_t>(il)].kind == LayerKind::kDeltaNet)
      delta_net_layer(il, b, cache, n);
    else
      attention_layer(il, b, cache, n);
    mlp_layer(il, n);
    if (observer_ != nullptr && !observer_->continue_after_layer(il)) return false;
  }
  return true;
}

void Model::output_logits(const Batch& b, const LogitSink& sink) {
  // Final norm and output projection for the rows that need logits only, a slice of the
  // sink's rows at a time. Under tensor parallelism every rank computes its rows of the
  // vocabulary and rank 0 gathers them: the other ranks' sinks are their own buffers.
  const ModelConfig& c = config_;
  const int32_t n_out = b.n_logit_rows();
  if (n_out == 0) return;
  output_norm_rows(b.logit_rows, final_.data());
  for (int32_t first = 0; first < n_out; first += sink.max_rows) {
    const int32_t n = std::min(sink.max_rows, n_out - first);
    kernels::matmul(weights_.output, final_.data() + static_cast<size_t>(first) * c.n_embd, sink.buffer, n, pool_,
                    scratch_);
    apply_scale(sink.buffer, static_cast<int64_t>(n) * (comm_ != nullptr ? shard_.n_vocab : c.n_vocab),
                weights_.output_scale);
    if (comm_ != nullptr) gather_logits(sink.buffer, n);
    if (is_tp_worker()) continue;
    if (c.final_softcap > 0) kernels::softcap(sink.buffer, static_cast<int64_t>(n) * c.n_vocab, c.final_softcap);
    if (sink.on_rows) sink.on_rows(first, n, sink.buffer);
  }
}

void Model::output_norm_rows(std::span<const int32_t> rows, float* out) {
  const ModelConfig& c = config_;
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out + i * c.n_embd, x_.data() + static_cast<size_t>(rows[i]) * c.n_embd, sizeof(float) * c.n_embd);
  kernels::rms_norm(out, weights_.output_norm, out, static_cast<int64_t>(rows.size()), c.n_embd, c.norm_eps);
}

void Model::embed(const Batch& b, float* x) {
  // Token embeddings, scaled (Gemma).
  const ModelConfig& c = config_;
  const kernels::WeightMatrix& embd = weights_.token_embd;
  for (int32_t t = 0; t < b.n_tokens(); ++t) {
    float* row = x + static_cast<size_t>(t) * c.n_embd;
    dequantize_row(embd.dtype, embd.data + static_cast<size_t>(b.tokens[t]) * embd.row_bytes, row, c.n_embd);
    if (c.embd_scale != 1.0f) kernels::scale(row, c.n_embd, c.embd_scale);
  }
}

void Model::prepare_rope(const Batch& b) {
  // This step's RoPE angles, one table per distinct layer setting.
  for (size_t i = 0; i < rope_params_.size(); ++i)
    kernels::rope_table(b.positions.data(), b.n_tokens(), rope_params_[i], rope_table(static_cast<int>(i)));
}

void Model::forward_layer(int il, const Batch& b, KvCache& cache, float* x) {
  validate(b, cache);
  if (comm_ != nullptr) throw Error("forward_layer: calibration is not supported under tensor parallelism");
  if (il < 0 || il >= config_.n_layer) throw Error(str_cat("forward_layer: layer ", il, " outside 0..", config_.n_layer - 1));
  const int32_t n = b.n_tokens();
  const size_t floats = static_cast<size_t>(n) * static_cast<size_t>(config_.n_embd);
  std::memcpy(x_.data(), x, floats * sizeof(float));
  load_step_tables(b, cache);
  prepare_rope(b);
  attention_layer(il, b, cache, n);
  mlp_layer(il, n);
  std::memcpy(x, x_.data(), floats * sizeof(float));
}

void Model::load_step_tables(const Batch& b, const KvCache& cache) {
  step_tables_.clear();
  for (const BatchSequence& s : b.sequences)
    for (int g = 0; g < cache.n_groups(); ++g) step_tables_.push_back(cache.block_table(s.seq, g));
}

void Model::gather_logits(float* logits, int32_t n) {
  // The other ranks send their columns ([n][their width]) to rank 0.
  const int64_t width = shard_.n_vocab, n_vocab = config_.n_vocab;
  if (is_tp_worker()) return comm_->gather_columns(nullptr, n, n_vocab, logits, tp_vocab_first_.data());
  // On rank 0 its own columns came out as [n][its width] at the front: spread them to
  // their rows (last row first: a row's destination never overlaps a row not yet moved),
  // then the other ranks' columns arrive in place.
  for (int64_t t = n - 1; t > 0; --t)
    std::memmove(logits + t * n_vocab, logits + t * width, sizeof(float) * static_cast<size_t>(width));
  comm_->gather_columns(logits, n, n_vocab, nullptr, tp_vocab_first_.data());
}

void Model::all_reduce(float* x, int64_t n) {
  if (comm_ != nullptr) comm_->all_reduce_sum(x, n);
}

void Model::attention_layer(int il, const Batch& b, KvCache& cache, int32_t n) {
  const ModelConfig& c = shard_config_;
  const LayerWeights& w = weights_.layers[il];
  const LayerConfig& lc = c.layers[il];
  const int64_t q_dim = int64_t{c.n_head} * c.d_head;
  const int64_t kv_dim = int64_t{c.n_kv_head} * c.d_head;

  const int64_t d = c.n_embd;
  for_rows(pool_, n, d, [&](int64_t t0, int64_t t1) {
    kernels::rms_norm(x_.data() + t0 * d, w.attn_norm, h_.data() + t0 * d, t1 - t0, d, c.norm_eps);
  });
  if (observer_ != nullptr) observer_->on_matmul_input(il, MatmulSite::kQkv, h_.data(), n, c.n_embd);
  {  // one parallel region, h quantized once
    const kernels::WeightMatrix* ws[] = {&w.wq, &w.wk, &w.wv};
    float* ys[] = {c.attn_output_gate ? q_gate_.data() : q_.data(), k_.data(), v_.data()};
    kernels::matmul_group(ws, h_.data(), ys, n, pool_, scratch_);
    apply_scale(ys[0], n * w.wq.n_out, w.scale.wq);
    apply_scale(ys[1], n * kv_dim, w.scale.wk);
    apply_scale(ys[2], n * kv_dim, w.scale.wv);
  }
  if (c.attn_output_gate) {  // each head's q, then its gate: q into q_, the gate kept in q_gate_
    if (w.bq != nullptr)
      for (int64_t t = 0; t < n; ++t) kernels::add(q_gate_.data() + t * 2 * q_dim, w.bq, q_gate_.data() + t * 2 * q_dim, 2 * q_dim);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t hd = 0; hd < c.n_head; ++hd)
        std::memcpy(q_.data() + (t * c.n_head + hd) * c.d_head, q_gate_.data() + (t * c.n_head + hd) * 2 * c.d_head,
                    sizeof(float) * c.d_head);
  }
  for_rows(pool_, n, q_dim + 2 * kv_dim, [&](int64_t t0, int64_t t1) {
    float* q = q_.data() + t0 * q_dim;
    float* k = k_.data() + t0 * kv_dim;
    if (w.bq != nullptr) {  // (gated attention added q's bias above, before the split)
      for (int64_t t = 0; t < t1 - t0; ++t) {
        if (!c.attn_output_gate) kernels::add(q + t * q_dim, w.bq, q + t * q_dim, q_dim);
        kernels::add(k + t * kv_dim, w.bk, k + t * kv_dim, kv_dim);
        kernels::add(v_.data() + (t0 + t) * kv_dim, w.bv, v_.data() + (t0 + t) * kv_dim, kv_dim);
      }
    }
    if (c.qk_norm) {
      kernels::rms_norm(q, w.q_norm, q, (t1 - t0) * c.n_head, c.d_head, c.norm_eps);
      kernels::rms_norm(k, w.k_norm, k, (t1 - t0) * c.n_kv_head, c.d_head, c.norm_eps);
    }
    if (c.qk_norm_full) {
      kernels::rms_norm(q, w.q_norm, q, t1 - t0, q_dim, c.norm_eps);
      kernels::rms_norm(k, w.k_norm, k, t1 - t0, kv_dim, c.norm_eps);
    }
  });
  const kernels::RopeParams& rope = rope_params_[layer_rope_[il]];
  kernels::rope_apply(q_.data(), rope_table(layer_rope_[il]), n, c.n_head, c.d_head, rope);
  kernels::rope_apply(k_.data(), rope_table(layer_rope_[il]), n, c.n_kv_head, c.d_head, rope);

  // Store the new K/V rows in the cache in its element type (f16: rounded to nearest
  // even), then attend over each sequence's blocks, reading that type directly. A
  // quantized cache holds K and V rotated (kernels/hadamard.h): q turns with k, and the
  // output turns back below.
  const int g = cache.group_of_layer(il);
  const KvLayerView view = cache.layer(il);
  const kernels::KvRotation rotation = kernels::kv_rotation(type_traits(view.dtype).block_size > 1, c.d_head);
  kernels::hadamard_rotate(q_.data(), n * q_dim, rotation.k);
  kernels::hadamard_rotate(k_.data(), n * kv_dim, rotation.k);
  kernels::hadamard_rotate(v_.data(), n * kv_dim, rotation.v);
  // Block tables from step_tables_ (load_step_tables), the same on every rank.
  const int n_groups = cache.n_groups();
  const int32_t block_size = cache.block_size();
  auto table_of = [&](size_t sequence) { return step_tables_[sequence * n_groups + g]; };
  attention_items_.clear();
  for (size_t i = 0; i < b.sequences.size(); ++i) {
    const BatchSequence& s = b.sequences[i];
    attention_items_.push_back(kernels::AttentionSequence{q_.data() + s.first * q_dim, b.positions.data() + s.first,
                                                          s.n_tokens, table_of(i), s.start_pos + s.n_tokens,
                                                          attn_.data() + s.first * q_dim});
  }
  const kernels::AttentionParams params{c.attn_scale, c.attn_softcap, lc.window};
  auto store_and_attend = [&](auto element) {
    using T = decltype(element);
    for (size_t si = 0; si < b.sequences.size(); ++si) {
      const BatchSequence& s = b.sequences[si];
      const std::span<const int32_t> table = table_of(si);
      for (int32_t i = 0; i < s.n_tokens; ++i) {
        const int64_t t = s.first + i;
        const int32_t pos = s.start_pos + i;
        const KvSlot slot{table[static_cast<size_t>(pos / block_size)], pos % block_size};
        assert(slot.block >= 0);  // validate: reserved, and new tokens are never recycled
        T* k_row = static_cast<T*>(cache.k_row(il, slot.block, slot.offset));  // [n_kv_head][d_head]
        T* v_row = static_cast<T*>(cache.v_row(il, slot.block, slot.offset));
        if constexpr (std::is_same_v<T, float>) {
          std::memcpy(k_row, k_.data() + t * kv_dim, sizeof(float) * kv_dim);
          std::memcpy(v_row, v_.data() + t * kv_dim, sizeof(float) * kv_dim);
        } else if constexpr (std::is_same_v<T, uint16_t>) {
          kernels::kv_row_to_f16(k_.data() + t * kv_dim, k_row, kv_dim);
          kernels::kv_row_to_f16(v_.data() + t * kv_dim, v_row, kv_dim);
        } else {  // bf16, Q8_0, Q4_0: the reference quantizers' rounding, as llama.cpp stores them
          quantize_row(view.dtype, k_.data() + t * kv_dim, k_row, kv_dim);
          quantize_row(view.dtype, v_.data() + t * kv_dim, v_row, kv_dim);
        }
      }
    }
    const kernels::PagedKvLayer<T> kv{static_cast<const T*>(view.k), static_cast<const T*>(view.v),
                                      view.n_blocks, view.block_size, view.n_kv_head, view.d_head};
    kernels::attention(kv, std::span<const kernels::AttentionSequence>(attention_items_), c.n_head, params, pool_,
                       scratch_);
  };
  switch (view.dtype) {
    case DType::F32: store_and_attend(float{}); break;
    case DType::F16: store_and_attend(uint16_t{}); break;
    case DType::BF16: store_and_attend(kernels::Bf16{}); break;
    case DType::Q8_0: store_and_attend(BlockQ8_0{}); break;
    case DType::Q4_0: store_and_attend(BlockQ4_0{}); break;
    default:
      throw Error(str_cat("forward: layer ", il, ": KV cache type ", dtype_name(view.dtype),
                          " is not supported (", kv_dtype_names(), ")"));
  }

  kernels::hadamard_rotate(attn_.data(), n * q_dim, rotation.v);
  if (c.attn_output_gate) {  // attention * sigmoid(gate), per head
    for (int64_t t = 0; t < n; ++t)
      for (int64_t hd = 0; hd < c.n_head; ++hd) {
        float* o = attn_.data() + (t * c.n_head + hd) * c.d_head;
        const float* gate = q_gate_.data() + (t * c.n_head + hd) * 2 * c.d_head + c.d_head;
        for (int64_t i = 0; i < c.d_head; ++i) o[i] /= 1.0f + std::exp(-gate[i]);
      }
  }
  if (observer_ != nullptr)
    observer_->on_matmul_input(il, MatmulSite::kAttnOutput, attn_.data(), n, static_cast<int32_t>(q_dim));
  kernels::matmul(w.wo, attn_.data(), h_.data(), n, pool_, scratch_);
  apply_scale(h_.data(), int64_t{n} * c.n_embd, w.scale.wo);
  all_reduce(h_.data(), int64_t{n} * c.n_embd);  // each rank's heads' share of the projection
  residual(w.post_attn_norm, n);
}

// x += h, after h's own norm where the model has sandwich norms (Gemma 3).
void Model::residual(const float* post_norm, int32_t n) {
  const ModelConfig& c = shard_config_;
  const int64_t d = c.n_embd;
  for_rows(pool_, n, d, [&](int64_t t0, int64_t t1) {
    float* h = h_.data() + t0 * d;
    if (c.sandwich_norm) kernels::rms_norm(h, post_norm, h, t1 - t0, d, c.norm_eps);
    kernels::add(x_.data() + t0 * d, h, x_.data() + t0 * d, (t1 - t0) * d);
  });
}

void Model::mlp_layer(int il, int32_t n) {
  const ModelConfig& c = shard_config_;
  const LayerWeights& w = weights_.layers[il];
  if (!w.experts.empty()) {
    moe_layer(il, n);
    return;
  }
  const int64_t d = c.n_embd;
  for_rows(pool_, n, d, [&](int64_t t0, int64_t t1) {
    kernels::rms_norm(x_.data() + t0 * d, w.ffn_norm, h_.data() + t0 * d, t1 - t0, d, c.norm_eps);
  });
  if (observer_ != nullptr) observer_->on_matmul_input(il, MatmulSite::kGateUp, h_.data(), n, c.n_embd);
  {
    const kernels::WeightMatrix* ws[] = {&w.w_gate, &w.w_up};
    float* ys[] = {gate_.data(), up_.data()};
    kernels::matmul_group(ws, h_.data(), ys, n, pool_, scratch_);
    apply_scale(gate_.data(), int64_t{n} * c.n_ff, w.scale.w_gate);
    apply_scale(up_.data(), int64_t{n} * c.n_ff, w.scale.w_up);
  }
  const kernels::GluFn glu = c.activation == Activation::kGelu ? kernels::geglu : kernels::swiglu;
  if (observer_ == nullptr) {
    // The activation is formed row by row as the down projection quantizes its input,
    // never written out in full (for a prompt, a round trip through memory).
    kernels::matmul_glu(w.w_down, glu, gate_.data(), up_.data(), h_.data(), n, pool_, scratch_);
  } else {
    for_rows(pool_, n, c.n_ff, [&](int64_t t0, int64_t t1) {
      const int64_t o = t0 * c.n_ff;
      glu(gate_.data() + o, up_.data() + o, gate_.data() + o, (t1 - t0) * c.n_ff);
    });
    observer_->on_matmul_input(il, MatmulSite::kDown, gate_.data(), n, c.n_ff);
    kernels::matmul(w.w_down, gate_.data(), h_.data(), n, pool_, scratch_);
  }
  apply_scale(h_.data(), int64_t{n} * c.n_embd, w.scale.w_down);
  all_reduce(h_.data(), int64_t{n} * c.n_embd);  // each rank's feed-forward share
  residual(w.post_ffn_norm, n);
}

}  // namespace ridge
