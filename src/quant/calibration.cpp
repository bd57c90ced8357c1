#include "quant/calibration.h"

#include <algorithm>
#include <span>

#include "core/error.h"

namespace ridge::quant {
namespace {

// One sequence of one window in a cache of its own.
KvCacheConfig window_cache(const Model& model, int32_t n_ctx) {
  KvCacheConfig kv = model.kv_cache_config(0, 1, n_ctx);
  kv.max_step_tokens = n_ctx;
  kv.budget_bytes = kv_bytes_per_token(kv) * static_cast<size_t>(n_ctx + kv.block_size);
  return kv;
}

}  // namespace

CalibrationSet calibration_windows(const Tokenizer& tokenizer, const std::string& text, int32_t n_ctx,
                                   int32_t max_windows, int64_t skip_tokens) {
  if (n_ctx < 2) throw Error(str_cat("calibration: windows of ", n_ctx, " tokens"));
  const std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
  CalibrationSet set;
  set.n_ctx = n_ctx;
  const bool bos = tokenizer.vocab().add_bos() && tokenizer.bos() >= 0;
  for (int64_t start = std::max<int64_t>(skip_tokens, 0);
       start + n_ctx <= static_cast<int64_t>(tokens.size()) && static_cast<int32_t>(set.windows.size()) < max_windows;
       start += n_ctx) {
    std::vector<int32_t> w(tokens.begin() + start, tokens.begin() + start + n_ctx);
    if (bos) w[0] = tokenizer.bos();
    set.windows.push_back(std::move(w));
  }
  if (set.windows.empty())
    throw Error(str_cat("calibration: the text has ", tokens.size(), " tokens; skipping ", skip_tokens,
                        " leaves no window of ", n_ctx));
  return set;
}

void run_whole(Model& model, const CalibrationSet& set, ForwardObserver& observer,
               const std::function<void(size_t done)>& on_window) {
  if (set.n_ctx > model.max_batch_tokens())
    throw Error(str_cat("calibration: windows of ", set.n_ctx, " tokens exceed the model's batch of ",
                        model.max_batch_tokens()));
  KvCache cache(window_cache(model, set.n_ctx));
  Batch batch;
  model.set_observer(&observer);
  try {
    for (const std::vector<int32_t>& w : set.windows) {
      cache.add_sequence(0);
      if (!cache.reserve(0, set.n_ctx)) throw Error("calibration: the window's KV cache is too small");
      batch.clear();
      batch.add_sequence(0, 0, w, LogitRows::kNone);
      model.forward(batch, cache, nullptr);
      cache.free_sequence(0);
      if (on_window) on_window(static_cast<size_t>(&w - set.windows.data()) + 1);
    }
  } catch (...) {
    model.set_observer(nullptr);
    throw;
  }
  model.set_observer(nullptr);
}

std::vector<std::string> site_matrix_names(const gguf::File& file, int32_t il, MatmulSite site) {
  // A gated-DeltaNet layer (Qwen 3.5) reads the same normed input in attn_qkv, attn_gate,
  // ssm_beta and ssm_alpha, and its output projection is ssm_out.
  static constexpr const char* kQkv[] = {"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha"};
  static constexpr const char* kAttnOutput[] = {"attn_output", "ssm_out"};
  static constexpr const char* kGateUp[] = {"ffn_gate", "ffn_up"};
  static constexpr const char* kDown[] = {"ffn_down"};
  std::span<const char* const> candidates;
  switch (site) {
    case MatmulSite::kQkv: candidates = kQkv; break;
    case MatmulSite::kAttnOutput: candidates = kAttnOutput; break;
    case MatmulSite::kGateUp: candidates = kGateUp; break;
    case MatmulSite::kDown: candidates = kDown; break;
  }
  std::vector<std::string> names;
  for (const char* matrix : candidates) {
    std::string name = str_cat("blk.", il, ".", matrix, ".weight");
    if (file.find_tensor(name) != nullptr) names.push_back(std::move(name));
  }
  return names;
}

LayerwiseRunner::LayerwiseRunner(Model& model, const CalibrationSet& set) : model_(model), set_(set) {
  if (set.n_ctx > model.max_batch_tokens())
    throw Error(str_cat("calibration: windows of ", set.n_ctx, " tokens exceed the model's batch of ",
                        model.max_batch_tokens()));
  cache_ = std::make_unique<KvCache>(window_cache(model, set.n_ctx));
  const size_t floats = static_cast<size_t>(set.n_ctx) * static_cast<size_t>(model.config().n_embd);
  scratch_.resize(floats);
  for (const std::vector<int32_t>& w : set.windows) {
    batch_.clear();
    batch_.add_sequence(0, 0, w, LogitRows::kNone);
    streams_.emplace_back(floats);
    model.embed(batch_, streams_.back().data());
  }
}

void LayerwiseRunner::run_layer(int il, ForwardObserver* observer, bool advance) {
  if (il != next_layer_)
    throw Error(str_cat("calibration: the streams enter layer ", next_layer_, ", not ", il));
  model_.set_observer(observer);
  try {
    for (size_t i = 0; i < set_.windows.size(); ++i) {
      cache_->add_sequence(0);
      if (!cache_->reserve(0, set_.n_ctx)) throw Error("calibration: the window's KV cache is too small");
      batch_.clear();
      batch_.add_sequence(0, 0, set_.windows[i], LogitRows::kNone);
      float* x = advance ? streams_[i].data() : scratch_.data();
      if (!advance) std::copy(streams_[i].begin(), streams_[i].end(), scratch_.begin());
      model_.forward_layer(il, batch_, *cache_, x);
      cache_->free_sequence(0);
    }
  } catch (...) {
    model_.set_observer(nullptr);
    throw;
  }
  model_.set_observer(nullptr);
  if (advance) ++next_layer_;
}

}  // namespace ridge::quant
