"""A local HTTP server standing in for Hugging Face, an Ollama registry and a plain file server:
real GGUF files served with range support, the part of the Hub's API that huggingface_hub calls
(`/api/models/ORG/REPO[/revision/REV]`, `/ORG/REPO/resolve/REV/FILE` redirected to a CDN path),
and the registry's manifests and blobs (`/v2/NS/MODEL/manifests/TAG`, `/blobs/DIGEST`). It counts
the requests and bytes it served, can add latency to every answer, and can misbehave on
purpose (ignore ranges, lie about sizes, stall, send more than asked, close mid-answer, answer
each range with one byte; a listing that names files outside its repository, runs to many
megabytes, is a gzip bomb, lists too many files or never comes). It speaks plain HTTP, or TLS
with a certificate of its own (`tls_pair`: trust it with SSL_CERT_FILE).

The Hub's answers follow what huggingface.co answers (docs: huggingface.co/docs/hub/api, the
`ModelInfo` fields huggingface_hub reads: `id`, `sha`, `siblings` with `rfilename` and `size`;
`X-Error-Code: GatedRepo` / `RepoNotFound` on errors, as hf_raise_for_status reads them).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import ssl
import subprocess
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Repo:
    files: dict[str, Path]  # name in the repository -> file on disk
    gated: bool = False
    commit: str = COMMIT
    names: tuple[str, ...] = ()  # more names its listing gives (files it does not serve)
    listing: str = ""  # how its listing misbehaves: huge, gzip-bomb, many-files, stall


def tls_pair(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, and its key (openssl's CLI)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)),
            *("-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@dataclass
class Served:
    requests: int = 0
    bytes: int = 0
    paths: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, path: str, n: int, headers: dict[str, str]) -> None:
        with self.lock:
            self.requests += 1
            self.bytes += n
            self.paths.append(path)
            self.headers.append(headers)

    def reset(self) -> None:
        with self.lock:
            self.requests, self.bytes = 0, 0
            self.paths.clear()
            self.headers.clear()


class _Quiet(ThreadingHTTPServer):
    tls: ssl.SSLContext | None = None  # TLS and plain HTTP on the one port: each connection's first byte says which

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up on purpose is no news (and stderr is the test's to read)

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            return super().finish_request(request, client_address)
        request.settimeout(10)
        try:
            if request.recv(1, socket.MSG_PEEK) == b"\x16":  # a TLS handshake's record type; else plain HTTP
                with self.tls.wrap_socket(request, server_side=True) as secure:  # closed here: it took the socket over
                    return super().finish_request(secure, client_address)
        except OSError:
            return None
        return super().finish_request(request, client_address)


class HubServer:
    def __init__(self, latency_s: float = 0.0, tls: tuple[Path, Path] | None = None) -> None:
        self.repos: dict[str, Repo] = {}
        self.plain: dict[str, Path] = {}  # /files/NAME
        self.ollama: dict[str, Path] = {}  # "NS/MODEL:TAG" -> the model blob's file
        self.latency_s = latency_s
        self.misbehave: dict[str, str] = {}  # file name -> how
        self.cdn_host: str | None = None  # redirect downloads to this host name (another host than the API's)
        self.cdn_url: str | None = None  # redirect downloads to this origin (another port or scheme)
        self.digests: dict[Path, str] = {}  # a blob's digest: its bytes' sha256, or what a test says it is
        self.state_digests = True  # a blob's answer states its digest (Docker-Content-Digest), as the spec says
        self.stopped = threading.Event()  # set when the server stops: a stalled answer ends then
        self.served = Served()
        server = _Quiet(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self.scheme = "http"
        if tls is not None:  # TLS, and plain HTTP on the same port (each connection's first byte says which)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            server.tls = context
            self.scheme = "https"
        self.server = server
        self.port = server.server_address[1]
        self.url = f"{self.scheme}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def digest(self, path: Path) -> str:
        """The blob's digest, as a registry names it: the sha256 of its bytes (computed once)."""
        if path not in self.digests:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
            self.digests[path] = "sha256:" + h.hexdigest()
        return self.digests[path]


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            if hub.latency_s and hub.stopped.wait(hub.latency_s):
                return
            path = self.path.split("?", 1)[0]
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
                return self.model_info(m[1], m[2])
            if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                repo = hub.repos.get(m[1])
                if repo is None or m[3] not in repo.files:
                    return self.error(404, "EntryNotFound" if repo else "RepoNotFound")
                if repo.gated and "authorization" not in {k.lower() for k in self.headers}:
                    return self.error(401, "GatedRepo")
                how = hub.misbehave.get(m[3], "")
                if how == "redirect-file":
                    return self.redirect("file:///etc/passwd")
                if how == "redirect-loop":
                    return self.redirect(path)
                cdn = f"{hub.scheme}://{hub.cdn_host}:{hub.server.server_address[1]}" if hub.cdn_host else ""
                cdn = hub.cdn_url or cdn
                # the Hub's resolve answer states the commit it resolved (huggingface_hub reads it)
                return self.redirect(f"{cdn}/cdn/{m[1]}/{repo.commit}/{m[3]}", {"X-Repo-Commit": repo.commit})
            if m := re.fullmatch(r"/cdn/([^/]+/[^/]+)/([0-9a-f]+)/(.+)", path):
                repo = hub.repos.get(m[1])
                if repo is None or m[3] not in repo.files:
                    return self.error(404, "EntryNotFound")
                return self.file(repo.files[m[3]], m[3], head)
            if m := re.fullmatch(r"/files/(.+)", path):
                if m[1] not in hub.plain:
                    return self.error(404, "EntryNotFound")
                return self.file(hub.plain[m[1]], m[1], head)
            if m := re.fullmatch(r"/v2/([^/]+)/([^/]+)/manifests/([^/]+)", path):
                return self.manifest(f"{m[1]}/{m[2]}:{m[3]}")
            if m := re.fullmatch(r"/v2/([^/]+)/([^/]+)/blobs/(sha256:[0-9a-f]{64})", path):
                blob = next((p for p in hub.ollama.values() if hub.digest(p) == m[3]), None)
                if blob is None:
                    return self.error(404, "BlobUnknown")
                return self.redirect(f"/blobstore/{m[3]}", self.stated(blob))
            if m := re.fullmatch(r"/blobstore/(sha256:[0-9a-f]{64})", path):
                blob = next((p for p in hub.ollama.values() if hub.digest(p) == m[1]), None)
                if blob is None:
                    return self.error(404, "BlobUnknown")
                return self.file(blob, blob.name, head, self.stated(blob))
            return self.error(404, "NotFound")

        # -- answers --------------------------------------------------------------------------
        def json(self, obj: object, status: int = 200) -> None:
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            hub.served.add(self.path, len(body), self.seen())

        def error(self, status: int, code: str) -> None:
            body = json.dumps({"error": code}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            hub.served.add(self.path, len(body), self.seen())

        def stated(self, blob: Path) -> dict[str, str]:
            return {"Docker-Content-Digest": hub.digest(blob)} if hub.state_digests else {}

        def redirect(self, location: str, extra: dict[str, str] | None = None) -> None:
            self.send_response(302)
            self.send_header("Location", location)
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
            hub.served.add(self.path, 0, self.seen())

        def model_info(self, repo_id: str, revision: str | None) -> None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self.error(401, "RepoNotFound")  # the Hub answers 401 for a missing or private repo
            if revision not in (None, "main", repo.commit):
                return self.error(404, "RevisionNotFound")
            if repo.gated and "authorization" not in {k.lower() for k in self.headers}:
                return self.error(401, "GatedRepo")
            if repo.listing:
                return self.bad_listing(repo)
            siblings = [{"rfilename": n, "size": p.stat().st_size} for n, p in sorted(repo.files.items())]
            siblings += [{"rfilename": n, "size": 1 << 20} for n in repo.names]
            self.json({"id": repo_id, "sha": repo.commit, "private": False, "gated": repo.gated, "siblings": siblings})

        def bad_listing(self, repo: Repo) -> None:
            """A listing past every bound: 256 MiB of JSON sent (huge), 1 MiB of gzip that is 256
            MiB once decompressed (gzip-bomb), 20,001 files (many-files), or no answer (stall)."""
            if repo.listing == "stall":
                hub.stopped.wait()
                return
            if repo.listing == "many-files":
                return self.json({"sha": repo.commit, "siblings": [{"rfilename": f"f{i}.gguf"} for i in range(20_001)]})
            head, entry = b'{"sha": "%s", "siblings": [' % repo.commit.encode(), b'{"rfilename": "x.gguf"},' * 4096
            body: list[bytes] | bytes = [head] + [entry] * ((256 << 20) // len(entry))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if repo.listing == "gzip-bomb":
                body = _bomb()
                self.send_header("Content-Encoding", "gzip")
            length = len(body) if isinstance(body, bytes) else sum(len(b) for b in body)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            sent = 0
            try:
                for chunk in [body] if isinstance(body, bytes) else body:
                    self.wfile.write(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the client stopped reading at its cap
            hub.served.add(self.path, sent, dict(self.headers))

        def manifest(self, key: str) -> None:
            blob = hub.ollama.get(key)
            if blob is None:
                return self.error(404, "MANIFEST_UNKNOWN")
            self.json(
                {
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {
                        "mediaType": "application/vnd.docker.container.image.v1+json",
                        "digest": "sha256:" + "0" * 64,
                        "size": 2,
                    },
                    "layers": [
                        {
                            "mediaType": "application/vnd.ollama.image.license",
                            "digest": "sha256:" + "1" * 64,
                            "size": 10,
                        },
                        {
                            "mediaType": "application/vnd.ollama.image.model",
                            "digest": hub.digest(blob),
                            "size": blob.stat().st_size,
                        },
                    ],
                }
            )

        def file(self, disk: Path, name: str, head: bool, extra: dict[str, str] | None = None) -> None:
            size = disk.stat().st_size
            how = hub.misbehave.get(name, "")
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if how == "stall":
                hub.stopped.wait()  # no answer until the server stops
            if m is None or how == "ignore-ranges":
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.send_header("ETag", f'"{hub.digest(disk)[7:23]}"')
                self.end_headers()
                if not head:
                    self.stream(disk, 0, size)
                return
            start, end = int(m[1]), min(int(m[2]) if m[2] else size - 1, size - 1)
            if how == "one-byte":  # every range answered with its first byte only: a valid, short answer
                end = start
            claimed = size * 2 if how == "lie-size" else size
            self.send_response(206)
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Range", f"bytes {start}-{end}/{claimed}")
            length = end - start + 1
            self.send_header("Content-Length", str(length * 2 if how == "send-more" else length))
            self.send_header("ETag", f'"{hub.digest(disk)[7:23]}"')
            self.end_headers()
            if head:
                return
            if how == "close-mid":
                self.stream(disk, start, length // 2)
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if how == "drip":
                for i in range(length):
                    self.wfile.write(disk.read_bytes()[start + i : start + i + 1] if i < 1 else b"\0")
                    self.wfile.flush()
                    if hub.stopped.wait(0.05):  # a byte each 50 ms, far within a read's timeout
                        return
                return
            self.stream(disk, start, length * 2 if how == "send-more" else length)

        def seen(self) -> dict[str, str]:
            """The request's headers, names in lower case, and the scheme it came over (`:scheme`)."""
            return {":scheme": "https" if isinstance(self.connection, ssl.SSLSocket) else "http"} | {
                k.lower(): v for k, v in self.headers.items()
            }

        def stream(self, disk: Path, start: int, length: int) -> None:
            sent = 0
            try:
                with open(disk, "rb") as f:
                    f.seek(start)
                    while sent < length:
                        chunk = f.read(min(1 << 20, length - sent)) or b"\0" * min(1 << 20, length - sent)
                        self.wfile.write(chunk)
                        sent += len(chunk)
            except OSError:
                pass
            finally:
                hub.served.add(self.path, sent, self.seen())

    return Handler


_BOMBS: dict[str, bytes] = {}


def _bomb() -> bytes:
    """256 MiB of spaces, gzipped: about 256 KB (made once)."""
    if "b" not in _BOMBS:
        z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        spaces = b" " * (1 << 20)
        _BOMBS["b"] = b"".join([z.compress(spaces) for _ in range(256)] + [z.flush()])
    return _BOMBS["b"]
