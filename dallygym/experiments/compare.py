"""Run several policies on the same trace and cluster: one row of summary metrics per policy."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

import pandas as pd

from ..sim.cluster import ClusterSpec
from ..sim.engine import EngineConfig
from ..sim.latency import LatencyModel, get_latency_model
from ..sim.metrics import SUMMARY_KEYS
from ..sim.policies import Policy, make_policy
from ..sim.simulate import simulate
from ..sim.trace import load_trace

#: Columns of a comparison row, after ``policy``: the summary keys of ``dallygym simulate``.
COMPARE_COLUMNS = SUMMARY_KEYS


def compare(
    trace: str | pd.DataFrame,
    cluster: ClusterSpec | int,
    policies: Sequence[str | Policy],
    latency: str | LatencyModel = "dally-paper",
    config: EngineConfig | None = None,
    progress: Callable[[str], None] | None = None,
    profile: str | None = None,
    results: dict | None = None,
) -> pd.DataFrame:
    """Simulate each policy on the same trace and cluster; one row per policy.

    Columns: ``policy``, the summary keys (:data:`COMPARE_COLUMNS`) and ``wall_s`` (the
    run's wall time, for benchmarks: it is the only non-deterministic column). ``progress``:
    called with a line after each policy's run; when given, each run also shows a
    :class:`~dallygym.sim.simulate.ProgressLine` (on a terminal). ``profile``: readings of the
    papers' open points applied to every policy given by name and to the config
    (:mod:`dallygym.sim.profiles`). ``results``: a dict that, when given, receives each policy's
    :class:`~dallygym.sim.metrics.RunResult` by policy name (for figures).
    """
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(racks=cluster)
    frame = load_trace(trace, cluster=spec)  # load and validate once for every policy
    latency_model = get_latency_model(latency) if isinstance(latency, str) else latency
    if profile is not None:
        from ..sim.profiles import make_profile_policy, profile_config

        built = [make_profile_policy(p, profile) for p in policies]
        config = profile_config(config, profile)
    else:
        built = [make_policy(p) for p in policies]  # fail on an unknown name before any run
    rows = []
    for i, policy in enumerate(built, 1):
        start = time.perf_counter()
        result = simulate(
            frame, spec, policy=policy, latency=latency_model, config=config, progress=progress is not None
        )
        wall = time.perf_counter() - start
        if results is not None:
            results[policy.name] = result
        rows.append({"policy": policy.name, **{k: result.summary[k] for k in COMPARE_COLUMNS}, "wall_s": wall})
        if progress:
            progress(f"[{i}/{len(built)}] {policy.name}: {wall:.2f} s")
    return pd.DataFrame(rows)


def hours_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A result frame as the commands print it in ``--format table``: every ``*_s`` column in
    hours with one decimal and renamed ``*_h``, ``utilization`` with three decimals. The csv and
    json formats keep the frame as it is (seconds, ``*_s``), so that scripts read exact values."""
    shown = frame.copy()
    seconds = [c for c in shown.columns if c.endswith("_s")]
    for col in seconds:
        shown[col] = (shown[col] / 3600).map(lambda h: f"{h:,.1f}")
    shown = shown.rename(columns={c: c[:-2] + "_h" for c in seconds})
    if "utilization" in shown.columns:
        shown["utilization"] = shown["utilization"].map(lambda u: f"{u:.3f}")
    return shown


#: Mean queueing below this (a millisecond) counts as none in :func:`contention_note`.
QUEUE_TOLERANCE_S = 1e-3


def contention_note(frame: pd.DataFrame, cluster: ClusterSpec) -> str | None:
    """A one-line hint when a comparison cannot tell the policies apart, else None.

    A policy only matters when jobs compete for GPUs. If no job waited under any policy, or
    every policy produced the same summary, the trace fits this cluster with room to spare and
    the table says little about the policies: a smaller cluster makes the jobs contend.
    """
    if frame.empty:
        return None
    summary = frame[list(COMPARE_COLUMNS)]
    # The mean wait is a difference of float times: a cluster that never queues shows ~1e-12 s.
    never_queued = bool((summary["queue_mean_s"].abs() < QUEUE_TOLERANCE_S).all())
    identical = len(summary) > 1 and bool((summary.nunique(dropna=False) <= 1).all())
    if not (never_queued or identical):
        return None
    size = f"{cluster.racks} racks, {cluster.num_gpus} GPUs"
    if never_queued:
        return (
            f"note: no job waited under any policy: the cluster ({size}) never contends for this trace, "
            f"so the comparison says little about the policies; try fewer racks (--racks)"
        )
    return (
        f"note: every policy gave the same results: the cluster ({size}) barely contends for this "
        f"trace; try fewer racks (--racks)"
    )


def stderr_progress(message: str) -> None:
    """Progress lines on stderr (stdout stays a clean table / CSV / JSON)."""
    print(message, file=sys.stderr, flush=True)
