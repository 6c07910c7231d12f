"""Question: how long will `python -m fa2check.verify --tier full` take with the precompile pass
(D57), from a run's per-case seconds without it? A model, not a measurement.

    python ablations/probes/verify_wall_model.py ablations/results/20261203-h200-verify-full-35193e7.json.gz [--workers 16]

Each case that compiled something the cases of its group before it had not (in the runner's
order) took its seconds to do so; those seconds are split over the compile jobs it was first
to need, and the case's own run time is taken as the median of its group's cases that needed
no new job. Compile jobs and then the groups of cases are scheduled longest first on the
workers (a job goes to the worker that frees first). Cases or jobs the report lacks (cases
added since) are counted and left out.
"""
import argparse
import statistics
import sys

sys.path.insert(0, __file__.rsplit("/ablations/", 1)[0])

from fa2check.core.implementations import columns, default_specs  # noqa: E402
from fa2check.core.results import read_json  # noqa: E402
from fa2check.verify import precompile  # noqa: E402
from fa2check.verify.runner import groups, plan  # noqa: E402
from properties import PROPERTIES  # noqa: E402
from properties.base import calls  # noqa: E402


def lpt(costs, workers):
    """Longest first onto the worker that frees first: the finishing time."""
    free = [0.0] * workers
    for cost in sorted(costs, reverse=True):
        free[free.index(min(free))] += cost
    return max(free, default=0.0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    report = read_json(args.report)
    seconds = {(r["column"], r["property"], r["case"]["id"]): r["seconds"]
               for r in report["results"]}
    tasks = plan("full", columns(default_specs("cuda"), None))
    job_of = {pair: i for i, job in enumerate(precompile.jobs(tasks)) for pair in job}
    job_cost, run_cost, missing = {}, {}, 0
    for phase in groups(tasks, "cuda"):
        for group in phase:
            seen, fresh_cases = set(), []
            for task in group:
                key = (task.column.label, task.property, task.case.id)
                new = {job_of[(task.column, c)] for c in calls(PROPERTIES[task.property], task.case)
                       if (task.column, c) in job_of} - seen - set(job_cost)
                seen |= new
                if key not in seconds:
                    missing += 1
                    continue
                if new:
                    for job in new:
                        job_cost[job] = job_cost.get(job, 0.0) + seconds[key] / len(new)
                else:
                    fresh_cases.append(seconds[key])
                run_cost[key] = None if new else seconds[key]
            typical = statistics.median(fresh_cases) if fresh_cases else 0.0
            for task in group:
                key = (task.column.label, task.property, task.case.id)
                if key in run_cost and run_cost[key] is None:
                    run_cost[key] = typical
    compile_wall = lpt(job_cost.values(), args.workers)
    phase_walls = []
    for phase in groups(tasks, "cuda"):
        phase_walls.append(lpt([sum(run_cost.get((t.column.label, t.property, t.case.id), 0.0)
                                    for t in group) for group in phase], args.workers))
    print(f"case phases, each task alone: {sum(v for v in run_cost.values() if v) / args.workers:.0f} s of summed run time / workers")
    print(f"report: {args.report}, {report['seconds']:.0f} s wall with {report['jobs']} jobs, "
          f"{sum(seconds.values()):.0f} s summed over cases")
    print(f"compile jobs with a cost: {len(job_cost)}, {sum(job_cost.values()):.0f} s summed, "
          f"longest {max(job_cost.values()):.0f} s; tasks not in the report: {missing}")
    print(f"model on {args.workers} workers: precompile {compile_wall:.0f} s + case phases "
          f"{' + '.join(f'{w:.0f}' for w in phase_walls)} s = "
          f"{compile_wall + sum(phase_walls):.0f} s")


if __name__ == "__main__":
    main()
