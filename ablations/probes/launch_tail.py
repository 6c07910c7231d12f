"""Question: how long is a causal launch's tail, index order or longest first? (D25, D39)

A model of a causal launch's tail: how much longer than its work the grid takes, with the
programs started in index order or longest first (docs/decisions.md#D25). A model, not a
measurement: it prints what a schedule costs if its assumptions hold.

    python ablations/probes/launch_tail.py [--solo 1.3] [--dq-cost 0.75]

Assumptions: the GPU starts programs in launch order, each on the first free slot of 132 SMs
(slots an SM: as many CTAs of the tile as fit); in the backward a dK/dV step (4 products)
costs 1 and a dQ-pass step (3 products) `--dq-cost`, in the forward every key tile costs 1; a
program alone on an SM of two slots runs `--solo` times faster (with more slots, the model
ignores that fewer CTAs on an SM run faster: it overstates the tail). The paper grid: 16k tokens a
row of the batch, 2048 / head_dim heads, FA2's tuned tiles.
The Hopper chassis's backward ('hopper-bwd') has column blocks only (dQ by TMA reductions, no
dQ pass), 128 keys a program, one CTA an SM (its launch: `_longest_first` in
kernels/hopper_backward.py, D113).
Orders: 'index' is every head's programs in index order (the backward's launch: each kv
head's column blocks, then its dQ row blocks; the forward's before kernels/launch_order.py);
'window W' is kernels/launch_order.py (the forward's causal launch, and the backward's in
ablations/patches/heaviest-first-bwd.patch): windows of W heads, every head's rank t before
rank t + 1, the longest first; the backward alternates column blocks from the first and dQ
row blocks from the last.
"""
import argparse
import heapq


def program_steps(kernel: str, seqlen: int, block_m: int, block_n: int, dq_cost: float):
    """Causal, square: (column blocks, row blocks) of one head in index order, in steps. The
    backward's column blocks have block_n keys and walk block_m rows a step; its dQ row blocks
    have block_n rows and walk block_m keys a step."""
    if kernel == "fwd":
        return [], [(i + 1) * block_m // block_n for i in range(seqlen // block_m)]
    blocks = seqlen // block_n
    columns = [(seqlen - j * block_n) // block_m for j in range(blocks)]
    if kernel == "hopper-bwd":
        return columns, []
    rows = [(i + 1) * block_n // block_m * dq_cost for i in range(blocks)]
    return columns, rows


def launch(columns, rows, heads: int, window: int | None):
    """Every program's steps in launch order."""
    if window is None:
        return (columns + rows) * heads
    assert not columns or not rows or len(columns) == len(rows), "it alternates equal counts"
    if columns and rows:
        ranked = [x for pair in zip(columns, reversed(rows)) for x in pair]
    else:
        ranked = columns or rows[::-1]
    order = []
    for first in range(0, heads, window):
        width = min(window, heads - first)
        order += [x for x in ranked for _ in range(width)]
    return order


def makespan(order, sms: int = 132, slots: int = 2, solo: float = 1.3) -> float:
    """Time until the last program ends, programs started in order on the first free slot."""
    pending = iter(order)
    busy = [[next(pending, None) for _ in range(slots)] for _ in range(sms)]
    now = 0.0

    def speed(sm):
        running = sum(x is not None for x in sm)
        return solo if running == 1 and slots > 1 else 1.0

    while True:
        step = min((x / speed(sm) for sm in busy for x in sm if x is not None), default=None)
        if step is None:
            return now
        now += step
        for sm in busy:
            rate = speed(sm)
            for i, x in enumerate(sm):
                if x is not None:
                    left = x - step * rate
                    sm[i] = left if left > 1e-9 else next(pending, None)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--solo", type=float, default=1.3)
    p.add_argument("--dq-cost", type=float, default=0.75)
    args = p.parse_args(argv)
    windows = (1, 2, 4, 8, 16, 32)
    print("makespan / (work / slots), causal, the backward with the dQ pass")
    print("| kernel | d | tile, slots an SM | seqlen | heads | index | "
          + " | ".join(f"window {w}" for w in windows) + " |")
    print("|---|---|---|---:|---:|---:|" + "---:|" * len(windows))
    tiles = (("bwd", 64, 32, 128, 2), ("bwd", 128, 64, 128, 1),  # (kernel, d, bm, bn, slots)
             ("hopper-bwd", 64, 128, 128, 1), ("hopper-bwd", 128, 64, 128, 1),
             ("fwd", 64, 64, 64, 5), ("fwd", 128, 128, 128, 1))
    for kernel, head_dim, block_m, block_n, slots in tiles:
        for seqlen in (1024, 2048, 4096, 8192, 16384):
            heads = 16384 // seqlen * (2048 // head_dim)
            columns, rows = program_steps(kernel, seqlen, block_m, block_n, args.dq_cost)
            ideal = (sum(columns) + sum(rows)) * heads / (132 * slots)
            cells = [makespan(launch(columns, rows, heads, w), slots=slots, solo=args.solo) / ideal
                     for w in (None, *windows)]
            print(f"| {kernel} | {head_dim} | ({block_m}, {block_n}), {slots} | {seqlen} | "
                  f"{heads} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
