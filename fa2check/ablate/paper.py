"""Published figures the ablation shows beside its own, read from ablations/paper/ (each file
states what it is and where it comes from): FlashAttention-3's pipelining ablation on the H100,
as the labelled reference of the Hopper switches' game (docs/decisions.md D66)."""
from __future__ import annotations

import functools
import json
import os

from ..core.environment import ROOT

FA3_H100_FWD = os.path.join(ROOT, "ablations", "paper", "fa3-h100-fwd.json")


@functools.lru_cache(maxsize=None)
def fa3_reference(path: str = FA3_H100_FWD) -> dict:
    """The FA3 file, with "removed" added: per switch of ours, FA3's all-on TFLOP/s over its
    TFLOP/s without the technique that switch maps to (what all-on loses without it)."""
    with open(path) as f:
        data = json.load(f)
    data["removed"] = {switch: data["all_on_tflops"] / row["tflops"]
                       for switch, row in data["without"].items()}
    return data
