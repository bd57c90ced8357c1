"""`ridge imatrix` and `ridge quantize --imatrix` on stories260K:
- the imatrix is llama-imatrix's GGUF (general.type, imatrix.* metadata, NAME.in_sum2 and
  NAME.counts per layer matrix, f32, read with the gguf package), and its sums equal the
  squares of each matrix's inputs summed over the windows in the independent float64
  reference forward pass;
- quantizing with it lowers the KL divergence from the original against quantizing without
  (calibrated and evaluated on different parts of WikiText-2), and llama.cpp's legacy .dat
  format gives the same bytes as the GGUF;
- missing, truncated and mismatched files, and bad flags, are clear errors that leave no
  output file.
(Byte equality with llama-quantize --imatrix, and ridge's sums against llama-imatrix's, are
interop checks run by hand: llama.cpp is not part of CI.)
"""

from __future__ import annotations

import re
import struct
import subprocess

import gguf
import numpy as np
import pytest

import reference_forward as ref
from test_cli import RIDGE, STORIES, expect_error
from test_perplexity import WIKI

MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
CTX = 128
KLD_CHUNKS = 16  # evaluation: the first 16 windows of 128 tokens
CALIB = ["-c", CTX, "--chunks", 32, "--skip-tokens", 100000]  # well past the evaluation text


def run(*args):
    res = subprocess.run([str(RIDGE), *map(str, args)], capture_output=True, timeout=600)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res.stdout.decode(), res.stderr.decode()


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def field(reader, key):
    return reader.fields[key].contents()


@pytest.fixture(scope="module")
def imatrix(tmp_path_factory):
    path = tmp_path_factory.mktemp("imatrix") / "stories.imatrix.gguf"
    _, log = run("imatrix", "-m", STORIES, "-f", WIKI, "-o", path, *CALIB)
    assert "imatrix: window 32/32" in log and "35 entries (32 chunks of 128 tokens)" in log
    return path


def n_layer():
    return int(field(gguf.GGUFReader(str(STORIES)), "llama.block_count"))


def test_imatrix_is_llama_imatrix_gguf(imatrix):
    r = gguf.GGUFReader(str(imatrix))
    assert field(r, "general.type") == "imatrix"
    assert field(r, "imatrix.datasets") == [str(WIKI)]
    assert field(r, "imatrix.chunk_count") == 32 and field(r, "imatrix.chunk_size") == CTX
    assert r.fields["imatrix.chunk_count"].types == [gguf.GGUFValueType.UINT32]
    model = tensors(STORIES)
    found = tensors(imatrix)
    expected = {f"blk.{il}.{m}.weight" for il in range(n_layer()) for m in MATRICES}
    assert set(found) == {n + s for n in expected for s in (".in_sum2", ".counts")}
    for name in expected:
        sums, counts = found[name + ".in_sum2"], found[name + ".counts"]
        assert sums.tensor_type == counts.tensor_type == gguf.GGMLQuantizationType.F32
        assert list(sums.shape) == [model[name].shape[0]]  # n_in
        assert list(counts.shape) == [1] and float(counts.data[0]) == 32 * CTX
        assert np.all(np.isfinite(sums.data)) and np.all(sums.data > 0), name
    # q/k/v read one input, as gate/up do.
    np.testing.assert_array_equal(found["blk.0.attn_q.weight.in_sum2"].data, found["blk.0.attn_v.weight.in_sum2"].data)
    np.testing.assert_array_equal(found["blk.1.ffn_gate.weight.in_sum2"].data, found["blk.1.ffn_up.weight.in_sum2"].data)


def test_sums_are_the_reference_forwards_input_squares(tmp_path, monkeypatch):
    text = tmp_path / "text.txt"
    text.write_bytes(WIKI.read_bytes()[:4000])
    out = tmp_path / "small.gguf"
    run("imatrix", "-m", STORIES, "-f", text, "-o", out, "-c", 64, "--chunks", 2)
    tokens = [int(t) for t in run("tokenize", "-m", STORIES, "-f", text, "--no-parse-special")[0].split()]
    model = ref.load(str(STORIES))
    bos = tokens[0]
    windows = [tokens[:64], [bos] + tokens[65:128]]  # each window starts with BOS, as ridge's and llama's

    names = {}
    for il, layer in enumerate(model.layers):
        for m, w in zip(MATRICES, (layer.wq, layer.wk, layer.wv, layer.wo, layer.w_gate, layer.w_up, layer.w_down)):
            names[id(w)] = f"blk.{il}.{m}.weight"
    sums = {}
    matmul = ref._matmul

    def recording_matmul(x, w):
        if id(w) in names:
            sums[names[id(w)]] = sums.get(names[id(w)], 0) + (x * x).sum(axis=0)
        return matmul(x, w)

    monkeypatch.setattr(ref, "_matmul", recording_matmul)
    for w in windows:
        model.forward(w, rows="last")
    found = tensors(out)
    assert len(sums) == 7 * n_layer()
    for name, expected in sums.items():
        np.testing.assert_allclose(found[name + ".in_sum2"].data, expected, rtol=2e-3, err_msg=name)
        assert float(found[name + ".counts"].data[0]) == 128


def kld(model, base):
    stdout, _ = run("perplexity", "-m", model, "--kl-divergence-base", base, "--kl-divergence")
    return float(re.search(r"Mean    KLD:\s+([-\d.]+)", stdout).group(1))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = tmp_path_factory.mktemp("imatrix-base") / "base.kld"
    run("perplexity", "-m", STORIES, "-f", WIKI, "-c", CTX, "--chunks", KLD_CHUNKS, "--kl-divergence-base", path)
    return path


# Q4_0: the 64-wide matrices are Q4_0, ffn_down (172 wide) F16. Q4_K: the recipe's Q5_0
# fallback (rows of 64 are not a multiple of 256).
@pytest.mark.parametrize("target, gain", [("Q4_0", 0.95), ("Q4_K", 0.9)])
def test_imatrix_lowers_the_kl_divergence(imatrix, base, tmp_path, target, gain):
    plain, weighted = tmp_path / "plain.gguf", tmp_path / "weighted.gguf"
    run("quantize", STORIES, plain, target)
    _, log = run("quantize", STORIES, weighted, target, "--imatrix", imatrix)
    assert f"imatrix {imatrix}: 35 entries for this model from 32 chunks of 128 tokens" in log
    assert "no imatrix entry for token_embd.weight; quantized without importance" in log
    r = gguf.GGUFReader(str(weighted))
    assert field(r, "quantize.imatrix.file") == str(imatrix)
    assert field(r, "quantize.imatrix.entries_count") == 35 and field(r, "quantize.imatrix.chunks_count") == 32
    k_plain, k_weighted = kld(plain, base), kld(weighted, base)
    assert k_weighted < gain * k_plain, (k_weighted, k_plain)


def legacy_dat(path, imatrix, ncall):
    """llama.cpp's legacy format: mean square * ncall, and ncall, per entry."""
    out = bytearray()
    found = tensors(imatrix)
    names = sorted(n[: -len(".in_sum2")] for n in found if n.endswith(".in_sum2"))
    out += struct.pack("<i", len(names))
    for name in names:
        mean = np.asarray(found[name + ".in_sum2"].data, np.float32) / np.float32(found[name + ".counts"].data[0])
        out += struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", ncall, mean.size)
        out += (mean * np.float32(ncall)).astype("<f4").tobytes()
    out += struct.pack("<i", 32) + struct.pack("<i", 4) + b"wiki"
    path.write_bytes(bytes(out))


def test_legacy_dat_gives_the_same_bytes(imatrix, tmp_path):
    dat = tmp_path / "stories.imatrix.dat"
    legacy_dat(dat, imatrix, ncall=1)
    from_gguf, from_dat = tmp_path / "gguf.gguf", tmp_path / "dat.gguf"
    run("quantize", STORIES, from_gguf, "Q4_0", "--imatrix", imatrix)
    _, log = run("quantize", STORIES, from_dat, "Q4_0", "--imatrix", dat)
    assert "35 entries for this model from 32 chunks of wiki" in log  # the legacy format has no chunk size
    a, b = tensors(from_gguf), tensors(from_dat)
    for name, t in a.items():
        assert bytes(t.data) == bytes(b[name].data), name


def test_gptq_ignores_the_imatrix_and_awq_refuses_it(imatrix, tmp_path):
    out = tmp_path / "out.gguf"
    calib = ["--calib", WIKI, "--calib-windows", 2, "--calib-ctx", 64, "--calib-skip-tokens", 100000]
    _, log = run("quantize", STORIES, out, "Q4_0", "--method", "gptq", "--imatrix", imatrix, *calib)
    assert "--imatrix ignored" in log and "gptq: blk.0.attn_q.weight" in log
    out.unlink()
    expect_error("quantize", STORIES, out, "Q4_0", "--method", "awq", "--imatrix", imatrix, *calib,
                 phrase="--imatrix does not combine with --method awq")
    assert not out.exists()


def test_bad_imatrix_files_are_clear_errors(imatrix, tmp_path):
    out = tmp_path / "out.gguf"
    expect_error("quantize", STORIES, out, "Q4_0", "--imatrix", tmp_path / "missing.gguf", phrase="missing.gguf: cannot open")

    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(imatrix.read_bytes()[:3000])
    expect_error("quantize", STORIES, out, "Q4_0", "--imatrix", truncated, phrase=str(truncated))

    short = tmp_path / "short.gguf"
    w = gguf.GGUFWriter(str(short), arch="imatrix")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["x"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 32)
    w.add_tensor("blk.0.attn_q.weight.in_sum2", np.ones(32, np.float32))
    w.add_tensor("blk.0.attn_q.weight.counts", np.ones(1, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    expect_error("quantize", STORIES, out, "Q4_0", "--imatrix", short,
                 phrase="blk.0.attn_q.weight has 32 importance values; the tensor [64, 64] needs 64")

    text = tmp_path / "not-an-imatrix.txt"
    text.write_text("hello, world\n")
    expect_error("quantize", STORIES, out, "Q4_0", "--imatrix", text, phrase="not an imatrix")
    assert not list(tmp_path.glob("out.gguf*"))  # nor any of its part files


def test_bad_imatrix_runs_are_clear_errors(tmp_path):
    out = tmp_path / "out.gguf"
    expect_error("imatrix", "-m", STORIES, "-f", tmp_path / "missing.txt", "-o", out, phrase="missing.txt: cannot open")
    short = tmp_path / "short.txt"
    short.write_text("Once upon a time.")
    expect_error("imatrix", "-m", STORIES, "-f", short, "-o", out, phrase="leaves no window of 512")
    expect_error("imatrix", "-m", STORIES, "-f", WIKI, "-o", out, "--chunks", 0, phrase="--chunks must be >= 1")
    assert not list(tmp_path.glob("out.gguf*"))  # nor any of its part files
    copy = tmp_path / "model.gguf"
    copy.write_bytes(STORIES.read_bytes())
    expect_error("imatrix", "-m", copy, "-f", WIKI, "-o", copy, phrase="refusing to overwrite")
    assert copy.read_bytes() == STORIES.read_bytes()
