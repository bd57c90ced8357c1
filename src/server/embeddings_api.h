// OpenAI's /v1/embeddings: the request's inputs (a string, a list of strings, a list of
// token ids or a list of such lists), the prompts they become, and the response with one
// pooled, unit-length vector per input (floats, or base64 of little-endian float32).
//
//   EmbeddingsRequest r = parse_embeddings_request(body);                 // throws ApiError
//   auto prompts = embedding_prompts(r, tokenizer, model.config().n_embd, limits);
//   ... one engine request per prompt (RequestParams::hidden, EmbeddingPool) ...
//   json out = embeddings_json(r, "qwen", vectors, n_prompt_tokens);
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace ridge::server {

inline constexpr size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit on `input` items

struct EmbeddingInput {
  std::string text;             // when !is_tokens
  std::vector<int32_t> tokens;  // when is_tokens
  bool is_tokens = false;
};

struct EmbeddingsRequest {
  std::string model;                 // "" when the request names none
  std::vector<EmbeddingInput> inputs;
  bool base64 = false;               // encoding_format "base64" (else "float")
  std::optional<int64_t> dimensions;  // must equal n_embd: vectors are not truncated
};

// Throws ApiError(400) naming the field: bad JSON, `input` missing, empty, an empty string
// or token list, more than kMaxEmbeddingInputs items, a wrong type; an unknown
// encoding_format; dimensions not a positive integer.
EmbeddingsRequest parse_embeddings_request(std::string_view body);

// One prompt per input: text tokenized as a raw completions prompt is (BOS/EOS as the
// vocabulary asks, special-token text parsed). Throws ApiError(400): dimensions other
// than n_embd, an id outside the vocabulary, an input over max_prompt_tokens or the context.
std::vector<std::vector<int32_t>> embedding_prompts(const EmbeddingsRequest& request, const Tokenizer& tokenizer,
                                                    int32_t n_embd, const PromptLimits& limits);

// {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": ...}], "model",
//  "usage": {"prompt_tokens", "total_tokens"}}
nlohmann::json embeddings_json(const EmbeddingsRequest& request, const std::string& model_name,
                               const std::vector<std::vector<float>>& vectors, int64_t prompt_tokens);

// Base64 (RFC 4648, padded) of the vector's float32 values in little-endian byte order, as
// OpenAI's encoding_format "base64" (numpy.frombuffer(base64.b64decode(s), "<f4")).
std::string base64_floats(const std::vector<float>& values);

}  // namespace ridge::server
