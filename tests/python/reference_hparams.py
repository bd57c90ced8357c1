"""GGUF hyperparameters as reference_forward.py reads them: which architecture, its sizes,
and the options that change the computation (each named as llama.cpp's converter writes it).
Split from reference_forward.py, which re-exports what its callers use."""
import math
from dataclasses import dataclass, field

import gguf

SUPPORTED_ARCHS = ("llama", "mistral", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "olmoe", "qwen35",
                   "qwen35moe", "qwen3next")


class ReferenceModelError(Exception):
    """A model the reference cannot run; the message names the file and what is wrong."""


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    d_head: int              # key/query head size
    d_value: int             # value head size
    n_ff: int
    rms_eps: float
    n_rot: int
    rope_neox: bool          # True: rotate (x[i], x[i + n_rot/2]); False: (x[2i], x[2i+1])
    rope_base: float         # global (full-attention) layers
    rope_scale: float        # position multiplier on global layers (1 / linear factor)
    rope_base_swa: float
    rope_scale_swa: float
    n_ctx_train: int
    sliding_window: int      # 0: none
    swa_layers: list = field(default_factory=list)  # per layer: uses the sliding window
    attn_scale: float = 1.0
    embd_scale: float = 1.0
    final_softcap: float = 0.0
    attn_softcap: float = 0.0
    qk_norm: bool = False
    post_norms: bool = False  # gemma3 sandwich norms
    yarn: tuple | None = None  # (original context, beta_fast, beta_slow) when rope scaling is YaRN
    yarn_swa: tuple | None = None  # the same on sliding-window layers (gemma3: none)
    gelu_ffn: bool = False    # GeGLU (tanh GELU) instead of SwiGLU
    qk_norm_whole: bool = False  # olmoe: q_norm [n_head*d_head], k_norm [n_head_kv*d_head]
    fused_gate_up: bool = False  # phi3: ffn_up holds gate and up
    rope_attn_factor: float = 1.0  # cos/sin multiplier (rope.scaling.attn_factor)
    n_ctx_orig: int = 0       # rope.scaling.original_context_length (else context_length)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0         # one expert's FFN width
    expert_renorm: bool = False  # renormalise the chosen experts' probabilities
    n_ff_shexp: int = 0          # the shared expert's width (qwen35moe, qwen3next), 0: none
    ssm_grouped: bool = False    # qwen3next: value head h reads key head h // (n_v / n_k), not h % n_k
    expert_weights_scale: float = 0.0  # 0 or 1: none
    # qwen35 (gated DeltaNet hybrid)
    recurrent_layers: list = field(default_factory=list)  # per layer: a DeltaNet layer
    attn_gate: bool = False   # attn_q holds q and an output gate per head
    ssm_conv: int = 0         # conv kernel
    ssm_d_k: int = 0          # key head size (ssm.state_size)
    ssm_n_k: int = 0          # key heads (ssm.group_count)
    ssm_n_v: int = 0          # value heads (ssm.time_step_rank)
    ssm_d_v: int = 0          # value head size (ssm.inner_size / n_v)


class _Metadata:
    def __init__(self, reader: gguf.GGUFReader, path: str):
        self.reader = reader
        self.path = path

    def get(self, key: str, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            return default
        return f.contents()

    def need(self, key: str):
        v = self.get(key)
        if v is None:
            raise ReferenceModelError(f"{self.path}: missing metadata key '{key}'")
        return v

    def scalar_int(self, key: str, default=None):
        v = self.get(key, default) if default is not None else self.need(key)
        if isinstance(v, list):
            if len(set(v)) != 1:
                raise ReferenceModelError(f"{self.path}: per-layer '{key}' = {v} is not supported")
            v = v[0]
        return int(v)


def _read_hparams(md: _Metadata) -> HParams:
    arch = md.need("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ReferenceModelError(f"{md.path}: architecture '{arch}' not supported "
                             f"(supported: {', '.join(SUPPORTED_ARCHS)})")
    a = arch + "."
    n_embd = md.scalar_int(a + "embedding_length")
    n_head = md.scalar_int(a + "attention.head_count")
    n_head_kv = md.scalar_int(a + "attention.head_count_kv", n_head)
    d_head = md.scalar_int(a + "attention.key_length", n_embd // n_head)
    d_value = md.scalar_int(a + "attention.value_length", n_embd // n_head)
    n_layer = md.scalar_int(a + "block_count")
    tokens_field = md.reader.fields.get("tokenizer.ggml.tokens")

    scaling_type = md.get(a + "rope.scaling.type", "linear")
    if scaling_type not in ("none", "linear", "yarn", "longrope"):
        raise ReferenceModelError(f"{md.path}: rope scaling type '{scaling_type}' not supported")
    factor = md.get(a + "rope.scaling.factor")
    if factor is None:
        factor = md.get(a + "rope.scale_linear")
    rope_scale = 1.0 if (factor is None or float(factor) == 0.0 or scaling_type == "none") \
        else 1.0 / float(factor)
    rope_base = float(md.get(a + "rope.freq_base", 10000.0))

    hp = HParams(
        arch=arch,
        n_vocab=len(tokens_field.data) if tokens_field is not None else 0,
        n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv,
        d_head=d_head, d_value=d_value,
        n_ff=md.scalar_int(a + "feed_forward_length"),
        rms_eps=float(md.need(a + "attention.layer_norm_rms_epsilon")),
        n_rot=md.scalar_int(a + "rope.dimension_count", d_head),
        rope_neox=(arch not in ("llama", "mistral")),
        rope_base=rope_base, rope_scale=rope_scale,
        rope_base_swa=rope_base, rope_scale_swa=rope_scale,
        n_ctx_train=md.scalar_int(a + "context_length", 0),
        sliding_window=0,
        swa_layers=[False] * n_layer,
        attn_scale=1.0 / math.sqrt(d_head),
        final_softcap=float(md.get(a + "final_logit_softcapping", 0.0) or 0.0),
        attn_softcap=float(md.get(a + "attn_logit_softcapping", 0.0) or 0.0),
        yarn=((md.scalar_int(a + "rope.scaling.original_context_length"),
               float(md.get(a + "rope.scaling.yarn_beta_fast", 32.0)), float(md.get(a + "rope.scaling.yarn_beta_slow", 1.0)))
              if scaling_type == "yarn" and rope_scale != 1.0 else None),
        rope_attn_factor=float(md.get(a + "rope.scaling.attn_factor", 1.0)),
    )
    hp.yarn_swa = hp.yarn
    hp.n_ctx_orig = md.scalar_int(a + "rope.scaling.original_context_length", hp.n_ctx_train)
    _read_experts(md, hp)

    if arch in ("llama", "mistral", "phi3"):
        window = md.scalar_int(a + "attention.sliding_window", 0)
        if window > 0:
            hp.sliding_window = window
            hp.swa_layers = [True] * n_layer
    if arch in ("qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"):
        hp.qk_norm = True
    if arch in ("qwen35", "qwen35moe", "qwen3next"):
        hp.ssm_grouped = arch == "qwen3next"
        n_nextn = md.scalar_int(a + "nextn_predict_layers", 0)
        hp.n_layer = n_layer = n_layer - n_nextn
        hp.swa_layers = [False] * n_layer
        flags = md.get(a + "attention.recurrent_layers")
        if isinstance(flags, list):
            hp.recurrent_layers = [bool(x) for x in flags[:n_layer]]
        else:
            interval = md.scalar_int(a + "full_attention_interval", 4)
            hp.recurrent_layers = [(il + 1) % interval != 0 for il in range(n_layer)]
        hp.attn_gate = True
        hp.ssm_conv = md.scalar_int(a + "ssm.conv_kernel")
        hp.ssm_d_k = md.scalar_int(a + "ssm.state_size")
        hp.ssm_n_k = md.scalar_int(a + "ssm.group_count")
        hp.ssm_n_v = md.scalar_int(a + "ssm.time_step_rank")
        hp.ssm_d_v = md.scalar_int(a + "ssm.inner_size") // hp.ssm_n_v
    if arch == "olmoe":
        hp.qk_norm_whole = True
    if arch == "phi3":
        hp.fused_gate_up = True
    if arch == "gemma2":
        hp.post_norms = True
        hp.gelu_ffn = True
        hp.embd_scale = math.sqrt(n_embd)
        hp.sliding_window = md.scalar_int(a + "attention.sliding_window", 4096)
        hp.swa_layers = _swa_pattern(md, a + "attention.sliding_window_pattern", n_layer, 2)
        hp.rope_base_swa = float(md.get(a + "rope.freq_base_swa", rope_base))
        # llama.cpp's defaults when the keys are missing (Gemma 2's published values).
        hp.attn_softcap = float(md.get(a + "attn_logit_softcapping", 50.0))
        hp.final_softcap = float(md.get(a + "final_logit_softcapping", 30.0))
        if n_layer == 46:
            hp.attn_scale = 1.0 / math.sqrt(n_embd / n_head)

    if arch == "gemma3":
        hp.qk_norm = True
        hp.post_norms = True
        hp.gelu_ffn = True
        # llama.cpp scales the embedding by sqrtf(n_embd) (HF rounds it to bf16 first).
        hp.embd_scale = math.sqrt(n_embd)
        hp.sliding_window = md.scalar_int(a + "attention.sliding_window")
        # llama.cpp: swa pattern 6, layer il is local iff il % 6 < 5; local layers use
        # base 10000 and scale 1 whatever the global rope says.
        hp.swa_layers = _swa_pattern(md, a + "attention.sliding_window_pattern", n_layer, 6)
        hp.rope_base_swa = float(md.get(a + "rope.freq_base_swa", 10000.0))
        hp.rope_scale_swa = 1.0
        hp.yarn_swa = None
        # llama.cpp (after gemma_pytorch config): 27B (62 layers) scales by
        # (n_embd / n_head)^-0.5, every other size by d_head^-0.5.
        if n_layer == 62:
            hp.attn_scale = 1.0 / math.sqrt(n_embd / n_head)
    return hp


def _swa_pattern(md: _Metadata, key: str, n_layer: int, default_period: int) -> list:
    """Which layers are local: the per-layer array if the file has one, else llama.cpp's
    set_swa_pattern(period): layer il is local iff il % period < period - 1."""
    pattern = md.get(key)
    if isinstance(pattern, list):
        return [bool(x) for x in pattern]
    n_pattern = int(pattern) if pattern is not None else default_period
    return [il % n_pattern < n_pattern - 1 for il in range(n_layer)]


def _read_experts(md: _Metadata, hp: HParams) -> None:
    """Mixture-of-experts metadata (Mixtral as arch llama, qwen3moe, olmoe)."""
    a = hp.arch + "."
    hp.n_expert = md.scalar_int(a + "expert_count", 0)
    if hp.n_expert == 0:
        return
    hp.n_expert_used = md.scalar_int(a + "expert_used_count")
    if not 0 < hp.n_expert_used <= hp.n_expert:
        raise ReferenceModelError(f"{md.path}: {a}expert_used_count {hp.n_expert_used} is not in 1..{hp.n_expert}")
    gating = md.get(a + "expert_gating_func")
    # 1: softmax (gguf ExpertGatingFuncType); llama.cpp's qwen35moe and qwen3next graphs
    # route by softmax whatever the key says.
    if gating not in (None, 1) and hp.arch not in ("qwen35moe", "qwen3next"):
        raise ReferenceModelError(f"{md.path}: {a}expert_gating_func {gating} is not supported (softmax only)")
    # llama.cpp (models/qwen3moe.cpp): expert width from expert_feed_forward_length, else
    # n_ff / n_expert_used; llama (Mixtral) and olmoe use feed_forward_length.
    default_ff = hp.n_ff // hp.n_expert_used if hp.arch in ("qwen3moe", "qwen35moe", "qwen3next") else hp.n_ff
    hp.n_ff_exp = md.scalar_int(a + "expert_feed_forward_length", default_ff)
    # Qwen 3.5-MoE (models/qwen35moe.cpp): a shared expert in every layer, n_ff wide by default.
    if hp.arch in ("qwen35moe", "qwen3next"):
        hp.n_ff_shexp = md.scalar_int(a + "expert_shared_feed_forward_length", hp.n_ff)
    hp.expert_renorm = hp.arch != "olmoe"
    hp.expert_weights_scale = float(md.get(a + "expert_weights_scale", 0.0))
