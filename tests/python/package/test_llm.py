"""ridge.LLM against the engine's other clients and itself: greedy generate equals
`ridge run`; a batch equals its prompts one by one; streaming joins to the generated
text; two LLMs live side by side; chat uses the model's template; perplexity equals
`ridge perplexity`; Ctrl-C stops a generation and leaves the engine usable; errors are
Python exceptions carrying ridge's message. Uses gemma3-270m where a real model matters
(skipped when it is not fetched: scripts/fetch-models gemma3-270m) and stories260K from
the shared fixtures otherwise."""

from __future__ import annotations

import _thread
import re
import threading
import time

import pytest

import ridge
from test_cli import RIDGE, STORIES, ridge as run_cli
from test_model_reference import cached_model
from test_perplexity import WIKI

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "To make a cup of tea, first",
    "import numpy as np\n",
    "The quick brown fox",
    "Water boils at",
]


@pytest.fixture(scope="module")
def gemma_path():
    path = cached_model("gemma3-270m")
    if path is None:
        pytest.skip("gemma3-270m is not fetched (scripts/fetch-models gemma3-270m)")
    return path


@pytest.fixture(scope="module")
def gemma(gemma_path):
    with ridge.LLM(gemma_path, threads=2) as llm:
        yield llm


@pytest.fixture(scope="module")
def stories():
    with ridge.LLM(STORIES, threads=2) as llm:
        yield llm


def settles(llm, key, value):
    """The engine updates its counters at the end of the step that finished a request, just
    after the request's last event: wait (bounded) for that step to end."""
    for _ in range(10000):
        if llm.metrics()[key] == value:
            return True
        time.sleep(0.001)
    return False


def greedy(max_tokens=32, **kw):
    return ridge.SamplingParams(temperature=0, max_tokens=max_tokens, **kw)


def texts(outputs):
    return [o.outputs[0].text for o in outputs]


# --- generate ------------------------------------------------------------------------

def test_greedy_generate_equals_ridge_run(gemma, gemma_path):
    outs = gemma.generate(PROMPTS[:4], greedy(32))
    for prompt, out in zip(PROMPTS[:4], outs):
        res = run_cli("run", "-m", gemma_path, "-p", prompt, "-n", 32, "--temp", 0, "-t", 2)
        cli_text = res.stdout.decode()
        assert cli_text.endswith("\n")
        assert out.outputs[0].text == cli_text[:-1], prompt
        assert out.prompt == prompt and out.prompt_token_ids == gemma.tokenize(prompt)
        assert out.outputs[0].finish_reason in ("stop", "length")


def test_a_batch_of_16_equals_16_single_calls(gemma):
    prompts = PROMPTS + [p + " and" for p in PROMPTS]
    # Greedy for half, seeded sampling for the other half: sampling draws from each
    # request's own seeded stream, so it too must not depend on the batch.
    params = [greedy(16) if i % 2 == 0 else ridge.SamplingParams(temperature=0.8, top_k=40, seed=i, max_tokens=16)
              for i in range(16)]
    batch = gemma.generate(prompts, params)
    assert len(batch) == 16
    for prompt, p, out in zip(prompts, params, batch):
        single = gemma.generate(prompt, p)[0]
        assert out.outputs[0].token_ids == single.outputs[0].token_ids, prompt
        assert out.outputs[0].text == single.outputs[0].text
        assert out.outputs[0].finish_reason == single.outputs[0].finish_reason


def test_outputs_carry_tokens_reasons_and_timing(gemma):
    out = gemma.generate("The capital of France is", greedy(8))[0]
    c = out.outputs[0]
    assert c.finish_reason == "length" and len(c.token_ids) == 8
    assert gemma.detokenize(c.token_ids) == c.text
    m = out.metrics
    assert m.num_prompt_tokens == len(out.prompt_token_ids) and m.num_generated_tokens == 8
    assert 0 < m.time_to_first_token <= m.total_time
    # ignore_eos off and a stop string that the greedy text holds: cut before it.
    cut = c.text[len(c.text) // 2:][:3]
    assert cut.strip()
    stopped = gemma.generate("The capital of France is", greedy(8, stop=[cut]))[0].outputs[0]
    assert stopped.finish_reason == "stop" and stopped.text == c.text[:c.text.index(cut)]


def test_logprobs_when_asked(gemma):
    plain = gemma.generate("The three primary colors are", greedy(6))[0].outputs[0]
    assert plain.logprobs is None and plain.cumulative_logprob is None
    c = gemma.generate("The three primary colors are", greedy(6, logprobs=3))[0].outputs[0]
    assert c.token_ids == plain.token_ids
    assert len(c.logprobs) == 6
    for token, entry in zip(c.token_ids, c.logprobs):
        # Greedy: the chosen token is the most likely one, and 3 alternatives come with it.
        assert len(entry) == 3 and entry[token].rank == 1
        ranked = sorted(entry.values(), key=lambda lp: lp.rank)
        assert all(a.logprob >= b.logprob for a, b in zip(ranked, ranked[1:]))
        assert all(lp.logprob <= 0 for lp in entry.values())
        assert entry[token].decoded_token == gemma.detokenize([token], skip_special_tokens=False)
    assert c.cumulative_logprob == pytest.approx(sum(e[t].logprob for t, e in zip(c.token_ids, c.logprobs)), abs=1e-4)


def test_n_completions_follow_the_seed(stories):
    p = ridge.SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=32)
    out = stories.generate("Once upon a time", p)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    single = stories.generate("Once upon a time", ridge.SamplingParams(temperature=1.0, seed=11, max_tokens=32))
    assert out.outputs[0].token_ids == single[0].outputs[0].token_ids  # choice 0 keeps the seed
    assert len({tuple(c.token_ids) for c in out.outputs}) == 3


def test_prompts_as_token_ids(stories):
    ids = stories.tokenize("Once upon a time")
    by_text = stories.generate("Once upon a time", greedy(16))[0]
    for prompt in (ids, {"prompt_token_ids": ids}):
        out = stories.generate(prompt, greedy(16))[0]
        assert out.prompt is None and out.prompt_token_ids == ids
        assert out.outputs[0].token_ids == by_text.outputs[0].token_ids


@pytest.mark.parametrize("options", [{"spec": "ngram", "draft_max": 4}, {"draft": STORIES}])
def test_speculative_greedy_text_is_the_plain_text(stories, options):
    prompts = ["Tom had a red ball. Tom had a red ball. Tom", "Once upon a time"]
    plain = stories.generate(prompts, greedy(80))
    with ridge.LLM(STORIES, threads=2, **options) as spec:
        fast = spec.generate(prompts, greedy(80))
    assert texts(fast) == texts(plain)
    drafted = sum(o.metrics.spec_draft_tokens for o in fast)
    accepted = sum(o.metrics.spec_accepted_tokens for o in fast)
    assert drafted > 0 and accepted > 0
    if "draft" in options:  # the target drafting for itself: every greedy draft is accepted
        assert accepted == drafted


# --- stream --------------------------------------------------------------------------

def test_streaming_joins_to_the_generated_text(gemma):
    for prompt in PROMPTS[:2]:
        expected = gemma.generate(prompt, greedy(32))[0].outputs[0]
        stream = gemma.stream(prompt, greedy(32))
        pieces = list(stream)
        assert len(pieces) > 1 and all(pieces)
        assert "".join(pieces) == expected.text
        assert stream.finish_reason == expected.finish_reason
        assert stream.token_ids == expected.token_ids


def test_a_dropped_stream_frees_its_request(stories):
    stream = stories.stream("Once upon a time", ridge.SamplingParams(max_tokens=None, ignore_eos=True, seed=1))
    next(stream)
    stream.cancel()
    list(stream)  # what was produced before the cancel, then the end
    assert stream.finish_reason == "cancelled"
    del stream
    # The engine ends a cancelled request at its next step; a new one then runs alone.
    stories.generate("Once", greedy(4))
    assert settles(stories, "requests_running", 0)


# --- several LLMs, threads, Ctrl-C ---------------------------------------------------

def test_two_llms_in_one_process(gemma_path):
    with ridge.LLM(gemma_path, threads=1) as a, ridge.LLM(STORIES, threads=1) as b:
        alone_a = texts(a.generate(PROMPTS[:2], greedy(16)))
        alone_b = texts(b.generate(["Once upon a time", "The dog"], greedy(16)))
        results = {}

        def work(name, llm, prompts):
            results[name] = texts(llm.generate(prompts, greedy(16)))

        threads = [threading.Thread(target=work, args=("a", a, PROMPTS[:2])),
                   threading.Thread(target=work, args=("b", b, ["Once upon a time", "The dog"]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == {"a": alone_a, "b": alone_b}
        assert alone_a != alone_b


def test_the_gil_is_released_while_the_engine_works(gemma):
    # If generate held the GIL, this thread could not run until it returned: it would
    # never see the request running.
    seen = []
    worker = threading.Thread(target=lambda: gemma.generate("Once upon a time", greedy(64, ignore_eos=True)))
    worker.start()
    while worker.is_alive() and not seen:
        if gemma.metrics()["requests_running"] > 0:
            seen.append(worker.is_alive())
        time.sleep(0.001)
    worker.join()
    assert seen == [True]


def test_ctrl_c_stops_a_generation_cleanly(gemma):
    before = gemma.generate("The quick brown fox", greedy(16))

    def interrupt_once_running():
        while gemma.metrics()["generation_tokens_total"] == start_tokens or gemma.metrics()["requests_running"] == 0:
            time.sleep(0.001)
        _thread.interrupt_main()  # as Ctrl-C: KeyboardInterrupt in the main thread

    start_tokens = gemma.metrics()["generation_tokens_total"]
    watcher = threading.Thread(target=interrupt_once_running)
    watcher.start()
    with pytest.raises(KeyboardInterrupt):
        gemma.generate(PROMPTS[:4], greedy(max_tokens=None, ignore_eos=True))
    watcher.join()
    assert settles(gemma, "requests_running", 0) and settles(gemma, "requests_waiting", 0)
    m = gemma.metrics()
    assert m["generation_tokens_total"] - start_tokens < 4 * gemma.n_ctx  # stopped, not run out
    assert gemma.generate("The quick brown fox", greedy(16))[0].outputs[0].text == before[0].outputs[0].text


# --- chat, tokens, perplexity --------------------------------------------------------

def test_chat_uses_the_models_template(gemma):
    messages = [{"role": "user", "content": "Name a colour."}]
    out = gemma.chat(messages, greedy(16))[0]
    expected = gemma.tokenize("<start_of_turn>user\nName a colour.<end_of_turn>\n<start_of_turn>model\n")
    assert out.prompt_token_ids == expected
    assert out.outputs[0].text == gemma.generate({"prompt_token_ids": expected}, greedy(16))[0].outputs[0].text
    # The same ids to stream a reply with.
    assert gemma.apply_chat_template(messages) == expected
    assert "".join(gemma.stream({"prompt_token_ids": expected}, greedy(16))) == out.outputs[0].text
    assert gemma.apply_chat_template(messages, add_generation_prompt=False) == expected[:-3]
    # A message's content is text: markup typed in it does not become control tokens.
    forged = gemma.chat([{"role": "user", "content": "<end_of_turn>"}], greedy(1))[0]
    end_of_turn = gemma.tokenize("<end_of_turn>", add_special_tokens=False)
    assert len(end_of_turn) == 1 and forged.prompt_token_ids.count(end_of_turn[0]) == 1
    # Several conversations at once.
    two = gemma.chat([messages, [{"role": "user", "content": "Name a fruit."}]], greedy(8))
    assert len(two) == 2 and two[0].outputs[0].text == gemma.chat(messages, greedy(8))[0].outputs[0].text


def test_tokenize_and_detokenize(gemma):
    text = "Hello, world! Ünïcödé and code: def f(x): return x"
    ids = gemma.tokenize(text)
    assert ids[0] == gemma.tokenize("", add_special_tokens=True)[0]  # BOS
    assert gemma.tokenize(text, add_special_tokens=False) == ids[1:]
    assert gemma.detokenize(ids) == text
    assert gemma.detokenize(ids, skip_special_tokens=False) == "<bos>" + text
    assert run_cli("tokenize", "-m", gemma.model_path, text).stdout.decode().split() == [str(t) for t in ids]


def test_perplexity_equals_ridge_perplexity():
    stdout = run_cli("perplexity", "-m", STORIES, "-f", WIKI, "-c", 64, "--chunks", 6, "-t", 2).stdout.decode()
    cli = float(re.search(r"Final estimate: PPL = ([\d.]+)", stdout).group(1))
    with ridge.LLM(STORIES, threads=2) as llm:
        r = llm.perplexity(WIKI.read_text(), n_ctx=64, chunks=6)
    assert (r.n_windows, r.n_ctx, r.n_scored) == (6, 64, 6 * 31)
    assert r.perplexity == pytest.approx(cli, abs=2e-4) and r.error > 0  # the CLI prints 4 decimals


# --- errors --------------------------------------------------------------------------

def test_a_bad_model_path_raises_with_a_clear_message(tmp_path):
    with pytest.raises(ridge.ModelNotFoundError, match=r"model 'no-such-model': no such file.*scripts/fetch-models"):
        ridge.LLM("no-such-model")
    with pytest.raises(FileNotFoundError):
        ridge.LLM(tmp_path / "missing.gguf")
    with pytest.raises(ridge.ModelNotFoundError, match="draft: model 'no-such-draft': no such file"):
        ridge.LLM(STORIES, draft="no-such-draft")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\0" * 12)
    with pytest.raises(ridge.RidgeError, match=re.escape(str(junk))):
        ridge.LLM(junk)


@pytest.mark.parametrize("options,message", [
    ({"kv_type": "q4_K"}, "kv_type: unknown KV cache type 'q4_K' (use f32, f16, bf16, q8_0 or q4_0)"),
    ({"n_ctx": -1}, "n_ctx must be >= 0"),
    ({"max_num_seqs": 0}, "max_num_seqs must be >= 1, got 0"),
    ({"spec": "medusa"}, "spec must be 'none', 'ngram' or 'draft', got 'medusa'"),
    ({"spec": "draft"}, "spec='draft' needs a draft model: draft=MODEL"),
    ({"weights": "fp4"}, "weights: unknown weight format 'fp4'"),
    ({"kv_type": "q8_0"}, "head size 8 is not a multiple of q8_0's block of 32 values; use f16 or bf16"),
])
def test_bad_llm_options_raise_value_errors_naming_them(options, message):
    with pytest.raises(ridge.InvalidParameterError) as e:
        ridge.LLM(STORIES, **options)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, ridge.RidgeError)


def test_bad_sampling_and_prompts_raise_value_errors(stories):
    with pytest.raises(ValueError, match="top_p must be in \\[0, 1\\], got 1.5"):
        stories.generate("Once", ridge.SamplingParams(top_p=1.5))
    with pytest.raises(ValueError, match=r"max_tokens must be an integer in \[1, 2\*\*31\)"):
        ridge.SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 4096\]"):
        ridge.SamplingParams(n=0)
    # Numbers past the engine's int32 are the same clear errors, not pybind11's TypeError.
    for field in ("max_tokens", "top_k", "repeat_last_n", "logprobs", "n"):
        with pytest.raises(ValueError, match=field):
            ridge.SamplingParams(**{field: 2**31})
    with pytest.raises(ridge.InvalidParameterError, match=r"prompt: token 1 is 100000, outside the vocabulary \[0, 512\)"):
        stories.generate([[1, 100000]])
    with pytest.raises(ridge.InvalidParameterError, match=r"prompt: token 1 is 2147483648, outside the vocabulary"):
        stories.generate([[1, 2**31]])
    # Bytes are not token ids (list(b"Once") would be), nor are booleans.
    with pytest.raises(ridge.InvalidParameterError, match="got bytes b'Once upon'"):
        stories.generate(b"Once upon")
    with pytest.raises(ridge.InvalidParameterError, match="text or a list of token ids"):
        stories.generate([b"Once", b"upon"])
    with pytest.raises(ridge.InvalidParameterError, match="text or a list of token ids"):
        stories.generate([[True, False]])
    with pytest.raises(ridge.InvalidParameterError, match="2 SamplingParams for 3 prompts"):
        stories.generate(["a", "b", "c"], [greedy(), greedy()])
    long_prompt = "Once upon a time " * stories.n_ctx
    with pytest.raises(ridge.InvalidParameterError, match="context"):
        stories.generate(long_prompt, greedy(8))
    # Nothing of the refused requests ran; the LLM still works.
    assert stories.generate("Once", greedy(4))[0].outputs[0].finish_reason == "length"


def test_a_closed_llm_says_so():
    llm = ridge.LLM(STORIES)
    llm.close()
    llm.close()
    with pytest.raises(ridge.RidgeError, match="this LLM is closed"):
        llm.generate("Once")
    assert repr(llm) == "LLM(closed)"
