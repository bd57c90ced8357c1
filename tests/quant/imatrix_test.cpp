// Importance matrices: the GGUF round trip in llama-imatrix's layout, llama.cpp's legacy
// .dat format, the per-column importance, the checks against a model's tensors, malformed
// files, and a collection run on the stories260K fixture.
#include "quant/imatrix.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "core/quant_weighted.h"
#include "gguf/writer.h"
#include "tokenizer/tokenizer.h"

namespace ridge::quant {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("ridge_imatrix_test_" + name)).string();
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <typename T>
void append(std::vector<char>& out, T v) {
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

void append_string(std::vector<char>& out, const std::string& s) {
  append<int32_t>(out, static_cast<int32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Imatrix sample() {
  Imatrix m;
  m.datasets = {"wiki.train.raw"};
  m.chunk_count = 3;
  m.chunk_size = 4;
  m.entries["blk.0.attn_q.weight"] = {{1, 4, 9, 16}, {12}};
  m.entries["blk.0.ffn_down.weight"] = {{2, 0, 6, 8, 10, 12}, {12}};
  m.entries["blk.0.ffn_up_exps.weight"] = {{1, 2, 3, 4}, {2, 0}};  // two experts, the second unseen
  return m;
}

TEST(Imatrix, GgufRoundTripInLlamaImatrixLayout) {
  const std::string path = temp_path("roundtrip.gguf");
  write_imatrix(sample(), path);
  EXPECT_FALSE(fs::exists(path + ".part"));
  const gguf::File f = gguf::File::open(path);
  EXPECT_EQ(f.get_string("general.type"), "imatrix");
  EXPECT_EQ(f.get_u64("imatrix.chunk_count"), 3u);
  EXPECT_EQ(f.get_u64("imatrix.chunk_size"), 4u);
  EXPECT_EQ(f.get_array("imatrix.datasets").string_at(0), "wiki.train.raw");
  const gguf::TensorInfo* sums = f.find_tensor("blk.0.attn_q.weight.in_sum2");
  const gguf::TensorInfo* counts = f.find_tensor("blk.0.attn_q.weight.counts");
  ASSERT_TRUE(sums && counts);
  EXPECT_EQ(sums->n_dims, 1);
  EXPECT_EQ(sums->ne[0], 4);
  EXPECT_EQ(counts->n_dims, 1);
  EXPECT_EQ(counts->ne[0], 1);
  const gguf::TensorInfo* experts = f.find_tensor("blk.0.ffn_up_exps.weight.in_sum2");
  ASSERT_TRUE(experts);
  EXPECT_EQ(experts->shape_string(), "[2, 2]");
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up_exps.weight.counts")->shape_string(), "[1, 2]");
  // Name order, sums before counts, as llama-imatrix writes them.
  EXPECT_EQ(f.tensors()[0].name, "blk.0.attn_q.weight.in_sum2");
  EXPECT_EQ(f.tensors()[1].name, "blk.0.attn_q.weight.counts");

  const Imatrix back = read_imatrix(path);
  EXPECT_EQ(back.datasets, sample().datasets);
  EXPECT_EQ(back.chunk_count, 3u);
  EXPECT_EQ(back.chunk_size, 4u);
  ASSERT_EQ(back.entries.size(), 3u);
  for (const auto& [name, e] : sample().entries) {
    EXPECT_EQ(back.entries.at(name).in_sum2, e.in_sum2) << name;
    EXPECT_EQ(back.entries.at(name).counts, e.counts) << name;
  }
  fs::remove(path);
}

TEST(Imatrix, ImportanceIsTheMeanSquareOrOneWhereUnseen) {
  const Imatrix m = sample();
  EXPECT_EQ(importance_of(m.entries.at("blk.0.attn_q.weight")),
            (std::vector<float>{1 / 12.f, 4 / 12.f, 9 / 12.f, 16 / 12.f}));
  EXPECT_EQ(importance_of(m.entries.at("blk.0.ffn_up_exps.weight")), (std::vector<float>{0.5f, 1, 1, 1}));
}

TEST(Imatrix, HugeImportanceQuantizesAsItsScaledDownSelf) {
  // Sums near FLT_MAX are finite and valid, but importance * x^2 overflowed in the weighted
  // fit and the whole tensor came out NaN. Scaled by a power of two, the fit is unchanged.
  std::vector<float> x(256), small(256);
  for (int i = 0; i < 256; ++i) {
    x[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 2.5f;
    small[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i % 7);
  }
  ImatrixEntry huge;
  huge.counts = {1};
  for (float v : small) huge.in_sum2.push_back(std::ldexp(v, 124));  // up to 7 * 2^124 = 1.5e38
  const std::vector<float> importance = importance_of(huge);
  for (float v : importance) ASSERT_TRUE(std::isfinite(v) && v > 0);
  std::vector<uint8_t> got(144), want(144);  // one Q4_K super-block
  quantize_row_q4_k_weighted(x.data(), got.data(), 256, importance.data());
  quantize_row_q4_k_weighted(x.data(), want.data(), 256, small.data());
  EXPECT_EQ(got, want);
  std::vector<float> back(256);
  dequantize_row(DType::Q4_K, got.data(), back.data(), 256);
  for (float v : back) ASSERT_TRUE(std::isfinite(v));
}

TEST(Imatrix, ALegacyCountTheFileCannotHoldIsAnErrorNotAnAllocation) {
  std::vector<char> b;
  append<int32_t>(b, 1);
  append_string(b, "blk.0.attn_k.weight");
  append<int32_t>(b, 1);           // ncall
  append<int32_t>(b, 0x7fffffff);  // 8 GiB of values claimed, 8 bytes present
  append<float>(b, 1.0f);
  append<float>(b, 2.0f);
  const std::string path = temp_path("legacy_huge.dat");
  write_bytes(path, b);
  EXPECT_NE(error_of([&] { read_imatrix(path); }).find("values needs 8589934588 bytes"), std::string::npos);
  fs::remove(path);
}

TEST(Imatrix, ReadsTheLegacyFormat) {
  std::vector<char> b;
  append<int32_t>(b, 2);
  append_string(b, "blk.0.attn_k.weight");
  append<int32_t>(b, 4);  // ncall
  append<int32_t>(b, 2);
  append<float>(b, 8.0f);
  append<float>(b, 2.0f);
  append_string(b, "blk.0.attn_v.weight");
  append<int32_t>(b, 0);  // ncall 0: values taken as they are
  append<int32_t>(b, 1);
  append<float>(b, 3.0f);
  append<int32_t>(b, 7);  // chunks
  append_string(b, "calib.txt");
  const std::string path = temp_path("legacy.dat");
  write_bytes(path, b);
  const Imatrix m = read_imatrix(path);
  EXPECT_EQ(m.chunk_count, 7u);
  EXPECT_EQ(m.datasets, std::vector<std::string>{"calib.txt"});
  EXPECT_EQ(importance_of(m.entries.at("blk.0.attn_k.weight")), (std::vector<float>{2.0f, 0.5f}));
  EXPECT_EQ(importance_of(m.entries.at("blk.0.attn_v.weight")), std::vector<float>{3.0f});

  // Without the optional trailer too; truncated inside an entry is an error.
  b.resize(b.size() - 4 - 4 - 9);
  write_bytes(path, b);
  EXPECT_EQ(read_imatrix(path).chunk_count, 0u);
  b.resize(b.size() - 6);
  write_bytes(path, b);
  EXPECT_NE(error_of([&] { read_imatrix(path); }).find("truncated, or not an imatrix"), std::string::npos);
  fs::remove(path);
}

TEST(Imatrix, MalformedFilesAreClearErrors) {
  EXPECT_NE(error_of([] { read_imatrix(temp_path("missing.gguf")); }).find("cannot open"), std::string::npos);

  const std::string path = temp_path("bad.gguf");
  write_imatrix(sample(), path);
  std::vector<char> bytes = read_bytes(path);
  bytes.resize(bytes.size() / 2);
  write_bytes(path, bytes);
  EXPECT_NE(error_of([&] { read_imatrix(path); }).find(path), std::string::npos);

  gguf::Writer w;
  const std::vector<float> sums = {1, 2, 3};
  w.add_tensor("blk.0.attn_q.weight.in_sum2", DType::F32, {3},
               std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(sums.data()), sizeof(float) * 3));
  w.write(path);
  EXPECT_NE(error_of([&] { read_imatrix(path); }).find("blk.0.attn_q.weight has in_sum2 but no counts"),
            std::string::npos);

  gguf::Writer no_entries;
  no_entries.set_string("general.type", "imatrix");
  no_entries.write(path);
  EXPECT_NE(error_of([&] { read_imatrix(path); }).find("no imatrix entries"), std::string::npos);

  Imatrix negative = sample();
  negative.entries["blk.0.attn_q.weight"].in_sum2[2] = -1;
  write_imatrix(negative, path);
  EXPECT_NE(error_of([&] { read_imatrix(path); }).find("blk.0.attn_q.weight.in_sum2[2] is -1"), std::string::npos);

  write_bytes(path, std::vector<char>{'h', 'e', 'l', 'l', 'o', '\n'});
  EXPECT_NE(error_of([&] { read_imatrix(path); }).find("not an imatrix"), std::string::npos);
  fs::remove(path);
}

TEST(Imatrix, ModelImportanceChecksLengthsAgainstTheTensors) {
  gguf::Writer w;
  const std::vector<uint8_t> q(4 * 3 * sizeof(float)), ffn(6 * 2 * sizeof(float));
  w.add_tensor("blk.0.attn_q.weight", DType::F32, {4, 3}, q);
  w.add_tensor("blk.0.ffn_down.weight", DType::F32, {6, 2}, ffn);
  w.add_tensor("output.weight", DType::F32, {4, 3}, q);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const gguf::File model = gguf::File::parse(bytes, "model");

  Imatrix m = sample();
  m.entries.erase("blk.0.ffn_up_exps.weight");
  const ModelImportance imp(m, model);
  EXPECT_EQ(imp.size(), 2u);
  ASSERT_NE(imp.find("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(imp.find("blk.0.attn_q.weight")->values.size(), 4u);
  EXPECT_EQ(imp.find("output.weight"), nullptr);
  EXPECT_TRUE(imp.unmatched().empty());

  m.entries["blk.0.attn_q.weight"].in_sum2.push_back(1);
  const std::string err = error_of([&] { ModelImportance bad(m, model); });
  EXPECT_NE(err.find("blk.0.attn_q.weight has 5 importance values"), std::string::npos) << err;
  EXPECT_NE(err.find("n_in 4"), std::string::npos) << err;
}

TEST(Imatrix, CollectsEveryLayerMatrixOfStories) {
  auto model = Model::load(std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf",
                           {.n_threads = 1, .max_batch_tokens = 32});
  const Tokenizer tok = Tokenizer::from_gguf(model->file());
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Once upon a time there was a little girl who liked to play. ";
  const CalibrationSet set = calibration_windows(tok, text, 32, 3, 0);
  int reports = 0;
  const Imatrix m = collect_imatrix(*model, set, [&](const std::string&) { ++reports; });
  EXPECT_EQ(reports, 3);
  EXPECT_EQ(m.chunk_count, 3u);
  EXPECT_EQ(m.chunk_size, 32u);
  const int32_t n_layer = model->config().n_layer;
  EXPECT_EQ(m.entries.size(), static_cast<size_t>(7 * n_layer));
  for (int32_t il = 0; il < n_layer; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    const ImatrixEntry& q = m.entries.at(b + "attn_q.weight");
    EXPECT_EQ(q.counts, std::vector<float>{96});
    EXPECT_EQ(q.in_sum2, m.entries.at(b + "attn_v.weight").in_sum2);  // one input
    EXPECT_EQ(m.entries.at(b + "ffn_gate.weight").in_sum2, m.entries.at(b + "ffn_up.weight").in_sum2);
    EXPECT_EQ(m.entries.at(b + "ffn_down.weight").in_sum2.size(), static_cast<size_t>(model->config().n_ff));
    for (const char* matrix : {"attn_q", "attn_output", "ffn_gate", "ffn_down"})
      for (float v : m.entries.at(b + matrix + ".weight").in_sum2) ASSERT_TRUE(std::isfinite(v) && v > 0) << matrix;
  }
}

}  // namespace
}  // namespace ridge::quant
