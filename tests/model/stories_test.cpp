// The forward pass on stories260K, a tiny real Llama (GQA 8:4): logits and greedy output
// against llama2.c's run.c; cached decode against recompute-from-scratch; batch
// invariance; and clear errors for malformed batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/writer.h"
#include "model/config.h"
#include "model/model.h"

namespace ridge {
namespace {

const std::string kModel = std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf";

struct RefLogits {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [pos][512]
};

RefLogits read_logits_ref() {
  std::ifstream in(std::string(RIDGE_FIXTURES) + "/models/stories260K.logits-ref.txt");
  RefLogits ref;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string word;
    int pos = 0, token = 0;
    ss >> word >> pos >> word >> token >> word;
    ref.tokens.push_back(token);
    std::vector<float> row;
    float v;
    while (ss >> v) row.push_back(v);
    ref.logits.push_back(row);
  }
  return ref;
}

std::vector<int32_t> read_greedy_sequence() {
  std::ifstream in(std::string(RIDGE_FIXTURES) + "/models/stories260K.greedy-ref.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("sequence:", 0) == 0) {
      std::istringstream ss(line.substr(9));
      std::vector<int32_t> ids;
      int32_t id;
      while (ss >> id) ids.push_back(id);
      return ids;
    }
  }
  return {};
}

int32_t argmax(const float* x, int32_t n) { return static_cast<int32_t>(std::max_element(x, x + n) - x); }

struct Fixture {
  std::unique_ptr<Model> model = Model::load(kModel, {.n_threads = 2, .max_batch_tokens = 64});
  KvCache cache{model->kv_cache_config(4 << 20, 4, 512)};
  int32_t n_vocab = model->config().n_vocab;

  // Feeds tokens to sequence seq in one batch; returns logits for every row.
  std::vector<float> feed(int32_t seq, const std::vector<int32_t>& tokens) {
    if (!cache.has_sequence(seq)) cache.add_sequence(seq);
    EXPECT_TRUE(cache.reserve(seq, static_cast<int32_t>(tokens.size())));
    Batch b;
    b.add_sequence(seq, cache.n_tokens(seq), tokens, LogitRows::kAll);
    std::vector<float> logits(tokens.size() * n_vocab);
    model->forward(b, cache, logits.data());
    return logits;
  }
};

TEST(Stories260K, ConfigFromMetadata) {
  Fixture f;
  const ModelConfig& c = f.model->config();
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_kv_head, 4);
  EXPECT_EQ(c.d_head, 8);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_EQ(c.rope_mode, kernels::RopeMode::Norm);
}

// Calibration (AWQ's folding) points a layer's norm at other values; a name that is no
// norm or V bias of this model (stories260K has no biases) is an error naming it.
TEST(Stories260K, ReplaceVectorRedirectsANormAndNamesWhatItCannot) {
  Fixture f;
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  const std::vector<float> before = f.feed(0, tokens);
  const gguf::TensorInfo& norm = *f.model->file().find_tensor("blk.0.attn_norm.weight");
  std::vector<float> doubled(reinterpret_cast<const float*>(norm.data),
                             reinterpret_cast<const float*>(norm.data) + norm.n_elements());
  for (float& x : doubled) x *= 2;
  f.model->replace_vector("blk.0.attn_norm.weight", doubled.data());
  const std::vector<float> after = f.feed(1, tokens);
  EXPECT_NE(before, after);
  f.model->replace_vector("blk.0.attn_norm.weight", reinterpret_cast<const float*>(norm.data));
  EXPECT_EQ(f.feed(2, tokens), before);
  for (const char* name : {"blk.0.attn_v.bias", "blk.0.attn_q.weight", "blk.9.ffn_norm.weight", "output_norm.weight"}) {
    try {
      f.model->replace_vector(name, doubled.data());
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(Stories260K, LogitsMatchLlama2c) {
  RefLogits ref = read_logits_ref();
  ASSERT_EQ(ref.logits.size(), 6u);
  Fixture f;
  // One token per step (cached decode), as run.c does.
  double max_err = 0;
  for (size_t pos = 0; pos < ref.tokens.size(); ++pos) {
    std::vector<float> logits = f.feed(0, {ref.tokens[pos]});
    ASSERT_EQ(ref.logits[pos].size(), static_cast<size_t>(f.n_vocab));
    for (int32_t i = 0; i < f.n_vocab; ++i)
      max_err = std::max(max_err, static_cast<double>(std::fabs(logits[i] - ref.logits[pos][i])));
  }
  EXPECT_LT(max_err, 1e-4) << "max abs logit error vs llama2.c";
}

TEST(Stories260K, GreedyMatchesLlama2c) {
  std::vector<int32_t> expected = read_greedy_sequence();
  ASSERT_EQ(expected.size(), 65u);
  Fixture f;
  const int32_t n_prompt = 5;
  std::vector<int32_t> out(expected.begin(), expected.begin() + n_prompt);
  std::vector<float> logits = f.feed(0, out);  // prefill in one batch
  int32_t next = argmax(logits.data() + (n_prompt - 1) * f.n_vocab, f.n_vocab);
  while (out.size() < expected.size()) {
    out.push_back(next);
    logits = f.feed(0, {next});
    next = argmax(logits.data(), f.n_vocab);
  }
  EXPECT_EQ(out, expected);
}

TEST(Stories260K, CachedDecodeEqualsRecompute) {
  std::vector<int32_t> seq = read_greedy_sequence();
  seq.resize(40);
  Fixture cached;
  for (size_t pos = 0; pos < seq.size(); ++pos) {
    std::vector<float> step = cached.feed(0, {seq[pos]});
    // Recompute from scratch: a fresh sequence gets the whole prefix in one batch.
    Fixture fresh;
    std::vector<int32_t> prefix(seq.begin(), seq.begin() + pos + 1);
    std::vector<float> all = fresh.feed(1, prefix);
    const float* last = all.data() + pos * fresh.n_vocab;
    for (int32_t i = 0; i < cached.n_vocab; ++i)
      ASSERT_NEAR(step[i], last[i], 1e-4) << "position " << pos << " logit " << i;
  }
}

TEST(Stories260K, BatchInvariance) {
  std::vector<int32_t> base = read_greedy_sequence();
  // Four sequences of different lengths: alone, then all in one batch.
  std::vector<std::vector<int32_t>> prompts = {
      {base.begin(), base.begin() + 7}, {base.begin() + 3, base.begin() + 20},
      {base.begin() + 1, base.begin() + 2}, {base.begin() + 10, base.begin() + 41}};
  std::vector<std::vector<float>> alone;
  for (size_t s = 0; s < prompts.size(); ++s) {
    Fixture f;
    alone.push_back(f.feed(static_cast<int32_t>(s), prompts[s]));
  }
  Fixture f;
  Batch b;
  for (size_t s = 0; s < prompts.size(); ++s) {
    f.cache.add_sequence(static_cast<int32_t>(s));
    ASSERT_TRUE(f.cache.reserve(static_cast<int32_t>(s), static_cast<int32_t>(prompts[s].size())));
    b.add_sequence(static_cast<int32_t>(s), 0, prompts[s], LogitRows::kAll);
  }
  std::vector<float> logits(static_cast<size_t>(b.n_tokens()) * f.n_vocab);
  f.model->forward(b, f.cache, logits.data());
  for (size_t s = 0; s < prompts.size(); ++s) {
    const float* got = logits.data() + static_cast<size_t>(b.sequences[s].first) * f.n_vocab;
    for (size_t i = 0; i < alone[s].size(); ++i) ASSERT_NEAR(got[i], alone[s][i], 1e-5) << "sequence " << s;
  }
  // Then decode all four together for 10 greedy steps; each must follow its solo path.
  std::vector<int32_t> next(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s)
    next[s] = argmax(logits.data() + static_cast<size_t>(b.sequences[s].first + b.sequences[s].n_tokens - 1) * f.n_vocab,
                     f.n_vocab);
  // Each sequence's greedy continuation when it runs alone.
  std::vector<std::vector<int32_t>> solo_outputs;
  for (const std::vector<int32_t>& prompt : prompts) {
    Fixture solo;
    std::vector<float> l = solo.feed(0, prompt);
    int32_t t = argmax(l.data() + (prompt.size() - 1) * solo.n_vocab, solo.n_vocab);
    std::vector<int32_t>& out = solo_outputs.emplace_back();
    for (int step = 0; step < 10; ++step) {
      out.push_back(t);
      l = solo.feed(0, {t});
      t = argmax(l.data(), solo.n_vocab);
    }
  }
  std::vector<std::vector<int32_t>> batched(prompts.size());
  for (int step = 0; step < 10; ++step) {
    Batch d;
    for (size_t s = 0; s < prompts.size(); ++s) {
      batched[s].push_back(next[s]);
      ASSERT_TRUE(f.cache.reserve(static_cast<int32_t>(s), 1));
      d.add_sequence(static_cast<int32_t>(s), f.cache.n_tokens(static_cast<int32_t>(s)), {&next[s], 1},
                     LogitRows::kLast);
    }
    std::vector<float> l(prompts.size() * f.n_vocab);
    f.model->forward(d, f.cache, l.data());
    for (size_t s = 0; s < prompts.size(); ++s) next[s] = argmax(l.data() + s * f.n_vocab, f.n_vocab);
  }
  for (size_t s = 0; s < prompts.size(); ++s) EXPECT_EQ(batched[s], solo_outputs[s]) << "sequence " << s;
}

TEST(Stories260K, MalformedBatchesAreRejectedBeforeCompute) {
  Fixture f;
  f.cache.add_sequence(0);
  ASSERT_TRUE(f.cache.reserve(0, 4));
  std::vector<float> logits(20 * f.n_vocab);
  auto expect_error = [&](const Batch& b, const std::string& phrase) {
    try {
      f.model->forward(b, f.cache, logits.data());
      ADD_FAILURE() << "no error for " << phrase;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
    EXPECT_EQ(f.cache.n_tokens(0), 0) << "a rejected batch must not change the cache";
  };
  std::vector<int32_t> bad_token = {1, 9999};
  Batch b;
  b.add_sequence(0, 0, bad_token, LogitRows::kLast);
  expect_error(b, "outside the vocabulary");
  b.clear();
  std::vector<int32_t> ok = {1, 2};
  b.add_sequence(0, 3, ok, LogitRows::kLast);
  expect_error(b, "starts at position 3");
  b.clear();
  b.add_sequence(2, 0, ok, LogitRows::kLast);
  expect_error(b, "not in the KV cache");
  b.clear();
  std::vector<int32_t> long_prompt(20, 1);  // more than the one reserved block holds
  b.add_sequence(0, 0, long_prompt, LogitRows::kLast);
  expect_error(b, "reserve first");
  Batch empty;
  expect_error(empty, "empty batch");
}

TEST(Stories260K, MissingTensorIsNamed) {
  // Loading a vocab-only GGUF as a model must name what is missing.
  try {
    Model::load(std::string(RIDGE_FIXTURES) + "/vocab/ggml-vocab-llama-spm.gguf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token_embd.weight"), std::string::npos) << e.what();
  }
}

// Calibration runs layer by layer over stored residual streams (GPTQ, AWQ); what each
// layer's matmuls see must be what the whole forward pass feeds them, to the bit.
class RecordingObserver : public ForwardObserver {
 public:
  void on_matmul_input(int32_t il, MatmulSite site, const float* x, int32_t n, int32_t n_in) override {
    seen.push_back({il, site, std::vector<float>(x, x + static_cast<size_t>(n) * n_in)});
  }
  struct Record {
    int32_t il;
    MatmulSite site;
    std::vector<float> input;
  };
  std::vector<Record> seen;
};

TEST(StoriesModel, LayerByLayerRunsSeeWhatTheForwardPassSees) {
  Fixture f;
  const std::vector<int32_t> tokens = read_greedy_sequence();
  ASSERT_GE(tokens.size(), 40u);
  const std::vector<int32_t> window(tokens.begin(), tokens.begin() + 40);
  RecordingObserver whole;
  f.model->set_observer(&whole);
  f.feed(0, window);
  f.model->set_observer(nullptr);

  RecordingObserver layered;
  Batch b;
  b.add_sequence(1, 0, window, LogitRows::kNone);
  std::vector<float> x(window.size() * static_cast<size_t>(f.model->config().n_embd));
  f.model->embed(b, x.data());
  f.model->set_observer(&layered);
  for (int il = 0; il < f.model->config().n_layer; ++il) {
    f.cache.add_sequence(1);
    ASSERT_TRUE(f.cache.reserve(1, static_cast<int32_t>(window.size())));
    f.model->forward_layer(il, b, f.cache, x.data());
    f.cache.free_sequence(1);
  }
  f.model->set_observer(nullptr);
  ASSERT_EQ(layered.seen.size(), whole.seen.size());
  ASSERT_EQ(whole.seen.size(), 4u * static_cast<size_t>(f.model->config().n_layer));
  for (size_t i = 0; i < whole.seen.size(); ++i) {
    EXPECT_EQ(layered.seen[i].il, whole.seen[i].il);
    EXPECT_EQ(layered.seen[i].site, whole.seen[i].site);
    EXPECT_EQ(layered.seen[i].input, whole.seen[i].input) << "layer " << whole.seen[i].il << " "
                                                          << matmul_site_name(whole.seen[i].site);
  }
}

// A block_count the tensors do not back is refused before anything is sized by it (2^30
// blocks allocated 28 GiB of layer configuration, even for `ridge inspect`).
TEST(ModelConfig, BlockCountBeyondTheTensorsIsAClearError) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 64);
  w.set_u32("llama.block_count", 1u << 30);
  w.set_u32("llama.feed_forward_length", 172);
  w.set_u32("llama.attention.head_count", 8);
  const std::vector<float> norm(64, 1.0f);
  const auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(norm.data()), 64 * sizeof(float));
  w.add_tensor("blk.0.attn_norm.weight", DType::F32, {64}, bytes);
  w.add_tensor("blk.1.attn_norm.weight", DType::F32, {64}, bytes);
  const std::vector<uint8_t> file = w.to_bytes();
  try {
    ModelConfig::from_gguf(gguf::File::parse(file, "huge.gguf"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge.gguf: metadata llama.block_count = 1073741824 but the file has "
                                         "tensors for 2 blocks (blk.0 ... blk.1)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelConfig, ABlocklessFileSaysItHasNoBlocks) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 4);
  w.set_u32("llama.block_count", 2);
  const std::vector<float> embd(4 * 8, 0.5f);
  w.add_tensor("token_embd.weight", DType::F32, {4, 8},
               std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(embd.data()), embd.size() * sizeof(float)));
  const std::vector<uint8_t> file = w.to_bytes();
  try {
    ModelConfig::from_gguf(gguf::File::parse(file, "empty.gguf"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty.gguf: metadata llama.block_count = 2 but the file has no blk.N tensors"),
              std::string::npos)
        << e.what();
  }
}

// A llama-architecture file of one block with this sliding_window (none: no key).
std::vector<uint8_t> one_block_llama(std::optional<int64_t> window) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 4);
  w.set_u32("llama.block_count", 1);
  w.set_u32("llama.feed_forward_length", 8);
  w.set_u32("llama.attention.head_count", 1);
  if (window && *window < 0) w.set_i32("llama.attention.sliding_window", static_cast<int32_t>(*window));
  if (window && *window >= 0) w.set_u64("llama.attention.sliding_window", static_cast<uint64_t>(*window));
  const std::vector<float> values(4 * 8, 0.5f);
  const auto bytes = [&](size_t n) {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), n * sizeof(float));
  };
  w.add_tensor("token_embd.weight", DType::F32, {4, 8}, bytes(32));
  w.add_tensor("blk.0.attn_norm.weight", DType::F32, {4}, bytes(4));
  return w.to_bytes();
}

TEST(ModelConfig, SlidingWindowsPastAnyContextAreNoWindowAndNegativeOnesAreRefused) {
  const auto window_of = [](std::optional<int64_t> window) {
    const std::vector<uint8_t> file = one_block_llama(window);
    return ModelConfig::from_gguf(gguf::File::parse(file, "w.gguf")).layers.at(0).window;
  };
  EXPECT_EQ(window_of(std::nullopt), 0);
  EXPECT_EQ(window_of(4096), 4096);
  EXPECT_EQ(window_of((int64_t{1} << 32) + 4096), 0);  // was cast to 4096
  try {
    window_of(-1);
    ADD_FAILURE() << "a negative window was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w.gguf: llama.attention.sliding_window is -1; it must be a positive"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ridge
