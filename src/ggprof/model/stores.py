"""Where GGUF models live on a desktop, and how to find them: Ollama's store, LM Studio's
models folder, the Hugging Face hub cache, llama.cpp's cache, or any folder.

Only file names, directory entries and small JSON manifests are read here; model headers
are read by the caller. A scan never leaves the folder it scans: a link is followed only to a
regular file inside it; every file not used is listed as skipped with the reason, and every
walk is bounded.

Default locations (each overridable by the tool's own environment variable):
- Ollama (docs/faq.md in ollama/ollama): `OLLAMA_MODELS`, else `~/.ollama/models`
  (macOS, Windows, a user install on Linux) and `/usr/share/ollama/.ollama/models` (the
  Linux service). Manifests `manifests/<registry>/<namespace>/<model>/<tag>` name the
  layers; the GGUF is the `application/vnd.ollama.image.model` layer, stored as
  `blobs/sha256-<hex>`.
- LM Studio: `~/.lmstudio/models/<publisher>/<model>/*.gguf` (older versions:
  `~/.cache/lm-studio/models`).
- Hugging Face hub cache: `HF_HUB_CACHE`, else `$HF_HOME/hub`, else
  `~/.cache/huggingface/hub`; files under `models--<org>--<name>/snapshots/<revision>/`.
- llama.cpp's cache (`-hf` downloads): `LLAMA_CACHE`, else `$XDG_CACHE_HOME/llama.cpp`
  or `~/.cache/llama.cpp` (Linux), `~/Library/Caches/llama.cpp` (macOS),
  `%LOCALAPPDATA%\\llama.cpp` (Windows).
"""

from __future__ import annotations

import errno
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ggprof.errors import BadInputError
from ggprof.files import read_text
from ggprof.model.gguf import SPLIT_NAME
from ggprof.units import clean_name

if TYPE_CHECKING:
    from ggprof.model.hub import RemoteModel

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY = "registry.ollama.ai"
REMOTE_SCHEMES = ("hf://", "http://", "https://", "ollama://")  # models elsewhere (ggprof.model.hub)
MAX_ENTRIES = 200_000  # files and folders one scan looks at
MAX_DEPTH = 12
MAX_MANIFEST_BYTES = 1 << 20
_SHARD = re.compile(SPLIT_NAME.pattern, re.IGNORECASE)  # the stores' names may differ in case


def is_remote(text: str) -> bool:
    """A reference to a model elsewhere, read by ggprof.model.hub (kept here, where references
    are told apart, so that a local file's command never imports the network's modules)."""
    return text.startswith(REMOTE_SCHEMES)


@dataclass(frozen=True, kw_only=True)
class Location:
    """A place models live: which tool's, where, and whether it exists here."""

    store: str  # ollama, lm-studio, huggingface, llama.cpp, or "path" for one the user gave
    path: Path

    @property
    def exists(self) -> bool:
        return self.path.is_dir()


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A file that should be a GGUF model, with the name people know it by."""

    path: Path
    name: str
    store: str
    remote: RemoteModel | None = None  # a model elsewhere: its header is read by range requests


@dataclass(frozen=True, kw_only=True)
class Skipped:
    path: Path
    reason: str


def default_locations(env: dict[str, str] | None = None, home: Path | None = None) -> list[Location]:
    """The documented default places of each tool on this OS (environment variables first)."""
    env = dict(os.environ) if env is None else env
    home = home or Path(env.get("HOME") or env.get("USERPROFILE") or Path.home())
    out: list[Location] = []
    if env.get("OLLAMA_MODELS"):
        out.append(Location(store="ollama", path=Path(env["OLLAMA_MODELS"])))
    else:
        out.append(Location(store="ollama", path=home / ".ollama" / "models"))
        if sys.platform.startswith("linux"):
            out.append(Location(store="ollama", path=Path("/usr/share/ollama/.ollama/models")))
    out += [
        Location(store="lm-studio", path=home / ".lmstudio" / "models"),
        Location(store="lm-studio", path=home / ".cache" / "lm-studio" / "models"),
    ]
    if env.get("HF_HUB_CACHE"):
        hub = Path(env["HF_HUB_CACHE"])
    elif env.get("HF_HOME"):
        hub = Path(env["HF_HOME"]) / "hub"
    else:
        hub = Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "huggingface" / "hub"
    out.append(Location(store="huggingface", path=hub))
    out.append(Location(store="llama.cpp", path=llama_cpp_cache(env, home)))
    return out


def llama_cpp_cache(env: dict[str, str], home: Path) -> Path:
    if env.get("LLAMA_CACHE"):
        return Path(env["LLAMA_CACHE"])
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "llama.cpp"
    if sys.platform == "win32":
        return Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local") / "llama.cpp"
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "llama.cpp"


# -- scanning ---------------------------------------------------------------------------------
class Scan:
    """Candidates and skipped files found under some paths; a scan never aborts."""

    def __init__(self) -> None:
        self.candidates: list[Candidate] = []
        self.skipped: list[Skipped] = []
        self._seen: set[Path] = set()
        self._entries = 0

    def add(self, path: Path, name: str, store: str) -> None:
        try:
            key = path.resolve()
        except OSError:
            key = path
        if key not in self._seen:
            self._seen.add(key)
            self.candidates.append(Candidate(path=path, name=name, store=store))

    def skip(self, path: Path, reason: str) -> None:
        self.skipped.append(Skipped(path=path, reason=reason))

    def location(self, loc: Location) -> None:
        """A tool's place: Ollama through its manifests, the others as folders of GGUF files."""
        if loc.store == "ollama":
            self.ollama(loc.path)
        elif loc.store == "huggingface":
            self.folder(loc.path, loc.store, name_of=hf_name)
        else:
            self.folder(loc.path, loc.store)

    def path(self, path: Path) -> None:
        """A path the user gave: a file (whatever its name) or a folder, walked recursively."""
        if not os.path.lexists(path):
            self.skip(path, "no such file or folder")
        elif path.is_dir():
            if (path / "manifests").is_dir() and (path / "blobs").is_dir():
                self.ollama(path)
            else:
                self.folder(path, "path")
        else:
            self.add(path, model_name(path), "path")

    def folder(self, root: Path, store: str, name_of: object = None) -> None:
        # a folder the user names is theirs: its links to model files elsewhere (often into
        # Ollama's blobs) are followed; a store ggprof found by itself is never left
        for path in self.walk(root, stay_inside=store != "path"):
            if path.suffix.lower() != ".gguf":
                continue
            m = _SHARD.match(path.name)
            if m and int(m["no"]) != 1:
                continue  # a later shard: read with the first
            name = name_of(path) if callable(name_of) else model_name(path)
            self.add(path, name, store)

    def walk(self, root: Path, stay_inside: bool = True) -> Iterator[Path]:
        """Regular files under root. With `stay_inside` (a store) a link is followed only to a
        file inside root (Hugging Face's snapshots link into its blobs), else (a folder the user
        named) to a regular file anywhere; a link out of a store, a linked folder, a link loop
        (the kernel's bound on link chains), a FIFO, device or socket, and a folder past
        MAX_DEPTH are skipped, each with its reason."""
        boundary = _real(root) if stay_inside else None
        stack: list[tuple[Path, int]] = [(root, 0)]
        while stack:
            folder, depth = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except PermissionError:
                self.skip(folder, "permission denied: folder not readable")
                continue
            except OSError as e:
                self.skip(folder, f"cannot list folder: {e.strerror or e}")
                continue
            for entry in entries:
                self._entries += 1
                if self._entries > MAX_ENTRIES:
                    self.skip(folder, f"scan stopped after {MAX_ENTRIES:,} entries")
                    return
                path = Path(entry.path)
                try:
                    if entry.is_symlink():
                        why = _link_problem(path, boundary)
                        if why:
                            self.skip(path, why)
                        else:
                            yield path
                    elif entry.is_dir(follow_symlinks=False):
                        if depth < MAX_DEPTH:
                            stack.append((path, depth + 1))
                        else:
                            self.skip(path, f"more than {MAX_DEPTH} folders deep: not scanned")
                    elif entry.is_file(follow_symlinks=False):
                        yield path
                    else:
                        self.skip(path, f"not a regular file ({_kind(path)})")
                except OSError as e:
                    self.skip(path, f"cannot read: {e.strerror or e}")

    def ollama(self, root: Path) -> None:
        manifests = root / "manifests"
        for path in self.walk(manifests):
            parts = path.relative_to(manifests).parts
            if len(parts) != 4:
                continue  # registry/namespace/model/tag
            self.ollama_manifest(root, path, ollama_name(*parts))

    def ollama_manifest(self, root: Path, manifest: Path, name: str) -> None:
        try:
            blob = ollama_blob(root, manifest)
        except BadInputError as e:
            self.skip(manifest, str(e).split(": ", 1)[-1])
            return
        why = _blob_problem(root, blob)
        if why:
            self.skip(manifest, f"the manifest of {name} points to {why}")
            return
        self.add(blob, name, "ollama")


def _real(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return path


def _kind(path: Path) -> str:
    """What a path that is not a regular file is: a folder, a FIFO, a device, a socket."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "gone"
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file"


def _link_problem(path: Path, boundary: Path | None) -> str | None:
    """Why a link may not be used (None: it points at a regular file, inside the boundary where
    there is one)."""
    try:
        path.stat()
    except OSError as e:
        return "a link loop" if e.errno == errno.ELOOP else "a link that points nowhere"
    target = _real(path)
    if boundary is not None and not target.is_relative_to(boundary):
        return f"a link out of the store (to {clean_name(target, 120)}): not followed"
    if target.is_dir():
        return "a link to a folder: not followed"
    if not target.is_file():
        return f"a link to something that is not a regular file ({_kind(target)})"
    return None


def _blob_problem(root: Path, blob: Path) -> str | None:
    """Why an Ollama blob cannot be read as the model (None: a regular file inside the store)."""
    if not os.path.lexists(blob):
        return f"a missing blob ({blob.name})"
    if blob.is_symlink():
        why = _link_problem(blob, _real(root))
        return f"a blob that is {why}" if why else None
    if not blob.is_file():
        return f"a blob that is not a regular file ({_kind(blob)})"
    return None


def model_name(path: Path) -> str:
    """A file's model name: the file name without .gguf (and without a shard suffix)."""
    m = _SHARD.match(path.name)
    stem = m["prefix"] if m else path.name
    return stem[:-5] if stem.lower().endswith(".gguf") else stem


def hf_name(path: Path) -> str:
    """`org/name: file` for a file under models--org--name/snapshots/<rev>/."""
    for part in path.parts:
        if part.startswith("models--"):
            repo = part[len("models--") :].replace("--", "/")
            return f"{repo}: {model_name(path)}"
    return model_name(path)


def ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    base = model if namespace == "library" else f"{namespace}/{model}"
    prefix = "" if registry == OLLAMA_REGISTRY else f"{registry}/"
    return f"{prefix}{base}:{tag}"


def ollama_blob(root: Path, manifest: Path) -> Path:
    """The GGUF blob a manifest names (its model layer); BadInputError naming what is wrong."""
    text = read_text(manifest, MAX_MANIFEST_BYTES)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise BadInputError(f"{clean_name(manifest)}: not an Ollama manifest (not JSON)") from None
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise BadInputError(f"{clean_name(manifest)}: not an Ollama manifest (no layers)")
    for layer in layers:
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER:
            digest = layer.get("digest")
            if isinstance(digest, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                return root / "blobs" / digest.replace(":", "-")
            raise BadInputError(f"{clean_name(manifest)}: the model layer has no valid sha256 digest")
    raise BadInputError(f"{clean_name(manifest)}: no model layer (not a GGUF model: an adapter or an embedding?)")


# -- references: ollama:NAME[:TAG], LM Studio publisher/model ------------------------------------
def resolve_reference(text: str, env: dict[str, str] | None = None, home: Path | None = None) -> Path:
    """The file a model argument names: a path as given; `ollama:NAME[:TAG]` through Ollama's
    manifests; `publisher/model` in LM Studio's folder. BadInputError when it names nothing."""
    if text.startswith("ollama:"):
        return resolve_ollama(text[len("ollama:") :], env, home)
    if text.startswith("lm-studio:"):  # in LM Studio's folder only, never a path (a server names it)
        ref = text[len("lm-studio:") :]
        found = resolve_lm_studio(ref, env, home)
        if found is None:
            raise BadInputError(f"{clean_name(text, 80)}: no such model in LM Studio's folder")
        return found
    path = Path(text)
    if os.path.lexists(path) or text.lower().endswith(".gguf") or text.count("/") != 1:
        return path
    return resolve_lm_studio(text, env, home) or path


MAX_REFERENCE_CHARS = 400  # registry/namespace/model:tag; a longer one names no model
MAX_NAME_PART_BYTES = 255  # a file name's limit on Linux, macOS and Windows


def resolve_ollama(ref: str, env: dict[str, str] | None = None, home: Path | None = None) -> Path:
    if len(ref) > MAX_REFERENCE_CHARS:
        raise BadInputError(f"ollama:{clean_name(ref, 40)}...: longer than any Ollama model name")
    name, _, tag = ref.partition(":")
    if not name or not re.fullmatch(r"[\w.\-/]+", name) or ".." in name or not re.fullmatch(r"[\w.\-]*", tag):
        raise BadInputError(f"ollama:{clean_name(ref, 80)}: not an Ollama model name (NAME[:TAG])")
    if any(len(part.encode()) > MAX_NAME_PART_BYTES for part in (*name.split("/"), tag)):
        raise BadInputError(f"ollama:{clean_name(ref, 80)}: a part of the name longer than a file name can be")
    parts = name.split("/")
    registry = parts[0] if len(parts) == 3 else OLLAMA_REGISTRY
    namespace = parts[-2] if len(parts) >= 2 else "library"
    roots = [loc.path for loc in default_locations(env, home) if loc.store == "ollama"]
    for root in roots:
        manifest = root / "manifests" / registry / namespace / parts[-1] / (tag or "latest")
        if manifest.is_file():
            blob = ollama_blob(root, manifest)
            why = _blob_problem(root, blob)
            if why:
                raise BadInputError(f"ollama:{clean_name(ref, 80)}: the manifest points to {why}")
            return blob
    where = ", ".join(str(r) for r in roots)
    raise BadInputError(
        f"ollama:{clean_name(ref, 80)}: no such model in Ollama's store ({where}; OLLAMA_MODELS overrides)"
    )


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def resolve_lm_studio(ref: str, env: dict[str, str] | None = None, home: Path | None = None) -> Path | None:
    """`publisher/model` -> the GGUF in LM Studio's folder (the first shard, or the only file).
    Both parts plain names (no `..`, no absolute path, at most a file name's length): a name a
    server gives never reaches outside the folder."""
    parts = ref.split("/")
    plain = len(parts) == 2 and all(
        re.fullmatch(r"[\w][\w.\-]*", x) and len(x.encode()) <= MAX_NAME_PART_BYTES for x in parts
    )
    if not plain:
        return None
    for loc in default_locations(env, home):
        folder = loc.path / ref
        if loc.store != "lm-studio" or not folder.is_dir():
            continue
        if not _real(folder).is_relative_to(_real(loc.path)):
            out = f"a link out of {clean_name(loc.path)}"
            raise BadInputError(f"{clean_name(ref, 80)}: LM Studio's folder for it is {out}: not followed")
        scan = Scan()
        scan.folder(folder, "lm-studio")
        files = [c.path for c in scan.candidates if _is_gguf(c.path)]
        if len(files) == 1:
            return files[0]
        if files:
            names = ", ".join(p.name for p in files[:6])
            raise BadInputError(
                f"{clean_name(ref, 80)}: LM Studio has several files for this model ({names}): give one"
            )
    return None
