"""`ridge serve` with a hybrid model (Qwen 3.5 layout, synthetic weights): every sequence
slot keeps its own recurrent state beside its K/V blocks, so continuous batching (mixed
prefill chunks and decodes of several sequences in one step) and preemption (the slot freed,
the sequence recomputed) must leave every greedy output as it is when the request runs
alone; and speculative decoding, whose rejected drafts roll each state back to the
snapshot of the last accepted token, must keep the output too.
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
    # 8 KiB a 16-token block. 0.2 MiB holds 8 states and about 14 blocks, and every request
    # below needs about 14: any two that overlap must preempt.
    bodies = [{"prompt": " ".join(WORDS[: 4 + i]), "max_tokens": 190 + 3 * i, "temperature": 0, "ignore_eos": True}
              for i in range(6)]
    with RidgeServer(qwen35, "--parallel", 8, "-c", 256, "--kv-budget", 0.2, "--max-batch-tokens", 64) as server:
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
