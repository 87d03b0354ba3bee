"""Malformed and hostile GGUF files: one `Error: <path>: <problem>` line, exit status 2,
no traceback, no hang, no allocation beyond the file's size."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ggufs import Shape, write_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import RunCli

from ggprof.errors import GGUFError
from ggprof.model.archs import SWA_DEFAULTS
from ggprof.model.spec import load_model
from ggprof.report.inspect import inspect_dict

U32, U64, STR, ARR, BOOL = 4, 10, 8, 9, 7


def s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


@dataclass
class Raw:
    """A GGUF file byte by byte, so each test can break exactly one thing."""

    version: int = 3
    kvs: list[bytes] = field(default_factory=lambda: [kv_str(b"general.architecture", b"llama")])
    tensors: list[bytes] = field(default_factory=lambda: [tensor(b"a.weight", [32], 0, 0)])
    n_kv: int | None = None
    n_tensors: int | None = None
    data_bytes: int = 128
    alignment: int = 32

    def build(self) -> bytes:
        head = b"GGUF" + struct.pack(
            "<IQQ",
            self.version,
            len(self.tensors) if self.n_tensors is None else self.n_tensors,
            len(self.kvs) if self.n_kv is None else self.n_kv,
        )
        body = head + b"".join(self.kvs) + b"".join(self.tensors)
        pad = -len(body) % self.alignment
        return body + b"\0" * (pad + self.data_bytes)


def kv_str(key: bytes, value: bytes) -> bytes:
    return s(key) + struct.pack("<I", STR) + s(value)


def kv_u32(key: bytes, value: int) -> bytes:
    return s(key) + struct.pack("<II", U32, value)


def tensor(name: bytes, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return (
        s(name)
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<Q", d) for d in dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def two_tensors(off_b: int) -> list[bytes]:
    return [tensor(b"a.weight", [32], 0, 0), tensor(b"b.weight", [32], 0, off_b)]


CASES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty file"),
    "short": (b"GGUF\x03\0\0\0", "too short"),
    "bad magic": (b"GGML" + Raw().build()[4:], "not a GGUF file"),
    "version 1": (Raw(version=1).build(), "unsupported GGUF version 1"),
    "version 4": (Raw(version=4).build(), "unsupported GGUF version 4"),
    "byte-swapped version": (Raw(version=0x03000000).build(), "byte-swapped version"),
    "kv count too large": (Raw(n_kv=1 << 40).build(), "metadata entries"),
    "tensor count too large": (Raw(n_tensors=1 << 50).build(), "tensors;"),
    "key length past end": (Raw(kvs=[struct.pack("<Q", 1 << 60) + b"x" * 40]).build(), "key of metadata entry 0"),
    "string value past end": (Raw(kvs=[s(b"k") + struct.pack("<IQ", STR, 1 << 40)]).build(), "value of 'k'"),
    "array length past end": (Raw(kvs=[s(b"k") + struct.pack("<IIQ", ARR, U32, 1 << 40)]).build(), "claims"),
    "string array past end": (
        Raw(
            kvs=[s(b"tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 3) + s(b"a") + struct.pack("<Q", 1 << 30)]
        ).build(),
        "past the end",
    ),
    "unknown value type": (Raw(kvs=[s(b"k") + struct.pack("<I", 13) + b"\0" * 8]).build(), "unknown value type 13"),
    "nested array": (Raw(kvs=[s(b"k") + struct.pack("<IIQ", ARR, ARR, 1) + b"\0" * 16]).build(), "nested array"),
    "bool not 0/1": (Raw(kvs=[s(b"k") + struct.pack("<IB", BOOL, 7)]).build(), "neither 0 nor 1"),
    "alignment wrong type": (
        Raw(kvs=[kv_str(b"general.alignment", b"32")]).build(),
        "'general.alignment' has type STRING, expected UINT32",
    ),
    "alignment not power of 2": (Raw(kvs=[kv_u32(b"general.alignment", 48)]).build(), "not a power of 2"),
    "empty key": (Raw(kvs=[kv_str(b"", b"x")]).build(), "empty key"),
    "duplicate key": (Raw(kvs=[kv_u32(b"k", 1), kv_u32(b"k", 2)]).build(), "duplicate key 'k'"),
    "invalid utf-8 key": (Raw(kvs=[kv_u32(b"k\xff\xfe", 1)]).build(), "not valid UTF-8"),
    "invalid utf-8 value": (Raw(kvs=[kv_str(b"general.name", b"\xc3\x28")]).build(), "not valid UTF-8"),
    "zero dimension": (Raw(tensors=[tensor(b"a", [32, 0], 0, 0)]).build(), "zero dimension"),
    "negative dimension": (Raw(tensors=[tensor(b"a", [32, (1 << 64) - 5], 0, 0)]).build(), "negative dimension"),
    "no dimensions": (Raw(tensors=[tensor(b"a", [], 0, 0)]).build(), "0 dimensions"),
    "5 dimensions": (Raw(tensors=[tensor(b"a", [1, 1, 1, 1, 1], 0, 0)]).build(), "5 dimensions"),
    "element count overflow": (Raw(tensors=[tensor(b"a", [1 << 40, 1 << 40], 0, 0)]).build(), "overflows int64"),
    "byte size overflow": (Raw(tensors=[tensor(b"a", [1 << 31, 1 << 31], 0, 0)]).build(), "byte size"),
    "unknown ggml type": (Raw(tensors=[tensor(b"a", [32], 99, 0)]).build(), "unknown ggml type 99"),
    "removed ggml type": (Raw(tensors=[tensor(b"a", [32], 4, 0)]).build(), "unknown ggml type 4"),
    "row not a whole block": (Raw(tensors=[tensor(b"a", [33], 8, 0)]).build(), "block size 32"),
    "64-byte tensor name": (Raw(tensors=[tensor(b"n" * 64, [32], 0, 0)]).build(), "64-byte name"),
    "duplicate tensor name": (
        Raw(tensors=[tensor(b"a", [32], 0, 0), tensor(b"a", [32], 0, 128)], data_bytes=256).build(),
        "duplicate tensor name 'a'",
    ),
    "invalid utf-8 tensor name": (Raw(tensors=[tensor(b"\xff", [32], 0, 0)]).build(), "not valid UTF-8"),
    "misaligned offset": (Raw(tensors=two_tensors(130), data_bytes=512).build(), "not a multiple of the alignment"),
    "overlapping tensors": (Raw(tensors=two_tensors(64), data_bytes=512).build(), "overlap"),
    "offset past end": (Raw(tensors=[tensor(b"a", [32], 0, 1 << 40)]).build(), "truncated data section"),
    "truncated data": (Raw(tensors=[tensor(b"a", [1024], 0, 0)], data_bytes=100).build(), "truncated data"),
    "tensor table truncated": (Raw().build()[:-140], "ends at byte"),
    "no architecture": (Raw(kvs=[kv_u32(b"x", 1)]).build(), "no general.architecture"),
    "layer count beyond the tensors": (
        Raw(kvs=[kv_str(b"general.architecture", b"llama"), kv_u32(b"llama.block_count", 1 << 31)]).build(),
        "llama.block_count 2147483648 is more than the 1 tensors could hold",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_file_one_line_exit_2(case: str, tmp_path: Path, run_cli: RunCli) -> None:
    data, problem = CASES[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    r = run_cli("inspect", str(path))
    assert r.exit_code == 2, r
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"Error: {path}: ")
    assert problem in lines[0]


def test_missing_path_and_directory(tmp_path: Path, run_cli: RunCli) -> None:
    r = run_cli("inspect", str(tmp_path / "nope.gguf"))
    assert (r.exit_code, r.stderr) == (2, f"Error: {tmp_path / 'nope.gguf'}: no such file\n")
    r = run_cli("inspect", str(tmp_path))
    assert (r.exit_code, r.stderr) == (2, f"Error: {tmp_path}: is a directory, not a GGUF file\n")


def test_no_permission(tmp_path: Path) -> None:
    """A real permission check; as root, the reader runs without the capability to bypass it."""
    path = tmp_path / "secret.gguf"
    path.write_bytes(Raw().build())
    path.chmod(0)
    code = f"import sys; from ggprof.cli import main; sys.exit(main(['inspect', {str(path)!r}]))"
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: permissions cannot be denied")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    r = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"Error: {path}: permission denied\n"


def test_split_with_missing_shard(tmp_path: Path, run_cli: RunCli) -> None:
    files = write_model(tmp_path / "m.gguf", Shape(), split_max_tensors=7)
    files[1].unlink()
    r = run_cli("inspect", str(files[0]))
    assert r.exit_code == 2
    assert r.stderr == f"Error: {files[0]}: split model is missing shard 2 of 3 (m-00002-of-00003.gguf)\n"


def test_split_shard_out_of_place(tmp_path: Path) -> None:
    files = write_model(tmp_path / "m.gguf", Shape(), split_max_tensors=7)
    files[0].rename(tmp_path / "tmp")
    files[1].rename(files[0])
    (tmp_path / "tmp").rename(files[1])
    with pytest.raises(GGUFError, match="split metadata says shard"):
        load_model(files[0])


def test_control_characters_never_reach_the_terminal(tmp_path: Path, run_cli: RunCli) -> None:
    evil = "evil\x1b]0;pwned\x07\x1b[31mred\u202e\x9b2J"
    files = write_model(tmp_path / "evil.gguf", Shape(name=evil))
    text = run_cli("inspect", str(files[0])).stdout
    assert "evil]0;pwned[31mred2J" in text
    assert not any(ch in text for ch in "\x1b\x07\u202e\x9b")
    js = run_cli("inspect", "--json", str(files[0])).stdout
    assert "\x1b" not in js and "\\u001b" in js


# -- fuzzing: mutations of a valid file never raise anything but GGUFError ----------------------
_VALID: list[bytes] = []
_BASES = [
    Shape(n_layers=1, n_embd=64, n_heads=2, n_ff=64, vocab=40, extra={"llama.attention.sliding_window": 16}),
    Shape(
        arch="gemma3",
        n_layers=3,
        n_embd=64,
        n_heads=2,
        n_kv_heads=[1, 2, 1],
        n_ff=64,
        vocab=30,
        n_experts=4,
        n_experts_used=2,
        extra={"gemma3.attention.sliding_window": 8, "gemma3.attention.sliding_window_pattern": [True, False, True]},
    ),
    Shape(
        arch="deepseek2",
        n_layers=2,
        n_embd=64,
        n_heads=2,
        n_ff=64,
        vocab=30,
        extra={"deepseek2.attention.kv_lora_rank": 32, "deepseek2.rope.dimension_count": 16},
    ),
]


def _valid_bytes(tmp: Path, which: int) -> bytes:
    """Small valid files: dense with a window, per-layer heads + MoE + SWA pattern, MLA."""
    if not _VALID:
        _VALID.extend(write_model(tmp / f"fuzz-base-{i}.gguf", shape)[0].read_bytes() for i, shape in enumerate(_BASES))
    return _VALID[which % len(_VALID)]


mutation = st.one_of(
    st.tuples(st.just("byte"), st.integers(0, 1 << 20), st.integers(0, 255)),
    st.tuples(st.just("u64"), st.integers(0, 1 << 20), st.integers(0, (1 << 64) - 1)),
    st.tuples(st.just("u32"), st.integers(0, 1 << 20), st.sampled_from([0, 1, 7, 9, 13, 64, 1 << 31, (1 << 32) - 1])),
    st.tuples(st.just("cut"), st.integers(0, 1 << 20), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.integers(0, 255)),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2), st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_only_gguf_errors_escape(tmp_path: Path, base: int, muts: list[tuple[str, int, int]]) -> None:
    data = bytearray(_valid_bytes(tmp_path, base))
    header_end = 2000  # mutate mostly where the header lives
    for kind, pos, value in muts:
        if not data:
            break
        pos %= min(len(data), header_end)
        if kind == "byte":
            data[pos] = value
        elif kind == "u64":
            data[pos : pos + 8] = struct.pack("<Q", value)
        elif kind == "u32":
            data[pos : pos + 4] = struct.pack("<I", value)
        elif kind == "cut":
            del data[pos:]
        else:
            data.insert(pos, value)
    path = tmp_path / "fuzzed.gguf"
    path.write_bytes(bytes(data))
    tracemalloc.start()
    try:
        inspect_dict(load_model(path, swa_default=SWA_DEFAULTS.get))  # everything `ggprof inspect` derives
    except GGUFError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 4 * len(data) + (2 << 20)  # nothing bigger than the file itself
