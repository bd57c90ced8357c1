#!/usr/bin/env python3
"""Writes tests/gguf/corpus/: small hostile GGUF files, each malformed in one way, and
expected.tsv (file name -> phrase the reader's error must contain).

The files are built byte by byte here (not with the gguf package, which refuses to write
most of them). Run it again after changing a case; the outputs are checked in.

    python3 tests/gguf/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")

# Value type ids (GGUF spec).
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
F32_T, F16_T, Q4_0_T, Q8_0_T = 0, 1, 2, 8


def u32(x):
    return struct.pack("<I", x)


def u64(x):
    return struct.pack("<Q", x)


def i64(x):
    return struct.pack("<q", x)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + u32(vtype) + payload


def tinfo(name, dims, ttype, offset):
    return gstr(name) + u32(len(dims)) + b"".join(i64(d) for d in dims) + u32(ttype) + u64(offset)


def header(n_tensors, n_kv, version=3, magic=b"GGUF"):
    return magic + u32(version) + u64(n_tensors) + u64(n_kv)


def pad(b, align=32):
    return b + b"\0" * (-len(b) % align)


def build(kvs, infos, data, n_tensors=None, n_kv=None, version=3, magic=b"GGUF", align=32):
    """A file from encoded kvs, encoded tensor infos and the data section."""
    head = header(len(infos) if n_tensors is None else n_tensors,
                  len(kvs) if n_kv is None else n_kv, version, magic)
    return pad(head + b"".join(kvs) + b"".join(infos), align) + data


DEFAULT_KVS = [
    kv("general.architecture", STR, gstr("llama")),
    kv("llama.block_count", U32, u32(1)),
]
DEFAULT_INFOS = [tinfo("a.weight", [8, 2], F32_T, 0), tinfo("b.weight", [4], F32_T, 64)]
DEFAULT_DATA = bytes(64) + bytes(16) + bytes(16)


def valid():
    return build(DEFAULT_KVS, DEFAULT_INFOS, DEFAULT_DATA)


def valid_types():
    """Every value type, nested arrays, alignment 16, tensors of four types (a fuzz seed)."""
    kvs = [
        kv("general.alignment", U32, u32(16)),
        kv("u8", U8, b"\xfe"), kv("i8", I8, b"\x80"),
        kv("u16", U16, struct.pack("<H", 65000)), kv("i16", I16, struct.pack("<h", -2)),
        kv("u32", U32, u32(7)), kv("i32", I32, struct.pack("<i", -7)),
        kv("f32", F32, struct.pack("<f", 0.5)), kv("bool", BOOL, b"\x01"),
        kv("str", STR, gstr("h\u00e9llo")), kv("u64", U64, u64(1 << 63)),
        kv("i64", I64, i64(-(1 << 62))), kv("f64", F64, struct.pack("<d", -1.25)),
        kv("arr", ARR, u32(STR) + u64(2) + gstr("a") + gstr("")),
        kv("nested", ARR, u32(ARR) + u64(2) + u32(I16) + u64(1) + struct.pack("<h", 3)
           + u32(I16) + u64(0)),
    ]
    infos = [tinfo("f32", [4], F32_T, 0), tinfo("f16", [2, 2], F16_T, 16),
             tinfo("q8", [32], Q8_0_T, 32), tinfo("q4", [32, 1, 1, 1], Q4_0_T, 80)]
    data = bytes(range(16)) + bytes(8) + bytes(8) + bytes(34) + bytes(14) + bytes(18)
    return build(kvs, infos, data, align=16)


def with_kv(extra_kv):
    return build(DEFAULT_KVS + [extra_kv], DEFAULT_INFOS, DEFAULT_DATA)


def with_infos(infos, data=DEFAULT_DATA):
    return build(DEFAULT_KVS, infos, data)


def nested_array(depth):
    """An array value nested `depth` levels, innermost an empty u8 array."""
    payload = u32(U8) + u64(0)
    for _ in range(depth - 1):
        payload = u32(ARR) + u64(1) + payload
    return payload


def cases():
    v = valid()
    header_len = 24
    key0_at = header_len
    value0_at = key0_at + 8 + len("general.architecture") + 4
    info0_at = header_len + sum(len(k) for k in DEFAULT_KVS)
    data_at = len(pad(header(2, 2) + b"".join(DEFAULT_KVS) + b"".join(DEFAULT_INFOS)))
    yield ("truncated_header.gguf", v[:12], "truncated header")
    # The kv truncations declare no tensors and one kv, so the counts alone are plausible
    # and the reader gets as far as the cut.
    one_kv = header(0, 1) + DEFAULT_KVS[0]
    yield ("truncated_kv_key.gguf", one_kv[:key0_at + 8 + 6], "string length 20 past end")
    yield ("truncated_kv_value.gguf", one_kv[:value0_at + 6],
           "truncated value of 'general.architecture'")
    yield ("truncated_tensor_info.gguf", v[:info0_at + 20], "tensor 'a.weight'")
    yield ("truncated_data.gguf", v[:data_at + 70], "extends past end of file")
    yield ("empty.gguf", b"", "truncated header magic")
    yield ("bad_magic.gguf", build(DEFAULT_KVS, DEFAULT_INFOS, DEFAULT_DATA, magic=b"GGML"), 
        "bad magic")
    yield ("version_1.gguf", build(DEFAULT_KVS, DEFAULT_INFOS, DEFAULT_DATA, version=1), 
        "unsupported version 1")
    yield ("version_99.gguf", build(DEFAULT_KVS, DEFAULT_INFOS, DEFAULT_DATA, version=99), 
        "unsupported version 99")
    yield ("big_endian.gguf", build(DEFAULT_KVS, DEFAULT_INFOS, DEFAULT_DATA,
                                   version=0x03000000), "big-endian")
    yield ("huge_kv_count.gguf", build(DEFAULT_KVS, DEFAULT_INFOS, DEFAULT_DATA,
                                      n_kv=0xFFFFFFFFFFFFFFFF), "kv count")
    yield ("huge_tensor_count.gguf", build(DEFAULT_KVS, DEFAULT_INFOS, DEFAULT_DATA,
                                          n_tensors=1 << 40), "tensor count")
    yield ("huge_string_length.gguf", with_kv(u64(1 << 62) + b"abc"), "string length")
    yield ("huge_array_length.gguf", with_kv(kv("big", ARR, u32(U32) + u64(1 << 61))), 
        "array length")
    yield ("huge_string_array.gguf", with_kv(kv("big", ARR, u32(STR) + u64(1 << 59))), 
        "array length")
    yield ("array_too_deep.gguf", with_kv(kv("deep", ARR, nested_array(9))), 
        "nesting too deep")
    yield ("unknown_value_type.gguf", with_kv(kv("odd", 13, u32(0))), "unknown value type 13")
    yield ("unknown_array_elem_type.gguf", with_kv(kv("odd", ARR, u32(99) + u64(1))), 
        "unknown value type 99")
    yield ("bad_bool.gguf", with_kv(kv("flag", BOOL, b"\x07")), "bool value 7")
    yield ("empty_key.gguf", with_kv(kv("", U32, u32(1))), "empty key")
    yield ("duplicate_key.gguf", with_kv(kv("llama.block_count", U32, u32(2))), 
        "duplicate key 'llama.block_count'")
    yield ("alignment_not_pow2.gguf", with_kv(kv("general.alignment", U32, u32(24))), 
        "not a power of two")
    yield ("alignment_zero.gguf", with_kv(kv("general.alignment", U32, u32(0))), 
        "not a power of two")
    yield ("alignment_wrong_type.gguf", with_kv(kv("general.alignment", U64, u64(32))), 
        "general.alignment has type uint64")
    yield ("unknown_tensor_type.gguf", with_infos(
        [tinfo("a.weight", [8, 2], 4, 0), DEFAULT_INFOS[1]]), "tensor type 4 (Q4_2) was removed")
    yield ("unknown_tensor_type_big.gguf", with_infos(
        [tinfo("a.weight", [8, 2], 1000, 0), DEFAULT_INFOS[1]]), "tensor type 1000 (nf4) is a format ridge makes at load time")
    yield ("n_dims_5.gguf", with_infos(
        [tinfo("a.weight", [8, 2, 1, 1, 1], F32_T, 0), DEFAULT_INFOS[1]]), "n_dims 5")
    yield ("zero_dim.gguf", with_infos(
        [tinfo("a.weight", [8, 0], F32_T, 0), DEFAULT_INFOS[1]]), "dimension 1 is 0")
    yield ("negative_dim.gguf", with_infos(
        [tinfo("a.weight", [-8, 2], F32_T, 0), DEFAULT_INFOS[1]]), "dimension 0 is -8")
    yield ("element_overflow.gguf", with_infos(
        [tinfo("a.weight", [1 << 32, 1 << 32], F32_T, 0), DEFAULT_INFOS[1]]),
        "element count overflows")
    yield ("byte_size_overflow.gguf", with_infos(
        [tinfo("a.weight", [1 << 31, 1 << 31], F32_T, 0), DEFAULT_INFOS[1]]),
        "byte size overflows")
    yield ("block_size_mismatch.gguf", with_infos(
        [tinfo("a.weight", [48, 1], Q8_0_T, 0), DEFAULT_INFOS[1]]),
        "not a multiple of the q8_0 block size 32")
    yield ("empty_tensor_name.gguf", with_infos(
        [tinfo("", [8, 2], F32_T, 0), DEFAULT_INFOS[1]]), "empty name for tensor 0")
    yield ("offset_past_end.gguf", with_infos(
        [DEFAULT_INFOS[0], tinfo("b.weight", [4], F32_T, 1 << 20)]),
        "tensor 'b.weight': data")
    yield ("offset_misaligned.gguf", with_infos(
        [DEFAULT_INFOS[0], tinfo("b.weight", [4], F32_T, 68)]), "not aligned to 32")
    yield ("overlapping_tensors.gguf", with_infos(
        [DEFAULT_INFOS[0], tinfo("b.weight", [4], F32_T, 32)]),
        "tensor 'b.weight': data overlaps tensor 'a.weight'")
    yield ("duplicate_tensor.gguf", with_infos(
        [DEFAULT_INFOS[0], tinfo("a.weight", [4], F32_T, 64)]),
        "duplicate tensor name 'a.weight'")
    yield ("data_section_missing.gguf", (header(2, 2) + b"".join(DEFAULT_KVS)
                                        + b"".join(DEFAULT_INFOS)),
        "data section would start at")


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name.endswith(".gguf"):
            os.remove(os.path.join(OUT, name))
    lines = []
    for name, data, phrase in cases():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        lines.append(f"{name}\t{phrase}\n")
    with open(os.path.join(OUT, "expected.tsv"), "w") as f:
        f.write("# file<TAB>phrase the reader's error message must contain "
                "(generated by ../make_corpus.py)\n")
        f.writelines(lines)
    with open(os.path.join(HERE, "valid_small.gguf"), "wb") as f:
        f.write(valid())
    with open(os.path.join(HERE, "valid_types.gguf"), "wb") as f:
        f.write(valid_types())
    print(f"wrote {len(lines)} hostile files to {OUT}")


if __name__ == "__main__":
    main()
