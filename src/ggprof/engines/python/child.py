"""The child side of `ggprof bench`: runs llama.cpp in-process, the way llama-bench does.

Started as `python -m ggprof.engines.python.child` with a JSON request on stdin. Writes JSON lines
to the protocol pipe (the original stdout); stdout itself is pointed at stderr so that
nothing llama.cpp prints can corrupt the protocol. llama.cpp's logs go to stderr, which
the parent keeps the tail of. Exit codes: 0 ok, 3 the model did not load, 4 a context
could not be created or a decode failed.

What is timed mirrors llama-bench's test_prompt/test_gen (tools/llama-bench/llama-bench.cpp):
random token ids, one warm-up per test (the whole prompt, or `warmup_prompt` tokens), the KV
cache cleared before each repetition, an untimed prefill to the depth, the prompt in batches
of n_batch, then n single-token steps each followed by llama_synchronize. Nothing else is timed: no logits are copied,
nothing is sampled or detokenized. A persistent ggml threadpool is attached, as
llama-bench does (without one, ggml creates threads for every graph).
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ggprof.bench.stopping import (
    PROBE_NOT_NEEDED,
    PROBE_REPS,
    PROBE_TOKENS,
    ProbeSchedule,
    StopRule,
    rates,
    stop_key,
    stop_rule,
)
from ggprof.llamacpp import GGML_MAX_N_THREADS
from ggprof.model.ggml import kv_cache_type
from ggprof.runfacts import FLASH_ATTN_TYPES

EXIT_LOAD_FAILED = 3
EXIT_RUN_FAILED = 4
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ThreadpoolParams(ctypes.Structure):
    _fields_ = [
        ("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS),
        ("n_threads", ctypes.c_int),
        ("prio", ctypes.c_int),
        ("poll", ctypes.c_uint32),
        ("strict_cpu", ctypes.c_bool),
        ("paused", ctypes.c_bool),
    ]


class Child:
    def __init__(self, out: TextIO, request: dict[str, Any]) -> None:
        self.out = out
        self.req = request
        self.rng = random.Random(request.get("rng_seed", 1))

    def emit(self, event: str, **fields: Any) -> None:
        self.out.write(json.dumps({"event": event, **fields}) + "\n")
        self.out.flush()

    def fail(self, kind: str, message: str, code: int) -> None:
        self.emit("error", kind=kind, message=message)
        sys.stderr.flush()
        os._exit(code)

    # -- setup ---------------------------------------------------------------------------------
    def run(self) -> None:
        import llama_cpp as ll

        self.ll = ll
        ll.llama_backend_init()
        info = ll.llama_print_system_info().decode(errors="replace")
        self.repack = self.choose_repack(info)
        self.gpu_offload = bool(ll.llama_supports_gpu_offload())
        self.emit(
            "system",
            system_info=info,
            gpu_offload=self.gpu_offload,
            llama_cpp_python=ll.__version__,
            repack=self.repack,
        )
        if self.req.get("rpc"):
            self.register_rpc(self.req["rpc"])
        model = self.load_model()
        self.threadpool = self.make_threadpool(self.req["n_threads"])
        for test in self.req["tests"]:
            if test.get("n_parallel", 1) > 1 or self.req.get("parallel"):
                self.run_parallel(model, test)
            else:
                self.run_test(model, test)
        ll.llama_model_free(model)
        self.emit("done")

    def choose_repack(self, system_info: str) -> bool:
        """Extra (repacking) buffer types. `auto` turns them off where llama.cpp's AMX path is
        compiled in: ggml_backend_amx_mul_mat segfaults on Q4_K models on some AMX machines
        (ggml-org/llama.cpp#20824, unfixed), and AMX buffers come with the extra types."""
        mode = self.req.get("repack", "auto")
        if mode == "auto":
            return "AMX_INT8 = 1" not in system_info
        return bool(mode == "on")

    def register_rpc(self, endpoints: list[str]) -> None:
        """Register rpc-servers as llama.cpp's tools do (llama-bench's register_rpc_server_list):
        the RPC registry's `ggml_backend_rpc_add_server`, then `ggml_backend_register`.
        llama-cpp-python's own `rpc_servers` no longer reaches llama.cpp (its issue #1914)."""
        from pathlib import Path

        lib_dir = Path(self.ll.__file__).parent / "lib"
        found = [p for p in lib_dir.glob("*ggml.*") if p.name.split(".")[0] in ("libggml", "ggml")]
        if not found:
            self.fail("load", f"no ggml library in {lib_dir}", EXIT_LOAD_FAILED)
        ggml = ctypes.CDLL(str(found[0]))
        ggml.ggml_backend_reg_by_name.argtypes, ggml.ggml_backend_reg_by_name.restype = (
            [ctypes.c_char_p],
            ctypes.c_void_p,
        )
        get = ggml.ggml_backend_reg_get_proc_address
        get.argtypes, get.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p
        ggml.ggml_backend_register.argtypes, ggml.ggml_backend_register.restype = [ctypes.c_void_p], None
        reg = ggml.ggml_backend_reg_by_name(b"RPC")
        address = get(reg, b"ggml_backend_rpc_add_server") if reg else None
        if not address:
            self.fail("load", "this llama.cpp was built without its RPC backend (-DGGML_RPC=on)", EXIT_LOAD_FAILED)
        add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(int(address or 0))
        for endpoint in endpoints:
            server = add_server(endpoint.encode())
            if not server:
                self.fail("load", f"{endpoint}: the rpc-server has no devices", EXIT_LOAD_FAILED)
            ggml.ggml_backend_register(server)

    def load_model(self) -> Any:
        ll = self.ll
        mp = ll.llama_model_default_params()
        mp.n_gpu_layers = self.req["n_gpu_layers"]
        mp.use_mmap = True
        mp.use_extra_bufts = self.repack
        if self.req.get("tensor_split"):
            shares = self.req["tensor_split"][: ll.llama_max_devices()]
            self.tensor_split = (ctypes.c_float * ll.llama_max_devices())(*shares)  # kept alive with the model
            mp.tensor_split = self.tensor_split
        model = ll.llama_model_load_from_file(self.req["model"].encode(), mp)
        if not model:
            self.fail("load", "llama.cpp could not load the model", EXIT_LOAD_FAILED)
        buf = ctypes.create_string_buffer(256)
        ll.llama_model_desc(model, buf, 256)
        vocab = ll.llama_model_get_vocab(model)
        self.n_vocab = ll.llama_vocab_n_tokens(vocab)
        self.bos = ll.llama_vocab_bos(vocab) if ll.llama_vocab_get_add_bos(vocab) else None
        self.emit(
            "model",
            model_type=buf.value.decode(errors="replace"),
            model_size=ll.llama_model_size(model),
            model_n_params=ll.llama_model_n_params(model),
            n_layer=ll.llama_model_n_layer(model),
            n_vocab=self.n_vocab,
        )
        return model

    def make_threadpool(self, n_threads: int) -> Any:
        """A persistent ggml threadpool with llama-bench's settings (poll 50); None if unavailable."""
        libdir = Path(self.ll.__file__).parent / "lib"
        names = ("libggml-cpu.so", "libggml-cpu.dylib", "ggml-cpu.dll")
        try:
            lib = next(ctypes.CDLL(str(libdir / n)) for n in names if (libdir / n).exists())
            base = next(
                ctypes.CDLL(str(libdir / n))
                for n in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll")
                if (libdir / n).exists()
            )
        except (StopIteration, OSError) as e:
            self.emit("note", message=f"no persistent threadpool ({e}); ggml creates threads per graph")
            return None
        params = ThreadpoolParams()
        base.ggml_threadpool_params_init(ctypes.byref(params), n_threads)
        params.poll = 50
        lib.ggml_threadpool_new.restype = ctypes.c_void_p
        lib.ggml_threadpool_new.argtypes = [ctypes.POINTER(ThreadpoolParams)]
        tp = lib.ggml_threadpool_new(ctypes.byref(params))
        if not tp:
            self.emit("note", message="ggml_threadpool_new failed; ggml creates threads per graph")
            return None
        return tp

    # -- one test: pp (n_prompt > 0) or tg (n_gen > 0) at a depth ------------------------------
    def run_test(self, model: Any, test: dict[str, Any]) -> None:
        ll = self.ll
        n_prompt, n_gen, n_depth = test["n_prompt"], test["n_gen"], test["n_depth"]
        n_ctx = n_prompt + n_gen + n_depth + (1 if n_prompt else 0)  # +1: the TTFT token after the prompt
        ctx = self.open_context(model, n_ctx, self.req["n_batch"], self.req["n_ubatch"], n_seq=1)
        if not self.req.get("no_warmup"):
            if n_prompt:
                self.prompt(min(n_prompt, self.req.get("warmup_prompt") or n_prompt))
            if n_gen:
                self.gen(1)
        samples, ttft, itl = [], [], []
        key = stop_key(n_prompt, n_gen, n_depth)
        rule = stop_rule(self.req.get("stop"))
        if rule and not self.gpu_offload:  # ranges predicted for a GPU do not hold for this CPU-only build
            rule = rule.for_backends(("cpu",))
        reps = rule.max_reps if rule else self.req["reps"]
        stop_reason = None
        # the thread probe, its least repetitions: its tok/s can settle where the decode's verdict
        # is plausible; it repeats further only where its interval holds the decode back. With a
        # range predicted, it waits until a decode repetition falls below the range's low end,
        # where the compute roof it measures may move the verdict; a decode wholly inside the
        # range never runs it
        probe = self.thread_probe(n_gen) if n_gen else None
        schedule = ProbeSchedule(rule, key, wanted=probe is not None)
        probe_steps: list[int] = []
        depth_state: Any = None
        if schedule.before():
            depth_state = self.probe_first(probe, probe_steps, n_depth, depth_state)
        for rep in range(reps):
            ll.llama_memory_clear(self.mem, False)
            if n_depth:
                depth_state = self.to_depth(n_depth, depth_state)
            t0 = time.perf_counter_ns()
            if n_prompt:
                self.prompt(n_prompt)
            steps = self.gen(n_gen) if n_gen else []
            samples.append(time.perf_counter_ns() - t0)
            itl.extend(steps)
            if n_prompt and not n_gen:  # TTFT: the prompt, then the first generated token (timed apart)
                ttft.append(samples[-1] + self.gen(1)[0])
            self.emit("progress", test=test["name"], rep=rep + 1, reps=reps)
            if rule is None:
                continue
            tok_s = rates(n_prompt + n_gen, samples)
            if schedule.during(tok_s, probed=bool(probe and probe["samples_ns"])):
                depth_state = self.probe_first(probe, probe_steps, n_depth, depth_state)
            # a decode test's token times are samples too (not a prompt's: one batch, one time)
            own_steps = itl if not n_prompt else ()
            while True:
                # judged at the probe's most demanding end: the upper end of its interval
                high = rule.upper(self.probe_rates(probe), probe_steps) if probe and probe["samples_ns"] else None
                stop_reason = rule.reason(tok_s, own_steps, key, high)
                if stop_reason or not self.probe_may_repeat(probe, rule):
                    break
                if not rule.reason(tok_s, own_steps, key, statistics.fmean(self.probe_rates(probe))):
                    break  # the probe's mean would not settle it either: the test itself repeats
                depth_state = self.probe_rep(probe, probe_steps, n_depth, depth_state)
            if stop_reason:
                break
        # a probe the decode's verdict may still turn on is known within the target, as any test
        tok_s = rates(n_prompt + n_gen, samples)
        needed = schedule.after(tok_s, probed=bool(probe and probe["samples_ns"])) if probe else None
        if needed is False:  # wholly inside the range without it
            probe = None
            stop_reason = f"{stop_reason or 'stopped'}; {PROBE_NOT_NEEDED}"
        elif needed:
            depth_state = self.probe_first(probe, probe_steps, n_depth, depth_state)
        while rule and probe and self.probe_may_repeat(probe, rule):
            known = rule.reason(self.probe_rates(probe), probe_steps)
            if known or rule.settled(tok_s, key, rule.upper(self.probe_rates(probe), probe_steps)):
                break
            depth_state = self.probe_rep(probe, probe_steps, n_depth, depth_state)
        self.emit("row", **test, samples_ns=samples, ttft_ns=ttft, itl_ns=itl, probe=probe, stop_reason=stop_reason)
        ll.llama_free(ctx)

    # -- a batch of B sequences decoded together (llama.cpp's batched-bench) ------------------
    def run_parallel(self, model: Any, test: dict[str, Any]) -> None:
        """n_gen steps, each one llama_batch carrying one token of each of B sequences (each
        sequence its own KV cells, seq_id = its index), synchronized; times every step."""
        ll, n_gen, b = self.ll, test["n_gen"], test["n_parallel"]
        ctx = self.open_context(model, b * (n_gen + 1), max(b, 1), max(b, 1), n_seq=b)
        batch = ll.llama_batch_init(b, 0, b)
        try:
            self.batch_steps(batch, b, 1)  # warm-up
            samples, steps = [], []
            for rep in range(self.req["reps"]):
                ll.llama_memory_clear(self.mem, False)
                t0 = time.perf_counter_ns()
                steps.extend(self.batch_steps(batch, b, n_gen))
                samples.append(time.perf_counter_ns() - t0)
                self.emit("progress", test=test["name"], rep=rep + 1, reps=self.req["reps"])
        finally:
            ll.llama_batch_free(batch)
        self.emit("row", **test, samples_ns=samples, ttft_ns=[], itl_ns=steps, probe=None)
        ll.llama_free(ctx)

    def batch_steps(self, batch: Any, b: int, n_steps: int) -> list[int]:
        ll, times = self.ll, []
        for step in range(n_steps):
            batch.n_tokens = b
            for i in range(b):
                batch.token[i] = self.rng.randrange(self.n_vocab)
                batch.pos[i] = step
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = i
                batch.logits[i] = True
            t0 = time.perf_counter_ns()
            if ll.llama_decode(self.ctx, batch) != 0:
                self.fail("decode", f"llama_decode failed on a batch of {b} sequences", EXIT_RUN_FAILED)
            ll.llama_synchronize(self.ctx)
            times.append(time.perf_counter_ns() - t0)
        return times

    def open_context(self, model: Any, n_ctx: int, n_batch: int, n_ubatch: int, n_seq: int) -> Any:
        """A llama.cpp context with the request's KV types, flash attention and threads."""
        ll = self.ll
        cp = ll.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_batch, n_ubatch, n_seq
        cp.kv_unified = True  # one cache, sized for all the sequences (a batch sweep has several)
        cp.type_k = kv_cache_type(self.req["type_k"]).id
        cp.type_v = kv_cache_type(self.req["type_v"]).id
        cp.flash_attn_type = FLASH_ATTN_TYPES[self.req["flash_attn"]]
        cp.n_threads = cp.n_threads_batch = self.req["n_threads"]
        cp.swa_full = False
        cp.no_perf = True
        ctx = ll.llama_init_from_model(model, cp)
        if not ctx:
            what = f"{n_seq} sequences of {n_ctx // n_seq} tokens" if n_seq > 1 else f"{n_ctx} tokens"
            self.fail("context", f"llama.cpp could not create a context of {what}", EXIT_RUN_FAILED)
        self.attach_threadpool(ctx)
        self.ctx, self.mem = ctx, ll.llama_get_memory(ctx)
        return ctx

    def attach_threadpool(self, ctx: Any) -> None:
        if self.threadpool:
            from llama_cpp.llama_cpp import _lib

            _lib.llama_attach_threadpool.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            _lib.llama_attach_threadpool(ctx, self.threadpool, self.threadpool)
        self.ll.llama_set_n_threads(ctx, self.req["n_threads"], self.req["n_threads"])

    def thread_probe(self, n_gen: int) -> dict[str, Any] | None:
        """Decode with fewer threads (the depth prefill still uses all of them): how tok/s scales
        with threads tells compute-bound from bandwidth-bound. None where none is asked for."""
        threads = self.req.get("probe_threads")
        if not threads or threads >= self.req["n_threads"]:
            return None
        return {"n_threads": threads, "n_gen": min(n_gen, self.req.get("probe_tokens", PROBE_TOKENS)), "samples_ns": []}

    def probe_first(self, probe: Any, steps: list[int], n_depth: int, depth_state: Any) -> Any:
        """The probe's first repetitions (2 unless the request says); returns the depth state."""
        for _ in range(self.req.get("probe_reps", PROBE_REPS)):
            depth_state = self.probe_rep(probe, steps, n_depth, depth_state)
        return depth_state

    def probe_rep(self, probe: Any, steps: list[int], n_depth: int, depth_state: Any) -> Any:
        """One repetition of the thread probe; returns the saved state at the depth."""
        ll = self.ll
        ll.llama_set_n_threads(self.ctx, probe["n_threads"], self.req["n_threads"])
        ll.llama_memory_clear(self.mem, False)
        if n_depth:
            depth_state = self.to_depth(n_depth, depth_state)
        t0 = time.perf_counter_ns()
        steps.extend(self.gen(probe["n_gen"]))
        probe["samples_ns"].append(time.perf_counter_ns() - t0)
        ll.llama_set_n_threads(self.ctx, self.req["n_threads"], self.req["n_threads"])
        return depth_state

    @staticmethod
    def probe_rates(probe: Any) -> list[float]:
        return rates(probe["n_gen"], probe["samples_ns"])

    @staticmethod
    def probe_may_repeat(probe: Any, rule: StopRule) -> bool:
        """Run (not deferred) and below its cap: half the test's, at least the fixed count."""
        return probe is not None and 0 < len(probe["samples_ns"]) < max(2, rule.max_reps // 2)

    def to_depth(self, n_depth: int, state: Any) -> Any:
        """Prefill n_depth tokens, untimed; later repetitions restore the saved state (as llama-bench)."""
        ll = self.ll
        if state is not None and ll.llama_state_seq_set_data(self.ctx, state, len(state), 0):
            return state
        self.prompt(n_depth)
        size = ll.llama_state_seq_get_size(self.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        ll.llama_state_seq_get_data(self.ctx, buf, size, 0)
        return buf

    def tokens(self, n: int, first: bool) -> Any:
        arr = (ctypes.c_int32 * n)()
        for i in range(n):
            arr[i] = self.rng.randrange(self.n_vocab)
        if first and self.bos is not None:
            arr[0] = self.bos
        return arr

    def prompt(self, n_prompt: int) -> None:
        ll, n_batch, done = self.ll, self.req["n_batch"], 0
        while done < n_prompt:
            n = min(n_prompt - done, n_batch)
            toks = self.tokens(n, first=done == 0)
            if ll.llama_decode(self.ctx, ll.llama_batch_get_one(toks, n)) != 0:
                self.fail("decode", f"llama_decode failed on a prompt batch of {n} tokens", EXIT_RUN_FAILED)
            done += n
        ll.llama_synchronize(self.ctx)

    def gen(self, n_gen: int) -> list[int]:
        """n single-token decode steps, each synchronized; returns each step's time in ns."""
        ll, ctx = self.ll, self.ctx
        tok = (ctypes.c_int32 * 1)(self.bos if self.bos is not None else self.rng.randrange(self.n_vocab))
        times = []
        for _ in range(n_gen):
            t0 = time.perf_counter_ns()
            if ll.llama_decode(ctx, ll.llama_batch_get_one(tok, 1)) != 0:
                self.fail("decode", "llama_decode failed on a generation step", EXIT_RUN_FAILED)
            ll.llama_synchronize(ctx)
            times.append(time.perf_counter_ns() - t0)
            tok[0] = self.rng.randrange(self.n_vocab)
        return times


def die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL to this process when the parent dies, even by kill -9
    (elsewhere the next write to the closed protocol pipe ends it)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(EXIT_RUN_FAILED)


def main() -> None:
    die_with_parent()
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever C code prints to stdout lands in the log, not in the protocol
    sys.stdout = sys.stderr
    request = json.loads(sys.stdin.read())
    Child(protocol, request).run()


if __name__ == "__main__":
    main()
