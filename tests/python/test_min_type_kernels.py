"""The Q4_1/Q5_1 integer kernels end to end: qwen2.5-coder-0.5b quantized by ridge to Q4_1
and to Q5_1 gives the same greedy text under each fast ISA's kernels as under the scalar
references (RIDGE_ISA=scalar), and the start-up line shows the type running on the forced
ISA's own kernels (not dequantized rows). The prompt is long enough for the batched paths
(16-row panels from 8 tokens, whole panels past 16), then decode runs one token at a time.

ISAs this CPU lacks are skipped and named; without the cached model the test skips
(scripts/fetch-models qwen2.5-coder-0.5b).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from test_cli import RIDGE
from test_model_reference import cached_model

PROMPT = "Write a Python function that returns the n-th Fibonacci number, with a docstring and two doctests:"
FAST_ISAS = ["avx2", "avx_vnni", "avx512_vnni"]  # the ISAs with Q4_1/Q5_1 kernels of their own


def run_with_isa(isa: str, model, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RIDGE_ISA=isa)
    return subprocess.run([str(RIDGE), "run", "-m", str(model), *args], capture_output=True, text=True, env=env,
                          timeout=300)


def kernels_line(res: subprocess.CompletedProcess) -> str:
    return next(line for line in res.stderr.splitlines() if line.startswith("kernels:"))


@pytest.mark.parametrize("qtype", ["Q4_1", "Q5_1"])
def test_min_type_generation_equals_scalar(qtype, tmp_path):
    source = cached_model("qwen2.5-coder-0.5b")
    if source is None:
        pytest.skip("qwen2.5-coder-0.5b is not in the model cache (scripts/fetch-models qwen2.5-coder-0.5b)")
    model = tmp_path / f"qwen-{qtype}.gguf"
    res = subprocess.run([str(RIDGE), "quantize", str(source), str(model), qtype, "--allow-requantize"],
                         capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    args = ("-p", PROMPT, "-n", "12", "--temp", "0", "-t", "2")
    want = run_with_isa("scalar", model, *args)
    assert want.returncode == 0, want.stderr
    assert f"{qtype.lower()} scalar" in kernels_line(want)
    assert len(want.stdout.split()) >= 3, want.stdout  # a continuation, not nothing
    ran = []
    for isa in FAST_ISAS:
        got = run_with_isa(isa, model, *args)
        if got.returncode != 0 and f"RIDGE_ISA={isa}" in got.stderr:
            continue  # this CPU lacks the ISA
        assert got.returncode == 0, got.stderr
        assert f"{qtype.lower()} {isa}" in kernels_line(got), kernels_line(got)
        assert got.stdout == want.stdout, f"{qtype} under {isa}"
        ran.append(isa)
    if not ran:
        pytest.skip(f"skipped: this CPU has none of {', '.join(FAST_ISAS)}")
