"""The numpy reference forward pass (reference_forward.py) against llama2.c's own output.

stories260K.gguf through the reference must give the fp32 logits that karpathy/llama2.c
run.c printed for the same model (.bin) and the same 60-token greedy story; without this
the reference could not vouch for ridge. Also checks the KV-cache path equals a full
prefill, and the CLI wrapper. Runs in a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import reference_forward as ref  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("RIDGE_FIXTURES", ROOT.parent / "shared" / "fixtures"))
MODELS = FIXTURES / "models"


def read_logits_ref():
    tokens, rows = [], []
    for line in (MODELS / "stories260K.logits-ref.txt").read_text().splitlines():
        if not line.startswith("pos "):
            continue
        f = line.split()
        assert f[0] == "pos" and f[2] == "token" and f[4] == "logits"
        assert int(f[1]) == len(tokens)
        tokens.append(int(f[3]))
        rows.append([float(x) for x in f[5:]])
    return tokens, np.array(rows)


def read_greedy_ref():
    fields = {}
    for line in (MODELS / "stories260K.greedy-ref.txt").read_text().splitlines():
        if not line.startswith("#") and ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    prompt = [int(t) for t in fields["prompt_tokens"].split()]
    sequence = [int(t) for t in fields["sequence"].split()]
    return prompt, sequence, fields["text"]


@pytest.fixture(scope="module")
def stories():
    return ref.load(MODELS / "stories260K.gguf")


def test_hparams_read_from_metadata(stories):
    hp = stories.hparams
    assert (hp.arch, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.d_head, hp.n_ff,
            hp.n_vocab) == ("llama", 64, 5, 8, 4, 8, 172, 512)
    assert hp.rope_base == 10000.0 and not hp.rope_neox and hp.n_rot == 8


def test_logits_match_llama2c(stories):
    tokens, expected = read_logits_ref()
    assert len(tokens) == 6 and expected.shape == (6, 512)
    got = stories.forward(tokens)
    assert got.shape == (6, 512) and got.dtype == np.float64
    err = np.abs(got - expected).max()
    assert err < 1e-4, f"max abs logit error {err:.3g}"


def test_greedy_story_matches_llama2c(stories):
    prompt, sequence, text = read_greedy_ref()
    assert sequence[:len(prompt)] == prompt and len(sequence) == 65
    got = ref.greedy(stories, prompt, 60)
    assert got == sequence[len(prompt):]
    assert stories.decode(prompt + got).startswith("<s> " + text[:40])


def test_cached_decode_equals_full_prefill(stories):
    _, sequence, _ = read_greedy_ref()
    full = stories.forward(sequence[:40])
    cache = stories.new_cache()
    first = stories.forward(sequence[:25], cache, rows=[3, 24])
    rest = stories.forward(sequence[25:40], cache)
    assert cache.n_past == 40
    np.testing.assert_allclose(first, full[[3, 24]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(rest, full[25:40], rtol=0, atol=1e-12)
    last = stories.forward(sequence[:40], rows="last")
    np.testing.assert_allclose(last, full[-1:], rtol=0, atol=1e-12)


def test_bad_token_id_is_rejected(stories):
    with pytest.raises(ref.ReferenceModelError, match="out of range"):
        stories.forward([1, 512])


def test_cli_prints_logits_and_greedy():
    prompt, sequence, _ = read_greedy_ref()
    tokens, expected = read_logits_ref()
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "reference-logits"), str(MODELS / "stories260K.gguf"),
         "--tokens", ",".join(map(str, prompt)), "--positions", "0,2", "--greedy", "10"],
        capture_output=True, text=True, check=True)
    out = json.loads(res.stdout)
    assert out["arch"] == "llama" and out["positions"] == [0, 2] and out["tokens"] == prompt
    np.testing.assert_allclose(np.array(out["logits"]), expected[[0, 2]], rtol=0, atol=1e-4)
    assert out["greedy"] == sequence[len(prompt):len(prompt) + 10]

    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "reference-logits"), str(MODELS / "stories260K.gguf"),
         "--tokens", ",".join(map(str, tokens)), "--positions", "last", "--top-k", "3"],
        capture_output=True, text=True, check=True)
    top = json.loads(res.stdout)["top_k"]
    assert len(top) == 1 and top[0]["ids"] == np.argsort(-expected[5])[:3].tolist()
