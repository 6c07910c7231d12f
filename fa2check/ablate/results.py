"""Results files of `fa2check.ablate`: names, saving, loading, and finding the newest committed
results (ablations/results/) to render on a machine without a GPU."""
from __future__ import annotations

import glob
import json
import os
import re

from ..core.environment import ROOT
from ..core.results import read_json, resolve
from .analysis import views

RESULTS_DIR = os.path.join(ROOT, "ablations", "results")
README_BEGIN = "<!-- ablate:begin (written by python -m fa2check.ablate --update-readme) -->"
README_END = "<!-- ablate:end -->"


def stem(results: dict, grid: str) -> str:
    """e.g. 20261130-101500-nvidia-h200-paper-fwd-bwd"""
    p = results["provenance"]
    date = re.sub(r"[^0-9]", "", p.get("date", ""))[:14]
    date = f"{date[:8]}-{date[8:14]}" if len(date) >= 14 else date
    where = p.get("gpu") if p.get("device") == "cuda" else "cpu-interpreter"
    modes = "-".join(results["settings"]["modes"]).replace("+", "")
    return "-".join(_slug(x) for x in (date, where, grid, modes) if x)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", str(text).lower()).strip("-")


def save(results: dict, path: str):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=None, separators=(",", ":"), allow_nan=True)
    os.replace(tmp, path)  # a run killed while writing keeps the previous sweep's file


def base_name(path: str) -> str:
    """The path without .json or .json.gz (the stem the run's other files share)."""
    return re.sub(r"\.json(\.gz)?$", "", path)


def load(path: str) -> dict:
    data = read_json(path)
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("fa2check.ablate/"):
        raise ValueError(f"{path} is not a fa2check.ablate results file")
    return data


def readme_runs(readme: str) -> list[str]:
    """The results files the README's ablation section was rendered from (its "Rendered from
    FILE." lines between the markers that `ablate --update-readme` writes), as paths; the run
    of record, whatever file a later --update-readme renders."""
    with open(readme) as f:
        text = f.read()
    if README_BEGIN not in text or README_END not in text:
        return []
    section = text.split(README_BEGIN, 1)[1].split(README_END, 1)[0]
    return [resolve(os.path.join(os.path.dirname(os.path.abspath(readme)), name)) for name in
            re.findall(r"^> Rendered from (\S+)\.$", section, flags=re.MULTILINE)]


def run_date(path: str) -> str:
    return load(path)["provenance"].get("date", "")


def committed(results_dir: str = RESULTS_DIR) -> list[tuple[str, list[str]]]:
    """(path, views) of the results measured on a GPU under results_dir: for each view (a mode,
    or "fwd gluon", see fa2check.ablate.analysis.views) the file that has it on the most cells, the
    newest of those, then the one with most sweeps (a merged file has its last run's date);
    files in the order of their views (fwd, bwd, fwd+bwd, then "fwd gluon")."""
    found = []
    for path in glob.glob(os.path.join(results_dir, "*.json")) + glob.glob(
            os.path.join(results_dir, "*.json.gz")):
        try:
            data = load(path)
        except (ValueError, OSError, json.JSONDecodeError):
            continue
        if data["provenance"].get("device") == "cuda":
            found.append((data["provenance"].get("date", ""), path, views(data),
                          len(data["cells"]), data.get("repeats_done", 0)))
    best = {}
    for date, path, names, n_cells, sweeps in found:
        for view in names:  # a merged file has its last run's date and more sweeps
            if view not in best or (n_cells, date, sweeps) > best[view][:3]:
                best[view] = (n_cells, date, sweeps, path)
    chosen = []
    for date, path, names, *_ in sorted(found, reverse=True):
        mine = [v for v in names if best[v][3] == path]
        if mine:
            chosen.append((path, mine))
    # the modes first, in their usual order, then the second backend's views
    order = lambda view: (" " in view, ("fwd", "bwd", "fwd+bwd").index(view.split(" ")[0]))  # noqa: E731
    return sorted(chosen, key=lambda c: min(map(order, c[1])))
