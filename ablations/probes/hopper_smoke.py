"""Question: does each Hopper-chassis variant run and match the float64 oracle on two small
shapes (a hang or a wrong FA1 schedule shows here in seconds, before longer runs)?

    python3 ablations/probes/hopper_smoke.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.core.oracle import reference  # noqa: E402
from kernels import Variant, flash_attention  # noqa: E402


def main():
    ok = True
    for (b, hq, hkv, sq, sk), causal in [((1, 2, 1, 300, 300), True), ((2, 2, 2, 200, 517), False),
                                         ((1, 2, 2, 517, 200), True)]:
        gen = torch.Generator(device="cuda").manual_seed(sq + sk)
        q = torch.randn(b, hq, sq, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        k, v = (torch.randn(b, hkv, sk, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                for _ in range(2))
        o_ref, lse_ref = reference(q, k, v, causal=causal)
        for variant in Variant.all():
            o, lse = flash_attention(q, k, v, causal=causal, variant=variant, return_lse=True,
                                     backend="hopper")
            torch.cuda.synchronize()
            err = (o.double() - o_ref).abs().max().item()
            fin = torch.isfinite(lse_ref)
            lse_ok = bool(((lse == float("-inf")) == ~fin).all())
            good = err < 2e-2 and lse_ok
            ok &= good
            print(f"{'ok ' if good else 'BAD'} {variant} {(b, hq, hkv, sq, sk)} causal={causal} "
                  f"max|o - oracle| {err:.2e} lse -inf where expected: {lse_ok}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
