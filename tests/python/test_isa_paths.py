"""The AMX tile kernels end to end: on each shipped model, a prompt long enough for the
tiles (hundreds of tokens, prefilled in batches) gives the same greedy text and the same
perplexity digits under RIDGE_ISA=amx_int8 as under RIDGE_ISA=avx512_vnni, since both
tables' integer kernels promise the scalar reference's bits and everything else runs the
same code. The runs use an f32 KV cache: an f16 cache's attention runs on the AMX-BF16
tiles under amx_int8 (split bf16, not the f32 steps' bits; its quality is checked in
test_kv_f16.py and tests/kernels/attention_amx_test.cpp). The start-up line names the ISA
each weight type runs with.

On a CPU without AMX (or without AVX-512 VNNI) each test says so and skips; models absent
from the cache are skipped (scripts/fetch-models NAME).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from test_cli import RIDGE
from test_model_reference import cached_model
from test_perplexity import WIKI

MODELS = ["gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
PROMPT = " ".join(f"Item {i}: the {['red', 'green', 'blue'][i % 3]} box holds {i * 7 % 13} stones." for i in range(40))


def run_with_isa(isa: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RIDGE_ISA=isa)
    return subprocess.run([str(RIDGE), *args], capture_output=True, text=True, env=env, timeout=600)


_isas_checked = False


def require_isas(model) -> None:
    """Skips unless this CPU runs both ISAs; the first test asks ridge (with its model), the
    rest of the process reuses the answer, a property of the CPU."""
    global _isas_checked
    if _isas_checked:
        return
    for isa in ("avx512_vnni", "amx_int8"):
        res = run_with_isa(isa, "run", "-m", str(model), "-p", "a", "-n", "1", "--temp", "0")
        if res.returncode != 0 and f"RIDGE_ISA={isa}" in res.stderr:
            pytest.skip(f"skipped: no {isa} on this CPU ({res.stderr.strip().splitlines()[-1]})")
        assert res.returncode == 0, res.stderr
    _isas_checked = True


def model_or_skip(name: str):
    path = cached_model(name)
    if path is None:
        pytest.skip(f"{name} is not in the model cache (scripts/fetch-models {name})")
    return path


@pytest.mark.parametrize("name", MODELS)
def test_amx_generation_equals_avx512(name):
    model = model_or_skip(name)
    require_isas(model)
    outs = {}
    for isa in ("avx512_vnni", "amx_int8"):
        res = run_with_isa(isa, "run", "-m", str(model), "-p", PROMPT, "-n", "24", "--temp", "0", "-t", "2",
                           "--kv-type", "f32")
        assert res.returncode == 0, res.stderr
        kernels = next(line for line in res.stderr.splitlines() if line.startswith("kernels:"))
        # Every quantized type the model has runs on the forced ISA's own kernels.
        for entry in kernels.removeprefix("kernels:").split("(")[0].split(","):
            assert entry.split()[-1] == isa, kernels
        outs[isa] = res.stdout
    assert outs["amx_int8"] == outs["avx512_vnni"]
    assert len(outs["amx_int8"].split()) >= 10  # the continuation, not the prompt


@pytest.mark.parametrize("name", MODELS[:2])
def test_amx_perplexity_digits_equal_avx512(name):
    model = model_or_skip(name)
    require_isas(model)
    finals = {}
    for isa in ("avx512_vnni", "amx_int8"):
        res = run_with_isa(isa, "perplexity", "-m", str(model), "-f", str(WIKI), "-c", "256", "--chunks", "2", "-t", "2",
                           "--kv-type", "f32")
        assert res.returncode == 0, res.stderr
        finals[isa] = [line for line in (res.stdout + res.stderr).splitlines() if "Final estimate" in line]
    assert finals["amx_int8"] and finals["amx_int8"] == finals["avx512_vnni"]


@pytest.mark.parametrize("name", MODELS)
def test_amx_one_token_tile_steps_equal_avx512(name):
    """Steps of 16 tokens (windows of 16, one at a time) run every matrix as a single token
    tile, the path batched decode of 16 sequences takes (the weight rows as tile A), and
    must give the AVX-512 kernels' perplexity digits as well."""
    model = model_or_skip(name)
    require_isas(model)
    finals = {}
    for isa in ("avx512_vnni", "amx_int8"):
        res = run_with_isa(isa, "perplexity", "-m", str(model), "-f", str(WIKI), "-c", "16", "-b", "16", "--chunks", "12",
                           "-t", "2", "--kv-type", "f32")
        assert res.returncode == 0, res.stderr
        finals[isa] = [line for line in (res.stdout + res.stderr).splitlines() if "Final estimate" in line]
    assert finals["amx_int8"] and finals["amx_int8"] == finals["avx512_vnni"]
