"""Run several policies on the same trace and cluster: one row of summary metrics per policy."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

import pandas as pd

from .cluster import ClusterSpec
from .engine import EngineConfig
from .latency import LatencyModel, get_latency_model
from .metrics import SUMMARY_KEYS
from .policies import Policy, make_policy
from .simulate import simulate
from .trace import load_trace

#: Columns of a comparison row, after ``policy``: the summary keys of ``dallygym simulate``.
COMPARE_COLUMNS = SUMMARY_KEYS


def compare(
    trace: str | pd.DataFrame,
    cluster: ClusterSpec | int,
    policies: Sequence[str | Policy],
    latency: str | LatencyModel = "dally-paper",
    config: EngineConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Simulate each policy on the same trace and cluster; one row per policy.

    Columns: ``policy``, the summary keys (:data:`COMPARE_COLUMNS`) and ``wall_s`` (the
    run's wall time, for benchmarks: it is the only non-deterministic column). ``progress``:
    called with a line after each policy's run; when given, each run also shows a
    :class:`~dallygym.simulate.ProgressLine` (on a terminal).
    """
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(racks=cluster)
    frame = load_trace(trace, cluster=spec)  # load and validate once for every policy
    latency_model = get_latency_model(latency) if isinstance(latency, str) else latency
    built = [make_policy(p) for p in policies]  # fail on an unknown name before any run
    rows = []
    for i, policy in enumerate(built, 1):
        start = time.perf_counter()
        result = simulate(frame, spec, policy=policy, latency=latency_model, config=config,
                          progress=progress is not None)
        wall = time.perf_counter() - start
        rows.append({"policy": policy.name, **{k: result.summary[k] for k in COMPARE_COLUMNS}, "wall_s": wall})
        if progress:
            progress(f"[{i}/{len(built)}] {policy.name}: {wall:.2f} s")
    return pd.DataFrame(rows)


def stderr_progress(message: str) -> None:
    """Progress lines on stderr (stdout stays a clean table / CSV / JSON)."""
    print(message, file=sys.stderr, flush=True)
