#include "server/tokenize_api.h"

#include <limits>

#include "server/api_error.h"
#include "server/json_fields.h"
#include "tokenizer/unicode.h"

namespace ridge::server {

using nlohmann::json;

namespace {

// How many bad ids an error message lists before "and N more".
constexpr size_t kMaxNamedIds = 8;

}  // namespace

TokenizeRequest parse_tokenize_request(std::string_view body_text) {
  const json body = parse_json_body(body_text);
  TokenizeRequest r;
  const json* content = field(body, "content");
  if (content == nullptr)
    throw ApiError(400, "Missing required parameter: 'content'.", "content", "missing_required_parameter");
  r.content = get_string(*content, "content");
  if (const json* v = field(body, "add_special")) r.add_special = get_bool(*v, "add_special");
  if (const json* v = field(body, "parse_special")) r.parse_special = get_bool(*v, "parse_special");
  if (const json* v = field(body, "with_pieces")) r.with_pieces = get_bool(*v, "with_pieces");
  return r;
}

json tokenize_json(const TokenizeRequest& request, const Tokenizer& tokenizer) {
  const std::vector<int32_t> ids = tokenizer.encode(request.content, request.add_special, request.parse_special);
  if (!request.with_pieces) return {{"tokens", ids}};
  json tokens = json::array();
  for (int32_t id : ids) {
    // Special tokens print as their text, as llama-server's pieces do.
    const std::string_view piece = tokenizer.token_to_piece(id, /*render_special=*/true);
    json piece_json;
    if (unicode::is_valid_utf8(piece)) {
      piece_json = std::string(piece);
    } else {
      piece_json = json::array();
      for (unsigned char byte : piece) piece_json.push_back(static_cast<int>(byte));
    }
    tokens.push_back({{"id", id}, {"piece", std::move(piece_json)}});
  }
  return {{"tokens", std::move(tokens)}};
}

std::vector<int32_t> parse_detokenize_request(std::string_view body_text, const Tokenizer& tokenizer) {
  const json body = parse_json_body(body_text);
  const json* tokens = field(body, "tokens");
  if (tokens == nullptr)
    throw ApiError(400, "Missing required parameter: 'tokens'.", "tokens", "missing_required_parameter");
  if (!tokens->is_array()) wrong_type("tokens", "an array of token ids", *tokens);
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  std::string bad;
  size_t n_bad = 0;
  const int64_t n_vocab = tokenizer.n_vocab();
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::string name = str_cat("tokens[", i, "]");
    const int64_t id = get_integer((*tokens)[i], name, std::numeric_limits<int64_t>::min() / 2,
                                   std::numeric_limits<int64_t>::max() / 2);
    if (id < 0 || id >= n_vocab) {
      if (n_bad++ < kMaxNamedIds) bad += str_cat(bad.empty() ? "" : ", ", name, " = ", id);
      continue;
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  if (n_bad > 0) {
    if (n_bad > kMaxNamedIds) bad += str_cat(" and ", n_bad - kMaxNamedIds, " more");
    throw ApiError(400, str_cat("Invalid 'tokens': ", n_bad, n_bad == 1 ? " id is" : " ids are",
                                " outside the vocabulary (0 .. ", n_vocab - 1, "): ", bad, "."),
                   "tokens", "invalid_value");
  }
  return ids;
}

json detokenize_json(const std::vector<int32_t>& tokens, const Tokenizer& tokenizer) {
  DecodeOptions options;
  options.render_special = true;
  return {{"content", tokenizer.decode(tokens, options)}};
}

}  // namespace ridge::server
