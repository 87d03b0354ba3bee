"""Published llama.cpp results whose weights are not all in one GPU's memory
(benchmarks/data/placement-results.jsonl: experts in RAM, several GPUs, unified memory, spill,
partial offload) judged by `ggprof check` on their placement, as published and slowed to a third.

Each row becomes one `ggprof check MODEL --tg X --pp Y --prompt N --depth D --device GPU[,GPU...]
--backend B` call with its placement's flags (-ngl, -ncmoe, -sm, -ts, -nkvo), how its driver
spilled where the row says (`--spill`: Windows' fallback, managed memory) and its RAM's bandwidth
where the row states the RAM (`--ram-bandwidth`; else none: the RAM's class), run in this process
through ggprof's own CLI on a header of the model's published shape (tests/ggufs.py's writer; the
data section a hole); a prompt whose length the row does not state is not judged. This host's
measured bandwidth is never read (an empty cache).

The fitted parts of these verdicts (ggprof.calibration.placements: the RAM's share on a token's
part in it, the link's on spilled bytes and on a prompt's copies of weights in RAM, -nkvo's round
trip a layer from rows paired with the same run's cache on the GPU) are fitted
on the rows that state what each needs and left out by machine: each machine's rows are judged by
shares fitted on the other machines' rows (`calibrate.py --write` keeps the fit on them all); a
MoE layer's fixed time (bench_moe.py) is fitted without the machine's GPUs.

Printed: each share with its rows, then per category: rows, rows judged (a model with no stated
size is not), honest rows IMPOSSIBLE and SUSPICIOUS, slowed rows caught (SUSPICIOUS or
IMPOSSIBLE). Targets (issue 60): 0% impossible, at most 5% suspicious, at least 95% of the slowed
caught, per category.

    python benchmarks/bench_placements.py [--rows] [--in-sample] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import math
import os
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "placement-results.jsonl"
sys.path.insert(0, str(ROOT / "tests"))  # the header writer the tests use

from ggufs import F16, GPT_OSS_120B, MXFP4, Q8_0, QWEN36_27B, QWEN36_35B_A3B, Shape, nbytes, write_model  # noqa: E402

from ggprof.calibration.placements import (  # noqa: E402
    ShareRow,
    fit_share,
    implied_link_share,
    implied_ram_share,
    implied_trip_s,
)
from ggprof.calibration.placements import held_out as held_out_fit  # noqa: E402
from ggprof.machine.profiles import ProfileDB  # noqa: E402
from ggprof.physics.shares import PlacementFits, TokenParts  # noqa: E402

WHAT = {
    "ram": "the RAM's share on a token's part in it",
    "spill": "the host link's share on spilled bytes (weights, or a cache)",
    "copies": "the host link's share on a prompt's copies of weights in RAM",
    "trip": "a layer's round trip to the CPU with its cache in RAM (-nkvo), seconds",
}

CATEGORIES = ("experts_in_ram", "multi_gpu", "unified_memory", "spill", "partial_offload")
SLOWED = 3.0
NKVO = re.compile(r"(^|\s)(-nkvo|--no-kv-offload)(?!\s+0\b)(\s|$)")  # the KV cache kept in RAM

# Published shapes (each model's config.json): layers, width, heads, KV heads, head width,
# vocabulary, routed experts (0: dense). The expert width and the experts a token uses are solved
# from the row's parameters and active parameters, so the bytes a token reads are the row's.
SHAPES: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "qwen3-30b-a3b": (48, 2048, 32, 4, 128, 151936, 128),
    "deepseek-coder-v2-lite": (27, 2048, 16, 16, 128, 102400, 64),
    "qwen3.5-35b-a3b": (40, 2048, 16, 2, 256, 248320, 256),
    "qwen3.6-35b-a3b": (40, 2048, 16, 2, 256, 248320, 256),
    "glm-4.5-air": (46, 4096, 96, 8, 128, 151552, 128),
    "qwen3-235b-a22b": (94, 4096, 64, 4, 128, 151936, 128),
    "qwen3.5-122b-a10b": (48, 3072, 32, 2, 256, 248320, 256),
    "minimax-m2": (62, 3072, 48, 8, 128, 200064, 256),
    "deepseek-v3": (61, 7168, 128, 4, 128, 129280, 256),
    "deepseek-r1": (61, 7168, 128, 4, 128, 129280, 256),
    "llama-3-70b": (80, 8192, 64, 8, 128, 128256, 0),
    "llama-3.3-70b": (80, 8192, 64, 8, 128, 128256, 0),
    "llama 3 70b": (80, 8192, 64, 8, 128, 128256, 0),
    "qwen3.8-27b": (64, 5120, 24, 4, 256, 248320, 0),
    "gemma-2-9b": (42, 3584, 16, 8, 256, 256000, 0),
    "qwen2.5-14b": (48, 5120, 40, 8, 128, 152064, 0),
    "qwen2.5-coder-14b": (48, 5120, 40, 8, 128, 152064, 0),
    "qwen3-14b": (40, 5120, 40, 8, 128, 151936, 0),
    "gemma-3-12b": (48, 3840, 16, 8, 256, 262144, 0),
    "phi-4": (40, 5120, 40, 10, 128, 100352, 0),
    "llama-2-70b": (80, 8192, 64, 8, 128, 32000, 0),
    "mistral-small-24b": (40, 5120, 32, 8, 128, 131072, 0),
    "deepseek-r1-distill-qwen-7b": (28, 3584, 28, 4, 128, 152064, 0),  # Qwen2.5-Math-7B's
    "llama-2-7b": (32, 4096, 32, 32, 128, 32000, 0),
}
QTYPES = ("IQ1_S", "IQ2_XXS", "IQ2_S", "Q2_K", "Q3_K", "IQ4_XS", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "F16")


def qtype_of(quant: str) -> Any:
    import gguf

    q = quant.upper().replace("UD-", "").replace("IQ2_M", "IQ2_S")  # llama-quant.cpp's IQ2_M: IQ2_S tensors
    if "MXFP4" in q:
        return MXFP4
    for name in QTYPES:
        if q.startswith(name) or q.startswith(name.replace("_K", "")):
            return gguf.GGMLQuantizationType[name]
    return Q8_0 if q.startswith("Q8") else F16


def shape_of(row: dict[str, Any]) -> Shape | None:
    """The model's shape, or None where the row leaves its parameters out."""
    model = row["model"].lower()
    shape = GPT_OSS_120B if model.startswith("gpt-oss-120b") else _sized(row, model)
    # the header's context holds what the row ran (its depth, prompt and generation)
    need = sum(row.get(k) or 0 for k in ("depth", "pp_tokens", "tg_tokens")) + 1
    return replace(shape, context=need) if shape and need > shape.context else shape


def _sized(row: dict[str, Any], model: str) -> Shape | None:
    if model.startswith("gpt-oss-20b"):
        return replace(GPT_OSS_120B, n_layers=24, n_experts=32, name="gpt-oss-20b")
    shape = _shape_of(row, model)
    if shape is None or not row["model_size_gib"]:
        return shape
    # a mixed quant (Q3_K_M, UD-Q4_K_XL) is larger than its base type: the type nearest the stated size
    import gguf

    def gib(mixed: Shape) -> float:
        return sum(nbytes(s, q) for _, s, q in mixed.tensors()) / 2**30

    types = [gguf.GGMLQuantizationType[n] for n in QTYPES]
    # each type alone, and as llama-quant.cpp's _M mixes make it: the output layer at Q6_K, attn_v and
    # ffn_down one type up on the layers use_more_bits picks
    mixes = [replace(shape, qtype=t) for t in types] + [
        replace(shape, qtype=t, head_qtype=gguf.GGMLQuantizationType.Q6_K, more_bits_qtype=up)
        for t, up in itertools.pairwise(types[2:-1])
    ]
    nearest = min(mixes, key=lambda s: abs(gib(s) - row["model_size_gib"]))
    # and scaled until the file is the stated size (a mix's tensors of more bits than the types here:
    # a spill's size is the excess over the GPU, so 5% matters): a dense model's feed-forward width in
    # whole blocks of 256, a mixture's count of experts (its experts' width is a block or three)
    field, step = ("n_experts", 1) if nearest.n_experts else ("n_ff", 256)
    for _ in range(3):
        now = getattr(nearest, field)
        per_step = gib(replace(nearest, **{field: now + step})) - gib(nearest)
        steps = round((row["model_size_gib"] - gib(nearest)) / per_step) if per_step > 0 else 0
        if steps == 0:
            break
        nearest = replace(nearest, **{field: max(now + step * steps, step)})
    return nearest


# Shapes written whole in tests/ggufs.py (a shared expert beside the routed ones, which -ncmoe and
# exps=CPU leave on the GPU): the row's quant and size applied to them
# (Qwen3.8-27B: llama-bench names it qwen35 27B, Qwen3.5/3.6-27B's hybrid: a quarter of its layers attend)
WRITTEN = {"qwen3.6-35b-a3b": QWEN36_35B_A3B, "qwen3.5-35b-a3b": QWEN36_35B_A3B, "qwen3.8-27b": QWEN36_27B}


def _shape_of(row: dict[str, Any], model: str) -> Shape | None:
    written = next((s for k, s in WRITTEN.items() if k in model), None)
    if written is not None:
        return replace(written, qtype=qtype_of(row["quant"]), name=row["model"])
    key = max((k for k in SHAPES if k in model.replace("meta-", "")), key=len, default=None)  # the longest
    total = row["model_params_b"]
    if key is None or not total:
        return None
    n_layers, e, heads, kv, hd, vocab, experts = SHAPES[key]
    base = Shape(n_layers=n_layers, n_embd=e, n_heads=heads, n_kv_heads=kv, head_dim=hd, vocab=vocab, tokens=False)
    rest = 2 * e * vocab + n_layers * e * hd * (2 * heads + 2 * kv)  # embedding, head, attention
    qtype = qtype_of(row["quant"])
    if not experts:
        ff = int((total * 1e9 - rest) / (3 * e * n_layers)) // 256 * 256
        return replace(base, n_ff=ff, qtype=qtype, file_type=None, name=row["model"])
    active = row["active_params_b"]
    if not active:
        return None
    per_expert = (total * 1e9 - rest) / (experts * n_layers)  # 3 x e x ff
    ff = max(round(per_expert / (3 * e) / 256) * 256, 256)  # whole K-quant blocks
    used = max(round((active * 1e9 - rest + e * vocab) / (n_layers * 3 * e * ff)), 1)
    return replace(
        base, n_ff=ff, n_experts=experts, n_experts_used=used, qtype=qtype, file_type=None, name=row["model"]
    )


def ram_of(row: dict[str, Any], profiles: Any) -> str | None:
    """The RAM's bandwidth (GB/s) where the row states it: measured, or its kind, rate and
    channels all stated ("dual-channel DDR4-3200", "12-channel DDR5-6000"). A row that states
    less is judged with its CPU's platform (cpu_args), or the RAM's class."""
    if row["ram_bandwidth_gbs"]:
        return str(row["ram_bandwidth_gbs"])
    text = (row["ram"] or "").lower()
    rate = re.search(r"ddr[345]x?-(\d{4})", text)
    words = {"dual": 2, "quad": 4}
    count = re.search(r"(\d+|dual|quad)[- ]channel", text)
    channels = (words.get(count.group(1)) or int(count.group(1))) if count else None
    if rate is None or channels is None or "unified" in text:
        return None
    return f"{int(rate.group(1)) * 8 * channels / 1000:g}"


def cpu_args(row: dict[str, Any]) -> list[str]:
    """`--cpu NAME` where the row names a CPU whose platform ggprof knows and not its RAM's bandwidth."""
    from ggprof.machine.platforms import platform_of

    cpu = row["cpu"]
    return ["--cpu", cpu.split(" (")[0]] if cpu and platform_of(cpu.split(" (")[0]) else []


def profile_of(gpu: str, profiles: Any) -> str | None:
    name = re.sub(r" \d+GB\b| \d+-core GPU", "", gpu.split(" (")[0])
    found, _ = profiles.match(name)
    return found.id if found else None


def backend_of(row: dict[str, Any]) -> str:
    b = row["backend"].lower()
    return next((x for x in ("cuda", "rocm", "vulkan", "metal", "sycl") if x in b), "cuda")


def check_args(
    row: dict[str, Any], model: Path, profiles: Any, slowed: float, slow_prompt: bool = False
) -> list[str] | None:
    """`ggprof check`'s arguments for the row (None: no GPU named, or no speed); a prompt its source
    says a cause beside the placement slowed (`pp_slowed_by`) only with `slow_prompt`."""
    gpus = [profile_of(g, profiles) for g in row["gpus"] or []]
    if not gpus or None in gpus or not (row["tg_tok_s"] or (row["pp_tok_s"] and row["pp_tokens"])):
        return None
    args = ["check", str(model), "--device", ",".join(str(g) for g in gpus), "--backend", backend_of(row), "--json"]
    if row["tg_tok_s"]:
        args += ["--tg", f"{row['tg_tok_s'] / slowed:.4g}"]
    prompt = row["pp_tok_s"] and row["pp_tokens"] and (slow_prompt or not row["pp_slowed_by"])
    if prompt:  # a prompt of unstated length is not judged (unjudged())
        args += ["--pp", f"{row['pp_tok_s'] / slowed:.4g}", "--prompt", str(row["pp_tokens"])]
    args += ["--depth", str(row["depth"] or 0)]
    ncmoe = row["n_cpu_moe"]
    ngl = row["n_gpu_layers"]
    cmoe = re.search(r"(^|\s)(--cpu-moe|-cmoe)\b", row["flags"] or "") is not None
    ot = row["override_tensor"]
    if ngl is not None or ncmoe or cmoe or ot:
        args += ["-ngl", str(ngl if ngl is not None else 99)]  # experts in RAM go with every layer offloaded
    if ncmoe:
        args += ["-ncmoe", str(ncmoe)]
    if cmoe:
        args += ["-cmoe"]
    if ot:  # llama.cpp's -ot: PATTERN=BUFFER pairs, the first that matches a tensor wins
        args += ["-ot", ",".join(p.strip() for p in ot.split(";"))]
    fa = re.search(r"(^|\s)(-fa|--flash-attn)(\s+(on|1|off|0)\b)?", row["flags"] or "")
    if fa:  # flash attention as the command line sets it (a bare -fa: on, as llama.cpp took it)
        args += ["-fa", "off" if fa.group(4) in ("off", "0") else "on"]
    flags = (row["flags"] or "").split("llama-", 1)[-1]  # the program's own (not taskset's -c)
    fit = {
        flag: m.group(3)
        for flag, long in (("-fit", "--fit"), ("-fitt", "--fit-target"), ("-fitc", "--fit-ctx"))
        if (m := re.search(rf"(^|\s)({flag}|{long})\s+(\S+)", flags))
    }
    if not (ngl is not None or ncmoe or cmoe or ot):  # no placement given: --fit chose it, where the run says
        args += [x for flag, value in fit.items() for x in (flag, value)]
    said_ctx = re.search(r"(^|\s)(-c|--ctx-size)\s+\d", flags) is not None
    if row["ctx"] and (said_ctx or "-fitc" not in fit):  # the context the run allocated (--fit-ctx: --fit's)
        args += ["-c", str(row["ctx"])]
    if NKVO.search(row["flags"] or ""):
        args += ["-nkvo", "1"]
    for flag in ("-ctk", "-ctv"):  # the KV cache's types, where the command line sets them
        long = {"-ctk": "--cache-type-k", "-ctv": "--cache-type-v"}[flag]
        kv = re.search(rf"(^|\s)({flag}|{long})\s+(\S+)", row["flags"] or "")
        args += [flag, kv.group(3)] if kv else []
    if len(gpus) > 1 and row["split_mode"]:
        args += ["-sm", row["split_mode"]]
    if len(gpus) > 1 and row["tensor_split"]:
        args += ["-ts", row["tensor_split"]]
    spill = spill_of(row)
    if spill:
        args += ["--spill", spill]
    build = (row["build"] or "").rsplit("(", 1)[-1].strip(") b").split()[0] if row["build"] else ""
    if build.isdigit():
        args += ["--build", build]
    return args


def spill_of(row: dict[str, Any]) -> str | None:
    """How the row's driver served what was over the GPU's memory, where the row says: Windows'
    system-memory fallback, managed memory (GGML_CUDA_ENABLE_UNIFIED_MEMORY=1), or managed memory a
    patched build advises to stay in RAM ("mapped", its backend says "read in place")."""
    backend = row["backend"].lower()
    if "read in place" in backend:
        return "mapped"
    if "managed" in backend or "GGML_CUDA_ENABLE_UNIFIED_MEMORY=1" in (row["flags"] or ""):
        return "managed"
    return "fallback" if "windows" in backend and "cuda" in backend else None


def ggprof(args: list[str]) -> dict[str, Any] | None:
    from ggprof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(args)
    try:
        answer: dict[str, Any] = json.loads(out.getvalue())
        return answer
    except json.JSONDecodeError:
        print(f"  refused: {' '.join(args[2:])}: {err.getvalue().strip()[:200]}", file=sys.stderr)
        return None


def machine_of(row: dict[str, Any]) -> str:
    """The machine a row ran on: its GPUs and CPU (rows of one source that names no CPU, one machine)."""
    cpu = (row["cpu"] or "").split(" (")[0]  # its name, not the notes beside it
    return f"{'+'.join(row['gpus'] or ['?'])} / {cpu or row['source']}"


def answers(
    rows: list[dict[str, Any]],
    folder: Path,
    profiles: Any,
    slowed: float,
    index: list[int] | None = None,
    slow_prompt: bool = False,
) -> list[dict[str, Any] | None]:
    """`ggprof check --json`'s answer for each row (None: the row is not judged); `index`: each
    row's place in the dataset (its header's file name); `slow_prompt`: check_args'."""
    out = []
    for i, row in zip(index or range(len(rows)), rows, strict=True):
        shape = shape_of(row)
        model = folder / f"row{i}.gguf"
        if shape is not None and not model.exists():
            write_model(model, shape)
        args = check_args(row, model, profiles, slowed, slow_prompt) if shape else None
        ram = ram_of(row, profiles)
        if args and ram:
            args += ["--ram-bandwidth", ram]
        elif args:
            args += cpu_args(row)
        out.append(ggprof(args) if args else None)
    return out


def share_rows(rows: list[dict[str, Any]], folder: Path, profiles: Any) -> dict[str, list[ShareRow]]:
    """Each row's shares where it states what they need: the RAM's (a decode with its RAM stated),
    the spill's (a spilled decode or prompt), the copies' (a prompt with weights in RAM): its time
    less the other parts at their bands' midpoints, over the part's time at full rate; and -nkvo's
    round trip (a decode with its cache in RAM beside the same run's with it on the GPU), its cache
    read at the RAM share's midpoint."""
    out: dict[str, list[ShareRow]] = {k: [] for k in WHAT}
    nkvo: list[tuple[str, str, TokenParts, float, float]] = []
    for i, (row, answer) in enumerate(zip(rows, answers(rows, folder, profiles, 1.0), strict=True)):
        parts = _parts(answer)
        if parts is None:
            continue
        label = f"row {i}: {row['model'][:28]} on {','.join(row['gpus'] or [])} ({row['source']})"
        machine, tg, pp, prompt = machine_of(row), row["tg_tok_s"], row["pp_tok_s"], row["pp_tokens"]
        spill = "spill" if parts.link_s else "copies"
        # with -nkvo a token's part in RAM is the CPU's attention over the KV cache, not weights streamed
        kv_in_ram = NKVO.search(row["flags"] or "") is not None
        found = (
            (
                "ram",
                "decode",
                implied_ram_share(parts, 1 / tg) if tg and ram_of(row, profiles) and not kv_in_ram else None,
            ),
            ("spill", "decode", implied_link_share(parts, 1 / tg) if tg else None),
            (spill, "prompt", implied_link_share(parts, prompt / pp, prompt=True) if pp and prompt else None),
        )
        out_rows = [(k, ShareRow(machine=machine, label=f"{label}, {what}", share=v)) for k, what, v in found if v]
        # a spill whose mechanism the row does not state is read at its slow end: no share of it
        out_rows = [(k, r) for k, r in out_rows if k != "spill" or spill_of(row)]
        for k, r in out_rows:
            out[k].append(r)
        if kv_in_ram and tg and row["baseline_tg_tok_s"]:  # the same run with its cache on the GPU
            nkvo.append((machine, f"{label}, decode", parts, 1 / tg, 1 / row["baseline_tg_tok_s"]))
    ram = fit_share(out["ram"], WHAT["ram"])
    ram_mid = math.sqrt(ram.low * ram.high) if ram else 1.0
    for machine, label, parts, seconds, resident in nkvo:
        trip = implied_trip_s(parts, seconds, resident, ram_mid)
        if trip:
            out["trip"].append(ShareRow(machine=machine, label=label, share=trip))
    return out


def _parts(answer: dict[str, Any] | None) -> TokenParts | None:
    from ggprof.machine.device import EfficiencyBand

    if not answer or not answer.get("predictions") or not answer["predictions"][0].get("token_parts"):
        return None
    d = dict(answer["predictions"][0]["token_parts"])
    for name in ("gpu_band", "prompt_band"):
        d[name] = EfficiencyBand(low=d[name][0], high=d[name][1], source="") if d[name] else None
    return TokenParts(**d)


def fit_placements(rows: list[dict[str, Any]], folder: Path, profiles: Any) -> PlacementFits:
    """The shares fitted on every row that states what each needs (calibrate.py --write keeps them)."""
    found = share_rows(rows, folder, profiles)
    return PlacementFits(
        dataset=str(DATA.relative_to(ROOT)),
        **{k: fit_share(found[k], WHAT[k], as_time=k == "trip") for k in WHAT},
        inputs=tuple(f"{k} {r.share:.6g} {r.label}" for k, used in found.items() for r in used),
    )


def judge(
    rows: list[dict[str, Any]], folder: Path, profiles: Any, held_out: bool
) -> tuple[list[tuple[str, str, str]], dict[int, bool]]:
    """(category, honest verdict, slowed verdict) per row, "" where the row is not judged; and for
    each prompt its source says a cause beside the placement slowed (`pp_slowed_by`, judged apart
    from its row), whether a prefill finding flagged it. With `held_out`, each machine's rows are
    judged by the shares fitted without that machine."""
    import bench_moe

    from ggprof import calibration

    found = share_rows(rows, folder, profiles) if held_out else {}
    moe_found = bench_moe.layer_rows(bench_moe.load_rows(), folder) if held_out else []
    verdicts: list[tuple[str, str]] = [("", "")] * len(rows)
    slow_prompts: dict[int, bool] = {}
    for machine in sorted({machine_of(r) for r in rows}):
        mine = [i for i, r in enumerate(rows) if machine_of(r) == machine]
        fits = calibration.placement_fits()
        moe = calibration.moe_layer_fit()
        if held_out:
            held = {k: held_out_fit(found[k], machine, WHAT[k], as_time=k == "trip") for k in WHAT}
            fits = replace(fits, **held)  # type: ignore[arg-type]
            devices = {str(profile_of(g, profiles)) for i in mine for g in rows[i]["gpus"] or []}
            moe = bench_moe.fit_without(moe_found, ",".join(sorted(devices)))
        with calibration.using_placements(fits), calibration.using_moe(moe):
            for slowed in (1.0, SLOWED):
                got = answers([rows[i] for i in mine], folder, profiles, slowed, mine)
                for i, answer in zip(mine, got, strict=True):
                    before = verdicts[i]
                    v = answer["verdict"] if answer else ""
                    verdicts[i] = (v, before[1]) if slowed == 1.0 else (before[0], v)
            slow = [i for i in mine if rows[i]["pp_slowed_by"] and rows[i]["pp_tok_s"]]
            got = answers([rows[i] for i in slow], folder, profiles, 1.0, slow, slow_prompt=True)
            for i, answer in zip(slow, got, strict=True):
                findings = answer["findings"] if answer else []
                slow_prompts[i] = any(
                    f["code"].startswith("PREFILL") and f["severity"] in ("suspicious", "impossible") for f in findings
                )
    return [(row["category"], h, s) for row, (h, s) in zip(rows, verdicts, strict=True)], slow_prompts


def shares_text(fits: PlacementFits, found: dict[str, list[ShareRow]]) -> str:
    lines = ["fitted shares (rows that state the facts; band: the errors of each machine's rows left out)"]
    for name, used in found.items():
        fit = getattr(fits, name)
        if fit is None:
            lines.append(f"  {name}: too few machines ({len({r.machine for r in used})})")
            continue

        def value(v: float, name: str = name) -> str:
            return f"{v * 1e6:.0f} us" if name == "trip" else f"{v:.1%}"  # the trip is a time, not a share

        lines.append(
            f"  {name} ({fit.what}): {value(fit.share)} ({value(fit.low)}-{value(fit.high)}), {fit.rows} rows on "
            f"{fit.machines} machines, median held-out error {fit.held_out_error:.0%}"
        )
        lines += [f"    {value(r.share):>7}  {r.label.split(' (')[0]}{r.label.rsplit(')', 1)[-1]}" for r in used]
        lines += [f"    left out: {x.split(' (')[0]}{x.rsplit(')', 1)[-1]}" for x in fit.left_out]
    return "\n".join(lines)


def table(judged: list[tuple[str, str, str]], rows: list[dict[str, Any]], show_rows: bool) -> str:
    lines = []
    if show_rows:
        for (cat, honest, slow), row in zip(judged, rows, strict=True):
            speeds = f"tg {row['tg_tok_s']} pp {row['pp_tok_s']}"
            lines.append(f"{cat:<16} {row['model'][:28]:<28} {','.join(row['gpus'] or ['?'])[:34]:<34} {speeds:<22} "
                         f"{honest or 'not judged':<11} slowed {slow or '-'}")  # fmt: skip
        lines.append("")
    by: dict[str, list[tuple[str, str]]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    for cat, honest, slow in judged:
        counts[cat] += 1
        if honest and honest != "unknown":
            by[cat].append((honest, slow))
    lines.append(
        f"{'category':<16} {'rows':>4} {'judged':>6} {'impossible':>10} {'suspicious':>10} {'slowed caught':>13}"
    )
    for cat in (*CATEGORIES, "all"):
        got = [x for c in CATEGORIES for x in by[c]] if cat == "all" else by[cat]
        n = len(got)
        rows_n = sum(counts.values()) if cat == "all" else counts[cat]

        def pct(k: int, n: int = n) -> str:
            return f"{k / n:.0%}" if n else "-"

        imp = sum(h == "impossible" for h, _ in got)
        sus = sum(h == "suspicious" for h, _ in got)
        caught = sum(s in ("suspicious", "impossible") for _, s in got)
        lines.append(f"{cat:<16} {rows_n:>4} {n:>6} {pct(imp):>10} {pct(sus):>10} {pct(caught):>13}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", action="store_true", help="print every row's verdicts")
    ap.add_argument("--out", type=Path, help="also write the output to FILE")
    ap.add_argument("--in-sample", action="store_true", help="judge with the committed shares, no machine left out")
    args = ap.parse_args()
    rows = load_rows()
    profiles = ProfileDB.default()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GGPROF_CACHE_DIR"] = str(Path(tmp) / "cache")  # this host's measurements never read
        found = share_rows(rows, Path(tmp), profiles)
        fits = fit_placements(rows, Path(tmp), profiles)
        judged, slow_prompts = judge(rows, Path(tmp), profiles, held_out=not args.in_sample)
    how = (
        "committed shares"
        if args.in_sample
        else "leave one machine out: each machine judged by shares fitted without it"
    )
    text = (
        f"{shares_text(fits, found)}\n\n{how}\n{table(judged, rows, args.rows)}\n{unjudged(rows)}\n"
        f"{slow_prompts_text(slow_prompts, rows)}"
    )
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def slow_prompts_text(slow_prompts: dict[int, bool], rows: list[dict[str, Any]]) -> str:
    """The prompts a cause beside the placement slowed, as their sources say: judged apart from
    their rows (whose decodes the table judges), each a slowed run ggprof should flag."""
    if not slow_prompts:
        return ""
    flagged = sorted(i for i, hit in slow_prompts.items() if hit)
    missed = sorted(i for i, hit in slow_prompts.items() if not hit)
    why = {rows[i]["pp_slowed_by"].split(":")[0] for i in slow_prompts}
    return (
        f"prompts their sources say a cause beside the placement slowed ({'; '.join(sorted(why))}), judged apart: "
        f"flagged {len(flagged)} of {len(slow_prompts)} (rows {flagged}; missed {missed})"
    )


def load_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def unjudged(rows: list[dict[str, Any]]) -> str:
    """What the table leaves out, by the fact the row does not state."""
    no_shape = [i for i, r in enumerate(rows) if shape_of(r) is None]
    no_gpu = [i for i, r in enumerate(rows) if not r["gpus"]]
    no_prompt = [i for i, r in enumerate(rows) if r["pp_tok_s"] and not r["pp_tokens"]]
    return (
        f"not judged: rows {no_shape} (no parameters or shape stated), {no_gpu} (no GPU named); prefill of rows "
        f"{no_prompt} (prompt length not stated: below 32 tokens the CPU computes the weights in RAM, above it "
        "they cross the link, so the length decides the regime)"
    )


if __name__ == "__main__":
    sys.exit(main())
