"""dallygym: a multi-tenant GPU-cluster simulator for network-placement-sensitive deep-learning
scheduling (the Dally paper), with its reference schedulers.

Data flows one way: trace -> jobs -> engine (cluster + latency model + policy) -> metrics.
"""

from .cluster import ClusterError, ClusterSpec, ClusterState, Tier
from .engine import Engine, EngineConfig, EngineError, Offer, run_policy
from .env import DallyEnv, InvalidActionWarning, ResetNeeded
from .heuristics import evaluate, heuristic_agent
from .latency import LatencyModel, get_latency_model
from .metrics import SUMMARY_KEYS, RunResult, collect
from .models import MODEL_NAMES, ModelProfile, UnknownModelError
from .policies import POLICIES, Policy, make_policy
from .queue_env import DallyQueueEnv
from .simulate import build_engine, simulate
from .trace import TraceError, load_trace

__version__ = "0.1.0"


def _register_envs() -> None:
    """Register the environments with Gymnasium (the package's only import-time action).

    The training ids draw a fresh seeded trace at every reset (``reset(seed=s)`` differs with
    ``s``); ``trace="batch-500"`` (or ``"small"``) replays the paper's fixed trace."""
    import gymnasium as gym

    course = {"racks": 2, "machines_per_rack": 2, "gpus_per_machine": 8, "trace": "gen:small"}
    envs = {
        "Dally-v0": ("dallygym.env:DallyEnv", {"trace": "gen:batch-500"}),
        "DallySmall-v0": ("dallygym.env:DallyEnv", course),
        "DallyQueue-v0": ("dallygym.queue_env:DallyQueueEnv", {"trace": "gen:batch-500", "max_candidates": 512}),
        "DallyQueueSmall-v0": ("dallygym.queue_env:DallyQueueEnv", {**course, "max_candidates": 64}),
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
