"""python -m fa2check.gpucheck: every GPU check of a kernel change in one command, one verdict.

Steps, each a process of its own with its own time limit, its log and results in --out:
  verify  python -m fa2check.verify --tier full (ours and, on sm_90, the Hopper chassis's
          variants and switches): every property, the pass rule, on the full tier's shapes
  tests   pytest -m gpu over GPU_TESTS: the regression corpus through every backend, the
          chassis's backward, switches, FA1 splits and persistent grid, the default call's
          kernel table, the
          launch cache (the other GPU tests, larger shapes of what verify covers, run with
          make test-gpu)
  fuzz    python -m fa2check.fuzz over ours, the Hopper chassis and the Gluon forward, every
          variant, from classes compiled ahead (fa2check/fuzz/classes.py); counterexamples
          are saved in --out
verify and the tests run side by side first, then the fuzz campaign alone until the budget
ends (beside the tests' compiles, the first GPU run's campaign drew 5 examples in 159 s). The
verdict is PASS when every step exits 0 (no failed case, test or counterexample) and the
campaign drew --min-examples (3,000 by default; each backend a tenth of it). A JSON record
(provenance, each step's status, seconds and numbers) is written to --out; docs/correctness.md
keeps the runs of record.

  make gpu-check PYTHON=python3               # on the GPU machine, 10 minutes
  python -m fa2check.gpucheck --minutes 5 --min-examples 1000 --out /tmp/check  # cache warm
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from ..core.environment import ROOT, describe_environment, select_device
from ..core.results import write_json

GPU_TESTS = ("tests/test_regressions.py", "tests/test_hopper_backward.py",
             "tests/test_hopper_switches.py", "tests/test_hopper_splits.py",
             "tests/test_hopper_persistent.py", "tests/test_fastest.py",
             "tests/test_launch_cache.py")
FUZZ_IMPLS = "ours,hopper,gluon"
FIRST_SHARE = 0.6  # of the budget, at most, for verify and the tests: the full tier took 165-238 s
# cold on the H200 beside the tests (167 s alone at e5fd722), the tests 169-208 s; at fb27c7d on
# a cold H100 with 9 minutes (half: 270 s) verify took 252 s and the tests were cut at 270 s
# (73 passed in 117 s on the warm machine after), while the fuzz drew 6,966 examples in 236 s
MARGIN_S = 15.0  # for the record and the last summaries
MIN_EXAMPLES = 3000  # a 10-minute check's fuzz examples, all backends together (issue 55): a
# campaign that spends its time compiling or loading kernels checks nothing (14328ab's passed
# with 514); each backend's campaign at least a tenth of it
COLD_MINUTES = 9.4  # the least budget a fresh machine's gate needs: 4ed5158's PASS took 518 s
# with Triton's cache cold; at 4.7 minutes verify's share (141 s) ended inside its compiles
# (137 s of precompiling) and the run gave no verdict on any kernel; at 9.0 (fb27c7d, H100)
# the tests were cut inside theirs; 8fda704 and 27b4abf passed cold at 9.4
WARM_ENTRIES = 300  # Triton cache entries that say an earlier run compiled the gate's kernels
# (the full tier alone is 374 compile jobs)
SHRINK_S = 20  # a counterexample's shrinking, past its campaign's time: the verdict is FAIL
# anyway, and at 0e8500d 140 s of shrinking (each step compiling) left the chassis's and the
# Gluon forward's campaigns 12 s


@dataclass
class Step:
    name: str
    command: list
    log: str
    limit: float
    started: float = 0.0
    seconds: float = 0.0
    returncode: int | None = None
    process: object = field(default=None, repr=False)

    def start(self):
        self.started = time.monotonic()
        self._log = open(self.log, "w")
        # a process group of its own: the time limit stops its workers too
        self.process = subprocess.Popen(self.command, cwd=ROOT, stdout=self._log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def poll(self) -> bool:
        """True once finished (stopped with SIGINT at its limit, SIGKILL 20 s later)."""
        if self.returncode is not None:
            return True
        elapsed = time.monotonic() - self.started
        code = self.process.poll()
        if code is None and elapsed > self.limit:
            os.killpg(self.process.pid, signal.SIGINT if elapsed < self.limit + 20
                      else signal.SIGKILL)
            return False
        if code is None:
            return False
        self.returncode, self.seconds = code, elapsed
        self._log.close()
        return True

    def tail(self, lines: int = 3) -> list[str]:
        with open(self.log, errors="replace") as f:
            return [line.rstrip() for line in f.readlines()[-lines:]]


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m fa2check.gpucheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0, help="the whole budget (default 10)")
    p.add_argument("--out", default=None, help="directory for the logs, results and record "
                   "(default out/gpu-check/<date>)")
    p.add_argument("--fuzz-jobs", type=int, default=None,
                   help="fuzz worker processes (default: the fuzzer's on a GPU, 8: each loads "
                        "every class's kernels)")
    p.add_argument("--test-workers", type=int, default=4, help="pytest-xdist workers")
    p.add_argument("--min-examples", type=int, default=MIN_EXAMPLES,
                   help="fewest fuzz examples for a PASS, all backends together, each backend "
                        f"at least a tenth of it (default {MIN_EXAMPLES}; 0 for a short run)")
    p.add_argument("--commit", help="git commit to record where the checkout has no .git")
    p.add_argument("--cold-ok", action="store_true",
                   help=f"run even where Triton's cache is cold and --minutes is below "
                        f"{COLD_MINUTES} (the steps will stop inside their compiles)")
    return p.parse_args(argv)


def too_short_when_cold(minutes: float, cache_entries: int) -> str | None:
    """Why a budget cannot reach a verdict on a machine whose Triton cache is cold, or None."""
    if minutes >= COLD_MINUTES or cache_entries >= WARM_ENTRIES:
        return None
    return (f"Triton's cache holds {cache_entries} entries (cold): the gate compiles its "
            f"kernels first and needs about {COLD_MINUTES} minutes; --minutes {minutes:g} "
            f"would stop inside the compiles and say nothing of the kernels (--cold-ok runs "
            f"it anyway)")


def triton_cache_entries() -> int:
    from triton import knobs
    try:
        return len(os.listdir(knobs.cache.dir))
    except OSError:
        return 0


def plan(args, out: str) -> tuple[list[Step], Step]:
    """verify and the tests (side by side), and the fuzz campaign after them (its limit set
    when they end)."""
    py = sys.executable
    verify = Step("verify", [py, "-m", "fa2check.verify", "--tier", "full", "--json",
                             os.path.join(out, "verify.json")]
                  + (["--commit", args.commit] if args.commit else []),
                  os.path.join(out, "verify.log"), FIRST_SHARE * args.minutes * 60)
    xdist = ["-n", str(args.test_workers)] if args.test_workers > 1 else []
    tests = Step("tests", [py, "-m", "pytest", "-m", "gpu", "-q", "-rfE", "-p",
                           "no:cacheprovider", *xdist, *GPU_TESTS],
                 os.path.join(out, "tests.log"), FIRST_SHARE * args.minutes * 60)
    # without --fuzz-jobs, the fuzzer's own default on a GPU
    jobs = ["--jobs", str(args.fuzz_jobs)] if args.fuzz_jobs else []
    fuzz = Step("fuzz", [py, "-m", "fa2check.fuzz", "--impl", FUZZ_IMPLS, *jobs,
                         "--shrink-seconds", str(SHRINK_S),
                         "--json", os.path.join(out, "fuzz.json"),
                         "--out", os.path.join(out, "counterexamples")],
                os.path.join(out, "fuzz.log"), 0.0)
    return [verify, tests], fuzz


def run(args, out: str, console) -> list[Step]:
    started = time.monotonic()
    budget = args.minutes * 60 - MARGIN_S
    first, fuzz = plan(args, out)
    for step in first:
        step.start()
    console.print(f"verify (full tier) and the tests side by side, at most "
                  f"{first[0].limit:.0f} s ...", highlight=False)
    while not all(step.poll() for step in first):
        time.sleep(1)
    left = budget - (time.monotonic() - started)
    fuzz.limit = left
    fuzz.command += ["--seconds", f"{max(30.0, left - 25):.0f}"]  # 25 s to report
    fuzz.start()
    console.print(f"fuzz, {left:.0f} s ...", highlight=False)
    while not fuzz.poll():
        time.sleep(1)
    return [*first, fuzz]


def details(step: Step, out: str) -> dict:
    """A step's numbers from its results file (verify, fuzz) or its log's last line (tests)."""
    data = _results(os.path.join(out, f"{step.name}.json"))
    if step.name == "verify" and data:
        return {k: data.get(k) for k in ("counts", "seconds", "interrupted") if k in data}
    if step.name == "fuzz" and data:
        return {"examples": data.get("examples"), "counterexamples": data.get("counterexamples"),
                "campaigns": [{k: c.get(k) for k in (
                    "impl", "examples", "seconds", "examples_per_second",
                    "steady_examples_per_second", "first_of_class_examples",
                    "first_of_class_seconds", "compiled_in_examples", "compiled_classes",
                    "stopped", "closest_call")}
                    | {"counterexample": (c["counterexample"] or {}).get("example")}
                    for c in data.get("campaigns", [data])]}
    return {"last_lines": step.tail()}


def shortfall(fuzz: dict, minimum: int) -> str | None:
    """Why the fuzz step's examples (its details) are too few for a PASS, or None."""
    if minimum <= 0:
        return None
    total = fuzz.get("examples") or 0
    if total < minimum:
        return f"the fuzz campaign drew {total} examples, fewer than {minimum} (--min-examples)"
    # a campaign stopped by a counterexample drew few for that reason, which fails the check
    few = [f"{c['impl']} {c['examples']}" for c in fuzz.get("campaigns") or []
           if (c.get("examples") or 0) < minimum / 10 and not c.get("counterexample")]
    return (f"a backend's campaign drew fewer than {minimum // 10} examples: {', '.join(few)}"
            if few else None)


def reasons(step_records: list, short: str | None) -> list[str]:
    """Why the check fails, one line each, the most telling first: each counterexample (its
    backend and example), then each other failing step (verify's counts, the tests' last line),
    then too few examples; [] for a PASS."""
    found = [f"counterexample in {c['impl']}: {c['counterexample']}"
             for r in step_records for c in r.get("campaigns") or [] if c.get("counterexample")]
    failed = []
    for r in step_records:
        if r["returncode"] == 0 or (r["name"] == "fuzz" and found):
            continue
        detail = json.dumps(r["counts"]) if r.get("counts") else (r.get("last_lines") or [""])[-1]
        failed.append(f"{r['name']} exited {r['returncode']}" + (f": {detail}" if detail else ""))
    return found + failed + ([f"too few examples: {short}"] if short else [])


def _results(path: str) -> dict | None:
    """A step's results file, or None where it wrote none or was stopped while writing it."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(argv=None) -> int:
    args = parse_args(argv)
    device = select_device()
    console = Console(highlight=False)
    if device != "cuda":
        raise SystemExit("make gpu-check needs a CUDA GPU (make test and make verify run on "
                         "the CPU)")
    short_budget = None if args.cold_ok else too_short_when_cold(args.minutes,
                                                                  triton_cache_entries())
    if short_budget:
        raise SystemExit(f"gpu-check not started: {short_budget}")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = args.out or os.path.join(ROOT, "out", "gpu-check", stamp)
    os.makedirs(out, exist_ok=True)
    started = time.monotonic()
    steps = run(args, out, console)
    wall = time.monotonic() - started
    step_records = [{"name": s.name, "command": " ".join(s.command), "returncode": s.returncode,
                     "seconds": round(s.seconds, 1), "limit_seconds": round(s.limit, 1),
                     **details(s, out)} for s in steps]
    short = shortfall(step_records[-1], args.min_examples)
    why = reasons(step_records, short)
    passed = not why
    record = {"environment": describe_environment(device, args.commit),
              "command": " ".join(["python", "-m", "fa2check.gpucheck", *(argv or sys.argv[1:])]),
              "verdict": "PASS" if passed else "FAIL", "seconds": round(wall, 1),
              "budget_seconds": args.minutes * 60, "min_examples": args.min_examples,
              "shortfall": short, "reasons": why, "steps": step_records}
    path = os.path.join(out, "gpu-check.json")
    write_json(path, record)
    table = Table(title=f"gpu-check ({out})")
    for column in ("step", "exit", "seconds", "detail"):
        table.add_column(column)
    for s, r in zip(steps, record["steps"]):
        per_backend = ", ".join(f"{c['impl'].split(':')[-1]} {c['examples']}"
                                for c in r.get("campaigns") or [])
        detail = (f"{r.get('examples')} examples ({per_backend}), "
                  f"{r.get('counterexamples')} counterexamples"
                  if s.name == "fuzz" else json.dumps(r.get("counts")) if s.name == "verify"
                  else (r.get("last_lines") or [""])[-1])
        table.add_row(s.name, str(s.returncode), f"{s.seconds:.0f}", detail)
    console.print(table)
    for line in why:
        console.print(line)
    console.print(f"{record['verdict']}: {wall:.0f} s of {args.minutes * 60:.0f}; record {path}")
    return 0 if passed else 1
