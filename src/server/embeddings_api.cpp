#include "server/embeddings_api.h"

#include <bit>
#include <cstring>

#include "server/api_error.h"
#include "server/json_fields.h"

namespace ridge::server {

using nlohmann::json;

namespace {

[[noreturn]] void invalid_input(const std::string& name, const std::string& why) {
  throw ApiError(400, str_cat("Invalid '", name, "': ", why), "input", "invalid_value");
}

EmbeddingInput parse_one(const json& v, const std::string& name) {
  EmbeddingInput in;
  if (v.is_string()) {
    in.text = v.get<std::string>();
    if (in.text.empty()) invalid_input(name, "an input string must not be empty.");
  } else if (v.is_array()) {
    if (v.empty()) invalid_input(name, "a token list must not be empty.");
    in.tokens = get_token_ids(v, name);
    in.is_tokens = true;
  } else {
    wrong_type(name, "a string or an array of token ids", v);
  }
  return in;
}

}  // namespace

EmbeddingsRequest parse_embeddings_request(std::string_view body_text) {
  const json body = parse_json_body(body_text);
  EmbeddingsRequest r;
  if (const json* v = field(body, "model")) r.model = get_string(*v, "model");
  const json* input = field(body, "input");
  if (input == nullptr)
    throw ApiError(400, "Missing required parameter: 'input'.", "input", "missing_required_parameter");
  if (input->is_array() && input->empty()) invalid_input("input", "the list of inputs must not be empty.");
  if (input->is_string() || is_token_array(*input)) {
    r.inputs.push_back(parse_one(*input, "input"));  // one text, or one list of ids
  } else if (input->is_array()) {
    if (input->size() > kMaxEmbeddingInputs)
      invalid_input("input", str_cat("at most ", kMaxEmbeddingInputs, " inputs per request, got ", input->size(), "."));
    for (size_t i = 0; i < input->size(); ++i) r.inputs.push_back(parse_one((*input)[i], str_cat("input[", i, "]")));
  } else {
    wrong_type("input", "a string, an array of strings, an array of token ids or an array of such arrays", *input);
  }
  if (const json* v = field(body, "encoding_format")) {
    const std::string format = get_string(*v, "encoding_format");
    if (format != "float" && format != "base64")
      throw ApiError(400, str_cat("Invalid 'encoding_format': expected 'float' or 'base64', but got '", format,
                                  "' instead."),
                     "encoding_format", "invalid_value");
    r.base64 = format == "base64";
  }
  if (const json* v = field(body, "dimensions")) r.dimensions = get_integer(*v, "dimensions", 1, 1 << 30);
  return r;
}

std::vector<std::vector<int32_t>> embedding_prompts(const EmbeddingsRequest& request, const Tokenizer& tokenizer,
                                                    int32_t n_embd, const PromptLimits& limits) {
  if (request.dimensions && *request.dimensions != n_embd)
    throw ApiError(400, str_cat("Invalid 'dimensions': this model's embeddings have ", n_embd,
                                " dimensions and cannot be shortened; got ", *request.dimensions, "."),
                   "dimensions", "invalid_value");
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(request.inputs.size());
  const bool many = request.inputs.size() > 1;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const EmbeddingInput& in = request.inputs[i];
    const std::string name = many ? str_cat("input[", i, "]") : std::string("input");
    std::vector<int32_t> prompt;
    if (in.is_tokens) {
      for (size_t k = 0; k < in.tokens.size(); ++k)
        if (in.tokens[k] >= tokenizer.n_vocab())
          invalid_input(str_cat(name, "[", k, "]"), str_cat("token id ", in.tokens[k], " is outside the vocabulary (0 .. ",
                                                            tokenizer.n_vocab() - 1, ")."));
      prompt = in.tokens;
    } else {
      prompt = tokenizer.encode(in.text, /*add_special=*/true, /*parse_special=*/true);
      if (prompt.empty()) invalid_input(name, "the text gives no tokens.");
    }
    const auto n = static_cast<int64_t>(prompt.size());
    if (limits.max_prompt_tokens > 0 && n > limits.max_prompt_tokens)
      throw ApiError(400, str_cat("'", name, "' has ", n, " tokens, over this server's limit of ",
                                  limits.max_prompt_tokens, " prompt tokens (--max-prompt-tokens)."),
                     "input", "prompt_too_long");
    if (n > limits.n_ctx)
      throw ApiError(400, str_cat("This model's maximum context length is ", limits.n_ctx, " tokens, however '", name,
                                  "' has ", n, " tokens. Please reduce the length of the input."),
                     "input", "context_length_exceeded");
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

std::string base64_floats(const std::vector<float>& values) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes(values.size() * sizeof(float));
  for (size_t i = 0; i < values.size(); ++i) {
    const auto bits = std::bit_cast<uint32_t>(values[i]);
    for (size_t b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<unsigned char>(bits >> (8 * b));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    const uint32_t triple = (uint32_t{bytes[i]} << 16) | (n > 1 ? uint32_t{bytes[i + 1]} << 8 : 0) |
                            (n > 2 ? uint32_t{bytes[i + 2]} : 0);
    out += kAlphabet[(triple >> 18) & 63];
    out += kAlphabet[(triple >> 12) & 63];
    out += n > 1 ? kAlphabet[(triple >> 6) & 63] : '=';
    out += n > 2 ? kAlphabet[triple & 63] : '=';
  }
  return out;
}

json embeddings_json(const EmbeddingsRequest& request, const std::string& model_name,
                     const std::vector<std::vector<float>>& vectors, int64_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    data.push_back({{"object", "embedding"},
                    {"index", i},
                    {"embedding", request.base64 ? json(base64_floats(vectors[i])) : json(vectors[i])}});
  }
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model_name},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace ridge::server
