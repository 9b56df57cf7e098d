"""One call from a trace to metrics: ``simulate(trace, cluster, policy)``."""

from __future__ import annotations

import pandas as pd

from .cluster import ClusterSpec
from .engine import Engine, EngineConfig, run_policy
from .latency import LatencyModel, get_latency_model
from .metrics import RunResult, collect
from .policies import Policy, make_policy
from .trace import load_trace


def build_engine(
    trace: str | pd.DataFrame,
    cluster: ClusterSpec | int,
    policy: str | Policy = "dally",
    latency: str | LatencyModel = "dally-paper",
    config: EngineConfig | None = None,
) -> Engine:
    """An engine ready to run: the trace loaded and validated against the cluster.

    ``trace`` is a shipped trace name, a path or a DataFrame; ``cluster`` a
    :class:`ClusterSpec` or a number of racks (8 machines x 8 GPUs each).
    """
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(racks=cluster)
    latency_model = get_latency_model(latency) if isinstance(latency, str) else latency
    frame = load_trace(trace, cluster=spec)
    return Engine(frame, spec, make_policy(policy), latency_model, config)


def simulate(
    trace: str | pd.DataFrame,
    cluster: ClusterSpec | int,
    policy: str | Policy = "dally",
    latency: str | LatencyModel = "dally-paper",
    config: EngineConfig | None = None,
) -> RunResult:
    """Run ``policy`` on ``trace`` over ``cluster`` to the end and return its metrics."""
    return collect(run_policy(build_engine(trace, cluster, policy, latency, config)))
