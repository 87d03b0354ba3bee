"""A Hugging Face repository's file listing, read by ggprof's own bounded reader.

The listing is what `HfApi.model_info(files_metadata=True)` asks for (`/api/models/ORG/REPO
[/revision/REV]?blobs=true`), but huggingface_hub reads the whole answer into memory (a 300 MB
listing took 1.49 GB), decompresses it without a bound (a gzip bomb ended in JSONDecodeError)
and bounds each read, not the listing. Here it is read as a remote header's ranges are
(ggprof.netio): one whole deadline over connecting, redirects, headers and body; a cap on the
bytes sent and another on what they decompress to; JSON parsed only when its items are
bounded; at most MAX_REPO_FILES files. Every name is checked before any file is asked for: a
name outside the repository (`../`, an absolute path, a backslash) refuses the listing, as it
would send the request, and the token, elsewhere. huggingface_hub still gives what it does
well (ggprof.model.hub): the endpoint, the token and offline mode.
"""

from __future__ import annotations

import urllib.parse
import zlib
from dataclasses import dataclass
from typing import Any

from ggprof.bounded import TooManyItems, loads_bounded
from ggprof.errors import RemoteError
from ggprof.model.ranges import (
    MAX_ANSWER_HEADER_BYTES,
    MAX_REDIRECTS,
    READ_TIMEOUT_S,
    REDIRECTS,
    connect,
    exchange,
    late,
    next_hop,
    origin,
    target,
)
from ggprof.netio import Budget, Deadline
from ggprof.units import clean_name

MAX_LISTING_BYTES = 16 << 20  # as sent, compressed or not: 20,000 files with their sizes are about 5 MB
MAX_LISTING_DECODED_BYTES = 32 << 20  # what a gzip answer decompresses to
MAX_LISTING_ITEMS = 1_000_000  # JSON items parsed (a file is about 10; a popular repo lists its Spaces too)
MAX_REPO_FILES = 20_000
MAX_NAME_BYTES = 1000  # a file's path in the repository


@dataclass(frozen=True)
class Listing:
    commit: str | None  # the commit the listing names, None when it names none
    sizes: dict[str, int | None]  # each file's path in the repository, and its size where stated


def hf_listing(endpoint: str, repo: str, revision: str | None, headers: dict[str, str], deadline: Deadline) -> Listing:
    """The files of `repo` at `revision` on the Hub at `endpoint`; RemoteError (one line) for a
    repository that cannot be listed, an answer past a bound, or a name outside the repository."""
    where = f"hf://{repo}: the listing"
    path = f"/api/models/{repo}" + (f"/revision/{urllib.parse.quote(revision, safe='')}" if revision else "")
    try:
        status, answer = _get(f"{endpoint}{path}?blobs=true", headers, deadline, where)
    except RemoteError:
        if deadline.passed():
            raise late(where, deadline) from None
        raise
    if status != 200:
        raise _refused(repo, revision, status, answer)
    try:
        data = loads_bounded(answer.body, MAX_LISTING_ITEMS)
    except TooManyItems:
        raise RemoteError(f"{where} holds more than {MAX_LISTING_ITEMS:,} JSON items; not parsed") from None
    except (ValueError, RecursionError):
        raise RemoteError(f"{where} is not the JSON the Hub sends") from None
    return _files(data, repo, where)


@dataclass(frozen=True)
class _Answer:
    body: bytes
    error_code: str  # the Hub's X-Error-Code


def _get(url: str, headers: dict[str, str], deadline: Deadline, where: str) -> tuple[int, _Answer]:
    """GET `url`, following redirects (the token only to its own origin: ranges.next_hop), within
    `deadline` as a whole."""
    first = origin(url)
    sent = {**headers, "Accept-Encoding": "gzip"}
    for _ in range(MAX_REDIRECTS + 1):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise RemoteError(f"{where}: not an http(s) URL")
        if deadline.passed():
            raise late(where, deadline)
        # the socket's bound sits past the body's (a buffered read may fetch ahead of what it
        # returns): an answer over MAX_LISTING_BYTES is told by its length, whatever the chunks
        budget = Budget(deadline.at, READ_TIMEOUT_S, MAX_LISTING_BYTES + MAX_ANSWER_HEADER_BYTES + READ_AHEAD_BYTES)
        conn = connect(u, budget)
        with exchange(conn, budget, where):
            conn.request("GET", target(u), headers=sent)
            resp = conn.getresponse()
            if resp.status in REDIRECTS and resp.getheader("Location"):
                url, sent = next_hop(url, resp.getheader("Location") or "", first, sent, where)
                continue
            encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
            raw = resp.read(MAX_LISTING_BYTES + 1)
        if len(raw) > MAX_LISTING_BYTES:
            raise RemoteError(f"{where}: an answer larger than {MAX_LISTING_BYTES >> 20} MiB; not read further")
        return resp.status, _Answer(_decoded(raw, encoding, where), resp.getheader("X-Error-Code") or "")
    raise RemoteError(f"{where}: more than {MAX_REDIRECTS} redirects")


READ_AHEAD_BYTES = 1 << 20  # more than any buffered read fetches ahead of what it returns


def _decoded(raw: bytes, encoding: str, where: str) -> bytes:
    """The body as sent without its Content-Encoding (gzip, as asked for), decompressed no
    further than MAX_LISTING_DECODED_BYTES (a bomb of a few MB decompresses to gigabytes)."""
    if encoding in ("identity", ""):
        return raw
    if encoding not in ("gzip", "x-gzip"):
        raise RemoteError(f"{where}: an answer in {clean_name(encoding, 20)!r} encoding, which was not asked for")
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(raw, MAX_LISTING_DECODED_BYTES + 1)
    except zlib.error:
        raise RemoteError(f"{where}: an answer that is not the gzip it claims") from None
    if len(out) > MAX_LISTING_DECODED_BYTES or d.unconsumed_tail:
        raise RemoteError(f"{where}: an answer that decompresses to more than {MAX_LISTING_DECODED_BYTES >> 20} MiB")
    return out


def _refused(repo: str, revision: str | None, status: int, answer: _Answer) -> RemoteError:
    """An answer other than 200, in words (the Hub names its errors in X-Error-Code, as
    huggingface_hub reads them; it answers 401 for a private or missing repository)."""
    code = answer.error_code
    if code == "GatedRepo":
        return RemoteError(
            f"hf://{repo} is gated: accept its terms on its page, and log in (HF_TOKEN or `hf auth login`)"
        )
    if code == "RevisionNotFound":
        return RemoteError(f"hf://{repo}: no revision {clean_name(revision, 40)!r}")
    if code == "RepoNotFound" or status in (401, 404):
        return RemoteError(
            f"hf://{repo}: no such repository, or a private one (it needs a token: HF_TOKEN or `hf auth login`)"
        )
    return RemoteError(f"hf://{repo}: the Hub answered HTTP {status}")


def _files(data: Any, repo: str, where: str) -> Listing:
    siblings = data.get("siblings") if isinstance(data, dict) else None
    if not isinstance(siblings, list):
        raise RemoteError(f"{where} names no files (no siblings)")
    if len(siblings) > MAX_REPO_FILES:
        raise RemoteError(f"{where} names {len(siblings):,} files, more than {MAX_REPO_FILES:,}; not read")
    sizes: dict[str, int | None] = {}
    for s in siblings:
        name = s.get("rfilename") if isinstance(s, dict) else None
        if not isinstance(name, str):
            continue
        if not inside(name):
            raise RemoteError(
                f"hf://{repo}: the listing names a file outside the repository ({clean_name(name, 80)!r}); "
                "nothing is read"
            )
        size = s.get("size")
        sizes[name] = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
    commit = data.get("sha")
    return Listing(commit if isinstance(commit, str) else None, sizes)


def inside(name: str) -> bool:
    """Whether `name` is a path inside a repository: relative, of plain parts (no `..`, `.` or
    empty one), no backslash or control character, of a bounded length."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES or not name.isprintable():
        return False
    if name.startswith("/") or "\\" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))
