"""Our GGUF writer and reader against the independent `gguf` Python package (gguf-py).

- gguf_write_sample (our Writer) -> gguf.GGUFReader: every value type and tensor read back.
- gguf.GGUFWriter -> gguf_dump (our reader): every value type, nested arrays, tensors.
- the fixture GGUFs through both readers: same metadata and tensor table.

Runs the C++ helpers $RIDGE_BUILD_DIR/tests/gguf_write_sample and .../gguf_dump.
"""
import json
import os
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGUFReader, GGUFValueType as VT, GGUFWriter  # noqa: E402
from gguf.constants import GGMLQuantizationType as QT  # noqa: E402

FIXTURES = os.environ.get("RIDGE_FIXTURES",
                          os.path.join(os.path.dirname(__file__), "../../../shared/fixtures"))


def tool(name):
    build = os.environ.get("RIDGE_BUILD_DIR")
    if not build:
        pytest.fail("RIDGE_BUILD_DIR is not set (run through ctest, or export it)")
    path = os.path.join(build, "tests", name)
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing; build the {name} target")
    return path


def dump(path):
    out = subprocess.run([tool("gguf_dump"), str(path)], capture_output=True, check=True)
    return json.loads(out.stdout)


def plain(value):
    """Our dump's value with array wrappers removed: nested Python lists."""
    if isinstance(value, dict):
        return [plain(v) for v in value["items"]]
    return value


def flat(value):
    """Nested lists flattened, the way GGUFReader.contents() returns nested arrays."""
    if isinstance(value, list):
        return [x for v in value for x in flat(v)]
    return [value]


# ---------------------------------------------------------------------------------------
# Our writer -> gguf-py's reader. Expected values mirror tests/tools/gguf_write_sample.cpp.

SAMPLE_SCALARS = {
    "general.architecture": (VT.STRING, "sample"),
    "v.u8": (VT.UINT8, 200),
    "v.i8": (VT.INT8, -100),
    "v.u16": (VT.UINT16, 60000),
    "v.i16": (VT.INT16, -30000),
    "v.u32": (VT.UINT32, 4000000000),
    "v.i32": (VT.INT32, -2000000000),
    "v.f32": (VT.FLOAT32, float(np.float32(0.1))),
    "v.bool": (VT.BOOL, True),
    "v.str": (VT.STRING, "héllo ▁world"),
    "v.u64": (VT.UINT64, 18000000000000000000),
    "v.i64": (VT.INT64, -9000000000000000000),
    "v.f64": (VT.FLOAT64, 3.141592653589793),
    "general.alignment": (VT.UINT32, 64),
}
SAMPLE_ARRAYS = {
    "a.i32": ([VT.ARRAY, VT.INT32], [1, -2, 3]),
    "a.f32": ([VT.ARRAY, VT.FLOAT32], [0.5, -1.25]),
    "a.str": ([VT.ARRAY, VT.STRING], ["alpha", "", "gamma"]),
    "a.bool": ([VT.ARRAY, VT.BOOL], [False, True]),
    "a.u8": ([VT.ARRAY, VT.UINT8], [0, 255]),
    "a.nested": ([VT.ARRAY, VT.ARRAY, VT.INT32], [[1, 2], [3]]),
    "a.nested_str": ([VT.ARRAY, VT.ARRAY, VT.STRING], [["x"], ["y", "z"]]),
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "sample.gguf"
    subprocess.run([tool("gguf_write_sample"), str(path)], check=True)
    return path


def test_gguf_py_reads_our_metadata(sample):
    r = GGUFReader(sample)
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    assert sorted(keys) == sorted(list(SAMPLE_SCALARS) + list(SAMPLE_ARRAYS))
    assert r.fields["GGUF.version"].contents() == 3
    assert r.alignment == 64
    for key, (vtype, expected) in SAMPLE_SCALARS.items():
        field = r.fields[key]
        assert field.types == [vtype], key
        assert field.contents() == expected, key
    for key, (types, expected) in SAMPLE_ARRAYS.items():
        field = r.fields[key]
        assert field.types == types, key
        # gguf-py flattens nested arrays in contents(); compare element by element.
        assert field.contents() == flat(expected), key


def test_gguf_py_reads_our_tensors(sample):
    r = GGUFReader(sample)
    tensors = {t.name: t for t in r.tensors}
    assert list(tensors) == ["t.f32", "t.f16", "t.q8_0", "t.i32"]
    for t in r.tensors:
        assert t.data_offset % 64 == 0, t.name

    f32 = tensors["t.f32"]
    assert f32.tensor_type == QT.F32 and f32.shape.tolist() == [4, 3]
    np.testing.assert_array_equal(f32.data.reshape(-1), np.arange(12, dtype=np.float32) * 0.5 - 1)

    f16 = tensors["t.f16"]
    assert f16.tensor_type == QT.F16 and f16.shape.tolist() == [32, 2]
    np.testing.assert_array_equal(f16.data.reshape(-1).astype(np.float32),
                                  np.arange(64, dtype=np.float32) / 8)

    q8 = tensors["t.q8_0"]
    assert q8.tensor_type == QT.Q8_0 and q8.shape.tolist() == [64, 1]
    values = gguf.quants.dequantize(q8.data, QT.Q8_0).reshape(-1)
    expected = np.concatenate([0.5 * (b + 1) * (np.arange(32) - 16) for b in range(2)])
    np.testing.assert_array_equal(values, expected.astype(np.float32))

    i32 = tensors["t.i32"]
    assert i32.tensor_type == QT.I32 and i32.shape.tolist() == [5]
    np.testing.assert_array_equal(i32.data, 7 * np.arange(5) - 10)


def test_our_reader_reads_our_sample_nested(sample):
    d = dump(sample)
    meta = {m["key"]: m for m in d["metadata"]}
    assert meta["a.nested"]["value"] == {
        "elem_type": "array",
        "items": [{"elem_type": "int32", "items": [1, 2]}, {"elem_type": "int32", "items": [3]}],
    }
    assert plain(meta["a.nested_str"]["value"]) == [["x"], ["y", "z"]]


# ---------------------------------------------------------------------------------------
# gguf-py's writer -> our reader.

def test_our_reader_reads_gguf_py_output(tmp_path):
    path = tmp_path / "from_py.gguf"
    w = GGUFWriter(path, arch="pyarch")
    w.add_uint8("p.u8", 7)
    w.add_int8("p.i8", -7)
    w.add_uint16("p.u16", 65535)
    w.add_int16("p.i16", -32768)
    w.add_uint32("p.u32", 123456789)
    w.add_int32("p.i32", -123456789)
    w.add_float32("p.f32", 1.5)
    w.add_uint64("p.u64", 2**64 - 1)
    w.add_int64("p.i64", -(2**63))
    w.add_float64("p.f64", -2.5e-300)
    w.add_bool("p.bool", False)
    w.add_string("p.str", "ünïcode ✓")
    w.add_array("p.arr_i", [5, 6, 7])
    w.add_array("p.arr_s", ["a", "bc"])
    w.add_array("p.arr_nested", [[1, 2], [3, 4, 5]])
    w.add_array("p.arr_nested_s", [["x", "y"], ["z"]])
    rng = np.random.default_rng(0)
    t_f32 = rng.standard_normal((3, 40)).astype(np.float32)  # numpy shape: rows first
    t_f16 = rng.standard_normal((2, 2, 8)).astype(np.float16)
    t_q8 = gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), QT.Q8_0)
    t_i8 = np.arange(-5, 6, dtype=np.int8)
    w.add_tensor("w.f32", t_f32)
    w.add_tensor("w.f16", t_f16)
    w.add_tensor("w.q8_0", t_q8, raw_dtype=QT.Q8_0)
    w.add_tensor("w.i8", t_i8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    d = dump(path)
    assert d["version"] == 3
    meta = {m["key"]: m for m in d["metadata"]}
    expected = {
        "general.architecture": ("string", "pyarch"),
        "p.u8": ("uint8", 7), "p.i8": ("int8", -7), "p.u16": ("uint16", 65535),
        "p.i16": ("int16", -32768), "p.u32": ("uint32", 123456789),
        "p.i32": ("int32", -123456789), "p.f32": ("float32", 1.5),
        "p.u64": ("uint64", 2**64 - 1), "p.i64": ("int64", -(2**63)),
        "p.f64": ("float64", -2.5e-300), "p.bool": ("bool", False),
        "p.str": ("string", "ünïcode ✓"),
    }
    for key, (vtype, value) in expected.items():
        assert meta[key]["type"] == vtype, key
        assert meta[key]["value"] == value, key
    assert meta["p.arr_i"]["value"]["elem_type"] == "int32"
    assert plain(meta["p.arr_i"]["value"]) == [5, 6, 7]
    assert plain(meta["p.arr_s"]["value"]) == ["a", "bc"]
    assert meta["p.arr_nested"]["value"]["elem_type"] == "array"
    assert plain(meta["p.arr_nested"]["value"]) == [[1, 2], [3, 4, 5]]
    assert plain(meta["p.arr_nested_s"]["value"]) == [["x", "y"], ["z"]]

    tensors = {t["name"]: t for t in d["tensors"]}
    raw = path.read_bytes()

    def data_of(name):
        t = tensors[name]
        return raw[t["file_offset"]:t["file_offset"] + t["nbytes"]]

    assert tensors["w.f32"]["type"] == "f32" and tensors["w.f32"]["shape"] == [40, 3]
    assert data_of("w.f32") == t_f32.tobytes()
    assert tensors["w.f16"]["type"] == "f16" and tensors["w.f16"]["shape"] == [8, 2, 2]
    assert data_of("w.f16") == t_f16.tobytes()
    assert tensors["w.q8_0"]["type"] == "q8_0" and tensors["w.q8_0"]["shape"] == [64, 2]
    assert data_of("w.q8_0") == t_q8.tobytes()
    assert tensors["w.i8"]["type"] == "i8" and tensors["w.i8"]["shape"] == [11]
    assert data_of("w.i8") == t_i8.tobytes()


# ---------------------------------------------------------------------------------------
# Real files through both readers.

FIXTURE_FILES = ["models/stories260K.gguf", "models/llama-2-tiny-random.gguf",
                 "vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf"]


@pytest.mark.parametrize("rel", FIXTURE_FILES)
def test_both_readers_agree_on_fixtures(rel):
    path = os.path.join(FIXTURES, rel)
    if not os.path.exists(path):
        pytest.skip(f"{path} missing")
    ours = dump(path)
    theirs = GGUFReader(path)
    fields = {k: f for k, f in theirs.fields.items() if not k.startswith("GGUF.")}
    assert [m["key"] for m in ours["metadata"]] == list(fields)
    for m in ours["metadata"]:
        field = fields[m["key"]]
        assert m["type"] == field.types[0].name.lower(), m["key"]
        value = plain(m["value"])
        expected = field.contents()
        if isinstance(value, list):
            assert len(value) == len(expected), m["key"]
            if field.types[-1] in (VT.FLOAT32, VT.FLOAT64):
                np.testing.assert_array_equal(np.array(value), np.array(expected))
            else:
                assert value == expected, m["key"]
        else:
            assert value == expected, m["key"]
    assert len(ours["tensors"]) == len(theirs.tensors)
    for t, ref in zip(ours["tensors"], theirs.tensors):
        assert t["name"] == ref.name
        assert t["type_id"] == int(ref.tensor_type)
        assert t["shape"] == ref.shape.tolist()
        assert t["file_offset"] == ref.data_offset
        assert t["nbytes"] == ref.n_bytes


def test_dump_reports_errors(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + (99).to_bytes(4, "little") + bytes(16))
    out = subprocess.run([tool("gguf_dump"), str(bad)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "unsupported version 99" in out.stderr and str(bad) in out.stderr
