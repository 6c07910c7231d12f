"""The GPU fuzzer's compiled classes: which kernels and shapes a campaign draws from, compiled
ahead.

On a GPU an example runs in milliseconds, but a kernel specialisation it is the first to need
compiles for seconds (1-10 s a kernel on one core): two 150 s runs of our kernels on the H200
drew 0.09-0.17 examples a second. Drawing lengths, heads and layouts freely, nearly every
example needs kernels no example before it needed (2,000 draws: about 1,600 compile classes),
since Triton specialises every integer argument (lengths, strides, heads) on == 1 and on
divisibility by 16. So a GPU campaign
1. plans compiled classes (properties.strategies.CompiledClass): `kernels` kernel classes
   (variant, dtype, head dims, mask), FA2 with each mask, the FA1-style baseline and (the
   chassis) FA3's switches all on, causal, first, then covering every (variant, dtype, mask) of
   the space as `kernels` allows, head dims rotating through its tile widths, every third
   another head dim, every fourth with v's own where the space allows; each with `shapes` shape
   classes (batch, heads, layout, and each length's residue modulo 16: 1, 0, 1, 15 or another,
   equal for q and k in two of five) (`plan`);
2. compiles one problem of each, forward and backward and forward alone (`representatives`),
   in worker processes within a time budget (`precompile`), which fills Triton's on-disk cache;
3. fuzzes with Space.classes set: an example is one of the compiled classes with its lengths
   (16 k + residue, k drawn), seed and value distribution drawn, so every example after the
   first of its class runs compiled kernels.
The classes change with the seed: campaigns with other seeds cover other head dims, heads,
residues and layouts.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from multiprocessing import get_context

from kernels import Variant
from properties.strategies import (GROUPS, HEADS_KV, ONE, SPECIALISED, CompiledClass,
                                   Example, KernelClass, ShapeClass, Space)

from ..core.compiling import Call, compile_job
from ..core.environment import select_device
from ..core.implementations import Column
from ..core.problems import Problem

# (residue of a length modulo 16, weight): the length 1, multiples of 16, one past and one
# short of them (a tile's edges), and any other
RESIDUES = ((ONE, 1), (0, 3), (1, 2), (SPECIALISED - 1, 2), (None, 2))
# a GPU campaign's kernel classes (each with --shapes shape classes), measured on the H200 at
# 4985a2d: 32 classes each of ours, the chassis's and the Gluon forward's (112 jobs) took 774
# CPU-s to compile (up to 67 s a job: a split-K backward at d=256); the chassis's 24 took 175
# CPU-s, 19 s, and then drew 65.8 examples/s; each class's first example in each worker loads
# its kernels (0.6 s each there); another seed plans other classes
KERNEL_CLASSES = 12
FA2, FA1_STYLE = Variant(), Variant(False, False, False)  # the ablation's headline variants
FA3_ALL = Variant(pingpong=True, overlap=True)  # the chassis's FA2 with FA3's switches all on
SAME_RESIDUE = 0.4  # seqlen_k's residue is seqlen_q's: equal and nearly equal lengths


def kernel_classes(space: Space, count: int | None, rng: random.Random) -> list[KernelClass]:
    """`count` kernel classes (default: one per (variant, dtype, mask) of the space), each
    (variant, dtype, mask) as evenly as `count` allows, in a seeded order. The headline's
    kernels come first, so that no campaign leaves them out: FA2 with each mask, then the
    FA1-style baseline (drawn freely, 12 classes of the chassis's 60 combinations held no FA2
    in 122 of 300 seeds and FA2 with one mask only in 141 more; of ours' 48, none in 48);
    where the space has FA3's switches, their all-on variant, causal, whose pipelined loop
    the other pingpong and overlap variants share and `flash_attention`'s table picks (D114's
    gate drew none of them)."""
    combos = [(v, d, c) for v in space.variants for d in space.dtypes for c in space.causal]
    rng.shuffle(combos)
    first = []
    for variant, causal in [(FA2, False), (FA2, True), (FA1_STYLE, None), (FA3_ALL, True)]:
        first += [combo for combo in combos if combo[0] == variant
                  and causal in (None, combo[2])][:1]  # its seeded dtype (and mask)
    combos = first + [combo for combo in combos if combo not in first]
    widths = [d for d in space.head_dims if d & (d - 1) == 0] or list(space.head_dims)
    others = [d for d in space.head_dims if d not in widths] or widths
    rng.shuffle(widths)
    out = []
    for i in range(count or len(combos)):
        variant, dtype, causal = combos[i % len(combos)]
        head_dim = rng.choice(others) if i % 3 == 2 else widths[i % len(widths)]
        head_dim_v = (rng.choice(space.head_dims) if space.own_head_dim_v and i % 4 == 3
                      else head_dim)
        out.append(KernelClass(variant, dtype, head_dim, head_dim_v, causal))
    return out


def shape_class(space: Space, rng: random.Random) -> ShapeClass:
    """A seeded shape class: batch, a GQA group and kv heads as the strategies draw them, a
    memory layout, and the lengths' residues (RESIDUES, SAME_RESIDUE)."""
    group = min(rng.choice(GROUPS), space.max_heads_q)
    heads_kv = max(1, min(rng.choice(HEADS_KV), space.max_heads_q // group))

    def residue():
        choice = rng.choices([r for r, _ in RESIDUES], [w for _, w in RESIDUES])[0]
        return rng.randrange(2, SPECIALISED - 1) if choice is None else choice
    q = residue()
    k = q if rng.random() < SAME_RESIDUE else residue()
    return ShapeClass(rng.randint(1, space.max_batch), group * heads_kv, heads_kv, q, k,
                      rng.choice(space.layouts))


def plan(space: Space, kernels: int | None = None, shapes: int = 3,
         seed: int = 0) -> tuple[CompiledClass, ...]:
    """The campaign's compiled classes: `kernels` kernel classes with `shapes` shape classes
    each (see the module docstring), seeded."""
    rng = random.Random(seed)
    return tuple(dict.fromkeys(CompiledClass(kernel, shape_class(space, rng))
                               for kernel in kernel_classes(space, kernels, rng)
                               for _ in range(shapes)))


def with_classes(space: Space, kernels: int | None, shapes: int, seed: int) -> Space:
    """The space narrowed to `plan`'s classes (its head dims those of the classes, so that the
    lengths follow their tiles)."""
    classes = plan(space, kernels, shapes, seed)
    dims = tuple(dict.fromkeys(d for c in classes
                               for d in (c.kernel.head_dim, c.kernel.head_dim_v)))
    return replace(space, classes=classes, head_dims=dims)


def call_of(example, impl: str) -> tuple[Column, Call]:
    """The call an example makes (its other checks call the forward on the same inputs)."""
    layout = None if example.layout == "contiguous" else example.layout
    return Column(impl, str(example.variant), impl), Call(example.problem, True, layout)


def representatives(compiled: CompiledClass, impl: str, space: Space) -> list[list]:
    """Compile jobs that build every kernel the class's examples run (its lengths' middling
    multiple of 16): a call forward and backward, and the forward alone (the extreme
    distributions' calls and the causal checks' second call), whose kernels store no residual
    of o for a backward (STORE_O_RES), so that they are other kernels; float32 stores none, so
    its forward-only call follows the backward's in one job, a cache hit."""
    kernel, shape = compiled.kernel, compiled.shape
    limit = space.seqlen_limit(space.tiles())

    def length(residue):
        if residue == ONE:
            return 1
        return SPECIALISED * max(1, (limit - residue) // SPECIALISED // 2) + residue
    problem = Problem(shape.batch, shape.heads_q, shape.heads_kv, length(shape.q_residue),
                      length(shape.k_residue), kernel.head_dim, kernel.dtype, kernel.causal,
                      head_dim_v=kernel.head_dim_v)
    column, both = call_of(Example(kernel.variant, problem, layout=shape.layout), impl)
    forward = (column, replace(both, backward=False))
    return ([[(column, both), forward]] if kernel.dtype == "float32"
            else [[(column, both)], [forward]])


@dataclass
class Precompiled:
    """What `precompile` did: jobs done of planned, wall and CPU seconds, workers."""
    done: int
    planned: int
    seconds: float
    cpu_seconds: float
    workers: int

    def as_dict(self) -> dict:
        return {"jobs_done": self.done, "jobs_planned": self.planned,
                "seconds": round(self.seconds, 1), "cpu_seconds": round(self.cpu_seconds, 1),
                "workers": self.workers}


def precompile(jobs: list, device: str, workers: int, seconds: float,
               on_done=None) -> Precompiled:
    """Run the jobs (lists of (column, call), fa2check.core.compiling.compile_job) in `workers`
    spawned processes (each its own CUDA context) until they are done or `seconds` have
    passed, then stop the workers: what they compiled is in Triton's on-disk cache, which
    every later process reads. on_done(done, planned) after each job."""
    started = time.monotonic()
    if device != "cuda" or not jobs:  # the interpreter compiles nothing
        return Precompiled(0, len(jobs), 0.0, 0.0, 0)
    done, cpu = 0, 0.0
    pool = get_context("spawn").Pool(workers, initializer=select_device)
    try:
        results = [pool.apply_async(compile_job, (job, device)) for job in jobs]
        while results and time.monotonic() - started < seconds:
            for r in [r for r in results if r.ready()]:
                results.remove(r)
                try:
                    cpu += r.get()["seconds"]
                except Exception:  # noqa: BLE001 - a job that cannot run: its examples will say
                    pass
                done += 1
                if on_done is not None:
                    on_done(done, len(jobs))
            time.sleep(0.05)
    finally:
        pool.terminate()  # jobs still running when the budget ends: their examples compile
        pool.join()
    return Precompiled(done, len(jobs), time.monotonic() - started, cpu, workers)


def workers() -> int:
    """Compile processes: every core but one (the parent's), at most 15 (the H200 machine has
    16)."""
    import os

    return max(1, min((os.cpu_count() or 2) - 1, 15))
