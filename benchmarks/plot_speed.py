"""Plot speed benchmark: the figures (and the HTML report) of a large run, timed one by one.

    python benchmarks/plot_speed.py [--jobs 100000] [--racks 64] [--policy dally]
                                    [--results benchmarks/results] [--figures DIR]

Generates a philly-like trace of ``--jobs`` jobs (``dallygym trace generate philly-like --jobs
N``), simulates it at ``--racks`` racks (8 machines x 8 GPUs each; not timed as plotting), then
times each figure of :mod:`dallygym.experiments.plots` on the result -- building the Figure, then saving it
as PNG and SVG -- and ``dallygym report`` of the run's ``simulate --out`` directory. At 64 racks
(4,096 GPUs) the occupancy chart is the aggregated heat map (by machine, in time bins).

Each case runs twice: once timed (wall clock, nothing traced), once under :mod:`tracemalloc`
for the peak of the Python-heap memory it allocated on top of what was live before it
(``traced_peak_mb``; numpy buffers are traced too). ``peak_rss_mb`` is the process's peak
resident set so far (simulation included). ``plot_total_s`` sums build + PNG + SVG of the
figures; the goal is at most 10 s for all of them at 100k jobs and 64 racks.

With ``--results``, writes ``plot_speed.csv`` and ``plot_speed.md`` there; with ``--figures``,
the figures and the report too. Speed is a benchmark, never a test.
"""

from __future__ import annotations

import argparse
import gc
import platform
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402

import dallygym  # noqa: E402
from dallygym.experiments import plots, report  # noqa: E402
from dallygym.sim.cluster import ClusterSpec  # noqa: E402
from dallygym.sim.simulate import simulate  # noqa: E402

GOAL_S = 10.0


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def _traced_peak_mb(run) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--racks", type=int, default=64)
    parser.add_argument("--policy", default="dally")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", type=Path, default=None, help="write plot_speed.csv and plot_speed.md here")
    parser.add_argument("--figures", type=Path, default=None, help="also keep the figures and report.html here")
    args = parser.parse_args(argv)

    spec = ClusterSpec(racks=args.racks)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.csv"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dallygym",
                "trace",
                "generate",
                "philly-like",
                "--jobs",
                str(args.jobs),
                "--seed",
                str(args.seed),
                "--out",
                str(trace),
            ],
            check=True,
        )
        start = time.perf_counter()
        result = simulate(str(trace), spec, policy=args.policy, progress=False)
        sim_s = time.perf_counter() - start
    print(
        f"simulated {args.jobs:,} jobs at {args.racks} racks ({spec.num_gpus:,} GPUs) under {args.policy} "
        f"in {sim_s:.1f} s (not plotting time); {len(result.placements):,} placement rows; "
        f"peak RSS {_peak_rss_mb():,.0f} MB",
        flush=True,
    )

    rows = []
    cases = [
        ("occupancy", lambda: plots.occupancy(result, spec)),
        ("utilisation_queue", lambda: plots.utilisation_queue(result)),
        ("jct_cdf", lambda: plots.jct_cdf(result)),
        ("tiers_comm", lambda: plots.tiers_comm(result)),
        ("compare_figures", lambda: plots.compare_figures({args.policy: result})),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        target = args.figures if args.figures is not None else Path(tmp)
        target.mkdir(parents=True, exist_ok=True)
        for name, build in cases:
            t0 = time.perf_counter()
            fig = build()
            t1 = time.perf_counter()
            plots.save_figures({name: fig}, target, formats=("png",))
            t2 = time.perf_counter()
            plots.save_figures({name: fig}, target, formats=("svg",))
            t3 = time.perf_counter()
            del fig
            traced = _traced_peak_mb(
                lambda name=name, build=build: plots.save_figures({name: build()}, Path(tmp), formats=("png", "svg"))
            )
            rows.append(
                {
                    "case": name,
                    "build_s": t1 - t0,
                    "png_s": t2 - t1,
                    "svg_s": t3 - t2,
                    "total_s": t3 - t0,
                    "png_kb": (target / f"{name}.png").stat().st_size / 1024,
                    "svg_kb": (target / f"{name}.svg").stat().st_size / 1024,
                    "traced_peak_mb": traced,
                    "peak_rss_mb": _peak_rss_mb(),
                }
            )
            print(
                f"{name}: build {t1 - t0:.2f} s, png {t2 - t1:.2f} s, svg {t3 - t2:.2f} s, "
                f"traced peak {traced:,.0f} MB",
                flush=True,
            )
        # The report of the run's directory: the figures are drawn by `simulate --out` (timed
        # above); the report reads the CSVs and embeds the PNGs.
        run_dir = Path(tmp) / "run"
        result.to_csv(run_dir, extra=lambda staging: plots.save_figures(plots.run_figures(result, spec), staging))
        html = target / "report.html"
        t0 = time.perf_counter()
        report.write_report([run_dir], html)
        t1 = time.perf_counter()
        traced = _traced_peak_mb(lambda: report.write_report([run_dir], Path(tmp) / "again.html"))
        rows.append(
            {
                "case": "report (html)",
                "build_s": t1 - t0,
                "png_s": 0.0,
                "svg_s": 0.0,
                "total_s": t1 - t0,
                "png_kb": float("nan"),
                "svg_kb": float("nan"),
                "html_kb": html.stat().st_size / 1024,
                "traced_peak_mb": traced,
                "peak_rss_mb": _peak_rss_mb(),
            }
        )
        print(
            f"report: {t1 - t0:.2f} s, {html.stat().st_size / 1024:,.0f} kB, traced peak {traced:,.0f} MB", flush=True
        )
    table = pd.DataFrame(rows)
    figures = table[table["case"] != "report (html)"]
    plot_total = float(figures["total_s"].sum())
    verdict = "within" if plot_total <= GOAL_S else "OVER"
    print(
        f"all figures: {plot_total:.2f} s ({verdict} the {GOAL_S:g} s goal); largest traced peak "
        f"{table['traced_peak_mb'].max():,.0f} MB; peak RSS {_peak_rss_mb():,.0f} MB"
    )
    with pd.option_context("display.width", 200, "display.float_format", "{:,.2f}".format):
        print(table.to_string(index=False))
    if args.results is not None:
        args.results.mkdir(parents=True, exist_ok=True)
        table.assign(
            jobs=args.jobs,
            racks=args.racks,
            gpus=spec.num_gpus,
            policy=args.policy,
            placements=len(result.placements),
            simulate_s=sim_s,
            plot_total_s=plot_total,
        ).to_csv(args.results / "plot_speed.csv", index=False)
        lines = [
            "# Plot speed",
            "",
            f"`python benchmarks/plot_speed.py --jobs {args.jobs} --racks {args.racks} --policy {args.policy} "
            f"--results {args.results.as_posix()}` "
            f"(dallygym {dallygym.__version__}, Python {platform.python_version()}, matplotlib "
            f"{matplotlib.__version__}, {platform.machine()}; 2 cores shared with other work).",
            "",
            f"A philly-like trace of {args.jobs:,} jobs on {args.racks} racks ({spec.num_gpus:,} GPUs) under "
            f"{args.policy}: {len(result.placements):,} placement rows; simulated in {sim_s:.1f} s (not counted).",
            f"**All figures: {plot_total:.2f} s** to build and save as PNG and SVG (goal <= {GOAL_S:g} s: {verdict}); "
            f"largest traced peak {table['traced_peak_mb'].max():,.0f} MB; process peak RSS "
            f"{_peak_rss_mb():,.0f} MB (the simulation's included).",
            "",
            "| case | build s | PNG s | SVG s | total s | PNG kB | SVG kB | traced peak MB | peak RSS MB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]

        def kb(v):
            return "" if pd.isna(v) else f"{v:,.0f}"

        for r in rows:
            lines.append(
                f"| {r['case']} | {r['build_s']:.2f} | {r['png_s']:.2f} | {r['svg_s']:.2f} | "
                f"{r['total_s']:.2f} | {kb(r['png_kb'])} | {kb(r['svg_kb'])} | {r['traced_peak_mb']:,.0f} | "
                f"{r['peak_rss_mb']:,.0f} |"
            )
        lines += [
            "",
            f"The report row: `dallygym report` of the run's `simulate --out` directory "
            f"({rows[-1]['html_kb']:,.0f} kB of HTML, the figures embedded as PNG).",
        ]
        (args.results / "plot_speed.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
