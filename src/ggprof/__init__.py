"""ggprof: how fast should this GGUF model run here, how fast does it run, and is that believable."""

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("ggprof")
