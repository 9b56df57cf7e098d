"""One call from a trace to metrics: ``simulate(trace, cluster, policy)``."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

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
    profile: str | None = None,
) -> Engine:
    """An engine ready to run: the trace loaded and validated against the cluster.

    ``trace`` is a shipped trace name, a path or a DataFrame; ``cluster`` a
    :class:`ClusterSpec` or a number of racks (8 machines x 8 GPUs each). ``profile``: a set
    of readings of the papers' open points (:mod:`dallygym.sim.profiles`: ``"default"``,
    ``"paper"``, ``"reference"``) applied to a policy given by name and to the config's renewal
    (explicit options win: a policy instance, a config with a renewal other than the default).
    """
    if profile is not None:
        from .profiles import make_profile_policy, profile_config

        policy = make_profile_policy(policy, profile)
        config = profile_config(config, profile)
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
    progress: bool = False,
    profile: str | None = None,
) -> RunResult:
    """Run ``policy`` on ``trace`` over ``cluster`` to the end and return its metrics.
    ``progress``: show a :class:`ProgressLine` on stderr while it runs (when stderr is a
    terminal). ``profile``: see :func:`build_engine` and ``docs/profiles.md``."""
    engine = build_engine(trace, cluster, policy, latency, config, profile=profile)
    meter = ProgressLine(engine.policy.name) if progress and ProgressLine.wanted() else None
    return collect(run_policy(engine, progress=meter))


class ProgressLine:
    """One line on stderr, rewritten at most twice a second while a native run goes on:
    jobs finished, simulated time, wall time. Cleared when the run ends.

    For long runs at the command line; :meth:`wanted` says whether to show one (stderr is a
    terminal and the ``CI`` environment variable is unset).
    """

    def __init__(self, label: str, stream: TextIO | None = None, every_s: float = 0.5) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.start = time.perf_counter()
        self._next = self.start + every_s
        self._shown = False

    @staticmethod
    def wanted(stream: TextIO | None = None) -> bool:
        stream = stream if stream is not None else sys.stderr
        return not os.environ.get("CI") and hasattr(stream, "isatty") and stream.isatty()

    def __call__(self, engine) -> None:
        now = time.perf_counter()
        if engine.finished == engine.n:
            if self._shown:
                self.stream.write("\r\033[K")
                self.stream.flush()
            return
        if now < self._next:
            return
        self._next = now + self.every_s
        done_h = (engine.now_s - engine.first_arrival_s) / 3600
        self.stream.write(
            f"\r\033[K{self.label}: {engine.finished:,}/{engine.n:,} jobs done, "
            f"{done_h:,.1f} h simulated, {now - self.start:,.0f} s"
        )
        self.stream.flush()
        self._shown = True
