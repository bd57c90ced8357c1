"""`ridge size`, `ridge roofline` and `ridge spec-sim` through the command line: the worked
numbers, GGUF sizes against the independent gguf-py reader, the simulation's statistics,
clear errors for bad arguments, and the plot scripts.

Runs $RIDGE_BUILD_DIR/ridge.
"""
import json
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.environ.get("RIDGE_FIXTURES", os.path.join(ROOT, "..", "shared", "fixtures"))
GiB = 2**30


def ridge_binary():
    build = os.environ.get("RIDGE_BUILD_DIR")
    if not build:
        pytest.fail("RIDGE_BUILD_DIR is not set (run through ctest, or export it)")
    path = os.path.join(build, "ridge")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing; build the ridge target")
    return path


def ridge(*args, check=True):
    out = subprocess.run([ridge_binary(), *args], capture_output=True, text=True, timeout=300)
    if check and out.returncode != 0:
        pytest.fail(f"ridge {' '.join(args)} failed ({out.returncode}): {out.stderr}")
    return out


def ridge_json(*args):
    return json.loads(ridge(*args, "--json").stdout)


# --- ridge size ---------------------------------------------------------------------------

def test_llama2_7b_fp16_is_half_a_mebibyte_per_token():
    r = ridge_json("size", "llama2-7b", "--weights", "fp16", "--kv", "fp16", "--ctx", "4096")
    assert r["kv_bytes_per_token"] == 0.5 * 2**20
    assert r["kv_bytes_per_conversation"] == 2 * GiB


def test_llama3_8b_is_128_kib_per_token():
    r = ridge_json("size", "llama3-8b")
    assert r["kv_bytes_per_token"] == 128 * 1024
    assert r["model"]["params"] == 8_030_261_248


def test_llama3_70b_on_two_80gb_gpus():
    r = ridge_json("size", "llama3-70b", "--gpus", "2x80GB", "--ctx", "8192", "--weights", "bf16", "--kv", "bf16")
    assert abs(r["weight_bytes"] / 1e9 - 141.1) < 0.1  # about 140 GB
    assert r["kv_bytes_per_token"] == 320 * 1024
    assert r["total_bytes"] == 160e9
    assert r["max_conversations"] == 7  # only a handful of 8k conversations
    q = ridge_json("size", "llama3-70b", "--gpus", "2x80GB", "--ctx", "8192", "--weights", "int8", "--kv", "int8")
    assert q["max_conversations"] == 66
    # The same arithmetic by hand: (160e9 - params x 1 B) / (2 x 80 x 8 x 128 x 1 B x 8192).
    assert q["max_conversations"] == math.floor((160e9 - 70_553_706_496) / (2 * 80 * 8 * 128 * 8192))


def test_text_output_shows_the_arithmetic_and_its_units():
    out = ridge("size", "llama3-70b", "--gpus", "2x80GB", "--ctx", "8192", "--kv", "bf16").stdout
    assert "GB = 10^9 bytes, GiB = 2^30 bytes" in out
    assert "2 (K,V) x 80 layers x 8 KV heads x 128 dims x 2 B" in out
    assert "327,680 B = 320.00 KiB" in out
    assert "141.11 GB (131.42 GiB)" in out
    assert "floor(18.89 GB / 2.68 GB)" in out
    assert "7 conversations of 8,192 tokens" in out


def test_weights_that_do_not_fit_show_the_shortfall_negative_in_both_units():
    out = ridge("size", "llama3-8b", "--gpus", "1x10GB").stdout
    assert "= -6.06 GB (-5.64 GiB): the weights do not fit" in out, out
    assert "0 conversations" in out


def test_sliding_window_caps_gemma3_kv():
    r = ridge_json("size", "gemma3-27b", "--ctx", "32768")
    per_layer_token = 2 * 16 * 128 * 2
    assert r["model"]["layers_by_window"] == {"0": 10, "1024": 52}
    assert r["kv_bytes_per_conversation"] == per_layer_token * (10 * 32768 + 52 * 1024)


def test_gguf_size_matches_gguf_py():
    gguf = pytest.importorskip("gguf")
    path = os.path.join(FIXTURES, "models", "stories260K.gguf")
    reader = gguf.GGUFReader(path)
    params = sum(int(t.n_elements) for t in reader.tensors)
    nbytes = sum(int(t.n_bytes) for t in reader.tensors)
    r = ridge_json("size", path, "--ctx", "256", "--gpus", "1x1GiB")
    assert r["model"]["params"] == params
    assert r["weight_bytes"] == nbytes  # --weights file is the default for GGUF
    field = lambda key: int(reader.fields[key].parts[-1][0])  # noqa: E731
    n_layer, n_head = field("llama.block_count"), field("llama.attention.head_count")
    n_kv, d = field("llama.attention.head_count_kv"), field("llama.embedding_length") // n_head
    assert r["kv_bytes_per_token"] == 2 * n_layer * n_kv * d * 2
    assert r["max_conversations"] == (GiB - nbytes) // (r["kv_bytes_per_token"] * 256)


def test_a_hybrid_counts_kv_of_its_attention_layers_and_state_per_sequence(tmp_path):
    # Qwen 3.5 layout: 2 of 4 layers attend (K/V per token); the 2 DeltaNet layers keep, per
    # sequence, 4 value heads x 16 x 16 of state and 3 rows of 2 x 32 + 64 conv channels.
    sys.path.insert(0, os.path.dirname(__file__))
    import synthetic_models as sm
    path = sm.write_model(tmp_path / "qwen35.gguf", "qwen35")["path"]
    r = ridge_json("size", str(path), "--ctx", "1000", "--gpus", "1x1GiB")
    per_token = 2 * 2 * 2 * 32 * 2          # K and V x 2 attention layers x 2 KV heads x 32 x fp16
    state = 2 * (4 * 16 * 16 + 3 * 128) * 4  # f32
    assert r["kv_bytes_per_token"] == per_token
    assert r["state_bytes_per_sequence"] == state
    assert r["kv_bytes_per_conversation"] == per_token * 1000 + state
    assert r["max_conversations"] == (GiB - r["weight_bytes"]) // (per_token * 1000 + state)


# --- ridge roofline -----------------------------------------------------------------------

def test_roofline_7b_fp16_on_h100():
    r = ridge_json("roofline", "llama2-7b", "--device", "h100-sxm", "--weights", "fp16", "--ctx", "0")
    assert abs(r["single_user_tokens_per_s"] - 3.35e12 / (2 * 6_738_415_616)) < 1e-6
    assert 230 < r["single_user_tokens_per_s"] < 250  # "about 240 tokens/s"
    assert abs(r["ridge_point"] - 989.4e12 / 3.35e12) < 1e-9
    assert abs(r["crossover_batch"] - r["ridge_point"]) < 1e-6
    tps = [p["tokens_per_s"] for p in r["points"]]
    assert tps == sorted(tps)
    assert [p["batch"] for p in r["points"]] == [2**i for i in range(11)]
    assert not r["points"][8]["compute_bound"] and r["points"][9]["compute_bound"]  # 256 vs 512


def test_roofline_table_output():
    out = ridge("roofline", "llama3-8b", "--device", "a100-80gb-sxm", "--ctx", "2048").stdout
    assert "ridge point" in out and "FLOP/byte" in out
    assert "tokens/s" in out and "batch" in out
    assert "A100" in out


# --- ridge spec-sim -----------------------------------------------------------------------

def test_spec_sim_output_follows_p_and_the_formula():
    r = ridge_json("spec-sim", "--p", "0.5,0.3,0.2", "--q", "0.2,0.3,0.5", "--gamma", "3",
                   "--alphas", "0.6,0.9", "--gammas", "1,4")
    d = r["distribution"]
    assert abs(d["alpha"] - 0.7) < 1e-12
    assert d["chi_square"]["p_value"] > 1e-3
    assert d["consistent_with_target"]
    assert d["tv_to_target"] < 0.01
    assert abs(d["tokens_per_pass"] - (1 - 0.7**4) / 0.3) < 4 * d["tokens_per_pass_stderr"]
    pts = r["sweep"]["points"]
    assert len(pts) == 4
    for p in pts:
        assert abs(p["expected"] - (1 - p["alpha"] ** (p["gamma"] + 1)) / (1 - p["alpha"])) < 1e-12
        assert abs(p["tokens_per_pass"] - p["expected"]) < 4.5 * p["stderr"], p


def test_spec_sim_random_pair_with_total_variation():
    r = ridge_json("spec-sim", "--vocab", "12", "--tv", "0.4", "--steps", "20000", "--no-sweep")
    assert abs(r["distribution"]["alpha"] - 0.6) < 1e-12
    assert len(r["distribution"]["p"]) == 12
    assert r["sweep"]["points"] == []


# --- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["size", "llama3-70b", "--gpus", "0x80GB"], "GPU count must be at least 1"),
    (["size", "llama3-70b", "--gpus", "2x80"], "unknown unit"),
    (["size", "no-such-model"], "unknown model 'no-such-model'"),
    (["size", "llama3-70b", "--ctx", "-5"], "--ctx -5"),
    (["size", "llama3-70b", "--ctx=-5"], "--ctx -5"),
    (["size", "llama3-70b", "--weights", "int3"], "--weights 'int3'"),
    (["size", "llama3-70b", "--weights", "file"], "is a preset, not a GGUF file"),
    (["size", "llama3-70b", "--reserve", "150%"], "--reserve"),
    (["roofline", "llama3-8b", "--device", "tpu"], "unknown device"),
    (["roofline", "llama3-8b", "--ctx", "-1"], "--ctx -1"),
    (["roofline", "nope-7b"], "unknown model 'nope-7b'"),
    (["spec-sim", "--p", "0.5,0.6", "--q", "0.5,0.5"], "sum to 1.1"),
    (["spec-sim", "--p", "0.5,0.5"], "give both --p and --q"),
    (["spec-sim", "--alpha", "1.5"], "must be in [0, 1]"),
    (["spec-sim", "--steps", "0"], "--steps 0"),
])
def test_bad_arguments_fail_clearly(args, message):
    out = ridge(*args, check=False)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr
    assert out.stdout == ""


def test_unknown_preset_error_lists_presets():
    err = ridge("size", "llama5-9000b", check=False).stderr
    assert "llama3-70b" in err and "gemma3-27b" in err


# --- plots --------------------------------------------------------------------------------

def run_script(name, *args, stdin=None):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", name), *args], input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_plot_scripts_write_images(tmp_path):
    pytest.importorskip("matplotlib")
    roof = ridge("roofline", "llama3-8b", "--ctx", "0", "--json").stdout
    out = run_script("plot-roofline", "-", "-o", str(tmp_path / "roofline.png"), stdin=roof)
    assert out.returncode == 0, out.stderr
    png = (tmp_path / "roofline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    sim = ridge("spec-sim", "--steps", "5000", "--gammas", "1,2", "--alphas", "0.5,0.9", "--json").stdout
    out = run_script("plot-spec-sim", "-", "-o", str(tmp_path / "spec.svg"), stdin=sim)
    assert out.returncode == 0, out.stderr
    assert "<svg" in (tmp_path / "spec.svg").read_text()
