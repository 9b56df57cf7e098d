"""DallyQueue-v0 on held-out traces: learned agents against the heuristics and trivial baselines.

    python agents/queue_baselines.py [--racks 8] [--agent agents/runs/queue-ppo-s0] [--out FILE.md]
    python agents/queue_baselines.py --racks 2 --machines-per-rack 2 --queue-env DallyQueueSmall-v0 \
        --generated small --seeds 2001 2002 ... [--agent RUN_DIR]

Rows per held-out trace (never trained on: other seeds of the generators, see
``agents/make_heldout_traces.py``):

* ``dally``, ``protected-remaining``, ``tiresias``: native runs (``simulate``);
* ``random-picks``: seeded uniform masked actions through ``DallyQueue-v0`` (offer rule dally);
* ``constant-0``: always action 0 through ``DallyQueue-v0`` -- the slot the offer rule's
  order puts first, i.e. exactly Dally (the equivalence the tests check);
* ``always-wait`` on ``Dally-v0``: the constant policy of issue 10 (action 0 = wait);
* each ``--agent``: a saved learned agent in the environment of its config.

Mean JCT and makespan are also given relative to ``dally`` on the same trace.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd

import dallygym
from dallygym import ClusterSpec, simulate
from dallygym.learn import load_agent, run_agent
from dallygym.trace import generate_trace, load_trace

ROOT = Path(__file__).resolve().parent.parent
HELDOUT_BATCH = [ROOT / "traces" / "heldout" / f"batch-500-seed{s}.csv" for s in (2001, 2002, 2003)]


def constant(action: int):
    return lambda rng, mask: action if mask[action] else int(np.flatnonzero(mask)[0])


def random_masked(rng, mask):
    return int(rng.choice(np.flatnonzero(mask)))


def through_env(env_id: str, trace: pd.DataFrame, spec: ClusterSpec, choose, seed: int = 0) -> dict:
    env = gym.make(env_id, racks=spec.racks, machines_per_rack=spec.machines_per_rack,
                   gpus_per_machine=spec.gpus_per_machine, trace=trace)
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    done = env.unwrapped._done
    while not done:
        obs, _, terminated, truncated, info = env.step(choose(rng, info["action_mask"]))
        done = terminated or truncated
    return dallygym.metrics.summarize(env.unwrapped.engine)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--racks", type=int, default=8)
    parser.add_argument("--machines-per-rack", type=int, default=8)
    parser.add_argument("--queue-env", default="DallyQueue-v0", help="the id random and constant picks act in")
    parser.add_argument("--trace", action="append", help="held-out traces (default: batch-500 seeds 2001-2003)")
    parser.add_argument("--generated", metavar="NAME", help="instead: draws of this generator, at --seeds")
    parser.add_argument("--seeds", type=int, nargs="+", default=[2001, 2002, 2003])
    parser.add_argument("--agent", action="append", default=[], help="saved learned agents (run directories)")
    parser.add_argument("--out", help="write the table as Markdown here")
    args = parser.parse_args(argv)
    spec = ClusterSpec(args.racks, args.machines_per_rack, 8)
    if args.generated:
        traces = [(f"{args.generated}-seed{s}", generate_trace(args.generated, seed=s)) for s in args.seeds]
    else:
        traces = [(Path(t).stem, t) for t in (args.trace or HELDOUT_BATCH)]
    agents = [(a, load_agent(a)) for a in args.agent]
    rows = []
    for trace_name, source in traces:
        trace = load_trace(source, cluster=spec)
        results = {name: simulate(trace, spec, policy=name).summary
                   for name in ("dally", "protected-remaining", "tiresias")}
        results["random-picks"] = through_env(args.queue_env, trace, spec, random_masked)
        results["constant-0"] = through_env(args.queue_env, trace, spec, constant(0))
        results["always-wait (Dally-v0)"] = through_env("Dally-v0", trace, spec, constant(0))
        for name, agent in agents:
            results[Path(name).name] = run_agent(agent, trace, spec).summary
        base = results["dally"]
        for name, summary in results.items():
            rows.append({
                "trace": trace_name, "agent": name,
                "jct_mean_h": round(summary["jct_mean_s"] / 3600, 1),
                "makespan_h": round(summary["makespan_s"] / 3600, 1),
                "jct_vs_dally_%": round(100 * (summary["jct_mean_s"] / base["jct_mean_s"] - 1), 1),
                "makespan_vs_dally_%": round(100 * (summary["makespan_s"] / base["makespan_s"] - 1), 1),
            })
            print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    means = frame.groupby("agent", sort=False)[["jct_vs_dally_%", "makespan_vs_dally_%"]].agg(["mean", "min", "max"])
    text = f"```\n{frame.to_string(index=False)}\n```\n\nPer agent over the traces (mean, min, max):\n\n```\n{means.round(1).to_string()}\n```\n"
    print(text)
    if args.out:
        Path(args.out).write_text(f"Produced by `python agents/queue_baselines.py {' '.join(argv or sys.argv[1:])}` "
                                  f"({args.racks} racks x {args.machines_per_rack} machines x 8 GPUs).\n\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
