// A loaded model: config, zero-copy weights, and the one forward pass every case uses
// (decode, prefill chunks, mixed batches, speculative verification).
//
//   auto model = Model::load("gemma3-270m.gguf", {.n_threads = 2});
//   KvCache cache(model->kv_cache_config(/*budget=*/256 << 20, /*max_sequences=*/1));
//   cache.add_sequence(0);
//   cache.reserve(0, prompt.size());
//   Batch b;  b.add_sequence(0, 0, prompt, LogitRows::kLast);
//   std::vector<float> logits(model->config().n_vocab);
//   model->forward(b, cache, logits.data());      // writes K/V, commits the tokens
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "core/aligned_vector.h"
#include "core/communicator.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/attention/attention.h"
#include "kernels/scratch.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"

namespace ridge {

// Where a forward pass delivers logits when a step's rows would not fit one buffer (a
// scored prompt has a row per token): the output projection runs on max_rows rows at a
// time into buffer ([max_rows][n_vocab]), and on_rows gets each slice: rows first ..
// first + n - 1 of batch.logit_rows.
// on_hidden gets batch.hidden_rows' final hidden states ([n][n_embd], after the output
// norm, before the output projection: what embeddings pool), all rows in one call.
struct LogitSink {
  float* buffer = nullptr;
  int32_t max_rows = 0;
  std::function<void(int32_t first, int32_t n, const float* logits)> on_rows;
  std::function<void(int32_t n, const float* hidden)> on_hidden;
};

// Where a layer's weight matmuls take their input: the rows all matrices of a site see.
enum class MatmulSite {
  kQkv,         // attn_q, attn_k, attn_v: the normed residual [n_tokens][n_embd]
  kAttnOutput,  // attn_output: the attention output [n_tokens][n_head * d_head]
  kGateUp,      // ffn_gate, ffn_up: the normed residual [n_tokens][n_embd]
  kDown,        // ffn_down: the gated activation [n_tokens][n_ff]
};
const char* matmul_site_name(MatmulSite site);  // "qkv", "attn_output", "gate_up", "down"

// Sees what a forward pass feeds each layer's weight matmuls, for calibration (importance
// matrices, GPTQ's Hessians, AWQ's scales). Called on the thread that runs forward.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void on_matmul_input(int32_t il, MatmulSite site, const float* input, int32_t n_tokens, int32_t n_in) = 0;
  // False stops the pass after layer il (tokens still committed, no logits): calibration
  // for layer il needs nothing beyond it.
  virtual bool continue_after_layer(int32_t il) { return true; }
};

// How the layer matrices are held (ModelOptions::weights). kAsStored: the file's blocks,
// zero-copy. kNf4 and kInt8: bitsandbytes' NF4 and LLM.int8 formats (core/quant_bnb.h),
// converted from the file's values when the model loads, as bitsandbytes quantizes a
// 16-bit checkpoint as it loads it, into memory the model owns (the file's pages of those
// matrices are let go). The token embedding and the output matrix stay as stored, as
// bitsandbytes keeps them in 16 bits. kInt8's outlier columns: kernels/gemm/gemm.h.
enum class WeightFormat { kAsStored, kNf4, kInt8 };
// "as-stored", "nf4" or "int8"; throws ridge::Error listing them for anything else.
WeightFormat parse_weight_format(std::string_view name);
const char* weight_format_name(WeightFormat format);

struct ModelOptions {
  int n_threads = 0;              // 0: all cores
  int32_t max_batch_tokens = 512; // most tokens one forward call takes (sizes the scratch)
  ThreadPool* pool = nullptr;     // run on this pool instead of starting n_threads (a draft
                                  // model beside its target: one set of threads, never idle-
                                  // spinning against the other's); must outlive the model
  WeightFormat weights = WeightFormat::kAsStored;
  // The context the model will run with (0: its training context): picks Phi-3 LongRoPE's
  // long or short factors, as llama.cpp picks them by its -c.
  int32_t n_ctx = 0;
  // Tensor parallelism (model/tensor_parallel.h): this rank's group (null or one rank:
  // the whole model here), which must outlive the model. Rank 0's forward sends each step
  // to the other ranks, whose run_tp_worker runs it on their shards.
  Communicator* comm = nullptr;
};

class Model {
 public:
  // Opens, validates (architecture, hyper-parameters, every tensor's presence and shape)
  // and sizes all scratch memory. Throws ridge::Error naming the file and the problem.
  static std::unique_ptr<Model> load(const std::string& path, const ModelOptions& options = {});

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // The whole model's hyper-parameters (under tensor parallelism too: n_head is all heads).
  const ModelConfig& config() const { return config_; }
  // Tensor parallelism: this rank's cut (the whole model when not split). A rank other
  // than 0 is a worker: it never takes a forward call; run_tp_worker runs the steps rank
  // 0's forward calls send, on this rank's shard and its own twin of each KV cache (K/V
  // of its heads only), until rank 0's model is destroyed. Throws ridge::Error on rank 0.
  const TpShard& shard() const { return shard_; }
  bool is_tp_worker() const { return comm_ != nullptr && comm_->rank() != 0; }
  void run_tp_worker();
  const gguf::File& file() const { return file_; }
  ThreadPool& pool() { return pool_; }
  int32_t max_batch_tokens() const { return options_.max_batch_tokens; }
  // Weight bytes a one-token forward step reads: every matrix once (of a mixture of
  // experts, the n_expert_used experts' share: the active bytes), and of an untied token
  // embedding one row (a tied one is the output matrix, read whole). Under tensor
  // parallelism, what this rank reads: its slices.
  double weight_bytes_per_step() const;
  // Of weight_bytes_per_step, the experts' share (0 for a dense model).
  double active_expert_bytes_per_step() const;
  // Bytes of expert weights the forward passes have read so far: each expert a step runs
  // counts once, however many of the step's tokens it serves (benchmarks measure reuse).
  uint64_t expert_bytes_read() const { return expert_bytes_read_.load(std::memory_order_relaxed); }
  WeightFormat weight_format() const { return options_.weights; }

  // The kernels the weight matmuls run (model_kernels.cpp): each matrix type with what
  // runs it on kernels::best_isa() ({"q4_K", "avx512_vnni"}, kernels::matmul_kernel_name),
  // in type-name order; and as one line, "q4_K avx512_vnni, q6_K avx512_vnni", with
  // " (RIDGE_ISA=avx2; this CPU: amx_int8)" when RIDGE_ISA forced a lower ISA.
  std::vector<std::pair<std::string, std::string>> matmul_kernels() const;
  std::string kernel_summary() const;
  // Multiply-adds of the weight matmuls, split by the arithmetic that runs them (integer
  // GEMMs with 8-bit activations, or float dots), for the compute roofline: per token of
  // the layer matrices (of a mixture of experts, the router and n_expert_used experts),
  // and per row of logits of the output projection. Attention's score and value products,
  // norms, RoPE and activations are not weight matmuls and are not counted.
  struct MatmulMacs {
    double int8 = 0;
    double f32 = 0;
  };
  MatmulMacs layer_macs_per_token() const;
  MatmulMacs output_macs_per_row() const;
  // Bytes the converted layer matrices take beyond the file's (negative: fewer); 0 as stored.
  double converted_bytes_delta() const { return converted_bytes_delta_; }
  // The layer matrices repacked at load for the decode kernels (kernels/gemm/repack.h;
  // none with --no-repack or where the ISA's table runs every type as stored), and the
  // seconds that took. Their bytes replace the file's (same size, but the model's memory).
  int64_t repacked_matrices() const { return repacked_matrices_; }
  double repack_seconds() const { return repack_seconds_; }

  // A KV cache layout for this model: one spec per layer with its window. Under tensor
  // parallelism, this rank's KV heads: budget_bytes is per rank.
  KvCacheConfig kv_cache_config(size_t budget_bytes, int32_t max_sequences, int32_t max_context = 0) const;

  // Runs every token of the batch through the model: writes their K/V into the cache
  // (each sequence must have start_pos == cache.n_tokens(seq) and capacity reserved for
  // its new tokens), commits them, recycles blocks that left sliding windows, and writes
  // logits for batch.logit_rows: [batch.n_logit_rows()][n_vocab]. Throws ridge::Error,
  // before any compute, for a malformed batch (hidden_rows need the sink overload).
  void forward(const Batch& batch, KvCache& cache, float* logits);
  // The same, logits in slices through the sink (max_rows >= 1).
  void forward(const Batch& batch, KvCache& cache, const LogitSink& sink);

  // Calibration, layer by layer (GPTQ, AWQ): the residual stream entering layer 0
  // (x: [n_tokens][n_embd]), and one layer run on a given stream (updated in place), as
  // forward runs it between its neighbours. forward_layer writes the layer's K/V into the
  // cache (the sequences reserved as for forward) and commits nothing.
  void embed(const Batch& batch, float* x);
  void forward_layer(int il, const Batch& batch, KvCache& cache, float* x);

  // Calibration: the observer sees every pass until set back to null.
  void set_observer(ForwardObserver* observer) { observer_ = observer; }
  // Calibration: the named layer matrix ("blk.3.ffn_down.weight") reads these weights from
  // now on: [n_out][row_size(dtype, n_in)] bytes the caller keeps alive. Throws ridge::Error
  // for an unknown name or a type matmul cannot use.
  void replace_matrix(const std::string& name, DType dtype, const uint8_t* data);
  // Calibration: the named layer norm ("blk.3.attn_norm.weight", [n_embd] floats) or V bias
  // ("blk.3.attn_v.bias", [n_kv_head * d_head]), kept alive by the caller, reads these
  // values from now on (AWQ folds its scales into them).
  void replace_vector(const std::string& name, const float* data);

 private:
  Model(gguf::File file, const ModelOptions& options);
  void convert_layer_matrices(DType dtype);  // model_convert.cpp
  void repack_layer_matrices();              // model_convert.cpp
  void validate(const Batch& batch, const KvCache& cache) const;
  void prepare_rope(const Batch& batch);
  void attention_layer(int il, const Batch& batch, KvCache& cache, int32_t n_tokens);
  // A gated-DeltaNet layer (model_recurrent.cpp): each sequence's state in the cache carried
  // over its new tokens.
  void delta_net_layer(int il, const Batch& batch, KvCache& cache, int32_t n_tokens);
  void qwen3next_projections(const LayerWeights& w, int32_t n_tokens);
  // Whether this step keeps the sequence's recurrent state after each of its tokens: a
  // speculative verify chunk (drafts in it) in a cache with room for its snapshots.
  static bool snapshots_states(const BatchSequence& s, const KvCache& cache) {
    return s.n_tentative > 0 && cache.state_snapshots() >= s.n_tokens;
  }
  void mlp_layer(int il, int32_t n_tokens);
  void residual(const float* post_norm, int32_t n_tokens);  // x += (normed) h, per token row
  void moe_layer(int il, int32_t n_tokens);  // model_moe.cpp
  void route_tokens(int il, int32_t n_tokens);
  void load_step_tables(const Batch& batch, const KvCache& cache);
  // Embeds the batch and runs every layer over it (K/V written, not committed); false when
  // the observer stopped the pass after a layer.
  bool run_layers(const Batch& batch, KvCache& cache);
  // The logits of batch.logit_rows into the sink, sink.max_rows at a time (the other
  // tensor-parallel ranks: their columns, sent to rank 0).
  void output_logits(const Batch& batch, const LogitSink& sink);
  void all_reduce(float* x, int64_t n);
  // The residual stream's rows (x_) through the output norm, into out [rows.size()][n_embd]:
  // what the output projection (and the embeddings' sink) reads, on every rank.
  void output_norm_rows(std::span<const int32_t> rows, float* out);
  // Rank 0: [n][n_vocab], its columns first, the others' gathered; the others: theirs sent.
  void gather_logits(float* logits, int32_t n);
  // Tensor parallelism (model_tp.cpp): rank 0 announces a new cache, then sends each step.
  void send_tp_step(const Batch& batch, const KvCache& cache, int32_t max_rows);
  float* rope_table(int index) {
    return rope_tables_.data() + static_cast<size_t>(index) * options_.max_batch_tokens * config_.n_rot;
  }

  gguf::File file_;
  ModelOptions options_;
  ModelConfig config_;
  ModelWeights weights_;
  Communicator* comm_ = nullptr;  // null: not split
  TpShard shard_;
  ModelConfig shard_config_;      // config_ with this rank's n_head, n_kv_head and n_ff:
                                  // what the forward pass computes
  // This step's block tables, [batch sequence][KV group]: the cache's own on rank 0, the
  // message's entries (tp_ints_) on the other ranks.
  std::vector<std::span<const int32_t>> step_tables_;
  std::vector<int32_t> tp_ints_;              // a step's message, as sent or received
  std::vector<uint64_t> tp_sent_caches_;      // rank 0: ids of the caches the others hold, LRU first
  std::vector<uint64_t> tp_dropped_caches_;   // rank 0: ids dropped from that list
  std::vector<std::pair<uint64_t, std::unique_ptr<KvCache>>> tp_caches_;  // other ranks: twins by id
  Batch tp_batch_;                            // other ranks: the step received
  std::vector<int64_t> tp_vocab_first_;       // [n_ranks + 1] each rank's first output row
  std::vector<float> tp_logits_;              // other ranks: [max_rows][shard_.n_vocab]
  std::vector<std::vector<uint8_t>> converted_;  // layer matrices under WeightFormat::kNf4/kInt8
  std::vector<std::vector<float>> converted_vectors_;  // and copies of their layers' norms and biases
  double converted_bytes_delta_ = 0;             // their bytes less the file's
  kernels::RepackedBytes repacked_;              // layer matrices in the decode kernels' layouts
  int64_t repacked_matrices_ = 0;
  double repack_seconds_ = 0;
  ForwardObserver* observer_ = nullptr;
  std::atomic<uint64_t> expert_bytes_read_{0};
  std::unique_ptr<ThreadPool> owned_pool_;  // unless ModelOptions::pool was given
  ThreadPool& pool_;
  kernels::Scratch scratch_;

  // Activations for up to max_batch_tokens rows, allocated once.
  AlignedVector<float> x_;       // [n_tokens][n_embd] residual stream
  AlignedVector<float> h_;       // [n_tokens][n_embd] normed input / block output
  AlignedVector<float> q_;       // [n_tokens][n_head][d_head]
  AlignedVector<float> k_;       // [n_tokens][n_kv_head][d_head]
  AlignedVector<float> v_;       // [n_tokens][n_kv_head][d_head]
  AlignedVector<float> attn_;    // [n_tokens][n_head][d_head]
  AlignedVector<float> gate_;    // [n_tokens][n_ff]
  AlignedVector<float> up_;      // [n_tokens][n_ff]
  AlignedVector<float> final_;   // [n_tokens][n_embd] rows that need logits
  // Mixture of experts: router logits, each expert's tokens (token index and weight,
  // grouped by expert in expert order), their gathered inputs and outputs, the sum.
  std::vector<float> router_;                 // [n_tokens][n_expert]
  std::vector<int32_t> expert_first_;         // [n_expert + 1] offsets into the lists
  std::vector<int32_t> expert_tokens_;        // [n_tokens * n_expert_used]
  std::vector<float> expert_weights_;         // [n_tokens * n_expert_used]
  std::vector<int32_t> token_experts_;        // [n_tokens][n_expert_used] each token's choices
  std::vector<float> token_weights_;          // [n_tokens][n_expert_used]
  std::vector<int32_t> expert_last_;          // [n_expert] fill positions of the lists
  AlignedVector<float> expert_in_;              // [n_tokens][n_embd]
  AlignedVector<float> expert_out_;             // [n_tokens][n_embd]
  AlignedVector<float> moe_sum_;                // [n_tokens][n_embd]
  std::vector<kernels::AttentionSequence> attention_items_;  // one per batch sequence
  // Gated attention (attn_output_gate): attn_q's rows, each head's q then its gate.
  AlignedVector<float> q_gate_;                 // [n_tokens][n_head][2 * d_head]
  // Gated DeltaNet layers: the q/k/v projection before and after the conv, the output gate z,
  // the recurrence's output, and beta and g per value head.
  AlignedVector<float> ssm_mix_;                // [n_tokens][conv channels]
  AlignedVector<float> ssm_conv_;               // [n_tokens][conv channels]
  AlignedVector<float> ssm_z_;                  // [n_tokens][ssm_inner]
  AlignedVector<float> ssm_core_;               // [n_tokens][ssm_inner]
  AlignedVector<float> ssm_beta_;               // [n_tokens][ssm_heads]
  AlignedVector<float> ssm_g_;                  // [n_tokens][ssm_heads]
  AlignedVector<float> ssm_fused_;              // Qwen3-Next: ssm_in and ssm_ba rows, before the split

  // RoPE angles: computed once per step for each distinct layer setting (Gemma 3 has a
  // local and a global one), then applied to q and k of every layer that uses it.
  std::vector<kernels::RopeParams> rope_params_;  // distinct settings over the layers
  std::vector<int> layer_rope_;                   // [n_layer] index into rope_params_
  std::vector<float> rope_tables_;                // [rope_params_.size()][max_batch_tokens][n_rot]
};

}  // namespace ridge
