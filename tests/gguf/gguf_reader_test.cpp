// The GGUF reader on real files (the shared fixtures) and on small files built in memory:
// metadata values and types, tensor layouts and data views, typed getters and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace ridge::gguf {
namespace {

const std::string kFixtures = RIDGE_FIXTURES;
const std::string kStories = kFixtures + "/models/stories260K.gguf";
const std::string kTinyRandom = kFixtures + "/models/llama-2-tiny-random.gguf";

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Substring check with a readable failure message.
#define EXPECT_THROW_WITH(stmt, phrase)                                                  \
  do {                                                                                  \
    try {                                                                               \
      stmt;                                                                             \
      ADD_FAILURE() << "expected ridge::Error containing \"" << (phrase) << "\"";       \
    } catch (const ridge::Error& e) {                                                   \
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos)                  \
          << "message: " << e.what() << "\nexpected to contain: " << (phrase);          \
    }                                                                                   \
  } while (0)

TEST(GgufReader, Stories260KLayoutAndMetadata) {
  File f = File::open(kStories);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  ASSERT_EQ(f.tensors().size(), 48u);
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.dtype, DType::F32) << t.name;
    EXPECT_EQ(t.nbytes, static_cast<size_t>(t.n_elements()) * 4) << t.name;
    EXPECT_EQ(t.data, f.tensor(t.name).data);
  }

  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u64("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get_u64("llama.feed_forward_length"), 172u);
  EXPECT_EQ(f.get_u64("llama.block_count"), 5u);
  EXPECT_EQ(f.get_u64("llama.attention.head_count"), 8u);
  EXPECT_EQ(f.get_u64("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f.get_u64("llama.rope.dimension_count"), 8u);
  EXPECT_EQ(f.find("llama.embedding_length")->type, ValueType::UINT32);
  EXPECT_NEAR(f.get_f64("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-10);
  EXPECT_FALSE(f.has("llama.rope.freq_base"));
  EXPECT_DOUBLE_EQ(f.get_f64("llama.rope.freq_base", 10000.0), 10000.0);

  const Array& tokens = f.get_array("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.elem_type(), ValueType::STRING);
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens.string_at(1), "<s>");
  EXPECT_EQ(tokens.string_at(3), "<0x00>");
  EXPECT_EQ(tokens.at(3).as_string(), "<0x00>");
  const Array& types = f.get_array("tokenizer.ggml.token_type");
  EXPECT_EQ(types.elem_type(), ValueType::INT32);
  EXPECT_EQ(types.at(0).as_i64(), 2);  // <unk> is UNKNOWN
  EXPECT_EQ(types.at(0).type, ValueType::INT32);
  EXPECT_THROW_WITH(types.string_at(0), "is int32 (2), expected string");

  const TensorInfo& embd = f.tensor("token_embd.weight");
  EXPECT_EQ(embd.n_dims, 2);
  EXPECT_EQ(embd.shape_string(), "[64, 512]");
  EXPECT_EQ(f.tensor("output_norm.weight").shape_string(), "[64]");
  EXPECT_EQ(f.tensor("blk.0.attn_k.weight").shape_string(), "[64, 32]");  // GQA: 4 kv heads
  EXPECT_EQ(f.tensor("blk.4.ffn_down.weight").shape_string(), "[172, 64]");
  EXPECT_EQ(f.find_tensor("blk.5.attn_q.weight"), nullptr);
  // The last tensor ends exactly at the end of the file.
  const TensorInfo& last = f.tensor("blk.4.ffn_norm.weight");
  const uint8_t* file_begin = embd.data - embd.offset - f.data_offset();
  EXPECT_EQ(last.data + last.nbytes, file_begin + f.file_size());
}

// The fixture README says every tensor equals the matching array of the llama2.c checkpoint;
// the embedding is its first array, after a 7-int32 header. This pins the data offset.
TEST(GgufReader, TensorViewsPointAtTheRightBytes) {
  File f = File::open(kStories);
  std::vector<uint8_t> bin = read_all(kFixtures + "/models/stories260K.bin");
  ASSERT_GE(bin.size(), 28u + 512 * 64 * 4);
  const TensorInfo& embd = f.tensor("token_embd.weight");
  ASSERT_EQ(embd.nbytes, 512u * 64 * 4);
  EXPECT_EQ(std::memcmp(embd.data, bin.data() + 28, embd.nbytes), 0);
  // rms_att[5][64] follows; layer 0 is blk.0.attn_norm.weight.
  const TensorInfo& norm0 = f.tensor("blk.0.attn_norm.weight");
  EXPECT_EQ(std::memcmp(norm0.data, bin.data() + 28 + embd.nbytes, norm0.nbytes), 0);
}

TEST(GgufReader, TinyRandomHasF16Tensors) {
  File f = File::open(kTinyRandom);
  ASSERT_EQ(f.tensors().size(), 12u);
  const TensorInfo& embd = f.tensor("token_embd.weight");
  EXPECT_EQ(embd.dtype, DType::F16);
  EXPECT_EQ(embd.shape_string(), "[8, 32000]");
  EXPECT_EQ(embd.nbytes, 8u * 32000 * 2);
  EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").shape_string(), "[32, 8]");
  EXPECT_EQ(f.tensor("output_norm.weight").dtype, DType::F32);
  EXPECT_EQ(f.get_u64("general.file_type"), 1u);
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").size(), 32000u);
  EXPECT_EQ(f.get_array("tokenizer.ggml.scores").elem_type(), ValueType::FLOAT32);
}

struct VocabCase {
  const char* file;
  const char* arch;
  const char* model;
  size_t n_vocab;
  size_t n_merges;  // 0: the vocab has scores instead of merges
};

TEST(GgufReader, VocabOnlyFilesHaveNoTensors) {
  const VocabCase cases[] = {
      {"ggml-vocab-llama-spm.gguf", "llama", "llama", 32000, 0},
      {"ggml-vocab-phi-3.gguf", "phi3", "llama", 32064, 0},
      {"ggml-vocab-gpt-2.gguf", "gpt2", "gpt2", 50257, 50000},
      {"ggml-vocab-deepseek-coder.gguf", "llama", "gpt2", 32256, 31757},
      {"ggml-vocab-mpt.gguf", "mpt", "gpt2", 50432, 50009},
      {"ggml-vocab-refact.gguf", "refact", "gpt2", 49216, 48891},
      {"ggml-vocab-starcoder.gguf", "starcoder2", "gpt2", 49152, 48872},
  };
  for (const VocabCase& c : cases) {
    SCOPED_TRACE(c.file);
    File f = File::open(kFixtures + "/vocab/" + c.file);
    EXPECT_EQ(f.version(), 3u);
    EXPECT_TRUE(f.tensors().empty());
    EXPECT_EQ(f.get_string("general.architecture"), c.arch);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), c.model);
    EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").size(), c.n_vocab);
    const Array* merges = f.find_array("tokenizer.ggml.merges");
    if (c.n_merges == 0) {
      EXPECT_EQ(merges, nullptr);
    } else {
      ASSERT_NE(merges, nullptr);
      EXPECT_EQ(merges->size(), c.n_merges);
    }
  }
  File gpt2 = File::open(kFixtures + "/vocab/ggml-vocab-gpt-2.gguf");
  EXPECT_EQ(gpt2.get_array("tokenizer.ggml.merges").string_at(0), "Ġ t");
}

TEST(GgufReader, GettersCheckPresenceAndType) {
  File f = File::open(kStories);
  EXPECT_THROW_WITH(f.get_string("no.such.key"), "missing metadata key 'no.such.key'");
  EXPECT_THROW_WITH(f.get_u64("general.architecture"), "key 'general.architecture'");
  EXPECT_THROW_WITH(f.get_u64("general.architecture"), "is string");
  EXPECT_THROW_WITH(f.get_string("llama.block_count"), "is uint32");
  EXPECT_THROW_WITH(f.get_bool("llama.block_count"), "expected bool");
  EXPECT_THROW_WITH(f.get_array("llama.block_count"), "expected array");
  EXPECT_THROW_WITH(f.find_array("general.name"), "expected array");
  EXPECT_THROW_WITH(f.tensor("missing.weight"), "no tensor named 'missing.weight'");
  // A present key of the wrong type throws even with a fallback.
  EXPECT_THROW_WITH(f.get_u64("general.architecture", 7), "is string");
  EXPECT_EQ(f.get_u64("absent", 7), 7u);
  EXPECT_EQ(f.get_i64("absent", -3), -3);
  EXPECT_EQ(f.get_string("absent", "x"), "x");
  EXPECT_TRUE(f.get_bool("absent", true));
  EXPECT_EQ(f.find_array("absent"), nullptr);
  // Integers widen across signedness when they fit; floats accept any number.
  EXPECT_EQ(f.get_i64("llama.block_count"), 5);
  EXPECT_DOUBLE_EQ(f.get_f64("llama.block_count"), 5.0);
  EXPECT_EQ(f.get_u64("tokenizer.ggml.seperator_token_id"), 4294967295u);
  EXPECT_THROW_WITH(f.get_i64("llama.attention.layer_norm_rms_epsilon"), "expected an integer");
}

TEST(GgufReader, ValueAccessorsCheckRange) {
  Value negative{ValueType::INT32, int64_t{-5}};
  EXPECT_EQ(negative.as_i64(), -5);
  EXPECT_THROW_WITH(negative.as_u64(), "negative");
  Value huge{ValueType::UINT64, uint64_t{1} << 63};
  EXPECT_EQ(huge.as_u64(), uint64_t{1} << 63);
  EXPECT_THROW_WITH(huge.as_i64(), "does not fit in int64");
  Value flag{ValueType::BOOL, true};
  EXPECT_TRUE(flag.as_bool());
  EXPECT_FALSE(flag.is_number());
  EXPECT_THROW_WITH(flag.as_f64(), "is bool");
  Value x{ValueType::FLOAT32, 0.5};
  EXPECT_TRUE(x.is_number());
  EXPECT_FALSE(x.is_integer());
  EXPECT_THROW_WITH(x.as_string(), "is float32");
}

// Arrays stay encoded in the file: strings are views into it, numbers decode from
// unaligned bytes, and a copy of an opened file's array keeps the mapping alive.
TEST(GgufReader, ArraysViewTheFileAndOutliveIt) {
  Value tokens;
  const uint8_t* file_begin = nullptr;
  size_t file_size = 0;
  {
    File f = File::open(kStories);
    const TensorInfo& embd = f.tensor("token_embd.weight");
    file_begin = embd.data - embd.offset - f.data_offset();
    file_size = f.file_size();
    tokens = *f.find("tokenizer.ggml.tokens");
  }
  const Array& a = tokens.as_array();
  std::string_view unk = a.string_at(0);
  EXPECT_EQ(unk, "<unk>");
  EXPECT_GE(reinterpret_cast<const uint8_t*>(unk.data()), file_begin);
  EXPECT_LT(reinterpret_cast<const uint8_t*>(unk.data()), file_begin + file_size);
  EXPECT_EQ(a.at(a.size() - 1).as_string(), a.string_at(a.size() - 1));

  // A one-byte key pushes the f32 array off 4-byte alignment.
  Writer w;
  w.set_string("k", "x");
  w.set_f32_array("f", {0.5f, -2.0f, 3.25f});
  std::vector<uint8_t> bytes = w.to_bytes();
  File f = File::parse(bytes);
  const Array& floats = f.get_array("f");
  EXPECT_NE(reinterpret_cast<uintptr_t>(floats.encoded().data()) % 4, 0u);
  EXPECT_EQ(floats.at(2).as_f64(), 3.25);
  EXPECT_EQ(floats.at(2).type, ValueType::FLOAT32);
  EXPECT_EQ(floats.encoded().size(), 12u);
  EXPECT_EQ(*f.find("f"), (Value{ValueType::ARRAY, Array(ValueType::FLOAT32,
                                                          {Value{ValueType::FLOAT32, 0.5},
                                                           Value{ValueType::FLOAT32, -2.0},
                                                           Value{ValueType::FLOAT32, 3.25}})}));
}

TEST(GgufReader, ToStringElidesLongArrays) {
  std::vector<Value> items(20, Value{ValueType::INT32, int64_t{0}});
  for (int i = 0; i < 20; ++i) items[i].data = int64_t{i};
  Value v{ValueType::ARRAY, Array(ValueType::INT32, items)};
  EXPECT_EQ(v.to_string(3), "[0, 1, 2, ... (20 items)]");
  EXPECT_EQ((Value{ValueType::STRING, std::string("a\"b\n")}).to_string(), "\"a\\\"b\\n\"");
  EXPECT_EQ((Value{ValueType::BOOL, false}).to_string(), "false");
  EXPECT_EQ((Value{ValueType::FLOAT32, 0.25}).to_string(), "0.25");
  EXPECT_EQ(value_type_name(ValueType::UINT16), "uint16");
  TensorInfo scalar;
  EXPECT_EQ(scalar.shape_string(), "[]");
}

TEST(GgufReader, AcceptsVersion2) {
  Writer w;
  w.set_u32("answer", 42);
  std::vector<float> data(16, 1.5f);
  w.add_tensor("t", DType::F32, {16}, {reinterpret_cast<const uint8_t*>(data.data()), 64});
  std::vector<uint8_t> bytes = w.to_bytes();
  bytes[4] = 2;  // v3 only added big-endian files; a little-endian v2 reads the same
  File f = File::parse(bytes, "v2");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_u64("answer"), 42u);
  float first = 0;
  std::memcpy(&first, f.tensor("t").data, 4);
  EXPECT_EQ(first, 1.5f);
}

TEST(GgufReader, OpenNamesPathOnMissingFile) {
  EXPECT_THROW_WITH(File::open("/nonexistent/x.gguf"), "/nonexistent/x.gguf");
}

TEST(GgufReader, ParseErrorsNameTheSource) {
  std::vector<uint8_t> junk(64, 0x41);
  EXPECT_THROW_WITH(File::parse(junk, "junk.bin"), "junk.bin: bad magic");
  EXPECT_THROW_WITH(File::parse(junk, "junk.bin"), "at offset 0");
}

// A file with one tensor "probe.weight" of 256 x 2 elements whose type field says `type_id`.
// Written as F64 (8 bytes an element, the most of any type), so the data covers the
// tensor whatever type the id names.
std::vector<uint8_t> file_with_tensor_type(uint32_t type_id) {
  Writer w;
  std::vector<uint8_t> data(256 * 2 * 8);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  w.add_tensor("probe.weight", DType::F64, {256, 2}, data);
  std::vector<uint8_t> bytes = w.to_bytes();
  // The tensor info: name, n_dims (u32), two dims (i64), then the type (u32).
  const std::string name = "probe.weight";
  auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  EXPECT_NE(at, bytes.end());
  const size_t type_at = static_cast<size_t>(at - bytes.begin()) + name.size() + 4 + 2 * 8;
  uint32_t old_id = 0;
  std::memcpy(&old_id, bytes.data() + type_at, 4);
  EXPECT_EQ(old_id, static_cast<uint32_t>(DType::F64));
  std::memcpy(bytes.data() + type_at, &type_id, 4);
  return bytes;
}

// Files users download carry types ridge does not read: the interleaved layouts llama.cpp
// removed, and ik_llama.cpp's own types. The refusal names the type, the tensor and what
// to do.
TEST(GgufReader, RemovedAndForeignTypesAreRefusedByName) {
  struct Case {
    uint32_t id;
    const char* phrase;
  };
  const Case cases[] = {
      {4, "tensor type 4 (Q4_2) was removed from ggml"},
      {31, "tensor type 31 (Q4_0_4_4) is an interleaved layout removed from llama.cpp"},
      {32, "tensor type 32 (Q4_0_4_8)"},
      {33, "tensor type 33 (Q4_0_8_8)"},
      {36, "tensor type 36 (IQ4_NL_4_4)"},
      {37, "tensor type 37 (IQ4_NL_4_8)"},
      {38, "tensor type 38 (IQ4_NL_8_8)"},
      {31, "re-quantize with llama-quantize from the F16/BF16 file"},
      {36, "I2_S"},
      {32, "(to Q4_0 for the same size)"},
      {38, "(to IQ4_NL for the same size)"},
      {133, "tensor type 133 (Q6_0): this is an ik_llama.cpp type"},
      {139, "tensor type 139 (IQ4_K): this is an ik_llama.cpp type"},
      {145, "tensor type 145 (IQ2_KS)"},
      {155, "tensor type 155 (IQ4_KT)"},
      {220, "tensor type 220 (IQ4_NL_R4)"},
      {399, "tensor type 399 (Q8_K_R8)"},
      {145, "use a mainline GGUF"},
      {199, "tensor type 199 is not a llama.cpp type; ids from 133 up are where ik_llama.cpp"},
      {42, "tensor type 42 is not a type ridge knows"},
      {1000, "tensor type 1000 (nf4) is a format ridge makes at load time"},
      {0xffffffffu, "tensor type 4294967295 is not a llama.cpp type"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.id);
    const std::vector<uint8_t> bytes = file_with_tensor_type(c.id);
    EXPECT_THROW_WITH(File::parse(bytes, "model.gguf"), c.phrase);
    EXPECT_THROW_WITH(File::parse(bytes, "model.gguf"), "model.gguf: tensor 'probe.weight': tensor type ");
  }
}

// Every type id a byte can hold either loads (and then converts, or says it cannot) or is
// refused with ridge::Error naming the tensor; nothing crashes or reads out of bounds.
TEST(GgufReader, EveryTypeIdLoadsOrIsRefusedNamingTheTensor) {
  int loaded = 0;
  for (uint32_t id = 0; id < 256; ++id) {
    SCOPED_TRACE(id);
    const std::vector<uint8_t> bytes = file_with_tensor_type(id);
    try {
      File f = File::parse(bytes, "model.gguf");
      ASSERT_TRUE(is_known_dtype(id));
      const TensorInfo& t = f.tensor("probe.weight");
      EXPECT_EQ(t.nbytes, 2 * row_size(t.dtype, 256));
      ++loaded;
      std::vector<float> row(256);
      try {
        dequantize_row(t.dtype, t.data, row.data(), 256);
        EXPECT_NE(type_traits(t.dtype).to_float, nullptr);
      } catch (const ridge::Error& e) {
        EXPECT_EQ(type_traits(t.dtype).to_float, nullptr) << e.what();
        EXPECT_NE(std::string(e.what()).find(type_traits(t.dtype).name), std::string::npos) << e.what();
      }
    } catch (const ridge::Error& e) {
      EXPECT_FALSE(is_known_dtype(id)) << e.what();
      EXPECT_NE(std::string(e.what()).find("tensor 'probe.weight': tensor type " + std::to_string(id)),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(loaded, 34);  // ggml's ids 0..41 less the removed 4, 5, 31..33, 36..38
}

// A file opened from disk keeps its mapping alive after the File is moved.
TEST(GgufReader, MovedFileKeepsTensorViewsValid) {
  std::vector<File> files;
  files.push_back(File::open(kStories));
  File moved = std::move(files.back());
  files.clear();
  const TensorInfo& t = moved.tensor("output_norm.weight");
  float x = 0;
  std::memcpy(&x, t.data, sizeof x);
  EXPECT_GT(x, 0.0f);  // RMSNorm gains of a trained model are positive
}

}  // namespace
}  // namespace ridge::gguf
