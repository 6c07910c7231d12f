"""python -m fa2check.ablate: time every flag combination of the kernels beside torch SDPA's
backends and show what each improvement of FlashAttention-2 is worth.

  python -m fa2check.ablate                      # GPU: the paper grid, fwd and bwd
                                                 # no GPU: render the newest committed results
  python -m fa2check.ablate --full               # also every cell's table and the tile configs
  python -m fa2check.ablate --grid quick         # every variant and SDPA, forward: ~2 minutes
  python -m fa2check.ablate --retune             # search the tiles, merge them into the table
  python -m fa2check.ablate --seqlen 4096 --head-dim 128 --causal true --mode fwd+bwd
  python -m fa2check.ablate --grid paper --plan  # the planning estimate only
  python -m fa2check.ablate --from ablations/results/X.json [--update-readme]
  python -m fa2check.ablate --merge A.json --merge B.json   # one table from two runs' sweeps
  python -m fa2check.ablate --kernels hopper --hopper-switches --mode fwd --seqlen 8192 \
      --head-dim 128            # also FA2's Hopper-era switch variants: the switches' game

Tiles: every kernel runs the tiles flash_attention would pick (kernels.default_config: the
table of tuned tiles, kernels/tuned_tiles.json, for this GPU, else the heuristic); the run says
which, per key. Kernels: our 8 variants' forward runs on the Hopper chassis on sm_90
(--kernels hopper; its backward on the same chassis, kernels/hopper_backward.py, where that
takes the call), on the Triton kernels elsewhere. --hopper-switches (with --kernels hopper)
also times the Hopper lattice's switch variants, on FA2's tiles (with pingpong or overlap one
K/V stage more where it fits, D80), and adds a second contributions table over the three
switches (warp_specialize, pingpong, overlap; fwd beside FlashAttention-3's H100 ablation; bwd
has warp_specialize and overlap) (docs/decisions.md D66, D85, D87).
--budget-s bounds the whole command, compiling and tuning included.

Every variant's output in a cell is checked against the float64 oracle (on slices, see
fa2check.ablate.cellcheck) before the cell is timed. Writes <stem>.json (every raw sample, configs,
gate results, provenance), <stem>.csv (long format), <stem>.md (all tables), <stem>-tflops.png
and <stem>-contributions.png to --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import time

import torch
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from ..core.environment import ROOT, kernels_sha256, select_device
from ..core.results import resolve
from . import report
from . import results as results_io
from . import tuning
from .analysis import analyse_results
from .contenders import DEFAULT_PEERS, PEERS
from .grids import GRID_MODES, GRIDS, MODES, custom_grid, filter_grid, parse_modes
from .merge import MergeError, merge_runs
from .plots import contributions_plot, tflops_plot
from .results import README_BEGIN, README_END, RESULTS_DIR, base_name, committed, load
from .sweep import KERNEL_BACKENDS, Settings, plan_estimate, run

CELL_OPTIONS = ("grid", "seqlen", "head_dim", "batch", "heads", "heads_kv", "causal", "dtype", "mode")
H200_WORKERS = 15  # the device machine's 16 cores, one left to the main process
README = os.path.join(ROOT, "README.md")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m fa2check.ablate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("cells")
    g.add_argument("--grid", choices=sorted(GRIDS), help="a preset grid (the other cell options filter it)")
    g.add_argument("--seqlen", type=int, action="append", help="repeatable")
    g.add_argument("--head-dim", type=int, action="append", help="repeatable")
    g.add_argument("--batch", type=int, help="custom cells: default 16384 // seqlen")
    g.add_argument("--heads", type=int, help="custom cells: default 2048 // head_dim")
    g.add_argument("--heads-kv", type=int, help="custom cells: default --heads")
    g.add_argument("--causal", choices=("true", "false", "both"), help="default both")
    g.add_argument("--dtype", action="append", choices=("bfloat16", "float16", "float32"))
    g.add_argument("--mode", action="append", help=f"{', '.join(MODES)}; repeatable or comma "
                                                   "separated (default fwd,bwd; --grid quick: "
                                                   "fwd)")
    t = p.add_argument_group("timing")
    t.add_argument("--repeats", type=int, default=3, help="sweeps of the whole grid")
    t.add_argument("--warmup-ms", type=float, default=5.0)
    t.add_argument("--rep-ms", type=float, default=20.0)
    t.add_argument("--kernels", choices=("auto",) + KERNEL_BACKENDS, default="auto",
                   help="the forward of our 8 variants: hopper (kernels/hopper_forward.py, the "
                        "forward of record; fwd+bwd and bwd with kernels/hopper_backward.py) or triton "
                        "(kernels/forward.py); auto: hopper on sm_90 where every cell fits it")
    t.add_argument("--hopper-switches", action="store_true",
                   help="with --kernels hopper: also time FA2 with each combination of "
                        "warp_specialize, pingpong and overlap (FlashAttention-3's ideas on the "
                        "chassis, FA2's tiles, one K/V stage more with pingpong or overlap), "
                        "with their own contributions table (Shapley over the three switches; "
                        "fwd beside FA3's H100 ablation). bwd times warp_specialize and "
                        "overlap only: pingpong is forward-only (D87)")
    t.add_argument("--retune", action="store_true",
                   help="search every needed key's tiles (fa2check.ablate.tuning) and merge the "
                        "winners into the table of tuned tiles (--table-out)")
    t.add_argument("--retune-key", action="append", default=[], metavar="TERMS",
                   help="with --retune: only keys matching these comma-separated field=value "
                        "terms (part, variant, head_dim, causal, band), e.g. "
                        "'part=fwd,head_dim=128,causal=true'; repeatable")
    t.add_argument("--table-out", metavar="FILE",
                   help="with --retune: the table file to merge into (default: "
                        "kernels/tuned_tiles.json, the one the kernels read)")
    t.add_argument("--configs-from", action="append", default=[], metavar="FILE",
                   help="reuse the configs recorded in an earlier results JSON")
    t.add_argument("--tune-seqlen", type=int, default=4096)
    t.add_argument("--tune-rep-ms", type=float, default=10.0)
    t.add_argument("--backends", default=",".join(DEFAULT_PEERS),
                   help="peers timed beside our variants (comma separated; '' for none): "
                        "SDPA's backends, and api, flash_attention(q, k, v) with its defaults "
                        "(backend, variant, tiles: what a user's call runs); opt-in: flex, "
                        "torch's flex_attention under torch.compile (one compile per cell, in "
                        f"its gate). Default: {','.join(DEFAULT_PEERS)}")
    t.add_argument("--gluon", action="store_true",
                   help="fwd mode: also time the Gluon forward of every variant (kernels."
                        "gluon_forward: warp partitioning stated), with its own contributions")
    t.add_argument("--gluon-max-seqlen", type=int, default=4096,
                   help="with --gluon: skip the Gluon kernels above this seqlen (its slowest "
                        "split-K variants take tens of ms a call from 4k)")
    t.add_argument("--math-max-seqlen", type=int, default=4096,
                   help="skip sdpa-math above this seqlen (it materialises the scores)")
    t.add_argument("--budget-s", type=float,
                   help="bound the whole command: no new compiling, tuning, cell or sweep starts "
                        "that would pass it (what was skipped is reported and saved)")
    t.add_argument("--jobs", type=int, help="precompile worker processes (default: cores - 1, <= 15)")
    t.add_argument("--shards", type=int, default=1,
                   help="gate and time the cells in this many processes, one GPU each (cells "
                        "split by predicted cost; a cell's contenders share one GPU)")
    t.add_argument("--fa1-grid", choices=("fa1", "batch-heads"), default="fa1",
                   help="the FA1-style variants' grid: fa1 (default), FA1's own launcher with its "
                        "num_splits heuristics, the FA1 the FA2 paper timed; batch-heads, one "
                        "program per (batch, head), a reference that leaves SMs idle at long "
                        "sequences (D90)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--plan", action="store_true", help="print the planning estimate and exit")
    t.add_argument("--commit", help="git commit to record where the checkout has no .git")
    o = p.add_argument_group("output")
    o.add_argument("--out", help="directory for results (default: ablations/results on a GPU, "
                                 "out/ in the interpreter; none when rendering)")
    o.add_argument("--from", dest="sources", action="append", default=[], metavar="FILE",
                   help="render saved results instead of measuring (repeatable)")
    o.add_argument("--merge", action="append", default=[], metavar="FILE",
                   help="merge the sweeps of runs of the same code, cells, settings and tiles "
                        "into one results file (repeatable, in order; see fa2check.ablate.merge)")
    o.add_argument("--full", action="store_true",
                   help="print every table: the per-cell times and contributions and the tile "
                        "configs too (default: the headline tables, fitted to the terminal)")
    o.add_argument("--markdown", metavar="FILE", help="when rendering: write the tables as markdown")
    o.add_argument("--update-readme", action="store_true",
                   help="when rendering: replace the README's ablation section with the "
                        "headline tables and plots")
    o.add_argument("--no-plots", action="store_true")
    o.add_argument("--bootstrap", type=int, default=1000, help="bootstrap draws")
    args = p.parse_args(argv)
    for option, paths in (("--configs-from", args.configs_from), ("--from", args.sources or []),
                          ("--merge", args.merge or [])):
        for path in paths:
            if not os.path.isfile(resolve(path)):
                p.error(f"{option} {path}: no such file")
    unknown = [b for b in args.backends.split(",") if b and b not in PEERS]
    if unknown:
        p.error(f"--backends {','.join(unknown)}: not one of {','.join(PEERS)}")
    return args


def cells_from(args):
    causals = {"true": [True], "false": [False], "both": [False, True], None: None}[args.causal]
    if args.grid:
        if args.batch or args.heads or args.heads_kv:
            raise SystemExit("--batch/--heads/--heads-kv make custom cells; drop --grid")
        cells = filter_grid(GRIDS[args.grid](), args.seqlen, args.head_dim, causals, args.dtype)
        return cells, args.grid
    if not args.seqlen:
        return GRIDS["paper"](), "paper"
    cells = custom_grid(args.seqlen, args.head_dim or [64], causals or [False, True],
                        args.dtype or ["bfloat16"], args.batch, args.heads, args.heads_kv)
    return cells, "custom"


def settings_from(args, kernels: str = "triton"):
    """The run's Settings; a combination they refuse (--hopper-switches without the Hopper
    kernels or the forward) exits with its reason."""
    modes = args.mode or [GRID_MODES.get(args.grid, "fwd,bwd")]
    try:
        return Settings(modes=parse_modes(modes), repeats=args.repeats,
                        warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, tune=args.retune,
                        retune_keys=tuple(args.retune_key), table_out=args.table_out,
                        kernels=kernels, tune_seqlen=args.tune_seqlen,
                        tune_rep_ms=args.tune_rep_ms,
                        backends=tuple(b for b in args.backends.split(",") if b),
                        math_max_seqlen=args.math_max_seqlen, budget_s=args.budget_s,
                        workers=args.jobs or tuning.default_workers(), seed=args.seed,
                        configs_from=tuple(args.configs_from), gluon=args.gluon,
                        gluon_max_seqlen=args.gluon_max_seqlen, shards=args.shards,
                        hopper_switches=args.hopper_switches, fa1_grid=args.fa1_grid)
    except ValueError as error:
        raise SystemExit(str(error)) from None


def resolve_kernels(choice: str, cells, device: str | None) -> str:
    """--kernels auto: the Hopper chassis on sm_90 (or, planning without a GPU, for the H200)
    where it takes every cell's dtype and head_dim; the Triton kernels otherwise."""
    if choice != "auto":
        return choice
    from kernels.hopper_forward import unsupported

    if device == "cpu" or any(unsupported(c.dtype, c.head_dim) for c in cells):
        return "triton"
    if device == "cuda" and torch.cuda.get_device_capability()[0] != 9:
        return "triton"
    return "hopper"


def print_plan(console, cells, settings, grid, workers=None):
    e = plan_estimate(cells, dataclasses.replace(settings, workers=workers or settings.workers))
    console.print(
        f"plan ({grid}, {len(cells)} cells, modes {','.join(settings.modes)}, kernels "
        f"{settings.kernels}, planning model of "
        f"fa2check.ablate.plan): {e['measurements_per_sweep']} measurements a sweep, "
        f"{e['compile_jobs'][0]} + {e['compile_jobs'][1]} kernels to compile on "
        f"{workers or settings.workers} workers; precompile {e['precompile_tuning_s']:.0f} s, tune "
        f"{e['tune_s']:.0f} s, precompile {e['precompile_final_s']:.0f} s, gate {e['gate_s']:.0f} s, "
        f"sweeps {settings.repeats} x {e['sweep_s']:.0f} s: about {e['total_s'] / 60:.1f} min "
        "on an H200", highlight=False)
    if note := report.switches_line(settings.as_dict()):
        console.print(note, highlight=False)
    return e


def plan_versus_time(results) -> str:
    """The planning estimate beside the time each phase took (saved as results["plan"])."""
    plan, t = results.get("plan") or {}, results["timeline"]
    sweeps = t.get("sweeps_s", [])
    rows = [("precompile + tune", plan.get("precompile_tuning_s", 0) + plan.get("tune_s", 0),
             t.get("precompile_tuning_s", 0) + t.get("tune_s", 0)),
            ("precompile", plan.get("precompile_final_s"), t.get("precompile_final_s")),
            ("gate", plan.get("gate_s"), t.get("gate_s")),
            (f"{len(sweeps)} sweeps", (plan.get("sweep_s") or 0) * len(sweeps), sum(sweeps)),
            ("total", plan.get("total_s"), t.get("total_s"))]
    return "planned / took: " + ", ".join(
        f"{name} {p:.0f} / {r:.0f} s" for name, p, r in rows if p is not None and r is not None)


def measure(args, console, started=None) -> int:
    started = time.perf_counter() if started is None else started

    cells, grid = cells_from(args)
    if args.plan:  # for the H200 (16 cores) unless --jobs says otherwise
        settings = settings_from(args, resolve_kernels(args.kernels, cells, None))
        print_plan(console, cells, settings, grid, workers=args.jobs or H200_WORKERS)
        return 0
    device = select_device()  # sets TRITON_INTERPRET before triton is imported
    settings = settings_from(args, resolve_kernels(args.kernels, cells, device))
    if settings.shards < 1:
        raise SystemExit(f"--shards must be >= 1, got {settings.shards}")
    if device == "cuda":
        if settings.shards > torch.cuda.device_count():
            raise SystemExit(f"--shards {settings.shards}: only {torch.cuda.device_count()} "
                             "GPU(s) visible")
    if device != "cuda" and (args.grid or len(cells) > 8):
        raise SystemExit("no GPU: the interpreter can run only a few small custom cells "
                         "(--seqlen ...); use --plan for an estimate, or --from to render results")

    estimate = print_plan(console, cells, settings, grid) if device == "cuda" else None
    out_dir = args.out or (results_io.RESULTS_DIR if device == "cuda" else "out")
    command = " ".join(["python -m fa2check.ablate"] + [shlex.quote(a) for a in sys.argv[1:]])
    paths = {}

    def on_sweep(results):
        paths.setdefault("json", os.path.join(out_dir, results_io.stem(results, grid) + ".json"))
        results_io.save(results, paths["json"])

    provenance = {"kernels_sha256": kernels_sha256(), "grid": grid}
    if args.commit:
        provenance["git_commit"] = args.commit
    results = run(cells, settings, device, console=console, started=started, command=command,
                  provenance=provenance, on_sweep=on_sweep, plan_s=estimate,
                  progress_factory=lambda label, n: _progress(console, n, label))
    paths.setdefault("json", os.path.join(out_dir, results_io.stem(results, grid) + ".json"))
    return finish(results, paths["json"], args, console)


def finish(results, json_path, args, console) -> int:
    """Analyse; write the JSON (with the analysis), CSV, markdown and plots; render. Exit
    status 1 when a cell failed the gate."""
    analysis = analyse_results(results, n_draws=args.bootstrap, seed=0)
    results["analysis"] = analysis  # derived data, recomputed by --from
    results_io.save(results, json_path)
    base = json_path[:-len(".json")]
    report.write_csv(results, analysis, base + ".csv")
    with open(base + ".md", "w") as f:
        f.write(report.markdown(results, analysis))
    if not args.no_plots:
        tflops_plot(results, analysis, base + "-tflops.png")
        contributions_plot(results, analysis, base + "-contributions.png")
    report.render(results, analysis, console, detail=args.full)
    if results.get("plan"):
        console.print(plan_versus_time(results), highlight=False)
    for what in results.get("skipped_by_budget", []):
        console.print(f"skipped by --budget-s: {what}", highlight=False)
    console.print(f"wrote {base}.json, .csv, .md (every table)" + ("" if args.no_plots else
                                                      ", -tflops.png, -contributions.png"),
                  highlight=False)
    return 1 if any(row["status"].startswith("failed") for d in analysis["modes"].values()
                    for row in d["cells"]) else 0


def other_kernels(results) -> str | None:
    """The sha256 of kernels/ that saved results ran where it is not the tree's; None when they
    ran the tree's kernels (or do not say)."""
    ran = results.get("provenance", {}).get("kernels_sha256")
    return ran if ran and ran != kernels_sha256() else None


def render_files(sources, args, console) -> int:
    """Render saved results (each file's selected views); optional markdown / README. Results
    that ran other kernels than the tree's get one note at the end, not one a file."""
    parts, ran_other = [], {}
    for path, views in sources:
        results = load(path)
        analysis = analyse_results(results, n_draws=args.bootstrap, seed=0)
        if views is not None:
            analysis["same_run"] = analysis["modes"]
            analysis["modes"] = {m: d for m, d in analysis["modes"].items() if m in views}
        report.render(results, analysis, console, source=os.path.relpath(path), detail=args.full)
        if ran := other_kernels(results):
            ran_other[os.path.basename(base_name(path))] = ran[:12]
        base = base_name(path)
        images = [(alt, os.path.relpath(base + suffix, os.path.dirname(README)))
                  for suffix, alt in (("-tflops.png", "TFLOP/s by seqlen"),
                                      ("-contributions.png", "Shapley contributions"))
                  if os.path.exists(base + suffix)]
        parts.append((results, analysis, os.path.relpath(path, os.path.dirname(README)), images))
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            out_base = os.path.join(args.out, os.path.basename(base))
            report.write_csv(results, analysis, out_base + ".csv")
            if not args.no_plots:
                tflops_plot(results, analysis, out_base + "-tflops.png")
                contributions_plot(results, analysis, out_base + "-contributions.png")
    if ran_other:
        console.print(f"note: {'these results' if len(ran_other) > 1 else 'this run'} ran "
                      "other kernels than the tree's (" + kernels_sha256()[:12] + "): "
                      + ", ".join(f"{name} {sha}" for name, sha in ran_other.items())
                      + "; what changed since is in docs/decisions.md", highlight=False)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(report.markdown(r, a, source=s, images=i) for r, a, s, i in parts))
    if args.update_readme:
        headline = "\n".join(report.markdown(r, a, source=s, detail=False, images=i)
                             for r, a, s, i in parts)
        update_readme(headline)
        console.print(f"updated {os.path.relpath(README)}")
    return 0


def merge_files(paths, args, console) -> int:
    """Merge saved runs (fa2check.ablate.merge) and write the merged results like a run's."""
    command = " ".join(["python -m fa2check.ablate"] + [shlex.quote(a) for a in sys.argv[1:]])
    try:
        merged = merge_runs([results_io.load(p) for p in paths],
                            [os.path.relpath(p) for p in paths], command)
    except MergeError as error:
        raise SystemExit(f"--merge: {error}")
    out_dir = args.out or os.path.dirname(os.path.abspath(paths[0]))
    grid = merged["provenance"].get("grid", "custom")
    json_path = os.path.join(out_dir, results_io.stem(merged, grid) + "-merged.json")
    return finish(merged, json_path, args, console)


def update_readme(text: str, path: str = README):
    with open(path) as f:
        readme = f.read()
    if README_BEGIN not in readme or README_END not in readme:
        raise SystemExit(f"{path} has no {README_BEGIN} ... {README_END} section")
    head, rest = readme.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    with open(path, "w") as f:
        f.write(head + README_BEGIN + "\n" + text.strip() + "\n" + README_END + tail)


def _progress(console, total, label="timing"):
    class Bar:
        def __init__(self):
            self.progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                                     transient=True)
            self.task = self.progress.add_task("", total=total)
            self.progress.start()

        def advance(self):
            self.progress.advance(self.task)

        def stop(self):
            self.progress.stop()

    return Bar()


def main(argv=None, started=None) -> int:
    """started: time.perf_counter() when the command began (python -m fa2check.ablate takes it
    before its imports), from which --budget-s and the timeline count. A reader that closes
    the pipe early (`| head`) ends the command quietly, with status 0."""
    try:
        return _main(argv, started)
    except (BrokenPipeError, PipeClosed):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to write
        return 0


class PipeClosed(Exception):
    """The reader of stdout went away (rich's own answer is SystemExit(1))."""


def _pipe_closed():
    raise PipeClosed


def _main(argv=None, started=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)

    console = Console()
    console.on_broken_pipe = _pipe_closed
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = 120  # a log: the headline tables fit; --full prints wider ones whole
    if args.sources:
        return render_files([(path, None) for path in args.sources], args, console)
    if args.merge:
        return merge_files(args.merge, args, console)
    measuring = args.plan or any(getattr(args, o) for o in CELL_OPTIONS)
    if not measuring:
        if not torch.cuda.is_available():
            return render_committed(args, console)
    return measure(args, console, started)


def render_committed(args, console, readme: str = README, results_dir: str = RESULTS_DIR) -> int:
    """Without a GPU: the README's run of record first (the files its ablation section was
    rendered from, every view, as there), then the committed runs newer than it; the older
    ones with --full (or one at a time with --from)."""
    record = [p for p in results_io.readme_runs(readme) if os.path.isfile(p)]
    found = [(p, v) for p, v in committed(results_dir)
             if os.path.abspath(p) not in map(os.path.abspath, record)]
    if not record and not found:
        console.print(f"no GPU here and no committed results under {os.path.relpath(results_dir)}; "
                      "run on a GPU, or render a file with --from")
        return 1
    since = max((results_io.run_date(p) for p in record), default="")
    newer = [(p, v) for p, v in found if results_io.run_date(p) > since]
    older = [(p, v) for p, v in found if (p, v) not in newer]
    shown = [(p, None) for p in record] + newer + (older if args.full else [])
    what = (["the README's run of record"] if record else []) + (
        [f"{len(newer)} newer committed run(s)"] if newer else [])
    console.print("no GPU here: " + ", then ".join(what or ["the committed runs"])
                  + (f", then {len(older)} older one(s)" if older and args.full else
                     f"; {len(older)} older one(s) with --full (or --from FILE)" if older else "")
                  + " (measured where and when each header says)", highlight=False)
    return render_files(shown, args, console)

