"""Reference results for optimisation work: a change meant to be faster must not change them.

    python benchmarks/reference_results.py           # write results/reference_results.json
    python benchmarks/reference_results.py --check   # exit 1, naming the cells, if any differ

The reference is every shipped policy's summary on ``batch-500`` and ``poisson-411`` at 2, 4, 8
and 16 racks and on ``small`` (2 racks x 2 machines x 8 GPUs) under the default lease renewal
(``upgrade``), the other renewal modes (``keep``, ``rebid``) for Dally, Dally-noWait and Tiresias
on ``batch-500`` at 2 and 8 racks, and a SHA-256 of whole
``Dally-v0``, ``DallySmall-v0`` and ``DallyQueueSmall-v0`` episodes on the fixed shipped traces
(every observation, reward and final summary) with the Dally agent and with seeded random
masked actions. Summaries are compared exactly (floats
through their JSON text), so "identical" means bit for bit. About 30 s.

A change that is meant to alter results (a fix, a new rule) rewrites the reference in the same
commit, and says so.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

import dallygym
from dallygym import ClusterSpec, EngineConfig, simulate
from dallygym.sim.engine import RENEWAL_MODES
from dallygym.sim.policies import POLICIES

OUT = Path(__file__).resolve().parent / "results" / "reference_results.json"
#: Environment episodes hashed: id -> (episodes, the fixed trace they replay; the registered ids
#: draw a fresh trace per reset, which would make the cell depend on the generators too).
ENV_EPISODES = {"Dally-v0": (2, "batch-500"), "DallySmall-v0": (6, "small"), "DallyQueueSmall-v0": (3, "small")}


def _plain(summary: dict) -> dict:
    return {k: (float(v) if isinstance(v, (int, float, np.number)) else str(v)) for k, v in summary.items()}


def _obs_bytes(obs) -> bytes:
    if isinstance(obs, dict):  # DallyQueue: a Dict observation, hashed key by key
        return b"".join(obs[key].tobytes() for key in sorted(obs))
    return obs.tobytes()


def episode_digest(env_id: str, agent: str, episodes: int, trace: str, seed: int = 5) -> str:
    """SHA-256 over whole episodes: observations, rewards and each episode's final summary."""
    env = gym.make(env_id, trace=trace)
    rng = np.random.default_rng(seed)
    heuristic = dallygym.heuristic_agent("dally", env) if agent == "dally" else None
    digest = hashlib.sha256()
    for episode in range(episodes):
        obs, info = env.reset(seed=episode)
        digest.update(_obs_bytes(obs))
        done = env.unwrapped._done
        while not done:
            if heuristic is not None:
                action = heuristic.predict(obs)[0]
            else:
                action = rng.choice(np.flatnonzero(info["action_mask"]))
            obs, reward, terminated, truncated, info = env.step(int(action))
            digest.update(_obs_bytes(obs))
            digest.update(np.float64(reward).tobytes())
            done = terminated or truncated
        summary = info.get("summary") or dallygym.sim.metrics.summarize(env.unwrapped.engine)
        digest.update(json.dumps(_plain(summary), sort_keys=True).encode())
    return digest.hexdigest()


def reference() -> dict:
    out = {}
    for policy in POLICIES:
        for trace in ("batch-500", "poisson-411"):
            for racks in (2, 4, 8, 16):
                out[f"{policy}/{trace}/{racks}"] = _plain(
                    simulate(trace, racks, policy=policy, config=EngineConfig()).summary
                )
        out[f"{policy}/small"] = _plain(
            simulate("small", ClusterSpec(2, 2, 8), policy=policy, config=EngineConfig()).summary
        )
    for renewal in RENEWAL_MODES[1:]:
        for policy in ("dally", "dally-nowait", "tiresias"):
            for racks in (2, 8):
                out[f"{policy}/batch-500/{racks}/{renewal}"] = _plain(
                    simulate("batch-500", racks, policy=policy, config=EngineConfig(renewal=renewal)).summary
                )
    for env_id, (episodes, trace) in ENV_EPISODES.items():
        for agent in ("dally", "random"):
            out[f"env/{env_id}/{agent}"] = episode_digest(env_id, agent, episodes, trace)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed reference")
    args = parser.parse_args(argv)
    now = json.loads(json.dumps(reference()))  # through JSON, as stored
    if args.check:
        stored = json.loads(OUT.read_text())
        differ = sorted(k for k in stored.keys() | now.keys() if stored.get(k) != now.get(k))
        print(f"{len(stored)} reference cells; differing: {', '.join(differ) if differ else 'none'}")
        return 1 if differ else 0
    OUT.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({len(now)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
