"""python -m fa2check.fuzz: hunt for the input that breaks a FlashAttention implementation.

Hypothesis draws problems (batch, MHA/GQA/MQA heads, lengths around the device's tile sizes,
head_dim, dtype, causal), variants, input value distributions and memory layouts
(properties/strategies.py); each example runs the implementation and the float64 oracle, forward
and backward, and applies the pass rule and the properties of make verify (fa2check/fuzz/fuzzer.py
lists the checks). A failure is shrunk to a minimal example, printed with a one-line command and
a Python snippet that reproduce it, and saved as a JSON file in --out (default
~/.local/share/fa2check/counterexamples: a run never writes into the project). Adding one to
the regression corpus (tests/regressions/), which make test replays against our kernels, is a
separate, explicit step: --add-to-corpus FILE. The corpus's examples are tried first on every
run. Exits 1 when a counterexample is found; a replay exits 3 when the implementation does not
take the example (it raised NotImplementedError: nothing was checked).

  python -m fa2check.fuzz                                 # our kernels, every variant
  python -m fa2check.fuzz --impl mykernels:flash_attention  # a modified copy of the kernels
  python -m fa2check.fuzz --impl mymodule:attention       # a function without `variant` too
  python -m fa2check.fuzz --profile ci --out found/       # deterministic, 200 examples
  python -m fa2check.fuzz --seconds 300 --jobs 2 --dtype bfloat16 --head-dim 64
  python -m fa2check.fuzz --impl ours,hopper --seconds 300  # on a GPU: both, 150 s each
  python -m fa2check.fuzz --replay 'EXAMPLE'              # rerun one example (or a saved file)
  python -m fa2check.fuzz --add-to-corpus FILE            # into tests/regressions/
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..core.compiling import compile_class, costliest_first
from ..core.environment import describe_environment, select_device
from ..core.hints import fix_for
from ..core.implementations import Column, builtin, expand, takes_variant
from ..core.interrupts import sigterm_as_interrupt
from ..core.results import write_json

BOOLS = {"true": True, "false": False}
UNBOUNDED = 10 ** 9  # examples of a campaign that --seconds alone bounds


def parse_args(argv=None):
    from .fuzzer import CHECKS, PROFILES

    parser = argparse.ArgumentParser(prog="python -m fa2check.fuzz", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", default=None, metavar="MODULE:FUNC",
                        help="the implementation to fuzz: MODULE:FUNC with flash_attention's "
                             "signature, 'ours' (default), 'hopper', 'gluon' or one of "
                             "sdpa_flash, sdpa_cudnn, sdpa_efficient, sdpa_math; several "
                             "separated by commas are fuzzed one after another, the time budget "
                             "and examples shared out evenly")
    parser.add_argument("--profile", choices=list(PROFILES), default="dev",
                        help="; ".join(f"{k}: {p.description}" for k, p in PROFILES.items()))
    parser.add_argument("--seconds", type=float, default=None,
                        help="time budget for finding a counterexample (default: the profile's)")
    parser.add_argument("--shrink-seconds", type=float, default=None,
                        help="after a counterexample, how long shrinking may run past the time "
                             "budget before the smallest example so far is reported (default 120)")
    parser.add_argument("--max-examples", type=int, default=None,
                        help="default: the profile's; with --seconds, none (the time decides)")
    parser.add_argument("--seed", type=int, default=None, help="default: the profile's (ci: 0), "
                        "else random")
    parser.add_argument("--layout", choices=("bhsd", "bshd"), default="bhsd",
                        help="the layout of q, k, v and o that a MODULE:FUNC takes: bhsd "
                             "(batch, heads, seqlen, head_dim) or bshd (batch, seqlen, heads, "
                             "head_dim); lse is (batch, heads, seqlen_q) in both")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes, each with its own seed (default: one per CPU "
                             "core, up to 16, on a GPU 8; the ci profile: 1, so that it draws "
                             "the same examples everywhere)")
    space = parser.add_argument_group("what to draw from (repeatable; default: everything)")
    space.add_argument("--variant", action="append", default=None, help="e.g. fa2, fa1, "
                       "--variant=-defer+seqpar+splitq (with '=' when it starts with '-')")
    space.add_argument("--dtype", action="append", default=None,
                       choices=("float16", "bfloat16", "float32"))
    space.add_argument("--head-dim", action="append", type=int, default=None)
    space.add_argument("--causal", choices=list(BOOLS), default=None)
    space.add_argument("--distribution", action="append", default=None)
    space.add_argument("--skip-distribution", action="append", default=[], metavar="NAME",
                       help="leave a distribution out (e.g. one whose known open issue would "
                            "stop every worker)")
    space.add_argument("--memory-layout", action="append", default=None, metavar="NAME",
                       help="how q, k, v and dO lie in memory (--list shows the names)")
    space.add_argument("--max-seqlen", type=int, default=None,
                       help="default: twice the largest tile, plus one")
    space.add_argument("--max-heads", type=int, default=None, help="largest heads_q")
    compiled = parser.add_argument_group(
        "compiled classes (fa2check/fuzz/classes.py): draw from kernels and shapes compiled ahead")
    compiled.add_argument("--classes", type=int, default=None, metavar="K",
                          help="kernel classes (variant, dtype, head dims, mask) a campaign "
                               "draws from, each with --shapes shape classes, compiled ahead in "
                               "parallel; 0: draw freely (a new kernel for nearly every "
                               "example). Default: on a GPU 12 (campaigns with other seeds take "
                               "other ones), in the interpreter 0")
    compiled.add_argument("--shapes", type=int, default=2, metavar="N",
                          help="shape classes (batch, heads, layout, lengths modulo 16) per "
                               "kernel class (default 2)")
    compiled.add_argument("--precompile-seconds", type=float, default=None, metavar="S",
                          help="the compiling's share of the time budget (default: up to "
                               "half of --seconds, 150 s at most); classes not compiled by "
                               "then compile when first drawn")
    checks = parser.add_argument_group("checks")
    checks.add_argument("--check", action="append", default=[], metavar="NAME",
                        help=f"add a check ('all': every one); one of {list(CHECKS)}")
    checks.add_argument("--skip-check", action="append", default=[], metavar="NAME",
                        help="leave a check out")
    corpus = parser.add_argument_group("counterexamples and the regression corpus")
    corpus.add_argument("--out", default=None, metavar="DIR",
                        help="where a counterexample is saved (default: "
                             "$XDG_DATA_HOME or ~/.local/share, then fa2check/counterexamples)")
    corpus.add_argument("--no-save", action="store_true", help="do not save a counterexample")
    corpus.add_argument("--corpus", default=None, metavar="DIR",
                        help="the regression corpus: examples tried first, and where "
                             "--add-to-corpus adds (default tests/regressions)")
    corpus.add_argument("--add-to-corpus", action="append", default=[], metavar="FILE",
                        help="add a saved counterexample to the regression corpus (make test "
                             "replays it against our kernels) and exit; repeatable")
    corpus.add_argument("--no-corpus-first", action="store_true",
                        help="do not try the corpus's examples before fuzzing")
    parser.add_argument("--database", default=None, metavar="DIR",
                        help="hypothesis example database (default .hypothesis/fa2check-fuzz for "
                             "dev and nightly, none for ci)")
    parser.add_argument("--replay", default=None, metavar="EXAMPLE|FILE",
                        help="run one example (VARIANT:PROBLEM:DISTRIBUTION:LAYOUT) or one "
                             "corpus entry (a file); exit 3 when the implementation does not "
                             "take it")
    parser.add_argument("--json", dest="json_path", default=None, help="write the outcome here")
    parser.add_argument("--list", action="store_true",
                        help="list the checks, distributions and layouts, and exit")
    return parser.parse_args(argv)


def chosen_checks(add: list[str], skip: list[str], base=None) -> tuple[str, ...]:
    from .fuzzer import CHECKS, DEFAULT_CHECKS

    names = list(base or DEFAULT_CHECKS)
    for name in add:
        names += list(CHECKS) if name == "all" else [name]
    names = [n for n in dict.fromkeys(names) if n not in skip]
    unknown = [n for n in names + list(skip) if n not in CHECKS]
    if unknown:
        raise SystemExit(f"unknown check {unknown[0]!r}; expected one of {list(CHECKS)} or 'all'")
    return tuple(n for n in CHECKS if n in names)


def main(argv=None) -> int:
    # first: TRITON_INTERPRET must be set before kernels (the interpreter's bfloat16 fixes) and
    # triton are imported, and parse_args imports them
    device = select_device()
    args = parse_args(argv)
    args.command = " ".join(["python", "-m", "fa2check.fuzz",
                             *(sys.argv[1:] if argv is None else argv)])

    from kernels import Variant
    from properties.strategies import DISTRIBUTIONS, LAYOUTS, Space

    from . import corpus
    from .fuzzer import CHECKS, PROFILES, _seed

    console = Console(width=console_width(), highlight=False)
    if args.jobs is None:
        args.jobs = default_jobs(args.profile, device)
    if args.list:
        _list(console, CHECKS, DISTRIBUTIONS, LAYOUTS)
        return 0
    corpus_dir = args.corpus or corpus.CORPUS_DIR
    if args.add_to_corpus:
        for path in args.add_to_corpus:
            try:
                added = corpus.add(path, corpus_dir)
            except (OSError, ValueError) as error:
                raise SystemExit(f"--add-to-corpus {path}: {error}") from None
            console.print(f"added {escape(path)} to the regression corpus as "
                          f"{escape(os.path.relpath(added))} (make test replays it against "
                          "our kernels; commit it to keep it)", soft_wrap=True)
        return 0
    replay_entry = None
    if args.replay and os.path.isfile(args.replay):
        with open(args.replay) as f:
            replay_entry = json.load(f)
    impl_spec = args.impl or (replay_entry["impl"] if replay_entry else "ours")
    names = []
    for spec in impl_spec.split(","):
        expanded = expand(spec)
        if len(expanded) != 1:
            raise SystemExit(f"--impl {spec!r} names {len(expanded)} implementations: fuzz one "
                             "implementation at a time (or several, separated by commas)")
        names += expanded
    if args.replay and len(names) > 1:
        raise SystemExit("--replay runs one implementation: name one with --impl")
    explicit_layout = any(a.startswith("--layout") for a in argv or sys.argv[1:])
    try:
        variants = tuple(Variant.parse(v) for v in args.variant) if args.variant else None
        for name in (args.distribution or []) + args.skip_distribution:
            if name not in DISTRIBUTIONS:
                raise ValueError(f"unknown distribution {name!r}; expected one of "
                                 f"{list(DISTRIBUTIONS)}")
        for name in args.memory_layout or ():
            if name not in LAYOUTS:
                raise ValueError(f"unknown memory layout {name!r}; expected one of "
                                 f"{list(LAYOUTS)}")
    except ValueError as error:
        raise SystemExit(str(error)) from None
    campaigns = []
    for impl_name in names:
        layout = args.layout
        if builtin(impl_name):
            layout = "bhsd"  # ours and fa2check's adapters take the harness's own layout
        elif replay_entry and not explicit_layout:
            layout = replay_entry.get("layout", "bhsd")
        try:
            impl = Column(impl_name, str(Variant()), impl_name).load()
        except (ImportError, AttributeError) as error:
            fix = fix_for(error, impl_name)
            raise SystemExit(f"--impl {impl_name}: {type(error).__name__}: {error}"
                             + (f"\n  fix: {fix}" if fix else "")) from None
        with_variant = takes_variant(impl)
        base = corpus.replay_checks(replay_entry) if replay_entry else None
        checks = chosen_checks(args.check, args.skip_check, base)
        if args.replay:
            args.layout = layout
            return _replay(console, escape, args, impl, impl_name, replay_entry, checks, device)
        space = Space.for_device(
            device == "cuda", impl=impl_name,
            variants=variants if with_variant else (Variant(),),  # else one: every call's alike
            dtypes=_tuple(args.dtype), head_dims=_tuple(args.head_dim),
            causal=(BOOLS[args.causal],) if args.causal else None,
            distributions=_tuple([d for d in args.distribution or DISTRIBUTIONS
                                  if d not in args.skip_distribution]),
            layouts=_tuple(args.memory_layout), max_seqlen=args.max_seqlen,
            max_heads_q=args.max_heads)
        explicit = [] if args.no_corpus_first else [e for e in corpus.examples(corpus_dir)
                                                    if space.contains(e)]
        if not with_variant:
            console.print(f"{escape(impl_name)} has no `variant` parameter: examples are drawn "
                          "with one variant", soft_wrap=True)
        campaigns.append((impl_name, layout, space, checks, explicit))
    share = len(campaigns)
    started = time.monotonic()
    seed = _seed(args.profile, args.seed)
    budget = args.seconds if args.seconds is not None else PROFILES[args.profile].seconds
    spaces, precompiled = _compiled_classes(console, args, [(c[0], c[2]) for c in campaigns],
                                            device, budget, seed, [c[4] for c in campaigns])
    results = []
    for n, ((impl_name, layout, _, checks, explicit), space) in enumerate(zip(campaigns, spaces)):
        # each campaign its share of what is left, so that one that ends early leaves its time
        left = max(1.0, (budget - (time.monotonic() - started)) / (share - n)) if budget \
            else budget
        results.append(_campaign(console, escape, args, impl_name, space, checks, explicit,
                                 corpus_dir, device, layout, share, seed, left, precompiled))
    if args.json_path:
        record = results[0][1] if share == 1 else {
            "command": args.command, "environment": results[0][1]["environment"],
            "campaigns": [r for _, r in results],
            "examples": sum(r["examples"] for _, r in results),
            "seconds": sum(r["seconds"] for _, r in results),
            "counterexamples": sum(r["counterexample"] is not None for _, r in results)}
        write_json(args.json_path, record)
        console.print(f"wrote {escape(args.json_path)}", soft_wrap=True)
    return max(status for status, _ in results)


# on a GPU, worker processes: each loads every compiled class's kernels once (the H200 at
# 4985a2d: 8 workers drew 54 examples/s over 137 s, 15 workers 1.1/s over 142 s, most of it
# loading and compiling the first example of each class in each process)
GPU_JOBS = 8


def default_jobs(profile: str, device: str = "cpu") -> int:
    """One worker a core (up to 16; on a GPU GPU_JOBS); the ci profile one, so that it draws
    the same examples on every machine."""
    if profile == "ci":
        return 1
    return min(os.cpu_count() or 1, GPU_JOBS if device == "cuda" else 16)


def console_width() -> int | None:
    """A terminal's own width; in a log or a pipe COLUMNS, else 120 (the tables wrap to it)."""
    if sys.stdout.isatty():
        return None
    return int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else 120


def _tuple(values):
    return tuple(dict.fromkeys(values)) if values else None


def _campaign(console, escape, args, impl_name, space, checks, explicit, corpus_dir, device,
              layout, share, seed, remaining, precompiled):
    """One implementation's campaign: `remaining` seconds, its `share`-th of the examples;
    (exit status, record)."""
    from . import corpus
    from .fuzzer import PROFILES, Tally, fuzz, fuzz_parallel, merge

    profile = PROFILES[args.profile]
    timed = args.seconds is not None and args.max_examples is None  # the time alone decides
    max_examples = UNBOUNDED if timed else max(1, (args.max_examples or profile.max_examples)
                                                // share)
    started = time.monotonic()
    console.print(f"[bold]fa2check fuzz[/]: {escape(impl_name)} on {device}, profile "
                  f"{args.profile} (" + ("" if timed else f"{max_examples} examples or ")
                  + (f"{remaining:.0f} s" if remaining else "") + f"), {args.jobs} job(s)",
                  soft_wrap=True)
    console.print(f"checks: {', '.join(checks)}", soft_wrap=True)
    console.print(f"space: {escape(space.describe())}", soft_wrap=True)
    if explicit:
        console.print(f"first: {len(explicit)} example(s) of the regression corpus "
                      f"({os.path.relpath(corpus_dir)})", soft_wrap=True)

    kwargs = dict(space=space, device=device, profile=args.profile, checks=checks,
                  max_examples=max_examples, seconds=remaining, seed=seed,
                  database=args.database, explicit=explicit, layout=layout)
    if args.shrink_seconds is not None:
        kwargs["shrink_seconds"] = args.shrink_seconds
    live = Tally(on_gpu=space.on_gpu)
    sigterm_as_interrupt()
    interrupted = False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        bar = progress.add_task("fuzzing", total=None if timed else max_examples, rate="")

        def on_tick(tick):
            live.add(tick)
            elapsed = time.monotonic() - started
            label = "shrinking" if live.shrink_examples else "fuzzing"
            progress.update(bar, completed=live.examples, description=label,
                            rate=f"{live.examples / max(elapsed, 1e-9):.2f} ex/s"
                                 + (f", {live.shrink_examples} shrink steps"
                                    if live.shrink_examples else ""))

        try:
            if args.jobs > 1:  # the workers load the implementation by name
                outcome = merge(fuzz_parallel(impl_name, args.jobs, on_tick=on_tick, **kwargs),
                                time.monotonic() - started)
            else:
                impl = Column(impl_name, "", impl_name).load()
                outcome = fuzz(impl, impl_name, on_tick=on_tick, **kwargs)
        except KeyboardInterrupt:
            interrupted = True
            outcome = None
    elapsed = time.monotonic() - started
    if interrupted:
        from .fuzzer import Outcome

        console.print(f"[red]interrupted after {elapsed:.0f} s[/]")
        outcome = Outcome(impl_name, live, elapsed, "interrupted")

    _summary(console, escape, outcome, elapsed)
    if outcome.lse_missing:
        console.print(f"[yellow]no lse[/]: {escape(impl_name)} {escape(outcome.lse_missing)}: "
                      "lse_bounds and the lse parts of the other checks were left out; o and "
                      "its gradients were checked", soft_wrap=True)
    if outcome.failure is None and not interrupted:
        ran = [c for c in checks if not (outcome.lse_missing and c == "lse_bounds")]
        console.print(f"[green]no counterexample[/]: {outcome.tally.examples} examples passed "
                      f"every check ({', '.join(ran)})", soft_wrap=True)
    saved = None
    if outcome.failure is not None:
        report = outcome.failure
        command = corpus.command(impl_name, report.example, checks, layout)
        console.print(f"\n[bold red]COUNTEREXAMPLE[/] {escape(str(report.example))}",
                      soft_wrap=True)
        console.print(f"  {escape(report.message)}", soft_wrap=True)
        if report.traceback:
            console.print(escape(report.traceback), soft_wrap=True)
        if report.fix and not builtin(impl_name):
            console.print(f"fix: {escape(report.fix)}", soft_wrap=True)
        console.print("reproduce:", soft_wrap=True)
        console.print(f"  {escape(command)}", soft_wrap=True)
        console.print("python:", soft_wrap=True)
        for line in corpus.snippet(impl_name, report.example, checks, device,
                                   layout).splitlines():
            console.print(f"  {escape(line)}", soft_wrap=True)
        if not args.no_save:
            entry = corpus.entry(report, impl_name, checks, device, args.command, layout)
            saved = corpus.save(entry, args.out or corpus.out_dir())
            console.print(f"saved to {escape(saved)}", soft_wrap=True)
            console.print("to add it to the regression corpus that make test replays against "
                          "our kernels:", soft_wrap=True)
            console.print(f"  python -m fa2check.fuzz --add-to-corpus {escape(shlex.quote(saved))}",
                          soft_wrap=True)
    record = {
        "environment": describe_environment(device), "command": args.command,
        "impl": impl_name, "layout": layout, "lse_missing": outcome.lse_missing,
        "profile": args.profile, "seed": outcome.seed, "jobs": args.jobs,
        "checks": list(checks), "space": space.describe(), "seconds": elapsed,
        "compiled_classes": (None if precompiled is None else
                             {"classes": len(space.classes), **precompiled.as_dict()}),
        "stopped": outcome.stopped, "examples_per_second": outcome.tally.examples / elapsed
        if elapsed else 0.0, **outcome.tally.as_dict(),
        "counterexample": None if outcome.failure is None else {
            "example": outcome.failure.example.as_dict(),
            "failed": outcome.failure.failed_checks, "results_failed": outcome.failure.failed,
            "message": outcome.failure.message,
            "reproduce": corpus.command(impl_name, outcome.failure.example, checks, layout),
            "saved": saved},
    }
    return (1 if outcome.failure is not None or interrupted else 0), record


def _compiled_classes(console, args, impls_and_spaces, device, seconds, seed,
                      corpus_examples):
    """Each implementation's space narrowed to compiled classes (fa2check/fuzz/classes.py),
    every class compiled ahead in one pool; and what precompiling did (None where classes are
    off: --classes 0, the interpreter's default)."""
    from . import classes

    kernels = args.classes if args.classes is not None else (
        classes.KERNEL_CLASSES if device == "cuda" else 0)
    if kernels == 0:
        return [space for _, space in impls_and_spaces], None
    spaces = [classes.with_classes(space, kernels, args.shapes, seed)
              for _, space in impls_and_spaces]
    budget = args.precompile_seconds
    if budget is None:
        budget = min(150.0, seconds / 2) if seconds else 150.0
    jobs = {}  # by compile class: the corpus's examples (run first) and the classes
    for (impl_name, _), space, explicit in zip(impls_and_spaces, spaces, corpus_examples):
        for example in explicit:
            column, call = classes.call_of(example, impl_name)
            jobs.setdefault(compile_class(column, call), [(column, call)])
        for compiled in space.classes:
            for job in classes.representatives(compiled, impl_name, space):
                jobs.setdefault(compile_class(*job[0]), job)
    n_classes = sum(len(space.classes) for space in spaces)
    with Progress(TextColumn("compiling {task.fields[what]}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as progress:
        bar = progress.add_task("", total=len(jobs), what=f"{n_classes} classes")
        done = classes.precompile(costliest_first(jobs.values()), device,
                                  classes.workers(), budget,
                                  lambda n, total: progress.update(bar, completed=n))
    console.print(f"compiled classes: {n_classes} ({args.shapes} shapes for each kernel class); "
                  f"precompiled {done.done} of {done.planned} jobs in {done.seconds:.0f} s "
                  f"({done.cpu_seconds:.0f} CPU-s on {done.workers} workers)", soft_wrap=True)
    return spaces, done


def _summary(console, escape, outcome, elapsed):
    tally = outcome.tally
    rate = tally.examples / elapsed if elapsed else 0.0
    stopped = {"done": "all examples run", "time": "time budget spent",
               "counterexample": "counterexample found", "stopped": "stopped",
               "interrupted": "interrupted"}[outcome.stopped]
    console.print(f"\n{tally.examples} examples in {elapsed:.1f} s ({rate:.2f} examples/s; "
                  f"{tally.example_seconds / max(tally.examples, 1):.2f} s each), "
                  f"{tally.shrink_examples} shrink steps, {tally.rejected} rejected as "
                  f"unsupported; {stopped}" + (f"; seed {outcome.seed}" if outcome.seed is not None
                                               else ""), soft_wrap=True)
    steady = tally.steady_rate()
    if tally.first_examples:
        console.print(f"{tally.first_examples} examples were the first of their compiled class "
                      f"in their process ({tally.first_seconds:.1f} s, compiling or loading "
                      "kernels)" + (f"; steady state {steady:.1f} examples/s (the later half "
                                    "of the run)" if steady is not None else ""),
                      soft_wrap=True)
    compiles = tally.compiles
    if compiles.examples:
        top = "; ".join(f"{n}x {escape(kernel)}" for kernel, n in compiles.kernels.most_common(3))
        console.print(f"{compiles.examples} examples compiled kernels the precompile did not "
                      f"({sum(compiles.kernels.values())} compiles, {compiles.seconds:.0f} s): "
                      f"{top}", soft_wrap=True)
    table = Table(title="coverage (examples per class)", show_lines=False)
    table.add_column("dimension")
    table.add_column("class: examples")
    for key, counter in tally.coverage.items():
        cells = ", ".join(f"{escape(str(value))}: {n}" for value, n in sorted(
            counter.items(), key=lambda item: (-item[1], item[0])))
        table.add_row(key, cells)
    if tally.coverage:
        console.print(table)
    if tally.closest:
        ratio, example = tally.closest
        console.print(f"closest call: worst error/allowed ratio {ratio:.3g} at "
                      f"{escape(example)}", soft_wrap=True)


def _replay(console, escape, args, impl, impl_name, entry, checks, device) -> int:
    from properties.strategies import Example

    from ..core.implementations import Unsupported
    from . import corpus
    from .fuzzer import check_example

    example = (Example.from_dict(entry["example"]) if entry else Example.parse(args.replay))
    try:
        report = check_example(impl, example, device, checks, args.layout)
    except Unsupported as refusal:  # neither a pass nor a failure: its own exit status
        console.print(f"[yellow]NOT RUN[/] {escape(impl_name)} {escape(str(example))}: the "
                      f"implementation does not take it ({escape(str(refusal))})", soft_wrap=True)
        return 3
    for check in report.checks:
        colour = "green" if check.passed else "red"
        console.print(f"[{colour}]{escape(str(check) if check.passed else _describe(check))}[/]",
                      soft_wrap=True)
    if report.error:
        console.print(f"[red]raised {escape(report.error)}[/]\n{escape(report.traceback)}",
                      soft_wrap=True)
    verdict = "[green]PASS[/]" if report.passed else "[red]FAIL[/]"
    console.print(f"{verdict} {escape(impl_name)} {escape(str(example))} "
                  f"({report.seconds:.2f} s)", soft_wrap=True)
    if not report.passed:
        console.print(f"  {escape(corpus.command(impl_name, example, checks, args.layout))}",
                      soft_wrap=True)
    return 0 if report.passed else 1


def _describe(check):
    from .fuzzer import describe

    return describe(check)


def _list(console, checks, distributions, layouts):
    from .fuzzer import DEFAULT_CHECKS

    console.print("[bold]checks[/] (* default)")
    for name, text in checks.items():
        mark = "*" if name in DEFAULT_CHECKS else " "
        console.print(f" {mark} {name}: {text}", soft_wrap=True)
    console.print("[bold]distributions[/]")
    for d in distributions.values():
        judged = ("pass rule or extreme_logits' bound" if d.judge == "pass_rule"
                  else "extreme_logits' bound") + (
            "" if d.backward_dtypes else ", forward only") + (
            f", gradients for {', '.join(d.backward_dtypes)}"
            if d.backward_dtypes and len(d.backward_dtypes) < 3 else "")
        console.print(f"   {d.name}: {d.description} [dim]({judged})[/]", soft_wrap=True)
    console.print(f"[bold]memory layouts[/] (--memory-layout): {', '.join(layouts)}")

