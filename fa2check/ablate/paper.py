"""Published figures the ablation shows beside its own, read from ablations/paper/ (each file
states what it is and where it comes from): the FlashAttention-2 paper's forward + backward
speeds of FA1 and FA2 on the A100 (its figure 4), beside FA2 / FA1-style by seqlen; and
FlashAttention-3's pipelining ablation on the H100, as the labelled reference of the Hopper
switches' game (docs/decisions.md D66)."""
from __future__ import annotations

import functools
import json
import os

from ..core.environment import ROOT

FA3_H100_FWD = os.path.join(ROOT, "ablations", "paper", "fa3-h100-fwd.json")
FA2_A100_FWDBWD = os.path.join(ROOT, "ablations", "paper", "fa2-a100-fwdbwd.json")


@functools.lru_cache(maxsize=None)
def fa2_a100_speedups(path: str = FA2_A100_FWDBWD) -> dict:
    """FA2 / FA1 on the A100, forward + backward, from the FA2 paper's figure 4: {(head_dim,
    causal): {seqlen: factor}}, only where both bar labels are legible."""
    with open(path) as f:
        data = json.load(f)
    out = {}
    for name, bars in data["cells"].items():
        dims, mask = name.split("-")
        out[(int(dims[1:]), mask == "causal")] = {
            seqlen: fa2 / fa1 for seqlen, fa1, fa2 in zip(data["seqlens"], bars["fa1"], bars["fa2"])
            if fa1 and fa2}
    return out


@functools.lru_cache(maxsize=None)
def fa3_reference(path: str = FA3_H100_FWD) -> dict:
    """The FA3 file, with "removed" added: per switch of ours, FA3's all-on TFLOP/s over its
    TFLOP/s without the technique that switch maps to (what all-on loses without it)."""
    with open(path) as f:
        data = json.load(f)
    data["removed"] = {switch: data["all_on_tflops"] / row["tflops"]
                       for switch, row in data["without"].items()}
    return data
