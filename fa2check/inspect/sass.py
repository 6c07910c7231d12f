"""Reading a kernel's machine code (SASS, from Triton's bundled cuobjdump) for what the PTX
cannot show: code that ptxas itself got wrong.

`uninitialized_uniform_reads` is the check the compile gate applies to every kernel. ptxas 12.8
(Triton 3.6's) built the Triton forward's REPAIR launch at d=130 with the wgmma descriptors of
V's second column chunk computed from a uniform register that nothing had written (decisions
D115): the product read keys 16-63 of that chunk from the wrong shared memory, on the GPU only.
Uniform registers hold nothing at a kernel's start (its arguments come from the constant bank),
so a uniform-datapath instruction that reads one before any instruction writes it is such a
miscompile, whatever the kernel.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
GUARD = re.compile(r"^@!?U?P\w+\s+")
UNIFORM = re.compile(r"\bUR(\d+)\b")
UNIFORM_ZERO = 255  # URZ


def cubin_sass(cubin: bytes) -> str:
    """`cuobjdump -sass` of a compiled kernel (Triton's CompiledKernel.asm["cubin"])."""
    from triton import knobs

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run([knobs.nvidia.cuobjdump.path, "-sass", path], check=True,
                              capture_output=True, text=True).stdout


def uninitialized_uniform_reads(sass: str) -> list[tuple[str, str, int]]:
    """(address, instruction, register) of each uniform register that a uniform-datapath
    instruction (U...) reads before any instruction, in text order, writes it. Text order is
    every path's order up to the first backward branch, and a loop's first iteration after it,
    so a register written only later in the text is unwritten on the way in.

    Writers are instructions whose first operand is a uniform register (two for .64 and .WIDE
    forms: ULDC.64, UIADD3.64, UIMAD.WIDE); the reads checked are the uniform registers among
    the other operands of such an instruction of the uniform datapath (pairs for .64 forms).
    Other reads (HGMMA descriptors, addresses, UISETP's) are left out: their operand widths
    vary, and ptxas's slip was in a UIADD3. Over about 80 sound builds it flags nothing."""
    written: set[int] = set()
    found = []
    for address, text in INSTRUCTION.findall(sass):
        parts = GUARD.sub("", text).split(None, 1)
        if len(parts) < 2:
            continue
        opcode, operands = parts
        operands = [o.strip() for o in operands.split(",")]
        destination = UNIFORM.fullmatch(operands[0])
        if not destination:
            continue
        if opcode.startswith("U"):
            for operand in operands[1:]:
                for r in map(int, UNIFORM.findall(operand)):
                    for reg in (r, r + 1) if ".64" in opcode else (r,):
                        if reg not in written and reg != UNIFORM_ZERO:
                            found.append((address, text, reg))
        r = int(destination.group(1))
        written.update((r, r + 1) if ".64" in opcode or ".WIDE" in opcode else (r,))
    return found
