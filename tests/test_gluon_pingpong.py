"""ablations/probes/gluon_pingpong.py (the FlashAttention-3-style Gluon forward, an
experiment) still compiles for sm_90 with Triton's Gluon as installed: warp-specialised
(setmaxnreg), wgmma, no register spills. Triton's interpreter cannot run Gluon, so this is all
the CPU can check; its results are checked against the oracle on the GPU (`--check`,
docs/decisions.md#D43)."""

import pytest

from compile_cli import run_probe

PROBE = """
import json, sys
sys.path.insert(0, "ablations/probes")
import gluon_pingpong
print(json.dumps(gluon_pingpong.compile_report(head_dim={d}, block_n=128, consumers={c})))
"""


@pytest.mark.parametrize("head_dim,consumers", [(64, 2), (64, 3)])
def test_pingpong_compiles_warp_specialised_without_spills(head_dim, consumers):
    usage = run_probe(PROBE.format(d=head_dim, c=consumers))
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert usage["setmaxnreg"] > 0 and usage["wgmma"] > 0, usage
    assert usage["registers"] <= 65536 // (32 * 4 * (consumers + 1)), usage  # one program an SM
