"""A GGUF file's key-value metadata, read on its own: gguf.GGUFReader also maps every
tensor and builds a numpy view per array element, seconds for a 150k-token vocabulary,
when a test needs only a few keys (the chat template, the special tokens).

    md = read_metadata(path)          # {key: value}
    md["tokenizer.chat_template"]     # str; arrays are lists (numbers: numpy arrays)
    md, tensors = read_header(path)   # and each tensor's name, shape (ggml order), type id
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# GGUF value types: id -> (struct format, numpy dtype) for the fixed-size ones.
_SCALARS = {0: ("<B", np.uint8), 1: ("<b", np.int8), 2: ("<H", np.uint16), 3: ("<h", np.int16),
            4: ("<I", np.uint32), 5: ("<i", np.int32), 6: ("<f", np.float32), 7: ("<?", np.bool_),
            10: ("<Q", np.uint64), 11: ("<q", np.int64), 12: ("<d", np.float64)}
_STRING, _ARRAY = 8, 9


class GgufMetadataError(ValueError):
    pass


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]   # ggml order: the row length first
    type: int                # GGML type id

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def read_metadata(path: str | Path) -> dict:
    """{key: value} of the file's metadata (strings as UTF-8 text; raises
    GgufMetadataError naming the file and offset on a malformed one)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return _Parser(m, str(path)).metadata()


def read_header(path: str | Path) -> tuple[dict, list[TensorInfo]]:
    """The metadata and the tensor directory (not the tensors' data)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        parser = _Parser(m, str(path))
        return parser.metadata(), parser.tensors()


class _Parser:
    def __init__(self, buf, path: str):
        self.buf, self.path, self.pos = buf, path, 0

    def fail(self, what: str):
        raise GgufMetadataError(f"{self.path}: {what} at byte {self.pos}")

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            self.fail("file ends inside the metadata")
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            self.fail(f"string of {n} bytes runs past the end")
        try:
            s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"string of {n} bytes is not UTF-8 ({e.reason})")
        self.pos += n
        return s

    def value(self, vtype: int):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype][0])
        if vtype == _STRING:
            return self.string()
        if vtype != _ARRAY:
            self.fail(f"unknown value type {vtype}")
        etype, count = self.take("<I"), self.take("<Q")
        if etype in _SCALARS:
            dtype = np.dtype(_SCALARS[etype][1]).newbyteorder("<")
            end = self.pos + count * dtype.itemsize
            if end > len(self.buf):
                self.fail(f"array of {count} values runs past the end")
            out = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
            self.pos = end
            return out
        return [self.value(etype) for _ in range(count)]

    def metadata(self) -> dict:
        if bytes(self.buf[:4]) != b"GGUF":
            self.fail("not a GGUF file (no magic)")
        self.pos = 4
        version = self.take("<I")
        if version < 2:
            self.fail(f"GGUF version {version} (64-bit counts need version 2 or later)")
        self.n_tensors = self.take("<Q")
        n_kv = self.take("<Q")
        out = {}
        for _ in range(n_kv):
            key = self.string()
            out[key] = self.value(self.take("<I"))
        return out

    def tensors(self) -> list[TensorInfo]:
        """Call after metadata(): the tensor infos that follow it."""
        out = []
        for _ in range(self.n_tensors):
            name = self.string()
            n_dims = self.take("<I")
            shape = tuple(self.take("<Q") for _ in range(n_dims))
            ttype = self.take("<I")
            self.take("<Q")  # data offset
            out.append(TensorInfo(name, shape, ttype))
        return out
