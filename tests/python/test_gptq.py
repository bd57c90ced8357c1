"""ridge's GPTQ against a numpy GPTQ written from the paper (Frantar et al. 2022,
Algorithm 1 with lazy batch updates), on one synthetic layer with correlated inputs:
the same Hessian, dampening (1% of its mean diagonal) and column order; each GGUF block's
scale fitted when GPTQ reaches it, then every column rounded onto that block's grid. The
fit is either the format's reference quantizer (gguf-py's) or, ridge's default, ggml's
importance-weighted Q4_0 search (make_qx_quants with weights diag(H)_j * sqrt(sigma2 + x_j^2),
sigma2 the block's mean square) written out here. Both must pick the same codes (float32
and float64 arithmetic may part on a rare tie-like rounding), both must beat round-to-
nearest by far on the layer's output error, and the weighted fit must beat the reference's.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

BUILD = Path(os.environ.get("RIDGE_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
TOOL = BUILD / "tests" / "gptq_tool"
ROWS, COLS, N = 32, 256, 768


def layer(seed=3):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((ROWS, COLS)) * 0.05).astype(np.float32)
    a = rng.standard_normal((COLS, COLS)) / np.sqrt(COLS)
    x = (rng.standard_normal((N, COLS)) @ a).astype(np.float32)
    x[:, ::37] *= 8  # outlier features
    return w, x


def weighted_q4_0_scale(x: np.ndarray, importance: np.ndarray) -> np.float32:
    """ggml's make_qx_quants(32, 8, x, rmse_type 1, weights) for one Q4_0 block, in float32."""
    x = x.astype(np.float32)
    weights = importance.astype(np.float32) * np.sqrt(np.float32(np.mean(x * x)) + x * x)
    i_max = int(np.argmax(np.abs(x)))
    if abs(x[i_max]) < 1e-15:
        return np.float32(0)
    top = x[i_max]

    def fit(iscale):
        l = np.clip(np.round(iscale * x), -8, 7)  # nearest_int: ties away from zero differ only on exact halves
        # summed in order, as ggml does (np.sum's pairwise order parts more often)
        return np.cumsum(weights * x * l)[-1], np.cumsum(weights * l * l)[-1]

    sumlx, suml2 = fit(np.float32(-8) / top)
    scale = sumlx / suml2 if suml2 > 0 else np.float32(0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        sumlx, suml2 = fit(-(np.float32(8) + np.float32(0.1) * step) / top)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            scale = sumlx / suml2
            best = scale * sumlx
    return np.float32(scale)


def numpy_gptq(w: np.ndarray, x: np.ndarray, qtype: QT, block_cols=128, damp=0.01, weighted=False) -> np.ndarray:
    """Dequantized GPTQ weights, float64 throughout (the weighted fit in float32, as ggml's)."""
    bs = 32
    W = w.astype(np.float64).copy()
    H = x.astype(np.float64).T @ x.astype(np.float64)
    importance = np.diag(H).copy()
    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    H[np.diag_indices(COLS)] += damp * np.mean(np.diag(H))
    Hinv = np.linalg.inv(np.linalg.cholesky(H))
    Hinv = Hinv.T @ Hinv                       # H^-1
    U = np.linalg.cholesky(Hinv).T             # upper: H^-1 = U^T U
    Q = np.zeros_like(W)
    for i1 in range(0, COLS, block_cols):
        i2 = min(COLS, i1 + block_cols)
        Err = np.zeros((ROWS, i2 - i1))
        for i in range(i1, i2):
            if i % bs == 0 and weighted:  # the block's scale, fitted to the current values
                d = np.array([weighted_q4_0_scale(W[r, i:i + bs].astype(np.float32), importance[i:i + bs])
                              for r in range(ROWS)], dtype=np.float16).astype(np.float32)
            elif i % bs == 0:
                blocks = quantize(W[:, i:i + bs].astype(np.float32), qtype)
                d = np.array([np.frombuffer(b[:2].tobytes(), dtype=np.float16)[0] for b in blocks.reshape(ROWS, -1)],
                             dtype=np.float32)
            lo, hi, zero = (0, 15, 8) if qtype == QT.Q4_0 else (-128, 127, 0)
            codes = np.clip(np.round(W[:, i] / d.astype(np.float64) + zero), lo, hi)
            # nearest on the exact grid (float32 products, as the format computes them)
            cand = np.stack([np.clip(codes + k, lo, hi) for k in (-1, 0, 1)])
            vals = (cand - zero).astype(np.float32) * d[None, :]
            best = np.argmin(np.abs(vals - W[:, i][None, :]), axis=0)
            q = vals[best, np.arange(ROWS)].astype(np.float64)
            Q[:, i] = q
            e = (W[:, i] - q) / U[i, i]
            W[:, i + 1:i2] -= np.outer(e, U[i, i + 1:i2])
            Err[:, i - i1] = e
        W[:, i2:] -= Err @ U[i1:i2, i2:]
    return Q


def output_error(w, q, x):
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    return float(np.sum((ref - x.astype(np.float64) @ q.T) ** 2) / np.sum(ref ** 2))


def ridge_gptq(tmp_path, w, x, qtype, *fit):
    if not TOOL.exists():
        pytest.fail(f"{TOOL} is missing; build the gptq_tool target")
    (tmp_path / "w.f32").write_bytes(w.tobytes())
    (tmp_path / "x.f32").write_bytes(x.tobytes())
    res = subprocess.run([str(TOOL), qtype.name.lower(), str(ROWS), str(COLS), str(N), str(tmp_path / "w.f32"),
                          str(tmp_path / "x.f32"), str(tmp_path / "q.bin"), *fit], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return dequantize(np.frombuffer((tmp_path / "q.bin").read_bytes(), dtype=np.uint8).reshape(ROWS, -1),
                      qtype).reshape(ROWS, COLS)


@pytest.mark.parametrize("qtype", [QT.Q4_0, QT.Q8_0])
def test_ridge_gptq_is_numpy_gptq(tmp_path, qtype):
    w, x = layer()
    ridge_q = ridge_gptq(tmp_path, w, x, qtype, "reference-fit")
    numpy_q = numpy_gptq(w, x, qtype)
    same = np.mean(ridge_q == numpy_q.astype(np.float32))
    assert same > 0.99, f"only {same:.3%} of the values agree"
    rtn = dequantize(quantize(w, qtype), qtype).reshape(ROWS, COLS)
    e_ridge, e_numpy, e_rtn = output_error(w, ridge_q, x), output_error(w, numpy_q, x), output_error(w, rtn, x)
    assert e_ridge == pytest.approx(e_numpy, rel=0.02)
    assert e_ridge < 0.75 * e_rtn, (e_ridge, e_rtn)


def test_weighted_fit_is_numpys_and_beats_the_reference_fit(tmp_path):
    w, x = layer()
    ridge_q = ridge_gptq(tmp_path, w, x, QT.Q4_0)  # the default: the weighted fit
    numpy_q = numpy_gptq(w, x, QT.Q4_0, weighted=True)
    # The weighted search picks each block's scale by comparing candidates' weighted
    # errors; where two nearly tie, BLAS's summation order (it differs between CPUs: on
    # AMD Zen 3, 2 of these 32 rows) can flip the pick, and error feedback carries the
    # difference to the rest of the row. So: most rows equal to numpy's bit for bit, a
    # differing row equal up to the start of a block, and the same output error.
    same = ridge_q == numpy_q.astype(np.float32)
    differing = [r for r in range(ROWS) if not same[r].all()]
    assert len(differing) <= ROWS // 8, f"{len(differing)} of {ROWS} rows differ from numpy's"
    for r in differing:
        first = int(np.argmin(same[r]))
        assert first % 32 == 0, f"row {r} first differs at column {first}, inside a block"
    assert output_error(w, ridge_q, x) == pytest.approx(output_error(w, numpy_q, x), rel=0.02)
    e_weighted = output_error(w, ridge_q, x)
    e_reference = output_error(w, numpy_gptq(w, x, QT.Q4_0), x)
    assert e_weighted < 0.95 * e_reference, (e_weighted, e_reference)
