"""Question: which tiles suit the Gluon forward's split-Q and split-K? (D42)

Exploration behind tuning.GLUON_FWD_SPACE: the Gluon forward by variant and tile config, bf16,
seqlen 1k and 4k, d 64 and 128, one do_bench each, beside the Triton FA2 (not a benchmark of
record; its results are in git history, ablations/results/MANIFEST.md).
    python3 ablations/probes/gluon_tiles.py"""
import json
import os
import sys
from dataclasses import replace

import torch
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
from kernels import Variant, default_config, flash_attention  # noqa: E402

out = []


def t(fn):
    return do_bench(fn, warmup=5, rep=20)


for d in (64, 128):
    for seqlen in (1024, 4096):
        for causal in (False, True):
            heads, batch = 2048 // d, 16384 // seqlen
            q, k, v = (torch.randn(batch, heads, seqlen, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            flops = 4 * batch * heads * seqlen * seqlen * d / (2 if causal else 1)
            ref = flash_attention(q, k, v, causal=causal, variant=Variant())
            ms = t(lambda: flash_attention(q, k, v, causal=causal, variant=Variant()))
            out.append(dict(d=d, seqlen=seqlen, causal=causal, impl="triton FA2", cfg="default", ms=ms, tflops=flops / ms / 1e9))
            for variant in Variant.all():
                base = default_config(d, True, variant, torch.bfloat16, backend="gluon")
                if variant.split_q:
                    cands = [(64, 32, 4), (64, 64, 4), (128, 32, 8), (128, 64, 8), (64, 16, 4)]
                else:
                    cands = [(16, 64, 4), (32, 64, 4), (16, 128, 8), (16, 128, 4), (32, 128, 4)]
                if variant not in (Variant(), Variant(True, True, False)):
                    cands = cands[:1]
                for bm, bn, nw in cands:
                    cfg = replace(base, block_m=bm, block_n=bn, num_warps=nw)
                    try:
                        o = flash_attention(q, k, v, causal=causal, variant=variant, config=cfg, backend="gluon")
                        err = (o.float() - ref.float()).abs().max().item()
                        ms = t(lambda: flash_attention(q, k, v, causal=causal, variant=variant, config=cfg, backend="gluon"))
                        out.append(dict(d=d, seqlen=seqlen, causal=causal, impl=f"gluon {variant}", cfg=f"{bm}x{bn}x{nw}", ms=ms, tflops=flops / ms / 1e9, maxdiff_vs_triton=err))
                    except Exception as e:
                        out.append(dict(d=d, seqlen=seqlen, causal=causal, impl=f"gluon {variant}", cfg=f"{bm}x{bn}x{nw}", error=str(e)[:300]))
                    print(out[-1], flush=True)
            del q, k, v
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "gluon-speed.json"), "w"), indent=1)
print("d seqlen causal impl cfg ms tflops maxdiff")
for r in out:
    print(r["d"], r["seqlen"], r["causal"], r["impl"], r["cfg"], "%.3f" % r.get("ms", -1), "%.0f" % r.get("tflops", -1), r.get("maxdiff_vs_triton", r.get("error", "")))
