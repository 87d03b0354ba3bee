"""A credential stays with its origin, and a remote header is kept per origin: hostile Hugging
Face endpoints and Ollama registries (tests/hub_server.py, over plain HTTP and TLS on this
machine), each ggprof run a real process held to its own deadline and memory, leaving no
process behind.

- `HF_TOKEN` goes only to the exact origin it is for (scheme, host and port), as browsers and
  huggingface_hub send credentials: a redirect to another port of the same host, or to
  another host, loses it; a redirect from https to plain http is not followed at all.
- A header read from one registry is never the answer of another that names the same digest:
  the cache is keyed by origin, and a header is kept only once its server stated the digest
  (or commit) of the bytes it served; a server stating another is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TypedDict

import pytest
from ggufs import Shape, write_model
from hub_server import COMMIT, HubServer, Repo, tls_pair
from support import as_bounded_process

REPO = "org/tiny-GGUF"
FILE = "tiny-Q8_0.gguf"
SECRET = "hf_thisIsATestTokenNotARealOne1234"


class Limits(TypedDict):
    """as_bounded_process's limits on each ggprof run."""

    timeout_s: float
    max_rss_bytes: int


LIMITS: Limits = {"timeout_s": 60, "max_rss_bytes": 400 << 20}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("origins") / FILE
    write_model(path, Shape(n_layers=2, n_embd=128, n_heads=4, n_ff=256, vocab=500))  # 0.5 MB: read whole
    return path


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tls_pair(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def env(tmp_path: Path, tls: tuple[Path, Path]) -> dict[str, str]:
    return {
        "HF_TOKEN": SECRET,
        "HF_HOME": str(tmp_path / "hf-home"),
        "GGPROF_CACHE_DIR": str(tmp_path / "cache"),
        "SSL_CERT_FILE": str(tls[0]),  # this machine's self-signed certificate, trusted as a CA
    }


@pytest.fixture
def hubs(tiny: Path, tls: tuple[Path, Path]) -> Iterator[dict[str, HubServer]]:
    """Four servers of the same repository: plain and TLS (each also answering plain HTTP on its
    port), and a second of each on another port."""
    with HubServer() as plain, HubServer() as plain2, HubServer(tls=tls) as secure, HubServer(tls=tls) as secure2:
        for hub in (plain, plain2, secure, secure2):
            hub.repos[REPO] = Repo({FILE: tiny})
        yield {"plain": plain, "plain2": plain2, "secure": secure, "secure2": secure2}


def sent(hub: HubServer) -> list[tuple[str, dict[str, str]]]:
    return list(zip(hub.served.paths, hub.served.headers, strict=True))


def tokens(hub: HubServer) -> list[tuple[str, str]]:
    """(scheme, path) of every request that carried the token."""
    return [(h[":scheme"], p) for p, h in sent(hub) if SECRET in h.get("authorization", "")]


@pytest.mark.parametrize(
    ("endpoint", "cdn", "where"),
    [
        ("plain", "http://127.0.0.1:{plain2}", "another port of the same host"),
        ("secure", "https://127.0.0.1:{secure2}", "another TLS port of the same host"),
        ("plain", "http://localhost:{plain}", "another host name on the same port"),
    ],
)
def test_a_token_does_not_follow_a_redirect_to_another_origin(
    hubs: dict[str, HubServer], env: dict[str, str], endpoint: str, cdn: str, where: str
) -> None:
    first = hubs[endpoint]
    first.cdn_url = cdn.format(**{k: h.port for k, h in hubs.items()})
    r = as_bounded_process("inspect", f"hf://{REPO}/{FILE}", "--json", env={**env, "HF_ENDPOINT": first.url}, **LIMITS)
    assert r.exit_code == 0, (where, r.stderr)
    assert json.loads(r.stdout)["architecture"] == "llama"
    # the token went to the resolve request of its own origin, and only there
    scheme = "https" if endpoint == "secure" else "http"
    assert tokens(first) == [(scheme, f"/{REPO}/resolve/main/{FILE}")], where
    cdn_requests = [h for hub in hubs.values() for p, h in sent(hub) if p.startswith("/cdn/")]
    assert cdn_requests, where  # the header was read at the other origin ...
    assert all("authorization" not in h for h in cdn_requests), where  # ... without the token
    assert SECRET not in r.stdout + r.stderr


@pytest.mark.parametrize("cdn", ["http://127.0.0.1:{secure}", "http://127.0.0.1:{plain}"])
def test_a_redirect_from_https_to_plain_http_is_not_followed(
    hubs: dict[str, HubServer], env: dict[str, str], cdn: str
) -> None:
    """Down to http on the same port (the token's host and port, another scheme), or to another
    port: nothing is sent in cleartext, and the read ends in one line."""
    secure = hubs["secure"]
    secure.cdn_url = cdn.format(**{k: h.port for k, h in hubs.items()})
    r = as_bounded_process("inspect", f"hf://{REPO}/{FILE}", env={**env, "HF_ENDPOINT": secure.url}, **LIMITS)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("Error: ") and "from https to plain http" in r.stderr and r.stderr.count("\n") == 1
    plain_requests = [(p, h) for hub in hubs.values() for p, h in sent(hub) if h[":scheme"] == "http"]
    assert plain_requests == []
    assert tokens(secure) == [("https", f"/{REPO}/resolve/main/{FILE}")]


def test_a_resolve_link_in_plain_http_to_the_hubs_host_gets_no_token(
    hubs: dict[str, HubServer], env: dict[str, str]
) -> None:
    """The Hub is https://127.0.0.1:P; a link to http://127.0.0.1:P (same host and port, another
    scheme) is not the Hub's origin: read without the token."""
    secure = hubs["secure"]
    link = f"http://127.0.0.1:{secure.port}/{REPO}/resolve/main/{FILE}"
    r = as_bounded_process("inspect", link, "--json", env={**env, "HF_ENDPOINT": secure.url}, **LIMITS)
    assert r.exit_code == 0, r.stderr
    assert [h[":scheme"] for _, h in sent(secure)] == ["http"] * len(sent(secure)) and sent(secure)
    assert tokens(secure) == []
    secure.served.reset()
    same = as_bounded_process(
        "inspect", link.replace("http:", "https:"), "--json", env={**env, "HF_ENDPOINT": secure.url}, **LIMITS
    )
    assert same.exit_code == 0, same.stderr
    assert tokens(secure) == [("https", p) for p, _ in sent(secure)]  # its own origin: every request has it


def _ollama_ref(hub: HubServer) -> str:
    return f"ollama://127.0.0.1:{hub.port}/tiny:q8"


@pytest.fixture
def registries(tiny: Path, tmp_path: Path) -> Iterator[tuple[HubServer, HubServer]]:
    """Two registries naming the same digest: the first serves the tiny model (whose sha256 it
    is), the second another small model (3 layers) under that name."""
    with HubServer() as first, HubServer() as second:
        first.ollama["library/tiny:q8"] = tiny
        serve_as(
            second,
            first.digest(tiny),
            tmp_path / "other.gguf",
            Shape(n_layers=3, n_embd=128, n_heads=4, n_ff=256, vocab=500),
        )
        yield first, second


def serve_as(registry: HubServer, digest: str, path: Path, shape: Shape) -> None:
    write_model(path, shape)
    registry.ollama["library/tiny:q8"] = path
    registry.digests[path] = digest


@pytest.mark.parametrize(
    ("command", "status"),
    [
        (("inspect", "--json"), 0),
        (("predict", "--device", "rtx-4090", "--json"), 0),
        (("fit", "--device", "rtx-4090", "--json"), 0),
        (("check", "--tg", "50", "--device", "rtx-4090", "--json"), 3),  # a 0.4 MB model at 50 tok/s: slow
    ],
)
def test_a_registry_is_never_answered_from_anothers_header(
    registries: tuple[HubServer, HubServer], env: dict[str, str], command: tuple[str, ...], status: int
) -> None:
    first, second = registries
    name, *flags = command
    r = as_bounded_process(name, _ollama_ref(first), *flags, env=env, **LIMITS)
    assert r.exit_code == status, r.stderr
    second.served.reset()
    again = as_bounded_process(name, _ollama_ref(second), *flags, env=env, **LIMITS)
    # the second registry is asked (its blob), and its answer is refused: it states a digest
    # its bytes do not have (the whole small file was read and hashed)
    assert any("/blobstore/" in p for p in second.served.paths)
    assert again.exit_code == 2 and again.stdout == ""
    assert "are not those of sha256:" in again.stderr and again.stderr.count("\n") == 1
    first.served.reset()
    kept = as_bounded_process(name, _ollama_ref(first), *flags, env=env, **LIMITS)  # the first's own: kept
    assert kept.exit_code == status and _answer(kept.stdout) == _answer(r.stdout)
    assert not any("/blobstore/" in p for p in first.served.paths)


def _answer(stdout: str) -> object:
    """A command's JSON less what this host reads afresh each time (its free RAM: fit's `cpu` pool
    and the RAM's size as the OS states it), so that two answers from one header compare equal."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            if value.get("pool") == "cpu":
                return {k: strip(v) for k, v in value.items() if k != "available_bytes"}
            return {k: strip(v) for k, v in value.items() if k != "ram"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads(stdout))


def test_a_registry_serving_its_own_model_under_a_shared_digest_reads_its_own_header(
    registries: tuple[HubServer, HubServer], env: dict[str, str], tmp_path: Path
) -> None:
    """A second registry that states no digest, with a model too large to be hashed from its
    header (2.5 MB): its header is read from it (not from the first's cache entry), and not kept."""
    first, second = registries
    serve_as(
        second,
        first.digest(first.ollama["library/tiny:q8"]),
        tmp_path / "big.gguf",
        Shape(n_layers=3, n_embd=512, n_ff=1024, vocab=2000),
    )
    second.state_digests = False
    assert as_bounded_process("inspect", _ollama_ref(first), "--json", env=env, **LIMITS).exit_code == 0
    for _ in range(2):
        second.served.reset()
        r = as_bounded_process("inspect", _ollama_ref(second), "--json", env=env, **LIMITS)
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["n_layers"] == 3  # the second's model, not the first's 2 layers
        assert any("/blobstore/" in p for p in second.served.paths)


def test_a_server_stating_another_commit_is_refused_and_nothing_is_kept(
    hubs: dict[str, HubServer], env: dict[str, str]
) -> None:
    plain = hubs["plain"]
    plain.repos[REPO].commit = "f" * 40  # the resolve answer states this commit, not the one asked
    ref = f"hf://{REPO}/{FILE}@{COMMIT}"
    for _ in range(2):
        r = as_bounded_process("inspect", ref, env={**env, "HF_ENDPOINT": plain.url}, **LIMITS)
        assert r.exit_code == 2 and "where " + COMMIT in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert sum("/resolve/" in p for p in plain.served.paths) == 2  # asked again: nothing was kept


def test_a_header_kept_at_a_commit_is_per_endpoint_and_checked_when_read(
    hubs: dict[str, HubServer], env: dict[str, str], tmp_path: Path
) -> None:
    plain, plain2 = hubs["plain"], hubs["plain2"]
    ref = f"hf://{REPO}/{FILE}@{COMMIT}"
    first = as_bounded_process("inspect", ref, "--json", env={**env, "HF_ENDPOINT": plain.url}, **LIMITS)
    assert first.exit_code == 0, first.stderr
    plain.served.reset()
    again = as_bounded_process("inspect", ref, "--json", env={**env, "HF_ENDPOINT": plain.url}, **LIMITS)
    assert again.stdout == first.stdout and plain.served.paths == []  # kept: no request
    other = as_bounded_process("inspect", ref, "--json", env={**env, "HF_ENDPOINT": plain2.url}, **LIMITS)
    assert other.exit_code == 0 and any("/resolve/" in p for p in plain2.served.paths)  # another endpoint: asked
    for head in (tmp_path / "cache" / "remote-headers").glob("*.head"):
        data = bytearray(head.read_bytes())
        data[100] ^= 0xFF  # changed after it was kept
        head.write_bytes(bytes(data))
    plain.served.reset()
    tampered = as_bounded_process("inspect", ref, "--json", env={**env, "HF_ENDPOINT": plain.url}, **LIMITS)
    assert tampered.stdout == first.stdout and any("/resolve/" in p for p in plain.served.paths)
