"""ridge.serve on a local Ray cluster (2 CPUs): two ridge.LLM replicas of gemma3-270m behind
the OpenAI ingress. The official `openai` client gets answers (whole and streamed, both
endpoints, errors); a repeated prefix goes to one replica, whose prefix-cache hits rise
while the other's stay; scaling to one replica while streams run on both drains the one
removed, and every stream still ends with all its tokens."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import urllib.error
import urllib.request

import pytest

from test_model_reference import cached_model

ray = pytest.importorskip("ray", reason="Ray Serve is a test dependency: scripts/requirements-test.txt")
openai = pytest.importorskip("openai")
from ray import serve  # noqa: E402

from ridge.serve import build_app  # noqa: E402
from ridge.serve.affinity import PrefixAffinity  # noqa: E402

MODEL = "gemma3-270m"
SHARED = ("You are the assistant of a small bakery. You answer questions about bread, opening hours and "
          "prices in one short sentence, politely, and never invent products that the bakery does not sell. ") * 2


def app(path, replicas):
    return build_app(path, model_name=MODEL, num_replicas=replicas, threads=1, num_cpus=0.5, n_ctx=512,
                     max_num_seqs=8, graceful_shutdown_timeout_s=60)


@pytest.fixture(scope="module")
def gemma_path():
    path = cached_model(MODEL)
    if path is None:
        pytest.skip(f"{MODEL} is not fetched (scripts/fetch-models {MODEL})")
    return str(path)


@pytest.fixture(scope="module")
def client(gemma_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app(gemma_path, 2), name="ridge", route_prefix="/")
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
    finally:
        serve.shutdown()
        ray.shutdown()


def complete(client, prompt, max_tokens=2):
    raw = client.completions.with_raw_response.create(model=MODEL, prompt=prompt, max_tokens=max_tokens,
                                                      temperature=0)
    return raw.headers, raw.parse()


def unique_prompt():
    return f"{uuid.uuid4().hex} is a code; say it back"


def replica_ids(client):
    """Both replicas' ids, from the replicas that answer prompts sharing nothing."""
    seen = set()
    for _ in range(40):
        seen.add(complete(client, unique_prompt())[0]["x-ridge-replica"])
        if len(seen) == 2:
            return sorted(seen)
    pytest.fail("40 unrelated prompts all went to one replica")


def prompts_on(replicas, target, count):
    """Fresh prompts that the router's rendezvous hashing sends to `target` (prompts this
    short are one routing key, and a fresh prompt has no owner yet)."""
    out = []
    while len(out) < count:
        p = unique_prompt()
        if PrefixAffinity.rendezvous(PrefixAffinity().prefix_keys(p)[0], replicas)[0] == target:
            out.append(p)
    return out


def test_openai_client_gets_answers(client):
    assert [m.id for m in client.models.list().data] == [MODEL]

    out = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert out.choices[0].text and out.choices[0].finish_reason in ("stop", "length")
    assert out.usage.completion_tokens <= 8 and out.usage.prompt_tokens > 3
    assert out.system_fingerprint.startswith("ridge-")

    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}],
                                          max_tokens=8, temperature=0)
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content

    pieces, reasons, usage = [], [], None
    for chunk in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Count to five."}],
                                                max_tokens=12, temperature=0, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            pieces.append(c.delta.content or "")
            reasons.append(c.finish_reason)
    assert "".join(pieces) and reasons[-1] in ("stop", "length") and usage.completion_tokens <= 12

    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="def add(a, b):", max_tokens=10, temperature=0, stream=True, extra_body={"ignore_eos": True}))
    whole = client.completions.create(model=MODEL, prompt="def add(a, b):", max_tokens=10, temperature=0,
                                      extra_body={"ignore_eos": True})
    assert text == whole.choices[0].text and whole.usage.completion_tokens == 10

    with pytest.raises(openai.BadRequestError, match="'top_p' must be in"):
        client.completions.create(model=MODEL, prompt="x", top_p=3)
    with pytest.raises(openai.BadRequestError, match="'messages\\[0\\]'"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "robot", "content": "x"}], stream=True)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4", prompt="x")
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(urllib.request.Request(f"{client.base_url}completions", data=b"{not json",
                                                      headers={"Content-Type": "application/json"}), timeout=60)
    assert bad.value.code == 400 and json.loads(bad.value.read())["error"]["code"] == "invalid_json"


def test_repeated_prefix_goes_to_the_replica_that_cached_it(client):
    headers, _ = complete(client, SHARED + "When do you open?")
    owner = headers["x-ridge-replica"]
    owner_hits = int(headers["x-ridge-prefix-cache-hits"])

    ids = replica_ids(client)
    other = (set(ids) - {owner}).pop()

    def other_hits():  # the other replica's counter, read through a fresh prompt routed to it
        h, _ = complete(client, prompts_on(ids, other, 1)[0])
        assert h["x-ridge-replica"] == other
        return int(h["x-ridge-prefix-cache-hits"])

    before = other_hits()
    for question in ["Do you sell rye bread?", "How much is a baguette?", "Are you open on Sunday?"]:
        h, out = complete(client, SHARED + question)
        assert h["x-ridge-replica"] == owner
        assert out.usage.prompt_tokens_details.cached_tokens >= 32  # the shared prefix's blocks
        assert int(h["x-ridge-prefix-cache-hits"]) >= owner_hits + 2
        owner_hits = int(h["x-ridge-prefix-cache-hits"])
    assert other_hits() == before  # none of the shared-prefix requests touched it
    # Chat turns that share a system prompt meet on one replica too (whichever its hashing gives).
    chats = [client.chat.completions.with_raw_response.create(
        model=MODEL, max_tokens=2, messages=[{"role": "system", "content": SHARED}, {"role": "user", "content": q}])
        for q in ["Hello!", "Do you bake cakes?", "Thanks."]]
    assert len({c.headers["x-ridge-replica"] for c in chats}) == 1
    assert chats[-1].parse().usage.prompt_tokens_details.cached_tokens >= 32
    assert int(chats[-1].headers["x-ridge-prefix-cache-hits"]) > int(chats[0].headers["x-ridge-prefix-cache-hits"])


def test_draining_a_replica_fails_no_request(client, gemma_path):
    max_tokens = 64
    results, errors, ends = {}, [], {}
    started = threading.Barrier(9)

    ids = replica_ids(client)
    # 4 streams on each replica, sent alternately so that the loads stay even (no spill)
    prompts = [p for pair in zip(prompts_on(ids, ids[0], 4), prompts_on(ids, ids[1], 4)) for p in pair]

    def stream(i):
        try:
            replica, text, usage = None, [], None
            chunks = client.completions.create(model=MODEL, prompt=prompts[i], max_tokens=max_tokens,
                                               temperature=0.8, seed=i, stream=True,
                                               stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
            for n, chunk in enumerate(chunks):
                replica = chunk.system_fingerprint
                if n == 0:
                    started.wait(timeout=60)
                text.extend(c.text for c in chunk.choices)
                usage = chunk.usage or usage
            results[i] = (replica, usage.completion_tokens)
            ends[i] = time.monotonic()
        except Exception as e:  # noqa: BLE001 -- every failure is the finding
            errors.append(repr(e))
            started.abort()

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    started.wait(timeout=60)  # all 8 streams have their first tokens
    scaled_at = time.monotonic()
    serve.run(app(gemma_path, 1), name="ridge", route_prefix="/")
    for t in threads:
        t.join(timeout=120)
    assert not errors
    assert sorted(results) == list(range(8))
    assert all(n == max_tokens for _, n in results.values())
    assert [r for r, _ in results.values()].count(f"ridge-{ids[0]}") == 4
    replicas = {r for r, _ in results.values()}
    assert replicas == {f"ridge-{i}" for i in ids}

    for _ in range(120):  # the drained replica stops once its streams are done
        status = serve.status().applications["ridge"].deployments["LLMServer"]
        if sum(status.replica_states.values()) == 1:
            break
        time.sleep(0.5)
    assert sum(status.replica_states.values()) == 1
    kept = client.completions.create(model=MODEL, prompt=unique_prompt(), max_tokens=2).system_fingerprint
    drained = (replicas - {kept}).pop()
    # The removed replica still had streams running when the scale-down began, and they finished.
    assert any(r == drained and ends[i] > scaled_at for i, (r, _) in results.items())
