"""dallygym: a multi-tenant GPU-cluster simulator for network-placement-sensitive deep-learning
scheduling (the Dally paper), with its reference schedulers.

Data flows one way: trace -> jobs -> engine (cluster + latency model + policy) -> metrics.

The code is grouped by role: ``dallygym.sim`` (the simulation core), ``dallygym.envs`` (the
Gymnasium environments), ``dallygym.learning`` (learned agents) and ``dallygym.experiments``
(command line, comparisons, sweeps, reports). The names below are the public ones.
"""

import sys

from . import _moved
from .envs.heuristics import evaluate, heuristic_agent
from .envs.offer import DallyEnv, InvalidActionWarning, ResetNeeded
from .envs.queue import DallyQueueEnv
from .sim.cluster import ClusterError, ClusterSpec, ClusterState, Tier
from .sim.engine import Engine, EngineConfig, EngineError, Offer, run_policy
from .sim.latency import LatencyModel, get_latency_model
from .sim.metrics import SUMMARY_KEYS, RunResult, collect
from .sim.models import MODEL_NAMES, ModelProfile, UnknownModelError
from .sim.policies import POLICIES, Policy, make_policy
from .sim.simulate import build_engine, simulate
from .sim.trace import TraceError, load_trace

__version__ = "0.1.0"

_moved.install(sys.modules[__name__])  # the former flat module paths stay importable (see dallygym._moved)


def _register_envs() -> None:
    """Register the environments with Gymnasium (the package's only import-time action).

    The training ids draw a fresh seeded trace at every reset (``reset(seed=s)`` differs with
    ``s``); ``trace="batch-500"`` (or ``"small"``) replays the paper's fixed trace."""
    import gymnasium as gym

    course = {"racks": 2, "machines_per_rack": 2, "gpus_per_machine": 8, "trace": "gen:small"}
    envs = {
        "Dally-v0": ("dallygym.envs.offer:DallyEnv", {"trace": "gen:batch-500"}),
        "DallySmall-v0": ("dallygym.envs.offer:DallyEnv", course),
        "DallyQueue-v0": ("dallygym.envs.queue:DallyQueueEnv", {"trace": "gen:batch-500", "max_candidates": 512}),
        "DallyQueueSmall-v0": ("dallygym.envs.queue:DallyQueueEnv", {**course, "max_candidates": 64}),
    }
    for env_id, (entry_point, kwargs) in envs.items():
        if env_id not in gym.registry:
            # Without gymnasium's two pass-through wrappers (order enforcing and the passive
            # checker: about 0.26 µs a step together): the environments refuse a step or a render
            # before reset themselves, and the tests hold them to gymnasium's and
            # stable-baselines3's full checkers. gym.make(..., disable_env_checker=False) puts the
            # passive checker back.
            gym.register(
                id=env_id, entry_point=entry_point, kwargs=kwargs, order_enforce=False, disable_env_checker=True
            )


_register_envs()

__all__ = [
    "MODEL_NAMES",
    "POLICIES",
    "SUMMARY_KEYS",
    "ClusterError",
    "ClusterSpec",
    "ClusterState",
    "DallyEnv",
    "DallyQueueEnv",
    "Engine",
    "EngineConfig",
    "EngineError",
    "InvalidActionWarning",
    "LatencyModel",
    "ModelProfile",
    "Offer",
    "Policy",
    "ResetNeeded",
    "RunResult",
    "Tier",
    "TraceError",
    "UnknownModelError",
    "build_engine",
    "collect",
    "evaluate",
    "get_latency_model",
    "heuristic_agent",
    "load_trace",
    "make_policy",
    "run_policy",
    "simulate",
]
