"""Every model family users bring, on a small random-weight model in that family's exact
GGUF layout (synthetic_models.py), against the float64 reference (reference_forward.py).

For each family: 64 random token ids, prefilled in chunks of 16 so the paged cache and
chunked prefill are in play; ridge's logits (exact f32 path) at rows before, at and past
the sliding window must match the reference (max abs error < EXACT_TOLERANCE, same
top-5), and so must an 8-token greedy continuation decoded one token at a time. Each case
also checks that what it claims to test is in force: the reference's logits change if the
window or the RoPE scaling is taken away, and MoE routing has no near-tie that f32 could
flip. Then the refusals: a tensor nothing reads, a MoE file missing an expert tensor and a
RoPE scaling type ridge does not implement each stop the load with an error naming it.

Families ridge does not run yet are marked xfail(strict=True) in NOT_YET_SUPPORTED: once
ridge supports one, its tests pass, strict xfail turns that into a failure, and the entry
must be removed.
"""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import reference_forward as ref  # noqa: E402
import synthetic_models as sm  # noqa: E402
from test_cli import RIDGE, expect_error  # noqa: E402
from test_model_reference import EXACT_TOLERANCE, TOOL, compare, ridge_logits  # noqa: E402

# case id or family -> why ridge cannot run it yet (remove the entry when it can).
NOT_YET_SUPPORTED: dict[str, str] = {}

N_TOKENS = 64
PREFILL_CHUNK = 16
N_GREEDY = 8
MIN_ROUTER_MARGIN = 1e-5   # an f32 engine routes like the float64 reference above this gap


@dataclass
class Case:
    id: str
    family: str
    overrides: dict = field(default_factory=dict)
    rope_in_force: bool = False   # the case's RoPE scaling must change the logits


CASES = [
    Case("llama", "llama", rope_in_force=True),                  # Llama 3.2: rope_freqs, tied output
    Case("mistral", "mistral"),                                   # as llama.cpp writes it: no window key
    Case("mistral-window", "mistral", {"sliding_window": 16}),    # HF's window, in llama.attention.sliding_window
    Case("qwen3", "qwen3"),
    Case("qwen3-yarn", "qwen3", {"rope_scaling": "yarn"}, rope_in_force=True),
    Case("qwen3-f16", "qwen3", {"dtype": "f16"}),
    Case("gemma2", "gemma2"),
    Case("phi3-longrope", "phi3", rope_in_force=True),
    Case("phi3-4k", "phi3", {"rope_scaling": None, "sliding_window": 2047}),   # Phi-3-mini-4k
    Case("qwen3moe", "qwen3moe", {"seed": 3}),    # the default seed has a 6e-6 routing near-tie
    Case("mixtral", "mixtral", {"dtype": "f16"}),
    Case("olmoe", "olmoe"),
    # Qwen 3.5: gated-DeltaNet layers carry their state across the 16-token prefill chunks
    # and the decode steps; value heads outnumber key heads (the tiled head mapping).
    Case("qwen35", "qwen35"),
    Case("qwen35-f16", "qwen35", {"dtype": "f16"}),
    # Qwen 3.5-MoE: the same trunk, experts in every MLP and a sigmoid-gated shared expert.
    Case("qwen35moe", "qwen35moe"),
    Case("qwen35moe-fused", "qwen35moe", {"fuse_gate_up_exps": True}),
    # Qwen3-Next: grouped value heads, fused beta/alpha rows, and its older ssm_in layout.
    Case("qwen3next", "qwen3next"),
    Case("qwen3next-ssm-in", "qwen3next", {"ssm_in": True}),
] + [
    # Weight types that run as rows dequantized (no kernel of their own yet): a file with
    # them loads and computes what the reference computes from the same bytes. Rows of 256
    # so every block size fits.
    Case(f"llama-{t.lower()}", "llama", {"n_embd": 256, "d_head": 64, "n_ff": 256, "weights": t})
    for t in ("IQ4_NL", "IQ4_XS", "MXFP4", "TQ1_0", "TQ2_0", "NVFP4",
              "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")
]


def marked(key: str, *values, id=None):
    """A pytest param, xfail(strict) while NOT_YET_SUPPORTED names `key` or its family."""
    reason = NOT_YET_SUPPORTED.get(key) or NOT_YET_SUPPORTED.get(key.split("-")[0])
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(*values, marks=marks, id=id)


def random_tokens(n_vocab: int, seed: int = 7) -> list[int]:
    return np.random.default_rng(seed).integers(0, n_vocab, N_TOKENS).tolist()


def rows_for(window: int) -> list[int]:
    w = window if 0 < window < N_TOKENS else PREFILL_CHUNK
    return sorted({0, w - 1, w, w + 7, N_TOKENS - 1})


def reference_without(loaded: ref.Model, what: str) -> ref.Model:
    """The reference model with one feature taken away, to show the feature matters: a copy
    sharing the loaded weights, with its own hyperparameters (a reload costs seconds)."""
    model = copy.copy(loaded)
    model.hparams = hp = dataclasses.replace(loaded.hparams)
    if what == "window":
        hp.sliding_window = 0
    elif what == "rope":
        model.rope_freqs = None
        hp.yarn = hp.yarn_swa = None
        hp.rope_attn_factor = 1.0
    return model


@pytest.mark.parametrize("case", [marked(c.id, c, id=c.id) for c in CASES])
def test_logits_match_reference(case: Case, tmp_path):
    if not TOOL.exists():
        pytest.fail(f"{TOOL} is missing: build the tests first")
    path = tmp_path / f"{case.id}.gguf"
    info = sm.write_model(path, case.family, **case.overrides)
    tokens = random_tokens(info["n_vocab"])
    window = info["sliding_window"]
    rows = rows_for(window)

    model = ref.load(path)
    cache = model.new_cache()
    theirs = model.forward(tokens, cache, rows=rows)
    ref_greedy = ref.continue_greedy(model, cache, theirs[-1], N_GREEDY)
    if info["n_expert"]:
        assert model.min_router_margin > MIN_ROUTER_MARGIN, \
            f"{case.id}: routing near-tie ({model.min_router_margin:.2g}); pick another seed"
    if 0 < window < N_TOKENS:
        plain = reference_without(model, "window").forward(tokens, rows=rows[-1:])
        assert np.max(np.abs(plain - theirs[-1:])) > 1e-2, f"{case.id}: the window must change the last row"
    if case.rope_in_force:
        plain = reference_without(model, "rope").forward(tokens, rows=rows[-1:])
        assert np.max(np.abs(plain - theirs[-1:])) > 1e-2, f"{case.id}: the RoPE scaling must change the logits"

    ours, our_greedy = ridge_logits(path, tokens, rows, tmp_path, greedy=N_GREEDY, batch=PREFILL_CHUNK)
    err, overlap = compare(case.id, ours, theirs, rows)
    assert err < EXACT_TOLERANCE, f"{case.id}: max abs logit error {err:.3g} >= {EXACT_TOLERANCE}"
    assert overlap == 5, f"{case.id}: top-5 overlap only {overlap}/5"
    assert our_greedy == ref_greedy, f"{case.id}: greedy differs\nridge: {our_greedy}\nref:   {ref_greedy}"


# --- refusals ----------------------------------------------------------------------------

# Each family in its default layout (phi3: with LongRoPE).
@pytest.mark.parametrize("family", [marked("phi3-longrope" if f == "phi3" else f, f, id=f) for f in sm.FAMILIES])
def test_a_tensor_nothing_reads_is_refused(family, tmp_path):
    path = tmp_path / "extra.gguf"
    sm.write_model(path, family, extra_tensors={"blk.0.attn_sinks.weight": np.zeros(4, dtype=np.float32)})
    expect_error("run", "-m", path, "-p", "Once", "-n", "1", phrase="tensor 'blk.0.attn_sinks.weight'")


@pytest.mark.parametrize("family", [marked(f, f, id=f) for f in ("mixtral", "qwen3moe", "olmoe")])
def test_a_moe_file_missing_an_expert_tensor_is_refused(family, tmp_path):
    path = tmp_path / "missing.gguf"
    sm.write_model(path, family, drop_tensors=["blk.1.ffn_up_exps.weight"])
    expect_error("run", "-m", path, "-p", "Once", "-n", "1", phrase="blk.1.ffn_up_exps.weight")


@pytest.mark.parametrize("family", [marked(f, f, id=f) for f in ("llama", "qwen3", "phi3")])
def test_a_rope_scaling_type_ridge_does_not_implement_is_refused(family, tmp_path):
    # "dynamic" is HF's dynamic-NTK scaling: a converter could write it, llama.cpp knows it
    # not, and ridge must say so rather than run with unscaled RoPE.
    arch = sm.FAMILIES[family].arch
    path = tmp_path / "dynamic.gguf"
    sm.write_model(path, family, rope_scaling=None,
                   extra_metadata={f"{arch}.rope.scaling.type": "dynamic", f"{arch}.rope.scaling.factor": 2.0})
    expect_error("run", "-m", path, "-p", "Once", "-n", "1", phrase=f"{arch}.rope.scaling.type 'dynamic'")


# --- mixture of experts in batches ---------------------------------------------------------

@pytest.mark.parametrize("family", ["mixtral", "qwen3moe", "olmoe"])
def test_moe_logits_do_not_depend_on_the_batch(family, tmp_path):
    # The tokens of a step are grouped by expert, each expert run once over its tokens:
    # a token's logits must be the same whether its step holds 1 token or 16.
    path = tmp_path / f"{family}.gguf"
    info = sm.write_model(path, family)
    tokens = list(np.random.default_rng(5).integers(3, info["n_vocab"], 32))
    rows = [0, 7, 15, 31]
    one, _ = ridge_logits(path, tokens, rows, tmp_path, batch=1)
    many, _ = ridge_logits(path, tokens, rows, tmp_path, batch=16)
    np.testing.assert_array_equal(one, many)
    out = subprocess.run([str(RIDGE), "inspect", str(path)], capture_output=True, text=True, check=True).stdout
    assert "every tensor is used" in out, out
