"""Write the table of fastest kernels (kernels/fastest.json, read by kernels.fastest) from
ablation runs that timed Triton's FA2 beside the Hopper chassis's FA2 and its switch variants:

    python -m fa2check.ablate.fastest_table --fwd RUN.json --fwd+bwd RUN.json --out kernels/fastest.json

Every cell of a run given for a part gives one entry: its fwd mode for part "fwd" (calls that
need no gradient), its fwd+bwd mode for part "fwd+bwd" (calls that do). Runs of a part are read
in the order given: a later run's cell replaces an earlier run's (re-measure the cells a kernel
change touched). Triton's FA2 is the
reference: the row of the Triton kernel "+defer+seqpar+splitq", or the `api` peer where it ran
that kernel (runs made before the API chose by this table record no api_kernel: it did). The
candidates are our kernels with FA2's three flags and any switches, on any backend, that passed
the cell's gate and were timed there. Run the ablation with FA2CHECK_FASTEST set empty, so that
its api peer is Triton's FA2 in every cell (with the table, it runs the table's own choices).
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from kernels.fastest import PARTS  # a run's mode gives the part of that name

from .contenders import API, PEERS, parse_kernel_name
from .results import load

RULE = ("a candidate replaces Triton's FA2 in a cell when its median time is at least 3% "
        "below Triton FA2's and its 75th percentile below Triton FA2's 25th (the samples of "
        "every sweep pooled); among those, the lowest median")
MARGIN = 0.97
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRITON_FA2 = "+defer+seqpar+splitq"


def _stats(samples) -> tuple[float, float, float]:
    pooled = np.concatenate([np.asarray(s, dtype=float) for s in samples])
    return tuple(float(x) for x in np.percentile(pooled, [25, 50, 75]))


def cell_choice(entry: dict, mode: str) -> dict | None:
    """The entry of one cell and mode: the chosen kernel with its evidence; None where
    Triton's FA2 was not timed there."""
    from kernels import Variant

    info = entry["modes"].get(mode)
    if not info or info.get("status") != "timed":
        return None
    timed = {n: _stats(info["samples"][n]) for n in info["timed"] if info["samples"].get(n)}
    api_ran = entry.get("api_kernel", {}).get(mode, TRITON_FA2)  # before kernels.fastest: FA2
    reference = timed.get(TRITON_FA2) or (timed.get(API) if api_ran == TRITON_FA2 else None)
    if reference is None:
        return None
    faster = []
    for name, (_, median, q75) in timed.items():
        if name in PEERS or name == TRITON_FA2:
            continue
        backend, variant = parse_kernel_name(name)
        if variant.fa2 == Variant() and median <= MARGIN * reference[1] and q75 < reference[0]:
            faster.append((median, backend, variant))
    cell = entry["cell"]
    base = {"head_dim": cell["head_dim"], "causal": cell["causal"], "dtype": cell["dtype"],
            "seqlen": cell["seqlen"], "triton_ms": round(reference[1], 6)}
    if not faster:
        return {**base, "backend": "triton", "variant": TRITON_FA2, "speedup": 1.0}
    median, backend, variant = min(faster, key=lambda f: f[0])
    return {**base, "backend": backend, "variant": str(variant), "chosen_ms": round(median, 6),
            "speedup": round(reference[1] / median, 4)}


def build(runs: list[tuple[str, str]]) -> dict:
    """The table from (part, results file) pairs."""
    from kernels.fastest import SCHEMA

    entries, sources = {}, []
    for part, path in runs:
        results = load(path)
        prov = results["provenance"]
        gpu = prov["gpu"]
        sources.append({"part": part, "file": os.path.basename(path),
                        "commit": prov.get("git_commit"),
                        "date": prov.get("date"), "command": prov.get("command")})
        mine = set()
        for entry in results["cells"]:
            choice = cell_choice(entry, part)
            if choice is not None:
                key = (gpu, part, choice["head_dim"], choice["causal"], choice["dtype"],
                       choice["seqlen"])
                if key in mine:
                    raise SystemExit(f"{path}: a second measurement of {key} in one run")
                mine.add(key)  # a later run's cell replaces an earlier run's (newer code)
                entries[key] = {"gpu": gpu, "part": part, **choice,
                                "source": os.path.basename(path)}
    order = sorted(entries)
    return {"schema": SCHEMA, "rule": RULE, "sources": sources,
            "entries": [entries[k] for k in order]}


def write(table: dict, path: str):
    """One entry a line, so a new run's diff shows the keys it changed."""
    head = {k: v for k, v in table.items() if k != "entries"}
    lines = ["{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()) + ","]
    lines.append(' "entries": [')
    lines += ["  " + json.dumps(e) + ("," if i + 1 < len(table["entries"]) else "")
              for i, e in enumerate(table["entries"])]
    with open(path, "w") as f:
        f.write("\n".join(lines + [" ]", "}"]) + "\n")


def _sources(table_path: str | None, part: str) -> list[str]:
    """The result files of `table_path`'s sources of `part`, in its order."""
    if table_path is None:
        return []
    with open(table_path) as f:
        sources = json.load(f)["sources"]
    results = os.path.join(ROOT, "ablations", "results")
    return [os.path.join(results, s["file"]) for s in sources if s["part"] == part]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fa2check.ablate.fastest_table",
                                     description=__doc__.split("\n\n")[0])
    for part in PARTS:
        parser.add_argument(f"--{part}", action="append", default=[], metavar="RUN",
                            help=f"ablation results (JSON or .json.gz) whose {part} mode gives "
                                 f"part {part!r}; repeatable (a later run's cells replace an "
                                 "earlier one's)")
    parser.add_argument("--extend", metavar="TABLE",
                        help="start from TABLE's own sources (kernels/fastest.json: their files "
                             "in ablations/results, in its order), the runs given after them: "
                             "a new run's keys replace the table's, the other keys stay")
    parser.add_argument("--out", required=True, help="the table to write (kernels/fastest.json)")
    args = parser.parse_args(argv)
    runs = [(part, path) for part in PARTS
            for path in _sources(args.extend, part) + getattr(args, part)]
    if not runs:
        parser.error("give at least one run (--fwd or --fwd+bwd)")
    table = build(runs)
    write(table, args.out)
    chosen = [e for e in table["entries"] if e["backend"] != "triton"]
    print(f"wrote {args.out}: {len(table['entries'])} keys, {len(chosen)} on another kernel "
          f"than Triton's FA2")
    for e in chosen:
        print(f"  {e['part']:8} d={e['head_dim']:<3} {'causal' if e['causal'] else 'full':6} "
              f"{e['dtype']:8} {e['seqlen']:>5}: {e['backend']} {e['variant']} {e['speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
