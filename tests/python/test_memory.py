"""Resident memory while generating: the model is mapped, not copied, so a run holds
about the file, the KV cache budget and little else (issue 4's bound: file + KV budget
+ under 100 MB). Measured as the peak RSS of one `ridge run` process, prefill and
decode included, on each real model that is present."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("RIDGE_BUILD_DIR", ROOT / "build"))
RIDGE = str(BUILD / "ridge")
MODELS = Path(os.environ.get("RIDGE_MODELS", Path.home() / ".cache" / "ridge" / "models"))

# Runs the command in a child of a fresh interpreter, so ru_maxrss of RUSAGE_CHILDREN is
# that one process's peak (not the largest child this test session ever waited for).
PEAK_RSS = r"""
import json, resource, subprocess, sys
res = subprocess.run(sys.argv[1:], capture_output=True)
print(json.dumps({"rc": res.returncode, "stderr": res.stderr.decode(errors="replace"),
                  "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""

KV_BUDGET_MIB = 64
OVERHEAD_LIMIT_MIB = 100


def model_file(name: str) -> Path | None:
    files = sorted((MODELS / name).glob("*.gguf"))
    return files[0] if files else None


@pytest.mark.parametrize("name", ["gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_peak_rss_is_file_plus_kv_budget_plus_under_100_mib(name):
    path = model_file(name)
    if path is None:
        pytest.skip(f"{name} is not fetched (scripts/fetch-models {name})")
    # A prompt of several hundred tokens (prefill in one chunk) and 64 decode steps.
    prompt = "The quick brown fox jumps over the lazy dog. " * 40
    cmd = [RIDGE, "run", "-m", str(path), "-p", prompt, "-n", "64", "--temp", "0", "-t", "2",
           "--kv-budget", str(KV_BUDGET_MIB)]
    out = subprocess.run([sys.executable, "-c", PEAK_RSS, *cmd], capture_output=True, timeout=600, check=True)
    report = json.loads(out.stdout)
    assert report["rc"] == 0, report["stderr"]
    peak_mib = report["peak_kib"] / 1024
    file_mib = path.stat().st_size / 2**20
    overhead = peak_mib - file_mib - KV_BUDGET_MIB
    print(f"{name}: peak RSS {peak_mib:.1f} MiB = file {file_mib:.1f} + KV {KV_BUDGET_MIB} + {overhead:.1f} MiB")
    assert overhead < OVERHEAD_LIMIT_MIB, (
        f"{name}: peak RSS {peak_mib:.1f} MiB exceeds file {file_mib:.1f} MiB + KV budget {KV_BUDGET_MIB} MiB "
        f"+ {OVERHEAD_LIMIT_MIB} MiB")
