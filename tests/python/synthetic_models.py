"""Small random-weight GGUF models in the exact layout llama.cpp's converter writes for
each model family, so that ridge can be checked on the families users bring without
downloading them.

    import synthetic_models as sm
    info = sm.write_model(tmp_path / "qwen3.gguf", "qwen3")               # F32, seed fixed
    info = sm.write_model(tmp_path / "q.gguf", "qwen3", rope_scaling="yarn", dtype="f16")
    info["n_vocab"], info["sliding_window"]                                # what tests need

Every tensor name, shape (ggml order [in, out], experts [in, out, n_expert]), dtype rule
and metadata key below is what llama.cpp's convert_hf_to_gguf.py writes for the family
(as of the checkout in ~/.cache/ridge/llamacpp-src: conversion/{base,llama,qwen,gemma,
phi,olmo}.py, gguf-py/gguf/constants.py) and what src/models/<family>.cpp reads. Only the
sizes are shrunk. The tokenizer metadata is copied unchanged from a real vocabulary in
fixtures/vocab (the closest one to the family's own tokenizer), so n_vocab is that
vocabulary's size. Weights are normal(0, 0.1) with a fixed seed per family (norm weights
1 + normal(0, 0.1)), which keeps attention scores and logits of order 1.

family    arch      layout (tensors per layer; keys beyond block/context/embedding/ffn/heads/eps)
--------  --------  ---------------------------------------------------------------------------
llama     llama     Llama 3.2. attn_q/k/v/output, ffn_gate/up/down; global rope_freqs.weight
                    [d_head/2] (llama3 factors), no output.weight (tied); llama.vocab_size,
                    rope.dimension_count, key/value_length, rope.freq_base 500000.
                    [conversion/llama.py LlamaModel.generate_extra_tensors; models/llama.cpp]
mistral   llama     Mistral 7B v0.1: MistralForCausalLM converts to arch "llama" (llama.cpp has
                    no "mistral" arch), output.weight, and NO sliding-window key: llama.cpp drops
                    HF's sliding_window 4096 and models/llama.cpp reads none. sliding_window=N
                    adds llama.attention.sliding_window (HF's window on every layer; ridge reads
                    it). [conversion/__init__.py, conversion/llama.py]
qwen3     qwen3     Qwen3 0.6B. attn_q_norm/attn_k_norm [d_head], no biases, n_head*d_head !=
                    n_embd, key/value_length, rope.freq_base 1e6, NEOX RoPE, tied output;
                    rope_scaling="yarn": rope.scaling.type/factor/original_context_length.
                    [conversion/qwen.py Qwen3Model, conversion/base.py; models/qwen3.cpp]
gemma2    gemma2    attn_*, post_attention_norm, ffn_norm, post_ffw_norm, ffn_gate/up/down,
                    tied; attn/final_logit_softcapping 50/30, attention.sliding_window,
                    key/value_length, no rope keys (base 10000), add_space_prefix false; norm
                    weights stored +1. Math: embd * sqrt(n_embd), even layers local (swa
                    pattern 2), q * d_head^-0.5, GELU-tanh GLU.
                    [conversion/gemma.py Gemma2Model; models/gemma2.cpp]
phi3      phi3      Phi-3.5-mini. attn_qkv [n_embd, n_embd + 2 n_embd_kv] (q, k, v rows),
                    ffn_up [n_embd, 2 n_ff] (gate rows, then up rows), output.weight;
                    LongRoPE: global rope_factors_long/short.weight [n_rot/2],
                    rope.scaling.attn_factor sqrt(1 + ln(ctx/orig)/ln(orig)),
                    rope.scaling.original_context_length, and NO rope.scaling.type key;
                    attention.sliding_window 262144 (llama.cpp ignores phi3's window).
                    [conversion/phi.py Phi3MiniModel; models/phi3.cpp (ggml_swiglu)]
qwen3moe  qwen3moe  qwen3 attention; ffn_gate_inp [n_embd, n_expert] (always F32),
                    ffn_gate_exps/ffn_up_exps [n_embd, n_ff_exp, n_expert], ffn_down_exps
                    [n_ff_exp, n_embd, n_expert]; expert_count, expert_used_count,
                    expert_feed_forward_length; output.weight. Softmax, top-k, renormalised.
                    [conversion/qwen.py Qwen2MoeModel/Qwen3MoeModel; models/qwen3moe.cpp]
mixtral   llama     Mixtral 8x7B: arch "llama" + llama.expert_count/expert_used_count,
                    feed_forward_length = one expert's width, the expert tensors above,
                    output.weight. Softmax, top-k, renormalised.
                    [conversion/llama.py (block_sparse_moe merge); models/llama.cpp MoE branch]
olmoe     olmoe     OLMoE-1B-7B. attn_q_norm/attn_k_norm [n_embd] over the whole q / k vector
                    (so llama.cpp needs n_head_kv == n_head), the expert tensors above with
                    feed_forward_length = one expert's width (no expert_feed_forward_length),
                    output.weight required, rms eps 1e-5. Softmax, top-k, NOT renormalised.
                    [conversion/olmo.py OlmoeModel; models/olmoe.cpp]
qwen35    qwen35    Qwen 3.5 (dense hybrid). Gated-DeltaNet layers: attn_norm, attn_qkv [n_embd,
                    2 key_dim + value_dim] (q, k, v rows; V heads in the converter's tiled
                    order), attn_gate [n_embd, value_dim], ssm_conv1d [kernel, channels] (F32),
                    ssm_dt.bias, ssm_a (-exp(A_log)) [n_v], ssm_beta/ssm_alpha [n_embd, n_v],
                    ssm_norm [d_v] (not +1), ssm_out [value_dim, n_embd]; attention layers:
                    attn_q [n_embd, 2 n_head d_head] (each head's q, then its gate), attn_k/v,
                    attn_q_norm/attn_k_norm [d_head], attn_output; every layer:
                    post_attention_norm (the pre-MLP norm), ffn_gate/up/down. Keys: ssm.*,
                    full_attention_interval, attention.recurrent_layers (bools, from HF's
                    layer_types), rope.dimension_count d_head/4 (partial_rotary_factor 0.25),
                    rope.dimension_sections [.., .., .., 0], key/value_length, tied output.
                    [conversion/qwen.py Qwen3NextModel, _LinearAttentionVReorderBase,
                    Qwen3_5TextModel; models/qwen35.cpp]
qwen3next qwen3next Qwen3-Next-80B-A3B: qwen35moe's tensors, but value heads grouped by key head
                    (not tiled), ssm_ba [n_embd, 2 n_v] (per key head r betas, r alphas) for
                    ssm_beta/ssm_alpha, and (ssm_in=True) the older ssm_in [n_embd, 2 key_dim +
                    2 value_dim] (per key head q, k, v, z) for attn_qkv/attn_gate; no
                    rope.dimension_sections. [conversion/qwen.py Qwen3NextModel; models/qwen3next.cpp]
qwen35moe qwen35moe Qwen 3.5-MoE (35B-A3B): qwen35's layers with the qwen3moe expert tensors in
                    every MLP and a shared expert: ffn_gate_inp_shexp [n_embd] (a vector, F32),
                    ffn_gate/up_shexp [n_embd, n_ff_shexp], ffn_down_shexp [n_ff_shexp,
                    n_embd]; expert_feed_forward_length, expert_shared_feed_forward_length;
                    output.weight. Softmax, top-k, renormalised; shared output times
                    sigmoid(ffn_gate_inp_shexp . x). [conversion/qwen.py Qwen3_5MoeTextModel,
                    Qwen2MoeModel; models/qwen35moe.cpp]

Vocabularies: llama, mistral, mixtral, gemma2 use ggml-vocab-llama-spm (SentencePiece;
Gemma's own 256k SPM vocabulary is not in the fixtures); phi3 ggml-vocab-phi-3 (its own);
qwen3, qwen3moe ggml-vocab-gpt-2 (byte-level BPE; Qwen's is not available as a GGUF);
olmoe ggml-vocab-mpt (GPT-NeoX BPE, the family of OLMoE's tokenizer).

Tensor dtypes follow the converter: 1-D tensors, *_norm.weight and ffn_gate_inp.weight
are always F32; the other matrices are F32 (dtype="f32", the default) or F16
(dtype="f16", the converter's --outtype f16), and general.file_type says which.
"""

from __future__ import annotations

import functools
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
VOCAB_DIR = ROOT.parent / "shared" / "fixtures" / "vocab"


@dataclass(frozen=True)
class FamilySpec:
    arch: str
    vocab: str                     # fixtures/vocab file the tokenizer metadata comes from
    n_embd: int
    n_head: int
    n_head_kv: int
    d_head: int
    n_layer: int
    n_ff: int
    rope_base: float | None        # None: the converter writes no rope.freq_base
    rms_eps: float
    n_ctx_train: int
    tied_output: bool
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0              # qwen3moe, qwen35moe: expert_feed_forward_length
    n_ff_shexp: int = 0            # qwen35moe: expert_shared_feed_forward_length
    sliding_window: int = 0
    rope_scaling: str | None = None
    extra_keys: dict = field(default_factory=dict)


FAMILIES: dict[str, FamilySpec] = {
    "llama": FamilySpec("llama", "ggml-vocab-llama-spm.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=16,
                        n_layer=2, n_ff=128, rope_base=500000.0, rms_eps=1e-5, n_ctx_train=131072,
                        tied_output=True, rope_scaling="llama3"),
    "mistral": FamilySpec("llama", "ggml-vocab-llama-spm.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=16,
                          n_layer=2, n_ff=160, rope_base=10000.0, rms_eps=1e-5, n_ctx_train=32768,
                          tied_output=False),
    "qwen3": FamilySpec("qwen3", "ggml-vocab-gpt-2.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=32,
                        n_layer=2, n_ff=128, rope_base=1000000.0, rms_eps=1e-6, n_ctx_train=40960,
                        tied_output=True),
    "gemma2": FamilySpec("gemma2", "ggml-vocab-llama-spm.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=32,
                         n_layer=4, n_ff=128, rope_base=None, rms_eps=1e-6, n_ctx_train=8192,
                         tied_output=True, sliding_window=16),
    "phi3": FamilySpec("phi3", "ggml-vocab-phi-3.gguf", n_embd=96, n_head=6, n_head_kv=2, d_head=16,
                       n_layer=2, n_ff=192, rope_base=10000.0, rms_eps=1e-5, n_ctx_train=4096,
                       tied_output=False, sliding_window=262144, rope_scaling="longrope"),
    "qwen3moe": FamilySpec("qwen3moe", "ggml-vocab-gpt-2.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=32,
                           n_layer=2, n_ff=192, rope_base=1000000.0, rms_eps=1e-6, n_ctx_train=40960,
                           tied_output=False, n_expert=8, n_expert_used=2, n_ff_exp=48),
    "mixtral": FamilySpec("llama", "ggml-vocab-llama-spm.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=16,
                          n_layer=2, n_ff=64, rope_base=1000000.0, rms_eps=1e-5, n_ctx_train=32768,
                          tied_output=False, n_expert=8, n_expert_used=2),
    "olmoe": FamilySpec("olmoe", "ggml-vocab-mpt.gguf", n_embd=64, n_head=4, n_head_kv=4, d_head=16,
                        n_layer=2, n_ff=48, rope_base=10000.0, rms_eps=1e-5, n_ctx_train=4096,
                        tied_output=False, n_expert=8, n_expert_used=2),
    "qwen35": FamilySpec("qwen35", "ggml-vocab-gpt-2.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=32,
                         n_layer=4, n_ff=128, rope_base=10000000.0, rms_eps=1e-6, n_ctx_train=262144,
                         tied_output=True),
    "qwen35moe": FamilySpec("qwen35moe", "ggml-vocab-gpt-2.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=32,
                            n_layer=4, n_ff=128, rope_base=10000000.0, rms_eps=1e-6, n_ctx_train=262144,
                            tied_output=False, n_expert=8, n_expert_used=2, n_ff_exp=32, n_ff_shexp=48),
    "qwen3next": FamilySpec("qwen3next", "ggml-vocab-gpt-2.gguf", n_embd=64, n_head=4, n_head_kv=2, d_head=32,
                            n_layer=4, n_ff=128, rope_base=10000000.0, rms_eps=1e-6, n_ctx_train=262144,
                            tied_output=False, n_expert=8, n_expert_used=2, n_ff_exp=32, n_ff_shexp=48),
}

# Qwen 3.5's linear-attention sizes, shrunk: 2 key heads of 16, 4 value heads of 16 (so
# value heads outnumber key heads, as in every released size), conv kernel 4, one full
# attention layer in 2 (released models: 1 in 4).
QWEN35_SSM = {"conv_kernel": 4, "d_k": 16, "n_k": 2, "n_v": 4, "interval": 2, "rope_sections": [2, 1, 1, 0]}

# Llama 3.x frequency factors (conversion/llama.py generate_extra_tensors) with the
# context shrunk with the model: Llama 3.2 has factor 32 over 8192 tokens; here factor 8
# over 64 tokens, so that within a 64-token test some pairs keep their frequency, some are
# divided by 8 and some lie on the smooth ramp between.
LLAMA3_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
# YaRN as Qwen3 model cards enable it (factor 4 over the native context), shrunk likewise.
YARN_ROPE = {"factor": 4.0, "original_max_position_embeddings": 32}
# LongRoPE as Phi-3.5-mini carries it (131072 over 4096), shrunk: 4096 over 32 tokens.
LONGROPE_ORIGINAL_CONTEXT = 32

OVERRIDABLE = ("n_embd", "n_head", "n_head_kv", "d_head", "n_layer", "n_ff", "n_expert", "n_expert_used",
               "n_ff_exp", "n_ff_shexp", "sliding_window", "rope_scaling", "n_ctx_train", "tied_output", "rope_base")


def llama3_rope_factors(d_rot: int, base: float, factor: float, low_freq_factor: float,
                        high_freq_factor: float, original_max_position_embeddings: int) -> np.ndarray:
    """rope_freqs.weight as conversion/llama.py computes it from HF's rope_scaling "llama3"."""
    freqs = 1.0 / (base ** (np.arange(0, d_rot, 2, dtype=np.float32) / d_rot))
    low_wavelen = original_max_position_embeddings / low_freq_factor
    high_wavelen = original_max_position_embeddings / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


@functools.lru_cache(maxsize=None)
def _tokenizer_fields(vocab_path: Path) -> tuple:
    """The tokenizer.* fields of a vocabulary GGUF as (name, value type, value); parsing a
    50k-token vocabulary takes seconds, so each is read once per process."""
    import gguf

    reader = gguf.GGUFReader(str(vocab_path))
    return tuple((f.name, f.types[0], f.contents()) for f in reader.fields.values()
                 if f.name.startswith("tokenizer."))


def _copy_tokenizer(writer, vocab_path: Path) -> int:
    import gguf

    n_vocab = 0
    for name, vtype, value in _tokenizer_fields(vocab_path):
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, value)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            writer.add_key_value(name, value, vtype)
    if n_vocab == 0:
        raise ValueError(f"{vocab_path}: no tokenizer.ggml.tokens")
    return n_vocab


class _Tensors:
    """Random tensors in numpy order ([out, in]; experts [n_expert, out, in]) with the
    converter's dtype rules."""

    def __init__(self, seed: int, f16: bool, layer_std: float = 0.1):
        self.rng = np.random.default_rng(seed)
        self.f16 = f16
        self.layer_std = layer_std  # of the blk.* matrices
        self.items: dict[str, np.ndarray] = {}

    def matrix(self, name: str, *shape: int, std: float = 0.1):
        if name.startswith("blk."):
            std = self.layer_std
        w = (self.rng.standard_normal(shape) * std).astype(np.float32)
        keep_f32 = name.endswith("ffn_gate_inp.weight")
        self.items[name] = w.astype(np.float16) if self.f16 and not keep_f32 else w

    def f32_matrix(self, name: str, *shape: int, std: float = 0.1):
        """A matrix the converter keeps in F32 whatever --outtype says (ssm_conv1d)."""
        self.items[name] = (self.rng.standard_normal(shape) * std).astype(np.float32)

    def norm(self, name: str, n: int):
        self.items[name] = (1.0 + 0.1 * self.rng.standard_normal(n)).astype(np.float32)

    def vector(self, name: str, values: np.ndarray):
        self.items[name] = np.asarray(values, dtype=np.float32)


IQ4_NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                         dtype=np.float32)


def _nearest_iq4(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Codebook index nearest to x / scale, per element (scale broadcasts)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(scale == 0, 0, x / scale)
    return np.argmin(np.abs(v[..., None] - IQ4_NL_VALUES), axis=-1).astype(np.uint8)


def quantize_codebook(rows: np.ndarray, qtype) -> np.ndarray:
    """IQ4_NL / IQ4_XS blocks by the plain rule (scale from the largest magnitude, each
    value to its nearest code), which gguf.quants lacks; llama-quantize searches scales
    harder, but the layout is the same. Returns uint8 [..., row bytes]."""
    import gguf

    T = gguf.GGMLQuantizationType
    lead, n = rows.shape[:-1], rows.shape[-1]
    if qtype == T.IQ4_NL:
        x = rows.reshape(-1, 32)
        amax = np.take_along_axis(x, np.argmax(np.abs(x), axis=1)[:, None], axis=1)
        d = (amax / -127).astype(np.float16)
        q = _nearest_iq4(x, d.astype(np.float32))
        qs = q[:, :16] | (q[:, 16:] << 4)
        return np.concatenate([d.view(np.uint8), qs], axis=1).reshape(*lead, -1)
    if qtype == T.IQ4_XS:
        x = rows.reshape(-1, 8, 32)
        amax = np.take_along_axis(x, np.argmax(np.abs(x), axis=2)[..., None], axis=2)[..., 0]  # [b, 8]
        group = amax / -127
        d = (np.max(np.abs(group), axis=1, keepdims=True) / 31).astype(np.float16)
        d32 = d.astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            ls = np.where(d32 == 0, 0, np.rint(group / d32))
        ls = np.clip(ls, -32, 31).astype(np.int32) + 32                  # 6-bit, offset 32
        q = _nearest_iq4(x, (d32 * (ls - 32))[..., None])                  # [b, 8, 32]
        qs = (q[..., :16] | (q[..., 16:] << 4)).reshape(-1, 128)
        scales_l = ((ls[:, 0::2] & 0xf) | ((ls[:, 1::2] & 0xf) << 4)).astype(np.uint8)
        scales_h = np.zeros(len(ls), dtype=np.uint16)
        for g in range(8):
            scales_h |= ((ls[:, g] >> 4) & 3).astype(np.uint16) << (2 * g)
        out = np.concatenate([d.view(np.uint8), scales_h[:, None].view(np.uint8), scales_l, qs], axis=1)
        return out.reshape(*lead, -1)
    raise ValueError(f"quantize_codebook: {qtype.name} is not a codebook type")


def quantize_nvfp4(rows: np.ndarray) -> np.ndarray:
    """NVFP4 blocks by ggml's reference rule (quantize_row_nvfp4_ref: per 16 values an
    unsigned E4M3 scale of amax / 6, each value to its nearest E2M1 code), which gguf.quants
    lacks. Returns uint8 [..., row bytes]."""
    from gguf.quants import NVFP4

    lead = rows.shape[:-1]
    x = rows.reshape(-1, 4, 16).astype(np.float32)
    ue = NVFP4.fp32_to_ue4m3(np.abs(x).max(axis=2) / np.float32(6)).astype(np.uint8)  # [b, 4]
    d = NVFP4.ue4m3_to_fp32(ue).astype(np.float32)[..., None]
    kvalues = np.array(NVFP4.kvalues, dtype=np.float32)
    q = np.argmin(np.abs(d[..., None] * kvalues - x[..., None]), axis=-1).astype(np.uint8)  # [b, 4, 16]
    qs = (q[..., :8] | (q[..., 8:] << 4)).reshape(-1, 32)
    return np.concatenate([ue, qs], axis=1).reshape(*lead, -1)


# The grid types, which neither gguf.quants nor ridge quantizes: (offset of the block's
# f16 scale, the largest |grid value * group scale| it multiplies). IQ1_M keeps its f16 in
# the top nibbles of the four uint16 at its offset.
GRID_SCALES = {
    "IQ2_XXS": (0, 15.5 / 4 * 43), "IQ2_XS": (0, 15.5 / 4 * 43), "IQ2_S": (0, 15.5 / 4 * 43),
    "IQ3_XXS": (0, 15.5 / 2 * 62), "IQ3_S": (0, 31 * 15),
    "IQ1_S": (0, 15 * 1.125), "IQ1_M": (48, 15 * 1.125),
}


def random_grid_blocks(rows: np.ndarray, qtype) -> np.ndarray:
    """Grid-type blocks of random codes under scales that bound each block by its data's
    largest magnitude: the layout and the size of weights a llama-quantize file carries,
    though not values fitted to `rows` (a lattice search is beyond a test helper). The
    codes are seeded from the data, so a file is the same on every run."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    x = rows.reshape(-1, block)
    rng = np.random.default_rng(zlib.crc32(rows.tobytes()))
    blocks = rng.integers(0, 256, size=(len(x), size), dtype=np.uint8)
    offset, max_code = GRID_SCALES[qtype.name]
    d = (np.abs(x).max(axis=1) / max_code).astype(np.float16).view(np.uint16)
    if qtype.name == "IQ1_M":
        words = blocks[:, offset:offset + 8].copy().view(np.uint16)
        nibbles = (d[:, None] >> np.array([0, 4, 8, 12], dtype=np.uint16)) & np.uint16(0xf)
        blocks[:, offset:offset + 8] = ((words & np.uint16(0x0fff)) | (nibbles << np.uint16(12))).view(np.uint8)
    else:
        blocks[:, offset:offset + 2] = d.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(*rows.shape[:-1], -1)


def quantize_matrix(data: np.ndarray, qtype) -> np.ndarray:
    import gguf
    from gguf.quants import quantize

    if qtype in (gguf.GGMLQuantizationType.IQ4_NL, gguf.GGMLQuantizationType.IQ4_XS):
        return quantize_codebook(data, qtype)
    if qtype == gguf.GGMLQuantizationType.NVFP4:
        return quantize_nvfp4(data)
    if qtype.name in GRID_SCALES:
        return random_grid_blocks(data, qtype)
    return quantize(data, qtype)


def write_model(path, family: str, **overrides) -> dict:
    """Writes a random-weight GGUF of `family` (a FAMILIES key) to `path` and returns what
    a test needs to know about it (arch, n_vocab, sliding_window, ...).

    Overrides: any FamilySpec size or option named in OVERRIDABLE (rope_scaling: None,
    "llama3", "linear", "yarn", "longrope"), plus dtype ("f32" | "f16"), seed (int),
    extra_metadata ({key: value}, written as given: str, float -> f32, bool, int -> u32),
    fuse_gate_up_exps (experts' gate and up in one ffn_gate_up_exps, as the converter's
    --fuse-gate-up-exps writes them), layer_std (the blk.* matrices' normal std, default 0.1; small: the residual stream, and so
    the greedy output, stays close to the input token, for tests that need repetitive text),
    extra_tensors ({name: float32 array in numpy order}) and drop_tensors ([names]).

    weights: a GGML type name ("TQ2_0", "IQ4_NL", ...) for the 2-D and expert matrices
    whose rows fill whole blocks (not ffn_gate_inp): by gguf.quants where it quantizes the
    type, else by quantize_codebook or quantize_nvfp4 above, as a file from llama-quantize
    would carry them; the grid types (IQ2_*, IQ3_*, IQ1_*) get random_grid_blocks.
    """
    import gguf

    if family not in FAMILIES:
        raise ValueError(f"unknown family '{family}' (known: {', '.join(FAMILIES)})")
    spec = FAMILIES[family]
    opts = {k: getattr(spec, k) for k in OVERRIDABLE}
    dtype = overrides.pop("dtype", "f32")
    seed = overrides.pop("seed", zlib.crc32(family.encode()))
    extra_metadata = overrides.pop("extra_metadata", {})
    extra_tensors = overrides.pop("extra_tensors", {})
    weights = overrides.pop("weights", None)
    layer_std = overrides.pop("layer_std", 0.1)
    fuse_gate_up_exps = overrides.pop("fuse_gate_up_exps", False)
    ssm_in = overrides.pop("ssm_in", False)
    drop_tensors = set(overrides.pop("drop_tensors", ()))
    for key, value in overrides.items():
        if key not in OVERRIDABLE:
            raise ValueError(f"unknown override '{key}' (known: {', '.join(OVERRIDABLE)}, dtype, seed, "
                             f"extra_metadata, extra_tensors, drop_tensors, weights, fuse_gate_up_exps, ssm_in)")
        opts[key] = value
    if dtype not in ("f32", "f16"):
        raise ValueError(f"dtype must be f32 or f16, not {dtype!r}")

    arch = spec.arch
    e, nh, nkv, dh, n_layer, n_ff = (opts[k] for k in ("n_embd", "n_head", "n_head_kv", "d_head", "n_layer", "n_ff"))
    n_expert, n_used = opts["n_expert"], opts["n_expert_used"]
    rope_scaling, window, n_ctx = opts["rope_scaling"], opts["sliding_window"], opts["n_ctx_train"]
    if family in ("mistral", "mixtral", "phi3", "olmoe") and nh * dh != e:
        raise ValueError(f"{family}: llama.cpp derives d_head = n_embd / n_head, so n_head * d_head must be n_embd")
    if family == "olmoe" and nkv != nh:
        raise ValueError("olmoe: llama.cpp's attn_k_norm is [n_embd], so n_head_kv must equal n_head")

    writer = gguf.GGUFWriter(str(path), arch)
    a = arch + "."
    writer.add_type("model")
    writer.add_name(f"synthetic {family}")
    n_vocab = _copy_tokenizer(writer, VOCAB_DIR / spec.vocab)
    if family == "gemma2":
        writer.add_bool("tokenizer.ggml.add_space_prefix", False)   # Gemma2Model.set_vocab

    # --- hyperparameters, in the converter's words ------------------------------------
    writer.add_uint32(a + "block_count", n_layer)
    writer.add_uint32(a + "context_length", n_ctx)
    writer.add_uint32(a + "embedding_length", e)
    writer.add_uint32(a + "feed_forward_length", n_ff)
    writer.add_uint32(a + "attention.head_count", nh)
    writer.add_uint32(a + "attention.head_count_kv", nkv)
    writer.add_float32(a + "attention.layer_norm_rms_epsilon", spec.rms_eps)
    if opts["rope_base"] is not None:
        writer.add_float32(a + "rope.freq_base", opts["rope_base"])
    hybrid = family in ("qwen35", "qwen35moe", "qwen3next")
    if family in ("llama", "qwen3", "qwen3moe", "gemma2") or hybrid:  # HF config has head_dim
        writer.add_uint32(a + "attention.key_length", dh)
        writer.add_uint32(a + "attention.value_length", dh)
    if arch == "llama":                                              # LlamaModel.set_gguf_parameters
        writer.add_uint32(a + "vocab_size", n_vocab)
        writer.add_uint32(a + "rope.dimension_count", dh)
    if family == "phi3":
        writer.add_uint32(a + "rope.dimension_count", dh)
        writer.add_uint32(a + "attention.sliding_window", window)
    if family == "gemma2":
        writer.add_float32(a + "attn_logit_softcapping", 50.0)
        writer.add_float32(a + "final_logit_softcapping", 30.0)
        writer.add_uint32(a + "attention.sliding_window", window)
    if family == "mistral" and window:
        writer.add_uint32(a + "attention.sliding_window", window)
    if n_expert:
        writer.add_uint32(a + "expert_count", n_expert)
        writer.add_uint32(a + "expert_used_count", n_used)
    if family in ("qwen3moe", "qwen35moe", "qwen3next"):
        writer.add_uint32(a + "expert_feed_forward_length", opts["n_ff_exp"])
    if family in ("qwen35moe", "qwen3next"):
        writer.add_uint32(a + "expert_shared_feed_forward_length", opts["n_ff_shexp"])
    ssm = QWEN35_SSM if hybrid else None
    recurrent = [False] * n_layer
    if ssm:
        recurrent = [(il + 1) % ssm["interval"] != 0 for il in range(n_layer)]
        writer.add_uint32(a + "ssm.conv_kernel", ssm["conv_kernel"])
        writer.add_uint32(a + "ssm.state_size", ssm["d_k"])
        writer.add_uint32(a + "ssm.group_count", ssm["n_k"])
        writer.add_uint32(a + "ssm.time_step_rank", ssm["n_v"])
        writer.add_uint32(a + "ssm.inner_size", ssm["n_v"] * ssm["d_k"])
        writer.add_array(a + "attention.recurrent_layers", recurrent)
        writer.add_uint32(a + "full_attention_interval", ssm["interval"])
        writer.add_uint32(a + "rope.dimension_count", dh // 4)
        if family != "qwen3next":  # plain NeoX RoPE there
            writer.add_array(a + "rope.dimension_sections", ssm["rope_sections"])

    if rope_scaling == "linear":
        writer.add_string(a + "rope.scaling.type", "linear")
        writer.add_float32(a + "rope.scaling.factor", 4.0)
    elif rope_scaling == "yarn":
        writer.add_string(a + "rope.scaling.type", "yarn")
        writer.add_float32(a + "rope.scaling.factor", YARN_ROPE["factor"])
        writer.add_uint32(a + "rope.scaling.original_context_length", YARN_ROPE["original_max_position_embeddings"])
    elif rope_scaling == "longrope":
        # Phi3MiniModel writes no rope.scaling.type; the attention factor and the original
        # context say it all, with the two factor tensors.
        orig = LONGROPE_ORIGINAL_CONTEXT
        writer.add_uint32(a + "rope.scaling.original_context_length", orig)
        scale = n_ctx / orig
        writer.add_float32(a + "rope.scaling.attn_factor",
                           math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
    elif family == "phi3":
        writer.add_uint32(a + "rope.scaling.original_context_length", n_ctx)
    elif rope_scaling not in (None, "llama3"):
        raise ValueError(f"unknown rope_scaling {rope_scaling!r}")

    for key, value in extra_metadata.items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, int(value))
    writer.add_file_type(1 if dtype == "f16" else 0)
    writer.add_quantization_version(2)

    # --- tensors ----------------------------------------------------------------------
    t = _Tensors(seed, dtype == "f16", layer_std)
    t.matrix("token_embd.weight", n_vocab, e)
    if rope_scaling == "llama3":
        t.vector("rope_freqs.weight", llama3_rope_factors(dh, opts["rope_base"], **LLAMA3_ROPE))
    if rope_scaling == "longrope":
        half = dh // 2
        ramp = np.linspace(0.0, 1.0, half)
        t.vector("rope_factors_long.weight", 1.0 + 15.0 * ramp ** 2)   # rising with the pair index, as Phi-3.5's
        t.vector("rope_factors_short.weight", 1.0 + 0.5 * ramp)
    def ffn_tensors(b):
        if n_expert:
            n_ff_exp = opts["n_ff_exp"] if family in ("qwen3moe", "qwen35moe", "qwen3next") else n_ff
            t.matrix(b + "ffn_gate_inp.weight", n_expert, e)
            if fuse_gate_up_exps:  # the converter's --fuse-gate-up-exps: each expert's gate rows, then up
                t.matrix(b + "ffn_gate_up_exps.weight", n_expert, 2 * n_ff_exp, e)
            else:
                t.matrix(b + "ffn_gate_exps.weight", n_expert, n_ff_exp, e)
                t.matrix(b + "ffn_up_exps.weight", n_expert, n_ff_exp, e)
            t.matrix(b + "ffn_down_exps.weight", n_expert, e, n_ff_exp)
            if family in ("qwen35moe", "qwen3next"):  # the shared expert and its gate (one logit, a vector)
                t.vector(b + "ffn_gate_inp_shexp.weight", t.rng.normal(0.0, 0.1, e))
                t.matrix(b + "ffn_gate_shexp.weight", opts["n_ff_shexp"], e)
                t.matrix(b + "ffn_up_shexp.weight", opts["n_ff_shexp"], e)
                t.matrix(b + "ffn_down_shexp.weight", e, opts["n_ff_shexp"])
        elif family == "phi3":
            t.matrix(b + "ffn_up.weight", 2 * n_ff, e)
            t.matrix(b + "ffn_down.weight", e, n_ff)
        else:
            t.matrix(b + "ffn_gate.weight", n_ff, e)
            t.matrix(b + "ffn_up.weight", n_ff, e)
            t.matrix(b + "ffn_down.weight", e, n_ff)

    for il in range(n_layer):
        b = f"blk.{il}."
        t.norm(b + "attn_norm.weight", e)
        if ssm:
            key_dim, value_dim = ssm["n_k"] * ssm["d_k"], ssm["n_v"] * ssm["d_k"]
            if recurrent[il]:
                if ssm_in:  # Qwen3-Next's older files: per key head [q k v z] rows
                    t.matrix(b + "ssm_in.weight", 2 * key_dim + 2 * value_dim, e)
                else:
                    t.matrix(b + "attn_qkv.weight", 2 * key_dim + value_dim, e)
                    t.matrix(b + "attn_gate.weight", value_dim, e)
                t.f32_matrix(b + "ssm_conv1d.weight", 2 * key_dim + value_dim, ssm["conv_kernel"])
                t.vector(b + "ssm_dt.bias", t.rng.normal(0.0, 0.5, ssm["n_v"]))
                t.vector(b + "ssm_a", -np.exp(t.rng.normal(0.0, 0.5, ssm["n_v"])))   # -exp(A_log)
                if family == "qwen3next":  # per key head [r betas, r alphas] rows
                    t.matrix(b + "ssm_ba.weight", 2 * ssm["n_v"], e)
                else:
                    t.matrix(b + "ssm_beta.weight", ssm["n_v"], e)
                    t.matrix(b + "ssm_alpha.weight", ssm["n_v"], e)
                t.vector(b + "ssm_norm.weight", 1.0 + t.rng.normal(0.0, 0.1, ssm["d_k"]))
                t.matrix(b + "ssm_out.weight", e, value_dim)
                t.norm(b + "post_attention_norm.weight", e)
                ffn_tensors(b)
                continue
            t.matrix(b + "attn_q.weight", 2 * nh * dh, e)
            t.matrix(b + "attn_k.weight", nkv * dh, e)
            t.matrix(b + "attn_v.weight", nkv * dh, e)
        elif family == "phi3":
            t.matrix(b + "attn_qkv.weight", nh * dh + 2 * nkv * dh, e)
        else:
            t.matrix(b + "attn_q.weight", nh * dh, e)
            t.matrix(b + "attn_k.weight", nkv * dh, e)
            t.matrix(b + "attn_v.weight", nkv * dh, e)
        t.matrix(b + "attn_output.weight", e, nh * dh)
        if family in ("qwen3", "qwen3moe") or hybrid:
            t.norm(b + "attn_q_norm.weight", dh)
            t.norm(b + "attn_k_norm.weight", dh)
        if family == "olmoe":
            t.norm(b + "attn_q_norm.weight", nh * dh)
            t.norm(b + "attn_k_norm.weight", nkv * dh)
        if family == "gemma2" or hybrid:
            t.norm(b + "post_attention_norm.weight", e)
        if not hybrid:
            t.norm(b + "ffn_norm.weight", e)
        ffn_tensors(b)
        if family == "gemma2":
            t.norm(b + "post_ffw_norm.weight", e)
    t.norm("output_norm.weight", e)
    if not opts["tied_output"]:
        t.matrix("output.weight", n_vocab, e)

    missing = drop_tensors - set(t.items)
    if missing:
        raise ValueError(f"drop_tensors names tensors the {family} layout lacks: {sorted(missing)}")
    qtype = gguf.GGMLQuantizationType[weights] if weights else None
    for name, data in t.items.items():
        if name in drop_tensors:
            continue
        block = gguf.GGML_QUANT_SIZES[qtype][0] if qtype is not None else 0
        if qtype is None or data.ndim < 2 or data.shape[-1] % block or name.endswith("ffn_gate_inp.weight"):
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, quantize_matrix(data.astype(np.float32), qtype), raw_dtype=qtype)
    for name, data in extra_tensors.items():
        writer.add_tensor(name, np.asarray(data, dtype=np.float32))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    swa_layers = [False] * n_layer
    if family == "gemma2":
        swa_layers = [il % 2 == 0 for il in range(n_layer)]
    elif window and family in ("mistral", "phi3"):
        swa_layers = [True] * n_layer
    return {"path": Path(path), "family": family, "arch": arch, "n_vocab": n_vocab, "n_layer": n_layer,
            "recurrent_layers": recurrent,
            "n_expert": n_expert, "sliding_window": window if any(swa_layers) else 0, "swa_layers": swa_layers,
            "rope_scaling": rope_scaling, "dtype": dtype}
