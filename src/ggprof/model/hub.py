"""Models that are not on this machine: a GGUF on Hugging Face, on any HTTP(S) server, or in an
Ollama registry, read by range requests (ggprof.model.ranges) so that only headers cross the
network.

References:
- `hf://ORG/REPO/FILE.gguf[@REVISION]`, one file (a split set's first shard names the set), or
  `hf://ORG/REPO[@REVISION]`, every GGUF of the repository (`repo_models`);
- `http(s)://.../FILE.gguf` (a Hugging Face `resolve/` link too);
- `ollama://[REGISTRY/]NAMESPACE/MODEL[:TAG]`: the registry's manifest, then its model layer.

Hugging Face is reached through `huggingface_hub`, as its users have it set up: `HF_ENDPOINT`,
`HF_TOKEN` or the login `hf auth login` stored, `HF_HUB_OFFLINE`. A header read once is kept in
ggprof's cache, keyed by where it came from (scheme, host and port) and what names its content
(a commit, a digest), and only once the server has stated that name for the bytes it served:
read again from the same commit it costs no request. A token is sent only to the origin it is
for (scheme, host and port), never over a redirect to plain http, never printed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ggprof.errors import BadInputError, GGUFError, RemoteError
from ggprof.model.gguf import _MAX_TENSOR_INFO_BYTES, SPLIT_NAME, GGUFHeader, read_header_from
from ggprof.model.listing import hf_listing
from ggprof.model.ranges import (
    HEADER_TIMEOUT_S,
    MAX_HEADER_BYTES,
    RangeReader,
    RemoteFile,
    Traffic,
    get_json,
    origin,
    shown_url,
)
from ggprof.model.stores import OLLAMA_MODEL_LAYER
from ggprof.model.stores import OLLAMA_REGISTRY as DEFAULT_REGISTRY
from ggprof.netio import Deadline
from ggprof.paths import cache_dir
from ggprof.units import clean_name

MAX_SHARDS = 256
MAX_CONCURRENT = 16  # headers read at once
_NAME = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}$")  # an org, repository, namespace or model name
_REVISION = re.compile(r"^[\w.\-/]{1,120}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_LOOK_AHEAD_BYTES = _MAX_TENSOR_INFO_BYTES


@dataclass(frozen=True)
class RemoteFileRef:
    """One file of a remote model: where to read it and what names its content."""

    url: str
    shown: str  # as the user would name it: hf:ORG/REPO/FILE, the URL without its query
    headers: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # its origin and the commit or digest that name the bytes (a cache hit needs no request)
    content_key: str | None = None
    size: int | None = None  # as a listing states it
    # what the server must state of the bytes it serves (a header of DIGEST_HEADERS and its value)
    # before they are kept under `content_key`
    expect: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RemoteModel:
    """A model (one file, or the shards of a split set) somewhere else."""

    name: str  # shown in output
    files: tuple[RemoteFileRef, ...]


# -- references ----------------------------------------------------------------------------------
def _hf_parts(text: str) -> tuple[str, str | None, str | None]:
    """(ORG/REPO, FILE or None, REVISION or None) of `hf://...`."""
    body = text[len("hf://") :]
    body, _, revision = body.partition("@")
    parts = [p for p in body.split("/") if p]
    if len(parts) < 2 or not all(_NAME.match(p) for p in parts[:2]):
        raise BadInputError(f"{clean_name(text, 100)}: not hf://ORG/REPO[/FILE.gguf][@REVISION]")
    if revision and not _REVISION.match(revision):
        raise BadInputError(f"{clean_name(text, 100)}: {clean_name(revision, 40)!r} is not a revision")
    path = "/".join(parts[2:]) or None
    if path is not None and (".." in parts[2:] or not path.lower().endswith(".gguf")):
        raise BadInputError(f"{clean_name(text, 100)}: a file in the repository must be a .gguf")
    return f"{parts[0]}/{parts[1]}", path, revision or None


def _endpoint() -> str:
    import huggingface_hub.constants as c

    return (os.environ.get("HF_ENDPOINT") or c.ENDPOINT).rstrip("/")


def _offline() -> bool:
    import huggingface_hub.constants as c

    env = os.environ.get("HF_HUB_OFFLINE")
    return env.strip().lower() in ("1", "on", "yes", "true") if env is not None else bool(c.HF_HUB_OFFLINE)


def _hf_headers() -> dict[str, str]:
    """The token the user has set up (HF_TOKEN, or the login `hf auth login` stored), as
    huggingface_hub finds it; sent to the Hub's own host only (ranges.RangeReader)."""
    from importlib import metadata

    from huggingface_hub import get_token

    try:
        version = metadata.version("ggprof")
    except metadata.PackageNotFoundError:
        version = "dev"
    token = get_token()
    return {"user-agent": f"ggprof/{version}", **({"authorization": f"Bearer {token}"} if token else {})}


def _hf_file(repo: str, filename: str, revision: str | None, commit: str | None, size: int | None) -> RemoteFileRef:
    from huggingface_hub import hf_hub_url

    url = hf_hub_url(repo, filename, revision=commit or revision or "main", endpoint=_endpoint())
    return RemoteFileRef(
        url=url,
        shown=f"hf:{repo}/{filename}" + (f"@{revision}" if revision else ""),
        headers=_hf_headers(),
        content_key=f"hf:{_origin_text(_endpoint())}:{repo}:{commit}:{filename}" if commit else None,
        size=size,
        expect=(("x-repo-commit", commit),) if commit else (),  # the Hub states the commit it resolved
    )


def _origin_text(url: str) -> str:
    scheme, host, port = origin(url)
    return f"{scheme}://{host}:{port}"


def model_ref(text: str, deadline: Deadline | None = None) -> RemoteModel:
    """The one model a reference names (`hf://ORG/REPO` names a repository: `repo_models`); an
    Ollama registry's manifest is read within `deadline`, the model's."""
    if text.startswith("hf://"):
        repo, path, revision = _hf_parts(text)
        if path is None:
            raise BadInputError(
                f"{clean_name(text, 100)} names a repository: name one of its files (hf://{repo}/FILE.gguf), "
                "or give it to `ggprof fit`"
            )
        commit = revision if revision and _COMMIT.match(revision) else None
        names = _shard_names(path)
        return RemoteModel(f"hf:{repo}/{path}", tuple(_hf_file(repo, n, revision, commit, None) for n in names))
    if text.startswith("ollama://"):
        return _ollama_model(text, deadline)
    u = urllib.parse.urlsplit(text)
    if not u.path.lower().endswith(".gguf"):
        raise BadInputError(f"{shown_url(text)}: not the URL of a .gguf file")
    names = _shard_names(u.path.rsplit("/", 1)[-1])
    base = text[: text.index(u.path) + len(u.path) - len(u.path.rsplit("/", 1)[-1])]
    query = f"?{u.query}" if u.query else ""
    # a resolve link on the Hub's own origin (scheme, host and port) carries the user's token, as hf:// does
    headers = _hf_headers() if origin(text) == origin(_endpoint()) else {}
    files = tuple(
        RemoteFileRef(url=f"{base}{n}{query}", shown=_shown_path(f"{base}{n}"), headers=headers) for n in names
    )
    return RemoteModel(shown_url(text), files)


def _shown_path(url: str) -> str:
    """A URL as a path-like name (host and path): a Path would fold the `//` of `https://`."""
    u = urllib.parse.urlsplit(url)
    return clean_name(f"{u.netloc.rsplit('@', 1)[-1]}{u.path}", 200)


def _shard_names(name: str) -> list[str]:
    m = SPLIT_NAME.match(name.rsplit("/", 1)[-1])
    if not m or int(m["count"]) < 2:
        return [name]
    count = int(m["count"])
    if count > MAX_SHARDS:
        raise BadInputError(f"{clean_name(name, 80)}: a split of {count} shards; at most {MAX_SHARDS} are read")
    folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
    return [f"{folder}{m['prefix']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def _ollama_model(text: str, deadline: Deadline | None) -> RemoteModel:
    body = text[len("ollama://") :]
    *head, last = body.split("/")
    model, _, tag = last.partition(":")  # the tag is the last segment's; a registry may have a port
    parts = [p for p in (*head, model) if p]
    registry = DEFAULT_REGISTRY
    if len(parts) == 3 or (len(parts) == 2 and ("." in parts[0] or ":" in parts[0])):
        registry, parts = parts[0], parts[1:]
    if len(parts) == 1:
        parts = ["library", parts[0]]
    tag = tag or "latest"
    if len(parts) != 2 or not all(_NAME.match(p) for p in parts) or not _NAME.match(tag):
        raise BadInputError(f"{clean_name(text, 100)}: not ollama://[REGISTRY/]NAMESPACE/MODEL[:TAG]")
    # a registry on this machine speaks plain http (as docker treats localhost); any other, https
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    scheme = "http" if host in ("localhost", "127.0.0.1", "[::1]") else "https"
    base = f"{scheme}://{registry}/v2/{parts[0]}/{parts[1]}"
    accept = {"Accept": "application/vnd.docker.distribution.manifest.v2+json"}
    manifest = get_json(f"{base}/manifests/{tag}", accept, deadline)
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    layer = next((x for x in layers or [] if isinstance(x, dict) and x.get("mediaType") == OLLAMA_MODEL_LAYER), None)
    digest = layer.get("digest") if layer else None
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise RemoteError(f"{clean_name(text, 100)}: the registry's manifest names no model layer")
    size = layer.get("size") if isinstance(layer, dict) else None
    shown = f"ollama:{'' if registry == DEFAULT_REGISTRY else registry + '/'}{parts[0]}/{parts[1]}:{tag}"
    ref = RemoteFileRef(
        url=f"{base}/blobs/{digest}",
        shown=shown,
        content_key=f"ollama:{_origin_text(base)}:{digest}",  # a digest is kept per registry: each answers for its own
        size=size if isinstance(size, int) and size > 0 else None,
        expect=(("docker-content-digest", digest),),
    )
    return RemoteModel(shown, (ref,))


def models_of(text: str, timeout_s: float = HEADER_TIMEOUT_S) -> list[RemoteModel]:
    """The models a reference names: a repository's every GGUF (`hf://ORG/REPO`, listed within
    `timeout_s`), else one (an Ollama manifest read within `timeout_s`)."""
    deadline = Deadline.after(timeout_s, "--header-timeout")
    if text.startswith("hf://") and _hf_parts(text)[1] is None:
        return repo_models(text, deadline)
    return [model_ref(text, deadline)]


def repo_models(text: str, deadline: Deadline | None = None) -> list[RemoteModel]:
    """Every GGUF model of `hf://ORG/REPO[@REVISION]`: single files, and each split set as one
    model; a vision projector (`mmproj`) is not a model. The listing is read within `deadline`
    (ggprof.model.listing: bounded, every name inside the repository), with huggingface_hub's
    endpoint, token and offline mode."""
    repo, path, revision = _hf_parts(text)
    deadline = deadline or Deadline.after(HEADER_TIMEOUT_S, "--header-timeout")
    if path is not None:
        return [model_ref(text, deadline)]
    if _offline():
        raise RemoteError(f"hf://{repo}: HF_HUB_OFFLINE is set, and a repository's files cannot be listed offline")
    listing = hf_listing(_endpoint(), repo, revision, _hf_headers(), deadline)
    commit = listing.commit if listing.commit and _COMMIT.match(listing.commit) else None
    sizes = listing.sizes
    ggufs = sorted(n for n in sizes if n.lower().endswith(".gguf") and "mmproj" not in n.lower().rsplit("/", 1)[-1])
    models: list[RemoteModel] = []
    seen: set[str] = set()
    for name in ggufs:
        if name in seen:
            continue
        shards = _shard_names(name)
        if len(shards) > 1 and shards[0] != name:
            continue  # a later shard: its set is read from the first
        missing = [s for s in shards if s not in sizes]
        seen.update(shards)
        if missing:
            continue  # an incomplete split set in the listing is no model
        files = tuple(_hf_file(repo, s, revision, commit, sizes.get(s)) for s in shards)
        models.append(RemoteModel(f"hf:{repo}/{name}", files))
    if not models:
        raise RemoteError(f"hf://{repo}: no GGUF files in the repository")
    return models


# -- reading headers ---------------------------------------------------------------------------------
def read_remote_model(
    model: RemoteModel,
    max_header_bytes: int = MAX_HEADER_BYTES,
    traffic: Traffic | None = None,
    deadline: Deadline | None = None,
) -> list[GGUFHeader]:
    """The header of every file of `model`, read at once (a split set's shards concurrently),
    all within `deadline` (--header-timeout, 60 s by default)."""
    traffic = traffic or Traffic()
    deadline = deadline or Deadline.after(HEADER_TIMEOUT_S, "--header-timeout")
    if len(model.files) == 1:
        return [read_remote_header(model.files[0], 0, max_header_bytes, traffic, deadline)]
    with ThreadPoolExecutor(max_workers=min(len(model.files), MAX_CONCURRENT)) as pool:
        headers = list(
            pool.map(
                lambda i: read_remote_header(model.files[i], i, max_header_bytes, traffic, deadline),
                range(len(model.files)),
            )
        )
    from ggprof.model.gguf import _check_split

    _check_split(Path(model.name), headers)
    return headers


def read_remote_header(
    ref: RemoteFileRef, shard: int, max_header_bytes: int, traffic: Traffic, deadline: Deadline
) -> GGUFHeader:
    path = Path(ref.shown)
    cached = _cached(ref)
    if cached is not None:
        data, size, _ = cached
        return read_header_from(_Prefix(data, size, ref.shown), size, path, shard)
    if ref.url.startswith(_endpoint()) and _offline():
        raise RemoteError(f"{ref.shown}: HF_HUB_OFFLINE is set and its header is not in ggprof's cache")
    reader = RangeReader(ref.url, ref.headers, traffic, deadline)
    f = RemoteFile(reader, max_header_bytes)
    if ref.size is not None and ref.size != f.size:
        raise RemoteError(f"{ref.shown}: the server says {f.size:,} bytes, its listing {ref.size:,}")
    verified = _verified(ref, reader.stated, f)
    header = read_header_from(f, f.size, path, shard)
    ends = [header.data_offset + t.offset + t.n_bytes for t in header.tensors]
    if ends and f.size > max(ends) + header.alignment + (1 << 20):
        raise RemoteError(
            f"{ref.shown}: the server says the file has {f.size:,} bytes, but its tensors end at {max(ends):,}"
        )
    if verified:  # kept: the header and what the reader looked ahead past it (a tensor record's bound)
        _keep(ref, bytes(f.data[: header.data_offset + _LOOK_AHEAD_BYTES]), f.size, f.etag)
    return header


def _verified(ref: RemoteFileRef, stated: set[tuple[str, str]], f: RemoteFile) -> bool:
    """Whether the bytes served are the ones `ref`'s commit or digest names, so that they may be
    kept under it: the server states that name (a registry's Docker-Content-Digest, the Hub's
    X-Repo-Commit), or the whole file was read and its sha256 is the digest. A server stating
    another name is refused; one stating none is read, not kept (a digest names the whole file,
    and only its header is read)."""
    verified = False
    for name, want in ref.expect:
        said = {value.lower() for key, value in stated if key == name}
        if said - {want.lower()}:
            got = clean_name(sorted(said - {want.lower()})[0], 80)
            raise RemoteError(
                f"{ref.shown}: the server serves {got} ({name}) where {clean_name(want, 80)} was asked for"
            )
        verified = verified or bool(said)
        if name == "docker-content-digest" and len(f.data) >= f.size:
            if "sha256:" + hashlib.sha256(bytes(f.data[: f.size])).hexdigest() != want.lower():
                raise RemoteError(f"{ref.shown}: the bytes served are not those of {clean_name(want, 80)}")
            verified = True
    return verified


class _Prefix:
    """The start of a file kept in the cache: reads past it are a GGUFError (the header fits)."""

    def __init__(self, data: bytes, size: int, shown: str) -> None:
        self.data, self.size, self.shown, self.pos = data, size, shown, 0

    def seek(self, pos: int) -> None:
        self.pos = pos

    def read(self, n: int) -> bytes:
        if len(self.data) <= self.pos < self.size:
            raise GGUFError(self.shown, "the cached header ends early (remove ggprof's remote-headers cache)")
        end = min(self.pos + n, self.size, len(self.data))  # a short read past the header: what is kept
        out = self.data[self.pos : end]
        self.pos = end
        return out


def _cache_paths(key: str) -> tuple[Path, Path]:
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    folder = cache_dir() / "remote-headers"
    return folder / f"{digest}.head", folder / f"{digest}.json"


def _cached(ref: RemoteFileRef) -> tuple[bytes, int, str | None] | None:
    """A header kept under the origin and the commit or digest that name the file's bytes (no
    request), whole as it was kept (its sha256 checked)."""
    if ref.content_key is None:
        return None
    head, meta = _cache_paths(ref.content_key)
    try:
        if meta.stat().st_size > 4096 or head.stat().st_size > MAX_HEADER_BYTES:
            return None
        info = json.loads(meta.read_text())
        data = head.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("key") != ref.content_key or not isinstance(info.get("size"), int):
        return None
    if info.get("sha256") != hashlib.sha256(data).hexdigest():
        return None  # changed since it was kept: read again
    return data, int(info["size"]), info.get("etag")


def _keep(ref: RemoteFileRef, data: bytes, size: int, etag: str | None) -> None:
    if ref.content_key is None or len(data) > MAX_HEADER_BYTES:
        return
    head, meta = _cache_paths(ref.content_key)
    kept = {"key": ref.content_key, "size": size, "etag": etag, "sha256": hashlib.sha256(data).hexdigest()}
    try:
        head.parent.mkdir(parents=True, exist_ok=True)
        for path, blob in ((head, data), (meta, json.dumps(kept).encode())):
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(blob)
            os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written costs the next run its requests, nothing else


def read_many(
    models: list[RemoteModel],
    max_header_bytes: int = MAX_HEADER_BYTES,
    traffic: Traffic | None = None,
    timeout_s: float = HEADER_TIMEOUT_S,
) -> list[list[GGUFHeader] | str]:
    """Each model's headers, or the one-line reason it could not be read, every model at once and
    all within `timeout_s` (one deadline: the command waits no longer, however many models)."""
    traffic = traffic or Traffic()
    deadline = Deadline.after(timeout_s, "--header-timeout")

    def one(m: RemoteModel) -> list[GGUFHeader] | str:
        try:
            return read_remote_model(m, max_header_bytes, traffic, deadline)
        except (RemoteError, GGUFError, BadInputError) as err:
            return str(err)

    with ThreadPoolExecutor(max_workers=min(max(len(models), 1), MAX_CONCURRENT)) as pool:
        return list(pool.map(one, models))
