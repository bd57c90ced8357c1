"""ridge's recurrent-layer kernels (src/kernels/recurrent/) against float64 references
written from the papers, not from ridge's code, under every ISA this CPU runs:

- gated delta rule (Yang, Kautz, Hatamizadeh, "Gated Delta Networks", 2024, eq. 10):
  S_t = S_{t-1} (alpha_t (I - beta_t k_t k_t^T)) + beta_t v_t k_t^T,  o_t = S_t q_t / sqrt(d_k),
  S in R^{d_v x d_k}, alpha_t = exp(g_t); value head h reads key head h mod n_k_heads (llama.cpp's
  tiling of the key heads);
- Mamba2's SSM (Dao and Gu, "Transformers are SSMs", 2024, the scalar-A SSD recurrence):
  h_t = exp(Delta_t A) h_{t-1} + Delta_t x_t B_t^T,  y_t = h_t C_t,  Delta_t = softplus(dt_t);
- the depthwise causal convolution: y_t[c] = sum_l w[c][d_conv-1-l] u_{t-l}[c], with the
  inputs before the call taken from the rolling state.

Runs the C++ helper $RIDGE_BUILD_DIR/tests/recurrent_tool (tests/tools/recurrent_tool.cpp)."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

ISAS = ["scalar", "avx2", "avx_vnni", "avx512_vnni", "amx_int8"]
RTOL, ATOL = 1e-4, 1e-5


def tool_path():
    build = os.environ.get("RIDGE_BUILD_DIR")
    if not build:
        pytest.fail("RIDGE_BUILD_DIR is not set (run through ctest, or export it)")
    path = os.path.join(build, "tests", "recurrent_tool")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing; build the recurrent_tool target")
    return path


def run_tool(tmp_path, kernel, isa, arrays, dims, out_sizes):
    src, dst = tmp_path / "in.f32", tmp_path / "out.f32"
    np.concatenate([np.asarray(a, dtype=np.float32).ravel() for a in arrays]).tofile(src)
    res = subprocess.run([tool_path(), kernel, isa, str(src), str(dst), *map(str, dims)],
                         capture_output=True, text=True)
    if res.returncode == 2:
        pytest.skip(f"this CPU has no {isa}")
    assert res.returncode == 0, res.stderr
    out = np.fromfile(dst, dtype=np.float32).astype(np.float64)
    assert out.size == sum(out_sizes)
    return np.split(out, np.cumsum(out_sizes)[:-1])


def assert_close(got, want, what):
    # Relative to each output's own scale: a value near zero in a row of large ones is held
    # to that row's absolute error, not its own (tiny) magnitude.
    scale = max(float(np.abs(want).max()), 1.0)
    err = np.abs(got - want.ravel())
    bad = err > ATOL * scale + RTOL * np.abs(want.ravel())
    assert not bad.any(), (f"{what}: {bad.sum()} of {bad.size} off, worst {err.max():.3g} at "
                           f"{int(err.argmax())} (scale {scale:.3g})")


def l2_normalise(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ---- gated delta rule ----

def gated_delta_reference(S0, q, k, v, g, beta):
    """S0 [H][d_v][d_k]; q, k [T][Hk][d_k]; v [T][H][d_v]; g, beta [T][H]. Float64 throughout."""
    T, H = g.shape
    n_k_heads, d_k = q.shape[1], q.shape[2]
    S = S0.astype(np.float64).copy()
    eye = np.eye(d_k)
    outs, states = [], []
    for t in range(T):
        o_t = np.empty((H, S.shape[1]))
        for h in range(H):
            kh, qh = k[t, h % n_k_heads].astype(np.float64), q[t, h % n_k_heads].astype(np.float64)
            alpha, b = np.exp(np.float64(g[t, h])), np.float64(beta[t, h])
            S[h] = S[h] @ (alpha * (eye - b * np.outer(kh, kh))) + b * np.outer(v[t, h], kh)
            o_t[h] = S[h] @ qh / np.sqrt(d_k)
        outs.append(o_t.ravel())
        states.append(S.copy())
    return np.array(outs), S, np.array(states)


DELTA_SHAPES = [  # n_heads, n_k_heads, d_k, d_v, n_tokens
    (4, 2, 128, 128, 1),
    (4, 2, 128, 128, 7),
    (6, 3, 48, 16, 33),
    (3, 1, 16, 48, 5),
    (2, 2, 20, 7, 3),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", DELTA_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gated_delta_rule_matches_the_paper(tmp_path, isa, shape):
    H, Hk, d_k, d_v, T = shape
    rng = np.random.default_rng(sum(shape))
    f32 = np.float32
    S0 = (0.3 * rng.standard_normal((H, d_v, d_k))).astype(f32)
    q = l2_normalise(rng.standard_normal((T, Hk, d_k))).astype(f32)
    k = l2_normalise(rng.standard_normal((T, Hk, d_k))).astype(f32)
    v = rng.standard_normal((T, H, d_v)).astype(f32)
    g = rng.uniform(-2.0, 0.0, (T, H)).astype(f32)
    beta = rng.uniform(0.0, 1.0, (T, H)).astype(f32)
    out, state, after = run_tool(tmp_path, "delta", isa, [S0, q, k, v, g, beta], [H, Hk, d_k, d_v, T],
                                 [T * H * d_v, H * d_v * d_k, T * H * d_v * d_k])
    want_out, want_state, want_after = gated_delta_reference(S0, q, k, v, g, beta)
    assert_close(out, want_out, "out")
    assert_close(state, want_state, "state")
    assert_close(after, want_after, "states_after")


# ---- Mamba2 scan ----

def softplus(x):
    return np.log1p(np.exp(x))


def ssm_reference(h0, x, dt, A, B, C, n_groups):
    """h0 [H][P][N]; x [T][H][P]; dt [T][H]; A [H]; B, C [T][G][N]. Float64 throughout."""
    T, H = dt.shape
    h = h0.astype(np.float64).copy()
    ys, states = [], []
    for t in range(T):
        y_t = np.empty((H, h.shape[1]))
        for hd in range(H):
            grp = hd // (H // n_groups)
            delta = softplus(np.float64(dt[t, hd]))
            h[hd] = np.exp(delta * A[hd]) * h[hd] + delta * np.outer(x[t, hd], B[t, grp])
            y_t[hd] = h[hd] @ C[t, grp]
        ys.append(y_t.ravel())
        states.append(h.copy())
    return np.array(ys), h, np.array(states)


SSM_SHAPES = [  # n_heads, head_dim, d_state, n_groups, n_tokens
    (4, 16, 128, 2, 1),
    (4, 16, 128, 1, 9),
    (6, 5, 16, 3, 33),
    (2, 3, 21, 1, 4),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", SSM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ssm_scan_matches_the_paper(tmp_path, isa, shape):
    H, P, N, G, T = shape
    rng = np.random.default_rng(100 + sum(shape))
    f32 = np.float32
    h0 = (0.5 * rng.standard_normal((H, P, N))).astype(f32)
    x = rng.standard_normal((T, H, P)).astype(f32)
    dt = (1.5 * rng.standard_normal((T, H))).astype(f32)
    A = -np.exp(rng.uniform(-3.0, 1.4, H)).astype(f32)  # ssm_a = -exp(A_log)
    B = rng.standard_normal((T, G, N)).astype(f32)
    C = rng.standard_normal((T, G, N)).astype(f32)
    y, state, after = run_tool(tmp_path, "ssm", isa, [h0, x, dt, A, B, C], [H, P, N, G, T],
                               [T * H * P, H * P * N, T * H * P * N])
    want_y, want_state, want_after = ssm_reference(h0, x, dt, A.astype(np.float64), B, C, G)
    assert_close(y, want_y, "y")
    assert_close(state, want_state, "state")
    assert_close(after, want_after, "states_after")


# ---- causal conv1d ----

def conv_reference(state, x, w, bias, silu):
    """state [d_conv-1][C] (oldest first); x [T][C]; w [C][d_conv] (last tap on the newest)."""
    d_conv = w.shape[1]
    u = np.concatenate([state, x]).astype(np.float64)  # u[d_conv-1+t] is input t
    T = x.shape[0]
    y = np.zeros((T, x.shape[1]))
    for t in range(T):
        for lag in range(d_conv):
            y[t] += w[:, d_conv - 1 - lag] * u[d_conv - 1 + t - lag]
    if bias is not None:
        y += bias
    if silu:
        y = y / (1.0 + np.exp(-y))
    return y, u[-(d_conv - 1):]


CONV_SHAPES = [  # channels, d_conv, n_tokens
    (37, 4, 1),
    (37, 4, 2),  # fewer tokens than the state holds
    (256, 4, 9),
    (69, 3, 5),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("silu", [True, False])
@pytest.mark.parametrize("shape", CONV_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_causal_conv1d_matches_the_definition(tmp_path, isa, silu, shape):
    channels, d_conv, T = shape
    rng = np.random.default_rng(200 + sum(shape))
    f32 = np.float32
    state = rng.standard_normal((d_conv - 1, channels)).astype(f32)
    x = rng.standard_normal((T, channels)).astype(f32)
    w = (0.5 * rng.standard_normal((channels, d_conv))).astype(f32)
    bias = rng.standard_normal(channels).astype(f32)
    y, new_state = run_tool(tmp_path, "conv", isa, [state, x, w, bias], [channels, d_conv, T, int(silu), 1],
                            [T * channels, (d_conv - 1) * channels])
    want_y, want_state = conv_reference(state, x, w, bias, silu)
    assert_close(y, want_y, "y")
    np.testing.assert_array_equal(new_state, want_state.ravel())
