"""Lower bounds on what any scheduler can reach on a trace and cluster.

Three relaxations, each of which every schedule the engine can produce satisfies:

* **No queueing** (per job): each job starts at its arrival, as if it had the cluster to itself,
  and runs at the speed of its fastest placement from start to end (no preemption, no restart,
  the most consolidated shape, :func:`fastest_run_s`). So job ``j`` ends no earlier than
  ``a_j + p_j`` (arrival + fastest run time).
* **Capacity** (the cluster as one pool): the engine gives each GPU to one job at a time, and a
  job holds its GPU demand ``g_j`` while it runs, at most at its fastest speed, so it uses at
  least ``w_j = g_j x p_j`` GPU-seconds. Relax the cluster's ``C`` GPUs to one server that does
  ``C`` GPU-seconds of anyone's work per second, splittable and preemptible at will. On that
  server preemptive shortest-remaining-work-first minimises the sum of completion times for any
  arrival times (Schrage, *Operations Research* 16(3), 1968), so its sum
  (:func:`fluid_completion_s`) bounds every real schedule's. For the makespan: the jobs arriving
  at or after any time ``t`` need at least their work / ``C`` after ``t``.
* **Both at once, rank by rank**: on the one server, shortest-remaining-work-first also leaves
  the fewest jobs unfinished at every moment (Schrage 1968; Smith, *Operations Research* 26(1),
  1978), so the ``k``-th completion of any real schedule is no earlier than the ``k``-th
  completion there; nor is it earlier than the ``k``-th smallest ``a_j + p_j`` (the ``k`` jobs
  finished by then each ended no sooner than their own). Each rank's completion is at least
  the larger of the two, and the sum over the ranks bounds the sum of completion times.
* **Split** (by sums): split the jobs into a set ``S`` and the rest. The schedule's jobs of
  ``S`` are a schedule of ``S`` alone, so their completion times sum to at least the rank bound
  of ``S``; the rest end no earlier than their own ``a_j + p_j``. Any ``S`` gives a valid
  bound (``S`` = every job: the rank bound itself); :func:`completion_sum_bound_s` tries a
  short sequence of them and keeps the largest.

Mean JCT >= (that sum - the arrivals' sum) / jobs, for every scheduler (:func:`lower_bound`).
The no-queueing bound is tight where the cluster does not contend; the capacity terms are what
say anything where it does.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import pandas as pd

from .cluster import ClusterSpec, canonical_shape
from .latency import LatencyModel, get_latency_model
from .trace import load_trace

#: What :func:`lower_bound` relaxes, in one line (the benchmarks' tables quote it).
DESCRIPTION = (
    "each job no sooner than at its fastest placement from its arrival, and the cluster's GPUs as one pool "
    "doing the jobs' least work (GPUs x fastest run time), shortest remaining first; each rank of completion "
    "no earlier than under either"
)


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


def fluid_completion_s(arrival_s: np.ndarray, work_gpu_s: np.ndarray, gpus: int) -> np.ndarray:
    """Each job's completion time on one server doing ``gpus`` GPU-seconds of work per second
    under preemptive shortest-remaining-work-first (ties: the earlier arrival, then the lower
    index): the schedule whose completion times have the least sum on that server (module
    docstring). ``work_gpu_s`` >= 0 per job; a job of no work completes at its arrival."""
    arrival = np.asarray(arrival_s, dtype=np.float64)
    work = np.asarray(work_gpu_s, dtype=np.float64)
    if arrival.shape != work.shape or arrival.ndim != 1:
        raise ValueError(f"arrival_s and work_gpu_s must be 1-D of one length, got {arrival.shape} and {work.shape}")
    if not gpus > 0:
        raise ValueError(f"gpus must be positive, got {gpus!r}")
    if np.any(work < 0) or not np.all(np.isfinite(work)) or not np.all(np.isfinite(arrival)):
        raise ValueError("arrival_s and work_gpu_s must be finite, and work_gpu_s >= 0")
    order = np.argsort(arrival, kind="stable").tolist()
    times = arrival.tolist()
    need = (work / gpus).tolist()  # seconds of the whole server
    done = np.empty(arrival.size)
    ready: list[tuple[float, int, int]] = []  # (remaining seconds, arrival rank, job)
    now, i, n = -math.inf, 0, len(order)
    while i < n or ready:
        if not ready:
            now = max(now, times[order[i]])
        while i < n and times[order[i]] <= now:
            heapq.heappush(ready, (need[order[i]], i, order[i]))
            i += 1
        rest, rank, job = heapq.heappop(ready)
        upcoming = times[order[i]] if i < n else math.inf
        if now + rest <= upcoming:
            now += rest
            done[job] = now
        else:  # the next arrival comes first: run until then, and choose again
            heapq.heappush(ready, (rest - (upcoming - now), rank, job))
            now = upcoming
    return done


#: At most this many sets S does completion_sum_bound_s try (each gives a valid bound).
MAX_SPLITS = 64


def completion_sum_bound_s(arrival_s: np.ndarray, fastest_s: np.ndarray, num_gpus: np.ndarray, gpus: int) -> float:
    """A lower bound on the sum of the jobs' completion times (module docstring, "rank by
    rank" and "split"): the largest, over the sets ``S`` tried, of the rank bound of ``S`` (per
    rank the later of the one server's completion and the own ``a_j + p_j``, each sorted)
    plus ``a_j + p_j`` summed over the other jobs.

    The sets: every job, then repeatedly the jobs of the last set whose completion there is at
    least their own ``a_j + p_j`` (the others gain by leaving it), until the set stops changing
    or is empty (at most :data:`MAX_SPLITS` sets); the empty set (the no-queueing bound) is
    always among them."""
    arrival = np.asarray(arrival_s, dtype=np.float64)
    own = arrival + np.asarray(fastest_s, dtype=np.float64)
    work = np.asarray(num_gpus, dtype=np.float64) * np.asarray(fastest_s, dtype=np.float64)
    best = own_total = float(own.sum())
    members = np.arange(arrival.size)
    for _ in range(MAX_SPLITS):
        if not members.size:
            break
        inside = fluid_completion_s(arrival[members], work[members], gpus)
        outside = own_total - float(own[members].sum())
        ranked = np.maximum(np.sort(inside), np.sort(own[members]))
        best = max(best, float(ranked.sum()) + outside)
        kept = members[inside >= own[members]]
        if kept.size == members.size:
            break
        members = kept
    return best


def lower_bound(
    trace: str | pd.DataFrame, cluster: ClusterSpec | int, latency: str | LatencyModel = "dally-paper"
) -> dict:
    """Bounds no scheduler can beat on ``trace``, ``cluster`` and ``latency`` (module docstring):

    * ``jct_mean_s``: (:func:`completion_sum_bound_s` - the arrivals' sum) / jobs (at least the
      mean fastest run time, the no-queueing mean);
    * ``makespan_s``: the later of the last ``a_j + p_j`` and, over each arrival time ``t``,
      ``t`` + the work of the jobs arriving at or after ``t`` / the cluster's GPUs; minus the
      first arrival (the makespan's definition: last end - first arrival);
    * ``jct_mean_no_queue_s``, ``makespan_no_queue_s``: the no-queueing terms alone (each job
      at its fastest placement from its arrival), which the capacity terms can only raise;
    * ``jobs``: the number of jobs.
    """
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(racks=cluster)
    frame = load_trace(trace, cluster=spec)
    run = fastest_run_s(frame, spec, latency)
    arrival = frame["arrival_s"].to_numpy(dtype=np.float64)
    g = frame["num_gpus"].to_numpy(dtype=np.float64)
    gpus = spec.num_gpus
    first = float(arrival.min())
    order = np.argsort(arrival, kind="stable")
    later_work = np.cumsum((g * run)[order][::-1])[::-1]  # work arriving at or after each arrival
    no_queue_end = float((arrival + run).max())
    end = max(no_queue_end, float(np.max(arrival[order] + later_work / gpus)))
    total = completion_sum_bound_s(arrival, run, g, gpus)
    return {
        # (the no-queueing mean as such where it binds, free of the sums' rounding)
        "jct_mean_s": max(float(run.mean()), (total - float(arrival.sum())) / len(frame)),
        "makespan_s": end - first,
        "jct_mean_no_queue_s": float(run.mean()),
        "makespan_no_queue_s": no_queue_end - first,
        "jobs": int(len(frame)),
    }
