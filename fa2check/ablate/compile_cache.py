"""Which precompile jobs Triton's on-disk cache already holds, so that a second run starts no
worker for them (the main process loads those kernels from the cache on first use).

An index file in Triton's cache directory lists the jobs (tuning.job_key) that compiled there,
under a stamp of what else decides the compiled code: the kernels' sha256, triton and torch
versions, the GPU. Clearing the cache directory clears the index with it."""
from __future__ import annotations

import json
import os

INDEX = "fa2check-precompiled.json"


def cache_dir() -> str:
    try:
        from triton import knobs

        return knobs.cache.dir
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_CACHE_DIR",
                              os.path.join(os.path.expanduser("~"), ".triton", "cache"))


def stamp() -> str:
    import torch
    import triton

    from ..core.environment import kernels_sha256

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return f"{kernels_sha256()[:16]} triton {triton.__version__} torch {torch.__version__} {gpu}"


def _read(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def cached(keys, directory: str | None = None) -> set:
    """The keys (tuning.job_key tuples) listed as compiled under today's stamp."""
    listed = set(_read(os.path.join(directory or cache_dir(), INDEX)).get(stamp(), []))
    return {k for k in keys if repr(k) in listed}


def remember(keys, directory: str | None = None):
    """Add keys that compiled to the index (other stamps' lists are dropped: stale)."""
    directory = directory or cache_dir()
    path = os.path.join(directory, INDEX)
    current = stamp()
    listed = set(_read(path).get(current, [])) | {repr(k) for k in keys}
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({current: sorted(listed)}, f)
    os.replace(tmp, path)
