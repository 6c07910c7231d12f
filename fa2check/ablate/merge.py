"""One results file from several runs of `fa2check.ablate` that measured the same thing: the
same code, GPU type, versions, cells, timing settings and tile configs. A device call's time
limit can stop a run after one or two sweeps; merging two such runs gives a table with the
sweeps of both (each run's sweeps after the other's, every sample kept).

What may differ between the runs, and is kept per run under provenance["merged_from"]: the
date, the git commit (the kernels' sha256 must match), the command (its --budget-s, --repeats),
the GPU's state, the timeline and each run's correctness gate (every run must have passed the
same contenders). The merged file carries the last run's date, so that it is the newest of its
runs (fa2check.ablate.results.committed). Anything that changes what is timed is refused with the
field that differs.
"""
from __future__ import annotations

import copy

SAME_PROVENANCE = ("device", "gpu", "sms", "driver", "cuda", "cudnn", "torch", "triton",
                   "kernels_sha256", "grid")
SAME_SETTINGS = ("modes", "warmup_ms", "rep_ms", "backends", "math_max_seqlen", "gluon",
                 "gluon_max_seqlen")
PER_RUN = ("date", "git_commit", "command", "host", "gpu_state_before", "gpu_state_after")
PER_RUN_RESULTS = ("clock_log",)  # top-level entries kept per run


class MergeError(ValueError):
    pass


def merge_runs(runs: list[dict], names: list[str], command: str) -> dict:
    """The first run with the samples of the others appended; runs in the order given."""
    if len(runs) < 2:
        raise MergeError("merging needs at least two results files")
    first = runs[0]
    for run, name in zip(runs[1:], names[1:]):
        _check_same(first, run, names[0], name)
    merged = copy.deepcopy(first)
    merged.pop("analysis", None)  # derived; recomputed from the merged samples
    for key in PER_RUN_RESULTS:  # each run's own is kept under merged_from
        merged.pop(key, None)
    for run in runs[1:]:
        for entry, other in zip(merged["cells"], run["cells"]):
            for mode, data in entry["modes"].items():
                for contender, sweeps in other["modes"][mode]["samples"].items():
                    data["samples"][contender] += sweeps
                for key in ("windows", "clock"):  # fa2check.ablate.clocks: pooled like the samples
                    for contender, values in other["modes"][mode].get(key, {}).items():
                        data.setdefault(key, {}).setdefault(contender, []).extend(values)
        for dtype, record in run["matmul"].items():
            merged["matmul"][dtype]["samples"] += record["samples"]
    merged["repeats_done"] = sum(r["repeats_done"] for r in runs)
    # the merged file holds what was measured; a run's own stop shows in merged_from
    merged["settings"]["repeats"] = merged["repeats_done"]
    merged["stopped_by_budget"] = False
    provenance = merged["provenance"]
    provenance["command"] = command
    provenance["date"] = max(r["provenance"].get("date", "") for r in runs)  # measured until
    provenance["git_commit"] = ", ".join(dict.fromkeys(
        str(r["provenance"].get("git_commit")) for r in runs))
    provenance["gpu_state_after"] = runs[-1]["provenance"].get("gpu_state_after")
    provenance["merged_from"] = [
        {"file": name, "repeats_done": r["repeats_done"], "repeats": r["settings"]["repeats"],
         "timeline": r.get("timeline"), **{k: r.get(k) for k in PER_RUN_RESULTS},
         **{k: r["provenance"].get(k) for k in PER_RUN},
         "gate": [{"cell": e["cell"], "gate": e["gate"]} for e in r["cells"]]}
        for r, name in zip(runs, names)]
    return merged


def _check_same(a: dict, b: dict, name_a: str, name_b: str):
    def refuse(what, x, y):
        raise MergeError(f"{name_b} differs from {name_a} in {what}: {y!r} against {x!r}; "
                         "only runs of the same code, GPU, cells, settings and tiles merge")

    for key in SAME_PROVENANCE:
        if a["provenance"].get(key) != b["provenance"].get(key):
            refuse(f"provenance {key}", a["provenance"].get(key), b["provenance"].get(key))
    for key in SAME_SETTINGS:
        if a["settings"].get(key) != b["settings"].get(key):
            refuse(f"setting {key}", a["settings"].get(key), b["settings"].get(key))
    if [e["cell"] for e in a["cells"]] != [e["cell"] for e in b["cells"]]:
        refuse("cells", len(a["cells"]), len(b["cells"]))
    for x, y in zip(a["cells"], b["cells"]):
        cell = x["cell"]
        if x["configs"] != y["configs"]:
            refuse(f"tile configs of cell {cell}", x["configs"], y["configs"])
        passed = lambda e: sorted(n for n, g in e["gate"].items() if g["passed"])  # noqa: E731
        if passed(x) != passed(y):
            refuse(f"the contenders that passed the gate in cell {cell}", passed(x), passed(y))
        for mode, data in x["modes"].items():
            other = y["modes"].get(mode, {})
            if sorted(data["timed"]) != sorted(other.get("timed", [])):
                refuse(f"the contenders timed ({mode}) in cell {cell}", data["timed"],
                       other.get("timed"))
    if set(a["matmul"]) != set(b["matmul"]):
        refuse("matmul dtypes", sorted(a["matmul"]), sorted(b["matmul"]))
