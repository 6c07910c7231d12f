"""Question: did ptxas reschedule an unchanged loop after a change elsewhere? (D04, D23)

A static look at ptxas's schedule: the sm_90 SASS of a kernel's inner loops, for tile
configs compiled on this machine (no GPU needed).

    python ablations/probes/sass_loops.py [--kernel K] [--head-dim D] [--dtype T] [--full]
                                   [--variant V] FIELDS...

FIELDS is 'field=value,...' on top of the launcher's GPU default config, as in
compare_kernels.py (e.g. block_m=64,block_n=64,num_warps=4,num_stages=3,nan_flags=0, or
bwd_block_m=32,bwd_block_n=128,bwd_num_warps=4,bwd_num_stages=3,bwd_dq_pass=1 with
--kernel attn_bwd). For each config and each innermost loop that issues HGMMA (in the
forward's main launch, the loop over the unmasked key tiles, then over the masked ones: the
diagonal when causal, the ragged key tail either way; in the backward, the dK/dV loops over
masked and unmasked query blocks, then the dQ pass's over unmasked and masked key blocks), it
prints the instruction count, the sum of the stall cycles ptxas wrote into the instructions'
control bits (the fewest cycles one warp needs to issue the loop once, before any wait on a
result), how many instructions wait on a scoreboard barrier, and the most common opcodes.

Why: the same PTX loop ran 5-14% slower on the H200 after a change elsewhere in the kernel
(docs/tools.md, "The schedule lottery"; D04). The stall sum is a cheap screen for
such a schedule change before device time is spent; it says nothing about dynamic waits
(memory, tensor cores, the other warps), so it is no substitute for a measurement.
"""
import argparse
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# A line of `cuobjdump -sass`: /*ADDR*/ INSTRUCTION ; /* low 64 bits */, and the next line
# /* high 64 bits */, whose bits 41-62 are the control bits of Volta and later.
LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* 0x[0-9a-f]{16} \*/")
HIGH = re.compile(r"^\s*/\* 0x([0-9a-f]{16}) \*/")
BRANCH = re.compile(r"\bBRA\b.*?\b(0x[0-9a-f]+)")


@dataclass
class Instr:
    addr: int
    text: str
    stall: int  # cycles before the warp may issue its next instruction
    wait_mask: int  # scoreboard barriers this instruction waits on

    @property
    def opcode(self) -> str:
        words = self.text.split()
        word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        return word.split(".")[0]


def decode(addr: int, text: str, high: int) -> Instr:
    """Control bits in the high word: stall 41-44, yield 45, write barrier 46-48, read barrier
    49-51, wait mask 52-57, reuse 58-61."""
    return Instr(addr, text, stall=(high >> 41) & 0xF, wait_mask=(high >> 52) & 0x3F)


def parse_sass(text: str) -> list[Instr]:
    lines = text.splitlines()
    found = []
    for line, following in zip(lines, lines[1:] + [""]):
        m, h = LINE.match(line), HIGH.match(following)
        if m and h:
            found.append(decode(int(m.group(1), 16), m.group(2), int(h.group(1), 16)))
    return found


def inner_loops(instrs: list[Instr], marker: str = "HGMMA") -> list[tuple[int, int]]:
    """(first, last) indices of each loop (a backward branch and its target) that issues
    `marker` and holds no other such loop, in address order. A region that starts inside
    another and ends past it is no loop of the source (a branch from code after a loop back
    into its body; ptxas lays out some TMA tiles so) and is dropped."""
    index = {x.addr: i for i, x in enumerate(instrs)}
    loops = []
    for i, x in enumerate(instrs):
        m = BRANCH.search(x.text)
        target = int(m.group(1), 16) if m else None
        if target is not None and target < x.addr and target in index:
            first = index[target]
            if any(marker in y.text for y in instrs[first:i + 1]):
                loops.append((first, i))
    return sorted(a for a in loops
                  if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in loops)
                  and not any(b[0] < a[0] <= b[1] < a[1] for b in loops))


def summarize(instrs: list[Instr], loop: tuple[int, int], top: int = 6) -> dict:
    body = instrs[loop[0]:loop[1] + 1]
    counts = {}
    for x in body:
        counts[x.opcode] = counts.get(x.opcode, 0) + 1
    return {"start": body[0].addr, "instructions": len(body),
            "stall_cycles": sum(x.stall for x in body),
            "waiting": sum(1 for x in body if x.wait_mask),
            "opcodes": sorted(counts.items(), key=lambda kv: -kv[1])[:top]}


def kernel_sass(kernel: str, head_dim: int, dtype: str, causal: bool, variant,
                fields: str) -> str:
    """`cuobjdump -sass` of a kernel of fa2check.compile_gate (attn_fwd: the main forward
    launch) for the config FIELDS, compiled for sm_90."""
    import torch

    from compare_kernels import config_overrides  # this script's folder is on sys.path
    from fa2check.inspect.compile_gate import compile_kernel_for_sm90
    from fa2check.inspect.sass import cubin_sass
    from kernels import TileConfig, default_config

    config = replace(default_config(head_dim, True, variant, getattr(torch, dtype)),
                     **config_overrides(fields, TileConfig))
    _, compiled = compile_kernel_for_sm90(kernel, variant, dtype, head_dim, causal, config)
    return cubin_sass(compiled.asm["cubin"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("configs", nargs="+", metavar="FIELDS")
    p.add_argument("--kernel", default="attn_fwd", choices=("attn_fwd", "attn_bwd"))
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--full", action="store_true", help="non-causal (default: causal)")
    p.add_argument("--variant", default="+defer+seqpar+splitq")
    args = p.parse_args(argv)
    from fa2check.inspect.compile_gate import interpreting
    from kernels import Variant

    if interpreting():
        raise SystemExit("unset TRITON_INTERPRET: this compiles for sm_90")

    variant = Variant.parse(args.variant)
    for fields in args.configs:
        instrs = parse_sass(kernel_sass(args.kernel, args.head_dim, args.dtype, not args.full,
                                        variant, fields))
        print(f"{args.kernel} {fields} (d={args.head_dim}, {args.dtype}, "
              f"{'full' if args.full else 'causal'}, {variant})")
        for loop in inner_loops(instrs):
            s = summarize(instrs, loop)
            ops = " ".join(f"{op} {n}" for op, n in s["opcodes"])
            print(f"  loop at {s['start']:#06x}: {s['instructions']} instructions, "
                  f"{s['stall_cycles']} stall cycles, {s['waiting']} wait on a barrier; {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
