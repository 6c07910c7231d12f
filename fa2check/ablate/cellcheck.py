"""The correctness gate of the ablation: before a cell is timed, every contender's output *in
that cell* is judged against the float64 oracle with the pass rule (fa2check.core.passrule).

A float64 oracle of a whole 16k x 16k cell would need 8.6G scores per 32 heads, so the gate
runs each contender on the full cell and compares slices of its outputs with an oracle of the
same slice. A slice is one batch entry and one kv head with its whole group of query heads,
all rows and all keys: its o, lse and dQ rows depend only on those query heads, and its dK and
dV only on them too (a kv head's gradient sums over its own group), so the oracle of the
sliced inputs is exactly the oracle of those outputs. Two slices are checked: (batch 0, kv head
0) and (last batch, last kv head), so a wrong batch or head offset shows. Every output of the
full cell must also be finite (for seqlen_q == seqlen_k every row sees a key, so the oracle has
no non-finite value there).

Outputs: o, and lse for our kernels (SDPA does not return it); with a backward, dq, dk and dv
from `torch.autograd.grad(o, (q, k, v), dO)`, the call that is timed. The oracle's gradients
come from float64 leaves, so they are not rounded to the input dtype. The same-dtype PyTorch
composition that sets the rule's scale is computed on the same slice.
"""
from __future__ import annotations

import time

import torch

from ..core.oracle import reference, same_dtype_attention
from ..core.passrule import check_output


def gate_slices(cell) -> list[tuple[int, int]]:
    """(batch, kv head) pairs whose outputs are compared with the oracle."""
    return sorted({(0, 0), (cell.batch - 1, cell.heads_kv - 1)})


def _slice(cell, inputs, b: int, hk: int):
    q, k, v, do = inputs
    group = cell.heads_q // cell.heads_kv
    heads = slice(hk * group, (hk + 1) * group)
    return (q[b:b + 1, heads], k[b:b + 1, hk:hk + 1], v[b:b + 1, hk:hk + 1], do[b:b + 1, heads]), heads


def _outputs(fn, q, k, v, do, backward: bool) -> dict:
    leaves = tuple(t.detach().requires_grad_(backward) for t in (q, k, v))
    o, lse = fn(*leaves)
    out = {"o": o.detach(), "lse": None if lse is None else lse.detach()}
    if backward:
        out["dq"], out["dk"], out["dv"] = (g.detach() for g in torch.autograd.grad(o, leaves, do))
    return out


class CellOracle:
    """Oracle and same-dtype baseline outputs of a cell's slices, computed once per cell."""

    def __init__(self, cell, inputs, backward: bool):
        self.cell, self.backward = cell, backward
        self.slices = []
        for b, hk in gate_slices(cell):
            (q, k, v, do), heads = _slice(cell, inputs, b, hk)
            oracle = _outputs(lambda q, k, v: reference(q, k, v, causal=cell.causal),
                              q.double(), k.double(), v.double(), do.double(), backward)
            baseline = _outputs(lambda q, k, v: same_dtype_attention(q, k, v, causal=cell.causal),
                                q, k, v, do, backward)
            self.slices.append(((b, hk, heads), oracle, baseline))

    def judge(self, full: dict) -> list[dict]:
        """Pass-rule checks of a contender's full-cell outputs on every slice."""
        checks = []
        for (b, hk, heads), oracle, baseline in self.slices:
            for name in ("o", "lse", "dq", "dk", "dv"):
                if full.get(name) is None or name not in oracle:
                    continue
                rows = full[name][b:b + 1]
                rows = rows[:, hk:hk + 1] if name in ("dk", "dv") else rows[:, heads]
                dtype = torch.float32 if name == "lse" else self.cell.torch_dtype
                check = check_output(name, rows, oracle[name], baseline[name], dtype)
                checks.append({**check.as_dict(), "batch": b, "kv_head": hk})
        return checks


def gate(contender, cell, inputs, oracle: CellOracle) -> dict:
    """{"passed", "finite", "worst_ratio", "checks", "error", "seconds"} for one contender in
    one cell (seconds: its run and checks, compiling included where it was not precompiled)."""
    t0 = time.perf_counter()
    result = _gate(contender, cell, inputs, oracle)
    return {**result, "seconds": time.perf_counter() - t0}


def _gate(contender, cell, inputs, oracle: CellOracle) -> dict:
    q, k, v, do = inputs
    try:
        with contender.context():
            full = _outputs(lambda q, k, v: contender.forward(q, k, v, cell.causal, return_lse=True),
                            q, k, v, do, oracle.backward)
        checks = oracle.judge(full)
    except Exception as e:  # noqa: BLE001 - a contender that cannot run this cell fails it
        return {"passed": False, "finite": None, "worst_ratio": None, "checks": [],
                "error": f"{type(e).__name__}: {e}"[:500]}
    finite = all(bool(torch.isfinite(t).all()) for t in full.values() if t is not None)
    ratios = [c["ratio"] for c in checks]
    return {"passed": finite and all(c["passed"] for c in checks), "finite": finite,
            "worst_ratio": max(ratios) if ratios else None, "checks": checks, "error": None}
