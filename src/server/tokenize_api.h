// /tokenize and /detokenize in llama-server's shapes: the model's tokenizer over HTTP, so a
// client can count tokens, build token prompts, or see how text splits.
//
//   POST /tokenize   {"content": "Hello", "add_special": false, "parse_special": true, "with_pieces": true}
//                 -> {"tokens": [{"id": 9707, "piece": "Hello"}]}     (or {"tokens": [9707]})
//   POST /detokenize {"tokens": [9707]} -> {"content": "Hello"}
//
// A piece that is not valid UTF-8 on its own (part of a character) is given as the list
// of its byte values, as llama-server does: "piece": [240, 159].
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ridge::server {

struct TokenizeRequest {
  std::string content;
  bool add_special = false;   // BOS/EOS as the vocabulary asks (llama-server's default: off)
  bool parse_special = true;  // special-token text ("<|im_start|>") becomes its id
  bool with_pieces = false;   // each token as {"id", "piece"} instead of a bare id
};

// Throws ApiError(400) naming the field: bad JSON, 'content' missing or not a string, a
// flag that is not a boolean.
TokenizeRequest parse_tokenize_request(std::string_view body);
// {"tokens": [...]}
nlohmann::json tokenize_json(const TokenizeRequest& request, const Tokenizer& tokenizer);

// The ids of a /detokenize body. Throws ApiError(400): bad JSON, 'tokens' missing or not an
// array of integers, or ids outside the vocabulary (the message names them and where).
std::vector<int32_t> parse_detokenize_request(std::string_view body, const Tokenizer& tokenizer);
// {"content": "..."}: the tokens' text, special tokens written out, as llama-server does.
nlohmann::json detokenize_json(const std::vector<int32_t>& tokens, const Tokenizer& tokenizer);

}  // namespace ridge::server
