"""Plot speed benchmark: the figures of a large run, timed one by one.

    python benchmarks/plot_speed.py [--jobs 100000] [--racks 64] [--policy dally] [--out DIR]

Generates a philly-like trace of ``--jobs`` jobs (``dallygym trace generate philly-like --jobs
N``), simulates it at ``--racks`` racks (8 machines x 8 GPUs each), then times each figure of
:mod:`dallygym.plots` on the result -- building the Figure, then saving it as PNG and SVG --
and the process's peak RSS. At 64 racks (4,096 GPUs) the occupancy chart is the aggregated
heat map. Prints a table and, with ``--out``, writes ``plot_speed.csv`` and the figures there.
Speed is a benchmark, never a test.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

from dallygym import plots  # noqa: E402
from dallygym.cluster import ClusterSpec  # noqa: E402
from dallygym.simulate import simulate  # noqa: E402


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--racks", type=int, default=64)
    parser.add_argument("--policy", default="dally")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write plot_speed.csv and the figures here")
    args = parser.parse_args(argv)

    spec = ClusterSpec(racks=args.racks)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.csv"
        subprocess.run([sys.executable, "-m", "dallygym", "trace", "generate", "philly-like", "--jobs",
                        str(args.jobs), "--seed", str(args.seed), "--out", str(trace)], check=True)
        start = time.perf_counter()
        result = simulate(str(trace), spec, policy=args.policy)
        sim_s = time.perf_counter() - start
    print(f"simulated {args.jobs:,} jobs at {args.racks} racks ({spec.num_gpus:,} GPUs) under {args.policy} "
          f"in {sim_s:.1f} s; {len(result.placements):,} placement rows; peak RSS {_peak_rss_mb():,.0f} MB",
          flush=True)

    out = args.out
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    rows = []
    cases = [("occupancy", lambda: plots.occupancy(result, spec)),
             ("utilisation_queue", lambda: plots.utilisation_queue(result)),
             ("jct_cdf", lambda: plots.jct_cdf(result)),
             ("tiers_comm", lambda: plots.tiers_comm(result)),
             ("compare_figures", lambda: plots.compare_figures({args.policy: result}))]
    with tempfile.TemporaryDirectory() as tmp:
        target = out if out is not None else Path(tmp)
        for name, build in cases:
            t0 = time.perf_counter()
            fig = build()
            t1 = time.perf_counter()
            plots.save_figures({name: fig}, target, formats=("png",))
            t2 = time.perf_counter()
            plots.save_figures({name: fig}, target, formats=("svg",))
            t3 = time.perf_counter()
            rows.append({"figure": name, "build_s": t1 - t0, "png_s": t2 - t1, "svg_s": t3 - t2,
                         "svg_kb": (target / f"{name}.svg").stat().st_size / 1024,
                         "peak_rss_mb": _peak_rss_mb()})
            print(f"{name}: build {t1 - t0:.2f} s, png {t2 - t1:.2f} s, svg {t3 - t2:.2f} s", flush=True)
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.float_format", "{:,.2f}".format):
        print(table.to_string(index=False))
    if out is not None:
        table.assign(jobs=args.jobs, racks=args.racks, policy=args.policy, simulate_s=sim_s).to_csv(
            out / "plot_speed.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
