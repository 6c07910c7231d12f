"""JSON files every front end reads and writes: a report written, and a results file read whether
it is plain or gzip-compressed (older ablation results are committed as .json.gz)."""
from __future__ import annotations

import gzip
import json
import os


def resolve(path) -> str:
    """path, or its compressed copy path + ".gz" when only that exists (older results files
    are committed gzip-compressed, under the name they were written with plus .gz)."""
    path = os.fspath(path)
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        return path + ".gz"
    return path


def read_json(path):
    """The JSON at path, or at its compressed copy (see resolve)."""
    path = resolve(path)
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        return json.load(f)


def write_json(path: str, report: dict):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1, allow_nan=True, default=str)
