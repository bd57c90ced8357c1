"""`ridge serve` with a hybrid model (Qwen 3.5 layout, synthetic weights): every sequence
slot keeps its own recurrent state beside its K/V blocks, so continuous batching (mixed
prefill chunks and decodes of several sequences in one step) and preemption (the slot freed,
the sequence recomputed) must leave every greedy output as it is when the request runs
alone; speculative decoding, whose rejected drafts roll each state back to the snapshot of
the last accepted token, must keep the output too; and so must the prefix cache, which
resumes a shared prompt from the recurrent state checkpointed at its last full block.
"""

import concurrent.futures as cf
import pytest

import synthetic_models as sm
from test_server_api import RidgeServer

WORDS = ("Once upon a time there was a little girl named Lily who loved to play in the park with her "
         "dog Max and her friend Tom").split()


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    return sm.write_model(tmp_path_factory.mktemp("hybrid") / "qwen35.gguf", "qwen35")["path"]


@pytest.fixture(scope="module")
def qwen35_repetitive(tmp_path_factory):
    # Small layer weights: the residual stream stays near the input token, so greedy text
    # repeats itself and n-gram lookup drafts often, mostly right and sometimes wrong.
    return sm.write_model(tmp_path_factory.mktemp("hybrid") / "qwen35-rep.gguf", "qwen35", layer_std=0.07)["path"]


def requests(count, base_tokens):
    return [{"prompt": " ".join(WORDS[: 3 + (i * 5) % len(WORDS)]), "max_tokens": base_tokens + (i * 37) % 60,
             "temperature": 0, "ignore_eos": True} for i in range(count)]


def texts(server, bodies, concurrently):
    if not concurrently:
        return [server.complete(b, timeout=300)["choices"][0]["text"] for b in bodies]
    with cf.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: server.complete(b, timeout=300)["choices"][0]["text"], bodies))


def test_batched_greedy_outputs_equal_each_request_alone(qwen35):
    bodies = requests(12, 8)
    # 64-token steps: prompts and decodes of several sequences share a step, each with its state.
    with RidgeServer(qwen35, "--parallel", 6, "--max-batch-tokens", 64, "-c", 256) as server:
        alone = texts(server, bodies, concurrently=False)
        together = texts(server, bodies, concurrently=True)
    assert len(set(alone)) > 1, "the prompts should lead to different outputs"
    for i, (a, t) in enumerate(zip(alone, together)):
        assert t == a, f"request {i} differs when batched with others"


def test_preemption_frees_the_state_and_recomputes_the_same_output(qwen35):
    # Per sequence: 2 DeltaNet layers x (3 x 128 conv floats + 4 heads x 16 x 16) x 4 B, about
    # 11 KiB of state; K/V: 2 attention layers x 2 heads x 32 x 2 x 2 B (f16) = 512 B a token,
    # 8 KiB a 16-token block; every request below needs about 14 blocks, so any two that
    # overlap must preempt.
    bodies = [{"prompt": " ".join(WORDS[: 4 + i]), "max_tokens": 190 + 3 * i, "temperature": 0, "ignore_eos": True}
              for i in range(6)]
    # Two prefix-cache state checkpoints take 22 KiB more: 0.25 MiB holds about 18 blocks.
    with RidgeServer(qwen35, "--parallel", 8, "-c", 256, "--kv-budget", 0.25, "--state-checkpoints", 2,
                     "--max-batch-tokens", 64) as server:
        alone = texts(server, bodies, concurrently=False)
        assert server.metrics()["ridge_preemptions_total"] == 0
        together = texts(server, bodies, concurrently=True)
        after = server.wait_idle()
    assert together == alone
    assert after["ridge_preemptions_total"] > 0


def test_speculative_decoding_rolls_the_state_back_and_keeps_the_output(qwen35_repetitive):
    qwen35 = qwen35_repetitive
    # n-gram drafts on repetitive prompts: the verify chunk keeps the recurrent state after
    # each of its tokens, and a rejected draft restores the last accepted one's. Greedy
    # output must be the plain server's, token for token, with drafts both accepted and
    # rejected (so the rollback ran).
    bodies = [{"prompt": " ".join(WORDS[: 6 + i] * 3), "max_tokens": 48, "temperature": 0, "ignore_eos": True}
              for i in range(4)]
    with RidgeServer(qwen35, "--parallel", 4, "-c", 256) as plain:
        want = texts(plain, bodies, concurrently=False)
    with RidgeServer(qwen35, "--parallel", 4, "-c", 256, "--spec", "ngram", "--draft-fixed", "--draft-max", "4") as spec:
        got = texts(spec, bodies, concurrently=False)
        together = texts(spec, bodies, concurrently=True)
        m = spec.wait_idle()
    assert got == want
    assert together == want
    label = '{proposer="ngram"}'
    drafted = m[f"ridge_spec_decode_num_draft_tokens_total{label}"]
    accepted = m[f"ridge_spec_decode_num_accepted_tokens_total{label}"]
    print(f"drafted {drafted}, accepted {accepted}")
    assert drafted > accepted > 0, (drafted, accepted)


def test_a_shared_prompt_resumes_from_its_state_checkpoint_with_the_same_output(qwen35):
    # A 96-word "system prompt" shared by every request, then each user's own 24. The first
    # request computes it all and checkpoints the state where its K/V blocks end; later ones
    # take those blocks and that state and compute only their own part. Greedy output must be
    # what the server without a prefix cache gives, token for token.
    system = " ".join(WORDS * 4)
    bodies = [{"prompt": f"{system} {' '.join(WORDS[i:] + WORDS[:i])}", "max_tokens": 12, "temperature": 0,
               "ignore_eos": True} for i in range(1, 20, 4)]
    with RidgeServer(qwen35, "--parallel", 2, "-c", 512, "--no-prefix-cache") as plain:
        want = texts(plain, bodies, concurrently=False)
    # 8 checkpoints: room for every prompt's own (the default, parallel + 1, would evict the first).
    with RidgeServer(qwen35, "--parallel", 2, "-c", 512, "--state-checkpoints", 8) as cached:
        first = cached.complete(bodies[0], timeout=300)
        rest = [cached.complete(b, timeout=300) for b in bodies[1:]]
        again = cached.complete(bodies[0], timeout=300)  # the whole prompt once more
        m = cached.wait_idle()
    got = [r["choices"][0]["text"] for r in [first] + rest]
    assert got == want
    assert again["choices"][0]["text"] == want[0]
    assert len(set(want)) > 1, "the users' words should lead to different outputs"
    cached_tokens = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in [first] + rest + [again]]
    prompt_tokens = first["usage"]["prompt_tokens"]
    assert cached_tokens[0] == 0
    # The second request resumes after the shared part if the first one's last full block
    # ended inside it, and otherwise checkpoints the shared part itself: from the third on,
    # every request resumes there (the last 16-token block boundary before the prompts part),
    # and the repeated one from its own last full block.
    assert all(c % 16 == 0 for c in cached_tokens), cached_tokens
    assert all(c == cached_tokens[2] > 0 for c in cached_tokens[2:-1]), cached_tokens
    assert cached_tokens[-1] >= prompt_tokens - 16, (cached_tokens, prompt_tokens)
    assert m["ridge_prefix_cache_hits_total"] > 0
    print(f"prompt {prompt_tokens} tokens, cached {cached_tokens}")
    assert m["ridge_prefix_state_checkpoints_total"] >= len(bodies)  # each prompt's own, and the shared part
