"""Question: what do head dims that are not tile widths cost? Our FA2 forward (and forward +
backward with --modes) at d = 96, 128, 192/128 (DeepSeek's MLA: v's head dim 128), 192, 256
(bf16, paper batch sizing: 16k tokens, hidden 2048, so heads = 2048 // d; 4k and 8k) beside
sdpa-flash and sdpa-cudnn, and the padding's price: the time per head at d against the tile
width it is padded to, block_d(d), measured in the same run. FA2 runs the tiles
flash_attention(q, k, v, causal=...) picks (kernels.default_config for the call).

Prediction, written before the first run: the kernels compute on block_d(d) columns (padded
columns loaded as 0, docs/decisions.md D49), so a head at d = 96 costs what a head at d = 128
costs (per-head time ratio 1.0, where the FLOP model says 96 / 128 = 0.75): padding 33% over
the FLOP model at d = 96 and 192, 60% at d = 160. sdpa-flash (FlashAttention-2's own kernels)
has kernels for d = 96, 160 and 192 of their own, so it should pay less there.

    python3 ablations/probes/head_dims.py --out DIR [--quick] [--commit SHA]
    python3 ablations/probes/head_dims.py --render DIR/head_dims.json

Budget: the distinct kernels are compiled first in parallel (fa2check.ablate.tuning.precompile,
one small call each), then the cells are timed in order until --budget-s is spent (the rest are
recorded as not timed); the JSON is written after every cell.
"""
import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from fa2check.ablate.grids import Cell, paper_batch, paper_heads  # noqa: E402
from kernels.plan.tiles import block_d  # noqa: E402

HEAD_DIMS = ((128, 128), (96, 96), (192, 128), (256, 256), (192, 192))  # (d, dv); pairs first
SEQLENS = (4096, 8192)
MODES = ("fwd", "fwd+bwd")
DEFAULT_MODES = ("fwd",)
CONTENDERS = ("fa2", "sdpa-flash", "sdpa-cudnn")
QUICK = dict(head_dims=((128, 128), (96, 96)), seqlens=(2048,), modes=("fwd",))
BUDGET_S = 190


def cells(head_dims, seqlens) -> list[Cell]:
    return [Cell(paper_batch(n), paper_heads(d), paper_heads(d), n, d, "bfloat16", causal,
                 head_dim_v=None if dv == d else dv)
            for (d, dv), n, causal in itertools.product(head_dims, seqlens, (False, True))]


def _int_list(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def _head_dims(text: str) -> tuple[tuple[int, int], ...]:
    """'96,192/128' -> ((96, 96), (192, 128)): d, or d/dv where v has its own head dim."""
    pairs = []
    for part in filter(str.strip, text.split(",")):
        d, _, dv = part.partition("/")
        pairs.append((int(d), int(dv or d)))
    return tuple(pairs)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--commit", help="the git commit to record (the device's copy has a stale .git)")
    p.add_argument("--head-dims", type=_head_dims, default=HEAD_DIMS, help="e.g. 96,192/128")
    p.add_argument("--seqlens", type=_int_list, default=SEQLENS)
    p.add_argument("--modes", type=lambda s: tuple(s.split(",")), default=DEFAULT_MODES)
    p.add_argument("--quick", action="store_true", help="d 128 and 96, seqlen 2k, forward only")
    p.add_argument("--budget-s", type=float, default=BUDGET_S,
                   help="stop timing new cells after this many seconds (default %(default)s)")
    p.add_argument("--render", metavar="JSON", help="print a saved run as markdown and exit")
    args = p.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    unknown = set(args.modes) - set(MODES)
    if unknown:
        p.error(f"unknown modes {sorted(unknown)}; expected some of {list(MODES)}")
    if not args.head_dims or not all(1 <= d <= 256 for pair in args.head_dims for d in pair):
        p.error("head dims go from 1 to 256")
    return args


# ----------------------------------------------------------------------------- arithmetic

def tflops(cell: dict, mode: str, ms) -> float | None:
    return None if ms is None else Cell(**cell).flops(mode) / ms / 1e9


def padding_rows(rows: list[dict]) -> list[dict]:
    """For every timed cell at a d that is not a tile width whose padded twin (same seqlen,
    mask, mode, block_d(d)) was timed too: our per-head time against the twin's, beside the
    FLOP model d / block_d(d); `cost` is the time beyond that model (ratio / model - 1)."""
    index = {(r["cell"]["head_dim"], r["cell"]["seqlen"], r["cell"]["causal"]): r for r in rows
             if r["cell"].get("head_dim_v") is None}
    found = []
    for (d, n, causal), row in index.items():
        twin = index.get((block_d(d), n, causal))
        if twin is None or block_d(d) == d:
            continue
        for mode, ms in row["ms"]["fa2"].items():
            twin_ms = twin["ms"]["fa2"].get(mode)
            if ms is None or twin_ms is None:
                continue
            ratio = (ms / row["cell"]["heads_q"]) / (twin_ms / twin["cell"]["heads_q"])
            model = d / block_d(d)
            found.append(dict(head_dim=d, padded_to=block_d(d), seqlen=n, causal=causal,
                              mode=mode, per_head_ratio=ratio, flop_model=model,
                              cost=ratio / model - 1))
    return sorted(found, key=lambda r: (r["head_dim"], r["seqlen"], r["causal"], r["mode"]))


def _cell_text(value, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def render(path) -> str:
    """A saved run as markdown: TFLOP/s of each contender and FA2 / sdpa-flash per cell and
    mode, then the padding table."""
    from probe_run import header
    from fa2check.core.results import read_json

    data = read_json(str(path))
    modes = data["modes"]
    lines = [header(data) + " TFLOP/s (the paper's FLOP count), bf16, paper batch sizing; "
             "n/a: the backend refused the shape.", "",
             "| cell | mode | FA2 | sdpa-flash | sdpa-cudnn | FA2 / sdpa-flash |",
             "|---|---|---:|---:|---:|---:|"]
    rows = sorted(data["cells"], key=lambda r: (r["cell"]["head_dim"], r["cell"]["seqlen"],
                                                 r["cell"]["causal"]))
    for row in rows:
        for mode in modes:
            rate = {c: tflops(row["cell"], mode, row["ms"][c].get(mode)) for c in CONTENDERS}
            fa2, flash = row["ms"]["fa2"].get(mode), row["ms"]["sdpa-flash"].get(mode)
            speedup = None if fa2 is None or flash is None else flash / fa2
            lines.append(f"| {Cell(**row['cell'])} | {mode} | " + " | ".join(
                _cell_text(rate[c], ".0f") for c in CONTENDERS) +
                f" | {_cell_text(speedup, '.2f')}{'x' if speedup is not None else ''} |")
    if data.get("not_timed"):
        lines += ["", f"Not timed (budget of {data['budget_s']:.0f} s spent): "
                  + ", ".join(data["not_timed"]) + "."]
    padding = padding_rows(data["cells"])
    if padding:
        lines += ["", "Padding: FA2's time per head at d against its tile width block_d(d), "
                  "same run, seqlen, mask and mode; the FLOP model is d / block_d(d).", "",
                  "| d | padded to | seqlen | mask | mode | time ratio | FLOP model | "
                  "beyond the model |", "|---:|---:|---:|---|---|---:|---:|---:|"]
        for r in padding:
            lines.append(f"| {r['head_dim']} | {r['padded_to']} | {r['seqlen']} | "
                         f"{'causal' if r['causal'] else 'full'} | {r['mode']} | "
                         f"{r['per_head_ratio']:.2f} | {r['flop_model']:.2f} | "
                         f"{100 * r['cost']:+.0f}% |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the run

def contender(name: str, cell: Cell):
    """fa2: FA2 on the tiles the ablation gives the cell, which are flash_attention's for the
    call (fa2check.ablate.sweep.Configs)."""
    from fa2check.ablate import contenders
    from fa2check.ablate.sweep import Configs
    from kernels import Variant

    if name == "fa2":
        return contenders.ours(Variant(), Configs({}, on_gpu=True).config(Variant(), cell))
    return contenders.backend(name)


def precompile_ours(run_cells, modes) -> dict:
    """Compile our kernels for every cell and mode in parallel; {job: error} for failures."""
    from fa2check.ablate import tuning

    jobs = [tuning.make_job("bwd" if mode == "fwd+bwd" else "fwd", contender("fa2", c).variant,
                            contender("fa2", c).config, c)
            for c in run_cells for mode in modes]
    results = tuning.precompile(jobs, tuning.default_workers())
    return {str(key): error for key, error in results.items() if error}


def time_cell(cell: Cell, modes) -> dict:
    from fa2check.ablate.contenders import make_inputs, timed_call
    from probe_run import time_ms

    inputs = make_inputs(cell, "cuda")
    row = dict(cell=cell.as_dict(), ms={}, errors={})
    for name in CONTENDERS:
        row["ms"][name] = {}
        for mode in modes:
            try:
                with timed_call(contender(name, cell), mode, inputs, cell.causal) as fn:
                    row["ms"][name][mode] = time_ms(fn)
            except Exception as e:  # noqa: BLE001 - a backend that refuses a shape is reported
                row["ms"][name][mode] = None
                row["errors"][f"{name} {mode}"] = f"{type(e).__name__}: {str(e)[:200]}"
    return row


def run(args) -> int:
    from probe_run import matmul_tflops, provenance

    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = cells(args.head_dims, args.seqlens)
    data = dict(provenance=provenance(args.commit), modes=list(args.modes),
                budget_s=args.budget_s, cells=[], not_timed=[])
    data["compile_errors"] = precompile_ours(todo, args.modes)
    data["compile_s"] = time.monotonic() - started
    print(f"compiled in {data['compile_s']:.0f} s", flush=True)
    data["matmul_tflops"] = matmul_tflops()
    for cell in todo:
        if time.monotonic() - started > args.budget_s:
            data["not_timed"].append(str(cell))
        else:
            data["cells"].append(time_cell(cell, args.modes))
            print(f"  timed {cell} at {time.monotonic() - started:.0f} s", flush=True)
        data["seconds"] = time.monotonic() - started
        (out / "head_dims.json").write_text(json.dumps(data, indent=1))  # nothing lost
    print(render(out / "head_dims.json"))
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.render:
        print(render(args.render))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
