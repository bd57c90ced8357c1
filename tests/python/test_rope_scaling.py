"""RoPE scaling as the files that need it carry it, each against the float64 reference.

Llama 3.x GGUFs carry rope_freqs.weight: the "llama3" RoPE scaling, a divisor of each
rotary pair's frequency applied at every position. On stories260K with such a tensor
added (factors from 1 to 8, as Llama 3.1's stretch long wavelengths), ridge's logits must
follow the float64 reference that applies it, and differ from the model without it. YaRN
(rope.scaling.type yarn, Qwen2.5/Qwen3 past their native context) likewise. A
tensor nothing in ridge reads is refused by name instead of being ignored, and so is
metadata that would change the computation (soft-capping, experts, RoPE attention factor).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import reference_forward as ref  # noqa: E402
from test_cli import RIDGE, STORIES, copy_stories, expect_error  # noqa: E402
from test_model_reference import EXACT_TOLERANCE, TOOL, compare, ridge_logits, tokenize  # noqa: E402


def copy_with(path: Path, extra: dict[str, np.ndarray], metadata: dict | None = None):
    copy_stories(path, extra_tensors=extra, metadata=metadata)


def test_rope_freqs_scale_every_position_as_the_reference_does(tmp_path):
    if not TOOL.exists():
        pytest.fail(f"{TOOL} is missing: build the tests first")
    scaled = tmp_path / "llama3-rope.gguf"
    copy_with(scaled, {"rope_freqs.weight": np.array([1.0, 1.5, 4.0, 8.0], dtype=np.float32)})  # n_rot / 2 = 4
    tokens = tokenize(STORIES, "Once upon a time, there was a little girl named Lily. She loved to play outside.")
    rows = [0, len(tokens) // 2, len(tokens) - 1]
    ours, greedy = ridge_logits(scaled, tokens, rows, tmp_path, greedy=24)
    model = ref.load(str(scaled))
    assert model.rope_freqs is not None
    cache = model.new_cache()
    theirs = model.forward(tokens, cache, rows=rows)
    err, overlap = compare("llama3 rope", ours, theirs, rows)
    assert err < EXACT_TOLERANCE and overlap == 5
    plain, plain_greedy = ridge_logits(STORIES, tokens, rows, tmp_path, greedy=24)
    assert np.max(np.abs(plain[1:] - ours[1:])) > 1e-2, "the factors must change the logits past position 0"
    assert greedy != plain_greedy
    out = subprocess.run([str(RIDGE), "inspect", str(scaled)], capture_output=True, text=True, check=True).stdout
    assert "every tensor is used" in out and "llama3 frequency factors (rope_freqs.weight)" in out


def test_yarn_follows_the_reference(tmp_path):
    # stories260K: 4 rotary pairs; with an original context of 64 the ramp spans pairs 0..2,
    # so one pair keeps its frequency, one is mixed and two are interpolated.
    scaled = tmp_path / "yarn.gguf"
    copy_with(scaled, {}, {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
                           "llama.rope.scaling.original_context_length": 64})
    tokens = tokenize(STORIES, "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun.")
    rows = [0, len(tokens) // 2, len(tokens) - 1]
    ours, _ = ridge_logits(scaled, tokens, rows, tmp_path)
    model = ref.load(str(scaled))
    assert model.hparams.yarn == (64, 32.0, 1.0)
    theirs = model.forward(tokens, model.new_cache(), rows=rows)
    err, overlap = compare("yarn", ours, theirs, rows)
    assert err < EXACT_TOLERANCE and overlap == 5
    plain, _ = ridge_logits(STORIES, tokens, rows, tmp_path)
    assert np.max(np.abs(plain - ours)) > 1e-2, "YaRN's attention factor changes even position 0"
    out = subprocess.run([str(RIDGE), "inspect", str(scaled)], capture_output=True, text=True, check=True).stdout
    assert "YaRN x4 (ramp over pairs 0..2, attention factor 1.13863)" in out, out


def test_a_tensor_nothing_reads_is_refused(tmp_path):
    extra = tmp_path / "extra.gguf"
    copy_with(extra, {"blk.0.attn_sinks.weight": np.zeros(8, dtype=np.float32)})
    expect_error("run", "-m", extra, "-p", "Once", phrase="tensor 'blk.0.attn_sinks.weight' [8] is not used by ridge's llama model")
    wrong = tmp_path / "wrong-rope.gguf"
    copy_with(wrong, {"rope_freqs.weight": np.ones(3, dtype=np.float32)})
    expect_error("run", "-m", wrong, "-p", "Once", phrase="tensor 'rope_freqs.weight' has shape [3], expected [4]")


@pytest.mark.parametrize("metadata,phrase", [
    ({"llama.attn_logit_softcapping": 50.0}, "llama.attn_logit_softcapping is set, and ridge's llama model does not implement it"),
    ({"llama.final_logit_softcapping": 30.0}, "llama.final_logit_softcapping is set"),
    ({"llama.expert_shared_count": 2}, "llama.expert_shared_count is set, and ridge's llama model does not implement it; "
                                       "refusing to run without it"),
    ({"llama.rope.scaling.attn_factor": 1.2}, "llama.rope.scaling.attn_factor 1.2 is not supported"),
    ({"llama.rope.scaling.type": "longrope"}, "llama.rope.scaling.type 'longrope' is not supported (none, linear, yarn)"),
    ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0},
     "rope.scaling.type is yarn but llama.rope.scaling.original_context_length is missing"),
])
def test_metadata_that_changes_the_computation_is_used_or_refused(tmp_path, metadata, phrase):
    path = tmp_path / "meta.gguf"
    copy_with(path, {}, metadata)
    expect_error("run", "-m", path, "-p", "Once", phrase=phrase)
