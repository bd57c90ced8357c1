// /tokenize and /detokenize bodies (llama-server's shapes) and /v1/embeddings parsing, on
// the GPT-2 vocabulary (byte-level BPE: an emoji's bytes split across tokens) and
// stories260K (SentencePiece with BOS).
#include "server/tokenize_api.h"

#include <gtest/gtest.h>

#include <string>

#include "gguf/gguf.h"
#include "server/api_error.h"
#include "server/embeddings_api.h"

namespace ridge::server {
namespace {

using nlohmann::json;

const Tokenizer& gpt2() {
  static const Tokenizer t =
      Tokenizer::from_gguf(gguf::File::open(std::string(RIDGE_FIXTURES) + "/vocab/ggml-vocab-gpt-2.gguf"));
  return t;
}

const Tokenizer& stories() {
  static const Tokenizer t =
      Tokenizer::from_gguf(gguf::File::open(std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf"));
  return t;
}

template <typename F>
ApiError error_of(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError";
  return ApiError(0, "");
}

TEST(Tokenize, IdsByDefaultWithoutSpecialTokens) {
  const json out = tokenize_json(parse_tokenize_request(R"({"content": "Hello world"})"), stories());
  EXPECT_EQ(out["tokens"].get<std::vector<int32_t>>(), stories().encode("Hello world", /*add_special=*/false));
  const json with_bos =
      tokenize_json(parse_tokenize_request(R"({"content": "Hello world", "add_special": true})"), stories());
  EXPECT_EQ(with_bos["tokens"][0].get<int32_t>(), stories().bos());
}

TEST(Tokenize, PiecesJoinToTheTextAndHalfCharactersAreByteLists) {
  const std::string text = "Hi 🤗 there";
  json body = {{"content", text}, {"with_pieces", true}};
  const json out = tokenize_json(parse_tokenize_request(body.dump()), gpt2());
  std::string joined;
  bool saw_bytes = false;
  for (const json& t : out["tokens"]) {
    ASSERT_TRUE(t["id"].is_number_integer());
    const json& piece = t["piece"];
    EXPECT_EQ(piece.is_string() ? std::string(piece) : std::string(gpt2().token_to_piece(t["id"], true)),
              std::string(gpt2().token_to_piece(t["id"], true)));
    if (piece.is_string()) {
      joined += piece.get<std::string>();
    } else {
      saw_bytes = true;
      for (const json& b : piece) {
        ASSERT_TRUE(b.is_number_integer());
        joined += static_cast<char>(b.get<int>());
      }
    }
  }
  EXPECT_TRUE(saw_bytes) << out.dump();  // 🤗's four bytes are not one GPT-2 token
  EXPECT_EQ(joined, text);
}

TEST(Tokenize, RefusesMissingOrMistypedFields) {
  ApiError e = error_of([] { parse_tokenize_request(R"({})"); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "content");
  EXPECT_EQ(e.code, "missing_required_parameter");
  EXPECT_EQ(error_of([] { parse_tokenize_request(R"({"content": 5})"); }).param, "content");
  EXPECT_EQ(error_of([] { parse_tokenize_request(R"({"content": "a", "with_pieces": "yes"})"); }).param,
            "with_pieces");
  EXPECT_EQ(error_of([] { parse_tokenize_request(R"({"content": )"); }).code, "invalid_json");
}

TEST(Detokenize, RoundTripsTheText) {
  for (const Tokenizer* t : {&gpt2(), &stories()}) {
    const std::string text = "Once upon a time, there was a dog 🤗.";
    const json body = {{"tokens", t->encode(text, /*add_special=*/false)}};
    EXPECT_EQ(detokenize_json(parse_detokenize_request(body.dump(), *t), *t)["content"], text);
  }
}

TEST(Detokenize, NamesIdsOutsideTheVocabulary) {
  const std::string body = json{{"tokens", {1, -3, 2, 1 << 30}}}.dump();
  ApiError e = error_of([&] { parse_detokenize_request(body, stories()); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "tokens");
  EXPECT_EQ(e.code, "invalid_value");
  const std::string message = e.what();
  EXPECT_NE(message.find("tokens[1] = -3"), std::string::npos) << message;
  EXPECT_NE(message.find(str_cat("tokens[3] = ", 1 << 30)), std::string::npos) << message;
  EXPECT_EQ(error_of([] { parse_detokenize_request(R"({"tokens": [1, "a"]})", stories()); }).param, "tokens[1]");
  EXPECT_EQ(error_of([] { parse_detokenize_request(R"({"tokens": 1})", stories()); }).param, "tokens");
}

TEST(Embeddings, EveryInputShapeBecomesPrompts) {
  const PromptLimits limits{.n_ctx = 512};
  auto prompts = [&](const json& input) {
    return embedding_prompts(parse_embeddings_request(json{{"input", input}}.dump()), stories(), 64, limits);
  };
  EXPECT_EQ(prompts("Hello").size(), 1u);
  EXPECT_EQ(prompts("Hello")[0], stories().encode("Hello"));  // BOS as for a raw prompt
  EXPECT_EQ(prompts(json::array({"a", "b", "c"})).size(), 3u);
  EXPECT_EQ(prompts(json::array({5, 6, 7})), (std::vector<std::vector<int32_t>>{{5, 6, 7}}));
  EXPECT_EQ(prompts(json::array({json::array({5}), json::array({6, 7})})),
            (std::vector<std::vector<int32_t>>{{5}, {6, 7}}));
}

TEST(Embeddings, RefusesBadInputsAndDimensions) {
  const PromptLimits limits{.n_ctx = 8};
  auto error = [&](const std::string& body) {
    return error_of([&] { embedding_prompts(parse_embeddings_request(body), stories(), 64, limits); });
  };
  EXPECT_EQ(error(R"({})").code, "missing_required_parameter");
  EXPECT_EQ(error(R"({"input": ""})").param, "input");
  EXPECT_EQ(error(R"({"input": []})").param, "input");
  EXPECT_EQ(error(R"({"input": ["a", ""]})").param, "input");
  EXPECT_EQ(error(R"({"input": [[1], []]})").param, "input");
  EXPECT_EQ(error(R"({"input": {"a": 1}})").code, "invalid_type");
  EXPECT_EQ(error(R"({"input": [1, 100000]})").param, "input");  // outside the vocabulary
  EXPECT_EQ(error(R"({"input": [1,2,3,4,5,6,7,8,9]})").code, "context_length_exceeded");
  EXPECT_EQ(error(R"({"input": "a", "encoding_format": "int8"})").param, "encoding_format");
  ApiError d = error(R"({"input": "a", "dimensions": 32})");
  EXPECT_EQ(d.status, 400);
  EXPECT_EQ(d.param, "dimensions");
  EXPECT_EQ(error(R"({"input": "a", "dimensions": 0})").param, "dimensions");
  // The model's own size is accepted.
  EXPECT_EQ(embedding_prompts(parse_embeddings_request(R"({"input": "a", "dimensions": 64})"), stories(), 64, limits)
                .size(),
            1u);
}

TEST(Embeddings, ResponseInFloatsOrBase64) {
  EmbeddingsRequest r = parse_embeddings_request(R"({"input": ["a", "b"], "encoding_format": "base64"})");
  const std::vector<std::vector<float>> vectors = {{1.0f, -2.5f}, {0.0f, 0.5f}};
  json out = embeddings_json(r, "m", vectors, 7);
  EXPECT_EQ(out["object"], "list");
  EXPECT_EQ(out["model"], "m");
  EXPECT_EQ(out["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(out["usage"]["total_tokens"], 7);
  ASSERT_EQ(out["data"].size(), 2u);
  EXPECT_EQ(out["data"][1]["index"], 1);
  EXPECT_EQ(out["data"][1]["object"], "embedding");
  // 1.0f = 00 00 80 3f, -2.5f = 00 00 20 c0 (little-endian).
  EXPECT_EQ(out["data"][0]["embedding"], "AACAPwAAIMA=");
  r.base64 = false;
  out = embeddings_json(r, "m", vectors, 7);
  EXPECT_EQ(out["data"][0]["embedding"].get<std::vector<float>>(), vectors[0]);
}

}  // namespace
}  // namespace ridge::server
