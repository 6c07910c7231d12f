"""Question: do REPAIR's recomputed row blocks keep their other rows' bits? (D03)

Do the other rows of a row block that the causal forward's REPAIR launch recomputed keep their
bits? Prints the largest difference per case (float32 split-K: 1 ulp, docs/decisions.md#D03).

    python3 ablations/probes/repair_bits_probe.py      (on a GPU, from the repository root)
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from kernels import Variant, flash_attention  # noqa: E402

FA1 = Variant(False, False, False)
CASES = [(FA1, torch.float32, 16), (FA1, torch.float32, 64), (FA1, torch.bfloat16, 16),
         (FA1, torch.bfloat16, 64), (Variant(True, True, False), torch.float32, 16)]

for variant, dtype, d in CASES:
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 45, d, generator=gen).to("cuda", dtype) for _ in range(3))
    clean = flash_attention(q, k, v, causal=True, variant=variant)
    q[0, 1, 5] = float("nan")  # flags the row block holding row 5 of head 1
    flagged = flash_attention(q, k, v, causal=True, variant=variant)
    diff = (flagged.float() - clean.float()).abs()
    diff[0, 1, 5] = 0
    rows = (diff.amax(-1) > 0).nonzero().tolist()
    print(f"{str(variant):22s} {str(dtype):15s} d={d}: equal={bool((diff == 0).all())} "
          f"maxdiff={diff.max().item():.3g} rows_differing={rows[:12]}", flush=True)
