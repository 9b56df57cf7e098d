"""DallyQueue-v0 on held-out traces: learned agents against the heuristics and trivial baselines.

    python agents/queue_baselines.py --agent agents/runs/queue-ppo-s0 [--agent ...] \
        [--cell heldout/batch-500-seed2001:8 ...] [--out FILE.md] [--csv FILE.csv]
    python agents/queue_baselines.py --racks 2 --machines-per-rack 2 --queue-env DallyQueueSmall-v0 \
        --generated small --seeds 2001 2002 ... [--agent RUN_DIR]

A cell is a held-out trace (never trained on: other seeds of the generators, see
``agents/make_heldout_traces.py``, or a shipped real trace) at a number of racks of 8 x 8 GPUs.
The default cells are issue 10's grid: the three held-out ``batch-500`` draws at 2, 4, 8 and 16
racks, the two held-out ``poisson-411`` draws at 8 racks, and the real ``philly-ee9e8c-14d``
window at 2 and 4 racks (where it contends). Rows per cell:

* ``dally``, ``protected-remaining``, ``tiresias``, ``tiresias-las``, ``dally-consolidated``:
  native runs (``simulate``);
* ``random-picks``: seeded uniform masked actions through ``DallyQueue-v0`` (offer rule dally,
  the default ``lease_picks="waiting"``); ``random-picks (lease picks)``: the same with
  ``lease_picks="all"``;
* ``protected-share picks``: :func:`dallygym.queue_env.protected_share_action` through
  ``DallyQueue-v0`` (the protected-remaining order with "the largest" over every unfinished
  job; offer rule dally) -- the teacher of the agents' imitation warm start;
  ``guarded protected-share picks``: the same order protecting from an ``estimate_share`` of
  ¼, with ``guard_leases=0.25`` -- the teacher of ``queue-ppo-guard-s*``;
* ``full guard: ...``: the same environment with ``guard_waiting=True`` too (every candidate
  whose ``estimate_share`` is at least ¼ is served without asking, longest first), the agent's
  steps answered by the guarded teacher (``full guard: protected-share picks``, the teacher of
  ``queue-ppo-fullguard-s*``), by seeded uniform masked actions (``full guard: random
  picks``) or by action 0 (``full guard: constant-0``, the offer rule's order for the rest):
  what the guard alone achieves, which a learned agent in it must beat;
* ``constant-0``: always action 0 through ``DallyQueue-v0`` -- the slot the offer rule's order
  puts first, i.e. exactly Dally (the equivalence the tests check); ``always-stop``: stop
  whenever stopping is valid, else action 0;
* ``always-wait (Dally-v0)``: the constant policy of issue 10 (action 0 = wait);
* each ``--agent``: a saved learned agent in the environment of its config.

Mean JCT and makespan are also given relative to ``dally`` on the same cell, and a summary per
agent and cell kind (mean, min, max over the cells' traces; learned agents whose run names
differ only in a ``-sN`` seed suffix are also pooled over seeds).
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd

import dallygym
from dallygym import ClusterSpec, simulate
from dallygym.learn import load_agent, run_agent
from dallygym.queue_env import protected_share_action
from dallygym.trace import generate_trace, load_trace

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "traces" / "heldout"
HELDOUT_BATCH = [HELDOUT / f"batch-500-seed{s}.csv" for s in (2001, 2002, 2003)]
#: Issue 10's evaluation grid: (kind, trace, racks).
DEFAULT_CELLS = (
    [("batch", p, r) for r in (2, 4, 8, 16) for p in HELDOUT_BATCH]
    + [("poisson", HELDOUT / f"poisson-411-seed{s}.csv", 8) for s in (2001, 2002)]
    + [("real", "philly-ee9e8c-14d", r) for r in (2, 4)]
)
HEURISTICS = ("dally", "protected-remaining", "tiresias", "tiresias-las", "dally-consolidated")


def constant(action: int):
    return lambda rng, mask: action if mask[action] else int(np.flatnonzero(mask)[0])


def stop_when_valid(rng, mask):
    return len(mask) - 1 if mask[-1] else int(np.flatnonzero(mask)[0])


def random_masked(rng, mask):
    return int(rng.choice(np.flatnonzero(mask)))


def protected_share(rng, mask, obs):
    return protected_share_action(obs, mask)


def protected_quarter(rng, mask, obs):
    return protected_share_action(obs, mask, share=GUARD_SHARE)


#: The share of the guarded teacher row: it protects jobs from this estimate_share and runs
#: with guard_leases at the same share (the recipe of agents/runs/queue-ppo-guard-s*; chosen
#: on tuning draws of batch-500, seeds 5001-5008, never on the held-out ones).
GUARD_SHARE = 0.25
SEES_OBSERVATION = (protected_share, protected_quarter)


def through_env(env_id: str, trace: pd.DataFrame, spec: ClusterSpec, choose, seed: int = 0,
                with_obs: bool | None = None, **kwargs) -> dict:
    """Play one episode with ``choose(rng, mask)`` (or ``choose(rng, mask, obs)``: ``with_obs``,
    by default for the teachers here); its summary."""
    env = gym.make(env_id, racks=spec.racks, machines_per_rack=spec.machines_per_rack,
                   gpus_per_machine=spec.gpus_per_machine, trace=trace, **kwargs)
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    done = env.unwrapped._done
    if with_obs is None:
        with_obs = choose in SEES_OBSERVATION
    while not done:
        action = choose(rng, info["action_mask"], obs) if with_obs else choose(rng, info["action_mask"])
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    return dallygym.metrics.summarize(env.unwrapped.engine)


def parse_cell(text: str) -> tuple[str, str, int]:
    """``TRACE:RACKS`` (a path, a shipped name or ``heldout/NAME``) as a cell."""
    trace, _, racks = text.rpartition(":")
    if not trace or not racks.isdigit():
        raise argparse.ArgumentTypeError(f"a cell is TRACE:RACKS, got {text!r}")
    if trace.startswith("heldout/"):
        trace = str(HELDOUT / f"{trace.removeprefix('heldout/')}.csv")
    stem = Path(trace).stem
    kind = "batch" if stem.startswith("batch") else "poisson" if stem.startswith("poisson") else "other"
    return kind, trace, int(racks)


def seed_group(name: str) -> str:
    """A learned agent's name without its seed suffix (``queue-ppo-s1`` -> ``queue-ppo``)."""
    return re.sub(r"-s\d+$", "", name)


def run_cell(cell, queue_env: str, agent_paths: tuple[str, ...], machines_per_rack: int = 8) -> list[dict]:
    """Every row of one cell ``(kind, trace, racks)``: the heuristics, the trivial baselines and
    each saved agent (loaded from ``agent_paths``; a process loads each once)."""
    kind, source, racks = cell
    spec = ClusterSpec(racks, machines_per_rack, 8)
    trace = load_trace(source, cluster=spec) if not isinstance(source, pd.DataFrame) else source
    name = Path(str(source)).stem if not isinstance(source, pd.DataFrame) else kind
    results = {h: simulate(trace, spec, policy=h).summary for h in HEURISTICS}
    results["random-picks"] = through_env(queue_env, trace, spec, random_masked)
    results["random-picks (lease picks)"] = through_env(queue_env, trace, spec, random_masked, lease_picks="all")
    results["protected-share picks"] = through_env(queue_env, trace, spec, protected_share)
    results["guarded protected-share picks"] = through_env(queue_env, trace, spec, protected_quarter,
                                                           guard_leases=GUARD_SHARE)
    full_guard = {"guard_leases": GUARD_SHARE, "guard_waiting": True}
    results["full guard: protected-share picks"] = through_env(queue_env, trace, spec, protected_quarter, **full_guard)
    results["full guard: random picks"] = through_env(queue_env, trace, spec, random_masked, **full_guard)
    results["full guard: constant-0"] = through_env(queue_env, trace, spec, constant(0), **full_guard)
    results["constant-0"] = through_env(queue_env, trace, spec, constant(0))
    results["always-stop"] = through_env(queue_env, trace, spec, stop_when_valid)
    results["always-wait (Dally-v0)"] = through_env("Dally-v0", trace, spec, constant(0))
    for path in agent_paths:
        results[Path(path).name] = run_agent(_loaded_agent(path), trace, spec).summary
    base = results["dally"]
    rows = []
    for agent_name, summary in results.items():
        rows.append({
            "kind": kind, "trace": name, "racks": racks, "agent": agent_name,
            "jct_mean_h": round(summary["jct_mean_s"] / 3600, 1),
            "makespan_h": round(summary["makespan_s"] / 3600, 1),
            "jct_vs_dally_%": round(100 * (summary["jct_mean_s"] / base["jct_mean_s"] - 1), 1),
            "makespan_vs_dally_%": round(100 * (summary["makespan_s"] / base["makespan_s"] - 1), 1),
            "preemptions": summary["preemptions"],
            "makespan_s": summary["makespan_s"], "dally_makespan_s": base["makespan_s"],
        })
    return rows


@functools.lru_cache(maxsize=None)
def _loaded_agent(path: str):
    return load_agent(path)


def run_cells(cells, queue_env: str, agent_paths, machines_per_rack: int = 8, workers: int = 1) -> pd.DataFrame:
    """Every cell's rows, in the cells' order; ``workers`` > 1 runs cells in that many processes
    (the rows are the same: every run is seeded by its cell alone)."""
    from dallygym.sweep import run_ordered

    task = functools.partial(run_cell, queue_env=queue_env, agent_paths=tuple(agent_paths),
                             machines_per_rack=machines_per_rack)
    arrived = 0

    def progress(i, _rows):
        nonlocal arrived
        arrived += 1
        print(f"cell {arrived}/{len(cells)} done: {Path(str(cells[i][1])).stem} at {cells[i][2]} racks",
              file=sys.stderr, flush=True)

    return pd.DataFrame([row for rows in run_ordered(task, cells, workers, on_result=progress) for row in rows])


def summary_table(frame: pd.DataFrame, learned: list[str]) -> pd.DataFrame:
    """Mean, min and max of the relative columns per cell kind, racks and agent; learned agents
    are also pooled over seeds (``NAME (n seeds)``)."""
    pooled = frame[frame["agent"].isin(learned)].copy()
    if pooled["agent"].nunique() > 1:
        groups = pooled["agent"].map(seed_group)
        counts = pooled.groupby(groups)["agent"].nunique()
        pooled["agent"] = groups.map(lambda g: f"{g} ({counts[g]} seeds)")
        frame = pd.concat([frame, pooled[pooled["agent"].str.contains(r"\(\d+ seeds\)")]])
    cols = ["jct_vs_dally_%", "makespan_vs_dally_%"]
    return frame.groupby(["kind", "racks", "agent"], sort=False)[cols].agg(["mean", "min", "max"]).round(1)


def goal_sentences(frame: pd.DataFrame, learned: list[str]) -> list[str]:
    """Issue 10's goal, checked on the rows (computed, not typed): at 8 racks on held-out batch
    traces mean JCT >= 30 % below Dally and makespan no worse on each trace; at 4 and 16 racks
    makespan within +5 %."""
    out = []
    strongest = "protected-remaining"
    pooled = []
    groups = {seed_group(a) for a in learned}
    for group in sorted(groups):
        members = [a for a in learned if seed_group(a) == group]
        if len(members) > 1:
            rows = frame[frame["agent"].isin(members)].assign(agent=f"{group} ({len(members)} seeds pooled)")
            frame = pd.concat([frame, rows])
            pooled.append(f"{group} ({len(members)} seeds pooled)")
    baselines = [strongest, "protected-share picks", "guarded protected-share picks", "random-picks",
                 "full guard: protected-share picks", "full guard: random picks", "full guard: constant-0"]
    for agent in learned + pooled + baselines:
        rows = frame[(frame["agent"] == agent) & (frame["kind"] == "batch")]
        at8 = rows[rows["racks"] == 8]
        if at8.empty:
            continue
        jct = at8["jct_vs_dally_%"]
        span = at8["makespan_vs_dally_%"]
        others = rows[rows["racks"].isin([4, 16])]["makespan_vs_dally_%"]
        # "No worse" on the exact makespans (the percentages are rounded).
        no_worse = (at8["makespan_s"] <= at8["dally_makespan_s"]).all()
        ok = jct.mean() <= -30 and no_worse and not others.empty and (others <= 5).all()
        spread = f"{others.min():+.1f} … {others.max():+.1f} %" if not others.empty else "not run"
        out.append(
            f"{agent}: at 8 racks mean JCT {jct.mean():+.1f} % (per trace {', '.join(f'{v:+.1f}' for v in jct)}), "
            f"makespan per trace {', '.join(f'{v:+.1f}' for v in span)} %; at 4 and 16 racks makespan "
            f"{spread} -> goal {'met' if ok else 'not met'}.")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", action="append", type=parse_cell, metavar="TRACE:RACKS",
                        help="a trace at a number of racks (default: issue 10's grid, see the module docstring)")
    parser.add_argument("--racks", type=int, default=8, help="with --generated: the racks")
    parser.add_argument("--machines-per-rack", type=int, default=8)
    parser.add_argument("--queue-env", default="DallyQueue-v0", help="the id random and constant picks act in")
    parser.add_argument("--generated", metavar="NAME", help="instead of cells: draws of this generator, at --seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=[2001, 2002, 2003])
    parser.add_argument("--agent", action="append", default=[], help="saved learned agents (run directories)")
    parser.add_argument("--out", help="write the tables as Markdown here")
    parser.add_argument("--csv", help="write every row as CSV here")
    parser.add_argument("--workers", type=int, default=1, help="cells run in this many processes (default 1)")
    args = parser.parse_args(argv)
    if args.generated:
        cells = [(args.generated, generate_trace(args.generated, seed=s), args.racks) for s in args.seeds]
    else:
        cells = args.cell or DEFAULT_CELLS
    for path in args.agent:
        _loaded_agent(path)  # a bad agent fails here, before any cell runs
    learned = [Path(a).name for a in args.agent]
    frame = run_cells(cells, args.queue_env, args.agent, args.machines_per_rack, args.workers)
    means = summary_table(frame, learned)
    goal = goal_sentences(frame, learned)
    text = (f"```\n{frame.drop(columns=['makespan_s', 'dally_makespan_s']).to_string(index=False)}\n```\n\nPer cell kind, racks and agent (mean, min, max over "
            f"the traces{' and seeds' if len(learned) > 1 else ''}):\n\n```\n{means.to_string()}\n```\n")
    if goal:
        text += "\nIssue 10's goal, computed from the rows above:\n\n" + "\n".join(f"- {s}" for s in goal) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(f"Produced by `python agents/queue_baselines.py {' '.join(argv or sys.argv[1:])}` "
                                  f"(racks x {args.machines_per_rack} machines x 8 GPUs).\n\n{text}")
    if args.csv:
        frame.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
