// Hostile input: every file in tests/gguf/corpus/ (made by make_corpus.py) must be rejected
// with a ridge::Error whose message carries its own expected phrase; every truncation and
// many byte corruptions of valid files must be rejected cleanly or parse, never crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace ridge::gguf {
namespace {

namespace fs = std::filesystem;
const fs::path kCorpus = fs::path(RIDGE_SOURCE_DIR) / "tests/gguf/corpus";
const fs::path kValidSmall = fs::path(RIDGE_SOURCE_DIR) / "tests/gguf/valid_small.gguf";
const fs::path kValidTypes = fs::path(RIDGE_SOURCE_DIR) / "tests/gguf/valid_types.gguf";
const std::string kFixtures = RIDGE_FIXTURES;

std::vector<uint8_t> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::map<std::string, std::string> expected_phrases() {
  std::map<std::string, std::string> table;
  std::ifstream in(kCorpus / "expected.tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t tab = line.find('\t');
    if (tab == std::string::npos) {
      ADD_FAILURE() << "bad line in expected.tsv: " << line;
      continue;
    }
    table[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return table;
}

// Parses a copy sized exactly to the input, so a read one byte past the end lands outside
// the allocation (and AddressSanitizer, when on, reports it).
void parse_exact(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[size > 0 ? size : 1]);
  std::copy(data, data + size, copy.get());
  File::parse({copy.get(), size}, "input");
}

TEST(GgufCorpus, EveryHostileFileIsRejectedWithItsOwnMessage) {
  std::map<std::string, std::string> table = expected_phrases();
  ASSERT_GE(table.size(), 30u);
  size_t seen = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(kCorpus)) {
    if (entry.path().extension() != ".gguf") continue;
    std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    auto it = table.find(name);
    ASSERT_NE(it, table.end()) << "no expected phrase for " << name;
    ++seen;
    try {
      File::open(entry.path().string());
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(it->second), std::string::npos)
          << "message: " << message << "\nexpected to contain: " << it->second;
      EXPECT_NE(message.find(name), std::string::npos) << "message must name the file";
      EXPECT_NE(message.find(" at offset "), std::string::npos) << message;
    }
  }
  EXPECT_EQ(seen, table.size()) << "expected.tsv lists files that are missing";
}

// The corpus files are single mutations of this one, so it must parse.
TEST(GgufCorpus, BaselineOfTheCorpusIsValid) {
  File f = File::open(kValidSmall.string());
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
}

// A u8 array one element past the cap: 8 MB of input that would become 400 MB of Values.
// Too big to check in, so it is built here; one element fewer is accepted.
TEST(GgufCorpus, MetadataElementCapIsEnforced) {
  auto file_with_u8_array = [](uint64_t count) {
    std::vector<uint8_t> b;
    auto put = [&](const void* p, size_t n) {
      b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    };
    auto put_u32 = [&](uint32_t x) { put(&x, 4); };
    auto put_u64 = [&](uint64_t x) { put(&x, 8); };
    put_u32(kMagic);
    put_u32(3);
    put_u64(0);  // tensors
    put_u64(1);  // kvs
    put_u64(4);
    put("many", 4);
    put_u32(static_cast<uint32_t>(ValueType::ARRAY));
    put_u32(static_cast<uint32_t>(ValueType::UINT8));
    put_u64(count);
    b.resize(b.size() + count, 7);
    return b;
  };
  std::vector<uint8_t> at_cap = file_with_u8_array(kMaxMetadataElements);
  EXPECT_EQ(File::parse(at_cap).get_array("many").size(), kMaxMetadataElements);
  std::vector<uint8_t> past_cap = file_with_u8_array(kMaxMetadataElements + 1);
  try {
    File::parse(past_cap, "big");
    ADD_FAILURE() << "accepted " << kMaxMetadataElements + 1 << " elements";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past 8388608 array elements"), std::string::npos)
        << e.what();
  }
}

// The other hand-built file (also a fuzz seed): every value type, alignment 16.
TEST(GgufCorpus, HandBuiltFileWithEveryTypeParses) {
  File f = File::open(kValidTypes.string());
  EXPECT_EQ(f.alignment(), 16u);
  EXPECT_EQ(f.data_offset() % 16, 0u);
  EXPECT_EQ(f.get_i64("i8"), -128);
  EXPECT_EQ(f.get_u64("u64"), uint64_t{1} << 63);
  EXPECT_EQ(f.get_string("str"), "h\xc3\xa9llo");
  EXPECT_EQ(f.find("nested")->to_string(), "[[3], []]");
  EXPECT_EQ(f.tensor("q4").dtype, DType::Q4_0);
  EXPECT_EQ(f.tensor("q4").offset, 80u);
  EXPECT_EQ(f.tensor("f32").data[15], 15);
}

// The end of the last tensor's data: a file cut at or after it is still valid (only
// padding is lost); cut anywhere before, it must be rejected.
size_t end_of_data(const File& f) {
  size_t end = 0;
  for (const TensorInfo& t : f.tensors())
    end = std::max<size_t>(end, f.data_offset() + t.offset + t.nbytes);
  return end;
}

// Cuts at every length below `exhaustive_until`, then every `stride` bytes.
void check_truncations(const std::vector<uint8_t>& bytes, size_t exhaustive_until,
                       size_t stride) {
  File whole = File::parse(bytes);
  size_t min_valid = whole.tensors().empty() ? 0 : end_of_data(whole);
  size_t n_rejected = 0;
  for (size_t len = 0; len < bytes.size(); len += (len < exhaustive_until ? 1 : stride)) {
    bool must_fail = len < min_valid;
    try {
      parse_exact(bytes.data(), len);
      EXPECT_FALSE(must_fail) << "accepted a file cut to " << len << " of " << bytes.size();
    } catch (const Error& e) {
      ++n_rejected;
      EXPECT_NE(std::string(e.what()).find("input: "), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(n_rejected, 0u);
}

std::vector<uint8_t> sample_with_every_type() {
  Writer w(16);
  w.set_string("general.architecture", "test");
  w.set_string_array("tokens", {"a", "bb", "", "dddd"});
  w.set_f32_array("scores", {1, 2, 3});
  Value inner{ValueType::ARRAY, Array(ValueType::INT16, {Value{ValueType::INT16, int64_t{-2}}})};
  w.set("nested", Value{ValueType::ARRAY, Array(ValueType::ARRAY, {inner})});
  w.set("u64", Value{ValueType::UINT64, uint64_t{7}});
  w.set("f64", Value{ValueType::FLOAT64, 2.5});
  w.set_bool("flag", true);
  std::vector<uint8_t> f32(4 * 8, 1), q8(34, 2), f16(2 * 3, 3);
  w.add_tensor("a", DType::F32, {8}, f32);
  w.add_tensor("b", DType::Q8_0, {32}, q8);
  w.add_tensor("c", DType::F16, {3}, f16);
  return w.to_bytes();
}

TEST(GgufCorpus, EveryTruncationOfSmallFilesIsRejected) {
  check_truncations(read_all(kValidSmall), SIZE_MAX, 1);
  check_truncations(read_all(kValidTypes), SIZE_MAX, 1);
  check_truncations(sample_with_every_type(), SIZE_MAX, 1);
}

// stories260K: all of the header, metadata and tensor infos byte by byte, then the data in
// strides. llama-2-tiny-random has 700 KB of vocabulary, so it is cut in strides throughout.
TEST(GgufCorpus, TruncationsOfRealModelsAreRejected) {
  std::vector<uint8_t> stories = read_all(kFixtures + "/models/stories260K.gguf");
  check_truncations(stories, File::parse(stories).data_offset() + 64, 4099);
  check_truncations(read_all(kFixtures + "/models/llama-2-tiny-random.gguf"), 64, 9973);
}

// Each byte of the header, metadata and tensor infos set to a few hostile values: the
// reader must either accept the result or throw ridge::Error, nothing else.
TEST(GgufCorpus, SingleByteCorruptionsNeverCrash) {
  std::vector<uint8_t> base = sample_with_every_type();
  size_t metadata_end = File::parse(base).data_offset();
  size_t accepted = 0, rejected = 0;
  for (size_t i = 0; i < metadata_end; ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0x7f}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> bytes = base;
      if (bytes[i] == v) continue;
      bytes[i] = v;
      try {
        parse_exact(bytes.data(), bytes.size());
        ++accepted;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  // Most corruptions of a structural byte are detected; some (a value byte) are benign.
  EXPECT_GT(rejected, 0u);
  EXPECT_GT(accepted, 0u);
}

}  // namespace
}  // namespace ridge::gguf
