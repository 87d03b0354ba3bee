"""The lines that time a run: llama.cpp's end-of-run timings, llama-server's slot lines, Ollama's
server log and `ollama run --verbose`, a server's pasted JSON answer."""

from __future__ import annotations

import re

from ggprof.logs import figures
from ggprof.logs.patterns import (
    _API_FIELDS,
    _CLI_SUMMARY,
    _DRAFT,
    _DRAFT_COUNTS,
    _DRAFT_PER_POS,
    _FULL_RM,
    _JSON_NUM,
    _LCP,
    _NEW_PROMPT,
    _OLLAMA,
    _OLLAMA_PS,
    _PROGRESS,
    _PY_META,
    _SAMPLE,
    _TIMING,
    _ollama_fields,
)
from ggprof.logs.records import (
    _KINDS,
    MAX_DRAFT_POSITIONS,
    MAX_PY_META_CHARS,
    MAX_SPEEDS,
    METADATA_FACTS,
    REPROCESS_MIN_TOKENS,
    SIMILAR_PROMPT,
    Fact,
    LogDevice,
    Speed,
    _timed,
    bytes_of,
    count,
    go_duration_ms,
    num,
)
from ggprof.logs.state import (
    ParserState,
)
from ggprof.logs.text import Line


class ServerLines(ParserState):
    """Speeds and what shaped them: llama.cpp's and llama-server's timing lines, Ollama's server
    log and `--verbose`, llama-cpp-python's metadata, a server's JSON answer, `ollama ps`."""

    def ollama_server(self, line: Line) -> bool:
        t = line.text
        if "msg=" not in t:
            return False
        r = self.run
        if 'msg="inference compute"' in t:
            self.saw("Ollama server log")
            f = _ollama_fields(t)
            library = f.get("library", "").lower()
            backend = {
                "cuda": "cuda",
                "rocm": "rocm",
                "metal": "metal",
                "vulkan": "vulkan",
                "oneapi": "sycl",
                "cpu": "cpu",
            }.get(library)
            name = f.get("description") or f.get("name") or ""
            if backend and backend != "cpu" and name:
                self._device(
                    LogDevice(
                        len(r.devices),
                        name[:120],
                        backend,
                        line.number,
                        t,
                        memory_bytes=bytes_of(f.get("total", "")),
                        compute=f.get("compute"),
                    )
                )
            return True
        if re.search(r"msg=\"?offload\b", t):
            self.saw("Ollama server log")
            f = _ollama_fields(t)
            r.set("layers_offloaded", count(f.get("layers.offload")), line)
            r.set("layers_total", count(f.get("layers.model")), line)
            req = f.get("memory.required.full")
            avail = f.get("memory.available", "").strip("[]").split(",")[0]
            r.set("ollama_required_full_bytes", bytes_of(req) if req else None, line)
            r.set("ollama_available_bytes", bytes_of(avail) if avail else None, line)
            library = f.get("library", "").lower()
            if library in ("cuda", "rocm", "metal", "vulkan"):
                r.set("backend_named", library, line)
            return True
        if 'msg="model weights"' in t:
            f = _ollama_fields(t)
            size, name = bytes_of(f.get("size", "")), f.get("buffer", "")[:32]
            if size is not None and name and len(r.model_buffers) < 32:
                have = r.model_buffers[name].value if name in r.model_buffers else 0
                r.model_buffers[name] = Fact(have + size, line.number, t)
            return True
        if 'msg="starting llama server"' in t:
            self.saw("Ollama server log")
            cmd = _ollama_fields(t).get("cmd", "")
            if m := re.search(r"--n-gpu-layers (\d+)", cmd):
                r.set("n_gpu_layers_requested", int(m[1]), line)
            if m := re.search(r"--threads (\d+)", cmd):
                r.set("threads", count(m[1]), line)
            if m := re.search(r"--ctx-size (\d+)", cmd):
                r.set("n_ctx", count(m[1]), line)
            return True
        return False

    def timings(self, line: Line) -> bool:
        t, r = line.text, self.run
        if "ampl" in t and (m := _SAMPLE.search(t)):
            ms = num(m[1])
            self.sample = (ms, count(m[2]) or 0) if ms is not None else None
            return True
        if "new prompt" in t and (m := _NEW_PROMPT.search(t)):
            self.task_prompt = count(m[1])
            return True
        if "draft" in t and (m := _DRAFT.search(t)):
            r.setdefault(
                "speculative", f"draft acceptance {m[1]}" if m[1] else "a draft model or speculative type", line
            )
            last = r.speeds[-1] if r.speeds else None
            if (c := _DRAFT_COUNTS.search(t)) and last is not None and last.kind == "decode" and last.n_tokens:
                # summed over the log's requests, each with the decoded tokens its `eval time` line
                # just counted: steps = decoded - accepted (each kept its drafts and one of its own)
                kept, drafted, decoded = r.value("draft_counts") or (0, 0, 0)
                more = (count(c[1]) or 0, count(c[2]) or 0, last.n_tokens)
                r.set("draft_counts", (kept + more[0], drafted + more[1], decoded + more[2]), line)
            self.draft_said = (count(c[1]) or 0, count(c[2]) or 0) if c else None
            self.per_position(line)  # on the same line while PR #24536 was merged
            return not t.lstrip().startswith(("llama-", "./", "$"))
        if "per pos" in t and self.per_position(line):
            return True
        if "Generation:" in t and (m := _CLI_SUMMARY.search(t)):
            self.saw("llama-cli summary")
            prompt, generation = (
                figures.speed(x, line, f"a {w} speed") for x, w in ((m[1], "prompt"), (m[2], "decode"))
            )
            if prompt is not None:
                r.add_speed(Speed("prefill", prompt, None, line.number, t, "llama-cli summary"))
            if generation is not None:
                r.add_speed(Speed("decode", generation, None, line.number, t, "llama-cli summary"))
            return True
        if "LCP similarity" in t and (m := _LCP.search(t)):
            self.similar = num(m[1]) or 0.0
            return True
        if "[0, end)" in t and _FULL_RM.search(t):
            if (self.task_prompt or 0) >= REPROCESS_MIN_TOKENS:
                r.add_reprocess(Fact((self.task_prompt, "from 0"), line.number, t))
            return True
        m = _TIMING.search(t) if "eval time" in t else None
        if m is None:
            if " tg =" in t and (p := _PROGRESS.search(t)) and len(r.speeds) < MAX_SPEEDS:
                n_decoded = figures.tokens(p[1], line)
                tg = figures.speed(p[2], line, "a decode speed") if n_decoded else None
                if n_decoded and tg:
                    r.set("server_progress", (n_decoded, tg), line)
                return True
            return False
        source = (
            "llama-server"
            if not t.startswith(("llama_print_timings", "llama_perf_context_print"))
            else "llama.cpp timings"
        )
        self.saw(source)
        tok_s, n = _timed(line, m[3], m[2], 1.0, m[4])
        if tok_s is None:
            return True
        ms = figures.duration_ms(m[2], line)
        if m[1]:
            s = Speed("prefill", tok_s, n, line.number, t, source, depth=0, eval_ms=ms)
            self.last_prefill = s
            # a prompt the slot had (nearly) whole, evaluated again from its start: the cache not reused
            if self.similar >= SIMILAR_PROMPT and n >= REPROCESS_MIN_TOKENS:
                r.add_reprocess(Fact((n, "similar"), line.number, t))
            self.similar = 0.0
        else:
            before = self.task_prompt or (self.last_prefill.n_tokens if self.last_prefill else 0) or 0
            sample_ms = self.sample[0] if self.sample else None
            s = Speed(
                "decode", tok_s, n, line.number, t, source, depth=before + n // 2, sample_ms=sample_ms, eval_ms=ms
            )
            self.last_prefill, self.sample, self.task_prompt = None, None, None
        r.add_speed(s)
        return True

    def per_position(self, line: Line) -> bool:
        """llama-server's acceptance per draft position (`acc per pos = (1.000, 0.929)`), summed
        over the log's requests, each weighted by its verify steps: its accepted drafts (the
        `draft acceptance` line before it) over the sum of its shares, each step keeping
        position i counted once in share i."""
        m = _DRAFT_PER_POS.search(line.text)
        if m is None:
            return False
        shares = [num(x) for x in m[1].split(",")]
        said, self.draft_said = self.draft_said, None
        if not 0 < len(shares) <= MAX_DRAFT_POSITIONS or any(x is None or not 0 <= x <= 1 for x in shares):
            return True  # not shares of verify steps: left unread
        kept_shares = [x for x in shares if x is not None]
        total = sum(kept_shares)
        # its verify steps; with no counts before it, weighed as one request among the others
        steps = (said[0] / total if total > 0 else said[1] / len(kept_shares)) if said else 1.0
        sums, had = self.run.value("draft_per_position") or ((), 0.0)
        longest = max(len(sums), len(kept_shares))
        padded = [*sums, *[0.0] * (longest - len(sums))]
        for i, x in enumerate(kept_shares):
            padded[i] += x * steps
        self.run.set("draft_per_position", (tuple(padded), had + steps), line)
        return True

    def ollama_verbose(self, line: Line) -> bool:
        m = _OLLAMA.match(line.text)
        if not m:
            return False
        self.saw("ollama --verbose")
        key, value = m[1], m[2].strip().strip("*").strip()
        self.ollama[key] = (value, line)
        if key.endswith("rate"):
            prefix = "prompt eval" if key.startswith("prompt") else "eval"
            printed = value.split()[0] if value.split() else ""
            n_text = (self.ollama.get(f"{prefix} count", ("", line))[0].split() or [""])[0]
            duration = self.ollama.get(f"{prefix} duration", ("", line))[0]
            n = figures.tokens(n_text, line) if n_text else None
            ms = go_duration_ms(duration)
            tok_s = figures.rate(line, n, ms, printed) if n else None
            if tok_s is not None and n:
                if prefix == "prompt eval":
                    s = Speed("prefill", tok_s, n, line.number, line.text, "ollama --verbose", eval_ms=ms)
                    self.last_prefill = s
                else:
                    before = self.last_prefill.n_tokens if self.last_prefill else 0
                    s = Speed(
                        "decode",
                        tok_s,
                        n,
                        line.number,
                        line.text,
                        "ollama --verbose",
                        depth=(before or 0) + n // 2,
                        eval_ms=ms,
                    )
                    self.last_prefill = None
                self.run.add_speed(s)
            for k in [k for k in self.ollama if k.startswith(prefix)]:
                del self.ollama[k]
        return True

    def python_meta(self, line: Line) -> bool:
        """llama-cpp-python's `Model metadata: {'general.architecture': 'llama', ...}`."""
        if not line.text.startswith("Model metadata: {"):
            return False
        self.saw("llama-cpp-python metadata")
        pairs = dict(_PY_META.findall(line.text[:MAX_PY_META_CHARS]))
        r = self.run
        arch = pairs.get("general.architecture")
        if arch:
            r.setdefault("architecture", arch[:40], line)
            for short, key in METADATA_FACTS.items():
                r.setdefault(key, count(pairs.get(f"{arch}.{short}")), line)
        if "general.name" in pairs:
            r.setdefault("model_name", pairs["general.name"][:120], line)
        ft = count(pairs.get("general.file_type"))
        if ft is not None:
            r.setdefault("file_type", ft, line)
        return True

    def api_json(self, line: Line) -> bool:
        """An Ollama /api/generate final object, or llama-server's `timings`, pasted as JSON."""
        t = line.text
        for api, kinds in _API_FIELDS.items():
            for kind, (n_key, ms_key, unit, rate_key) in zip(_KINDS, kinds, strict=True):
                n_m = re.search(_JSON_NUM.format(n_key), t)
                ms_m = re.search(_JSON_NUM.format(ms_key), t)
                if not n_m or not ms_m:
                    continue
                printed = re.search(_JSON_NUM.format(rate_key), t) if rate_key else None
                rate_text = printed[1] if printed and printed[1] != "null" else None  # llama.cpp's JSON of nan
                tok_s, n = _timed(line, n_m[1], ms_m[1], unit, rate_text)
                if tok_s is None or not n:
                    continue
                self.saw(f"{api} answer (JSON)")
                before = self.last_prefill.n_tokens if self.last_prefill and kind == "decode" else 0
                s = Speed(
                    kind,
                    tok_s,
                    n,
                    line.number,
                    t,
                    f"{api} answer",
                    depth=(before or 0) + (n // 2 if kind == "decode" else 0),
                )
                self.last_prefill = s if kind == "prefill" else None
                self.run.add_speed(s)
        return False

    def ollama_ps(self, line: Line) -> bool:
        m = _OLLAMA_PS.search(line.text)
        if not m:
            return False
        cpu = int(m[1]) if m[1] else (100 if m[3] == "CPU" else 0)
        have = self.run.value("ollama_cpu_percent")
        if have is None or cpu > have:
            self.run.set("ollama_cpu_percent", cpu, line)
        return True
