"""Question: how much did each kernel version change each cell? (A/B tables; D22, D38)

Markdown table of A/B results: one row per cell, one column per kernel version, each time
with its change against the first version's (the baseline).

    python3 ablations/probes/ab_table.py results/...-float16.json results/...-bfloat16.json

Reads the JSON that `ablations/probes/compare_kernels.py --json` writes (its rows carry no
dtype: it is taken from the recorded command's --dtype, bfloat16 by default as in
compare_kernels.py).
So that the A/B tables in docs/decisions.md are generated from the result files, not typed.
"""
import argparse
import json
import shlex
from pathlib import Path


def dtype_of(command: str) -> str:
    words = shlex.split(command)
    return words[words.index("--dtype") + 1] if "--dtype" in words else "bfloat16"


def labels(versions) -> tuple[list[str], str]:
    """'DIR:field=value,...' names -> (short names, what all share): a version is named by
    its directory where the directories differ and by the fields not every version has."""
    parts = [(v.partition(":")[0], [f for f in v.partition(":")[2].split(",") if f])
             for v in versions]
    shared = [f for f in parts[0][1] if all(f in fields for _, fields in parts)]
    same_dir = len({d for d, _ in parts}) == 1
    names = [":".join(filter(None, ("" if same_dir else d,
                                    ",".join(f for f in fields if f not in shared))))
             or "(shared only)" for d, fields in parts]
    return names, ":".join(filter(None, (parts[0][0] if same_dir else "", ",".join(shared))))


def table(runs) -> str:
    """runs: [(dtype, rows)] -> markdown; rows as compare_kernels.py writes them."""
    versions, cells = [], {}
    for dtype, rows in runs:
        for row in rows:
            if row["version"] not in versions:
                versions.append(row["version"])
            key = (dtype, row["head_dim"], not row["causal"], row["seqlen"])
            cells.setdefault(key, {})[row["version"]] = row["median"]
    names, shared = labels(versions)
    lines = [f"Every version: {shared or '-'}; median ms, change against the first.", "",
             "| dtype | d | mask | seqlen | " + " | ".join(names) + " |",
             "|---|---|---|---|" + "---:|" * len(versions)]
    for key in sorted(cells, key=lambda k: (k[0] != runs[0][0], *k[1:])):
        dtype, head_dim, full, seqlen = key
        times, base = cells[key], cells[key].get(versions[0])
        entries = []
        for i, version in enumerate(versions):
            t = times.get(version)
            if t is None:
                entries.append("-")
                continue
            change = "" if i == 0 or base is None else f" ({(t / base - 1) * 100:+.1f}%)"
            entries.append(f"{t:.4f}{change}")
        lines.append(f"| {dtype} | {head_dim} | {'full' if full else 'causal'} | {seqlen} | "
                     + " | ".join(entries) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", metavar="FILE", help="compare_kernels.py --json files")
    runs = []
    for path in p.parse_args(argv).files:
        data = json.loads(Path(path).read_text())
        runs.append((dtype_of(data["command"]), data["rows"]))
    print(table(runs))


if __name__ == "__main__":
    main()
