"""What "correct" means for a FlashAttention implementation: one module per property.

Each module has NAME, CASES = {"quick": (...), "full": (...)} and
`run(impl, variant, case, device) -> PropertyResult` (see properties.base).
"""
from . import (causal_masking, determinism, extreme_logits, gqa_reduction, lse_bounds,
               memory_safety, variant_equivalence)

PROPERTIES = {m.NAME: m for m in (lse_bounds, extreme_logits, causal_masking, gqa_reduction,
                                  variant_equivalence, determinism, memory_safety)}
TIERS = ("quick", "full")


def cases(name: str, tier: str):
    return PROPERTIES[name].CASES[tier]
