"""Where ggprof keeps files on the user's machine (platformdirs; each overridable)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def cache_dir() -> Path:
    """Host measurements and synthetic models. GGPROF_CACHE_DIR overrides."""
    return Path(os.environ.get("GGPROF_CACHE_DIR") or platformdirs.user_cache_dir("ggprof"))


def config_dir() -> Path:
    """User hardware profiles live in <config_dir>/profiles. GGPROF_CONFIG_DIR overrides."""
    return Path(os.environ.get("GGPROF_CONFIG_DIR") or platformdirs.user_config_dir("ggprof"))
