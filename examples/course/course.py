"""The course-sized environment, its held-out traces and its trivial baselines, in one place.

Everything in ``examples/course/`` (the PPO script, the ranking command, the notebooks) builds
its environment and its evaluation traces here, so a student's agent and the shipped policies
are always compared on the same cluster and the same held-out traces.

The course environment is ``DallyQueueSmall-v0`` with its registered cluster: 2 racks x 2
machines x 8 GPUs, a fresh ``small`` trace (60 jobs) per reset, Dally's Algorithm 1 answering
the offers, the agent choosing which waiting job is served next (``lease_picks="waiting"``,
reward ``"jct-makespan"``, ``makespan_credit="bound"``). Training draws the ``small``
generator's seeds from 100,000 up; the held-out course traces are seeds 2001-2010, never
trained on.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pandas as pd

import dallygym  # noqa: F401  (registers the environments)
from dallygym import ClusterSpec
from dallygym.sim.trace import generate_trace

ENV_ID = "DallyQueueSmall-v0"
#: The course cluster: the registered size of ``DallyQueueSmall-v0``.
CLUSTER = ClusterSpec(racks=2, machines_per_rack=2, gpus_per_machine=8)
GENERATOR = "small"
#: Held-out course traces: seeds of the ``small`` generator that training never draws.
HELDOUT_SEEDS = tuple(range(2001, 2011))
#: Validation traces for a training script's progress prints (not held out from anyone, but
#: disjoint from both the training draws and the held-out seeds).
VALIDATION_SEEDS = (1001, 1002, 1003)
#: Training draws seeds from here up.
FIRST_TRAINING_SEED = 100_000


def training_trace(rng: np.random.Generator) -> pd.DataFrame:
    """A fresh ``small`` trace for a training episode (seed >= FIRST_TRAINING_SEED)."""
    return generate_trace(GENERATOR, seed=int(rng.integers(FIRST_TRAINING_SEED, 2**31 - 1)))


def heldout_traces(seeds=HELDOUT_SEEDS) -> list[tuple[str, pd.DataFrame]]:
    """The held-out course traces, as (name, trace) pairs."""
    return [(f"{GENERATOR}-seed{s}", generate_trace(GENERATOR, seed=s)) for s in seeds]


#: The course's reward settings (the committed course run was trained with them); a keyword
#: given to :func:`make_env` overrides them.
REWARD = {"reward": "jct-makespan", "makespan_credit": "bound"}


def make_env(trace=None, **kwargs) -> gym.Env:
    """The course environment; ``trace=None`` draws training traces (see :func:`training_trace`)."""
    return gym.make(ENV_ID, trace=training_trace if trace is None else trace, **{**REWARD, **kwargs})


# --- trivial baselines: any learned agent must beat these to have learned anything ------------


class MaskedChoice:
    """An agent with the stable-baselines3 ``predict`` signature that chooses among the valid
    actions by a fixed rule: ``"random"`` (uniform, seeded), ``"first"`` (always slot 0: the
    offer rule's own order, i.e. exactly Dally) or ``"stop"`` (stop the pass whenever that is
    valid, else slot 0)."""

    def __init__(self, rule: str, seed: int = 0) -> None:
        if rule not in ("random", "first", "stop"):
            raise ValueError(f"unknown rule {rule!r}")
        self.rule = rule
        self.rng = np.random.default_rng(seed)

    def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
        valid = np.flatnonzero(action_masks)
        if self.rule == "random":
            return np.int64(self.rng.choice(valid)), state
        if self.rule == "stop" and action_masks[-1]:
            return np.int64(len(action_masks) - 1), state
        return np.int64(valid[0]), state
