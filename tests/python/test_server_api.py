"""`ridge serve` through the official `openai` Python client, plus the error contract.

Starts the real binary ($RIDGE_BUILD_DIR/ridge) on a free loopback port: stories260K
(fast, no chat template) for completions and errors, gemma3-270m for chat when it is in
the model cache. RidgeServer here is shared with the other test_server_*.py files.
"""

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

BUILD_DIR = Path(os.environ.get("RIDGE_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
FIXTURES = Path(os.environ.get("RIDGE_FIXTURES", Path(__file__).resolve().parents[3] / "shared" / "fixtures"))
STORIES = FIXTURES / "models" / "stories260K.gguf"
MODEL_CACHE = Path(os.environ.get("RIDGE_MODEL_CACHE", Path.home() / ".cache" / "ridge" / "models"))


def cached_model(name):
    """Path of a model fetched by scripts/fetch-models, or None."""
    found = sorted((MODEL_CACHE / name).glob("*.gguf")) if (MODEL_CACHE / name).is_dir() else []
    return found[0] if found else None


class RidgeServer:
    """A `ridge serve` child process on a free port; stopped (SIGTERM) on exit."""

    def __init__(self, model, *args, start_timeout=120):
        ridge = BUILD_DIR / "ridge"
        if not ridge.exists():
            pytest.skip(f"{ridge} is not built")
        self.log = tempfile.NamedTemporaryFile(prefix="ridge-serve-", suffix=".log", delete=False)
        cmd = [str(ridge), "serve", "-m", str(model), "--host", "127.0.0.1", "--port", "0", *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None
        deadline = time.monotonic() + start_timeout
        try:
            while self.port is None:  # --port 0: the server prints the port it got
                if self.proc.poll() is not None:
                    raise RuntimeError(f"ridge serve exited with {self.proc.returncode}:\n{self.log_text()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ridge serve did not start in {start_timeout} s:\n{self.log_text()}")
                m = re.search(r"listening on http://[\d.]+:(\d+)", self.log_text())
                if m:
                    self.port = int(m.group(1))
                else:
                    time.sleep(0.05)
            while self.get("/health", timeout=5)[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError("ridge serve never became healthy")
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}"

    def log_text(self):
        return Path(self.log.name).read_text(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers, body bytes); never raises on HTTP error statuses."""
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def get(self, path, timeout=60):
        try:
            return self.request("GET", path, timeout=timeout)
        except (urllib.error.URLError, ConnectionError):
            return None, {}, b""

    def post(self, path, body, headers=None, timeout=120):
        status, _, raw = self.request("POST", path, body, headers, timeout)
        return status, json.loads(raw)

    def complete(self, body, timeout=120):
        status, out = self.post("/v1/completions", body, timeout=timeout)
        assert status == 200, out
        return out

    def open_stream(self, path, body, headers=b"", until=b"data: "):
        """Sends a streaming POST on a raw socket (to hang up on later) and waits until `until` arrives."""
        data = json.dumps({**body, "stream": True}).encode()
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        s.sendall(b"POST %s HTTP/1.1\r\nHost: ridge\r\nContent-Type: application/json\r\n%s"
                  b"Content-Length: %d\r\n\r\n" % (path.encode(), headers, len(data)) + data)
        received = b""
        while until not in received:
            chunk = s.recv(65536)
            assert chunk, "server closed the stream early"
            received += chunk
        return s

    def metrics(self):
        status, _, raw = self.request("GET", "/metrics")
        assert status == 200
        values = {}
        for line in raw.decode().splitlines():
            m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) (\S+)$", line)
            if m:
                values[m.group(1)] = float(m.group(2))
        return values

    def wait_idle(self, timeout=30):
        """Waits until no request runs or waits and no KV block is held; returns the metrics."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if m["ridge_requests_running"] == 0 and m["ridge_requests_waiting"] == 0 and m["ridge_kv_blocks_used"] == 0:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"server not idle after {timeout} s: {m}")
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def qwen_server():
    """`ridge serve` on qwen2.5-coder-0.5b (its template renders tools) as "qwen", key sk-test; skips if not fetched."""
    path = cached_model("qwen2.5-coder-0.5b")
    if path is None:
        pytest.skip("qwen2.5-coder-0.5b is not in the model cache (scripts/fetch-models qwen2.5-coder-0.5b)")
    return RidgeServer(path, "--parallel", 2, "-c", 2048, "--alias", "qwen", "--api-key", "sk-test")


def openai_client(server, **kwargs):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=kwargs.pop("api_key", "none"),
                         timeout=120, max_retries=0, **kwargs)


@pytest.fixture(scope="module")
def stories():
    with RidgeServer(STORIES, "--parallel", 4, "-c", 512, "--max-body-bytes", 65536, "--max-prompt-tokens", 300,
                     "--alias", "stories") as server:
        yield server


@pytest.fixture(scope="module")
def gemma():
    path = cached_model("gemma3-270m")
    if path is None:
        pytest.skip("gemma3-270m is not in the model cache (scripts/fetch-models gemma3-270m)")
    with RidgeServer(path, "--parallel", 2, "-c", 1024, "--alias", "gemma3-270m") as server:
        yield server


# ----------------------------------------------------------------- the openai client

def test_openai_completion_and_usage(stories):
    client = openai_client(stories)
    r = client.completions.create(model="stories", prompt="Once upon a time", max_tokens=12, temperature=0)
    assert r.object == "text_completion"
    assert r.model == "stories"
    assert r.id.startswith("cmpl-")
    assert r.created > 0
    assert len(r.choices) == 1 and r.choices[0].text.strip()
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens > 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    assert [m.id for m in client.models.list().data] == ["stories"]


def test_openai_token_prompt_matches_text_prompt(stories):
    client = openai_client(stories)
    text = client.completions.create(model="stories", prompt="Once upon a time", max_tokens=8, temperature=0)
    # The same prompt as token ids (BOS 1 + the SentencePiece pieces of the text).
    logprobs = client.completions.create(model="stories", prompt="Once upon a time", max_tokens=8, temperature=0,
                                         logprobs=2)
    assert logprobs.choices[0].text == text.choices[0].text
    lp = logprobs.choices[0].logprobs
    assert "".join(lp.tokens) == text.choices[0].text
    assert all(x <= 0 for x in lp.token_logprobs)
    # Greedy: the chosen token is the most likely one.
    for tok, top in zip(lp.tokens, lp.top_logprobs):
        assert len(top) == 2 and max(top, key=top.get) == tok
    ids = [int(x) for x in subprocess.run([str(BUILD_DIR / "ridge"), "tokenize", "-m", str(STORIES),
                                           "Once upon a time"], capture_output=True, text=True, timeout=60,
                                          check=True).stdout.split()]
    for prompt in (ids, [ids]):
        r = client.completions.create(model="stories", prompt=prompt, max_tokens=8, temperature=0)
        assert r.usage.prompt_tokens == len(ids)
        assert r.choices[0].text == text.choices[0].text


def test_openai_stop_sequences(stories):
    client = openai_client(stories)
    full = client.completions.create(model="stories", prompt="Once upon a time", max_tokens=40, temperature=0)
    text = full.choices[0].text
    words = [w for w in text.split() if len(w) > 3]
    assert words, text
    stop_word = words[1] if len(words) > 1 else words[0]
    cut = client.completions.create(model="stories", prompt="Once upon a time", max_tokens=40, temperature=0,
                                    stop=[stop_word, "zzzz"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[:text.index(stop_word)]
    assert stop_word not in cut.choices[0].text


def test_openai_seed_reproducibility_and_n(stories):
    client = openai_client(stories)
    kw = dict(model="stories", prompt="The dog", max_tokens=24, temperature=1.0, top_p=0.95)
    a = client.completions.create(seed=1234, **kw)
    b = client.completions.create(seed=1234, **kw)
    c = client.completions.create(seed=99, **kw)
    assert a.choices[0].text == b.choices[0].text
    assert a.choices[0].text != c.choices[0].text
    two = client.completions.create(seed=1234, n=2, **kw)
    assert [ch.index for ch in two.choices] == [0, 1]
    # Choice 0 keeps the seed; choice 1 gets a derived one, the same on every call.
    assert two.choices[0].text == a.choices[0].text
    assert two.choices[1].text != two.choices[0].text
    again = client.completions.create(seed=1234, n=2, **kw)
    assert again.choices[1].text == two.choices[1].text
    assert two.usage.completion_tokens == 48


def test_openai_streaming_completion_with_usage(stories):
    client = openai_client(stories)
    whole = client.completions.create(model="stories", prompt="Lily", max_tokens=16, temperature=0)
    chunks = list(client.completions.create(model="stories", prompt="Lily", max_tokens=16, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert len(chunks) > 3
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    assert len({c.id for c in chunks}) == 1


def test_openai_streaming_n2_interleaves_choices(stories):
    client = openai_client(stories)
    kw = dict(model="stories", prompt="The cat", max_tokens=10, temperature=0.9, seed=77, n=2, logprobs=1)
    whole = client.completions.create(**kw)
    texts, logprobs = ["", ""], [[], []]
    for chunk in client.completions.create(stream=True, **kw):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.logprobs:
                logprobs[choice.index] += choice.logprobs.token_logprobs
    assert texts == [c.text for c in whole.choices]
    assert logprobs == [c.logprobs.token_logprobs for c in whole.choices]


def test_openai_chat(gemma):
    client = openai_client(gemma)
    r = client.chat.completions.create(model="gemma3-270m", max_tokens=16, temperature=0,
                                       messages=[{"role": "user", "content": "What is the capital of France?"}])
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 16
    assert r.usage.prompt_tokens > 10  # the template's turn markers are counted


def test_openai_streaming_chat(gemma):
    client = openai_client(gemma)
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a colour."}]
    whole = client.chat.completions.create(model="gemma3-270m", messages=messages, max_completion_tokens=12,
                                           temperature=0)
    stream = client.chat.completions.create(model="gemma3-270m", messages=messages, max_completion_tokens=12,
                                            temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_openai_chat_logprobs(gemma):
    client = openai_client(gemma)
    r = client.chat.completions.create(model="gemma3-270m", max_tokens=4, temperature=0, logprobs=True,
                                       top_logprobs=3, messages=[{"role": "user", "content": "Hello"}])
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for item in content:
        assert len(item.top_logprobs) == 3
        assert item.top_logprobs[0].logprob == pytest.approx(item.logprob, abs=1e-5)


# ----------------------------------------------------------------- errors

def error_of(server, body, path="/v1/completions", headers=None):
    status, out = server.post(path, body, headers=headers)
    assert set(out) == {"error"}, out
    assert set(out["error"]) == {"message", "type", "param", "code"}, out
    assert out["error"]["message"]
    return status, out["error"]


def still_serving(server):
    assert server.get("/health")[0] == 200
    out = server.complete({"prompt": "Once", "max_tokens": 2, "temperature": 0})
    assert out["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("body,status,param,code", [
    (b"{\"prompt\": \"x\",", 400, None, "invalid_json"),
    (b"\xff\xfe not utf-8", 400, None, "invalid_json"),
    ({"prompt": "x", "max_tokens": "5"}, 400, "max_tokens", "invalid_type"),
    ({"prompt": "x", "temperature": [1]}, 400, "temperature", "invalid_type"),
    ({"prompt": 42}, 400, "prompt", "invalid_type"),
    ({"prompt": "x", "stream": "yes"}, 400, "stream", "invalid_type"),
    ({"prompt": "x", "max_tokens": -5}, 400, "max_tokens", "integer_below_min_value"),
    ({"prompt": "x", "n": 0}, 400, "n", "integer_below_min_value"),
    ({"prompt": "x", "top_p": 3}, 400, "top_p", "invalid_value"),
    ({"prompt": "x", "model": "gpt-4o"}, 404, "model", "model_not_found"),
    ({"prompt": "x", "max_tokens": 600}, 400, "prompt", "context_length_exceeded"),
    ({"prompt": " a" * 400, "max_tokens": 1}, 400, "prompt", "prompt_too_long"),
    ({"prompt": [1, 100000]}, 400, "prompt", "invalid_value"),
    ({"max_tokens": 3}, 400, "prompt", "missing_required_parameter"),
])
def test_bad_requests_get_openai_errors(stories, body, status, param, code):
    got_status, err = error_of(stories, body)
    assert got_status == status
    assert err["param"] == param
    assert err["code"] == code
    assert err["type"] == "invalid_request_error"
    still_serving(stories)


def test_errors_name_the_numbers(stories):
    _, err = error_of(stories, {"prompt": "x", "max_tokens": 600})
    assert "512" in err["message"] and "600" in err["message"]
    _, err = error_of(stories, {"prompt": " a" * 400})
    assert "300" in err["message"]


def test_a_small_kv_budget_is_the_limit_the_server_checks_and_reports():
    # 0.025 MiB of KV at 0.625 KiB/token (f16, the default) holds two 16-token blocks: one
    # request may use 32 tokens although the context is 512. The server must refuse past
    # 32 itself, naming the field, and /v1/models must say 32.
    with RidgeServer(STORIES, "--parallel", 1, "-c", 512, "--kv-budget", 0.025) as server:
        status, _, body = server.get("/v1/models")
        assert status == 200 and json.loads(body)["data"][0]["meta"]["n_ctx"] == 32
        got_status, err = error_of(server, {"prompt": "Once", "max_tokens": 40})
        assert got_status == 400
        assert err["code"] == "context_length_exceeded" and err["param"] == "prompt"
        assert "32" in err["message"]
        out = server.complete({"prompt": "Once", "max_tokens": 29, "temperature": 0})
        assert out["usage"]["completion_tokens"] == 29
        # No max_tokens: a completion gets its default 16, or what is left of the 32.
        prompt = "Once upon a time, there was a little girl named Lily. She loved to play"
        out = server.complete({"prompt": prompt, "temperature": 0, "ignore_eos": True})
        assert 16 < out["usage"]["prompt_tokens"] < 32
        assert out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] == 32


def test_chat_without_template_is_a_clear_400(stories):
    status, err = error_of(stories, {"messages": [{"role": "user", "content": "hi"}]}, "/v1/chat/completions")
    assert status == 400 and err["code"] == "chat_template_missing"
    assert "/v1/completions" in err["message"]
    still_serving(stories)


def test_oversized_body_is_413(stories):
    status, err = error_of(stories, {"prompt": "a" * 70000})
    assert status == 413
    still_serving(stories)


def test_unknown_path_is_404_and_openai_client_raises(stories):
    status, err = error_of(stories, {}, "/v1/audio/speech")  # not served
    assert status == 404
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as e:
        openai_client(stories).completions.create(model="stories", prompt="x", max_tokens=-1)
    assert e.value.status_code == 400
    with pytest.raises(openai.NotFoundError):
        openai_client(stories).completions.create(model="nope", prompt="x", max_tokens=1)
    still_serving(stories)


def test_garbage_on_the_socket_does_not_hurt(stories):
    for junk in (b"\x00\x01\x02 garbage\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{",
                 b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Long: " + b"a" * 100000 + b"\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", stories.port), timeout=10) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            try:
                s.recv(4096)
            except (ConnectionResetError, socket.timeout):
                pass
    still_serving(stories)


def test_api_key():
    with RidgeServer(STORIES, "--api-key", "s3cret", "-c", 256, "--alias", "stories") as server:
        body = {"prompt": "Once", "max_tokens": 2}
        status, err = error_of(server, body)
        assert status == 401 and err["code"] == "missing_api_key" and err["type"] == "authentication_error"
        status, err = error_of(server, body, headers={"Authorization": "Bearer wrong"})
        assert status == 401 and err["code"] == "invalid_api_key"
        status, err = error_of(server, body, headers={"Authorization": "s3cret"})
        assert status == 401
        status, out = server.post("/v1/completions", body, headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and out["usage"]["completion_tokens"] == 2
        assert server.get("/health")[0] == 200  # health and metrics stay open
        assert server.get("/metrics")[0] == 200
        openai = pytest.importorskip("openai")
        with pytest.raises(openai.AuthenticationError):
            openai_client(server, api_key="wrong").completions.create(model="stories", prompt="x", max_tokens=1)
        ok = openai_client(server, api_key="s3cret").completions.create(model="stories", prompt="x", max_tokens=1)
        assert ok.usage.completion_tokens == 1


def test_full_queue_is_429_with_retry_after():
    import concurrent.futures as cf
    with RidgeServer(STORIES, "--parallel", 1, "--max-queue", 1, "-c", 2048, "--alias", "stories") as server:
        body = {"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": True}
        with cf.ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda _: server.request("POST", "/v1/completions", body, timeout=120), range(6)))
        statuses = sorted(r[0] for r in results)
        assert statuses.count(200) >= 1 and statuses.count(429) >= 3, statuses
        for status, headers, raw in results:
            if status == 429:
                assert headers.get("Retry-After") == "1"
                # OpenAI's rate-limit shape (was code "queue_full" with type invalid_request_error,
                # which clients could not tell from a bad request).
                err = json.loads(raw)["error"]
                assert err["code"] == "rate_limit_exceeded" and err["type"] == "requests"
        server.wait_idle()
        still_serving(server)


def test_sigterm_ends_requests_in_flight_with_errors_and_a_clean_exit():
    """Ctrl-C or SIGTERM while generating: requests in flight end at once with an error
    (503 before a response began, an SSE error event after), and the process exits 0. (It
    used to die by the signal whenever the signal landed on one of OpenBLAS's threads.)"""
    import concurrent.futures as cf
    path = cached_model("gemma3-270m")
    if path is None:
        pytest.skip("gemma3-270m is not in the model cache (scripts/fetch-models gemma3-270m)")
    server = RidgeServer(path, "--parallel", 2, "-c", 4096, "--alias", "gemma3-270m")
    try:
        body = {"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True}

        def streamed():
            req = urllib.request.Request(server.base_url + "/v1/completions", method="POST",
                                         data=json.dumps({**body, "stream": True}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()

        with cf.ThreadPoolExecutor(2) as pool:
            whole = pool.submit(server.request, "POST", "/v1/completions", body, None, 120)
            stream = pool.submit(streamed)
            deadline = time.monotonic() + 60
            while server.metrics()["ridge_generation_tokens_total"] < 20:
                assert time.monotonic() < deadline, "no generation within 60 s"
                time.sleep(0.05)
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(timeout=30) == 0, server.log_text()
            status, _, raw = whole.result(timeout=30)
            stream_status, events = stream.result(timeout=30)
        assert status == 503, raw
        assert "shutting down" in json.loads(raw)["error"]["message"]
        assert stream_status == 200
        assert '"error"' in events and "shutting down" in events and "[DONE]" not in events, events[-500:]
        assert "serve: stopped" in server.log_text()
    finally:
        server.stop()
