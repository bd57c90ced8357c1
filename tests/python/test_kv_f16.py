"""The f16 KV cache (`--kv-type f16`, the default) against the f32 one, end to end
through the CLI: half the bytes per token in every figure a user sees (the start-up
line, bench's KV bytes), a mean KL divergence below 1e-4 where the cache is the only
difference, and a clear error for a type ridge cannot store. (The same greedy text is
checked through the Python package: tests/python/package/test_kv_types.py.)

Where the cache is the only difference: stories260K has F32 weights, so its matmuls run
in f32. The shipped Q4_K_M models multiply with 8-bit activations, and on them any change
to K/V, f16 rounding or a relative 1e-7, re-rolls the rounding of activations
downstream: mean KLD about 1.5e-3 (qwen2.5-coder-0.5b) and 5e-3 (gemma3-270m) whatever
the change, and greedy text can part at a near tie. So on those models this file checks
the CLI with bounds of that size, and tests/engine/kv_f16_real_models_test.cpp checks
them with f32 matmuls against the strict criteria (same 32 greedy tokens, KLD < 1e-4).
Models absent from the cache are skipped (scripts/fetch-models gemma3-270m
qwen2.5-coder-0.5b).
"""

from __future__ import annotations

import json
import re

import pytest

from test_cli import STORIES, expect_error, ridge
from test_model_reference import cached_model
from test_perplexity import WIKI

SHIPPED = ["gemma3-270m", "qwen2.5-coder-0.5b"]
KV_LINE = re.compile(r"kv cache: .*?, ([\d.]+) (B|KiB)/token, .*\((f16|f32)\)")


def model_path(name: str):
    if name == "stories260K":
        return STORIES
    path = cached_model(name)
    if path is None:
        pytest.skip(f"{name} is not in the model cache (scripts/fetch-models {name})")
    return path


def generate(model, prompt: str, kv_type: str):
    res = ridge("run", "-m", model, "-p", prompt, "-n", 32, "--temp", 0, "-t", 2, "--kv-type", kv_type)
    line = KV_LINE.search(res.stderr.decode())
    assert line is not None and line.group(3) == kv_type, res.stderr.decode()
    return res.stdout.decode(), float(line.group(1)) * (1024 if line.group(2) == "KiB" else 1)


def kld_f16_against_f32(model, tmp_path, n_ctx: int, chunks: int):
    base = tmp_path / "f32.kld"
    res = ridge("perplexity", "-m", model, "-f", WIKI, "-c", n_ctx, "--chunks", chunks, "-t", 2, "--kv-type", "f32",
                "--kl-divergence-base", base)
    assert "(f32)" in res.stderr.decode()
    res = ridge("perplexity", "-m", model, "--kl-divergence-base", base, "--kl-divergence", "-t", 2)
    assert "(f16)" in res.stderr.decode(), "f16 is the default"
    stdout = res.stdout.decode()
    kld = float(re.search(r"Mean    KLD:\s+([-\d.e]+)", stdout).group(1))
    same_top = float(re.search(r"Same top p:\s+([\d.]+)", stdout).group(1))
    print(f"{model}: f16 KV cache vs f32, mean KLD {kld:.3g}, same top token {same_top:.2f}%")
    return kld, same_top


@pytest.mark.parametrize("name", ["stories260K", *SHIPPED])
def test_the_f16_cache_takes_half_the_bytes_per_token(name):
    model = model_path(name)
    _, bytes16 = generate(model, "Once upon a time", "f16")
    _, bytes32 = generate(model, "Once upon a time", "f32")
    # Exact in the C++ tests; here to the line's one decimal (1280 B shows as 1.2 KiB).
    assert bytes32 == pytest.approx(2 * bytes16, abs=0.06 * 1024), (bytes16, bytes32)


def test_f16_cache_mean_kld_is_below_1e4_with_f32_matmuls(tmp_path):
    kld, same_top = kld_f16_against_f32(STORIES, tmp_path, 256, 4)
    assert abs(kld) < 1e-4 and same_top > 99.0, (kld, same_top)


@pytest.mark.parametrize("name", SHIPPED)
def test_f16_cache_on_the_shipped_models_stays_within_the_activation_rounding(name, tmp_path):
    # The bound is the noise floor described above (a perturbation of 1e-7 costs ~5e-3
    # on gemma3-270m), with room; a cache read wrongly costs orders of magnitude more.
    kld, same_top = kld_f16_against_f32(model_path(name), tmp_path, 512, 3)
    assert abs(kld) < 2e-2 and same_top > 90.0, (kld, same_top)


def test_bench_counts_the_kv_types_bytes():
    # stories260K: 5 layers x 2 (K, V) x 4 KV heads x 8; tg4 reads 1, 2, 3, 4 positions,
    # 2.5 on average: 1600 bytes a token in f16, 3200 in f32, on top of the same weights.
    def bench(kv_type):
        out = json.loads(ridge("bench", "-m", STORIES, "-p", 0, "-n", 4, "-r", 1, "-t", 1, "--no-bandwidth", "--json",
                               "--kv-type", kv_type).stdout)
        assert out[0]["type_k"] == out[0]["type_v"] == kv_type
        return out[0]["bytes_per_token"]

    assert bench("f32") - bench("f16") == pytest.approx(5 * 2 * 4 * 8 * 2 * 2.5)


def test_an_unknown_kv_type_is_a_clear_error():
    for command, args in [("run", ["-p", "Once"]), ("bench", ["-p", 0, "-n", 1]), ("perplexity", ["-f", WIKI])]:
        expect_error(command, "-m", STORIES, *args, "--kv-type", "q4_K",
                     phrase="--kv-type: unknown KV cache type 'q4_K' (use f32, f16, bf16, q8_0 or q4_0)")
    expect_error("serve", "-m", STORIES, "--port", 0, "--kv-type", "f8", phrase="(use f32, f16, bf16, q8_0 or q4_0)")


def test_a_kv_type_the_model_cannot_use_is_a_clear_error():
    # stories260K's heads of 8 values do not fill q8_0's blocks of 32.
    for command, args in [("run", ["-p", "Once"]), ("serve", ["--port", 0])]:
        expect_error(command, "-m", STORIES, *args, "--kv-type", "q8_0",
                     phrase="head size 8 is not a multiple of q8_0's block of 32 values; use f16 or bf16")
