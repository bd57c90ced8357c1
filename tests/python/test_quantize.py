"""`ridge quantize` read back by gguf-py (an independent GGUF reader and quantizer).

A synthetic 8-layer model with a real model's tensor names is quantized to every target:
the output keeps every tensor, shape and metadata key; each tensor has the type
llama-quantize's recipe gives it (output -> Q6_K, Q4_K_M's attn_v / ffn_down "more bits"
layers -> Q6_K, shape fallbacks); bytes equal gguf-py's own quantizer where it has one,
and for the rest gguf-py's dequantization of ridge's bytes equals ridge's (both
dequantize to F32 and compare to the bit). Bad input is a clear error and leaves no file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

from test_cli import RIDGE, STORIES, expect_error

N_LAYER, N_EMBD, N_FF, N_VOCAB = 8, 256, 352, 320  # 352: a multiple of 32, not of 256

TARGETS = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M"]
GGUF_PY_QUANTIZES = {QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0}


def run(*args):
    res = subprocess.run([str(RIDGE), *map(str, args)], capture_output=True, timeout=600)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res.stderr.decode()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("quantize") / "model-f32.gguf"
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(N_LAYER)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_string("general.name", "synthetic")
    w.add_uint32("general.file_type", 0)

    def t(name, *shape):  # shape as numpy sees it: (rows, row length)
        w.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    t("token_embd.weight", N_VOCAB, N_EMBD)
    for il in range(N_LAYER):
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for m in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t(f"blk.{il}.{m}.weight", N_EMBD, N_EMBD)
        w.add_tensor(f"blk.{il}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        t(f"blk.{il}.ffn_gate.weight", N_FF, N_EMBD)
        t(f"blk.{il}.ffn_up.weight", N_FF, N_EMBD)
        t(f"blk.{il}.ffn_down.weight", N_EMBD, N_FF)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    t("output.weight", N_VOCAB, N_EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def expected_type(target: str, name: str, row: int) -> QT:
    """llama-quantize's choice, restated for this model."""
    if name.endswith("_norm.weight"):
        return QT.F32
    base = {"Q4_K_M": "Q4_K", "Q5_K_M": "Q5_K"}.get(target, target)
    qt = QT[base]
    if qt in (QT.F32, QT.F16, QT.BF16):
        return qt
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if target not in ("Q4_K", "Q5_K"):  # the pure K types skip the recipe
        if name == "output.weight":
            qt = QT.Q6_K if qt != QT.Q8_0 else qt
        elif target.endswith("_M") and (name.endswith("attn_v.weight") or name.endswith("ffn_down.weight")):
            if more_bits(layer, N_LAYER):
                qt = QT.Q6_K
    block = gguf.GGML_QUANT_SIZES[qt][0]
    if row % block:
        qt = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}.get(qt, qt)
        if row % gguf.GGML_QUANT_SIZES[qt][0]:
            qt = QT.F16
    return qt


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_reads_back_with_gguf_py(model, tmp_path, target):
    out = tmp_path / f"{target}.gguf"
    log = run("quantize", model, out, target)
    src = gguf.GGUFReader(str(model))
    got = gguf.GGUFReader(str(out))
    src_t = {t.name: t for t in src.tensors}
    got_t = {t.name: t for t in got.tensors}
    assert list(got_t) == list(src_t), "every tensor, in order"
    assert set(got.fields) - {"quantize.method"} >= set(src.fields) - {"GGUF.tensor_count"}
    back = tmp_path / "back-f32.gguf"  # ridge's own dequantization of its output
    run("quantize", out, back, "F32")
    ridge_f32 = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(back)).tensors}
    for name, t in got_t.items():
        row = int(src_t[name].shape[0])
        assert [int(x) for x in t.shape] == [int(x) for x in src_t[name].shape], name
        assert t.tensor_type == expected_type(target, name, row), (name, t.tensor_type)
        original = np.array(src_t[name].data, dtype=np.float32)
        if t.tensor_type in GGUF_PY_QUANTIZES:
            want = quantize(original, t.tensor_type)
            assert np.array_equal(np.array(t.data).view(np.uint8).ravel(), want.view(np.uint8).ravel()), name
        if t.tensor_type != QT.F32:
            theirs = dequantize(np.array(t.data), t.tensor_type).astype(np.float32).reshape(original.shape)
            assert np.array_equal(theirs.view(np.uint32), ridge_f32[name].reshape(original.shape).view(np.uint32)), name
            err = np.abs(theirs - original).max()
            assert err < 0.04, (name, err)  # weights ~0.05 (max ~0.25): one 4-bit step at most
    if target in ("Q4_K_M", "Q5_K_M"):
        assert "fallback: blk.0.ffn_down.weight: rows of 352 are not a multiple of 256" in log


def test_token_embedding_and_output_types_as_llama_quantize(model, tmp_path):
    out = tmp_path / "q.gguf"
    run("quantize", model, out, "Q4_0", "--token-embedding-type", "q8_0", "--output-tensor-type", "F16")
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(str(out)).tensors}
    assert types["token_embd.weight"] == QT.Q8_0 and types["output.weight"] == QT.F16
    assert types["blk.0.ffn_up.weight"] == expected_type("Q4_0", "blk.0.ffn_up.weight", N_EMBD)


def test_metadata_and_file_type(model, tmp_path):
    out = tmp_path / "q.gguf"
    run("quantize", model, out, "q4_k_m")  # any case
    r = gguf.GGUFReader(str(out))
    assert r.fields["general.file_type"].contents() == 15
    assert r.fields["general.quantization_version"].contents() == 2
    assert r.fields["general.name"].contents() == "synthetic"
    assert r.fields["quantize.method"].contents() == "rtn"


def test_bad_input_is_refused_and_leaves_no_file(model, tmp_path):
    expect_error("quantize", model, tmp_path / "x.gguf", "Q3_Z", phrase="unknown type 'Q3_Z'")
    expect_error("quantize", model, model, "Q8_0", phrase="is the input file; refusing to overwrite it")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(model.read_bytes()[:5000])
    out = tmp_path / "out.gguf"
    expect_error("quantize", truncated, out, "Q8_0", phrase=str(truncated))
    assert not list(tmp_path.glob("out.gguf*"))  # nor any of its part files
    # A directory that cannot take the output: nothing is left behind.
    expect_error("quantize", STORIES, tmp_path / "no-such-dir" / "out.gguf", "Q8_0", phrase="no-such-dir")


def test_requantizing_takes_allow_requantize(model, tmp_path):
    # As llama-quantize: quantized weights quantized again lose quality twice, so only on request.
    q8 = tmp_path / "q8.gguf"
    run("quantize", model, q8, "Q8_0")
    err = expect_error("quantize", q8, tmp_path / "q4.gguf", "Q4_0", phrase="is quantized already")
    assert "--allow-requantize" in err
    assert not list(tmp_path.glob("q4.gguf*"))
    run("quantize", q8, tmp_path / "q4.gguf", "Q4_0", "--allow-requantize")
    assert gguf.GGUFReader(str(tmp_path / "q4.gguf")).fields["general.file_type"].contents() == 2  # MOSTLY_Q4_0
    run("quantize", q8, tmp_path / "f16.gguf", "F16")  # dequantizing needs no flag


def test_concurrent_runs_to_one_output_each_write_a_whole_file(model, tmp_path):
    # Each run writes its own part file beside OUT and renames it: every run succeeds and
    # OUT is one whole output, never two runs' bytes interleaved in a shared part file.
    solo = tmp_path / "solo.gguf"
    run("quantize", model, solo, "Q4_K_M")
    out = tmp_path / "out.gguf"
    procs = [subprocess.Popen([str(RIDGE), "quantize", str(model), str(out), "Q4_K_M"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode(errors="replace")
    assert out.read_bytes() == solo.read_bytes()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["out.gguf", "solo.gguf"]
