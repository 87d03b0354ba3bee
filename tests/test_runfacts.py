"""The table of run facts (ggprof.runfacts) against the real llama.cpp programs the tests build:
every spelling it gives is one llama-bench and llama-server take or print, and what ggprof
passes to llama-bench comes back in llama-bench's own JSON and markdown as it was given."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ggprof import runfacts
from ggprof.runfacts import BY_HEAD, BY_NAME, FACTS, bench_arguments, command_line, from_json


def _help(program: Path) -> str:
    r = subprocess.run([str(program), "--help"], capture_output=True, text=True, timeout=60, check=False)
    return r.stdout + r.stderr


@pytest.mark.slow
def test_every_spelling_is_one_the_real_programs_take(llama_tools: Path) -> None:
    bench, server = _help(llama_tools / "llama-bench"), _help(llama_tools / "llama-server")
    for fact in FACTS:
        for flag in (fact.bench_flags or fact.flags[:2]) if fact.bench else ():
            assert re.search(rf"(^|[\s,]){re.escape(flag)}([\s,]|$)", bench, re.M), (fact.name, flag, "llama-bench")
        for flag in (*fact.flags, *fact.set_by):
            assert re.search(rf"(^|[\s,]){re.escape(flag)}([\s,=]|$)", server, re.M), (fact.name, flag, "llama-server")


GIVEN = {
    "n_threads": 1,
    "n_gpu_layers": 0,
    "n_cpu_moe": 2,  # a dense model's: no tensor is an expert, the setting is kept all the same
    "n_batch": 64,
    "n_ubatch": 32,
    "flash_attn": "on",
    "type_k": "q8_0",
    "type_v": "q8_0",
    "repack": False,
    "split_mode": "none",
    "main_gpu": 1,  # harmless without a GPU: -dev none leaves llama.cpp no device to pick from
    "no_kv_offload": True,
    "tensor_split": (3.0, 1.0),  # llama-bench writes it back as 3.00/1.00
    "devices": ("none",),
}


@pytest.mark.slow
def test_what_llama_bench_is_given_it_reports_back(llama_tools: Path, gemma_path: Path) -> None:
    """The facts, as ggprof spells them to llama-bench, come back in its JSON row and its
    markdown table as given (each fact that differs from its default: all of them here)."""
    args = ["-m", str(gemma_path), "-p", "16", "-n", "0", "-r", "1", *bench_arguments(GIVEN)]
    assert set(GIVEN) <= {f.name for f in FACTS} and all(GIVEN[n] != BY_NAME[n].default for n in GIVEN)
    out = subprocess.run(
        [str(llama_tools / "llama-bench"), *args, "-o", "json"], capture_output=True, text=True, timeout=300, check=True
    )
    row = json.loads(out.stdout)[0]
    assert {k: v for k, v in from_json(row).items() if k in GIVEN} == GIVEN
    md = subprocess.run(
        [str(llama_tools / "llama-bench"), *args, "-o", "md"], capture_output=True, text=True, timeout=300, check=True
    )
    lines = [ln for ln in md.stdout.splitlines() if ln.startswith("|")]
    heads = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    read = {BY_HEAD[h].name: BY_HEAD[h].read(c) for h, c in zip(heads, cells, strict=True) if h in BY_HEAD}
    # a CPU build's table leaves ngl out (llama-bench prints it for GPU backends only)
    assert read == {k: v for k, v in GIVEN.items() if k != "n_gpu_layers"}


def test_a_command_line_spells_each_fact_as_llama_cpp_does_today() -> None:
    row: dict[str, object] = {"n_threads": 2, "n_gpu_layers": -1, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1}
    row |= {"type_k": "f16", "type_v": "q8_0"}
    assert command_line(from_json(row)) == "-t 2 -ngl -1 -b 2048 -ub 512 -fa auto -ctk f16 -ctv q8_0"
    # older llama-bench wrote flash attention as true/false
    assert command_line(from_json({"flash_attn": True})) == "-fa on"
    assert command_line(from_json({"flash_attn": False, "tensor_split": "3/1/0/0"})) == "-fa off -ts 3,1"


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("n_threads", 0),
        ("n_threads", 10**6),
        ("n_ubatch", -5),
        ("n_ubatch", "1e308"),
        ("n_batch", True),
        ("flash_attn", 2),
        ("flash_attn", "maybe"),
        ("type_k", "q9_9"),
        ("tensor_split", "nan/1"),
        ("tensor_split", "0/0"),
        ("tensor_split", "/".join(["1"] * 17)),
        ("devices", "CUDA0,my-gpu"),
        ("devices", "CUDA0;rm -rf"),
        ("devices", "/".join(["CUDA0"] * 17)),
        ("split_mode", "columns"),
        ("main_gpu", 16),
    ],
)
def test_a_value_that_cannot_be_the_facts_is_not_read(name: str, raw: object) -> None:
    assert BY_NAME[name].read(raw) is None


def test_a_device_list_is_read_as_each_llama_cpp_program_writes_it() -> None:
    """llama-server's -dev separates devices by `,`, llama-bench's -dev and JSON by `/` (its `,`
    separates runs); `auto` is llama.cpp's own choice, `none` no device; an RPC server's device is
    RPC<n>[host:port] (ggml-rpc.cpp)."""
    devices = BY_NAME["devices"]
    assert devices.read("CUDA0,CUDA1") == devices.read("CUDA0/CUDA1") == ("CUDA0", "CUDA1")
    assert devices.read("auto") == () and devices.read("none") == ("none",)
    assert devices.read("RPC0[192.168.1.20:50052]/Vulkan1") == ("RPC0[192.168.1.20:50052]", "Vulkan1")
    assert (
        devices.bench_argument(("CUDA0", "CUDA1")) == "CUDA0/CUDA1"
        and devices.spell(("CUDA0", "CUDA1")) == "CUDA0,CUDA1"
    )
    row = {"split_mode": "row", "main_gpu": 1, "tensor_split": "3.00/1.00", "devices": "CUDA0/CUDA1"}
    assert command_line(from_json(row)) == "-sm row -mg 1 -ts 3,1 -dev CUDA0,CUDA1"
    assert bench_arguments(from_json(row)) == ["-sm", "row", "-mg", "1", "-ts", "3/1", "-dev", "CUDA0/CUDA1"]
    # one device, as llama.cpp's defaults say: no placement over several devices
    one = {"split_mode": "layer", "main_gpu": 0, "tensor_split": "0.00", "devices": "auto", "n_cpu_moe": 0}
    assert runfacts.placement_of(from_json(one)) == (("n_cpu_moe", 0),)


def test_llama_bench_is_given_only_what_differs_from_its_defaults() -> None:
    assert bench_arguments({"n_threads": 4, "n_gpu_layers": -1, "n_batch": 2048, "n_ubatch": 512}) == [
        "-t",
        "4",
        "-ngl",
        "999",  # every layer, spelled as every build takes it (older builds' default was 99)
    ]
    assert bench_arguments({"flash_attn": "auto", "repack": True, "tensor_split": ()}) == []
    assert bench_arguments({"flash_attn": "off", "tensor_split": (3.0, 1.0)}) == ["-fa", "0", "-ts", "3/1"]


def test_the_flash_attention_numbers_are_llama_cpps() -> None:
    """llama.h's llama_flash_attn_type: AUTO = -1, DISABLED = 0, ENABLED = 1."""
    assert runfacts.FLASH_ATTN_TYPES == {"auto": -1, "off": 0, "on": 1}


def test_compare_names_differing_run_facts_as_llama_cpp_spells_them(tmp_path: Path) -> None:
    from support import in_process

    base: dict[str, object] = {
        "n_prompt": 0,
        "n_gen": 128,
        "n_depth": 0,
        "avg_ts": 100.0,
        "stddev_ts": 1.0,
        "n_threads": 2,
    }
    base |= {"samples_ts": [99.0, 100.0, 101.0], "flash_attn": -1, "n_ubatch": 512, "type_k": "f16"}
    (tmp_path / "a.json").write_text(json.dumps([base]))
    other = base | {"flash_attn": 1, "n_ubatch": 64, "avg_ts": 121.0, "samples_ts": [120.0, 121.0, 122.0]}
    (tmp_path / "b.json").write_text(json.dumps([other]))
    r = in_process("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert r.exit_code == 0, r.stderr
    assert (
        "also different (not only the thing compared): physical batch: 512 vs 64; flash attention: auto vs on"
        in r.stdout
    )


def test_a_report_prints_the_runs_flags_as_llama_cpp_spells_them(tmp_path: Path) -> None:
    """llama-bench's JSON keeps flash attention as -1; the report's command line says `-fa auto`."""
    from support import history_record, in_process

    from ggprof.history.store import RunRecord, save

    record = history_record().to_json()
    record["result"]["rows"] = [
        row | {"n_gpu_layers": -1, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "type_k": "f16", "type_v": "f16"}
        for row in record["result"]["rows"]
    ]
    db = tmp_path / "h.db"
    save(db, RunRecord.from_json(record))
    r = in_process("report", "--db", str(db))
    assert r.exit_code == 0, r.stderr
    assert "- **flags:** -t 2 -ngl -1 -b 2048 -ub 512 -fa auto -ctk f16 -ctv f16\n" in r.stdout


def test_a_servers_command_line_is_read_with_its_bare_flags() -> None:
    """llama-server's switches take no value (`--no-repack`, `--no-cache-prompt`, `-kvu`); its
    sampler chain is a `;` list; the last spelling given wins, as llama.cpp's parser does."""
    argv = ["llama-server", "-m", "m.gguf", "-np", "4", "-c", "2048", "-ub", "64", "--no-repack", "-kvu"]
    argv += ["--samplers", "penalties;top_k", "--repeat-penalty", "1.1", "--no-cache-prompt", "-tb", "2", "-t", "1"]
    assert dict(runfacts.facts_from_argv(argv, BY_NAME)) == {
        "n_threads": 1,
        "n_ubatch": 64,
        "repack": False,
        "n_threads_batch": 2,
        "n_ctx": 2048,
        "n_slots": 4,
        "kv_unified": True,
        "cache_prompt": False,
        "samplers": ("penalties", "top_k"),
        "repeat_penalty": 1.1,
    }
    assert command_line({"cache_prompt": False, "kv_unified": True, "samplers": ("top_k",)}) == (
        "-kvu --no-cache-prompt --samplers top_k"
    )


def test_a_servers_props_are_read_into_the_table() -> None:
    """The recorded /props of the vendored llama-server (tests/data/servers): its slots, their
    context and its sampler chain, float32 parameters kept to their digits."""
    props = json.loads((Path(__file__).parent / "data" / "servers" / "llama-server-props.json").read_text())
    read = runfacts.from_props(props)
    assert read["n_slots"] == 1 and read["n_ctx_slot"] == 1024 and read["spec_type"] == "none"
    assert read["samplers"] == BY_NAME["samplers"].default
    assert {read[n] for n in runfacts.SAMPLING if n != "samplers"} <= {BY_NAME[n].default for n in runfacts.SAMPLING}
    assert read["temp"] == 0.8 and read["top_p"] == 0.95
    assert runfacts.from_props({"total_slots": "four", "default_generation_settings": {"n_ctx": -3}}) == {}


def test_a_switch_is_read_as_a_switch_and_a_value_after_it_as_the_value() -> None:
    """llama-server's `-nkvo` and `-cmoe` take no value (every layer's experts in RAM: as many
    layers as llama.cpp counts); llama-bench's `-nkvo 0` gives one, and `-ngl 99` after a switch
    is not read as its value."""
    names = ("n_gpu_layers", "n_cpu_moe", "no_kv_offload")
    server = ["llama-server", "-m", "m.gguf", "-cmoe", "-nkvo", "-ngl", "99"]
    assert dict(runfacts.facts_from_argv(server, names)) == {
        "n_gpu_layers": 99,
        "n_cpu_moe": 2**31 - 1,
        "no_kv_offload": True,
    }
    bench = ["llama-bench", "-m", "m.gguf", "-nkvo", "0", "-ncmoe", "3"]
    assert dict(runfacts.facts_from_argv(bench, names)) == {"n_cpu_moe": 3, "no_kv_offload": False}
    assert dict(runfacts.facts_from_argv(["llama-server", "--no-kv-offload"], names)) == {"no_kv_offload": True}
