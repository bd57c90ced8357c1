"""`ridge serve --spec ngram`: speculative decoding behind the OpenAI API changes no
greedy output (plain and streamed, several choices, with logprobs and stop strings), is
counted in /metrics, and a client that disconnects mid-stream leaves no KV block held.

Uses stories260K (fast) with repetitive prompts, so n-gram lookup drafts often.
"""

import concurrent.futures as cf
import json
import socket
import time

import pytest

from test_server_api import STORIES, RidgeServer, openai_client

PROMPTS = [
    "Tom had a red ball. Tom had a red ball. Tom had a",
    "Lily and Ben went to the park. They played with a ball. Lily and Ben",
    "Once upon a time, there was a big cat. Once upon a time",
    "Sue liked to sing. Every day Sue sang a song. One day Sue",
]


def bodies():
    out = []
    for i, p in enumerate(PROMPTS):
        out.append({"prompt": p, "max_tokens": 40 + 17 * i, "temperature": 0, "ignore_eos": True,
                    "logprobs": 2, "stop": ["park."] if i == 1 else None})
    return [{k: v for k, v in b.items() if v is not None} for b in out]


def completions(server, reqs):
    with cf.ThreadPoolExecutor(len(reqs)) as pool:
        return list(pool.map(lambda b: server.complete(b, timeout=300)["choices"][0], reqs))


def streamed_text(server, body):
    client = openai_client(server)
    chunks = client.completions.create(model="stories", stream=True, prompt=body["prompt"],
                                       max_tokens=body["max_tokens"], temperature=0, extra_body={"ignore_eos": True})
    return "".join(c.choices[0].text for c in chunks if c.choices)


def test_speculative_server_output_is_the_plain_servers():
    reqs = bodies()
    with RidgeServer(STORIES, "--parallel", 4, "-c", 512, "--alias", "stories") as plain:
        want = completions(plain, reqs)
        want_stream = [streamed_text(plain, b) for b in reqs]
        want_n = plain.complete({"prompt": PROMPTS[0], "max_tokens": 30, "n": 3, "temperature": 0.9, "seed": 5})
    with RidgeServer(STORIES, "--parallel", 4, "-c", 512, "--alias", "stories", "--spec", "ngram",
                     "--draft-fixed", "--draft-max", "4") as spec:
        got = completions(spec, reqs)
        got_stream = [streamed_text(spec, b) for b in reqs]
        got_n = spec.complete({"prompt": PROMPTS[0], "max_tokens": 30, "n": 3, "temperature": 0.9, "seed": 5})
        m = spec.wait_idle()
    for i, (g, w) in enumerate(zip(got, want)):
        assert g["text"] == w["text"], f"request {i}"
        assert g["finish_reason"] == w["finish_reason"], f"request {i}"
        assert g["logprobs"]["tokens"] == w["logprobs"]["tokens"], f"request {i}"
        assert g["logprobs"]["token_logprobs"] == pytest.approx(w["logprobs"]["token_logprobs"], abs=0), f"request {i}"
        assert g["logprobs"]["top_logprobs"] == w["logprobs"]["top_logprobs"], f"request {i}"
    assert got_stream == want_stream
    # Sampled choices follow the target's distribution, not the same stream of draws:
    # three choices, each its full length.
    assert len(got_n["choices"]) == 3 and len(want_n["choices"]) == 3
    assert all(c["finish_reason"] in ("length", "stop") for c in got_n["choices"])
    label = '{proposer="ngram"}'
    drafted = m[f"ridge_spec_decode_num_draft_tokens_total{label}"]
    accepted = m[f"ridge_spec_decode_num_accepted_tokens_total{label}"]
    assert drafted > accepted > 50, (drafted, accepted)
    assert m[f"ridge_spec_decode_num_drafts_total{label}"] > 0


def test_a_client_gone_mid_stream_is_cancelled_and_leaves_no_blocks():
    with RidgeServer(STORIES, "--parallel", 2, "-c", 16400, "--alias", "stories", "--spec", "ngram") as server:
        before = server.wait_idle()
        body = json.dumps({"prompt": PROMPTS[0], "max_tokens": 16000, "temperature": 0, "ignore_eos": True,
                           "stream": True}).encode()
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        got = b""
        while got.count(b"data:") < 20:  # well into the story, where lookup drafts
            got += s.recv(4096)
        s.close()
        m = server.wait_idle()
        generated = m["ridge_generation_tokens_total"] - before["ridge_generation_tokens_total"]
        assert generated < 8000, f"the request ran on after its client left ({generated} tokens)"
        assert m['ridge_spec_decode_num_drafts_total{proposer="ngram"}'] > 0
        assert m["ridge_kv_blocks_used"] == 0
        assert server.get("/health")[0] == 200


def spec_counts(m):
    label = '{proposer="ngram"}'
    return (m[f"ridge_spec_decode_num_drafts_total{label}"], m[f"ridge_spec_decode_num_draft_tokens_total{label}"],
            m[f"ridge_spec_decode_num_accepted_tokens_total{label}"])


def sse_chunks(server, path, body):
    status, _, raw = server.request("POST", path, {**body, "stream": True}, timeout=300)
    assert status == 200, raw
    events = [e[len("data: "):] for e in raw.decode().split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_each_response_says_what_speculation_did_for_it():
    """The `speculative` field (docs/server.md): this response's drafts, drafted and
    accepted tokens, which add up to what /metrics counted for the same requests; absent
    when the server runs without speculation."""
    with RidgeServer(STORIES, "--parallel", 2, "-c", 512, "--alias", "stories", "--spec", "ngram",
                     "--draft-fixed", "--draft-max", "4") as server:
        status, _, raw = server.request("GET", "/v1/models")
        assert json.loads(raw)["data"][0]["meta"]["speculative"] == "ngram"

        before = spec_counts(server.wait_idle())
        body = {"prompt": PROMPTS[0], "max_tokens": 60, "temperature": 0, "ignore_eos": True, "n": 2}
        whole = server.complete(body)
        spec = whole["speculative"]
        assert set(spec) == {"proposer", "num_drafts", "num_draft_tokens", "num_accepted_tokens"}
        assert spec["proposer"] == "ngram"
        after = spec_counts(server.wait_idle())
        # Both choices, summed: exactly what the engine counted for this request.
        assert (spec["num_drafts"], spec["num_draft_tokens"], spec["num_accepted_tokens"]) == \
            tuple(a - b for a, b in zip(after, before))
        assert spec["num_draft_tokens"] > spec["num_accepted_tokens"] > 10, spec
        assert spec["num_accepted_tokens"] < whole["usage"]["completion_tokens"]

        # Streamed: on the usage chunk (stream_options.include_usage), nowhere else.
        chat_like = {"prompt": PROMPTS[2], "max_tokens": 50, "temperature": 0, "ignore_eos": True,
                     "stream_options": {"include_usage": True}}
        chunks = sse_chunks(server, "/v1/completions", chat_like)
        with_spec = [c for c in chunks if "speculative" in c]
        assert len(with_spec) == 1 and with_spec[0] is chunks[-1] and chunks[-1]["usage"] is not None
        after_stream = spec_counts(server.wait_idle())
        s = chunks[-1]["speculative"]
        assert (s["num_drafts"], s["num_draft_tokens"], s["num_accepted_tokens"]) == \
            tuple(a - b for a, b in zip(after_stream, after))
        assert s["num_accepted_tokens"] > 0

    with RidgeServer(STORIES, "--parallel", 2, "-c", 512, "--alias", "stories") as plain:
        status, _, raw = plain.request("GET", "/v1/models")
        assert json.loads(raw)["data"][0]["meta"]["speculative"] is None
        assert "speculative" not in plain.complete({"prompt": PROMPTS[0], "max_tokens": 8})
        chunks = sse_chunks(plain, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 8,
                                                       "stream_options": {"include_usage": True}})
        assert chunks[-1]["usage"] is not None and not any("speculative" in c for c in chunks)
