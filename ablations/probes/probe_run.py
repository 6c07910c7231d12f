"""What hopper_split.py and fa1_schedule.py share: a run's provenance (fa2check's own), the
median time of a call and the matmul rate of the same GPU (fa2check's do_bench wrapper), a
cell's inputs (fa2check's), and the header line of a rendered run."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.ablate.contenders import make_inputs  # noqa: E402
from fa2check.ablate.timing import bench, matmul_samples, summary, tflops  # noqa: E402
from fa2check.core.environment import describe_environment  # noqa: E402

WARMUP_MS, REP_MS = 25, 120


def provenance(commit=None) -> dict:
    """fa2check's description of the device, versions and code, and the command."""
    return dict(describe_environment("cuda", commit=commit), command=" ".join(sys.argv))


def time_ms(fn) -> float:
    """Median milliseconds of fn (the benchmark's timer: L2 flushed, the host ahead, D99)."""
    return summary(bench(fn, device="cuda", warmup_ms=WARMUP_MS, rep_ms=REP_MS).samples)["median"]


def matmul_tflops() -> float:
    samples, flops = matmul_samples(torch.bfloat16, device="cuda", warmup_ms=WARMUP_MS,
                                    rep_ms=REP_MS)
    return tflops(flops, summary(samples)["median"])


def cell_inputs(cell):
    """q, k, v of a cell (fa2check.ablate's seeded inputs)."""
    return make_inputs(cell, "cuda")[:3]


def header(data) -> str:
    """Where, when and how a saved run was measured (runs saved before this module wrote
    their commit as `commit`)."""
    prov = data["provenance"]
    commit = prov.get("git_commit", prov.get("commit"))
    return (f"Measured on {prov['gpu']}, torch {prov['torch']}, triton {prov['triton']}, git "
            f"{commit}, {prov['date']}; `{prov['command']}`; bf16 matmul "
            f"{data['matmul_tflops']:.0f} TFLOP/s in the same run.")
