"""Models elsewhere, read by range requests: Hugging Face (through huggingface_hub, pointed at a
local stand-in with HF_ENDPOINT), an Ollama registry and a plain file server, all served here by
tests/hub_server.py from the real Gemma file and synthetic GGUFs. Only the header crosses; the
figures equal the local file's; hostile servers end in one line."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ggufs import F16, Q4_K, Q8_0, Shape, write_model
from hub_server import COMMIT, HubServer, Repo, tls_pair
from support import Measured, in_process, measured

from ggprof.model.gguf import read_header

REPO = "ggml-org/gemma-3-270m-GGUF"
FILE = "gemma-3-270m-Q4_K_M.gguf"
MiB = 1 << 20


@pytest.fixture
def hub(gemma_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    with HubServer() as server:
        server.repos[REPO] = Repo({FILE: gemma_path})
        server.plain["gemma.gguf"] = gemma_path
        server.ollama["library/gemma3:270m"] = gemma_path
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # huggingface_hub's own caches stay here
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


def inspected(*args: str) -> dict[str, Any]:
    r = in_process("inspect", *args, "--json")
    assert r.exit_code == 0, r.stderr
    d: dict[str, Any] = json.loads(r.stdout)
    return d


def figures(d: dict[str, Any]) -> dict[str, Any]:
    """An inspect answer without the names (a remote one is named by its reference)."""
    return {k: v for k, v in d.items() if k not in ("path", "paths", "file", "name_shown")}


def file_requests(hub: HubServer) -> list[str]:
    return [p for p in hub.served.paths if not p.startswith("/api/agent")]


def test_inspect_over_http_reads_the_header_only(hub: HubServer, gemma_path: Path) -> None:
    local = figures(inspected(str(gemma_path)))
    header = read_header(gemma_path).data_offset  # 6.5 MB of a 253 MB file: a 262k-token vocabulary
    for ref in (
        f"hf://{REPO}/{FILE}",
        f"{hub.url}/files/gemma.gguf",
        f"ollama://127.0.0.1:{hub.url.rsplit(':', 1)[1]}/gemma3:270m",
    ):
        hub.served.reset()
        assert figures(inspected(ref)) == local, ref
        assert len(file_requests(hub)) <= 6, (ref, hub.served.paths)
        assert hub.served.bytes <= header + MiB + 64 << 10, ref  # the header, what the ranges grew past it, JSON


def test_a_header_read_once_at_a_commit_costs_no_request(hub: HubServer) -> None:
    ref = f"hf://{REPO}/{FILE}@{COMMIT}"
    first = inspected(ref)
    hub.served.reset()
    assert inspected(ref) == first
    assert file_requests(hub) == []


def test_offline_reads_only_what_is_kept(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = in_process("inspect", f"hf://{REPO}/{FILE}@{COMMIT}")
    assert r.exit_code == 2 and "HF_HUB_OFFLINE" in r.stderr and r.stderr.count("\n") == 1
    monkeypatch.delenv("HF_HUB_OFFLINE")
    inspected(f"hf://{REPO}/{FILE}@{COMMIT}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.served.reset()
    assert inspected(f"hf://{REPO}/{FILE}@{COMMIT}")["architecture"] == "gemma3"
    assert file_requests(hub) == []


def _quants(folder: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    shape = Shape(n_layers=4, n_embd=512, n_heads=8, n_ff=1024, vocab=2000)
    for quant, qtype, ftype in (("Q8_0", Q8_0, 7), ("Q4_K_M", Q4_K, 15), ("F16", F16, 1)):
        path = folder / f"tiny-{quant}.gguf"
        write_model(path, Shape(**{**shape.__dict__, "qtype": qtype, "file_type": ftype}))
        files[path.name] = path
    for part in write_model(
        folder / "tiny-BF.gguf", Shape(**{**shape.__dict__, "qtype": F16, "file_type": 1}), split_max_tensors=20
    ):
        files[part.name] = part
    files["mmproj-tiny-f16.gguf"] = folder / "tiny-F16.gguf"  # a vision projector: no model of its own
    return files


def test_fit_a_repository(hub: HubServer, tmp_path: Path) -> None:
    files = _quants(tmp_path)
    hub.repos["org/tiny-GGUF"] = Repo(files)
    r = in_process("fit", "hf://org/tiny-GGUF", "--device", "rtx-4090", "--min-tg", "5", "--json")
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    names = sorted(m["name"] for m in d["models"])
    assert names == ["tiny-BF-00001-of-00002.gguf", "tiny-F16.gguf", "tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf"]
    assert all(m["path"] == f"hf:org/tiny-GGUF/{m['name']}" for m in d["models"])
    split = next(m for m in d["models"] if "BF-00001" in m["name"])
    local = read_header(files["tiny-F16.gguf"])
    assert split["n_params"] == sum(t.n_elements for t in local.tensors)  # both shards' tensors, as one model
    assert d["min_tok_s"] == 5 and d["best"] is not None and d["fastest"] is not None
    assert all(m["prefill_tok_s_low"] is not None for m in d["models"])
    hub.served.reset()  # again: the listing names the commit, every header is kept under it
    assert in_process("fit", "hf://org/tiny-GGUF", "--device", "rtx-4090").exit_code == 0
    assert [p for p in file_requests(hub) if not p.startswith("/api/models/")] == []


def test_a_split_set_by_url_reads_every_shard(hub: HubServer, tmp_path: Path) -> None:
    files = _quants(tmp_path)
    for name, path in files.items():
        hub.plain[name] = path
    d = inspected(f"{hub.url}/files/tiny-BF-00001-of-00002.gguf")
    local = inspected(str(files["tiny-BF-00001-of-00002.gguf"]))
    assert figures(d) == figures(local)


def test_check_and_check_log_take_a_remote_model(hub: HubServer) -> None:
    r = in_process("check", f"hf://{REPO}/{FILE}", "--tg", "50", "--bandwidth", "0.1", "--backend", "cpu")
    assert r.exit_code == 4 and "IMPOSSIBLE" in r.stdout
    log = Path(__file__).parent / "data" / "logs" / "own-llama-server-gemma3-270m-cpu.txt"
    r = in_process(
        "check", "--log", str(log), f"hf://{REPO}/{FILE}", "--backend", "cpu", "--bandwidth", "0.1", "--json"
    )
    d = json.loads(r.stdout)
    assert r.exit_code == 4 and d["runs"][0]["model"]["source"] == FILE


def test_gated_private_and_missing_are_one_line(hub: HubServer, gemma_path: Path) -> None:
    hub.repos["org/gated"] = Repo({FILE: gemma_path}, gated=True)
    cases = (
        (("fit", "hf://org/gated", "--device", "rtx-4090"), "gated"),
        (("inspect", f"hf://org/gated/{FILE}"), "token"),
        (("fit", "hf://org/nothing-here", "--device", "rtx-4090"), "no such repository"),
        (("inspect", f"hf://{REPO}/missing.gguf"), "not found"),
        (("inspect", "hf://only-one-part"), "hf://ORG/REPO"),
        (("inspect", f"hf://{REPO}"), "names a repository"),
        (("inspect", f"{hub.url}/files/readme.txt"), "not the URL of a .gguf"),
        (("inspect", f"ollama://127.0.0.1:{hub.url.rsplit(':', 1)[1]}/none:latest"), "not found"),
    )
    for args, words in cases:
        r = in_process(*args)
        assert r.exit_code == 2 and r.stdout == "", args
        assert r.stderr.startswith("Error: ") and words in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)


def test_a_token_goes_to_its_host_only_and_is_never_printed(
    hub: HubServer, gemma_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "hf_thisIsATestTokenNotARealOne1234"
    monkeypatch.setenv("HF_TOKEN", secret)
    hub.cdn_host = "localhost"  # downloads redirected to another host name, as the Hub's CDN is
    hub.repos["org/gated"] = Repo({FILE: gemma_path}, gated=True)
    r = in_process("inspect", f"hf://org/gated/{FILE}", "--json")
    assert r.exit_code == 0, r.stderr
    assert secret not in r.stdout + r.stderr
    sent = list(zip(hub.served.paths, hub.served.headers, strict=True))
    resolve = [h for p, h in sent if "/resolve/" in p]
    cdn = [h for p, h in sent if p.startswith("/cdn/")]
    assert resolve and all(h.get("authorization") == f"Bearer {secret}" for h in resolve)
    assert cdn and all("authorization" not in {k.lower() for k in h} for h in cdn)
    bad = in_process("inspect", "hf://org/gated/missing.gguf")
    assert secret not in bad.stdout + bad.stderr


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("ignore-ranges", "ignores range requests"),
        ("send-more", "sent"),
        ("close-mid", ""),
        ("lie-size", "tensors end at"),
        ("redirect-file", "non-http(s)"),
        ("redirect-loop", "redirects"),
        ("stall", "time"),
        ("drip", "deadline"),
    ],
)
def test_hostile_servers_end_in_one_line(hub: HubServer, monkeypatch: pytest.MonkeyPatch, how: str, words: str) -> None:
    import time

    from ggprof.model import ranges

    # a drip's bytes come every 50 ms: a 10 s read timeout never fires first, however busy the
    # machine; the 1.5 s whole deadline does
    monkeypatch.setattr(ranges, "READ_TIMEOUT_S", 10.0 if how == "drip" else 0.5)
    monkeypatch.setattr(ranges, "REQUEST_DEADLINE_S", 1.5)
    hub.misbehave[FILE] = how
    start = time.monotonic()
    r = in_process("inspect", f"hf://{REPO}/{FILE}")
    assert time.monotonic() - start < 30
    assert r.exit_code == 2 and r.stdout == "", (how, r.stderr)
    assert r.stderr.startswith("Error: ") and words in r.stderr and r.stderr.count("\n") == 1, (how, r.stderr)


def test_max_header_bytes_bounds_what_is_read(hub: HubServer) -> None:
    hub.served.reset()
    r = in_process("inspect", f"hf://{REPO}/{FILE}", "--max-header-bytes", "2MiB")
    assert r.exit_code == 2 and "--max-header-bytes" in r.stderr
    assert hub.served.bytes <= 2 * MiB + 64 << 10
    r = in_process("inspect", f"hf://{REPO}/{FILE}", "--max-header-bytes", "12")
    assert r.exit_code == 2 and "64KiB" in r.stderr


def test_a_remote_model_is_not_run() -> None:
    r = in_process("profile", f"hf://{REPO}/{FILE}")
    assert r.exit_code == 2 and "download it first" in r.stderr and r.stderr.count("\n") == 1


def test_predict_and_plan_take_a_remote_model(hub: HubServer, gemma_path: Path) -> None:
    ref = f"hf://{REPO}/{FILE}"
    remote = in_process("predict", ref, "--device", "rtx-4090", "--json")
    local = in_process("predict", str(gemma_path), "--device", "rtx-4090", "--json")
    assert remote.exit_code == local.exit_code == 0, remote.stderr
    a, b = json.loads(remote.stdout), json.loads(local.stdout)
    assert a["decode_ceiling_tok_s"] == b["decode_ceiling_tok_s"]
    plan = in_process(
        "plan", ref, "--qps", "1", "--prompt", "256", "--gen", "64", "--tpot-slo", "50", "--device", "rtx-4090"
    )
    assert plan.exit_code == 0, plan.stderr


# -- hostile servers, the real CLI in a session of its own: one deadline for a header, bounded listings
SECRET = "hf_thisIsATestTokenNotARealOne1234"
START_UP_BYTES = 96 * MiB  # the interpreter, ggprof's imports and profiles: about 45 MiB here


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tls_pair(tmp_path_factory.mktemp("tls"))


@pytest.fixture(params=["http", "https"])
def hostile(
    request: pytest.FixtureRequest,
    tls: tuple[Path, Path],
    gemma_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[HubServer]:
    """The stand-in Hub over plain HTTP or TLS, a token set up, downloads redirected to another
    host name (as the Hub's CDN is), which the token must never reach."""
    with HubServer(tls=tls if request.param == "https" else None) as server:
        server.cdn_host = "localhost"
        server.repos[REPO] = Repo({FILE: gemma_path})
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setenv("HF_TOKEN", SECRET)
        monkeypatch.setenv("SSL_CERT_FILE", str(tls[0]))  # the stand-in's own certificate is trusted
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield server


def refused(r: Measured, hub: HubServer, *words: str) -> None:
    """One error line (exit 2) naming `words`, nothing of the run's session left, and the token
    sent to the Hub's own host only: never to the CDN host, never printed."""
    assert r.exit_code == 2 and r.stdout == "", (r.exit_code, r.stdout[:300], r.stderr)
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert r.left == [] and SECRET not in r.stderr
    for path, headers in zip(hub.served.paths, hub.served.headers, strict=True):
        sent = {k.lower(): v for k, v in headers.items()}.get("authorization")
        assert sent == (None if path.startswith("/cdn/") else f"Bearer {SECRET}"), (path, sent)


def test_a_range_answered_one_byte_at_a_time_ends_in_one_line(hostile: HubServer) -> None:
    hostile.misbehave[FILE] = "one-byte"
    r = measured("inspect", f"hf://{REPO}/{FILE}", timeout_s=120)
    # before: a request a byte, each answered at once: still running at 100 s
    refused(r, hostile, "64 ranges read 64 bytes and not the whole header")
    assert r.wall_s < 30 and r.peak_rss_bytes < START_UP_BYTES


def test_shards_that_answer_late_end_at_the_header_deadline(hostile: HubServer, tmp_path: Path) -> None:
    """Each answer 2 s late: a shard's first range (its redirect, then the range) takes 4 s,
    past the 3 s the whole header may take; every shard waits on the one deadline."""
    files = {n: p for n, p in _quants(tmp_path).items() if "-of-" in n}
    hostile.repos["org/split"] = Repo(files, commit=secrets.token_hex(20))  # no header kept from another test
    hostile.latency_s = 2.0
    start = time.monotonic()
    r = measured("inspect", f"hf://org/split/{sorted(files)[0]}", "--header-timeout", "3", timeout_s=120)
    # before: each request had its own deadline, the header none: shards answering after 14 s ran past 100 s
    refused(r, hostile, "not read within 3 s (--header-timeout); given up")
    assert time.monotonic() - start < 20 and r.peak_rss_bytes < START_UP_BYTES


def test_fit_of_a_repository_whose_shards_answer_late_ends_at_its_deadlines(hostile: HubServer, tmp_path: Path) -> None:
    """The listing (2.5 s late) within its own 4 s, then every header within one 4 s deadline."""
    files = {n: p for n, p in _quants(tmp_path).items() if "-of-" in n}
    hostile.repos["org/split"] = Repo(files, commit=secrets.token_hex(20))
    hostile.latency_s = 2.5
    r = measured("fit", "hf://org/split", "--device", "rtx-4090", "--header-timeout", "4", timeout_s=120)
    refused(r, hostile, "no readable GGUF model in hf://org/split", "not read within 4 s (--header-timeout)")
    assert r.wall_s < 30 and r.peak_rss_bytes < START_UP_BYTES


@pytest.mark.parametrize(
    "name", ["../other-GGUF/x.gguf", "/etc/x.gguf", "a/../../x.gguf", "a\\..\\x.gguf", "a//x.gguf"]
)
def test_a_listing_naming_a_file_outside_its_repository_is_refused_before_any_request(
    hostile: HubServer, gemma_path: Path, name: str
) -> None:
    hostile.repos["org/bad"] = Repo({FILE: gemma_path}, commit=secrets.token_hex(20), names=(name,))
    r = measured("fit", "hf://org/bad", "--device", "rtx-4090", timeout_s=120)
    # before: fit asked for /org/bad/resolve/COMMIT/../other-GGUF/x.gguf, with the token
    refused(r, hostile, "hf://org/bad: the listing names a file outside the repository", "nothing is read")
    assert [p.split("?")[0] for p in hostile.served.paths] == ["/api/models/org/bad"]
    assert r.wall_s < 20 and r.peak_rss_bytes < START_UP_BYTES


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("huge", "hf://org/bad: the listing: an answer larger than 16 MiB; not read further"),
        ("gzip-bomb", "hf://org/bad: the listing: an answer that decompresses to more than 32 MiB"),
        ("many-files", "hf://org/bad: the listing names 20,001 files, more than 20,000; not read"),
        ("stall", "hf://org/bad: the listing: not read within 3 s (--header-timeout); given up"),
    ],
)
def test_a_listing_past_its_bounds_ends_in_one_line(hostile: HubServer, gemma_path: Path, how: str, words: str) -> None:
    hostile.repos["org/bad"] = Repo({FILE: gemma_path}, listing=how)
    r = measured("fit", "hf://org/bad", "--device", "rtx-4090", "--header-timeout", "3", timeout_s=120)
    # before: 300 MB of listing took 1.49 GB, a gzip bomb ended in "JSONDecodeError"
    refused(r, hostile, words)
    assert all(p.startswith("/api/models/org/bad") for p in hostile.served.paths)
    assert r.wall_s < 20 and r.peak_rss_bytes < START_UP_BYTES + 3 * 32 * MiB, (r.wall_s, r.peak_rss_bytes)


@pytest.mark.parametrize("command", ["inspect", "fit", "predict", "check"])
def test_the_header_deadline_is_in_help(command: str) -> None:
    r = in_process(command, "--help")
    assert r.exit_code == 0 and "--header-timeout SECONDS" in r.stdout and "every range request" in r.stdout
