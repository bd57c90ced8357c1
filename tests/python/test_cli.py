"""The `ridge` command as a user runs it: inspect, tokenize and run, including their
errors (message on stderr, non-zero exit, nothing on stdout)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("RIDGE_BUILD_DIR", ROOT / "build"))
FIXTURES = Path(os.environ.get("RIDGE_FIXTURES", ROOT.parent / "shared" / "fixtures"))
RIDGE = str(BUILD / "ridge")
STORIES = FIXTURES / "models" / "stories260K.gguf"
VOCAB = FIXTURES / "vocab"
MODEL_CACHE = Path(os.environ.get("RIDGE_MODEL_CACHE", Path.home() / ".cache" / "ridge" / "models"))


def ridge(*args, input=None, check=True):
    res = subprocess.run([RIDGE, *map(str, args)], capture_output=True, input=input, timeout=300)
    if check and res.returncode != 0:
        raise AssertionError(f"ridge {' '.join(map(str, args))} failed: {res.stderr.decode(errors='replace')}")
    return res


def expect_error(*args, phrase: str, input=None):
    res = ridge(*args, input=input, check=False)
    assert res.returncode != 0, f"expected failure for {args}"
    err = res.stderr.decode(errors="replace")
    assert phrase in err, f"stderr lacks {phrase!r}: {err}"
    assert res.stdout.strip() == b"" or b"\n" not in res.stdout.strip(), "errors must not print results"
    return err


# --- inspect ---------------------------------------------------------------------------

def test_inspect_json_describes_stories260k():
    out = json.loads(ridge("inspect", STORIES, "--json").stdout)
    assert out["metadata"]["general.architecture"] == "llama"
    assert out["metadata"]["llama.embedding_length"] == 64
    assert out["n_tensors"] == 48
    emb = next(t for t in out["tensors"] if t["name"] == "token_embd.weight")
    assert emb["shape"] == [64, 512] and emb["type"] == "f32" and emb["bytes"] == 64 * 512 * 4
    assert out["bytes_per_param"] == pytest.approx(4.0)
    assert out["n_params"] == sum(int(np.prod(t["shape"])) for t in out["tensors"])


def test_inspect_text_and_vocab_only_file():
    text = ridge("inspect", VOCAB / "ggml-vocab-gpt-2.gguf").stdout.decode()
    assert "tokenizer.ggml.model" in text and "0 tensors" in text
    text = ridge("inspect", STORIES).stdout.decode()
    assert "token_embd.weight" in text and "parameters:" in text and "bytes/param" in text


def test_inspect_errors(tmp_path):
    # A path that is wrong is just that: no model-cache listing or fetch advice for it.
    err = expect_error("inspect", "/nonexistent/model.gguf", phrase="model '/nonexistent/model.gguf': no such file")
    assert "fetch" not in err and "cache" not in err, err
    expect_error("inspect", tmp_path, phrase="is a directory, not a GGUF file")
    # A name that is no cached model may be one to fetch.
    err = expect_error("inspect", "no-such-model", phrase="not in the model cache")
    assert "scripts/fetch-models --list" in err, err
    expect_error("inspect", VOCAB / "ggml-vocab-gpt-2.gguf.inp", phrase="magic")


# --- tokenize --------------------------------------------------------------------------

def read_vectors(name):
    inp = (VOCAB / f"ggml-vocab-{name}.gguf.inp").read_bytes().decode()
    cases = inp.split("\n__ggml_vocab_test__\n")[:-1]
    outs = (VOCAB / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")[: len(cases)]
    return cases, [line.strip() for line in outs]


@pytest.mark.parametrize("name", ["llama-spm", "gpt-2", "deepseek-coder"])
def test_tokenize_matches_fixture_vectors(name, tmp_path):
    cases, expected = read_vectors(name)
    for i, (text, want) in enumerate(zip(cases, expected)):
        f = tmp_path / "case.txt"
        f.write_bytes(text.encode())
        got = ridge("tokenize", "-m", VOCAB / f"ggml-vocab-{name}.gguf", "-f", f, "--no-add-special",
                    "--no-parse-special").stdout.decode().strip()
        assert got == want, f"{name} case {i} {text!r}"


def test_tokenize_pieces_and_special_flags():
    model = VOCAB / "ggml-vocab-llama-spm.gguf"
    ids = ridge("tokenize", "-m", model, "Hello world").stdout.decode().split()
    assert ids[0] == "1", "SentencePiece Llama adds BOS by default"
    plain = ridge("tokenize", "-m", model, "--no-add-special", "Hello world").stdout.decode().split()
    assert plain == ids[1:]
    pieces = ridge("tokenize", "-m", model, "--no-add-special", "--pieces", "Hello world").stdout.decode()
    assert pieces.splitlines()[0].split("->")[1].strip() == "' Hello'"
    parsed = ridge("tokenize", "-m", model, "--no-add-special", "<s>").stdout.decode().split()
    unparsed = ridge("tokenize", "-m", model, "--no-add-special", "--no-parse-special", "<s>").stdout.decode().split()
    assert parsed == ["1"] and unparsed != ["1"]


def test_tokenize_errors():
    expect_error("tokenize", "-m", STORIES, "-f", "/nonexistent.txt", phrase="cannot open")
    expect_error("tokenize", "-m", "no-such-model", "x", phrase="fetch-models")


# --- run -------------------------------------------------------------------------------

def test_run_reproduces_llama2c_greedy_text():
    ref = (FIXTURES / "models" / "stories260K.greedy-ref.txt").read_text()
    text = next(line for line in ref.splitlines() if line.startswith("text: "))[len("text: "):]
    text = text.replace("\\n", "\n")
    res = ridge("run", "-m", STORIES, "-p", "Once upon a time", "-n", "60", "--temp", "0", "--echo")
    assert res.stdout.decode() == text + "\n"
    assert b"tokens/s" in res.stderr and b"kv cache:" in res.stderr


def test_run_same_seed_same_text():
    args = ["run", "-m", STORIES, "-p", "Once upon a time", "-n", "40", "--temp", "1.0", "--seed"]
    a = ridge(*args, "7").stdout
    b = ridge(*args, "7").stdout
    c = ridge(*args, "8").stdout
    assert a == b and a != c


def test_run_past_the_context_stops_where_it_is_full():
    # As llama.cpp's CLI: -n beyond the context generates until it is full, and says so.
    res = ridge("run", "-m", STORIES, "-p", "Once upon a time", "-n", "1000", "-c", "64", "--temp", "0")
    assert b"run: -n 1000 is past the context (64 tokens, 5 of them the prompt): generating at most 59" in res.stderr
    assert re.search(rb"generation:\s+59 tokens", res.stderr), res.stderr
    # A KV budget below one context is the limit then.
    res = ridge("run", "-m", STORIES, "-p", "Once", "-n", "1000", "--kv-budget", "0.05", "--temp", "0")
    assert b"past what the KV cache holds for one request (80 tokens" in res.stderr, res.stderr
    assert b"trained on" not in res.stderr


def test_a_context_past_the_trained_one_is_warned_about():
    res = ridge("run", "-m", STORIES, "-p", "Once", "-n", "4", "-c", "4096", "--temp", "0")
    assert (b"warning: the context of 4096 tokens is longer than the 2048 the model was trained on; "
            b"its output past 2048 tokens may degrade") in res.stderr, res.stderr


def interrupt_after(args, ready, timeout=120, streams=("out", "err")):
    """Starts ridge ARGS, sends SIGINT once `ready` shows in its stdout or stderr (`streams`
    says which), and returns (exit status, stdout, stderr)."""
    import signal
    import threading
    import time
    proc = subprocess.Popen([RIDGE, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = {"out": b"", "err": b""}

    def pump(stream, key):
        for chunk in iter(lambda: stream.read1(4096), b""):
            seen[key] += chunk

    pumps = [threading.Thread(target=pump, args=(proc.stdout, "out")),
             threading.Thread(target=pump, args=(proc.stderr, "err"))]
    for t in pumps:
        t.start()
    deadline = time.monotonic() + timeout
    while not re.search(ready, b"".join(seen[s] for s in streams)):
        assert proc.poll() is None and time.monotonic() < deadline, seen["err"].decode(errors="replace")
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    status = proc.wait(timeout=60)
    for t in pumps:
        t.join()
    return status, seen["out"], seen["err"]


def test_ctrl_c_stops_run_with_its_text_and_timings():
    model = MODEL_CACHE / "gemma3-270m"
    if not model.is_dir():
        pytest.skip("gemma3-270m is not in the model cache")
    status, out, err = interrupt_after(["run", "-m", "gemma3-270m", "-p", "Once upon a time", "-n", 3000,
                                        "-c", 4096, "--temp", 0], rb"\w+ \w+ \w+ \w+", streams=("out",))
    assert status == 130, err
    assert b"ridge: run: interrupted" in err
    generated = int(re.search(rb"generation:\s+(\d+) tokens", err).group(1))
    assert 4 <= generated < 3000, err
    assert len(out.split()) >= 4


def test_ctrl_c_stops_quantize_leaving_no_file(tmp_path):
    model = MODEL_CACHE / "qwen2.5-coder-0.5b"
    if not model.is_dir():
        pytest.skip("qwen2.5-coder-0.5b is not in the model cache")
    out = tmp_path / "q.gguf"
    status, _, err = interrupt_after(["quantize", "qwen2.5-coder-0.5b", out, "Q4_0", "--allow-requantize"],
                                     rb"\[2/")
    assert status == 130, err
    assert b"ridge: quantize: interrupted" in err
    assert list(tmp_path.iterdir()) == []


def test_run_bad_input_fails_before_compute(tmp_path):
    expect_error("run", "-m", STORIES, "-p", "", phrase="prompt is empty")
    expect_error("run", "-m", STORIES, "-p", "Once upon a time " * 200, "-c", "128", phrase="no room to generate in the context of 128")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Once upon \xff\xfe a time")
    expect_error("run", "-m", STORIES, "-f", bad, phrase="not valid UTF-8")
    expect_error("run", "-m", STORIES, "-f", tmp_path, phrase=f"{tmp_path}: is a directory, not a file")
    expect_error("perplexity", "-m", STORIES, "-f", tmp_path, phrase="is a directory, not a file")
    expect_error("run", "-m", VOCAB / "ggml-vocab-gpt-2.gguf", "-p", "hi", phrase="not supported")


def test_run_chat_continues_through_the_prefix_cache():
    gemma = MODEL_CACHE / "gemma3-270m"
    if not gemma.is_dir():
        pytest.skip("gemma3-270m is not in the model cache")
    res = ridge("run", "-m", "gemma3-270m", "--chat", "-n", "24", "--temp", "0",
                input=b"Name three colours of the rainbow.\nAnd two more?\n")
    err = res.stderr.decode()
    turns = re.findall(r"prompt eval:\s+(\d+) tokens.*?(?:; (\d+) more from the prefix cache)?\n", err)
    assert len(turns) == 2, err
    # The second turn computes only its new message (and the last partial block): the first
    # turn's prompt and reply come from the cache.
    assert turns[0][1] == "" and int(turns[1][1]) >= 32, err
    assert int(turns[1][0]) < 32, err


def test_run_speculative_greedy_text_is_the_plain_text():
    args = ["run", "-m", STORIES, "-p", "Tom had a red ball. Tom had a red ball. Tom", "-n", "80", "--temp", "0"]
    plain = ridge(*args)
    spec = ridge(*args, "--spec", "ngram", "--draft-max", "4")
    assert spec.stdout == plain.stdout
    assert b"speculative: " in spec.stderr and b"accepted" in spec.stderr
    assert b"speculative: " not in plain.stderr


def test_run_speculative_flags_are_checked():
    expect_error("run", "-m", STORIES, "-p", "x", "--spec", "magic", phrase="--spec must be none, ngram or draft")
    expect_error("run", "-m", STORIES, "-p", "x", "--spec", "draft", phrase="needs a draft model")
    expect_error("run", "-m", STORIES, "-p", "x", "--spec", "ngram", "--draft-max", "0", phrase="--draft-max")
    expect_error("run", "-m", STORIES, "-p", "x", "--draft", VOCAB / "ggml-vocab-gpt-2.gguf", phrase="not supported")
    gemma = MODEL_CACHE / "gemma3-270m"
    if gemma.is_dir():
        expect_error("run", "-m", "gemma3-270m", "-p", "x", "--draft", STORIES,
                     phrase="the draft model's vocabulary differs from the target's (262144 tokens against 512)")


def copy_stories(path: Path, tensor=None, extra_tensors: dict | None = None, metadata: dict | None = None):
    """Copies stories260K: each tensor through tensor(name, data) -> data, or None to drop
    it; then extra_tensors added, and metadata keys added (float, str or uint32 values)."""
    import gguf

    reader = gguf.GGUFReader(STORIES)
    writer = gguf.GGUFWriter(str(path), "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_array(field.name, field.contents())
        else:
            writer.add_key_value(field.name, field.contents(), vtype)
    for key, value in (metadata or {}).items():
        if isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint32(key, value)
    for t in reader.tensors:
        data = np.array(t.data)
        data = tensor(t.name, data) if tensor else data
        if data is not None:
            writer.add_tensor(t.name, data)
    for name, data in (extra_tensors or {}).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_modified_model(path: Path, drop: str | None = None, reshape: str | None = None):
    """Copies stories260K with one tensor dropped or given a wrong shape."""
    copy_stories(path, lambda name, data: None if name == drop else data[:-1] if name == reshape else data)


def test_run_rejects_models_whose_tensors_do_not_match(tmp_path):
    missing = tmp_path / "missing.gguf"
    write_modified_model(missing, drop="blk.2.ffn_up.weight")
    expect_error("run", "-m", missing, "-p", "Once", phrase="blk.2.ffn_up.weight' is missing")
    wrong = tmp_path / "wrong.gguf"
    write_modified_model(wrong, reshape="blk.0.attn_q.weight")
    expect_error("run", "-m", wrong, "-p", "Once", phrase="blk.0.attn_q.weight' has shape")


# --- bench -----------------------------------------------------------------------------

def test_bench_table_columns_line_up():
    out = ridge("bench", "-m", STORIES, "-p", 16, "-n", 8, "-r", 1, "-t", 1, "--no-bandwidth").stdout.decode()
    rows = [line for line in out.splitlines() if line.startswith("|")]
    assert len(rows) == 4, out
    # Every row is as wide as the header, and its bars fall in the same columns ("±" is one).
    bars = [[i for i, c in enumerate(row) if c == "|"] for row in rows]
    assert all(b == bars[0] for b in bars), "\n".join(rows)


def test_bench_json_reports_each_step_with_and_without_cache():
    for extra, name in (([], "tg12"), (["--no-kv-cache"], "tg12 nocache")):
        out = json.loads(ridge("bench", "-m", STORIES, "-p", "0", "-n", "12", "-r", "2", "-t", "1", "--json",
                               "--no-bandwidth", *extra).stdout)
        assert len(out) == 1 and out[0]["test"] == name and out[0]["n_gen"] == 12
        assert len(out[0]["step_ns"]) == 12 and all(ns > 0 for ns in out[0]["step_ns"])
        assert len(out[0]["samples_ns"]) == 2 and out[0]["avg_ts"] > 0
        assert ("bytes_per_token" in out[0]) == (not extra), "no roofline figure without the cache"
    expect_error("bench", "-m", STORIES, "--no-kv-cache", "--batch", "4", phrase="drop --batch")


def bench_json_with_isa(isa: str | None, *args):
    env = dict(os.environ)
    env.pop("RIDGE_ISA", None)
    if isa is not None:
        env["RIDGE_ISA"] = isa
    return subprocess.run([RIDGE, "bench", "-m", str(STORIES), *map(str, args)], capture_output=True, env=env,
                          timeout=300)


def test_bench_reports_kernels_and_compute_roofline_and_ridge_isa_forces_scalar():
    args = ("-p", "16", "-n", "4", "--batch", "2", "-r", "1", "-t", "1", "--json", "--no-bandwidth")
    res = bench_json_with_isa(None, *args)
    assert res.returncode == 0, res.stderr
    rows = {r["test"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {"pp16", "tg4", "tg4 x2"}, rows.keys()
    # stories260K is all F32: the F32 entry (AVX2 on every vector ISA), counted against the f32 peak.
    for r in rows.values():
        assert r["kernels"] == {"f32": "scalar" if r["isa"] == "scalar" else "avx2"}, r["kernels"]
    for name in ("pp16", "tg4 x2"):
        r = rows[name]
        assert r["int8_ops_per_token"] == 0 and r["f32_ops_per_token"] > 0
        if r["isa"] != "scalar":
            assert r["compute_pct"] == pytest.approx(
                100 * r["f32_ops_per_token"] * r["avg_ts"] / r["f32_peak_flops_per_s"], rel=1e-9)
    # The prompt's logits come once, a decoded token's every time: more ops per token.
    assert rows["tg4 x2"]["f32_ops_per_token"] > rows["pp16"]["f32_ops_per_token"]
    assert "compute_pct" not in rows["tg4"], "single-sequence decode is memory-bound: no compute figure"

    forced = bench_json_with_isa("scalar", *args)
    assert forced.returncode == 0, forced.stderr
    for r in json.loads(forced.stdout):
        assert r["isa"] == "scalar" and r["kernels"] == {"f32": "scalar"}
        assert "compute_pct" not in r, "the scalar ISA has no peak to compare with"
    bad = bench_json_with_isa("avx9000", *args)
    assert bad.returncode != 0 and bad.stdout.strip() == b""
    assert b"RIDGE_ISA=avx9000: not an ISA" in bad.stderr, bad.stderr


def test_bench_at_depth_runs_after_a_context_and_counts_its_kv_bytes(tmp_path):
    out = json.loads(ridge("bench", "-m", STORIES, "-p", "32", "-n", "8", "-d", "0,200", "-r", "2", "-t", "1", "--json",
                           "--no-bandwidth").stdout)
    rows = {r["test"]: r for r in out}
    assert set(rows) == {"pp32", "pp32 @ d200", "tg8", "tg8 @ d200"}, rows.keys()
    assert rows["tg8 @ d200"]["n_depth"] == 200 and rows["tg8"]["n_depth"] == 0
    assert len(rows["tg8 @ d200"]["step_ns"]) == 8, "the prefill's token is not a timed step"
    # stories260K: 5 layers x 4 KV heads x 8 dims x K and V x 2 bytes (f16) = 640 bytes per
    # visible position, 200 more of them at depth 200.
    extra = rows["tg8 @ d200"]["bytes_per_token"] - rows["tg8"]["bytes_per_token"]
    assert extra == pytest.approx(200 * 640, rel=1e-9), extra
    # A hybrid (synthetic qwen35: 2 DeltaNet and 2 attention layers of 2 KV heads x 32): only
    # the attention layers' K/V grow with depth, 2 x 2 x 32 x 2 x 2 bytes = 512 a position.
    import synthetic_models as sm
    hybrid = sm.write_model(tmp_path / "qwen35.gguf", "qwen35")["path"]
    out = json.loads(ridge("bench", "-m", hybrid, "-p", "0", "-n", "4", "-d", "0,200", "-r", "1", "-t", "1", "--json",
                           "--no-bandwidth").stdout)
    rows = {r["test"]: r for r in out}
    extra = rows["tg4 @ d200"]["bytes_per_token"] - rows["tg4"]["bytes_per_token"]
    assert extra == pytest.approx(200 * 512, rel=1e-9), extra
    expect_error("bench", "-m", STORIES, "-d", "64", "--no-kv-cache", phrase="-d puts a context in the cache first")
    expect_error("bench", "-m", STORIES, "-d", "-5", phrase="-d values must be >= 0")


def test_bench_speculative_rows_beside_plain_and_spec_sim_reads_them(tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Tom had a red ball. Tom had a red ball. Tom had a red ball. Tom")
    out = json.loads(ridge("bench", "-m", STORIES, "-f", prompt, "-p", "0", "-n", "32", "-r", "2", "-t", "1",
                           "--json", "--no-bandwidth", "--spec", "ngram", "--draft-fixed", "--draft-max", "4").stdout)
    assert [r["test"] for r in out] == ["tg32", "tg32 ngram"]
    plain, spec = out
    assert "spec_method" not in plain and spec["spec_method"] == "ngram"
    assert spec["spec_draft_tokens"] >= spec["spec_accepted_tokens"] > 0
    assert 0 < spec["spec_alpha"] <= 1 and 0 < spec["spec_mean_draft"] <= 4
    assert spec["spec_tokens_per_step"] == pytest.approx(
        (spec["spec_accepted_tokens"] + spec["spec_verify_steps"]) / spec["spec_verify_steps"])
    assert spec["spec_speedup"] == pytest.approx(spec["avg_ts"] / plain["avg_ts"])
    assert len(spec["step_ns"]) == 32

    run = tmp_path / "run.json"
    run.write_text(json.dumps(out))
    measured = json.loads(ridge("spec-sim", "--measured", run, "--json", "-n", "4000").stdout)["measured"]
    assert len(measured) == 1
    m = measured[0]
    a, g = spec["spec_alpha"], spec["spec_mean_draft"]
    assert m["formula"] == pytest.approx((1 - a ** (g + 1)) / (1 - a) if a < 1 else g + 1)
    assert m["tokens_per_pass"] == pytest.approx(spec["spec_tokens_per_step"])
    assert m["simulated"] == pytest.approx((1 - a ** (round(g) + 1)) / (1 - a) if a < 1 else round(g) + 1,
                                           abs=6 * m["simulated_stderr"] + 1e-9)

    plain_only = tmp_path / "plain.json"
    plain_only.write_text(json.dumps([plain]))
    expect_error("spec-sim", "--measured", plain_only, phrase="no speculative rows")
    expect_error("bench", "-m", STORIES, "--no-kv-cache", "--spec", "ngram", phrase="drop --spec")
