"""The paper's grid with jobs sharing links: every policy x racks {2, 4, 8, 16} x {batch-500,
poisson-411}, without contention and under ``fair-share`` at oversubscription 1, 2 and 4; plus
``dally+links`` and ``tiresias+links`` (link-aware placement) and ``dally+load`` (offers judged by
the links' load too); and the engine's cost with contention on.

    python benchmarks/contention.py [--workers 2] [--out benchmarks/results] [--report-only]

Writes ``contention.csv`` (one row per run: the sweep's keys and ``dallygym simulate``'s
summary), ``contention_cost.csv`` and ``contention.md``: how each policy's makespan, mean JCT
and mean communication latency move with the oversubscription; whether the paper's directions
(Dally's makespan, mean JCT and mean communication latency below Tiresias's and Gandiva's)
survive congestion; the link-aware variants against the oblivious ones; the cost.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dallygym
from dallygym import ClusterSpec, EngineConfig, simulate
from dallygym.experiments.sweep import grid, make_backend, sweep
from dallygym.sim.policies import POLICIES
from dallygym.sim.trace import generate_trace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import _md  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
RACKS = (2, 4, 8, 16)
TRACES = ("batch-500", "poisson-411")
OVERSUBSCRIPTION = (1.0, 2.0, 4.0)
#: The two readings of "while a job communicates" (docs/latency.md).
MODES = ("fair-share", "interleaved")
AWARE = ("dally+links", "dally+load", "tiresias+links")
#: The paper's directions checked under congestion: (metric, Dally's rival).
DIRECTIONS = [(m, rival) for m in ("makespan_s", "jct_mean_s", "comm_mean_s") for rival in ("tiresias", "gandiva")]
COST_POLICIES = ("dally", "tiresias", "gandiva")


def run(workers: int, out: Path, staging: Path) -> pd.DataFrame:
    policies = [*POLICIES, *AWARE]
    cells = grid(policies, TRACES, RACKS)
    for mode in MODES:
        cells += grid(policies, TRACES, RACKS, contention=mode, oversubscription=OVERSUBSCRIPTION)
    with make_backend("local", workers) as backend:
        sweep(cells, staging, backend, progress=True)
    frame = pd.read_csv(staging / "results.csv")
    frame.to_csv(out / "contention.csv", index=False)
    return frame


def _setting(row) -> str:
    return "none" if row["contention"] == "none" else f"{row['contention']} {row['oversubscription']:g}:1"


def _best_of(trace, spec: ClusterSpec, policy: str, config: EngineConfig | None, repeats: int) -> float:
    """The least wall time of ``repeats`` in-process runs."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        simulate(trace, spec, policy=policy, config=config)
        times.append(time.perf_counter() - start)
    return min(times)


FAIR_4 = EngineConfig(contention="fair-share", oversubscription=4.0)


def cost(jobs_100k: int = 100_000) -> pd.DataFrame:
    """Wall time of one run without contention and under fair-share at 4:1 (the least of 3 for
    batch-500 at each size; one run each on a philly-like trace of ``jobs_100k`` jobs)."""
    cases = [("batch-500", "batch-500", racks, policy, 3) for racks in RACKS for policy in COST_POLICIES]
    big = generate_trace("philly-like", seed=0, jobs=jobs_100k)
    cases.append((f"philly-like {jobs_100k:,}", big, 8, "dally", 1))
    rows = []
    for label, trace, racks, policy, repeats in cases:
        spec = ClusterSpec(racks, 8, 8)
        none = _best_of(trace, spec, policy, None, repeats)
        fair = _best_of(trace, spec, policy, FAIR_4, repeats)
        rows.append({"trace": label, "racks": racks, "policy": policy, "none_s": none, "fair_share_s": fair})
    frame = pd.DataFrame(rows)
    frame["ratio"] = frame["fair_share_s"] / frame["none_s"]
    return frame


def directions_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per setting: of the paper's directions on every (trace, racks) cell, how many hold."""
    rows = []
    for setting, part in frame.groupby("setting", sort=False):
        held = total = 0
        for (_, _), cell in part.groupby(["trace", "racks"]):
            by = cell.set_index("policy")
            for metric, rival in DIRECTIONS:
                total += 1
                held += bool(by.loc["dally", metric] < by.loc[rival, metric])
        rows.append({"setting": setting, "directions held": f"{held} of {total}", "share": held / total})
    return pd.DataFrame(rows)


def change_table(frame: pd.DataFrame, policies=("dally", "tiresias", "gandiva", "dally-consolidated")) -> pd.DataFrame:
    """Each policy's metric under each oversubscription over its own run without contention
    (geometric mean over the trace x racks cells)."""
    base = frame[frame["setting"] == "none"].set_index(["policy", "trace", "racks"]).sort_index()
    rows = []
    for setting in [s for s in frame["setting"].unique() if s != "none"]:
        part = frame[frame["setting"] == setting].set_index(["policy", "trace", "racks"]).sort_index()
        for policy in policies:
            ratio = {}
            for metric in ("makespan_s", "jct_mean_s", "comm_mean_s"):
                r = part.loc[policy, metric] / base.loc[policy, metric]
                ratio[metric] = float(np.exp(np.log(r).mean()))
            rows.append({"setting": setting, "policy": policy, **{f"{k} / none": v for k, v in ratio.items()}})
    return pd.DataFrame(rows)


def aware_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The link-aware variants over the oblivious ones, per setting, trace and racks."""
    rows = []
    for (setting, trace, racks), cell in frame.groupby(["setting", "trace", "racks"], sort=False):
        by = cell.set_index("policy")
        for aware in AWARE:
            plain = aware.split("+")[0]
            rows.append(
                {
                    "setting": setting,
                    "trace": trace,
                    "racks": racks,
                    "policy": aware,
                    "comm / oblivious": by.loc[aware, "comm_mean_s"] / by.loc[plain, "comm_mean_s"],
                    "makespan / oblivious": by.loc[aware, "makespan_s"] / by.loc[plain, "makespan_s"],
                    "mean JCT / oblivious": by.loc[aware, "jct_mean_s"] / by.loc[plain, "jct_mean_s"],
                }
            )
    return pd.DataFrame(rows)


def report(frame: pd.DataFrame, costs: pd.DataFrame) -> str:
    frame = frame.copy()
    frame["setting"] = frame.apply(_setting, axis=1)
    aware = aware_table(frame)
    at4 = aware[aware["setting"].str.endswith(" 4:1")]
    lines = [
        "# Contention between jobs: the paper's grid under oversubscription",
        "",
        f"Produced by `python benchmarks/contention.py` (dallygym {dallygym.__version__}, Python "
        f"{platform.python_version()}, {platform.machine()}). Every shipped policy and "
        f"{', '.join(f'`{a}`' for a in AWARE)} on {', '.join(TRACES)} at {', '.join(map(str, RACKS))} racks of "
        "8 x 8 GPUs (lease 1 h, latency dally-paper), without contention (`none`) and under each "
        "reading, `--contention fair-share` (jobs on a link send at once) and `interleaved` (on "
        "their average demands), at oversubscription 1, 2 and 4 (a rack uplink carries 1,600, 800 "
        'and 400 GB/s; docs/latency.md, "Contention between jobs"). Every run: `contention.csv`.',
        "",
        "## How the policies move",
        "",
        "Each metric over the same policy's without contention, geometric mean over the 8 trace x racks cells:",
        "",
        _md(change_table(frame), ".3f"),
        "",
        "## The paper's directions under congestion",
        "",
        "Dally below Tiresias and below Gandiva on makespan, mean JCT and mean communication "
        "latency, on each of the 8 cells: 48 directions per setting.",
        "",
        _md(directions_table(frame).drop(columns="share")),
        "",
        "## Link-aware placement against the oblivious policy",
        "",
        "Geometric means over the 8 cells of each setting:",
        "",
        _md(
            aware.groupby(["setting", "policy"], sort=False)[
                ["comm / oblivious", "makespan / oblivious", "mean JCT / oblivious"]
            ]
            .agg(lambda s: float(np.exp(np.log(s).mean())))
            .reset_index()
        ),
        "",
        *[
            f"At {mode} 4:1, `{name}` has lower mean communication latency than `dally` on "
            f"{int((cells['comm / oblivious'] < 1).sum())} of 8 cells and a makespan no longer on "
            f"{int((cells['makespan / oblivious'] <= 1).sum())} of 8."
            for mode in MODES
            for name in ("dally+links", "dally+load")
            for cells in [at4[(at4["policy"] == name) & (at4["setting"] == f"{mode} 4:1")]]
        ],
        "",
        "Per cell:",
        "",
        _md(at4),
        "",
        "## Cost",
        "",
        "Wall time of one in-process `simulate` (the least of 3 runs for batch-500; one run for the "
        "large trace), without contention and under fair-share at 4:1 (interleaved differs only "
        "in the demands):",
        "",
        _md(costs, floatfmt=".2f"),
        "",
        _cost_line(costs),
        "",
    ]
    return "\n".join(lines)


def _cost_line(costs: pd.DataFrame) -> str:
    worst = costs.loc[costs["ratio"].idxmax()]
    return (
        f"Contention on costs {costs['ratio'].min():.2f}-{costs['ratio'].max():.2f} x a run without it; the "
        f"most, {worst['ratio']:.2f} x, for `{worst['policy']}` on {worst['trace']} at {worst['racks']} racks. "
        "The compiled event loop runs under contention and stops for the shares only after an event "
        "that starts or ends a placement across machines."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--staging",
        type=Path,
        default=Path("runs/contention"),
        help="the sweep's resumable results.csv (default runs/contention)",
    )
    parser.add_argument("--jobs-100k", type=int, default=100_000, help="jobs of the large trace of the cost table")
    parser.add_argument("--report-only", action="store_true", help="rewrite contention.md from the CSVs")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        frame = pd.read_csv(args.out / "contention.csv")
        costs = pd.read_csv(args.out / "contention_cost.csv")
    else:
        frame = run(args.workers, args.out, args.staging)
        costs = cost(args.jobs_100k)
        costs.to_csv(args.out / "contention_cost.csv", index=False)
    (args.out / "contention.md").write_text(report(frame, costs))
    print(f"wrote {args.out / 'contention.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
