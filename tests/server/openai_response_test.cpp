// Response, chunk, metrics and page shapes: the fields OpenAI's clients and Prometheus
// read, checked on the text a client would receive.
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <string>

#include "gguf/gguf.h"
#include "server/metrics_text.h"
#include "server/web_assets.h"

namespace ridge::server {
namespace {

using nlohmann::json;

const Tokenizer& stories_tokenizer() {
  static const Tokenizer tok =
      Tokenizer::from_gguf(gguf::File::open(std::string(RIDGE_FIXTURES) + "/models/stories260K.gguf"));
  return tok;
}

// Parses "data: {...}\n\n" back into JSON, checking the framing.
json parse_sse(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_TRUE(event.ends_with("\n\n")) << event;
  return json::parse(event.substr(6, event.size() - 8));
}

TEST(ResponseMeta, IdsArePrefixedAndUnique) {
  ResponseMeta a = make_response_meta(Endpoint::kCompletions, "m");
  ResponseMeta b = make_response_meta(Endpoint::kChatCompletions, "m");
  EXPECT_EQ(a.id.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(b.id.rfind("chatcmpl-", 0), 0u);
  EXPECT_NE(a.id, make_response_meta(Endpoint::kCompletions, "m").id);
  EXPECT_GT(a.created, 1600000000);
}

TEST(ChatStream, ChunksCarryRoleContentFinishAndUsage) {
  const Tokenizer& tok = stories_tokenizer();
  ResponseMeta meta = make_response_meta(Endpoint::kChatCompletions, "stories");
  ApiRequest req;
  req.endpoint = Endpoint::kChatCompletions;
  req.stream = true;
  req.include_usage = true;

  json first = parse_sse(sse_event(role_chunk(meta, 0, true)));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], meta.id);
  EXPECT_EQ(first["model"], "stories");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["usage"].is_null());
  EXPECT_TRUE(first.contains("usage"));

  StreamEvent ev;
  ev.text = "Once";
  ev.tokens = {tok.encode("Once", false)[0]};
  json text = parse_sse(sse_event(text_chunk(meta, 1, ev, tok, req, 0)));
  EXPECT_EQ(text["choices"][0]["index"], 1);
  EXPECT_EQ(text["choices"][0]["delta"]["content"], "Once");
  EXPECT_FALSE(text["choices"][0]["delta"].contains("role"));
  EXPECT_TRUE(text["choices"][0]["finish_reason"].is_null());

  json fin = parse_sse(sse_event(finish_chunk(meta, 0, FinishReason::kLength, true)));
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());

  json usage = parse_sse(sse_event(usage_chunk(meta, {.prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 2})));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 8);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
}

TEST(CompletionResponse, WholeResponseWithLogprobs) {
  const Tokenizer& tok = stories_tokenizer();
  ResponseMeta meta = make_response_meta(Endpoint::kCompletions, "stories");
  ApiRequest req;
  req.logprobs = true;
  req.top_logprobs = 2;
  std::vector<int32_t> ids = tok.encode(" upon a", false);
  ASSERT_GE(ids.size(), 2u);

  ChoiceResult c;
  StreamEvent ev;
  ev.text = " upon a";
  ev.tokens = ids;
  ev.logprobs.assign(ids.size(), -0.5f);
  ev.top_logprobs.assign(ids.size(), {{ids[0], -0.25f}, {ids[1], -2.0f}});
  ev.finished = true;
  ev.finish_reason = FinishReason::kStop;
  ev.prompt_tokens = 4;
  ev.completion_tokens = static_cast<int32_t>(ids.size());
  c.add(ev);
  std::vector<ChoiceResult> choices{c, c};

  json r = response_json(meta, choices, tok, req);
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][1]["index"], 1);
  EXPECT_EQ(r["choices"][0]["text"], " upon a");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const json& lp = r["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), ids.size());
  EXPECT_EQ(lp["tokens"][0], tok.token_to_piece(ids[0]));
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -0.5f);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][0][tok.token_to_piece(ids[0])].get<float>(), -0.25f);
  EXPECT_EQ(lp["text_offset"][1], tok.token_to_piece(ids[0]).size());
  // Two choices share one prompt: it is counted once, completions add up.
  EXPECT_EQ(r["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(r["usage"]["completion_tokens"], 2 * ids.size());
}

TEST(CompletionResponse, TopLogprobsKeepTheMostLikelyFirst) {
  // A JSON object's keys come out in the order written (clients keep it): by probability,
  // as OpenAI sends them, not alphabetically.
  const Tokenizer& tok = stories_tokenizer();
  const int32_t zebra = tok.encode(" z", false).back(), apple = tok.encode(" a", false).back();
  const std::string z_piece(tok.token_to_piece(zebra)), a_piece(tok.token_to_piece(apple));
  ASSERT_GT(z_piece, a_piece);
  ResponseMeta meta = make_response_meta(Endpoint::kCompletions, "m");
  ApiRequest req;
  req.logprobs = true;
  req.top_logprobs = 2;
  StreamEvent ev;
  ev.tokens = {zebra};
  ev.logprobs = {-0.1f};
  ev.top_logprobs = {{{zebra, -0.1f}, {apple, -2.5f}}};
  const std::string text = sse_event(text_chunk(meta, 0, ev, tok, req, 0));
  const size_t top = text.find("\"top_logprobs\"");
  ASSERT_NE(top, std::string::npos) << text;
  const size_t z_at = text.find("\"" + z_piece + "\":", top), a_at = text.find("\"" + a_piece + "\":", top);
  ASSERT_NE(a_at, std::string::npos) << text;
  EXPECT_LT(z_at, a_at) << text;
  // And the object itself leads with its id, as OpenAI's do.
  EXPECT_EQ(text.rfind("data: {\"id\":", 0), 0u) << text;
}

TEST(CompletionResponse, TextOffsetsCountCharactersNotBytes) {
  // Clients index the text with them: "héllo wörld"[7] is 'ö', byte 8 of its UTF-8.
  EXPECT_EQ(text_length("h\xC3\xA9llo w"), 7u);
  // A character split between two pieces is counted once, with the piece that starts it.
  EXPECT_EQ(text_length("\xC3"), 1u);
  EXPECT_EQ(text_length("\xA9llo"), 3u);
  const Tokenizer& tok = stories_tokenizer();
  const std::vector<int32_t> ids = tok.encode("h\xC3\xA9llo w\xC3\xB6rld", false);
  EXPECT_EQ(pieces_length(tok, ids), 12u);  // " héllo wörld": SentencePiece adds the space
  ResponseMeta meta = make_response_meta(Endpoint::kCompletions, "m");
  ApiRequest req;
  req.logprobs = true;
  ChoiceResult c;
  StreamEvent ev;
  ev.tokens = ids;
  ev.logprobs.assign(ids.size(), -0.5f);
  ev.finished = true;
  c.add(ev);
  const json offsets = response_json(meta, {c}, tok, req)["choices"][0]["logprobs"]["text_offset"];
  ASSERT_EQ(offsets.size(), ids.size());
  for (size_t i = 1; i < ids.size(); ++i)
    EXPECT_EQ(offsets[i].get<size_t>(), offsets[i - 1].get<size_t>() + text_length(tok.token_to_piece(ids[i - 1])));
  EXPECT_LT(offsets.back().get<size_t>(), 12u);
}

TEST(ChatResponse, MessageAndChatLogprobs) {
  const Tokenizer& tok = stories_tokenizer();
  ResponseMeta meta = make_response_meta(Endpoint::kChatCompletions, "m");
  ApiRequest req;
  req.endpoint = Endpoint::kChatCompletions;
  req.logprobs = true;
  ChoiceResult c;
  StreamEvent ev;
  ev.text = "Hi";
  ev.tokens = tok.encode("Hi", false);
  ev.logprobs.assign(ev.tokens.size(), -1.0f);
  ev.finished = true;
  ev.finish_reason = FinishReason::kLength;
  c.add(ev);
  json r = response_json(meta, {c}, tok, req);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hi");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), ev.tokens.size());
  EXPECT_EQ(content[0]["token"], tok.token_to_piece(ev.tokens[0]));
  EXPECT_EQ(content[0]["bytes"].size(), tok.token_to_piece(ev.tokens[0]).size());
  EXPECT_TRUE(content[0]["top_logprobs"].empty());
}

TEST(SpeculativeField, OnlyWithAProposerAndSummedOverChoices) {
  const Tokenizer& tok = stories_tokenizer();
  ApiRequest req;
  ChoiceResult c;
  StreamEvent ev;
  ev.text = "Hi";
  ev.spec_steps = 2;
  ev.spec_drafted = 6;
  ev.spec_accepted = 1;
  c.add(ev);
  ev.text = "";
  ev.finished = true;
  ev.spec_steps = 3;  // events carry totals so far: the last one counts
  ev.spec_drafted = 9;
  ev.spec_accepted = 4;
  c.add(ev);

  json plain = response_json(make_response_meta(Endpoint::kCompletions, "m"), {c}, tok, req);
  EXPECT_FALSE(plain.contains("speculative"));
  EXPECT_FALSE(parse_sse(sse_event(usage_chunk(make_response_meta(Endpoint::kChatCompletions, "m"), {})))
                   .contains("speculative"));

  ResponseMeta meta = make_response_meta(Endpoint::kCompletions, "m", SpecMethod::kNgram);
  json r = response_json(meta, {c, c}, tok, req);
  EXPECT_EQ(r["speculative"], json({{"proposer", "ngram"}, {"num_drafts", 6}, {"num_draft_tokens", 18},
                                    {"num_accepted_tokens", 8}}));
  ResponseMeta chat = make_response_meta(Endpoint::kChatCompletions, "m", SpecMethod::kDraftModel);
  json usage = parse_sse(sse_event(usage_chunk(chat, total_usage({c}))));
  EXPECT_EQ(usage["speculative"]["proposer"], "draft");
  EXPECT_EQ(usage["speculative"]["num_accepted_tokens"], 4);
  EXPECT_EQ(usage["speculative"]["num_draft_tokens"], 9);
  EXPECT_EQ(usage["speculative"]["num_drafts"], 3);
}

TEST(Metrics, PrometheusTextWithHelpTypeAndHistograms) {
  EngineMetrics m;
  m.requests_running = 2;
  m.requests_waiting = 1;
  m.kv_blocks_total = 100;
  m.kv_blocks_used = 30;
  m.prefix_cache_queries = 8;
  m.prefix_cache_hits = 6;
  m.preemptions_total = 3;
  m.latency_buckets = {0.01, 0.1, 1};
  m.ttft_counts = {1, 4, 5};
  m.ttft_count = 6;
  m.ttft_sum = 7.5;
  m.itl_counts = {0, 0, 0};
  std::string text = render_metrics(m, {{200, 9}, {400, 2}});
  for (const char* line :
       {"ridge_requests_running 2\n", "ridge_requests_waiting 1\n", "ridge_kv_blocks_used 30\n",
        "ridge_kv_blocks_free 70\n", "ridge_kv_blocks_total 100\n", "ridge_prefix_cache_hit_rate 0.75\n",
        "ridge_prefix_cache_hits_total 6\n", "ridge_preemptions_total 3\n",
        "# TYPE ridge_time_to_first_token_seconds histogram\n",
        "ridge_time_to_first_token_seconds_bucket{le=\"0.1\"} 4\n",
        "ridge_time_to_first_token_seconds_bucket{le=\"+Inf\"} 6\n", "ridge_time_to_first_token_seconds_sum 7.5\n",
        "ridge_inter_token_latency_seconds_count 0\n", "ridge_http_responses_total{code=\"400\"} 2\n",
        "# HELP ridge_generation_tokens_total ", "# TYPE ridge_preemptions_total counter\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << text;
}

TEST(WebAssets, ChatPageIsEmbedded) {
  const WebAsset* page = find_web_asset("/");
  ASSERT_NE(page, nullptr);
  EXPECT_EQ(page->path, "/index.html");
  EXPECT_NE(page->body.find("<html"), std::string_view::npos);
  EXPECT_STREQ(content_type_for(page->path), "text/html; charset=utf-8");
  const WebAsset* js = find_web_asset("/app.js");
  ASSERT_NE(js, nullptr);
  EXPECT_NE(js->body.find("/v1/chat/completions"), std::string_view::npos);
  EXPECT_EQ(find_web_asset("/missing.js"), nullptr);
  // No external resources: the page must work with no network beyond the server.
  for (const WebAsset& a : web_assets()) EXPECT_EQ(a.body.find("https://"), std::string_view::npos) << a.path;
}

}  // namespace
}  // namespace ridge::server
