"""ridge's quant conversions against gguf-py (gguf.quants), an independent numpy
implementation of the GGUF formats.

Dequantization: random blocks (random bytes, with finite f16 scales that include zero,
subnormals and the largest half) must dequantize to the same float32 bits. Quantization:
for every type gguf-py can quantize, our bytes must equal theirs on varied float data.
Runs the C++ helper $RIDGE_BUILD_DIR/tests/quant_tool.
"""
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

# Byte offsets of the f16 scale fields in each block, which random bytes must not turn
# into inf/NaN (see core/quant_blocks.h).
F16_FIELDS = {
    QT.Q4_0: [0], QT.Q4_1: [0, 2], QT.Q5_0: [0], QT.Q5_1: [0, 2], QT.Q8_0: [0],
    QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
    QT.IQ4_NL: [0], QT.IQ4_XS: [0], QT.TQ1_0: [52], QT.TQ2_0: [64], QT.MXFP4: [],
    QT.IQ2_XXS: [0], QT.IQ2_XS: [0], QT.IQ2_S: [0], QT.IQ3_XXS: [0], QT.IQ3_S: [0],
    QT.IQ1_S: [0], QT.IQ1_M: [], QT.NVFP4: [],
}
# IQ1_M keeps its f16 scale in the top nibbles of the four little-endian uint16 at this
# offset, lowest nibble first; the bits below each nibble are the group scales.
SPLIT_F16_FIELDS = {QT.IQ1_M: 48}
# NVFP4's four scales are unsigned E4M3 bytes, all finite (0x7F, E4M3's NaN, reads as
# zero; bit 7 is ignored), so random bytes serve; these are set on purpose too.
UE4M3_FIELDS = {QT.NVFP4: 0}
UE4M3_EDGES = np.array([0x00, 0x01, 0x07, 0x08, 0x38, 0x7e, 0x7f, 0x80, 0xff], dtype=np.uint8)
# MXFP4's scale is an E8M0 exponent byte at offset 0; above 252, 2^(e-127) * 6 overflows
# float32, so random scales stay at or below it (0 and 1, the subnormal scales, included).
E8M0_FIELDS = {QT.MXFP4: [0]}
# f16 bit patterns worth hitting on purpose: zeros, subnormals, smallest normal, one,
# largest finite, and their negatives.
EDGE_HALVES = np.array([0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff,
                        0x8001, 0x83ff, 0x8400, 0xbc00, 0xfbff], dtype=np.uint16)
# Types gguf-py can quantize that we expect to match to the byte; checked below so a
# gguf-py upgrade that adds or drops a quantizer is noticed.
QUANTIZABLE = [QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.TQ1_0, QT.TQ2_0, QT.MXFP4]


def tool_path():
    build = os.environ.get("RIDGE_BUILD_DIR")
    if not build:
        pytest.fail("RIDGE_BUILD_DIR is not set (run through ctest, or export it)")
    path = os.path.join(build, "tests", "quant_tool")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing; build the quant_tool target")
    return path


def run_tool(tmp_path, mode, qtype, data: bytes) -> bytes:
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(data)
    res = subprocess.run([tool_path(), mode, qtype.name.lower(), str(src), str(dst)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return dst.read_bytes()


def random_halves(rng, n):
    """Finite f16 bit patterns: mostly uniform over all finite values, a third of them
    with moderate exponents (2^-8..2^4), and some edge values."""
    bits = rng.integers(0, 0x10000, size=n, dtype=np.uint32).astype(np.uint16)
    bits = np.where((bits & 0x7c00) == 0x7c00, bits & ~np.uint16(0x4000), bits)  # no inf/NaN
    moderate = (rng.integers(7, 20, size=n).astype(np.uint16) << 10) | (bits & 0x83ff)
    pick = rng.random(n)
    bits = np.where(pick < 0.33, moderate, bits)
    edges = rng.choice(EDGE_HALVES, size=n)
    return np.where(pick > 0.9, edges, bits).astype(np.uint16)


def random_blocks(rng, qtype, n_blocks):
    _, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    blocks[0, :] = 0       # an all-zero block
    blocks[1, :] = 0xff    # all bits set in the codes (scales fixed below)
    for off in F16_FIELDS[qtype]:
        blocks[:, off:off + 2] = random_halves(rng, n_blocks).view(np.uint8).reshape(-1, 2)
    if qtype in SPLIT_F16_FIELDS:
        off = SPLIT_F16_FIELDS[qtype]
        words = blocks[:, off:off + 8].copy().view(np.uint16)  # (n_blocks, 4)
        halves = random_halves(rng, n_blocks).reshape(-1, 1)
        nibbles = (halves >> np.array([0, 4, 8, 12], dtype=np.uint16)) & np.uint16(0xf)
        words = (words & np.uint16(0x0fff)) | (nibbles << np.uint16(12))
        blocks[:, off:off + 8] = words.view(np.uint8)
    if qtype in UE4M3_FIELDS:
        off = UE4M3_FIELDS[qtype]
        blocks[2:2 + len(UE4M3_EDGES), off] = UE4M3_EDGES
        blocks[2 + len(UE4M3_EDGES):2 + 2 * len(UE4M3_EDGES), off + 3] = UE4M3_EDGES
    for off in E8M0_FIELDS.get(qtype, []):
        blocks[:, off] = rng.integers(0, 253, size=n_blocks)
        blocks[:4, off] = [0, 252, 1, 127]
    return blocks


def same_floats(ours: np.ndarray, ref: np.ndarray) -> bool:
    """Equal as float32 values and as bits (so -0.0 vs 0.0 and NaN payloads count)."""
    ours = ours.astype(np.float32, copy=False).ravel()
    ref = ref.astype(np.float32, copy=False).ravel()
    return (ours.shape == ref.shape and np.array_equal(ours, ref, equal_nan=True)
            and np.array_equal(ours.view(np.uint32), ref.view(np.uint32)))


@pytest.mark.parametrize("qtype", list(F16_FIELDS), ids=lambda t: t.name)
def test_dequantize_matches_gguf(tmp_path, qtype):
    rng = np.random.default_rng(1234 + int(qtype))
    blocks = random_blocks(rng, qtype, 3000)
    ours = np.frombuffer(run_tool(tmp_path, "dequantize", qtype, blocks.tobytes()), np.float32)
    ref = dequantize(blocks.reshape(1, -1), qtype).ravel()
    assert ours.size == ref.size == blocks.shape[0] * GGML_QUANT_SIZES[qtype][0]
    assert np.all(np.isfinite(ref))  # the scales we made are finite, so values are too
    bad = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
    assert same_floats(ours, ref), (
        f"{len(bad)} of {ours.size} differ; first at {bad[:5]}: ours {ours[bad[:5]]} "
        f"gguf {ref[bad[:5]]}")


@pytest.mark.parametrize("qtype", [QT.F16, QT.BF16], ids=lambda t: t.name)
def test_dequantize_every_16bit_pattern(tmp_path, qtype):
    """All 65536 values, including subnormals, infinities and NaN payloads."""
    halves = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    ours = np.frombuffer(run_tool(tmp_path, "dequantize", qtype, halves.tobytes()), np.float32)
    assert same_floats(ours, dequantize(halves.view(np.uint8), qtype))


def test_dequantize_f32_is_identity(tmp_path):
    bits = np.random.default_rng(7).integers(0, 2**32, size=4096, dtype=np.uint64)
    raw = bits.astype(np.uint32).tobytes()
    assert run_tool(tmp_path, "dequantize", QT.F32, raw) == raw


def quantizer_inputs(rng, block_size):
    """Rows of floats grouped in blocks, each block with its own character."""
    block_size = max(block_size, 32)  # for the per-element types, shape 32 values alike
    rows = []
    for scale in [1e-7, 1e-4, 0.02, 1.0, 300.0, 6e4]:
        rows.append(rng.standard_normal(64 * block_size) * scale)
    rows.append(rng.uniform(-1, 1, 64 * block_size))
    rows.append(rng.uniform(5, 6, 64 * block_size))          # far from zero (Q4_1 min)
    rows.append(np.zeros(block_size))                        # all zero
    rows.append(np.full(block_size, 0.75))                   # constant
    rows.append(np.full(block_size, -3.0))
    spike = np.zeros(block_size)
    spike[block_size // 3] = -5.0
    rows.append(spike)                                       # one nonzero value
    tie = rng.standard_normal(block_size)
    tie[2], tie[9] = 4.0, -4.0                               # equal magnitudes: first wins
    rows.append(tie)
    steps = rng.integers(-16, 17, size=8 * block_size) * 0.25  # exact halves of a step
    rows.append(steps)
    rows.append(rng.integers(-8, 8, size=8 * block_size).astype(np.float64))
    return np.concatenate(rows).astype(np.float32)


def test_gguf_quantizers_are_the_expected_set():
    """Which types gguf-py can quantize decides which byte comparisons are possible;
    K-quants have none there (their reference quantizers live only in ggml's C)."""
    x = np.zeros((1, 256), dtype=np.float32)
    can = []
    for qtype in [QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0,
                  QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q8_K,
                  QT.TQ1_0, QT.TQ2_0, QT.MXFP4, QT.IQ4_NL, QT.IQ4_XS]:
        try:
            quantize(x, qtype)
            can.append(qtype)
        except NotImplementedError:
            pass
    assert can == QUANTIZABLE


@pytest.mark.parametrize("qtype", [t for t in QUANTIZABLE if t != QT.F16],
                         ids=lambda t: t.name)
def test_quantize_matches_gguf(tmp_path, qtype):
    block_size, _ = GGML_QUANT_SIZES[qtype]
    x = quantizer_inputs(np.random.default_rng(99 + int(qtype)), block_size)
    ours = run_tool(tmp_path, "quantize", qtype, x.tobytes())
    with np.errstate(over="ignore"):  # 6e4-scale rows overflow f16 mins to -inf, alike
        ref = quantize(x.reshape(1, -1), qtype).tobytes()
    assert len(ours) == len(ref)
    if ours != ref:
        size = GGML_QUANT_SIZES[qtype][1]
        first = next(i for i in range(len(ours)) if ours[i] != ref[i]) // size
        pytest.fail(f"block {first} differs: ours {ours[first*size:(first+1)*size].hex()} "
                    f"gguf {ref[first*size:(first+1)*size].hex()}")


def test_quantize_bf16_every_kind_of_float(tmp_path):
    """Random bit patterns: normals, subnormals, infinities, NaNs (quieted), and values
    that round up across an exponent."""
    bits = np.random.default_rng(5).integers(0, 2**32, size=1 << 16, dtype=np.uint64)
    bits = bits.astype(np.uint32)
    bits[:8] = [0x7f800000, 0xff800000, 0x7f800001, 0xffbfffff, 0x7f7fffff, 0x00000001,
                0x3f80ffff, 0x3f808000]
    x = bits.view(np.float32)
    ours = run_tool(tmp_path, "quantize", QT.BF16, x.tobytes())
    assert ours == quantize(x, QT.BF16).tobytes()


def test_quantize_f16_every_kind_of_float(tmp_path):
    """Round to nearest even at every exponent, overflow to inf at 65520, subnormal
    rounding down to 2^-25 (a tie, so zero), and NaN payloads as numpy keeps them."""
    rng = np.random.default_rng(6)
    bits = rng.integers(0, 2**32, size=1 << 16, dtype=np.uint64).astype(np.uint32)
    # Values near the f16 range limits, where the rounding rules differ most.
    near = (rng.integers(0x32800000, 0x38900000, size=1 << 15, dtype=np.uint64)
            .astype(np.uint32))
    big = (rng.integers(0x477f0000, 0x47800100, size=1 << 12, dtype=np.uint64)
           .astype(np.uint32))
    fixed = np.array([0x477fe000, 0x477fefff, 0x477ff000, 0x33000000, 0x33000001,
                      0x387fe000, 0x387ff000, 0x38800000, 0x3f801000, 0x3f803000,
                      0x7fc00000, 0x7f800001, 0xff812345], dtype=np.uint32)
    x = np.concatenate([fixed, bits, near, near | 0x80000000, big]).view(np.float32)
    ours = np.frombuffer(run_tool(tmp_path, "quantize", QT.F16, x.tobytes()), np.uint16)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    bad = np.flatnonzero(ours != ref)
    assert bad.size == 0, [(hex(x.view(np.uint32)[i]), hex(ours[i]), hex(ref[i]))
                           for i in bad[:5]]


def test_tool_rejects_partial_blocks(tmp_path):
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(bytes(35))  # one Q8_0 block is 34 bytes
    res = subprocess.run([tool_path(), "dequantize", "q8_0", str(src), str(dst)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "q8_0" in res.stderr


def k_quant_input():
    """Deterministic rows for the K-quant hashes below (uniform draws only, whose
    stream numpy keeps stable)."""
    rng = np.random.default_rng(2024)
    n_blocks = 160
    u = rng.random((n_blocks, 256))
    x = (2 * u - 1) ** 3                                   # heavy-ish tails, zero mean
    x *= 10.0 ** rng.integers(-4, 3, size=(n_blocks, 1))   # per-block magnitude
    x[::7] += rng.random((len(x[::7]), 1)) * 3             # some blocks far from zero
    x[3, :] = 0.0                                          # all-zero block
    x[5, :] = -1.25                                        # constant block
    x[9, 16:48] = 0.0                                      # zero groups inside a block
    x[11] *= 10.0 ** rng.integers(-3, 2, size=16).repeat(16)  # group scales spread wide
    return x.astype(np.float32).ravel()


# gguf-py has no quantizer for these, so: sha256 of the bytes ggml's own reference
# quantizers (quantize_row_*_ref in ggml-org/ggml d99724f, ggml-quants.c, built with
# -ffp-contract=off) write for k_quant_input(). With FMA contraction ggml's q2_K, q4_K,
# q5_K and q6_K bytes come out differently, so these also catch a fused build of ours.
GGML_REF_SHA256 = {
    "q8_1": "e6b6ce5a5249bab9b458949f2a966bcfe09038f642c4a76bf760ea7d8f3b1822",
    "q2_K": "f02a5430c4bfbc8cde7486f0d3c104030d9a34103d59e31d44d3a01b3ddb2d89",
    "q3_K": "66f68c7ec4f384dc774995cf0dc88ff28e15c72453729e9b93ef89cfaab1ccfa",
    "q4_K": "47f083ef08f8f5964296bdb151ca8797bdc6d0e1681982105b172249a68e9b2d",
    "q5_K": "dc37daf858fd9686b1d01ad94cb36b4b15472fd07e8f6da5f66dca65a25225a8",
    "q6_K": "69955dce51b154811d18ba15e800f8c03449862fb180e7715be682182dd82bdb",
    "q8_K": "3b2761629be711e3edb7583f843f8d588fbcc058ffe2e7c0e35aea2ab6b6cb82",
}


@pytest.mark.parametrize("name", list(GGML_REF_SHA256))
def test_quantize_matches_ggml_reference_bytes(tmp_path, name):
    qtype = QT[name.upper()]
    ours = run_tool(tmp_path, "quantize", qtype, k_quant_input().tobytes())
    assert hashlib.sha256(ours).hexdigest() == GGML_REF_SHA256[name]


def test_generated_iq_grids_are_current():
    """src/core/quant_grids.cpp is what scripts/gen-iq-grids writes from this gguf-py."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    result = subprocess.run([sys.executable, os.path.join(root, "scripts", "gen-iq-grids"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
