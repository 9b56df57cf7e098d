"""DallyQueue-v0 agents on held-out traces, beside every baseline and the lower bound.

    python agents/queue_baselines.py --agent agents/runs/queue-set-s0 [--agent ...] \
        [--cell heldout/batch-500-seed2001:8 ...] [--workers 2] [--out FILE.md] [--csv FILE.csv] \
        [--reuse EARLIER.csv] [--lookahead TOPK:HORIZON[:BASE] ...]
    python agents/queue_baselines.py --racks 2 --machines-per-rack 2 --queue-env DallyQueueSmall-v0 \
        --generated small --seeds 2001 2002 ... [--agent RUN_DIR]

A cell is a held-out trace (never trained or tuned on) at a number of racks of 8 x 8 GPUs. The
default grid: the ``batch-500`` and ``poisson-411`` draws of seeds 2001-2003 (the files of
``traces/heldout/`` where shipped, else generated with that seed) at 2, 4, 8 and 16 racks, and
each shipped real trace at every size of 2-16 racks where it contends (the rule of
``benchmarks/compare.py``: its uncontended peak demand exceeds the GPUs). Rows per cell:

* every shipped policy's native run (``simulate``), the Dally variants, Tiresias, Gandiva and
  the queue heuristics (``protected-remaining``, ``smallest-demand-remaining``,
  ``tuned-priority``) among them;
* ``lower bound`` (:func:`dallygym.sim.bounds.lower_bound`), which no scheduler can beat: each
  job no sooner than at its fastest placement from its arrival, and the cluster's GPUs as one
  pool doing the jobs' least work, shortest remaining first, each rank of completion no earlier
  than under either;
* through ``DallyQueue-v0`` (no guard), under the offer rule dally and under each learned
  agent's offer rule (``NAME (RULE offers)``): ``constant-0`` (always slot 0, which is exactly
  the offer rule's own order: Dally's, or ``protected-remaining``'s), ``random picks`` (seeded
  uniform masked actions) and ``teacher`` (:func:`dallygym.envs.queue.protected_share_action`,
  the order the imitation warm start copies when one is asked for);
* through ``Dally-v0`` (which tier each offer takes): ``always-wait (Dally-v0)`` (action 0,
  decline every offer until a better tier frees) and ``random offers (Dally-v0)``;
* each ``--agent`` run directory (of either environment), and its initial policy (``RUN/initial``, the parameters
  before any update, written by ``dallygym train``) as ``RUN (initial)``: what the training
  itself contributed.

``--lookahead TOPK:HORIZON[:BASE]`` (off by default; repeatable) adds a search row, ``lookahead
TOPK:HORIZON[:BASE]`` (kind ``search``): :class:`dallygym.envs.lookahead.LookaheadAgent` under the offer rule
dally, trying the base order's first TOPK candidates at each contested pick on copies of the
environment, each played forward HORIZON steps (``end``: to the episode's end). It simulates the
future, which no scheduler in a real cluster can: it stands in its own row, and no verdict
compares anything with it. Its cost (copies, steps played on them, seconds) is printed per cell.

With ``--ablations`` the guarded environments (``guard_leases``/``guard_waiting`` at a share of
¼) are added, answered by the guarded teacher, random picks and action 0.

``--reuse EARLIER.csv`` takes the picking and learned rows an earlier ``--csv`` already holds
(at its precision) instead of playing them again, so adding an agent to the grid plays only that
agent; the native rows and the bound, which the verdicts rest on, always run.

Each cell's verdict for each learned agent (computed from the rows, never typed): its makespan
within +1 % of Dally's, and its mean JCT against the best native heuristic whose makespan is
within +1 % of Dally's (the *best safe heuristic*): at most 0.9 x at 2 and 4 racks and on batch
traces at 8 racks; no worse at 16 racks, on Poisson traces at 8 racks and on the real traces;
and where the safe heuristics' mean JCTs differ by under 2 % (the cluster does not contend),
within 2 % of the best.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd

import dallygym
from dallygym import ClusterSpec, simulate
from dallygym.envs.lookahead import LookaheadAgent, parse_lookahead, spec_label
from dallygym.envs.queue import protected_share_action
from dallygym.learning.priority_search import PRIORITY_FILE
from dallygym.learning.trainer import load_agent, run_agent
from dallygym.sim.bounds import DESCRIPTION as BOUND_DESCRIPTION
from dallygym.sim.bounds import lower_bound
from dallygym.sim.policies import POLICIES
from dallygym.sim.trace import generate_trace, load_trace

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "traces" / "heldout"
SEEDS = (2001, 2002, 2003)
RACKS = (2, 4, 8, 16)
#: Real traces and the sizes (racks of 8 x 8 GPUs, from 2 to 16) where they contend, by the rule
#: of ``benchmarks/compare.py:contention_sizes`` (``benchmarks/results/real_traces.md``).
REAL_CELLS = (
    ("gavel-0e4a51", 2),
    ("gavel-0e4a51", 4),
    ("philly-ee9e8c-14d", 2),
    ("philly-ee9e8c-14d", 4),
    ("philly-48h", 2),
    ("philly-48h", 4),
    ("philly-48h", 8),
)
BOUND = "lower bound"
MAKESPAN_TOLERANCE = 0.01
#: Comparisons in a verdict hold within this relative rounding: rows read back from a CSV (``--reuse``)
#: carry its significant digits, and two runs of the same schedule must still tie.
ROUNDING = 1e-6
#: Below this spread of the safe heuristics' mean JCTs a cell does not contend: matching is enough.
NO_CONTENTION_SPREAD = 0.02
#: The share of the guarded environments (``--ablations``).
GUARD_SHARE = 0.25


def default_cells() -> list[tuple[str, str, int]]:
    cells = [
        (kind, f"{gen}:{seed}", r)
        for kind, gen in (("batch", "batch-500"), ("poisson", "poisson-411"))
        for seed in SEEDS
        for r in RACKS
    ]
    return cells + [("real", name, r) for name, r in REAL_CELLS]


def cell_trace(source: str, spec: ClusterSpec) -> tuple[pd.DataFrame, str]:
    """A cell's trace and its name: ``GENERATOR:SEED`` (the held-out file if shipped, else
    generated), a path, or a shipped trace name."""
    gen, _, seed = source.rpartition(":")
    if gen and seed.isdigit():
        path = HELDOUT / f"{gen}-seed{seed}.csv"
        if path.exists():
            return load_trace(str(path), cluster=spec), f"{gen} seed {seed}"
        return generate_trace(gen, seed=int(seed)), f"{gen} seed {seed} (generated)"
    return load_trace(source, cluster=spec), Path(source).stem


def target_factor(kind: str, racks: int) -> float:
    """The goal's bound on mean JCT / best safe heuristic for a contending cell."""
    if racks in (2, 4) and kind in ("batch", "poisson"):
        return 0.9
    if racks == 8 and kind == "batch":
        return 0.9
    return 1.0


def random_masked(rng, mask, obs):
    return int(rng.choice(np.flatnonzero(mask)))


def constant_0(rng, mask, obs):
    return 0 if mask[0] else int(np.flatnonzero(mask)[0])


def teacher(rng, mask, obs):
    return protected_share_action(obs, mask)


def guarded_teacher(rng, mask, obs):
    return protected_share_action(obs, mask, share=GUARD_SHARE)


def cell_env(env_id: str, trace: pd.DataFrame, spec: ClusterSpec, **kwargs):
    """Environment ``env_id`` on one cell: ``trace`` on ``spec``'s cluster."""
    return gym.make(
        env_id,
        racks=spec.racks,
        machines_per_rack=spec.machines_per_rack,
        gpus_per_machine=spec.gpus_per_machine,
        trace=trace,
        **kwargs,
    )


def through_env(env_id: str, trace: pd.DataFrame, spec: ClusterSpec, choose, seed: int = 0, **kwargs) -> dict:
    """Play one episode with ``choose(rng, mask, obs)``; its summary."""
    env = cell_env(env_id, trace, spec, **kwargs)
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    done = env.unwrapped._done
    while not done:
        obs, _, terminated, truncated, info = env.step(choose(rng, info["action_mask"], obs))
        done = terminated or truncated
    return dallygym.sim.metrics.summarize(env.unwrapped.engine)


def through_lookahead(
    queue_env: str, trace: pd.DataFrame, spec: ClusterSpec, options: dict, seed: int = 0, **kwargs
) -> tuple[dict, dict]:
    """Play one episode with a :class:`~dallygym.envs.lookahead.LookaheadAgent` (``options``: its
    keyword arguments); its summary and its cost (:class:`~dallygym.envs.lookahead.LookaheadCost`
    as a dict, with the episode's wall time in ``wall_s``)."""
    env = cell_env(queue_env, trace, spec, **kwargs)
    agent = LookaheadAgent(env, **options)
    start = time.perf_counter()
    summary = dallygym.evaluate(env, agent, seed=seed)
    return summary, {**agent.cost.as_dict(), "wall_s": time.perf_counter() - start}


def parse_cell(text: str) -> tuple[str, str, int]:
    """``TRACE:RACKS``: ``heldout/GENERATOR-seedN``, ``GENERATOR:SEED``, a path or a shipped name."""
    trace, _, racks = text.rpartition(":")
    if not trace or not racks.isdigit():
        raise argparse.ArgumentTypeError(f"a cell is TRACE:RACKS, got {text!r}")
    match = re.fullmatch(r"heldout/(.+)-seed(\d+)", trace)
    if match:
        trace = f"{match[1]}:{match[2]}"
    stem = Path(trace).stem
    kind = "batch" if stem.startswith("batch") else "poisson" if stem.startswith("poisson") else "real"
    return kind, trace, int(racks)


def seed_group(name: str) -> str:
    """A learned agent's name without its seed suffix (``queue-set-s1`` -> ``queue-set``)."""
    return re.sub(r"-s\d+$", "", name)


@functools.lru_cache(maxsize=None)
def _loaded_agent(path: str):
    return load_agent(path)


def agent_rows(agent_paths) -> list[tuple[str, str]]:
    """(row name, agent directory) of each agent and, where it was saved, its initial policy."""
    rows = []
    for path in agent_paths:
        rows.append((Path(path).name, str(path)))
        if any((Path(path) / "initial" / name).is_file() for name in ("policy.pth", PRIORITY_FILE)):
            rows.append((f"{Path(path).name} (initial)", str(Path(path) / "initial")))
    return rows


def native_rows(trace: pd.DataFrame, spec: ClusterSpec, policies: tuple[str, ...] | None = None):
    """The rows every verdict rests on: each of ``policies``' (default: every shipped policy)
    native run and the lower bound, as (row -> summary, row -> kind)."""
    results, kinds = {}, {}
    for policy in policies or POLICIES:
        results[policy], kinds[policy] = simulate(trace, spec, policy=policy).summary, "heuristic"
    results[BOUND], kinds[BOUND] = lower_bound(trace, spec), "bound"
    return results, kinds


def run_cell(
    cell,
    queue_env: str,
    agent_paths: tuple[str, ...],
    machines_per_rack: int = 8,
    ablations: bool = False,
    policies: tuple[str, ...] | None = None,
    offer_rules: tuple[str, ...] = ("dally",),
    reuse: dict | None = None,
    lookaheads: tuple[str, ...] = (),
) -> list[dict]:
    """Every row of one cell ``(kind, trace, racks)``, with the cell's verdict columns; the
    picking rows run under each of ``offer_rules``. ``reuse`` (see :func:`reusable_rows`) holds
    rows measured before, by cell: a picking or learned row found there is taken from it instead
    of being played again (the native rows and the bound, which the verdicts rest on, always run).
    ``lookaheads``: ``TOPK:HORIZON[:BASE]`` of the search rows (under the offer rule dally); each
    one's cost is printed."""
    kind, source, racks = cell
    spec = ClusterSpec(racks, machines_per_rack, 8)
    trace, name = (source, kind) if isinstance(source, pd.DataFrame) else cell_trace(source, spec)
    before = (reuse or {}).get((name, racks), {})
    results, kinds = native_rows(trace, spec, policies)

    def play(row: str, row_kind: str, run) -> None:
        results[row], kinds[row] = before[row] if row in before else run(), row_kind

    for rule in offer_rules:
        suffix = "" if rule == "dally" else f" ({rule} offers)"
        for row, choose in (("constant-0", constant_0), ("random picks", random_masked), ("teacher", teacher)):
            play(
                row + suffix,
                "teacher" if row == "teacher" else "trivial",
                lambda choose=choose, rule=rule: through_env(queue_env, trace, spec, choose, offer_rule=rule),
            )
    for row, choose in (("always-wait (Dally-v0)", constant_0), ("random offers (Dally-v0)", random_masked)):
        play(row, "trivial", lambda choose=choose: through_env("Dally-v0", trace, spec, choose))
    for text in lookaheads:
        options = parse_lookahead(text)
        row = spec_label(options["top_k"], options["horizon"], options.get("base", "offer-rule"))

        def search(options=options, row=row) -> dict:
            summary, cost = through_lookahead(queue_env, trace, spec, options)
            print(f"{row} on {name} at {racks} racks: " + _cost_text(cost), file=sys.stderr, flush=True)
            return summary

        play(row, "search", search)
    if ablations:
        guard = {"guard_leases": GUARD_SHARE}
        full = {**guard, "guard_waiting": True}
        for row, choose, kw in (
            ("guard: teacher", guarded_teacher, guard),
            ("guard: random picks", random_masked, guard),
            ("full guard: teacher", guarded_teacher, full),
            ("full guard: random picks", random_masked, full),
            ("full guard: constant-0", constant_0, full),
        ):
            results[row], kinds[row] = through_env(queue_env, trace, spec, choose, **kw), "ablation"
    for row, path in agent_rows(agent_paths):
        play(
            row,
            "initial" if row.endswith("(initial)") else "agent",
            lambda path=path: run_agent(_loaded_agent(path), trace, spec).summary,
        )
    return verdict_rows(kind, name, racks, results, kinds)


def _cost_text(cost: dict) -> str:
    return (
        f"{cost['decisions']} picks ({cost['contested']} contested, {cost['changed']} changed), "
        f"{cost['copies']} copies, {cost['rollout_steps']} steps on copies, {cost['wall_s']:.1f} s "
        f"({cost['copy_s']:.1f} s copying, {cost['rollout_s']:.1f} s playing copies)"
    )


def reusable_rows(frame: pd.DataFrame) -> dict:
    """The picking and learned rows of an earlier run's grid (``--csv``), by cell
    ``(trace, racks)``: row -> the two numbers a verdict needs (``jct_mean_s`` and
    ``makespan_s``, at the CSV's precision). Native rows and the bound are left out: they run
    again, exactly, at every use."""
    out: dict = {}
    keep = frame[~frame["row_kind"].isin(("heuristic", "bound"))]
    for rec in keep.itertuples(index=False):
        out.setdefault((rec.trace, int(rec.racks)), {})[rec.row] = {
            "jct_mean_s": float(rec.jct_mean_h) * 3600,
            "makespan_s": float(rec.makespan_h) * 3600,
        }
    return out


def verdict_rows(kind: str, name: str, racks: int, results: dict[str, dict], kinds: dict[str, str]) -> list[dict]:
    """One cell's rows from its summaries (``results``: row -> summary with ``jct_mean_s`` and
    ``makespan_s``; ``kinds``: row -> heuristic, bound, trivial, teacher, ablation, search, agent or
    initial): the ratios, the best safe heuristic, the cell's target and each learned row's verdict."""
    dally = results["dally"]
    safe = {
        p: s["jct_mean_s"]
        for p, s in results.items()
        if kinds[p] == "heuristic" and s["makespan_s"] <= (1 + MAKESPAN_TOLERANCE + ROUNDING) * dally["makespan_s"]
    }
    best = min(safe, key=safe.get)
    spread = max(safe.values()) / min(safe.values()) - 1
    contends = spread >= NO_CONTENTION_SPREAD
    factor = target_factor(kind, racks) if contends else 1 + NO_CONTENTION_SPREAD
    rows = []
    for row, s in results.items():
        makespan_ok = s["makespan_s"] <= (1 + MAKESPAN_TOLERANCE + ROUNDING) * dally["makespan_s"]
        rows.append(
            {
                "kind": kind,
                "trace": name,
                "racks": racks,
                "row": row,
                "row_kind": kinds[row],
                "jct_mean_h": s["jct_mean_s"] / 3600,
                "makespan_h": s["makespan_s"] / 3600,
                "jct_vs_dally": s["jct_mean_s"] / dally["jct_mean_s"],
                "makespan_vs_dally": s["makespan_s"] / dally["makespan_s"],
                "jct_vs_bound": s["jct_mean_s"] / results[BOUND]["jct_mean_s"],
                "jct_vs_best_safe": s["jct_mean_s"] / safe[best],
                "makespan_ok": makespan_ok if row != BOUND else None,
                "best_safe": best,
                "contends": contends,
                "target": factor,
                "goal_met": (
                    bool(makespan_ok and s["jct_mean_s"] <= factor * (1 + ROUNDING) * safe[best])
                    if kinds[row] in ("agent", "initial")
                    else None
                ),
            }
        )
    return rows


def run_cells(
    cells,
    queue_env: str,
    agent_paths,
    machines_per_rack: int = 8,
    workers: int = 1,
    ablations: bool = False,
    policies=None,
    offer_rules=("dally",),
    reuse: dict | None = None,
    lookaheads=(),
) -> pd.DataFrame:
    """Every cell's rows, in the cells' order; ``workers`` > 1 runs cells in that many processes
    (the rows are the same: every run is seeded by its cell alone). ``reuse``: see :func:`run_cell`."""
    from dallygym.experiments.sweep import run_ordered

    task = functools.partial(
        run_cell,
        queue_env=queue_env,
        agent_paths=tuple(agent_paths),
        machines_per_rack=machines_per_rack,
        ablations=ablations,
        policies=None if policies is None else tuple(policies),
        offer_rules=tuple(offer_rules),
        reuse=reuse,
        lookaheads=tuple(lookaheads),
    )
    arrived = 0

    def progress(i, _rows):
        nonlocal arrived
        arrived += 1
        print(f"cell {arrived}/{len(cells)} done: {cells[i][1]} at {cells[i][2]} racks", file=sys.stderr, flush=True)

    return pd.DataFrame([row for rows in run_ordered(task, cells, workers, on_result=progress) for row in rows])


def _geo(values) -> float:
    return float(np.exp(np.log(np.asarray(values, dtype=float)).mean()))


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per row over the cells: geometric means of the ratios, the worst makespan ratio, the
    cells whose makespan is within +1 % of Dally's, and (learned rows) the cells meeting the goal."""
    out = []
    for row, g in frame.groupby("row", sort=False):
        kind = g["row_kind"].iloc[0]
        goal = g["goal_met"].dropna()
        out.append(
            {
                "row": row,
                "kind": kind,
                "JCT / Dally": _geo(g["jct_vs_dally"]),
                "JCT / best safe": _geo(g["jct_vs_best_safe"]),
                "JCT / bound": _geo(g["jct_vs_bound"]),
                "makespan / Dally": _geo(g["makespan_vs_dally"]),
                "worst makespan / Dally": float(g["makespan_vs_dally"].max()),
                "makespan within +1 %": "" if kind == "bound" else f"{int((g['makespan_ok'] == True).sum())}/{len(g)}",  # noqa: E712
                "goal met": f"{int(goal.sum())}/{len(goal)}" if len(goal) else "",
            }
        )
    return pd.DataFrame(out)


def per_size_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Learned rows and the best safe heuristic per cell kind and size: geometric mean of mean JCT
    / best safe heuristic, worst makespan / Dally, cells meeting the goal."""
    learned = frame[frame["row_kind"].isin(["agent", "initial"])]
    out = []
    for (kind, racks, row), g in learned.groupby(["kind", "racks", "row"], sort=False):
        out.append(
            {
                "cells": kind,
                "racks": racks,
                "row": row,
                "JCT / best safe": _geo(g["jct_vs_best_safe"]),
                "best safe / bound": _geo(g["jct_vs_bound"] / g["jct_vs_best_safe"]),
                "worst makespan / Dally": float(g["makespan_vs_dally"].max()),
                "goal met": f"{int(g['goal_met'].sum())}/{len(g)}",
            }
        )
    return pd.DataFrame(out)


def closest_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per cell, how near any row comes to the learned rows' target: the best safe heuristic
    against the bound, the row of lowest mean JCT among all those (shipped, trivial, teacher,
    search, learned) whose makespan is within +1 % of Dally's and its mean JCT / best safe
    heuristic, and how many of those rows reach the target."""
    out = []
    for (_kind, trace, racks), g in frame.groupby(["kind", "trace", "racks"], sort=False):
        first = g.iloc[0]
        safe = g[(g["row_kind"] != "bound") & (g["makespan_ok"] == True)]  # noqa: E712
        closest = safe.loc[safe["jct_vs_best_safe"].idxmin()]
        reached = safe["jct_vs_best_safe"] <= first["target"] * (1 + ROUNDING)
        best_safe = g[g["row"] == first["best_safe"]].iloc[0]
        out.append(
            {
                "trace": trace,
                "racks": racks,
                "target": first["target"],
                "best safe": first["best_safe"],
                "best safe / bound": best_safe["jct_vs_bound"],
                "closest safe row": closest["row"],
                "JCT / best safe": closest["jct_vs_best_safe"],
                "safe rows at target": f"{int(reached.sum())}/{len(safe)}",
            }
        )
    return pd.DataFrame(out)


#: How the summary tables show each ratio.
TABLE_FORMATS = {
    "target": "{:.2f}",
    "JCT / Dally": "{:.3f}",
    "JCT / best safe": "{:.3f}",
    "JCT / bound": "{:.2f}",
    "makespan / Dally": "{:.3f}",
    "worst makespan / Dally": "{:.3f}",
    "best safe / bound": "{:.2f}",
}


def markdown_table(df: pd.DataFrame) -> list[str]:
    """A summary frame as Markdown table lines, ratios formatted by :data:`TABLE_FORMATS`."""
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    for _, r in df.iterrows():
        cells = (TABLE_FORMATS[c].format(r[c]) if c in TABLE_FORMATS else str(r[c]) for c in df.columns)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(frame: pd.DataFrame, command: str, rows_from: str | None = None) -> str:
    table = markdown_table
    source = (
        f"Produced by `{command}`."
        if rows_from is None
        else (
            f"Tables by `{command}`, from the rows in `{rows_from}` (the `--csv` of a run of this script; the run's "
            "command is in the docs)."
        )
    )

    lines = [
        "# DallyQueue-v0 agents on held-out traces",
        "",
        source,
        "",
        f"Ratios per cell to auto-tuned `dally`, to the lower bound (`dallygym.sim.bounds.lower_bound`: "
        f"{BOUND_DESCRIPTION}) and to the *best safe heuristic* (the shipped policy with the lowest mean JCT among "
        "those whose "
        "makespan is within +1 % of Dally's on that cell). Goal per cell (learned rows): makespan within +1 % of "
        "Dally's and mean JCT at most 0.9 x the best safe heuristic at 2 and 4 racks and on batch traces at 8 "
        "racks, at most 1.0 x at 16 racks, on Poisson traces at 8 racks and on the real traces, at most 1.02 x "
        "where the safe heuristics differ by under 2 %.",
        "",
        "## Over every cell (geometric means)",
        "",
    ]
    lines += table(summary_table(frame))
    sizes = per_size_table(frame)
    if not sizes.empty:
        lines += ["", "## Learned rows per cell kind and size", ""] + table(sizes)
    lines += [
        "",
        "## How near any row comes to the target",
        "",
        "Per cell, of every row whose makespan is within +1 % of Dally's (shipped, trivial, teacher, search and "
        "learned rows alike): the one of lowest mean JCT, and how many reach the learned rows' target.",
        "",
    ]
    lines += table(closest_table(frame))
    lines += ["", "## Every cell", ""]
    for (_kind, trace, racks), g in frame.groupby(["kind", "trace", "racks"], sort=False):
        first = g.iloc[0]
        lines += [
            f"### {trace}, {racks} racks",
            "",
            f"Best safe heuristic: `{first['best_safe']}`; "
            + (
                f"target for learned rows: mean JCT ≤ {first['target']:.2f} x it."
                if first["contends"]
                else "the safe heuristics differ by under 2 % (no contention): within 2 % of it."
            ),
            "",
            "| row | mean JCT (h) | makespan (h) | JCT / Dally | JCT / best safe | JCT / bound "
            "| makespan / Dally | makespan ok | goal |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for _, x in g.iterrows():
            ok = "" if pd.isna(x["makespan_ok"]) else ("✓" if x["makespan_ok"] else "✗")
            goal = "" if x["goal_met"] is None or pd.isna(x["goal_met"]) else ("met" if x["goal_met"] else "not met")
            lines.append(
                f"| {x['row']} | {x['jct_mean_h']:,.1f} | {x['makespan_h']:,.1f} | {x['jct_vs_dally']:.3f} | "
                f"{x['jct_vs_best_safe']:.3f} | {x['jct_vs_bound']:.2f} | {x['makespan_vs_dally']:.3f} | "
                f"{ok} | {goal} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cell",
        action="append",
        type=parse_cell,
        metavar="TRACE:RACKS",
        help="a trace at a number of racks (default: the grid of the module docstring)",
    )
    parser.add_argument("--racks", type=int, default=8, help="with --generated: the racks")
    parser.add_argument("--machines-per-rack", type=int, default=8)
    parser.add_argument("--queue-env", default="DallyQueue-v0", help="the id the picking rows act in")
    parser.add_argument("--generated", metavar="NAME", help="instead of cells: draws of this generator, at --seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--agent", action="append", default=[], help="saved learned agents (run directories)")
    parser.add_argument("--policies", nargs="+", default=None, help="native rows (default: every shipped policy)")
    parser.add_argument("--ablations", action="store_true", help="add the guarded environments' rows")
    parser.add_argument(
        "--lookahead",
        action="append",
        default=[],
        metavar="TOPK:HORIZON[:BASE]",
        help="add a search row (dallygym.envs.lookahead): the base order's first TOPK picks tried on copies, each "
        "played HORIZON steps (an integer or 'end'); BASE: offer-rule (default), teacher or a policy name",
    )
    parser.add_argument("--out", help="write the tables as Markdown here")
    parser.add_argument("--csv", help="write every row as CSV here")
    parser.add_argument("--workers", type=int, default=1, help="cells run in this many processes (default 1)")
    parser.add_argument(
        "--from-csv",
        metavar="CSV",
        help="no runs: write the tables from a --csv of an earlier run (the verdicts judged again)",
    )
    parser.add_argument(
        "--reuse",
        metavar="CSV",
        help="take the picking and learned rows found in this --csv of an earlier run instead of playing them "
        "again (the native rows and the bound still run); agents new to it are played",
    )
    args = parser.parse_args(argv)
    for text in args.lookahead:
        try:
            parse_lookahead(text)
        except ValueError as error:
            parser.error(f"--lookahead: {error}")
    command = "python agents/queue_baselines.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.from_csv:
        return write_tables(judged_again(read_grid(args.from_csv)), command, args, rows_from=args.from_csv)
    if args.generated:
        cells = [(args.generated, generate_trace(args.generated, seed=s), args.racks) for s in args.seeds]
    else:
        cells = args.cell or default_cells()
    for _, path in agent_rows(args.agent):
        _loaded_agent(path)  # a bad agent fails here, before any cell runs
    rules = {_loaded_agent(path).offer_rule for _, path in agent_rows(args.agent)}
    offer_rules = ["dally", *sorted(rules - {"dally"})]
    frame = run_cells(
        cells,
        args.queue_env,
        args.agent,
        args.machines_per_rack,
        args.workers,
        args.ablations,
        args.policies,
        offer_rules,
        reusable_rows(read_grid(args.reuse)) if args.reuse else None,
        args.lookahead,
    )
    if args.csv:
        frame.to_csv(args.csv, index=False, float_format="%.10g")
    return write_tables(frame, command, args)


def judged_again(frame: pd.DataFrame) -> pd.DataFrame:
    """The grid's verdict columns computed again from its numbers (mean JCT and makespan of each
    row), cell by cell, as :func:`verdict_rows` computes them in a run."""
    out = []
    for (kind, trace, racks), cell in frame.groupby(["kind", "trace", "racks"], sort=False):
        results = {
            r.row: {"jct_mean_s": float(r.jct_mean_h) * 3600, "makespan_s": float(r.makespan_h) * 3600}
            for r in cell.itertuples(index=False)
        }
        kinds = dict(zip(cell["row"], cell["row_kind"]))
        out += verdict_rows(kind, trace, int(racks), results, kinds)
    return pd.DataFrame(out)


def read_grid(path) -> pd.DataFrame:
    """The rows of a run's ``--csv``, with the verdict columns as booleans (NaN where none)."""
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    for column in ("makespan_ok", "goal_met", "contends"):
        frame[column] = frame[column].map({"True": True, "False": False, True: True, False: False})
    return frame


def write_tables(frame: pd.DataFrame, command: str, args: argparse.Namespace, rows_from: str | None = None) -> int:
    """Print the summary and write ``--out`` (every cell) and its ``_sizes.md`` (the learned
    rows per cell kind and size, for the docs to include)."""
    text = markdown(frame, command, rows_from)
    print(text.split("## Every cell")[0])
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
        sizes = markdown_table(per_size_table(frame))
        Path(args.out).with_name(Path(args.out).stem + "_sizes.md").write_text(
            "Learned rows per cell kind and size (geometric means over the traces):\n\n" + "\n".join(sizes) + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
