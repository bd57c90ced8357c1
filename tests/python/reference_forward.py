"""Independent float64 reference forward pass for GGUF models (llama and Mistral/Mixtral
as llama.cpp writes them, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, olmoe).

Reads a GGUF with the `gguf` package, dequantizes every weight with gguf.quants (float32,
exactly the values the quant blocks encode) and runs the transformer with float64
activations in plain numpy. ridge's C++ forward is checked against it: logits close,
greedy continuations equal. It shares no code with ridge.

    import reference_forward as ref
    model = ref.load("stories260K.gguf")
    logits = model.forward([1, 403, 407])        # [3, n_vocab] float64, causal prefill
    states = model.hidden([1, 403, 407])         # [3, n_embd] after the output norm
    tokens = ref.greedy(model, [1, 403, 407], 8)  # 8 greedy tokens after the prompt

Conventions follow llama.cpp where an architecture leaves a choice open:
- RoPE "NORM" (adjacent pairs) for llama, "NEOX" (halves) for qwen2 and gemma3; base from
  <arch>.rope.freq_base (10000 if absent), linear scaling from rope.scaling.factor.
- qwen2: q/k/v biases; output.weight if present, else tied to token_embd.
- gemma3: embedding * sqrt(n_embd); norm weights used as stored (the converter folded
  the +1); QK RMSNorm per head; sandwich norms; GeGLU with tanh GELU; attention scale
  d_head^-0.5 (27B: (n_embd/n_head)^-0.5); layer il is global iff il % 6 == 5, the others
  see the last `sliding_window` positions (key j visible to query i iff i - j < window)
  with RoPE base 10000 and no scaling; tied output; final soft-capping only if the
  metadata has final_logit_softcapping.
- gemma2 (llama.cpp models/gemma2.cpp, HF modeling_gemma2): as gemma3 but no QK norm;
  even layers (il % 2 == 0) are local; local layers keep the global RoPE base and scale
  (rope.freq_base_swa if present); attention scores soft-capped (default 50) after the
  d_head^-0.5 scale (27B, 46 layers: (n_embd/n_head)^-0.5); final soft-capping default 30.
- llama / mistral / phi3 with <arch>.attention.sliding_window > 0: every layer sees the last
  `window` positions (HF Mistral and Phi-3; llama.cpp ignores the key for these).
- qwen3 / qwen3moe: QK RMSNorm per head, NEOX RoPE. olmoe: RMSNorm over the whole q and
  the whole k vector (all heads at once) before RoPE.
- phi3: fused attn_qkv (q, k, v rows) and fused ffn_up (gate rows, then up rows).
- Mixture of experts (llama + expert_count = Mixtral, qwen3moe, olmoe): per token, softmax
  over ffn_gate_inp's logits, the expert_used_count most probable experts (ties to the
  lower id), their probabilities renormalised to sum 1 (not for olmoe), times
  <arch>.expert_weights_scale if set; each expert a SwiGLU FFN.
- qwen3next (Qwen3-Next; models/qwen3next.cpp): qwen35moe with value heads grouped by key
  head (value head h reads key head h // (n_v / n_k)), beta and alpha from one ssm_ba (per
  key head r rows of each), and in older files q, k, v, z from one ssm_in (per key head).
- qwen35moe (Qwen 3.5-MoE; models/qwen35moe.cpp): qwen35's layers with qwen3moe's experts in
  every MLP plus a shared expert, its output times sigmoid(ffn_gate_inp_shexp . x), added.
- qwen35 (Qwen 3.5, a hybrid; llama.cpp models/qwen35.cpp and conversion/qwen.py): layers
  are gated DeltaNet unless attention.recurrent_layers (or every full_attention_interval-th
  layer, default 4) says attention. The attention layers are qwen3's with attn_q holding
  each head's q then a gate (output * sigmoid(gate)), NEOX RoPE on rope.dimension_count
  dims (text positions are equal on every mrope axis). The DeltaNet layers as the Gated
  DeltaNet paper (Yang, Kautz, Hatamizadeh 2024, eq. 10) writes them, per value head h with
  key/query head h % group_count (the converter tiles V heads for that) and S_h in
  R^{d_v x d_k} from zero: [q k v] = causal depthwise conv (ssm_conv1d, kernel conv_kernel,
  no bias) of attn_qkv x, then SiLU; q, k L2-normalised (max(||.||, eps)); alpha =
  exp(softplus(ssm_alpha x + ssm_dt.bias) * ssm_a); beta = sigmoid(ssm_beta x);
  S_t = S_{t-1} alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T; o_t = S_t q_t / sqrt(d_k);
  out = ssm_out (rms_norm(o_h) * ssm_norm * silu(z_h)) with z = attn_gate x. The pre-MLP
  norm is post_attention_norm. nextn (MTP) blocks after the trunk are not run.
- RoPE frequency factors: rope_freqs.weight (Llama 3.x) divides each pair's frequency;
  rope_factors_long/short.weight (LongRoPE, Phi-3): the long ones when the context the
  engine runs with (load(n_ctx=...), default the model's context_length, as llama.cpp's
  -c 0) exceeds rope.scaling.original_context_length, else the short ones; cos and sin are
  multiplied by rope.scaling.attn_factor (llama.cpp; HF's LongRoPE attention_factor).
Set RIDGE_REF_BLAS_THREADS to change the BLAS thread count load() sets (default 1).
"""

from __future__ import annotations

import ctypes
import glob
import math
import os
from dataclasses import dataclass, field

import numpy as np
import gguf
from gguf.quants import dequantize

from reference_hparams import (SUPPORTED_ARCHS, HParams, ReferenceModelError,  # noqa: F401 (re-exported)
                               _Metadata, _read_hparams)


# Matrices held as float32 are upcast to float64 in row chunks of about this many
# elements, so a product never materializes a whole float64 copy of a large matrix.
_UPCAST_CHUNK_ELEMENTS = 1 << 19

# Below this many float64 bytes for all weights, weights are upcast once at load time.
_F64_WEIGHT_BUDGET_BYTES = 3 << 30


def limit_blas_threads(n: int) -> bool:
    """Caps numpy's BLAS threads. The default of one per core makes small float64 products
    30x slower when other processes share the two cores (threads spin waiting on each
    other), so load() sets RIDGE_REF_BLAS_THREADS, default 1. True when it took effect."""
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(n)
        return True
    except ImportError:
        pass
    libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    for lib in sorted(glob.glob(os.path.join(libdir, "*openblas*.so*"))):
        handle = ctypes.CDLL(lib)
        for fn in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                   "openblas_set_num_threads"):
            setter = getattr(handle, fn, None)
            if setter is not None:
                setter(ctypes.c_int(n))
                return True
    return False


class _Weights:
    """Dequantized tensors by GGUF name, numpy-shaped (matrices [out, in])."""

    def __init__(self, reader: gguf.GGUFReader, path: str):
        self.path = path
        self.tensors = {t.name: t for t in reader.tensors}

    def has(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str, shape: tuple | None = None, scaled: bool = True) -> np.ndarray:
        t = self.tensors.get(name)
        if t is None:
            raise ReferenceModelError(f"{self.path}: missing tensor '{name}'")
        numpy_shape = tuple(int(x) for x in reversed(list(t.shape)))
        # np.asarray: a plain view of the mapped bytes. gguf-py splits a tensor into groups
        # of 16 rows, and each piece of a np.memmap pays its subclass's bookkeeping (a third of
        # gguf-py's dequantizing time on the 1.5B model).
        w = np.asarray(dequantize(np.asarray(t.data), t.tensor_type), dtype=np.float32).reshape(numpy_shape)
        # llama.cpp's per-tensor output scale (<matrix>.scale, {1}): y = (W x) * s, the same
        # as W * s. (<matrix>.input_scale it loads and never applies.)
        scale = self.tensors.get(name[:-len(".weight")] + ".scale") if name.endswith(".weight") and scaled else None
        if scale is not None:
            s = np.asarray(scale.data, dtype=np.float32).reshape(-1)
            if s.size == 1:
                w = w * s[0]
            elif w.ndim == 3 and s.size == w.shape[0]:   # an expert tensor: one scale per expert
                w = w * s[:, None, None]
            else:
                raise ReferenceModelError(f"{self.path}: '{name}' has {s.size} scales for shape {w.shape}")
        if shape is not None and w.shape != tuple(shape):
            raise ReferenceModelError(f"{self.path}: tensor '{name}' has shape {w.shape} "
                                 f"(numpy order), expected {tuple(shape)}")
        return w

    def rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Dequantizes only the given rows of a 2-D tensor (for embedding lookup)."""
        t = self.tensors[name]
        n_cols = int(t.shape[0])
        return np.asarray(dequantize(np.asarray(t.data)[ids], t.tensor_type),
                          dtype=np.float32).reshape(len(ids), n_cols)


@dataclass
class _Layer:
    attn_norm: np.ndarray
    wq: np.ndarray              # [n_head * d_head, n_embd]
    wk: np.ndarray              # [n_head_kv * d_head, n_embd]
    wv: np.ndarray              # [n_head_kv * d_value, n_embd]
    wo: np.ndarray              # [n_embd, n_head * d_value]
    bq: np.ndarray | None
    bk: np.ndarray | None
    bv: np.ndarray | None
    bo: np.ndarray | None
    ffn_norm: np.ndarray
    w_gate: np.ndarray | None   # [n_ff, n_embd]; None in MoE layers
    w_up: np.ndarray | None     # [n_ff, n_embd]
    w_down: np.ndarray | None   # [n_embd, n_ff]
    q_norm: np.ndarray | None = None   # [d_head] (olmoe: [n_head * d_head])
    k_norm: np.ndarray | None = None   # [d_head] (olmoe: [n_head_kv * d_head])
    post_attn_norm: np.ndarray | None = None
    post_ffn_norm: np.ndarray | None = None
    gate_inp: np.ndarray | None = None   # [n_expert, n_embd]
    gate_exps: np.ndarray | None = None  # [n_expert, n_ff_exp, n_embd]
    up_exps: np.ndarray | None = None    # [n_expert, n_ff_exp, n_embd]
    down_exps: np.ndarray | None = None  # [n_expert, n_embd, n_ff_exp]
    # the shared expert (qwen35moe): its gate logit's weights [n_embd], gate/up [ff, n_embd], down
    shexp_gate_inp: np.ndarray | None = None
    shexp_gate: np.ndarray | None = None
    shexp_up: np.ndarray | None = None
    shexp_down: np.ndarray | None = None
    # gated DeltaNet (qwen35): attn_qkv, attn_gate, ssm_beta, ssm_alpha [out, n_embd];
    # conv [channels, kernel]; dt, a [n_v]; ssm_norm [d_v]; ssm_out [n_embd, n_v * d_v]
    ssm_qkv: np.ndarray | None = None
    ssm_z: np.ndarray | None = None
    ssm_beta: np.ndarray | None = None
    ssm_alpha: np.ndarray | None = None
    ssm_conv: np.ndarray | None = None
    ssm_dt: np.ndarray | None = None
    ssm_a: np.ndarray | None = None
    ssm_norm: np.ndarray | None = None
    ssm_out: np.ndarray | None = None


class KvCache:
    """Post-RoPE keys and values of every layer for the tokens seen so far."""

    def __init__(self, n_layer: int):
        self.k = [None] * n_layer   # [n_past, n_head_kv, d_head]
        self.v = [None] * n_layer   # [n_past, n_head_kv, d_value]
        self.conv = [None] * n_layer  # DeltaNet layers: the inputs seen so far [n_past, channels]
        self.S = [None] * n_layer     # DeltaNet layers: [n_v, d_v, d_k] (S_h as in the paper)
        self.n_past = 0


def _matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x [n, in] float64 times w [out, in] -> [n, out] float64, exact float64 products."""
    if w.dtype == np.float64:
        return x @ w.T
    n_out, n_in = w.shape
    out = np.empty((x.shape[0], n_out), dtype=np.float64)
    step = max(16, _UPCAST_CHUNK_ELEMENTS // n_in)
    for r in range(0, n_out, step):
        out[:, r:r + step] = x @ w[r:r + step].astype(np.float64).T
    return out


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _yarn_inv_freq(inv_freq: np.ndarray, n_rot: int, base: float, scale: float, yarn: tuple):
    """YaRN's "NTK-by-parts" frequencies as Hugging Face transformers defines them for
    rope_type "yarn": the dims whose wavelength turns more than beta_fast times over the
    original context keep their frequency, those under beta_slow are divided by the
    factor, a linear ramp over the dim index between (bounds floored/ceiled); cos and sin
    are scaled by 0.1 ln(factor) + 1. Returns (inv_freq, mscale)."""
    n_ctx_orig, beta_fast, beta_slow = yarn
    factor = 1.0 / scale

    def correction_dim(n_rotations):
        return n_rot * math.log(n_ctx_orig / (n_rotations * 2 * math.pi)) / (2 * math.log(base))
    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), n_rot - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(n_rot // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    mixed = (inv_freq / factor) * (1 - extrapolation) + inv_freq * extrapolation
    return mixed, 0.1 * math.log(factor) + 1.0


def _rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, scale: float,
          neox: bool, freq_factors: np.ndarray | None, yarn: tuple | None = None,
          attn_factor: float = 1.0) -> np.ndarray:
    """x [n, heads, d]; rotates the first n_rot dims of each head by angle pos*scale*theta_i;
    cos and sin are multiplied by attn_factor (and by YaRN's own factor)."""
    half = n_rot // 2
    inv_freq = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
    mscale = attn_factor
    if yarn is not None:
        inv_freq, yarn_mscale = _yarn_inv_freq(inv_freq, n_rot, base, scale, yarn)
        mscale *= yarn_mscale
        scale = 1.0
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors[:half]
    angle = (pos.astype(np.float64) * scale)[:, None] * inv_freq[None, :]   # [n, half]
    cos = mscale * np.cos(angle)[:, None, :]
    sin = mscale * np.sin(angle)[:, None, :]
    out = x.copy()
    if neox:
        x0, x1 = x[..., :half], x[..., half:n_rot]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    else:
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


class Model:
    def __init__(self, path: str, weight_dtype=None, n_ctx: int | None = None):
        reader = gguf.GGUFReader(path)
        md = _Metadata(reader, path)
        hp = _read_hparams(md)
        self.path = path
        self.hparams = hp
        self._vocab = None
        self.metadata = md
        self._weights = _Weights(reader, path)
        ws = self._weights

        e, nh, nkv, dh, dv, ff = hp.n_embd, hp.n_head, hp.n_head_kv, hp.d_head, hp.d_value, hp.n_ff
        tok = ws.tensors.get("token_embd.weight")
        if tok is None:
            raise ReferenceModelError(f"{path}: missing tensor 'token_embd.weight'")
        if hp.n_vocab == 0:
            hp.n_vocab = int(tok.shape[1])
        if (int(tok.shape[0]), int(tok.shape[1])) != (e, hp.n_vocab):
            raise ReferenceModelError(f"{path}: token_embd.weight is {list(tok.shape)} (ggml order), "
                                 f"expected [{e}, {hp.n_vocab}]")

        def opt(name, shape):
            return ws.get(name, shape) if ws.has(name) else None

        self.layers = []
        for il in range(hp.n_layer):
            b = f"blk.{il}."
            if hp.recurrent_layers and hp.recurrent_layers[il]:
                self.layers.append(self._delta_net_weights(b))
                continue
            wq, wk, wv = self._qkv_weights(b)
            layer = _Layer(
                attn_norm=ws.get(b + "attn_norm.weight", (e,)),
                wq=wq, wk=wk, wv=wv,
                wo=ws.get(b + "attn_output.weight", (e, nh * dv)),
                bq=opt(b + "attn_q.bias", ((2 if hp.attn_gate else 1) * nh * dh,)),
                bk=opt(b + "attn_k.bias", (nkv * dh,)),
                bv=opt(b + "attn_v.bias", (nkv * dv,)),
                bo=opt(b + "attn_output.bias", (e,)),
                ffn_norm=ws.get(b + ("post_attention_norm.weight" if hp.recurrent_layers else "ffn_norm.weight"), (e,)),
                w_gate=None, w_up=None, w_down=None,
            )
            self._set_ffn_weights(b, layer)
            if hp.qk_norm:
                layer.q_norm = ws.get(b + "attn_q_norm.weight", (dh,))
                layer.k_norm = ws.get(b + "attn_k_norm.weight", (dh,))
            if hp.qk_norm_whole:
                layer.q_norm = ws.get(b + "attn_q_norm.weight", (nh * dh,))
                layer.k_norm = ws.get(b + "attn_k_norm.weight", (nkv * dh,))
            if hp.post_norms:
                layer.post_attn_norm = ws.get(b + "post_attention_norm.weight", (e,))
                layer.post_ffn_norm = ws.get(b + "post_ffw_norm.weight", (e,))
            self.layers.append(layer)

        self.output_norm = ws.get("output_norm.weight", (e,))
        self.tied_output = not ws.has("output.weight")
        self.output = ws.get("token_embd.weight" if self.tied_output else "output.weight",
                             (hp.n_vocab, e))
        self.rope_freqs = opt("rope_freqs.weight", (hp.n_rot // 2,))
        if ws.has("rope_factors_long.weight") or ws.has("rope_factors_short.weight"):
            if self.rope_freqs is not None:
                raise ReferenceModelError(f"{path}: both rope_freqs.weight and LongRoPE factors")
            self.n_ctx = hp.n_ctx_train if n_ctx is None else int(n_ctx)
            which = "long" if self.n_ctx > hp.n_ctx_orig else "short"
            self.rope_freqs = ws.get(f"rope_factors_{which}.weight", (hp.n_rot // 2,))
        self.min_router_margin = math.inf   # smallest gap between the k-th and (k+1)-th expert probability

        n_weights = self.output.size + sum(
            v.size for l in self.layers for v in vars(l).values() if v is not None and v.ndim >= 2)
        if weight_dtype is None:
            weight_dtype = np.float64 if n_weights * 8 <= _F64_WEIGHT_BUDGET_BYTES else np.float32
        self.weight_dtype = np.dtype(weight_dtype)
        for layer in self.layers:
            for f, v in vars(layer).items():
                if v is not None:
                    big = v.ndim >= 2
                    setattr(layer, f, v.astype(self.weight_dtype if big else np.float64))
        self.output_norm = self.output_norm.astype(np.float64)
        self.output = self.output.astype(self.weight_dtype)
        if self.rope_freqs is not None:
            self.rope_freqs = self.rope_freqs.astype(np.float64)

    def _delta_net_weights(self, b: str) -> _Layer:
        hp, ws = self.hparams, self._weights
        e = hp.n_embd
        key_dim, value_dim = hp.ssm_n_k * hp.ssm_d_k, hp.ssm_n_v * hp.ssm_d_v
        nk, dk, r = hp.ssm_n_k, hp.ssm_d_k, hp.ssm_n_v // hp.ssm_n_k
        # llama.cpp's qwen3next graph never applies these matrices' .scale tensors (it loads them).
        scaled = not hp.ssm_grouped
        if ws.has(b + "ssm_in.weight") and not ws.has(b + "attn_qkv.weight"):
            # qwen3next's older files: per key head g, rows [q k v z] (llama.cpp prefers attn_qkv)
            rows = ws.get(b + "ssm_in.weight", (2 * key_dim + 2 * value_dim, e), scaled).reshape(nk, 2 * dk + 2 * r * hp.ssm_d_v, e)
            q, k = rows[:, :dk], rows[:, dk:2 * dk]
            v, z = rows[:, 2 * dk:2 * dk + r * hp.ssm_d_v], rows[:, 2 * dk + r * hp.ssm_d_v:]
            qkv = np.concatenate([q.reshape(-1, e), k.reshape(-1, e), v.reshape(-1, e)])
            gate = z.reshape(-1, e)
        else:
            qkv = ws.get(b + "attn_qkv.weight", (2 * key_dim + value_dim, e), scaled)
            gate = ws.get(b + "attn_gate.weight", (value_dim, e), scaled)
        if ws.has(b + "ssm_ba.weight"):  # qwen3next: per key head g, rows [r betas, r alphas]
            ba = ws.get(b + "ssm_ba.weight", (2 * hp.ssm_n_v, e), scaled).reshape(nk, 2 * r, e)
            beta, alpha = ba[:, :r].reshape(-1, e), ba[:, r:].reshape(-1, e)
        else:
            beta = ws.get(b + "ssm_beta.weight", (hp.ssm_n_v, e))
            alpha = ws.get(b + "ssm_alpha.weight", (hp.ssm_n_v, e))
        layer = _Layer(
            attn_norm=ws.get(b + "attn_norm.weight", (e,)), wq=None, wk=None, wv=None, wo=None,
            bq=None, bk=None, bv=None, bo=None,
            ffn_norm=ws.get(b + "post_attention_norm.weight", (e,)),
            w_gate=None, w_up=None, w_down=None,
            ssm_qkv=qkv, ssm_z=gate, ssm_beta=beta, ssm_alpha=alpha,
            ssm_conv=ws.get(b + "ssm_conv1d.weight", (2 * key_dim + value_dim, hp.ssm_conv)),
            ssm_dt=ws.get(b + "ssm_dt.bias", (hp.ssm_n_v,)),
            ssm_a=ws.get(b + "ssm_a", (hp.ssm_n_v,)),
            ssm_norm=ws.get(b + "ssm_norm.weight", (hp.ssm_d_v,)),
            ssm_out=ws.get(b + "ssm_out.weight", (e, value_dim), scaled),
        )
        self._set_ffn_weights(b, layer)
        return layer

    def _set_ffn_weights(self, b: str, layer: _Layer) -> None:
        """The MLP's matrices: dense, or the experts' (and the shared expert's)."""
        hp, ws = self.hparams, self._weights
        e = hp.n_embd
        if hp.n_expert == 0:
            layer.w_gate, layer.w_up, layer.w_down = self._dense_ffn_weights(b)
            return
        ne, fe = hp.n_expert, hp.n_ff_exp
        layer.gate_inp = ws.get(b + "ffn_gate_inp.weight", (ne, e))
        if ws.has(b + "ffn_gate_up_exps.weight"):  # fused: each expert's gate rows, then its up rows
            gate_up = ws.get(b + "ffn_gate_up_exps.weight", (ne, 2 * fe, e))
            layer.gate_exps, layer.up_exps = gate_up[:, :fe], gate_up[:, fe:]
        else:
            layer.gate_exps = ws.get(b + "ffn_gate_exps.weight", (ne, fe, e))
            layer.up_exps = ws.get(b + "ffn_up_exps.weight", (ne, fe, e))
        layer.down_exps = ws.get(b + "ffn_down_exps.weight", (ne, e, fe))
        if hp.n_ff_shexp:
            fs = hp.n_ff_shexp
            layer.shexp_gate_inp = ws.get(b + "ffn_gate_inp_shexp.weight", (e,))
            layer.shexp_gate = ws.get(b + "ffn_gate_shexp.weight", (fs, e))
            layer.shexp_up = ws.get(b + "ffn_up_shexp.weight", (fs, e))
            layer.shexp_down = ws.get(b + "ffn_down_shexp.weight", (e, fs))

    def _qkv_weights(self, b: str):
        """wq, wk, wv; split from a fused attn_qkv (rows q, then k, then v) if that is stored."""
        hp, ws = self.hparams, self._weights
        e, nq, nk, nv = hp.n_embd, hp.n_head * hp.d_head, hp.n_head_kv * hp.d_head, hp.n_head_kv * hp.d_value
        if hp.attn_gate:
            nq *= 2   # each head's q, then its output gate
        if ws.has(b + "attn_qkv.weight"):
            w = ws.get(b + "attn_qkv.weight", (nq + nk + nv, e))
            return w[:nq], w[nq:nq + nk], w[nq + nk:]
        return (ws.get(b + "attn_q.weight", (nq, e)), ws.get(b + "attn_k.weight", (nk, e)),
                ws.get(b + "attn_v.weight", (nv, e)))

    def _dense_ffn_weights(self, b: str):
        """w_gate, w_up, w_down; phi3 stores gate and up as one ffn_up [2 n_ff rows]."""
        hp, ws = self.hparams, self._weights
        e, ff = hp.n_embd, hp.n_ff
        down = ws.get(b + "ffn_down.weight", (e, ff))
        if hp.fused_gate_up:
            w = ws.get(b + "ffn_up.weight", (2 * ff, e))
            return w[:ff], w[ff:], down
        return ws.get(b + "ffn_gate.weight", (ff, e)), ws.get(b + "ffn_up.weight", (ff, e)), down

    # --- token embedding -------------------------------------------------------------

    def _embed(self, tokens: np.ndarray) -> np.ndarray:
        hp = self.hparams
        if tokens.size and (tokens.min() < 0 or tokens.max() >= hp.n_vocab):
            raise ReferenceModelError(f"token id out of range [0, {hp.n_vocab}): "
                                 f"{tokens[(tokens < 0) | (tokens >= hp.n_vocab)][:5].tolist()}")
        if self.tied_output:
            x = self.output[tokens].astype(np.float64)
        else:
            x = self._weights.rows("token_embd.weight", tokens).astype(np.float64)
        return x * hp.embd_scale

    # --- one layer ---------------------------------------------------------------------

    def _attention(self, il: int, h: np.ndarray, pos: np.ndarray, cache: KvCache) -> np.ndarray:
        hp, L = self.hparams, self.layers[il]
        n = h.shape[0]
        q = _matmul(h, L.wq)
        if L.bq is not None:
            q += L.bq
        gate = None
        if hp.attn_gate:
            qg = q.reshape(n, hp.n_head, 2, hp.d_head)
            q, gate = qg[:, :, 0, :].reshape(n, -1), qg[:, :, 1, :].reshape(n, -1)
        k = _matmul(h, L.wk)
        v = _matmul(h, L.wv)
        if L.bk is not None:
            k += L.bk
        if L.bv is not None:
            v += L.bv
        if hp.qk_norm_whole:
            q = _rms_norm(q, L.q_norm, hp.rms_eps)
            k = _rms_norm(k, L.k_norm, hp.rms_eps)
        q = q.reshape(n, hp.n_head, hp.d_head)
        k = k.reshape(n, hp.n_head_kv, hp.d_head)
        v = v.reshape(n, hp.n_head_kv, hp.d_value)
        if hp.qk_norm:
            q = _rms_norm(q, L.q_norm, hp.rms_eps)
            k = _rms_norm(k, L.k_norm, hp.rms_eps)

        swa = hp.swa_layers[il]
        base = hp.rope_base_swa if swa else hp.rope_base
        scale = hp.rope_scale_swa if swa else hp.rope_scale
        yarn = hp.yarn_swa if swa else hp.yarn
        q = _rope(q, pos, hp.n_rot, base, scale, hp.rope_neox, self.rope_freqs, yarn, hp.rope_attn_factor)
        k = _rope(k, pos, hp.n_rot, base, scale, hp.rope_neox, self.rope_freqs, yarn, hp.rope_attn_factor)

        if cache.k[il] is None:
            cache.k[il], cache.v[il] = k, v
        else:
            cache.k[il] = np.concatenate([cache.k[il], k])
            cache.v[il] = np.concatenate([cache.v[il], v])
        k_all, v_all = cache.k[il], cache.v[il]          # [n_kv_tok, n_head_kv, d]
        kv_pos = np.arange(k_all.shape[0])

        # key j visible to query i iff j <= i and, on sliding-window layers, i - j < window
        delta = pos[:, None] - kv_pos[None, :]
        allowed = delta >= 0
        if swa and hp.sliding_window > 0:
            allowed &= delta < hp.sliding_window

        group = hp.n_head // hp.n_head_kv
        out = np.empty((n, hp.n_head, hp.d_value), dtype=np.float64)
        for hk in range(hp.n_head_kv):
            qh = q[:, hk * group:(hk + 1) * group, :].transpose(1, 0, 2)   # [group, n, d]
            scores = np.matmul(qh, k_all[:, hk, :].T) * hp.attn_scale       # [group, n, t]
            if hp.attn_softcap > 0:
                scores = hp.attn_softcap * np.tanh(scores / hp.attn_softcap)
            scores = np.where(allowed[None], scores, -np.inf)
            scores -= scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(axis=-1, keepdims=True)
            out[:, hk * group:(hk + 1) * group, :] = np.matmul(p, v_all[:, hk, :]).transpose(1, 0, 2)
        out = out.reshape(n, hp.n_head * hp.d_value)
        if gate is not None:
            out = out / (1.0 + np.exp(-gate))
        y = _matmul(out, L.wo)
        if L.bo is not None:
            y += L.bo
        return y

    def _delta_net(self, il: int, h: np.ndarray, cache: KvCache) -> np.ndarray:
        """A gated DeltaNet layer over the new tokens h [n, n_embd], from the paper's
        recurrence (see the module docstring), carrying the layer's state in the cache."""
        hp, L = self.hparams, self.layers[il]
        n = h.shape[0]
        nk, nv, dk, dv, K = hp.ssm_n_k, hp.ssm_n_v, hp.ssm_d_k, hp.ssm_d_v, hp.ssm_conv
        key_dim = nk * dk
        mixed = _matmul(h, L.ssm_qkv)                                   # [n, channels]
        seen = mixed if cache.conv[il] is None else np.concatenate([cache.conv[il], mixed])
        cache.conv[il] = seen
        start = seen.shape[0] - n
        padded = np.concatenate([np.zeros((K - 1, seen.shape[1])), seen])
        conv = np.empty_like(mixed)
        for t in range(n):          # output t sees inputs start+t-K+1 .. start+t (zeros before 0)
            window = padded[start + t:start + t + K]                    # [K, channels], oldest first
            conv[t] = np.sum(window.T * L.ssm_conv, axis=1)
        conv = _silu(conv)
        q = conv[:, :key_dim].reshape(n, nk, dk)
        k = conv[:, key_dim:2 * key_dim].reshape(n, nk, dk)
        v = conv[:, 2 * key_dim:].reshape(n, nv, dv)
        eps = hp.rms_eps
        q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), eps)
        k = k / np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), eps)
        a = _matmul(h, L.ssm_alpha) + L.ssm_dt                           # [n, nv]
        softplus = np.where(a > 20.0, a, np.log1p(np.exp(np.minimum(a, 20.0))))
        alpha = np.exp(softplus * L.ssm_a)
        beta = 1.0 / (1.0 + np.exp(-_matmul(h, L.ssm_beta)))
        S = np.zeros((nv, dv, dk)) if cache.S[il] is None else cache.S[il]
        o = np.empty((n, nv, dv))
        eye = np.eye(dk)
        for t in range(n):
            for hv in range(nv):
                hk = hv // (nv // nk) if hp.ssm_grouped else hv % nk   # qwen3next groups, qwen35 tiles
                kt, qt = k[t, hk], q[t, hk]
                S[hv] = S[hv] @ (alpha[t, hv] * (eye - beta[t, hv] * np.outer(kt, kt))) + beta[t, hv] * np.outer(v[t, hv], kt)
                o[t, hv] = S[hv] @ qt / math.sqrt(dk)
        cache.S[il] = S
        z = _matmul(h, L.ssm_z).reshape(n, nv, dv)
        y = _rms_norm(o, L.ssm_norm, eps) * _silu(z)
        return _matmul(y.reshape(n, nv * dv), L.ssm_out)

    def _ffn(self, il: int, h: np.ndarray) -> np.ndarray:
        L = self.layers[il]
        if L.gate_inp is not None:
            return self._moe_ffn(L, h)
        gate = _matmul(h, L.w_gate)
        act = _gelu_tanh(gate) if self.hparams.gelu_ffn else _silu(gate)
        return _matmul(act * _matmul(h, L.w_up), L.w_down)

    def _moe_ffn(self, L: _Layer, h: np.ndarray) -> np.ndarray:
        """Each token goes to its n_expert_used most probable experts (softmax over the
        router logits), weighted by their probabilities (renormalised if the family does)."""
        hp = self.hparams
        k = hp.n_expert_used
        logits = _matmul(h, L.gate_inp)                                  # [n, n_expert]
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        order = np.argsort(-probs, axis=1, kind="stable")                # ties: lower id first
        chosen = order[:, :k]                                            # [n, k]
        weights = np.take_along_axis(probs, chosen, axis=1)              # [n, k]
        if k < hp.n_expert:
            runner_up = np.take_along_axis(probs, order[:, k:k + 1], axis=1)[:, 0]
            self.min_router_margin = min(self.min_router_margin, float(np.min(weights[:, -1] - runner_up)))
        if hp.expert_renorm:
            weights = weights / weights.sum(axis=1, keepdims=True)
        if hp.expert_weights_scale not in (0.0, 1.0):
            weights = weights * hp.expert_weights_scale
        out = np.zeros_like(h)
        for e in range(hp.n_expert):
            rows, slot = np.nonzero(chosen == e)
            if rows.size == 0:
                continue
            x = h[rows]
            y = _matmul(_silu(_matmul(x, L.gate_exps[e])) * _matmul(x, L.up_exps[e]), L.down_exps[e])
            out[rows] += weights[rows, slot][:, None] * y
        if L.shexp_gate_inp is not None:  # every token's shared expert, scaled by sigmoid(gate . x)
            shared = _matmul(_silu(_matmul(h, L.shexp_gate)) * _matmul(h, L.shexp_up), L.shexp_down)
            out += shared / (1.0 + np.exp(-_matmul(h, L.shexp_gate_inp[None, :])))
        return out

    # --- public ------------------------------------------------------------------------

    def new_cache(self) -> KvCache:
        return KvCache(self.hparams.n_layer)

    def forward(self, tokens, cache: KvCache | None = None, rows=None) -> np.ndarray:
        """Logits [len(rows), n_vocab] float64 for `tokens` appended after the cache.

        Without a cache it is a full causal prefill from position 0. `rows` selects which
        of the new tokens get logits (default all; "last" for the final one only).
        """
        hp = self.hparams
        x = self._residual(tokens, cache)
        if rows is None:
            sel = x
        elif isinstance(rows, str) and rows == "last":
            sel = x[-1:]
        else:
            sel = x[np.asarray(rows, dtype=np.int64)]
        logits = _matmul(_rms_norm(sel, self.output_norm, hp.rms_eps), self.output)
        if hp.final_softcap > 0:
            logits = hp.final_softcap * np.tanh(logits / hp.final_softcap)
        return logits

    def hidden(self, tokens, cache: KvCache | None = None) -> np.ndarray:
        """Final hidden states [n_tokens, n_embd] float64 of `tokens` appended after the
        cache: after the output norm, before the output projection (what embeddings pool)."""
        return _rms_norm(self._residual(tokens, cache), self.output_norm, self.hparams.rms_eps)

    def _residual(self, tokens, cache: KvCache | None) -> np.ndarray:
        """The residual stream after the last layer, [n_tokens, n_embd]."""
        hp = self.hparams
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if tokens.size == 0:
            raise ReferenceModelError("forward needs at least one token")
        if cache is None:
            cache = self.new_cache()
        pos = np.arange(cache.n_past, cache.n_past + tokens.size)
        x = self._embed(tokens)
        for il in range(hp.n_layer):
            L = self.layers[il]
            normed = _rms_norm(x, L.attn_norm, hp.rms_eps)
            if hp.recurrent_layers and hp.recurrent_layers[il]:
                a = self._delta_net(il, normed, cache)
            else:
                a = self._attention(il, normed, pos, cache)
            if hp.post_norms:
                a = _rms_norm(a, L.post_attn_norm, hp.rms_eps)
            x = x + a
            f = self._ffn(il, _rms_norm(x, L.ffn_norm, hp.rms_eps))
            if hp.post_norms:
                f = _rms_norm(f, L.post_ffn_norm, hp.rms_eps)
            x = x + f
        cache.n_past += tokens.size
        return x

    # --- vocabulary helpers (for sanity checks, not a tokenizer) -----------------------

    def vocab(self) -> list[str]:
        if self._vocab is None:
            self._vocab = list(self.metadata.get("tokenizer.ggml.tokens", []))
        return self._vocab

    def decode(self, ids) -> str:
        """Joins token strings; undoes SentencePiece's ▁ and GPT-2's byte-to-unicode map."""
        toks = self.vocab()
        pieces = [toks[i] for i in ids]
        if self.metadata.get("tokenizer.ggml.model") == "gpt2":
            byte_of = _gpt2_unicode_to_byte()
            data = bytearray()
            for p in pieces:
                for ch in p:
                    data.extend([byte_of[ch]] if ch in byte_of else ch.encode())
            return data.decode("utf-8", errors="replace")
        out = bytearray()
        for p in pieces:
            if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                out.append(int(p[3:5], 16))
            else:
                out.extend(p.replace("\u2581", " ").encode())
        return out.decode("utf-8", errors="replace")


def _gpt2_unicode_to_byte() -> dict:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def load(path: str, weight_dtype=None, n_ctx: int | None = None) -> Model:
    """Loads a GGUF. weight_dtype None: float64 weights when they fit in ~3 GiB, else
    float32 upcast chunk by chunk at each product (same results, less memory). n_ctx: the
    context size the engine under test runs with; it only picks LongRoPE's long or short
    factors (default: the model's context_length)."""
    limit_blas_threads(int(os.environ.get("RIDGE_REF_BLAS_THREADS", "1")))
    return Model(str(path), weight_dtype, n_ctx)


def greedy(model: Model, prompt_tokens, n: int, cache: KvCache | None = None) -> list[int]:
    """The n argmax tokens that follow the prompt (prefill once, then one token a step)."""
    if n <= 0:
        return []
    cache = cache if cache is not None else model.new_cache()
    logits = model.forward(prompt_tokens, cache, rows="last")
    return continue_greedy(model, cache, logits[-1], n)


def continue_greedy(model: Model, cache: KvCache, last_logits: np.ndarray, n: int) -> list[int]:
    """n greedy tokens after a prefill whose last-position logits are `last_logits`
    (ties go to the lowest id, as np.argmax does)."""
    out: list[int] = []
    logits = last_logits
    for i in range(n):
        out.append(int(np.argmax(logits)))
        if i + 1 < n:
            logits = model.forward([out[-1]], cache)[-1]
    return out
