"""What a snapshot of an environment costs, by the steps already taken, in CartPole steps.

    python benchmarks/snapshots.py [--steps 0 100 500 1000 2000] [--repeats 7] [--out benchmarks/results]

For ``Dally-v0`` and ``DallyQueue-v0`` (their default traces; random masked actions from a seeded
generator, the hardest realistic agent), at each count of steps taken in one episode: the wall
time of ``copy.deepcopy`` of the environment, of ``pickle.dumps`` + ``pickle.loads``, the
pickled size, and the time of 100 steps of the copy (that it goes on at full speed). Each time is
the median of ``--repeats`` measurements. CartPole-v1's raw step time (``gym.make``, random
actions) is measured in the same run; each copy's cost is also given in CartPole steps.

Writes ``snapshots.csv`` and ``snapshots.md`` to ``--out``. Speed is a benchmark, never a test.
"""

from __future__ import annotations

import argparse
import copy
import pickle
import platform
import shlex
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import _md  # noqa: E402
from speed import cartpole_step_s  # noqa: E402

import dallygym  # noqa: E402,F401 - registers the ids

ENV_IDS = ("Dally-v0", "DallyQueue-v0")


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _play(env, info, rng, steps: int):
    """``steps`` random masked steps (an episode that ends is reset: the count goes on)."""
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if terminated or truncated:
            obs, info = env.reset()
    return info


def measure(env_id: str, counts: list[int], repeats: int, step_s: float) -> list[dict]:
    env = gym.make(env_id)
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    rows, taken = [], 0
    for count in counts:
        info = _play(env, info, rng, count - taken)
        taken = count
        deep_s = _median_s(lambda: copy.deepcopy(env), repeats)
        blob = pickle.dumps(env)
        pickle_s = _median_s(lambda: pickle.loads(pickle.dumps(env)), repeats)
        twin = copy.deepcopy(env)
        twin_rng = np.random.default_rng(1)
        twin_info = dict(info)
        go_on_s = _median_s(lambda: _play(twin, twin_info, twin_rng, 20), 5) / 20  # noqa: B023
        rows.append(
            {
                "env": env_id,
                "steps taken": count,
                "simulated h": round(env.unwrapped.engine.now_s / 3600.0, 1),
                "deepcopy ms": round(deep_s * 1e3, 2),
                "deepcopy / CartPole steps": round(deep_s / step_s),
                "pickle round trip ms": round(pickle_s * 1e3, 2),
                "pickle / CartPole steps": round(pickle_s / step_s),
                "pickled KB": round(len(blob) / 1024),
                "copy's step ms": round(go_on_s * 1e3, 3),
            }
        )
        print(rows[-1], file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 100, 500, 1000, 2000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    counts = sorted(set(args.steps))
    if counts[0] < 0:
        parser.error("--steps are counts of steps taken (>= 0)")
    step_s = cartpole_step_s()
    rows = [row for env_id in ENV_IDS for row in measure(env_id, counts, args.repeats, step_s)]
    frame = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "snapshots.csv", index=False)
    command = "python benchmarks/snapshots.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# Snapshot cost by steps taken",
        "",
        f"Produced by `{command.strip()}` (Python {platform.python_version()}, {platform.machine()}, "
        f"numpy {np.__version__}). CartPole-v1 raw step in the same run: **{step_s * 1e6:.2f} µs** "
        f"({1 / step_s:,.0f} steps/s). Random masked actions from the first reset (seed 0) of each "
        "environment's default trace; times are medians.",
        "",
        _md(frame, ".2f"),
        "",
    ]
    (out / "snapshots.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
