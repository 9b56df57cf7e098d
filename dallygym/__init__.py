"""dallygym: a multi-tenant GPU-cluster simulator for network-placement-sensitive deep-learning
scheduling (the Dally paper), with its reference schedulers.

Data flows one way: trace -> jobs -> engine (cluster + latency model + policy) -> metrics.
"""

from .cluster import ClusterError, ClusterSpec, ClusterState, Tier
from .engine import Engine, EngineConfig, EngineError, Offer, run_policy
from .env import DallyEnv
from .heuristics import evaluate, heuristic_agent
from .latency import LatencyModel, get_latency_model
from .metrics import SUMMARY_KEYS, RunResult, collect
from .models import MODEL_NAMES, ModelProfile, UnknownModelError
from .policies import POLICIES, Policy, make_policy
from .simulate import build_engine, simulate
from .trace import TraceError, load_trace

__version__ = "0.1.0"


def _register_envs() -> None:
    """Register the environments with Gymnasium (the package's only import-time action)."""
    import gymnasium as gym

    if "Dally-v0" not in gym.registry:
        gym.register(id="Dally-v0", entry_point="dallygym.env:DallyEnv")
    if "DallySmall-v0" not in gym.registry:
        gym.register(
            id="DallySmall-v0",
            entry_point="dallygym.env:DallyEnv",
            kwargs={"racks": 2, "machines_per_rack": 2, "gpus_per_machine": 8, "trace": "small"},
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
    "Engine",
    "EngineConfig",
    "EngineError",
    "LatencyModel",
    "ModelProfile",
    "Offer",
    "Policy",
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
