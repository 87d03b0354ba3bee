"""A fast, hardened GGUF header reader: metadata and tensor table, never tensor data.

GGUF metadata is attacker-controlled. Every count and length is bounded by the bytes
left in the file before anything is allocated, so a hostile file costs at most a walk
over its own bytes. Tokenizer arrays are skipped (their length kept), never turned
into Python lists. The layout follows the GGUF spec and llama.cpp's ggml/src/gguf.cpp.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from ggprof.errors import BadInputError, GGUFError
from ggprof.files import open_regular
from ggprof.model.ggml import GGML_TYPES, SCALAR_FORMATS, GGMLType, ValueType
from ggprof.units import clean_name

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NAME_BYTES = 63  # GGML_MAX_NAME is 64 including the terminating NUL
DEFAULT_ALIGNMENT = 32
INLINE_ARRAY_MAX = 1024  # longer arrays are summarised (type, length), not materialised
INLINE_STRING_MAX = 1 << 20  # longer string values are summarised too
MAX_KEY_BYTES = 1 << 16  # no GGUF key comes close; a longer one is hostile
_INT64_MAX = (1 << 63) - 1
_MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, a 1-byte key, value type, a 1-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 8 + 4 + 8  # name length, name, n_dims, 1 dim, type, offset
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TYPE_OFFSET = struct.Struct("<IQ")  # a tensor's ggml type and data offset
_MAX_TENSOR_INFO_BYTES = 8 + MAX_NAME_BYTES + 4 + 8 * MAX_DIMS + 4 + 8
SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")  # llama.cpp's gguf-split names


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array; `items` is None when it was skipped (tokenizer, or long)."""

    item_type: ValueType
    length: int
    items: tuple[Any, ...] | None


@dataclass(frozen=True)
class SkippedString:
    """A string value too long to be worth decoding; only its length is kept."""

    length: int


@dataclass(frozen=True)
class MetaValue:
    type: ValueType
    value: Any  # int | float | bool | str | ArrayValue | SkippedString


@dataclass(frozen=True, kw_only=True)
class TensorInfo:
    """One row of the tensor table. `shape` is in ggml order (ne[0] is the row length)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: GGMLType
    offset: int  # relative to the data section of its shard
    shard: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def n_bytes(self) -> int:
        return self.n_elements // self.ggml_type.block_size * self.ggml_type.type_size


@dataclass(frozen=True, kw_only=True)
class GGUFHeader:
    """Everything before the tensor data of one GGUF file."""

    path: Path
    file_size_bytes: int
    version: int
    alignment: int
    data_offset: int
    metadata: dict[str, MetaValue]
    tensors: tuple[TensorInfo, ...]

    def get(self, key: str, *types: ValueType) -> Any:
        """The value of `key` (None when absent); GGUFError when its type is not one of `types`."""
        mv = self.metadata.get(key)
        if mv is None:
            return None
        if types and mv.type not in types:
            wanted = " or ".join(t.name for t in types)
            raise GGUFError(self.path, f"key {key!r} has type {mv.type.name}, expected {wanted}")
        return mv.value


class SeekRead(Protocol):
    """What the reader reads a file through: an open file, a remote file's ranges, a kept prefix."""

    def seek(self, pos: int, /) -> Any: ...

    def read(self, n: int, /) -> bytes: ...


class _Window:
    """The bytes of a file around the read position, read forward in chunks.

    Plain reads rather than a memory map: a file truncated while it is read ends in one
    error line, not SIGBUS. Skipped regions (long strings, tokenizer arrays) are never read.
    """

    CHUNK = 1 << 20

    def __init__(self, f: SeekRead, size: int, path: Path) -> None:
        self.f, self.size, self.path = f, size, path
        self.base = 0
        self.data = b""

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def load(self, pos: int, n: int) -> None:
        """Make [pos, pos + n) part of the window (the caller checked it is inside the file)."""
        if self.base <= pos and pos + n <= self.end:
            return
        if self.base <= pos <= self.end:
            prefix, start = self.data[pos - self.base :], self.end
        else:
            prefix, start = b"", pos
        want = min(max(pos + n - start, self.CHUNK), self.size - start)
        self.f.seek(start)
        chunk = self.f.read(want)
        while len(chunk) > 0 and start + len(chunk) < pos + n:  # a short read (a remote file's ranges)
            more = self.f.read(want - len(chunk))
            if not more:
                break
            chunk += more
        if start + len(chunk) < pos + n:
            raise GGUFError(self.path, f"the file ended at byte {start + len(chunk)} while it was read (truncated?)")
        self.data, self.base = prefix + chunk, pos

    def bytes(self, pos: int, n: int) -> bytes:
        self.load(pos, n)
        rel = pos - self.base
        return self.data[rel : rel + n]


class _Parser:
    """Walks one file. Positions are absolute; `end` is the file size."""

    def __init__(self, win: _Window, path: Path, shard: int) -> None:
        self.win = win
        self.end = win.size
        self.pos = 0
        self.path = path
        self.shard = shard

    def fail(self, problem: str) -> GGUFError:
        return GGUFError(self.path, problem)

    def need(self, n: int, what: str) -> None:
        if self.pos + n > self.end:
            raise self.fail(f"{what} at byte {self.pos} needs {n} bytes but the file ends at byte {self.end}")

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        raw = self.win.bytes(self.pos, n)
        self.pos += n
        return raw

    def u32(self, what: str) -> int:
        return int(_U32.unpack(self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(_U64.unpack(self.take(8, what))[0])

    def raw_string(self, what: str, max_bytes: int | None = None) -> bytes:
        n = self.u64(f"length of {what}")
        if max_bytes is not None and n > max_bytes:
            raise self.fail(f"{what} is {n:,} bytes long; at most {max_bytes:,} allowed")
        return self.take(n, what)

    def string(self, what: str, max_bytes: int | None = None) -> str:
        raw = self.raw_string(what, max_bytes)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    # -- header -----------------------------------------------------------------------------
    def parse(self) -> GGUFHeader:
        version, n_tensors, n_kv = self.preamble()
        metadata = self.metadata(n_kv)
        tensors = self.tensor_table(n_tensors)
        header = GGUFHeader(
            path=self.path,
            file_size_bytes=self.end,
            version=version,
            alignment=0,
            data_offset=0,
            metadata=metadata,
            tensors=(),
        )
        alignment = _alignment(header)
        data_offset = -(-self.pos // alignment) * alignment
        _check_data_section(self.path, tensors, data_offset, alignment, self.end)
        return replace(header, alignment=alignment, data_offset=data_offset, tensors=tensors)

    def preamble(self) -> tuple[int, int, int]:
        magic = self.take(4, "magic")
        if magic != MAGIC:
            raise self.fail(f"not a GGUF file (magic {magic!r}, expected b'GGUF')")
        version = self.u32("version")
        if version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in SUPPORTED_VERSIONS or swapped == 1:
                raise self.fail(f"byte-swapped version {version:#010x}: big-endian GGUF is not supported")
            raise self.fail(f"unsupported GGUF version {version} (supported: 2, 3)")
        n_tensors = self.u64("tensor count")
        n_kv = self.u64("metadata count")
        left = self.end - self.pos
        if n_kv * _MIN_KV_BYTES > left:
            raise self.fail(f"header claims {n_kv} metadata entries; {left} bytes cannot hold them")
        if n_tensors * _MIN_TENSOR_INFO_BYTES > left:
            raise self.fail(f"header claims {n_tensors} tensors; {left} bytes cannot hold them")
        return version, n_tensors, n_kv

    def metadata(self, n_kv: int) -> dict[str, MetaValue]:
        out: dict[str, MetaValue] = {}
        for i in range(n_kv):
            key = self.string(f"key of metadata entry {i}", MAX_KEY_BYTES)
            if not key:
                raise self.fail(f"metadata entry {i} has an empty key")
            if key in out:
                raise self.fail(f"duplicate key {clean_name(key)!r}")
            vtype = self.value_type(key, self.u32(f"type of {key!r}"))
            out[key] = MetaValue(vtype, self.value(key, vtype))
        return out

    def value_type(self, key: str, code: int) -> ValueType:
        try:
            return ValueType(code)
        except ValueError:
            raise self.fail(f"key {key!r} has unknown value type {code}") from None

    def value(self, key: str, vtype: ValueType) -> Any:
        if vtype == ValueType.STRING:
            return self.string_value(key)
        if vtype == ValueType.ARRAY:
            return self.array(key)
        fmt, size = SCALAR_FORMATS[vtype]
        raw = self.take(size, f"value of {key!r}")
        if vtype == ValueType.BOOL and raw[0] > 1:
            raise self.fail(f"key {key!r}: bool value {raw[0]} is neither 0 nor 1")
        return struct.unpack("<" + fmt, raw)[0]

    def string_value(self, key: str) -> str | SkippedString:
        n = self.u64(f"length of value of {key!r}")
        if n > INLINE_STRING_MAX:
            self.need(n, f"value of {key!r}")
            self.pos += n
            return SkippedString(n)
        self.pos -= 8
        return self.string(f"value of {key!r}")

    def array(self, key: str) -> ArrayValue:
        item_type = self.value_type(key, self.u32(f"item type of {key!r}"))
        if item_type == ValueType.ARRAY:
            raise self.fail(f"key {key!r} is a nested array (not supported)")
        n = self.u64(f"length of {key!r}")
        item_min = 8 if item_type == ValueType.STRING else SCALAR_FORMATS[item_type][1]
        if n * item_min > self.end - self.pos:
            raise self.fail(f"array {key!r} claims {n} items; the {self.end - self.pos} bytes left cannot hold them")
        keep = n <= INLINE_ARRAY_MAX and not key.startswith("tokenizer.")
        if item_type == ValueType.STRING:
            if keep:
                return ArrayValue(item_type, n, tuple(self.string(f"item of {key!r}") for _ in range(n)))
            self.pos = self.skip_strings(key, n)
            return ArrayValue(item_type, n, None)
        fmt, size = SCALAR_FORMATS[item_type]
        if not keep:
            self.pos += n * size
            return ArrayValue(item_type, n, None)
        raw = self.take(n * size, f"array {key!r}")
        if item_type == ValueType.BOOL and any(b > 1 for b in raw):
            raise self.fail(f"array {key!r} holds a bool that is neither 0 nor 1")
        return ArrayValue(item_type, n, struct.unpack(f"<{n}{fmt}", raw))

    def skip_strings(self, key: str, n: int) -> int:
        """Skip n length-prefixed strings: the hot loop of a 262k-token vocabulary."""
        win, pos, end, unpack = self.win, self.pos, self.end, _U64.unpack_from
        data, base = win.data, win.base
        stop = base + len(data) - 8  # the last position whose length field is in the window
        for _ in range(n):
            if pos > stop:
                if pos + 8 > end:
                    raise self.fail(f"array {key!r}: a string runs past the end of the file")
                win.load(pos, 8)
                data, base = win.data, win.base
                stop = base + len(data) - 8
            pos += 8 + unpack(data, pos - base)[0]
        if pos > end:
            raise self.fail(f"array {key!r}: a string runs past the end of the file")
        return pos

    # -- tensor table -----------------------------------------------------------------------
    def tensor_table(self, n_tensors: int) -> tuple[TensorInfo, ...]:
        seen: set[str] = set()
        out = []
        for i in range(n_tensors):
            t = self.tensor_info_fast(i) if self.end - self.pos >= _MAX_TENSOR_INFO_BYTES else None
            if t is None:
                t = self.tensor_info(i)  # near the end of the file: field by field, for exact errors
            if t.name in seen:
                raise self.fail(f"duplicate tensor name {t.name!r}")
            seen.add(t.name)
            out.append(t)
        return tuple(out)

    def tensor_info_fast(self, i: int) -> TensorInfo | None:
        """One tensor record read from the window in one go (a record is at most
        _MAX_TENSOR_INFO_BYTES, and that many are left in the file); None to take the
        field-by-field path, which words every error exactly."""
        win, pos = self.win, self.pos
        win.load(pos, _MAX_TENSOR_INFO_BYTES)
        data, rel = win.data, pos - win.base
        n_name = _U64.unpack_from(data, rel)[0]
        if n_name > MAX_NAME_BYTES:
            return None
        at = rel + 8 + n_name
        try:
            name = data[rel + 8 : at].decode("utf-8")
        except UnicodeDecodeError:
            return None
        n_dims = _U32.unpack_from(data, at)[0]
        if not 1 <= n_dims <= MAX_DIMS:
            return None
        shape = struct.unpack_from(f"<{n_dims}Q", data, at + 4)
        at += 4 + 8 * n_dims
        code, offset = _TYPE_OFFSET.unpack_from(data, at)
        ggml_type = GGML_TYPES.get(code)
        if ggml_type is None:
            return None
        _check_shape(self.path, name, shape, ggml_type)
        self.pos = pos + (at + 12 - rel)
        return TensorInfo(name=name, shape=shape, ggml_type=ggml_type, offset=offset, shard=self.shard)

    def tensor_info(self, i: int) -> TensorInfo:
        n = self.u64(f"length of name of tensor {i}")
        if n > MAX_NAME_BYTES:
            raise self.fail(f"tensor {i} has a {n}-byte name; ggml allows at most {MAX_NAME_BYTES}")
        raw = self.take(n, f"name of tensor {i}")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"name of tensor {i} is not valid UTF-8") from None
        n_dims = self.u32(f"dimension count of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        shape = tuple(self.u64(f"dimension of {name!r}") for _ in range(n_dims))
        ggml_type = self.tensor_type(name, self.u32(f"type of {name!r}"))
        offset = self.u64(f"offset of {name!r}")
        _check_shape(self.path, name, shape, ggml_type)
        return TensorInfo(name=name, shape=shape, ggml_type=ggml_type, offset=offset, shard=self.shard)

    def tensor_type(self, name: str, code: int) -> GGMLType:
        t = GGML_TYPES.get(code)
        if t is None:
            raise self.fail(f"tensor {name!r} has unknown ggml type {code}")
        return t


def _check_shape(path: Path, name: str, shape: tuple[int, ...], t: GGMLType) -> None:
    n = 1
    for d in shape:
        if d > _INT64_MAX:
            raise GGUFError(path, f"tensor {name!r} has a negative dimension ({d - (1 << 64)})")
        if d == 0:
            raise GGUFError(path, f"tensor {name!r} has a zero dimension {shape}")
        n *= d
        if n > _INT64_MAX:
            raise GGUFError(path, f"tensor {name!r}: element count of shape {shape} overflows int64")
    if shape[0] % t.block_size:
        raise GGUFError(
            path, f"tensor {name!r}: row length {shape[0]} is not a multiple of {t.name}'s block size {t.block_size}"
        )
    if n // t.block_size * t.type_size > _INT64_MAX:
        raise GGUFError(path, f"tensor {name!r}: byte size of shape {shape} overflows int64")


def _alignment(header: GGUFHeader) -> int:
    value = header.get("general.alignment", ValueType.UINT32)
    if value is None:
        return DEFAULT_ALIGNMENT
    if value == 0 or value & (value - 1):
        raise GGUFError(header.path, f"general.alignment {value} is not a power of 2")
    return int(value)


def _check_data_section(path: Path, tensors: Sequence[TensorInfo], data_offset: int, alignment: int, size: int) -> None:
    """Offsets must be aligned, inside the file, and must not overlap."""
    prev: TensorInfo | None = None
    for t in sorted(tensors, key=lambda t: t.offset):
        if t.offset % alignment:
            raise GGUFError(path, f"tensor {t.name!r} offset {t.offset} is not a multiple of the alignment {alignment}")
        end = data_offset + t.offset + t.n_bytes
        if end > size:
            raise GGUFError(
                path,
                f"tensor {t.name!r} data ends at byte {end} but the file has {size} bytes (truncated data section)",
            )
        if prev is not None and prev.offset + prev.n_bytes > t.offset:
            raise GGUFError(path, f"tensors {prev.name!r} and {t.name!r} overlap in the data section")
        prev = t


def read_header(path: str | os.PathLike[str], shard: int = 0) -> GGUFHeader:
    """Read the header of one GGUF file. Raises GGUFError (one line) for anything wrong."""
    p = Path(path)
    try:
        f = open_regular(p)
    except BadInputError as e:
        problem = str(e).rsplit(": ", 1)[-1].replace("is a directory, not a file", "is a directory, not a GGUF file")
        raise GGUFError(clean_name(p), problem) from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise GGUFError(p, "empty file")
        if size < 24:
            raise GGUFError(p, f"file too short for a GGUF header ({size} bytes)")
        return _Parser(_Window(f, size, p), p, shard).parse()


def read_header_from(f: SeekRead, size: int, path: Path, shard: int = 0) -> GGUFHeader:
    """The header of a GGUF file read through `f` (seek and read: a remote file's ranges, a
    cached prefix), `size` bytes long in all. GGUFError for anything wrong."""
    if size < 24:
        raise GGUFError(path, f"file too short for a GGUF header ({size} bytes)")
    return _Parser(_Window(f, size, path), path, shard).parse()


def split_paths(path: Path) -> list[Path] | None:
    """The shard paths of `name-0000K-of-0000N.gguf`, or None for a single-file name."""
    m = SPLIT_NAME.match(path.name)
    if not m or int(m["count"]) < 2:
        return None
    count, no = int(m["count"]), int(m["no"])
    if not 1 <= no <= count:
        raise GGUFError(clean_name(path), f"names shard {no} of a {count}-file split model: there is no such shard")
    return [path.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def read_model_files(path: str | os.PathLike[str]) -> list[GGUFHeader]:
    """Read a model's header(s): one file, or every shard of a split model, in order."""
    p = Path(path)
    shards = split_paths(p)
    if shards is None:
        header = read_header(p)
        count = header.get("split.count", ValueType.UINT16, ValueType.UINT32)
        if count is not None and count > 1:
            raise GGUFError(
                p, f"is shard of a {count}-file split model but is not named name-0000K-of-{count:05d}.gguf"
            )
        return [header]
    for i, sp in enumerate(shards, 1):
        if not sp.exists():
            raise GGUFError(p, f"split model is missing shard {i} of {len(shards)} ({sp.name})")
    headers = [read_header(sp, shard=i) for i, sp in enumerate(shards)]
    _check_split(p, headers)
    return headers


def _check_split(path: Path, headers: list[GGUFHeader]) -> None:
    total = headers[0].get("split.tensors.count", ValueType.INT32, ValueType.UINT16, ValueType.UINT32)
    names: set[str] = set()
    for i, h in enumerate(headers):
        no = h.get("split.no", ValueType.UINT16, ValueType.UINT32)
        count = h.get("split.count", ValueType.UINT16, ValueType.UINT32)
        if no is not None and (no != i or count != len(headers)):
            raise GGUFError(h.path, f"split metadata says shard {no} of {count}, expected {i} of {len(headers)}")
        for t in h.tensors:
            if t.name in names:
                raise GGUFError(h.path, f"tensor {t.name!r} appears in more than one shard")
            names.add(t.name)
    if total is not None and total != len(names):
        raise GGUFError(path, f"split.tensors.count is {total} but the shards hold {len(names)} tensors")
