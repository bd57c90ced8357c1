"""`ridge perplexity` against a float64 numpy computation of the same windows.

stories260K (F32 weights and an f32 KV cache, so ridge computes in f32 throughout) on
WikiText-2: the perplexity ridge prints equals the reference forward's over
llama-perplexity's windows (n_ctx tokens, BOS first, the second half scored); the
base-logits file holds the reference's log-probabilities to its uint16 precision; the KL
divergence of the model against itself is 0, and against a noisy copy it is what numpy
computes from the same base file; bad inputs are clear errors and leave no file behind.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import reference_forward as ref  # noqa: E402
from test_cli import FIXTURES, RIDGE, STORIES, copy_stories, expect_error  # noqa: E402

WIKI = FIXTURES / "text" / "wiki.test.raw"
N_CTX, CHUNKS = 64, 5


def run(*args):
    res = subprocess.run([str(RIDGE), *map(str, args)], capture_output=True, timeout=600)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res.stdout.decode(), res.stderr.decode()


def read_base(path: Path):
    """llama.cpp's base-logits file, parsed from its documented layout."""
    raw = path.read_bytes()
    assert raw[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", raw, 8)
    tokens = np.frombuffer(raw, dtype="<i4", count=n_ctx * n_chunk, offset=20)
    nv = 2 * ((n_vocab + 1) // 2) + 4
    scored = n_ctx - 1 - n_ctx // 2
    rows = np.frombuffer(raw, dtype="<u2", offset=20 + 4 * n_ctx * n_chunk).reshape(n_chunk, scored, nv)
    assert rows.size == n_chunk * scored * nv, "file size"
    header = rows[:, :, :4].copy().view("<f4")  # scale, min_log_prob
    log_probs = header[:, :, :1] * rows[:, :, 4:4 + n_vocab].astype(np.float64) + header[:, :, 1:2]
    return n_ctx, n_vocab, n_chunk, tokens.reshape(n_chunk, n_ctx), log_probs, header[:, :, 0]


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def reference_log_probs(model_path: Path, windows: np.ndarray, bos: int) -> np.ndarray:
    """[n_chunk][scored][n_vocab] float64 log-probabilities of the scored positions."""
    model = ref.load(str(model_path))
    out = []
    for w in windows:
        tokens = [bos] + [int(t) for t in w[1:]]
        out.append(log_softmax(model.forward(tokens))[N_CTX // 2:N_CTX - 1])
    return np.array(out)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = tmp_path_factory.mktemp("ppl") / "base.kld"
    stdout, _ = run("perplexity", "-m", STORIES, "-f", WIKI, "-c", N_CTX, "--chunks", CHUNKS, "-b", 256,
                    "--kv-type", "f32", "--kl-divergence-base", path)
    return path, stdout


def test_perplexity_is_the_float64_reference_over_the_same_windows(base):
    path, stdout = base
    n_ctx, n_vocab, n_chunk, windows, stored, scale = read_base(path)
    assert (n_ctx, n_vocab, n_chunk) == (N_CTX, 512, CHUNKS)
    log_probs = reference_log_probs(STORIES, windows, bos=1)
    targets = windows[:, N_CTX // 2 + 1:]
    nll = -np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    want = float(np.exp(nll.mean()))
    got = float(re.search(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", stdout).group(1))
    assert got == pytest.approx(want, rel=2e-4), (got, want)
    # The running estimates are per window, in order: the last is the final one.
    running = [float(x) for x in re.findall(r"\[\d+\]([\d.]+),", stdout)]
    assert len(running) == CHUNKS and running[-1] == pytest.approx(got, abs=1e-4)
    assert running[0] == pytest.approx(float(np.exp(nll[0].mean())), rel=2e-4)
    # Stored log-probs: the reference's to half a quantization step (the stored range is
    # 16 below the top; lower ones are clamped to its floor).
    floor = log_probs.max(axis=-1, keepdims=True) - 16
    visible = log_probs > floor + 1e-3
    err = np.abs(stored - log_probs)[visible]
    assert err.max() < 0.5 * scale.max() + 1e-4


def test_kl_divergence_against_itself_is_zero(base):
    path, _ = base
    stdout, _ = run("perplexity", "-m", STORIES, "--kl-divergence-base", path, "--kl-divergence", "--kv-type", "f32")
    mean_kld = float(re.search(r"Mean    KLD:\s+([-\d.]+)", stdout).group(1))
    assert abs(mean_kld) < 2e-4
    assert float(re.search(r"Same top p:\s+([\d.]+)", stdout).group(1)) == pytest.approx(100.0)
    assert float(re.search(r"Mean PPL\(Q\)/PPL\(base\)\s+:\s+([\d.]+)", stdout).group(1)) == pytest.approx(1.0, abs=1e-3)


def test_a_one_window_base_reads_back(tmp_path):
    # Written with --chunks 1 it holds one window of tokens: reading it back must not ask
    # for the two windows of text a plain run needs.
    path = tmp_path / "one.kld"
    run("perplexity", "-m", STORIES, "-f", WIKI, "-c", 256, "--chunks", 1, "--kv-type", "f32",
        "--kl-divergence-base", path)
    stdout, _ = run("perplexity", "-m", STORIES, "--kl-divergence-base", path, "--kl-divergence", "--kv-type", "f32")
    assert abs(float(re.search(r"Mean    KLD:\s+([-\d.]+)", stdout).group(1))) < 2e-4


def write_noisy_copy(path: Path, scale: float, seed: int):
    rng = np.random.default_rng(seed)
    copy_stories(path, lambda name, data: data if "norm" in name
                 else (data * (1 + scale * rng.standard_normal(data.shape))).astype(np.float32))


def test_kl_divergence_against_a_noisy_copy_matches_numpy(base, tmp_path):
    path, _ = base
    noisy = tmp_path / "noisy.gguf"
    write_noisy_copy(noisy, 0.1, 3)
    stdout, _ = run("perplexity", "-m", noisy, "--kl-divergence-base", path, "--kl-divergence", "--kv-type", "f32")
    _, _, _, windows, stored, _ = read_base(path)
    q = reference_log_probs(noisy, windows, bos=1)
    keep = stored > -16  # llama.cpp's definition sums over base log-probs above -16
    kld = (np.exp(stored) * (stored - q) * keep).sum(axis=-1)
    same_top = (stored.argmax(axis=-1) == q.argmax(axis=-1)).mean()
    got = float(re.search(r"Mean    KLD:\s+([-\d.]+)", stdout).group(1))
    assert got == pytest.approx(float(kld.mean()), rel=2e-3, abs=1e-5)
    assert got > 0.01, "the copy should differ measurably"
    top = float(re.search(r"Same top p:\s+([\d.]+)", stdout).group(1))
    assert top == pytest.approx(100 * same_top, abs=0.5)
    p99 = float(re.search(r"99\.0%   KLD:\s+([-\d.]+)", stdout).group(1))
    sorted_kld = np.sort(kld.ravel())
    assert p99 == pytest.approx(float(np.percentile(sorted_kld, 99)), rel=1e-2)


def test_bad_inputs_are_clear_errors(tmp_path):
    expect_error("perplexity", "-m", STORIES, "-f", "/nonexistent.txt", phrase="cannot open")
    short = tmp_path / "short.txt"
    short.write_text("Once upon a time.")
    expect_error("perplexity", "-m", STORIES, "-f", short, "-c", 64, phrase="needs at least 128")
    expect_error("perplexity", "-m", STORIES, "--kl-divergence", phrase="needs the base file")
    bad = tmp_path / "bad.kld"
    bad.write_bytes(b"not a logits file at all")
    expect_error("perplexity", "-m", STORIES, "--kl-divergence-base", bad, "--kl-divergence",
                 phrase="not a base-logits file")
    truncated = tmp_path / "truncated.kld"
    truncated.write_bytes(b"_logits_" + struct.pack("<iii", 64, 512, 5) + b"\0" * 100)
    expect_error("perplexity", "-m", STORIES, "--kl-divergence-base", truncated, "--kl-divergence",
                 phrase="truncated")
    other_vocab = tmp_path / "other.kld"
    other_vocab.write_bytes(b"_logits_" + struct.pack("<iii", 8, 600, 1) + b"\0" * (8 * 4 + 3 * 604 * 2))
    expect_error("perplexity", "-m", STORIES, "--kl-divergence-base", other_vocab, "--kl-divergence",
                 phrase="over 600 tokens, this model's over 512")
