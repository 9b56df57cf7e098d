"""Tune the ``tuned-priority`` policy's weights by the cross-entropy method, on training draws.

    python agents/tune_priority.py [--iterations 10] [--population 12] [--elite 3] [--seed 0]
        [--out dallygym/data/tuned_priority.json]

The policy's key is ``w . f`` over the 20 ``DallyQueue-v0`` job features (lower is offered
first); offers are auto-tuned Dally's. The weights are searched on training draws only:
generated ``batch-500`` and ``poisson-411`` traces with seeds 10-19 (disjoint from the
validation seeds 100-101 and the held-out seeds >= 2000) at 2, 4, 8 and 16 racks of 8 x 8 GPUs.

Objective of a weight vector on one draw (lower is better), relative to auto-tuned Dally's
native run of the same draw::

    mean JCT / Dally's mean JCT + PENALTY x max(0, 100 x (makespan / Dally's makespan - 1) - 1)

i.e. the mean-JCT ratio, plus PENALTY for each percentage point by which the makespan exceeds
Dally's by more than 1 %. The objective of a weight vector in an iteration is its mean over
that iteration's draws: one draw per (generator, racks) cell, its seed drawn from 10-19, the
same draws for every member of the iteration (common random numbers).

CEM: a Gaussian over the searched weights (every feature but the three speed factors, which
are 0 under the hidden sensitivity the policy sees), diagonal. Each iteration draws
``population - 1`` vectors, scales each to unit length (only the direction of ``w`` changes
the order), and evaluates them together with the current mean; the ``elite`` best set the new
mean and standard deviation (smoothed with the old by ``SMOOTHING``, the deviation floored at
``STD_FLOOR``). The result is the final mean. Every draw of the search comes from one seeded
numpy Generator and every run is deterministic, so the script is too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dallygym import ClusterSpec, simulate  # noqa: E402
from dallygym.envs.queue import JOB_FEATURES  # noqa: E402
from dallygym.learning.priority_search import SMOOTHING, STD_FLOOR, TrainingDraws, cem  # noqa: E402
from dallygym.sim.policies.tuned import TunedPriorityPolicy  # noqa: E402

OUT = ROOT / "dallygym" / "data" / "tuned_priority.json"
GENERATORS = ("batch-500", "poisson-411")
TRAIN_SEEDS = tuple(range(10, 20))
RACKS = (2, 4, 8, 16)
#: Objective added per percentage point of makespan beyond Dally's + 1 %.
PENALTY = 1.0
#: Features not searched (weight 0): the speed factors, always 0 under hidden sensitivity.
FIXED_ZERO = ("speed_machine", "speed_rack", "speed_network")
SEARCHED = tuple(f for f in JOB_FEATURES if f not in FIXED_ZERO)
#: The starting mean: small demand and short remaining estimate first (in the features' log
#: scale, the smallest-demand-remaining rule's two ingredients), scaled to unit length.
START = {"gpus": 1.0, "remaining_estimate": 1.0}
START_STD = 0.5


def full_weights(searched: np.ndarray) -> np.ndarray:
    """The 20 weights (``JOB_FEATURES`` order) from the searched ones, zeros elsewhere."""
    w = np.zeros(len(JOB_FEATURES))
    for value, name in zip(searched, SEARCHED):
        w[JOB_FEATURES.index(name)] = value
    return w


class Objective(TrainingDraws):
    """The training objective (see the module docstring), with Dally's runs and the traces cached."""

    def __init__(self, rng: np.random.Generator, penalty: float = PENALTY) -> None:
        super().__init__()
        self.rng = rng
        self.penalty = penalty
        #: Each iteration's draws, (generator, seed, racks).
        self.draws: list[list[tuple[str, int, int]]] = []

    def on_draw(self, weights: np.ndarray, gen: str, seed: int, racks: int) -> float:
        ref = self.dally(gen, seed, racks)
        run = simulate(
            self.trace(gen, seed), ClusterSpec(racks, 8, 8), policy=TunedPriorityPolicy(weights=weights)
        ).summary
        excess_pp = 100.0 * (run["makespan_s"] / ref["makespan_s"] - 1.0) - 1.0
        return run["jct_mean_s"] / ref["jct_mean_s"] + self.penalty * max(0.0, excess_pp)

    def __call__(self, candidates: np.ndarray, iteration: int) -> np.ndarray:
        draws = [(gen, int(self.rng.choice(TRAIN_SEEDS)), racks) for gen in GENERATORS for racks in RACKS]
        self.draws.append(draws)
        return np.array([np.mean([self.on_draw(full_weights(c), *d) for d in draws]) for c in candidates])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--population", type=int, default=12, help="vectors per iteration, the mean included")
    parser.add_argument("--elite", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    objective = Objective(rng)
    mean0 = np.array([START.get(name, 0.0) for name in SEARCHED])
    started = time.perf_counter()

    def log(row):
        print(
            f"iteration {row['iteration']}: mean {row['mean_objective']:.4f}, best {row['best_objective']:.4f}, "
            f"elite {row['elite_objective']:.4f}, population {row['population_objective']:.4f} "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )

    mean, history = cem(objective, mean0, START_STD, rng, args.iterations, args.population, args.elite, log=log)
    for row, draws in zip(history, objective.draws):
        row["draws"] = [f"{g}/seed{s}/{r}racks" for g, s, r in draws]
    weights = full_weights(mean)
    result = {
        "features": list(JOB_FEATURES),
        "weights": [round(float(x), 6) for x in weights],
        "settings": {
            "method": "cross-entropy method, diagonal Gaussian, samples scaled to unit length",
            "iterations": args.iterations,
            "population": args.population,
            "elite": args.elite,
            "seed": args.seed,
            "start_mean": START,
            "start_std": START_STD,
            "smoothing": SMOOTHING,
            "std_floor": STD_FLOOR,
            "searched": list(SEARCHED),
            "fixed_zero": list(FIXED_ZERO),
            "training": {
                "generators": list(GENERATORS),
                "seeds": list(TRAIN_SEEDS),
                "racks": list(RACKS),
                "cluster": "racks x 8 machines x 8 GPUs, latency dally-paper, lease 3600 s",
                "draws_per_iteration": "one per (generator, racks), seed drawn from the seeds",
            },
            "objective": (
                "mean over the iteration's draws of mean JCT / Dally's + "
                f"{PENALTY} x max(0, makespan excess over Dally's in percentage points - 1)"
            ),
            "offers": "auto-tuned dally (Algorithm 1)",
        },
        "history": history,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"weights: {dict(zip(JOB_FEATURES, result['weights']))}")
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
