"""Question: did a change meant to leave the kernels alone change their compiled code? (issue 54)

The sm_90 PTX of the kernels of record, compiled on this machine (no GPU needed), each reduced
to a hash of its body: debug info (`.loc`, `.file`, the `.debug` sections) and parameter lists
stripped, so that moving code between files or renaming a host function leaves it equal.

    python ablations/probes/ptx_hashes.py before.json        # on the tree before the change
    python ablations/probes/ptx_hashes.py after.json         # ... and after it
    python ablations/probes/ptx_hashes.py --compare before.json after.json

The kernels: the Hopper chassis's forward and backward (FA2, FA1's design, FA1's split-Q
causal, FA3's switches; d=64 and 128 on 128-key tiles of two stages, and at their heuristic
tiles), the Triton forward's three launches (main, REPAIR, with o's residual), its backward,
and the Gluon forward, each at the tiles `default_config` gives it on a GPU (heuristic_config's:
the table of tuned tiles needs the sequence lengths), so that a change of the tile planning
shows too. About 40 s on 2 cores with an empty Triton cache.
"""
import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FA2, FA1, FA1Q = "+defer+seqpar+splitq", "-defer-seqpar-splitq", "+defer-seqpar+splitq"
SWITCHES = "+defer+seqpar+splitq+pingpong+overlap"
# (kernel of fa2check.inspect.compile_gate, variant, dtype, head_dim, causal)
GATE_CASES = [
    ("attn_fwd", FA2, "bfloat16", 64, False),
    ("attn_fwd", FA2, "bfloat16", 128, True),
    ("attn_fwd", FA2, "bfloat16", 96, False),  # two column chunks (D60)
    ("attn_fwd", FA2, "bfloat16", 192, False),  # chunks through TMA (D62)
    ("attn_fwd", FA2, "float32", 64, True),
    ("attn_fwd", FA1, "bfloat16", 128, False),
    ("attn_fwd", "+defer+seqpar-splitq", "bfloat16", 64, True),
    ("attn_fwd_repair", FA2, "bfloat16", 128, True),
    ("attn_fwd_grad", FA2, "bfloat16", 128, False),
    ("attn_bwd", FA2, "bfloat16", 128, True),
    ("attn_bwd", FA1, "bfloat16", 64, False),
    ("gluon_attn_fwd", FA2, "bfloat16", 64, False),
    ("gluon_attn_fwd", "+defer+seqpar-splitq", "bfloat16", 64, True),
    ("hopper_attn_fwd", FA1, "bfloat16", 128, False),  # FA1's 256-key tile (D67)
    ("hopper_attn_fwd", FA1Q, "bfloat16", 128, True),
    ("hopper_attn_fwd", SWITCHES, "bfloat16", 128, True),  # a deeper ring (D80)
    ("hopper_attn_bwd", FA1, "bfloat16", 64, True),
    ("hopper_attn_bwd", FA2, "bfloat16", 64, True),  # the API's d=64 backward with gradients
]
# the chassis at fixed tiles: (name, variant, causal)
CHASSIS_FORWARDS = [("fa2", FA2, False), ("fa2", FA2, True), ("fa1", FA1, False),
                    ("fa1q", FA1Q, True), ("pp", SWITCHES, False)]
CHASSIS_BACKWARDS = [("fa2", FA2), ("fa1", FA1)]


def body_hash(ptx: str) -> str:
    """The first 16 hex digits of the sha256 of a PTX body: no debug sections, `.loc`, `.file`
    or `.param` lines, and parameter names numbered alike."""
    ptx = ptx.split(".section\t.debug")[0]
    ptx = re.sub(r"^\s*\.loc.*\n|^\s*\.file.*\n|^\s*\.param.*\n", "", ptx, flags=re.M)
    return hashlib.sha256(re.sub(r"param_\d+", "param_N", ptx).encode()).hexdigest()[:16]


def hashes(progress=print) -> dict:
    """{case name: body hash} of every kernel of record."""
    from fa2check.inspect.compile_gate import compile_kernel_for_sm90
    from kernels import Variant
    from kernels import hopper_backward, hopper_forward

    out = {}

    def record(name, compiled):
        out[name] = body_hash(compiled.asm["ptx"])
        progress(f"{name} {out[name]} shared={compiled.metadata.shared}")

    for name, variant, causal in CHASSIS_FORWARDS:
        for d in (64, 128):
            record(f"fwd-{name}-{d}-{causal}", hopper_forward.compile_for_sm90(
                Variant.parse(variant), "bfloat16", d, 128, 2, causal))
    for name, variant in CHASSIS_BACKWARDS:
        for causal in (False, True):
            record(f"bwd-{name}-{causal}", hopper_backward.compile_for_sm90(
                Variant.parse(variant), "bfloat16", 128, causal))
    for kernel, variant, dtype, d, causal in GATE_CASES:
        _, compiled = compile_kernel_for_sm90(kernel, Variant.parse(variant), dtype, d, causal)
        record(f"{kernel}{variant}-{dtype}-{d}-{'causal' if causal else 'full'}", compiled)
    return out


def compare(before: dict, after: dict) -> int:
    """Print the cases whose hashes differ or that one file lacks; 0 if every one is equal."""
    bad = 0
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a != b:
            bad += 1
            print(f"{name}: {a} -> {b}")
    print(f"{len(set(before) | set(after)) - bad} equal, {bad} differ or missing")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", help="JSON file for {case: hash}")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                   help="compare two files written by this probe")
    args = p.parse_args(argv)
    if args.compare:
        with open(args.compare[0]) as a, open(args.compare[1]) as b:
            return compare(json.load(a), json.load(b))
    if not args.out:
        p.error("name the JSON file to write, or --compare BEFORE AFTER")
    os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported: compile for sm_90
    result = hashes(lambda line: print(line, flush=True))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
