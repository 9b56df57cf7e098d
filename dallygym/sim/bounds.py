"""Lower bounds on what any scheduler can reach on a trace and cluster.

The bound here relaxes every constraint between jobs: each job starts at its arrival (no
queueing: as if it had the cluster to itself) and runs at the speed of its fastest placement
from start to end (no preemption, no restart, the most consolidated shape). So for every
scheduler and every job, JCT >= the job's bound, hence mean JCT >= :func:`lower_bound`'s
``jct_mean_s``, and makespan >= its ``makespan_s``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .cluster import ClusterSpec, canonical_shape
from .latency import LatencyModel, get_latency_model
from .trace import load_trace


def _fewest_machine_splits(g: int, per_machine: int, machines: int) -> list[tuple[int, ...]]:
    """Every way to put ``g`` GPUs on the fewest machines (each at most ``per_machine``), as
    counts largest first; empty if that needs more than ``machines``."""
    k = math.ceil(g / per_machine)
    if k > machines:
        return []
    out: list[tuple[int, ...]] = []

    def fill(rest: int, parts: int, cap: int, head: tuple[int, ...]) -> None:
        if parts == 0:
            if rest == 0:
                out.append(head)
            return
        # Each remaining part at most cap, and the parts left must be able to hold the rest.
        for c in range(min(cap, rest), 0, -1):
            if c * parts < rest:
                break
            fill(rest - c, parts - 1, c, head + (c,))

    fill(g, k, per_machine, ())
    return out


def fastest_shapes(g: int, spec: ClusterSpec) -> list[tuple]:
    """The candidate fastest placement shapes of a ``g``-GPU job on ``spec``: one machine if it
    fits; else every fewest-machines split inside one rack if it fits a rack; else the fewest
    racks, filled rack by rack (full racks, then the rest) or as evenly as possible, each rack
    on its fewest machines."""
    gpm, mpr = spec.gpus_per_machine, spec.machines_per_rack
    if g <= gpm:
        return [((g,),)]
    if g <= spec.gpus_per_rack:
        return [canonical_shape([split]) for split in _fewest_machine_splits(g, gpm, mpr)]
    racks = math.ceil(g / spec.gpus_per_rack)
    even = [g // racks + (1 if i < g % racks else 0) for i in range(racks)]
    gpr = spec.gpus_per_rack
    greedy = [gpr] * (g // gpr) + ([g % gpr] if g % gpr else [])
    shapes = []
    for rack_counts in (greedy, even):
        per_rack = [_fewest_machine_splits(c, gpm, mpr)[0] for c in rack_counts]
        shapes.append(canonical_shape(per_rack))
    return shapes


def fastest_run_s(
    trace: str | pd.DataFrame, cluster: ClusterSpec | int, latency: str | LatencyModel = "dally-paper"
) -> np.ndarray:
    """Each job's run time at its fastest placement (the best speed factor over
    :func:`fastest_shapes`), in the trace's job order: iterations x ``iter_time_s`` / speed."""
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(racks=cluster)
    model = get_latency_model(latency) if isinstance(latency, str) else latency
    frame = load_trace(trace, cluster=spec)
    best: dict[tuple[str, int], float] = {}
    speeds = np.empty(len(frame))
    for i, (name, g) in enumerate(zip(frame["model"].tolist(), frame["num_gpus"].tolist())):
        key = (name, int(g))
        s = best.get(key)
        if s is None:
            s = best[key] = (
                1.0 if g == 1 else max(float(model.speed_factor(name, shape)) for shape in fastest_shapes(int(g), spec))
            )
        speeds[i] = s
    ideal = frame["total_iterations"].to_numpy(dtype=np.float64) * frame["iter_time_s"].to_numpy(dtype=np.float64)
    return ideal / speeds


def lower_bound(
    trace: str | pd.DataFrame, cluster: ClusterSpec | int, latency: str | LatencyModel = "dally-paper"
) -> dict:
    """The no-queueing, fastest-placement bound of ``trace`` on ``cluster``:

    * ``jct_mean_s``: mean over jobs of the fastest run time (each job's JCT if it started at
      its arrival on its fastest placement and ran without interruption);
    * ``makespan_s``: max over jobs of (arrival + fastest run time) - first arrival (the
      makespan's definition: last end - first arrival);
    * ``jobs``: the number of jobs.

    No scheduler can do better than either on the same trace, cluster and latency model.
    """
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(racks=cluster)
    frame = load_trace(trace, cluster=spec)
    run = fastest_run_s(frame, spec, latency)
    arrival = frame["arrival_s"].to_numpy(dtype=np.float64)
    return {
        "jct_mean_s": float(run.mean()),
        "makespan_s": float((arrival + run).max() - arrival.min()),
        "jobs": int(len(frame)),
    }
