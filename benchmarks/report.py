"""The benchmark report: every heuristic and the learned agents on held-out traces.

    python benchmarks/report.py [--agent agents/runs/ppo-hidden ...] [--racks 2 4 8 16]
                                [--batch-traces ...] [--poisson-traces ...] [--out DIR]
                                [--workers N] [--backend local|ray [--address auto|HOST:PORT]]

Runs every agent x racks x {held-out batch, held-out Poisson} trace, plus the question of the
project -- does a learned agent beat auto-tuned Dally? -- on every held-out batch trace at 8
racks and on the imported Helios-format trace. Writes ``report.csv``, ``report.md`` and PNG plots
(makespan normalised to Dally, JCT CDF, mean communication latency, utilisation and
jobs-remaining timelines at 8 racks) to ``--out``. Heuristics run natively; learned agents act
in the environment of their saved config (``Dally-v0`` offers or ``DallyQueue-v0`` picks) with
the observation mode they were trained with. Every run is one task
of ``dallygym.experiments.sweep`` (in this process by default; ``--workers``/``--backend`` fan them out).
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
from dallygym import ClusterSpec
from dallygym.experiments.sweep import make_backend, run_ordered
from dallygym.learning.trainer import LearnedAgent, is_queue_env, load_agent, run_agent, training_curve
from dallygym.sim.metrics import SUMMARY_KEYS
from dallygym.sim.policies import POLICIES

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "traces" / "heldout"
#: The committed learned agents: ``Dally-v0`` offers (``ppo-*``) and ``DallyQueue-v0`` picks at 8
#: racks (``queue-ppo-*``; the course-sized ``queue-small-*`` runs are for their own cluster).
DEFAULT_AGENTS = [
    str(p.parent)
    for pattern in ("ppo-*/policy.pth", "queue-ppo-*/policy.pth")
    for p in sorted((ROOT / "agents" / "runs").glob(pattern))
]
DEFAULT_BATCH = [str(HELDOUT / f"batch-500-seed{s}.csv") for s in (2001, 2002, 2003)]
DEFAULT_POISSON = [str(HELDOUT / f"poisson-411-seed{s}.csv") for s in (2001, 2002)]
DEFAULT_IMPORTED = [str(HELDOUT / "helios-imported.csv")]
TIMELINE_AGENTS = ("dally", "tiresias", "gandiva")


class OracleThresholdProbe:
    """A knowledge probe, not a learned agent: with the oracle's speed factors in view, accept
    the most consolidated offered tier whose speed factor is at least ``threshold``, else wait.
    It measures what knowing each job's network sensitivity is worth to a simple rule."""

    sensitivity, reward = "oracle", "jct"

    def __init__(self, threshold: float) -> None:
        from dallygym.envs.offer import OBS_FEATURES

        self.threshold = threshold
        self.name = f"oracle-threshold-{threshold:g}"
        self._speed = OBS_FEATURES.index("speed_machine")

    def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
        for tier in range(3):
            if action_masks[1 + tier] and observation[self._speed + tier] >= self.threshold:
                return np.int64(1 + tier), state
        return np.int64(0), state


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
    except ImportError:  # the agents extra brings tqdm; without it, no bar
        return None
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False)


def _label(name: str, agent) -> str:
    return agent.name if isinstance(agent, LearnedAgent) else name


def _run_one(job) -> tuple[dict, object]:
    """One agent on one (workload, trace, racks) cell: its row and its full result."""
    label, agent, (workload, trace, racks), spec = job
    start = time.perf_counter()
    result = run_agent(agent, trace, spec)
    row = {
        "agent": label,
        "workload": workload,
        "trace": Path(trace).stem,
        "racks": racks,
        **{k: result.summary[k] for k in SUMMARY_KEYS},
        "wall_s": time.perf_counter() - start,
    }
    return row, result


def run_all(agents: dict, cells: list[tuple[str, str, int]], spec_of, workers=1) -> tuple[pd.DataFrame, dict]:
    """Run every agent on every (workload, trace, racks) cell, each run one task on ``workers``
    (local processes or a ``dallygym.experiments.sweep`` backend; one: this process). Returns the rows and the
    full results of every run (the plots use the 8-rack runs on each workload's first trace)."""
    jobs = [(label, agent, cell, spec_of(cell[2])) for label, agent in agents.items() for cell in cells]
    bar = _progress(len(jobs), "runs")
    outcomes = run_ordered(_run_one, jobs, workers, on_result=None if bar is None else lambda i, r: bar.update(1))
    if bar is not None:
        bar.close()
    rows = [row for row, _ in outcomes]
    kept = {(row["agent"], row["workload"], row["trace"], row["racks"]): result for row, result in outcomes}
    return pd.DataFrame(rows), kept


def _md(frame: pd.DataFrame, fmt: str = ".1f") -> str:
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(format(v, fmt) if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines)


def goal_table(rows: pd.DataFrame, racks: int, learned: list[str]) -> pd.DataFrame:
    """Mean over the held-out batch traces at ``racks``: mean JCT and makespan per agent, and
    each agent's change against Dally (negative = better than Dally)."""
    sub = rows[(rows["workload"] == "batch") & (rows["racks"] == racks)]
    per_trace = sub.pivot_table(index="agent", columns="trace", values=["jct_mean_s", "makespan_s"])
    dally_jct = per_trace.loc["dally", "jct_mean_s"]
    dally_mk = per_trace.loc["dally", "makespan_s"]
    out = pd.DataFrame(
        {
            "mean JCT (h)": per_trace["jct_mean_s"].mean(axis=1) / 3600,
            "JCT vs dally (%)": (100 * (per_trace["jct_mean_s"] / dally_jct - 1)).mean(axis=1),
            "makespan (h)": per_trace["makespan_s"].mean(axis=1) / 3600,
            "makespan vs dally (%)": (100 * (per_trace["makespan_s"] / dally_mk - 1)).mean(axis=1),
            "worst-trace JCT vs dally (%)": (100 * (per_trace["jct_mean_s"] / dally_jct - 1)).max(axis=1),
            "worst-trace makespan vs dally (%)": (100 * (per_trace["makespan_s"] / dally_mk - 1)).max(axis=1),
        }
    )
    order = [a for a in [*learned, *POLICIES] if a in out.index]
    order += [a for a in out.index if a not in order]
    return out.loc[order].reset_index().rename(columns={"index": "agent"})


def plots(rows: pd.DataFrame, kept: dict, out: Path, plot_racks: int) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    agents = list(dict.fromkeys(rows["agent"]))
    first = rows[rows["workload"].isin(["batch", "poisson"])].groupby("workload", sort=False)["trace"].first()

    # Makespan normalised to Dally, per workload, grouped by cluster size.
    fig, axes = plt.subplots(1, len(first), figsize=(6 * len(first), 4), squeeze=False)
    for ax, (workload, trace) in zip(axes[0], first.items()):
        sub = rows[(rows["workload"] == workload) & (rows["trace"] == trace)]
        table = sub.pivot(index="agent", columns="racks", values="makespan_s")
        racks = list(table.columns)
        norm = table / table.loc["dally"]
        width = 0.8 / len(agents)
        for i, agent in enumerate(a for a in agents if a in norm.index):
            ax.bar(np.arange(len(racks)) + i * width, norm.loc[agent, racks], width, label=agent)
        ax.set_xticks(np.arange(len(racks)) + 0.4 - width / 2, [f"{r} racks" for r in racks])
        ax.set_yscale("log")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_title(f"makespan / Dally's ({trace})")
    axes[0][-1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "makespan_normalised.png", dpi=110)
    plt.close(fig)
    written.append("makespan_normalised.png")

    # JCT CDF, mean communication latency, timelines at plot_racks on the first batch trace.
    trace = first.get("batch")
    picked = {a: kept.get((a, "batch", trace, plot_racks)) for a in agents}
    picked = {a: r for a, r in picked.items() if r is not None}
    if picked:
        fig, ax = plt.subplots(figsize=(7, 4))
        for agent, result in picked.items():
            jct = np.sort(result.jobs["jct_s"].to_numpy()) / 3600
            ax.plot(jct, np.arange(1, len(jct) + 1) / len(jct), label=agent)
        ax.set_xscale("log")
        ax.set_xlabel("JCT (hours)")
        ax.set_ylabel("fraction of jobs")
        ax.set_title(f"JCT CDF, {trace}, {plot_racks} racks")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "jct_cdf.png", dpi=110)
        plt.close(fig)
        written.append("jct_cdf.png")

        fig, ax = plt.subplots(figsize=(7, 4))
        names = list(picked)
        ax.bar(names, [picked[a].summary["comm_mean_s"] / 3600 for a in names])
        ax.set_ylabel("mean communication latency per job (hours)")
        ax.set_title(f"{trace}, {plot_racks} racks")
        ax.tick_params(axis="x", rotation=45, labelsize=7)
        fig.tight_layout()
        fig.savefig(out / "comm_latency.png", dpi=110)
        plt.close(fig)
        written.append("comm_latency.png")

        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        for agent, result in picked.items():
            if agent not in TIMELINE_AGENTS and agent in POLICIES:
                continue
            tl = result.timeline
            hours = (tl["time_s"] - tl["time_s"].iloc[0]) / 3600
            top.step(hours, tl["utilization"], where="post", label=agent)
            bottom.step(hours, tl["remaining"], where="post", label=agent)
        top.set_ylabel("GPU utilisation")
        bottom.set_ylabel("jobs remaining")
        bottom.set_xlabel("hours")
        bottom.set_xscale("symlog", linthresh=100)
        top.legend(fontsize=7)
        top.set_title(f"{trace}, {plot_racks} racks")
        fig.tight_layout()
        fig.savefig(out / "timelines.png", dpi=110)
        plt.close(fig)
        written.append("timelines.png")
    return written


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _same_results(rows: pd.DataFrame, a: str, b: str) -> bool:
    """Whether agents ``a`` and ``b`` have identical summaries on every cell both ran."""
    keys = ["workload", "trace", "racks"]
    metrics = [k for k in SUMMARY_KEYS if k in rows.columns]
    left = rows[rows["agent"] == a].set_index(keys)[metrics].sort_index()
    right = rows[rows["agent"] == b].set_index(keys)[metrics].sort_index()
    return left.index.equals(right.index) and left.equals(right)


def _validation(run: Path | None) -> tuple[np.ndarray, np.ndarray] | None:
    """A training run's validation timesteps and mean returns, if it has any."""
    evals = pd.DataFrame() if run is None else training_curve(run)[1]
    if evals.empty:
        return None
    return evals["timesteps"].to_numpy(), evals["mean_return"].to_numpy()


def _limits(rows, goal, goal_racks, modes, other, probes, runs) -> list[str]:
    """The "What limits it" bullets, every claim checked against this run's numbers."""
    g = goal.set_index("agent")
    jct, mk, worst_mk = g["JCT vs dally (%)"], g["makespan vs dally (%)"], g["worst-trace makespan vs dally (%)"]
    same = [a for a in modes if _same_results(rows, a, "dally-consolidated")]
    differ = [a for a in modes if a not in same]
    action = (
        "- *The action.* Each step only accepts or declines one offer; the order in which jobs are offered is "
        "the engine's priority rule."
    )
    if same:
        action += (
            f" Under Dally's Nw_sens order {_and(same)} converged to the same policy as "
            "`dally-consolidated`, always waiting for the best tier "
            "(identical metrics on every held-out trace)."
        )
    waiting = _validation(runs.get(same[0])) if same else None
    batch = rows[(rows["workload"] == "batch") & (rows["racks"] == goal_racks)].set_index("agent")
    for a in differ:
        spread = batch.loc[a, "placements_network"]
        held_out = "better" if jct[a] < jct["dally-consolidated"] else "worse"
        action += (
            f" {a} did not: it accepts a few placements across racks ({spread.min()}–{spread.max()} per "
            f"held-out batch trace, against {batch.loc['dally-consolidated', 'placements_network'].max()} for "
            f"`dally-consolidated`); its mean JCT is {jct[a]:+.1f} % against Dally, {held_out} than always "
            f"waiting ({jct['dally-consolidated']:+.1f} %), and its makespan {mk[a]:+.1f} %."
        )
        mine = _validation(runs.get(a))
        if mine is not None and waiting is not None:
            on_validation = "better" if mine[1][-1] > waiting[1][-1] else "worse"
            action += (
                f" On its two validation traces it scored {on_validation} than always waiting "
                f"({mine[1][-1]:.1f} against {waiting[1][-1]:.1f}, in leases)"
                + (
                    ": what it learned carries over to held-out traces."
                    if on_validation == held_out
                    else ": what it learned does not carry over to held-out traces."
                )
            )
    if probes:
        beaten = [p for p in probes if jct[p] < jct["dally-consolidated"]]
        action += (
            " Knowing the true speed factors does not beat always waiting either: the oracle-threshold probes, "
            "which accept a worse tier when its speed factor is high, do worse."
            if not beaten
            else " An oracle-threshold probe does beat always waiting: "
            f"{', '.join(f'{p} {jct[p]:+.1f} %' for p in beaten)}."
        )
    if same:
        action += (
            " Why waiting wins: a spread placement of a network-sensitive model costs many-fold (Table I: "
            "MobileNetV3 runs about 11 times slower across the machines of a rack and about 185 times slower "
            "across racks)."
        )
    order = "- *The priority order* is where JCT is won or lost"
    if other:
        order += ": " + "; ".join(
            f"{a} {jct[a]:+.1f} % mean JCT, makespan {mk[a]:+.1f} % (worst trace {worst_mk[a]:+.1f} %)" for a in other
        )
        longer = [a for a in other if worst_mk[a] > 0]
        order += (
            ". Offering jobs in Tiresias's least-attained-service order lets short jobs finish first, but the "
            "long network-sensitive gangs then finish later"
            + (
                ", which lengthens the makespan; the goal asks for both, and neither order gives both with "
                "accept/wait decisions alone."
                if longer
                else ", yet the makespan holds on every trace."
            )
        )
    else:
        order += "."
    budget = []
    for a in [*modes, *other]:
        curve = _validation(runs.get(a))
        if curve is None:
            continue
        steps, returns = curve
        first_best = int(steps[int(np.argmax(returns))])
        flat = bool(np.all(returns[int(np.argmax(returns)) :] == returns.max()))
        budget.append(
            f"{a} {'flat from' if flat else 'best at'} {first_best:,}"
            + ("" if flat else f" (range {returns.min():.1f} to {returns.max():.1f})")
        )
    training = (
        "- *Training budget.* Validation returns over the 1,000,000 steps (see each run's `curve.png`): "
        + "; ".join(budget)
        + ". Going further needs a richer action (choose which waiting job gets the "
        "offer, or the lease of a running job) or a reward that trades JCT against makespan explicitly."
        if budget
        else ""
    )
    return [action, order, *([training] if training else [])]


def queue_goal_lines(rows: pd.DataFrame, goal: pd.DataFrame, queue: list[str], racks: int) -> list[str]:
    """The training goal's question for the DallyQueue-v0 agents (which job next), checked on this run's
    rows: mean JCT at least 30 % below Dally's at ``racks`` on the held-out batch traces with
    makespan no worse on each, and makespan within +5 % at half and twice the racks."""
    g = goal.set_index("agent")
    batch = rows[rows["workload"] == "batch"]
    dally = batch[batch["agent"] == "dally"].set_index(["trace", "racks"])["makespan_s"]
    heuristics = [a for a in g.index if a in POLICIES]
    best = min(
        heuristics,
        key=lambda a: g.loc[a, "JCT vs dally (%)"] if g.loc[a, "worst-trace makespan vs dally (%)"] <= 0 else np.inf,
    )
    table = g.loc[[*queue, best, "dally"]].reset_index()
    lines = [
        f"## Which job next: DallyQueue-v0 agents against auto-tuned Dally ({racks} racks, held-out batch traces)",
        "",
        "Goal (training): mean JCT at least 30 % below Dally's, makespan no worse on each trace; at "
        f"{racks // 2} and {racks * 2} racks makespan within +5 %. Beside them: the heuristic with the lowest "
        "mean JCT among those whose makespan is no worse than Dally's on any trace.",
        "",
        _md(table),
        "",
    ]
    for agent in queue:
        other = batch[(batch["agent"] == agent) & batch["racks"].isin([racks // 2, racks * 2])]
        other_by_cell = other.set_index(["trace", "racks"])
        ratio = 100 * (other_by_cell["makespan_s"] / dally.loc[other_by_cell.index] - 1)
        # Every held-out batch trace must have run at both other sizes, or the goal is not decided.
        complete = len(ratio) == 2 * batch["trace"].nunique()
        holds = (
            g.loc[agent, "JCT vs dally (%)"] <= -30
            and g.loc[agent, "worst-trace makespan vs dally (%)"] <= 0
            and (ratio <= 5).all()
        )
        at = "; ".join(
            f"{r} racks " + ", ".join(f"{v:+.1f}" for v in ratio.xs(r, level="racks")) + " %"
            for r in sorted(set(ratio.index.get_level_values("racks")))
        )
        if not holds:
            verdict = "goal not met"
        elif complete:
            verdict = "goal met"
        else:
            verdict = f"goal not decided (not every held-out batch trace ran at {racks // 2} and {racks * 2} racks)"
        lines.append(
            f"- **{agent}**: mean JCT {g.loc[agent, 'JCT vs dally (%)']:+.1f} % against Dally, makespan "
            f"{g.loc[agent, 'makespan vs dally (%)']:+.1f} % (worst trace "
            f"{g.loc[agent, 'worst-trace makespan vs dally (%)']:+.1f} %); makespan at other sizes, per "
            f"trace: {at or 'not run'}: {verdict}."
        )
    return [*lines, ""]


def report_md(rows, goal, imported, written, learned, args, total_s) -> str:
    lines = [
        "# Benchmark report: learned agents against Dally, Tiresias and Gandiva on held-out traces",
        "",
        f"Produced by `python benchmarks/report.py{' ' + ' '.join(args.given) if args.given else ''}` "
        f"(dallygym {dallygym.__version__}, Python {platform.python_version()}); {len(rows)} runs in {total_s:.0f} s. "
        "Held-out traces only (`traces/heldout/`, never used in training or validation). Heuristics run natively; "
        "learned agents act in the environment of their saved config (Dally-v0 offers or DallyQueue-v0 picks) in "
        "the observation mode they were trained with.",
        "",
    ]
    queue = [a for a in learned if a in args.queue]
    learned = [a for a in learned if a not in args.queue]
    if goal is not None and queue:
        lines += queue_goal_lines(rows, goal, queue, args.goal_racks)
    if goal is not None:
        lines += [
            f"## The question: does a learned agent beat auto-tuned Dally? ({args.goal_racks} racks, "
            f"held-out batch traces, mean over {rows[rows['workload'] == 'batch']['trace'].nunique()})",
            "",
            "Goal: mean JCT at least 10 % lower than Dally's with makespan no worse.",
            "",
            _md(goal),
            "",
        ]
        for agent in learned:
            if agent in set(goal["agent"]):
                g = goal[goal["agent"] == agent].iloc[0]
                met = g["JCT vs dally (%)"] <= -10 and g["worst-trace makespan vs dally (%)"] <= 0
                worst = g["worst-trace makespan vs dally (%)"]
                lines.append(
                    f"- **{agent}** (offers in {args.priorities.get(agent, 'dally')}'s priority order, "
                    f"observation mode {args.modes.get(agent, 'hidden')}): "
                    f"mean JCT {g['JCT vs dally (%)']:+.1f} % against Dally, makespan "
                    f"{g['makespan vs dally (%)']:+.1f} % (worst trace {worst:+.1f} %): "
                    f"goal {'met' if met else 'not met'}."
                )
        lines.append("")
        g = goal.set_index("agent")["JCT vs dally (%)"]
        modes = [a for a in learned if a in g.index and args.priorities.get(a) == "dally"]
        probes = [a for a in g.index if a.startswith("oracle-threshold")]
        if modes and "dally-consolidated" in g.index:
            lines += [
                "### What network-sensitivity knowledge is worth",
                "",
                "Under Dally's priority order, mean JCT against Dally: "
                + ", ".join(f"{a} {g[a]:+.1f} %" for a in modes)
                + f"; always waiting for the best tier (`dally-consolidated`) {g['dally-consolidated']:+.1f} %"
                + (
                    "; accepting a worse tier only when the oracle's speed factor there is at least a threshold: "
                    + ", ".join(f"{a} {g[a]:+.1f} %" for a in probes)
                    if probes
                    else ""
                )
                + ".",
                "",
            ]
        other = [a for a in learned if args.priorities.get(a) != "dally" and a in g.index]
        if modes and "dally-consolidated" in g.index:
            lines += [
                "### What limits it",
                "",
                *_limits(rows, goal, args.goal_racks, modes, other, probes, args.runs),
                "",
            ]
    if imported is not None and not imported.empty:
        lines += [
            f"## Imported Helios-format trace (distribution shift), {args.goal_racks} racks",
            "",
            _md(imported),
            "",
        ]
    for workload in rows["workload"].unique():
        sub = rows[rows["workload"] == workload]
        trace = sub["trace"].iloc[0]
        sub = sub[sub["trace"] == trace]
        for metric, label, scale in (
            ("makespan_s", "makespan (h)", 3600),
            ("jct_mean_s", "mean JCT (h)", 3600),
            ("comm_mean_s", "mean communication latency (h)", 3600),
        ):
            table = sub.pivot(index="agent", columns="racks", values=metric) / scale
            table = table.reindex([a for a in dict.fromkeys(rows["agent"]) if a in table.index])
            table.columns = [f"{c} racks" for c in table.columns]
            lines += [f"### {trace}: {label}", "", _md(table.reset_index()), ""]
    tail = rows[(rows["racks"] == args.goal_racks) & (rows["workload"] == "batch")]
    if not tail.empty:
        trace = tail["trace"].iloc[0]
        t = tail[tail["trace"] == trace].set_index("agent")[["jct_mean_s", "jct_median_s", "jct_p95_s", "jct_p99_s"]]
        t = (t / 3600).rename(
            columns={
                "jct_mean_s": "average (h)",
                "jct_median_s": "median (h)",
                "jct_p95_s": "P95 (h)",
                "jct_p99_s": "P99 (h)",
            }
        )
        lines += [f"### Tail JCT, {trace}, {args.goal_racks} racks", "", _md(t.reset_index()), ""]
    for name in written:
        lines += [f"![{name}]({name})", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--agent", action="append", default=None, help="learned agent run dir or model (default: agents/runs/ppo-*)"
    )
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument("--racks", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--machines-per-rack", type=int, default=8)
    parser.add_argument("--gpus-per-machine", type=int, default=8)
    parser.add_argument("--goal-racks", type=int, default=8)
    parser.add_argument("--batch-traces", nargs="+", default=DEFAULT_BATCH)
    parser.add_argument("--poisson-traces", nargs="+", default=DEFAULT_POISSON)
    parser.add_argument("--imported-traces", nargs="*", default=DEFAULT_IMPORTED)
    parser.add_argument(
        "--probe-thresholds",
        type=float,
        nargs="*",
        default=[0.9, 0.7],
        help="oracle-threshold knowledge probes to run (none: no probe)",
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "report"))
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="local processes (default 1: this process), or with --backend ray the CPUs of a local Ray instance",
    )
    parser.add_argument("--backend", choices=("local", "ray"), default="local")
    parser.add_argument("--address", default=None, help="ray: join this cluster (auto or HOST:PORT)")
    args = parser.parse_args(argv)
    args.given = sys.argv[1:] if argv is None else list(argv)

    agent_paths = DEFAULT_AGENTS if args.agent is None else args.agent
    agents = {name: name for name in args.policies}
    learned = []
    loaded = []
    for path in agent_paths:
        agent = load_agent(path)
        agents[_label(path, agent)] = agent
        learned.append(_label(path, agent))
        loaded.append((path, agent))
    args.priorities = {name: agents[name].priority for name in learned}
    args.queue = {name for name in learned if is_queue_env(agents[name].env_id)}
    args.runs = {_label(p, a): Path(p) if Path(p).is_dir() else Path(p).parent for p, a in loaded}
    args.modes = {name: agents[name].sensitivity for name in learned}
    for threshold in args.probe_thresholds:
        probe = OracleThresholdProbe(threshold)
        agents[probe.name] = probe
    spec_of = lambda r: ClusterSpec(r, args.machines_per_rack, args.gpus_per_machine)  # noqa: E731

    start = time.perf_counter()
    # The grid: every batch trace at every size (the training goal's makespan check covers each trace at
    # half and twice the goal size); the other workloads' first trace at every size and every
    # trace at goal size.
    cells = [("batch", t, r) for t in args.batch_traces for r in args.racks]
    cells += [("poisson", args.poisson_traces[0], r) for r in args.racks]
    cells += [("poisson", t, args.goal_racks) for t in args.poisson_traces[1:]]
    cells += [("imported", t, args.goal_racks) for t in args.imported_traces]
    with make_backend(args.backend, args.workers, args.address) as backend:
        rows, kept = run_all(agents, cells, spec_of, backend)
    total = time.perf_counter() - start

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows.to_csv(out / "report.csv", index=False)
    goal = goal_table(rows, args.goal_racks, learned) if "dally" in agents else None
    imported = None
    if args.imported_traces:
        sub = rows[rows["workload"] == "imported"]
        imported = sub[["agent", "trace", "makespan_s", "jct_mean_s", "jct_p99_s", "comm_mean_s"]].assign(
            makespan_h=sub["makespan_s"] / 3600,
            jct_mean_h=sub["jct_mean_s"] / 3600,
            jct_p99_h=sub["jct_p99_s"] / 3600,
            comm_mean_h=sub["comm_mean_s"] / 3600,
        )[["agent", "trace", "makespan_h", "jct_mean_h", "jct_p99_h", "comm_mean_h"]]
    written = plots(rows, kept, out, args.goal_racks)
    (out / "report.md").write_text(report_md(rows, goal, imported, written, learned, args, total) + "\n")
    print(f"wrote {out / 'report.md'} ({len(rows)} runs, {total:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
