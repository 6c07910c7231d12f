"""Property 5: the three switches change how attention is computed, not what it computes.

For the variant under test and each switch, the variant with that switch flipped (the others
equal) is run on the same inputs:
- seq_parallel_bitwise: seq_parallel only changes which program handles which query rows, and
  each row's arithmetic is the same, so the forward o and lse are bitwise equal, where both
  variants cut the keys into tiles of the same width (our kernels' tiles are tuned per variant:
  the Hopper chassis's FA1 schedule takes 256 keys a tile under split-K, FA2's 128, D67);
  otherwise seq_parallel_agree: within the pass rule's allowed error, as below.
- defer_norm_agree, split_q_agree: these change the arithmetic (per-tile normalisation;
  per-slice statistics merged), so o, lse, dq, dk and dv must agree within the pass rule's
  allowed error for the problem: max|a - b| <= c * baseline + floor.
- warp_specialize_bitwise, pingpong_bitwise, overlap_bitwise: a variant with Hopper switches
  away from their defaults (the chassis's second lattice, D59, D85) is built on FA2 all on, so
  no FA2 flag of it can flip; each of those switches goes back to its default instead. A switch
  only changes who loads and how the same products are issued (the same operations in the same
  order), so the forward o and lse are bitwise equal.
An implementation that ignores `variant` passes trivially (it returns the same thing).
"""
from __future__ import annotations

import functools
from dataclasses import replace

from fa2check.core.checks import Reference
from fa2check.core.implementations import key_tile
from fa2check.core.problems import Problem

from .base import Case, Check, PropertyResult, allowed_errors, bitwise, call, within
from .full_shapes import GQA_BF16_D64, NARROW_FP16_D16, like

NAME = "variant_equivalence"
RUNS_LAST = True  # the full tier runs it after the others, whose compiled kernels it reuses

CASES = {
    "quick": (
        Case("flips", Problem(1, 4, 2, 45, 70, 16, "float16", True, seed=500)),
        Case("flips", Problem(2, 3, 1, 70, 33, 32, "bfloat16", False, seed=501)),
    ),
    "full": (
        Case("flips", like(GQA_BF16_D64, 500)),
        Case("flips", like(NARROW_FP16_D16, 501)),
    ),
}


@functools.lru_cache(maxsize=2)
def _reference(case: Case, device: str) -> Reference:
    return Reference(case.problem, device, backward=case.backward)


@functools.lru_cache(maxsize=8)
def _outputs(impl, variant, case: Case, device: str):
    return call(impl, variant, _reference(case, device))


def run(impl, variant, case: Case, device: str) -> PropertyResult:
    from kernels import Variant

    variant = variant if variant is not None else Variant()
    ref = _reference(case, device)
    mine = _outputs(impl, variant, case, device)
    return PropertyResult.judge(NAME, case, flip_checks(
        ref, variant, mine, lambda other: _outputs(impl, other, case, device),
        lambda v: key_tile(impl, v, ref.q, ref.k, ref.v, ref.problem.causal)))


FLAGS = ("seq_parallel", "defer_norm", "split_q")
CHECK_NAMES = ("seq_parallel_bitwise", "seq_parallel_agree", "defer_norm_agree", "split_q_agree",
               "warp_specialize_bitwise", "pingpong_bitwise", "overlap_bitwise")


def flip_checks(ref: Reference, variant, mine, outputs_of, key_tile_of=None) -> list[Check]:
    """seq_parallel_bitwise (seq_parallel_agree where key_tile_of(variant), the keys a K/V tile
    holds, differs between the two), defer_norm_agree and split_q_agree: `mine` (the outputs
    of `variant`) against outputs_of(the variant with one switch flipped); for a variant with
    Hopper switches away from their defaults, <switch>_bitwise against it with that switch at
    its default."""
    if variant.hopper_switches:
        return [_switch_off(variant, switch, mine, outputs_of)
                for switch in variant.hopper_switches]
    allowed = allowed_errors(ref, mine)
    checks = []
    for flag in FLAGS:
        flipped = replace(variant, **{flag: not getattr(variant, flag)})
        other = outputs_of(flipped)
        tiles = (key_tile_of(variant), key_tile_of(flipped)) if key_tile_of else (None, None)
        if flag == "seq_parallel" and tiles[0] == tiles[1]:
            check = bitwise("seq_parallel_bitwise", mine, other)
        else:
            check = within(f"{flag}_agree", mine, other, allowed)
        if tiles[0] != tiles[1]:
            check.numbers["key_tiles"] = tiles
        check.numbers["other_variant"] = str(flipped)
        checks.append(check)
    return checks


def _switch_off(variant, switch: str, mine, outputs_of) -> Check:
    flipped = replace(variant, **{switch: not getattr(variant, switch)})  # to its default
    check = bitwise(f"{switch}_bitwise", mine, outputs_of(flipped))
    check.numbers["other_variant"] = str(flipped)
    return check
