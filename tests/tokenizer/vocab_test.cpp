// Vocab: what is read from GGUF metadata, llama.cpp's defaults, and the errors bad
// metadata gets.
#include <gtest/gtest.h>

#include <functional>

#include "gguf/writer.h"
#include "tokenizer_fixtures.h"

namespace ridge {
namespace {

// The error message of fn, or "" if it did not throw ridge::Error.
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A small valid SentencePiece vocab as GGUF metadata; `edit` changes it before writing.
std::string vocab_error(const std::function<void(gguf::Writer&)>& edit) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "▁", "a", "▁a"});
  w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3});
  w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1});
  edit(w);
  const std::vector<uint8_t> bytes = w.to_bytes();
  return error_of([&] { Vocab::from_gguf(gguf::File::parse(bytes, "tiny.gguf")); });
}

TEST(VocabGguf, LlamaSpmMetadata) {
  const Vocab& v = test::fixture_tokenizer("llama-spm").vocab();
  EXPECT_EQ(v.type(), VocabType::kSentencePiece);
  EXPECT_EQ(v.n_tokens(), 32000);
  EXPECT_EQ(v.bos(), 1);
  EXPECT_EQ(v.eos(), 2);
  EXPECT_EQ(v.unk(), 0);
  EXPECT_TRUE(v.add_bos());
  EXPECT_FALSE(v.add_eos());
  EXPECT_TRUE(v.add_space_prefix());
  EXPECT_EQ(v.token_type(0), TokenType::kUnknown);
  EXPECT_EQ(v.token_type(1), TokenType::kControl);
  EXPECT_EQ(v.text(13), "<0x0A>");
  EXPECT_EQ(v.token_type(13), TokenType::kByte);
  EXPECT_EQ(v.byte_token('\n'), 13);
  EXPECT_EQ(v.find("▁the"), 278);
  EXPECT_EQ(v.find("no such token"), Vocab::kNoToken);
  EXPECT_TRUE(v.is_eog(2));
  EXPECT_FALSE(v.is_eog(1));
}

TEST(VocabGguf, Gpt2Metadata) {
  const Vocab& v = test::fixture_tokenizer("gpt-2").vocab();
  EXPECT_EQ(v.type(), VocabType::kBytePairEncoding);
  EXPECT_EQ(v.pre(), "gpt-2");
  EXPECT_EQ(v.n_tokens(), 50257);
  ASSERT_EQ(v.n_merges(), 50000u);
  EXPECT_EQ(v.merge(0), (std::pair<std::string_view, std::string_view>{"Ġ", "t"}));
  EXPECT_EQ(v.bos(), 50256);
  EXPECT_EQ(v.eos(), 50256);
  EXPECT_FALSE(v.add_bos());  // BPE default, no key in the file
  EXPECT_FALSE(v.add_space_prefix());
  EXPECT_FALSE(v.ignore_merges());
  EXPECT_TRUE(v.clean_spaces());
  EXPECT_EQ(v.eot(), 50256);  // found by its text, <|endoftext|>
  EXPECT_TRUE(v.is_eog(50256));
}

TEST(VocabGguf, Phi3EndTokensAndRightStrip) {
  const Vocab& v = test::fixture_tokenizer("phi-3").vocab();
  EXPECT_EQ(v.eos(), 32000);
  EXPECT_EQ(v.eot(), 32007);  // <|end|>, found by its text
  EXPECT_TRUE(v.is_eog(32000));
  EXPECT_TRUE(v.is_eog(32007));
  EXPECT_TRUE(v.token(32007).rstrip);  // llama.cpp's Phi-3 quirk
  EXPECT_FALSE(v.token(1).rstrip);     // except <s>
}

TEST(VocabGguf, LlamaBpeFlagsFromPreTokenizer) {
  const Vocab& v = test::fixture_tokenizer("llama-bpe").vocab();
  EXPECT_TRUE(v.ignore_merges());
  EXPECT_TRUE(v.add_bos());  // llama3-type pre-tokenizers add BOS by default
  EXPECT_EQ(v.eot(), 128009);
  EXPECT_TRUE(v.is_eog(128009));
  EXPECT_TRUE(v.is_eog(128001));
  EXPECT_FALSE(v.is_eog(128000));
}

TEST(VocabGguf, TinyVocabDefaults) {
  EXPECT_EQ(vocab_error([](gguf::Writer&) {}), "");
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "▁", "a", "▁a"});
  const std::vector<uint8_t> bytes = w.to_bytes();
  const Vocab v = Vocab::from_gguf(gguf::File::parse(bytes, "tiny.gguf"));
  EXPECT_EQ(v.bos(), 1);  // llama.cpp's SentencePiece defaults
  EXPECT_EQ(v.eos(), 2);
  EXPECT_EQ(v.unk(), 0);
  EXPECT_EQ(v.token(4).score, 0.0f);
  EXPECT_EQ(v.token_type(4), TokenType::kNormal);
}

TEST(VocabErrors, MissingTokensNamesTheKey) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("tokenizer.ggml.model", "llama");
  const std::vector<uint8_t> bytes = w.to_bytes();
  const std::string err = error_of([&] { Vocab::from_gguf(gguf::File::parse(bytes, "nov.gguf")); });
  EXPECT_NE(err.find("tokenizer.ggml.tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("nov.gguf"), std::string::npos) << err;
}

TEST(VocabErrors, MissingModelNamesTheKey) {
  gguf::Writer w;
  w.set_string_array("tokenizer.ggml.tokens", {"a"});
  const std::vector<uint8_t> bytes = w.to_bytes();
  const std::string err = error_of([&] { Vocab::from_gguf(gguf::File::parse(bytes, "x.gguf")); });
  EXPECT_NE(err.find("tokenizer.ggml.model"), std::string::npos) << err;
}

TEST(VocabErrors, UnsupportedModelsAreNamed) {
  for (const char* model : {"bert", "t5", "rwkv"}) {
    const std::string err =
        vocab_error([&](gguf::Writer& w) { w.set_string("tokenizer.ggml.model", model); });
    EXPECT_NE(err.find(std::string("'") + model + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("not supported"), std::string::npos) << err;
  }
  const std::string err =
      vocab_error([](gguf::Writer& w) { w.set_string("tokenizer.ggml.model", "klingon"); });
  EXPECT_NE(err.find("unknown tokenizer.ggml.model = 'klingon'"), std::string::npos) << err;
}

TEST(VocabErrors, ArrayLengthsMustAgree) {
  std::string err = vocab_error(
      [](gguf::Writer& w) { w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0}); });
  EXPECT_NE(err.find("tokenizer.ggml.scores has 3 entries"), std::string::npos) << err;
  err = vocab_error([](gguf::Writer& w) { w.set_i32_array("tokenizer.ggml.token_type", {1}); });
  EXPECT_NE(err.find("tokenizer.ggml.token_type has 1 entries"), std::string::npos) << err;
}

TEST(VocabErrors, WrongArrayTypesAreNamed) {
  const std::string err = vocab_error(
      [](gguf::Writer& w) { w.set_f32_array("tokenizer.ggml.tokens", {1, 2}); });
  EXPECT_NE(err.find("tokenizer.ggml.tokens"), std::string::npos) << err;
}

TEST(VocabErrors, TokenTypeOutOfRange) {
  const std::string err = vocab_error(
      [](gguf::Writer& w) { w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 9, 1}); });
  EXPECT_NE(err.find("tokenizer.ggml.token_type[4] = 9"), std::string::npos) << err;
}

TEST(VocabErrors, SpecialIdOutOfRangeNamesTheKey) {
  const std::string err = vocab_error(
      [](gguf::Writer& w) { w.set_u32("tokenizer.ggml.bos_token_id", 6); });
  EXPECT_NE(err.find("tokenizer.ggml.bos_token_id = 6 is out of range for 6 tokens"),
            std::string::npos)
      << err;
}

TEST(VocabErrors, AddBosNeedsBos) {
  const std::string err = vocab_error([](gguf::Writer& w) {
    w.set_string_array("tokenizer.ggml.tokens", {"a"});
    w.set_f32_array("tokenizer.ggml.scores", {0});
    w.set_i32_array("tokenizer.ggml.token_type", {1});
  });
  EXPECT_NE(err.find("tokenizer.ggml.add_bos_token is true"), std::string::npos) << err;
}

TEST(VocabErrors, BpeNeedsWellFormedMerges) {
  std::string err = vocab_error([](gguf::Writer& w) {
    w.set_string("tokenizer.ggml.model", "gpt2");
  });
  EXPECT_NE(err.find("tokenizer.ggml.merges"), std::string::npos) << err;
  err = vocab_error([](gguf::Writer& w) {
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string_array("tokenizer.ggml.merges", {"a ▁", "nospace"});
  });
  EXPECT_NE(err.find("tokenizer.ggml.merges[1] = 'nospace'"), std::string::npos) << err;
}

TEST(VocabErrors, ByteTokensMustBeSpelledHex) {
  const std::string err = vocab_error(
      [](gguf::Writer& w) { w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 6, 1}); });
  EXPECT_NE(err.find("token 4 'a' has type BYTE"), std::string::npos) << err;
}

TEST(VocabSpecs, EmptyTokenListIsRejected) {
  VocabSpec spec;
  spec.origin = "spec";
  const std::string err = error_of([&] { Vocab::from_spec(spec); });
  EXPECT_EQ(err, "spec: tokenizer.ggml.tokens is empty");
}

TEST(VocabSpecs, DuplicateTextKeepsFirstIdForEncoding) {
  VocabSpec spec;
  spec.tokens = {"<unk>", "<s>", "</s>", "▁a", "▁a"};
  spec.scores = {0, 0, 0, -1, -1};
  const Tokenizer tok{Vocab::from_spec(std::move(spec))};
  EXPECT_EQ(tok.vocab().find("▁a"), 3);
  EXPECT_EQ(tok.encode("a", false), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok.token_to_piece(4), " a");  // the duplicate still decodes
}

TEST(VocabSpecs, ExplicitNoneDisablesSpecialToken) {
  VocabSpec spec;
  spec.tokens = {"<unk>", "<s>", "</s>", "a"};
  spec.bos_id = -1;
  spec.add_bos = false;
  const Vocab v = Vocab::from_spec(std::move(spec));
  EXPECT_EQ(v.bos(), Vocab::kNoToken);
  EXPECT_EQ(v.eos(), 2);
}

}  // namespace
}  // namespace ridge
