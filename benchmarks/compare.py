"""The paper's evaluation grid: every policy x racks {2, 4, 8, 16} x {batch-500, poisson-411}.

    python benchmarks/compare.py [--racks 2 4 8 16] [--traces batch-500 poisson-411]
                                 [--policies ...] [--workers 2] [--out benchmarks/results]

Writes ``compare.csv`` (one row per run, with its wall time) and ``compare.md``: makespan
normalised to Dally (the paper's Fig. 7), tail queueing delay and mean communication latency
(Fig. 8), the JCT tables at 8 racks (Tables II and III), and the paper's headline claims beside
the same ratios computed from our runs; then two sweeps over knobs the paper leaves open, the
lease (``lease_sweep.csv``) and Dally's auto-tuner history window (``history_sweep.csv``), and
the claims on five other draws of the batch-500 generator (``seed_sweep.csv``).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

import dallygym
from dallygym import ClusterSpec, EngineConfig
from dallygym.compare import compare
from dallygym.policies import POLICIES
from dallygym.policies.dally import DallyPolicy, default_history_s
from dallygym.trace import generate_trace

# The paper's Tables II and III (JCT statistics in seconds, 8 racks), facts from §VI.
PAPER_JCT = {
    "batch-500": {
        "gandiva": (5828719, 183717, 17485823, 39214710),
        "tiresias": (4461998, 2547080, 17841606, 25696135),
        "dally-manual": (3128566, 2552189, 7097646, 8868401),
        "dally": (2828955, 2401390, 5983042, 8395214),
    },
    "poisson-411": {
        "gandiva": (17371514, 22722917, 71362014, 208939883),
        "tiresias": (4329941, 4212795, 15059080, 15390860),
        "dally-manual": (4960727, 2787855, 39298828, 39817762),
        "dally": (2831880, 2595529, 16469069, 16681241),
    },
}

# The paper's headline claims (abstract and §VI): improvement of Dally over a baseline,
# 1 − dally / baseline, as (low %, high %) over the cluster sizes; None where it gives only "up to".
PAPER_CLAIMS = [
    ("makespan_s", "tiresias", "batch-500", "makespan vs Tiresias (batch)", (None, 69)),
    ("makespan_s", "gandiva", "batch-500", "makespan vs Gandiva (batch)", (None, 92)),
    ("jct_mean_s", "tiresias", "batch-500", "average JCT vs Tiresias (batch)", (19, 36)),
    ("jct_mean_s", "gandiva", "batch-500", "average JCT vs Gandiva (batch)", (23, 51)),
    ("jct_mean_s", "tiresias", "poisson-411", "average JCT vs Tiresias (Poisson)", (16, 34)),
    ("comm_mean_s", "tiresias", "batch-500", "communication latency vs Tiresias (batch)", (53, 83)),
    ("queue_p95_s", "tiresias", "batch-500", "P95 queueing delay vs Tiresias (batch)", (58, 71)),
    ("queue_p99_s", "tiresias", "batch-500", "P99 queueing delay vs Tiresias (batch)", (67, 78)),
]


def _cell(args: tuple[str, int, tuple[str, ...]]) -> pd.DataFrame:
    trace, racks, policies = args
    frame = compare(trace, racks, list(policies))
    frame.insert(0, "racks", racks)
    frame.insert(0, "trace", trace)
    return frame


def run_grid(traces, racks, policies, workers: int) -> pd.DataFrame:
    cells = [(t, r, tuple(policies)) for t in traces for r in racks]
    start = time.perf_counter()
    frames = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, frame in enumerate(pool.map(_cell, cells), 1):
            frames.append(frame)
            t, r, _ = cells[i - 1]
            print(f"[{i}/{len(cells)}] {t} {r} racks: {frame['wall_s'].sum():.1f} s "
                  f"({time.perf_counter() - start:.0f} s elapsed)", file=sys.stderr, flush=True)
    return pd.concat(frames, ignore_index=True)


def _md(frame: pd.DataFrame, floatfmt: str = ".2f") -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        cells = [format(v, floatfmt) if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _pivot(grid: pd.DataFrame, trace: str, value: str, scale: float = 1.0) -> pd.DataFrame:
    sub = grid[grid["trace"] == trace]
    table = sub.pivot(index="policy", columns="racks", values=value) / scale
    table = table.reindex([p for p in grid["policy"].unique() if p in table.index])
    table.columns = [f"{c} racks" for c in table.columns]
    return table.reset_index()


def improvement(grid: pd.DataFrame, metric: str, baseline: str, trace: str) -> pd.Series:
    """1 − dally / baseline, in %, per cluster size."""
    sub = grid[grid["trace"] == trace].set_index(["policy", "racks"])[metric]
    return 100 * (1 - sub.loc["dally"] / sub.loc[baseline])


#: The metrics "Dally wins on every metric" is checked on (times: lower is better).
COMPARED_METRICS = ("makespan_s", "jct_mean_s", "jct_median_s", "jct_p95_s", "jct_p99_s", "queue_mean_s",
                    "queue_p95_s", "queue_p99_s", "comm_mean_s")


def _dally_losses(grid: pd.DataFrame, baseline: str) -> list[str]:
    """Where Dally is worse than ``baseline``: "metric on trace at N racks (dally vs baseline)"."""
    out = []
    for (trace, racks), cell in grid.groupby(["trace", "racks"]):
        row = cell.set_index("policy")
        if "dally" not in row.index or baseline not in row.index:
            continue
        for metric in COMPARED_METRICS:
            ours, theirs = row.loc["dally", metric], row.loc[baseline, metric]
            if ours > theirs:
                out.append(f"{metric} on {trace} at {racks} racks ({ours:,.0f} vs {theirs:,.0f})")
    return out


def report(grid: pd.DataFrame, total_wall_s: float, command: str) -> str:
    out = [
        "# Scheduler comparison: the paper's grid",
        "",
        f"Produced by `{command}` (dallygym {dallygym.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()}); {len(grid)} runs in {total_wall_s:.0f} s of wall time on 2 worker processes "
        f"(sum of per-run times {grid['wall_s'].sum():.0f} s; every run's time is in `compare.csv`).",
        "Defaults everywhere: lease 3600 s, restart overhead 0, seed 0, latency preset `dally-paper`.",
        "",
    ]
    if "dally" in set(grid["policy"]):
        out += ["## Makespan normalised to Dally (paper Fig. 7; lower is better)", ""]
        for trace in grid["trace"].unique():
            sub = grid[grid["trace"] == trace]
            dally = sub[sub["policy"] == "dally"].set_index("racks")["makespan_s"]
            norm = sub.assign(norm=sub["makespan_s"] / sub["racks"].map(dally))
            out += [f"### {trace}", "", _md(_pivot(norm, trace, "norm")), ""]
    for trace in grid["trace"].unique():
        out += [f"## {trace}: tail queueing delay and communication latency (paper Fig. 8), hours", ""]
        for metric, label in (("queue_p95_s", "P95 queueing delay"), ("queue_p99_s", "P99 queueing delay"),
                              ("comm_mean_s", "mean communication latency"), ("jct_mean_s", "mean JCT")):
            out += [f"**{label}**", "", _md(_pivot(grid, trace, metric, 3600), ".1f"), ""]
    for trace, table_name in (("batch-500", "Table II"), ("poisson-411", "Table III")):
        sub = grid[(grid["trace"] == trace) & (grid["racks"] == 8)]
        if sub.empty:
            continue
        rows = []
        for p in sub["policy"]:
            r = sub[sub["policy"] == p].iloc[0]
            paper = PAPER_JCT[trace].get(p)
            rows.append({
                "policy": p,
                "average": f"{r.jct_mean_s:,.0f}", "median": f"{r.jct_median_s:,.0f}",
                "P95": f"{r.jct_p95_s:,.0f}", "P99": f"{r.jct_p99_s:,.0f}",
                "paper (avg / median / P95 / P99)": " / ".join(f"{v:,}" for v in paper) if paper else "—",
            })
        out += [f"## JCT at 8 racks, {trace}, seconds (paper {table_name})", "", _md(pd.DataFrame(rows)), ""]
    if {"dally", "tiresias", "gandiva"} <= set(grid["policy"]):
        out += ["## The paper's claims beside ours", "",
                "Improvement = 1 − Dally / baseline, per cluster size (2, 4, 8, 16 racks).", ""]
        rows = []
        for metric, baseline, trace, label, (lo, hi) in PAPER_CLAIMS:
            if trace not in set(grid["trace"]):
                continue
            imp = improvement(grid, metric, baseline, trace)
            ours = ", ".join(f"{v:+.0f} %" for v in imp.to_numpy())
            paper = f"up to {hi} %" if lo is None else f"{lo}–{hi} %"
            rows.append({"claim": label, "paper": paper, "ours (2/4/8/16 racks)": ours})
        out += [_md(pd.DataFrame(rows)), ""]
    return "\n".join(out)


LEASE_SWEEP_H = (1, 4, 12, 24)
LEASE_SWEEP_POLICIES = ("dally", "tiresias", "gandiva")
LEASE_SWEEP_RACKS = (2, 8)


def _lease_cell(args: tuple[int, int, str]) -> dict:
    racks, lease_h, policy = args
    start = time.perf_counter()
    s = dallygym.simulate("batch-500", racks, policy=policy, config=EngineConfig(lease_s=lease_h * 3600.0)).summary
    return {"racks": racks, "lease_h": lease_h, "policy": policy, **s, "wall_s": time.perf_counter() - start}


def _run_cells(run, cells: list, workers: int) -> pd.DataFrame:
    """One row per cell, ``run(cell)`` on ``workers`` processes (the sweeps)."""
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return pd.DataFrame(list(pool.map(run, cells)))


def lease_sweep(workers: int) -> pd.DataFrame:
    """The lease is the knob the paper leaves open that matters most: batch-500 under Dally,
    Tiresias and Gandiva with leases of 1, 4, 12 and 24 h at 2 and 8 racks."""
    cells = [(r, h, p) for r in LEASE_SWEEP_RACKS for h in LEASE_SWEEP_H for p in LEASE_SWEEP_POLICIES]
    return _run_cells(_lease_cell, cells, workers)


#: History windows swept for Dally's auto-tuner (hours; inf = keep every entry), besides the
#: default of 24 h x 512 / cluster GPUs.
HISTORY_SWEEP_H = (12.0, 24.0, 96.0, math.inf)
HISTORY_SWEEP_RACKS = (2, 4, 8, 16)
HISTORY_METRICS = ("makespan_s", "jct_mean_s", "comm_mean_s")


def _history_cell(args: tuple[int, float | None]) -> dict:
    racks, window_h = args
    policy = DallyPolicy(history_s=None if window_h is None else window_h * 3600.0)
    s = dallygym.simulate("batch-500", racks, policy=policy, config=EngineConfig()).summary
    default_h = default_history_s(ClusterSpec(racks)) / 3600.0
    return {"racks": racks, "window_h": default_h if window_h is None else window_h, "default": window_h is None, **s}


def history_sweep(workers: int) -> pd.DataFrame:
    """Dally's auto-tuner history window, which the paper leaves open: batch-500 at every size
    with the default window and with 12 h, 24 h, 96 h and an unlimited one."""
    cells = [(r, h) for r in HISTORY_SWEEP_RACKS for h in (None, *HISTORY_SWEEP_H)]
    return _run_cells(_history_cell, cells, workers)


def history_changes(sweep: pd.DataFrame) -> pd.DataFrame:
    """Each swept window's change against the default window of its size, in %."""
    base = sweep[sweep["default"]].set_index("racks")[list(HISTORY_METRICS)]
    other = sweep[~sweep["default"]]
    changes = 100 * (other.set_index("racks")[list(HISTORY_METRICS)] / base.loc[other["racks"]].to_numpy() - 1)
    return changes.assign(window_h=other["window_h"].to_numpy()).reset_index()


def history_report(sweep: pd.DataFrame) -> str:
    changes = history_changes(sweep)
    shown = pd.DataFrame({
        "racks": changes["racks"],
        "window": [f"{h:g} h" if math.isfinite(h) else "unlimited" for h in changes["window_h"]],
        **{f"{m[:-2]} change %": changes[m] for m in HISTORY_METRICS},
    })
    defaults = sweep[sweep["default"]]
    return "\n".join([
        "## History-window sensitivity (Dally, batch-500; the other knob the paper leaves open)",
        "",
        "Produced by the same command (on by default). Change of each metric against the default window "
        "(" + ", ".join(f"{h:g} h at {r} racks" for r, h in zip(defaults["racks"], defaults["window_h"])) + "), in %.",
        "",
        _md(shown, "+.1f"),
        "",
    ])


def _history_sentence(sweep: pd.DataFrame | None) -> str:
    if sweep is None:
        return ""
    changes = history_changes(sweep)
    worst = {m: changes[m].abs().max() for m in HISTORY_METRICS}
    return (f" Other windows, from 12 h to unlimited, change the makespan by up to {worst['makespan_s']:.0f} %, the "
            f"mean JCT by up to {worst['jct_mean_s']:.0f} % and the communication latency by up to "
            f"{worst['comm_mean_s']:.0f} % (history sweep below).")


#: Generated batch-500 traces (other seeds of the canonical generator) for the robustness runs.
SEED_SWEEP_SEEDS = (11, 12, 13, 14, 15)
SEED_SWEEP_POLICIES = ("dally", "tiresias", "gandiva")


def _seed_cell(args: tuple[int, int, str]) -> dict:
    racks, seed, policy = args
    trace = generate_trace("batch-500", seed=seed)
    s = dallygym.simulate(trace, racks, policy=policy, config=EngineConfig()).summary
    return {"racks": racks, "seed": seed, "policy": policy, **s}


def seed_sweep(racks: list[int], workers: int) -> pd.DataFrame:
    """Dally, Tiresias and Gandiva on five other draws of the batch-500 generator at every size:
    how far the single-trace claims move from one draw to the next."""
    cells = [(r, seed, p) for r in racks for seed in SEED_SWEEP_SEEDS for p in SEED_SWEEP_POLICIES]
    return _run_cells(_seed_cell, cells, workers)


def seed_improvements(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per (racks, seed): Dally's improvement over each baseline, 1 − dally / baseline, in %."""
    wide = sweep.pivot_table(index=["racks", "seed"], columns="policy", values=["makespan_s", "jct_mean_s", "comm_mean_s"])
    out = {}
    for metric in ("makespan_s", "jct_mean_s", "comm_mean_s"):
        for baseline in ("tiresias", "gandiva"):
            out[f"{metric[:-2]} vs {baseline}"] = 100 * (1 - wide[(metric, "dally")] / wide[(metric, baseline)])
    return pd.DataFrame(out).reset_index()


def seed_report(sweep: pd.DataFrame) -> str:
    imp = seed_improvements(sweep)
    cols = [c for c in imp.columns if c not in ("racks", "seed")]
    rows = []
    for racks, cell in imp.groupby("racks"):
        rows.append({"racks": racks, **{c: f"{cell[c].min():+.0f} … {cell[c].max():+.0f}" for c in cols}})
    return "\n".join([
        "## Robustness: the same claims on five other batch-500 draws",
        "",
        "Produced by the same command (on by default): Dally, Tiresias and Gandiva on the batch-500 generator's "
        f"seeds {', '.join(map(str, SEED_SWEEP_SEEDS))}. Dally's improvement (1 − Dally / baseline, %), lowest … "
        "highest over the five draws; every run is in `seed_sweep.csv`.",
        "",
        _md(pd.DataFrame(rows)),
        "",
    ])


def lease_report(sweep: pd.DataFrame) -> str:
    shown = sweep.assign(
        makespan_h=sweep["makespan_s"] / 3600, jct_mean_h=sweep["jct_mean_s"] / 3600,
        jct_median_h=sweep["jct_median_s"] / 3600, queue_p95_h=sweep["queue_p95_s"] / 3600,
        comm_mean_h=sweep["comm_mean_s"] / 3600,
    )[["racks", "lease_h", "policy", "makespan_h", "jct_mean_h", "jct_median_h", "queue_p95_h", "comm_mean_h", "preemptions"]]
    return "\n".join([
        "## Lease sensitivity (batch-500; the knob the paper leaves open)",
        "",
        "Produced by the same command (`--lease-sweep`, on by default). Times in hours.",
        "",
        _md(shown, ".0f"),
        "",
    ])


def _range(values) -> str:
    values = list(values)
    return f"{min(values):.0f}–{max(values):.0f} %"


def _lease_lines(sweep: pd.DataFrame | None) -> list[str]:
    """What the lease sweep says about the JCT gap to Tiresias (nothing without a sweep)."""
    if sweep is None:
        return []
    jct = sweep.pivot_table(index=["racks", "lease_h"], columns="policy", values="jct_mean_s")
    kept = [int(r) for r, cell in jct.groupby(level="racks") if (cell["tiresias"] < cell["dally"]).all()]
    if not kept:
        return ["- *Lease length* (left open by the paper): with some lease Dally has the lower mean JCT at every "
                "size swept (lease sweep below)."]
    return [f"- *Lease length* (left open by the paper) does not explain the gap: longer leases cut Dally's "
            f"preemptions and mean JCT a lot, but Tiresias keeps the lower mean JCT at every lease on "
            f"{' and '.join(map(str, kept))} racks (lease sweep below)."]


def _seed_lines(seeds: pd.DataFrame | None) -> list[str]:
    """How far the claims move on other draws of the batch-500 generator (nothing without them)."""
    if seeds is None:
        return []
    imp = seed_improvements(seeds)
    span = lambda c: f"{imp[c].min():+.0f} to {imp[c].max():+.0f} %"  # noqa: E731
    return [f"- *One trace is one draw.* On five other draws of the batch-500 generator, at every size, Dally's "
            f"improvement over Tiresias ranges over {span('makespan vs tiresias')} in makespan, "
            f"{span('jct_mean vs tiresias')} in mean JCT and {span('comm_mean vs tiresias')} in communication "
            f"latency; over Gandiva, {span('makespan vs gandiva')} in makespan and {span('jct_mean vs gandiva')} in "
            "mean JCT (robustness table below). Single-trace figures, ours and the paper's, are one sample of "
            "these ranges."]


def analysis(grid: pd.DataFrame, sweep: pd.DataFrame | None, history: pd.DataFrame | None = None,
             seeds: pd.DataFrame | None = None) -> str:
    """Where our runs agree with the paper and where they do not, with the reasons we found.
    Numbers are computed from this run; the reasons were found by the sweeps below and by
    reading per-job results (``dallygym simulate --out``)."""
    need = {"dally", "tiresias", "gandiva", "dally-consolidated"}
    if not need <= set(grid["policy"]) or "batch-500" not in set(grid["trace"]):
        return ""
    imp = lambda m, b, t="batch-500": improvement(grid, m, b, t)
    b = grid[grid["trace"] == "batch-500"].set_index(["policy", "racks"])
    racks = sorted(grid["racks"].unique())
    big = max(racks)
    median_ratio = b.loc["dally"]["jct_median_s"] / b.loc["tiresias"]["jct_median_s"]
    t8 = b.loc[("tiresias", 8)] if ("tiresias", 8) in b.index else None
    jct_vs_tiresias = imp("jct_mean_s", "tiresias")
    behind = int((jct_vs_tiresias < 0).sum())
    ahead_at = "every size" if behind == len(racks) else f"{behind} of {len(racks)} sizes"
    exceptions = _dally_losses(grid, "gandiva")
    against_gandiva = (
        "on every metric at every size" if not exceptions
        else "on every metric at every size except " + "; ".join(exceptions)
    )
    lines = [
        "## Where ours agrees with the paper, where it does not, and why",
        "",
        "**Agrees.**",
        "",
        f"- *Makespan.* Dally beats Tiresias by {_range(imp('makespan_s', 'tiresias'))} and Gandiva by "
        f"{_range(imp('makespan_s', 'gandiva'))} on batch-500 (paper: up to 69 % and up to 92 %). The makespan is set "
        "by the few large jobs of network-sensitive models: a 32-GPU MobileNetV3 job cannot fit a machine, and across "
        "machines our latency model (calibrated to Table I) slows it 30-fold, across racks about 190-fold. Tiresias "
        "accepts any placement for low-skew models and makes high-skew ones wait for full consolidation; Gandiva "
        "places network-agnostically. Dally's delay timers keep such jobs on the best tier they can get.",
        f"- *Communication latency.* Dally's mean is {_range(imp('comm_mean_s', 'tiresias'))} lower than Tiresias's "
        f"(paper: 53–83 %); the gap is smallest at {int(imp('comm_mean_s', 'tiresias').idxmin())} racks.",
        f"- *Against Gandiva* Dally's mean JCT on batch-500 is {_range(imp('jct_mean_s', 'gandiva'))} better "
        f"(paper: 23–51 %), and Dally wins {against_gandiva}.",
        "",
        "**Does not agree.**",
        "",
        f"- *Mean JCT and tail queueing against Tiresias.* Ours has Tiresias ahead at {ahead_at} (Dally's mean JCT "
        f"improvement: {', '.join(f'{v:+.0f} %' for v in imp('jct_mean_s', 'tiresias'))} at {', '.join(map(str, racks))} "
        "racks; paper: Dally 19–36 % better). Two mechanisms, both visible in the per-job results:",
        "  1. Dally's Nw_sens priority (paper §IV-B1) offers GPUs first to jobs that have never run (Nw_sens = 0) and "
        "then to the most slowed-down ones. With the paper's lease-based preemption, every round boundary lets the "
        "waiting jobs displace running ones, so the whole batch time-shares the cluster and short jobs are not "
        "let through first: Dally's median JCT is "
        + ", ".join(f"{v:.1f}" for v in median_ratio.to_numpy())
        + f" times Tiresias's at {', '.join(map(str, racks))} racks. The paper itself notes that Dally "
        "does not emphasise JCT when prioritising (§VI-5).",
        "  2. Our Tiresias uses the public Tiresias simulator's queue limits (3,250 and 7,200 GPU-seconds), which a "
        "job passes within its first lease; it then runs in the last queue, first come first served, to completion "
        "(except for starvation promotions). That is close to least-attained-service, which favours short jobs and "
        "the mean JCT."
        + (f" Our Tiresias's median JCT at 8 racks is {t8['jct_median_s']:,.0f} s, against 2,547,080 s in the "
           "paper's Table II: the paper's Tiresias time-shared far more, with settings the paper does not give."
           if t8 is not None else ""),
        *_lease_lines(sweep),
        *_seed_lines(seeds),
        "- *Dally-consolidated* does at least as well as auto-tuned Dally on JCT here (the paper: worse). With this "
        "latency model, spreading a MobileNetV3 or ResNet18 job costs 10–190-fold, while waiting costs little when the "
        "batch time-shares anyway; so waiting for consolidation nearly always pays.",
        f"- *Poisson at {big} racks* is not congested in our trace (queueing delays are 0 for most policies), so "
        "the policies tie; the paper's Poisson runs were chosen to be peak-usage scenarios.",
        "",
        "**Choices.** Nothing was tuned towards the paper's numbers. The lease is 1 h (SPEC default: the paper's "
        "timers are in hours and its reference simulator scales them by the lease). Dally's history window defaults "
        "to 24 h × 512 / cluster GPUs (the paper: a smaller window for larger clusters)."
        + _history_sentence(history)
        + " Tiresias uses the public simulator's limits; Gandiva places with the run's seeded generator.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--racks", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--traces", nargs="+", default=["batch-500", "poisson-411"])
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--no-seed-sweep", dest="seed_sweep", action="store_false",
                        help="skip the runs on other batch-500 draws")
    parser.add_argument("--no-history-sweep", dest="history_sweep", action="store_false",
                        help="skip the history-window runs")
    parser.add_argument("--no-lease-sweep", dest="lease_sweep", action="store_false",
                        help="skip the lease-sensitivity runs")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    grid = run_grid(args.traces, args.racks, args.policies, args.workers)
    total = time.perf_counter() - start
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    grid.to_csv(out / "compare.csv", index=False)
    given = sys.argv[1:] if argv is None else list(argv)
    command = " ".join(["python benchmarks/compare.py", *given])
    text = report(grid, total, command)
    sweep = history = seeds = None
    if args.lease_sweep:
        sweep = lease_sweep(args.workers)
        sweep.to_csv(out / "lease_sweep.csv", index=False)
    if args.history_sweep:
        history = history_sweep(args.workers)
        history.to_csv(out / "history_sweep.csv", index=False)
    if args.seed_sweep:
        seeds = seed_sweep(args.racks, args.workers)
        seeds.to_csv(out / "seed_sweep.csv", index=False)
    text += "\n" + analysis(grid, sweep, history, seeds)
    if sweep is not None:
        text += "\n" + lease_report(sweep)
    if history is not None:
        text += "\n" + history_report(history)
    if seeds is not None:
        text += "\n" + seed_report(seeds)
    (out / "compare.md").write_text(text + "\n")
    print(f"wrote {out / 'compare.csv'} and {out / 'compare.md'} ({len(grid)} runs, {total:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
