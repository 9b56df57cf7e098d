"""The environments' observations: ``Dally-v0``'s offer and ``DallyQueue``'s job features."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .features import _best_offered, estimate_scale
from .layout import (
    F_ANCHOR,
    F_DONE,
    F_FINISH,
    F_ITER_TIME,
    F_RUN,
    F_TOTAL,
    I_BEST,
    I_GPUS,
    I_PREEMPTIONS,
    OC_FIRST_ARRIVAL,
    OC_GPM,
    OC_GPR,
    OC_GPUS,
    OC_JOBS,
    OC_LEASE,
    OC_LOG_1000,
    OC_LOG_LONG,
    OC_LONG,
    OC_MACHINES,
    OC_RACKS,
    _time_shown,
)
from .offers import _count_and_most, tier_limits


@njit(cache=True, nogil=True)
def offer_observation(
    out,
    consts,
    static,
    jobf,
    jobi,
    free_pm,
    free_pr,
    j,
    now,
    starvation,
    t_mc,
    t_rk,
    offered,
    current,
    speed_m,
    speed_r,
    speed_n,
    n_waiting,
    waiting_gpus,
    n_running,
    finished,
    free_total,
):
    """OfferObservation.observe's features of job ``j``'s offer into ``out`` (float32): the same
    arithmetic in the same order as its Python reference, each value rounded to float32 once
    as it is stored. ``static``: features 0-3 by job; ``offered``: bit t set for each tier t
    offered; ``current``: the tier held (renewal offers) or -1."""
    lease = consts[OC_LEASE]
    long_s = consts[OC_LONG]
    log_long = consts[OC_LOG_LONG]
    log_1000 = consts[OC_LOG_1000]
    cluster_gpus = consts[OC_GPUS]
    for k in range(4):
        out[k] = static[j, k]
    run = jobf[F_RUN, j]
    done = jobf[F_DONE, j]
    total = jobf[F_TOTAL, j]
    iter_time = jobf[F_ITER_TIME, j]
    nw = done * iter_time / run if run > 0 else 0.0
    attained = jobi[I_GPUS, j] * run / cluster_gpus
    remaining = (total - done) * iter_time
    out[4] = _time_shown(starvation, lease, long_s, log_long)
    out[5] = nw if nw < 1.0 else 1.0
    out[6] = done / total
    out[7] = _time_shown(attained, lease, long_s, log_long)
    p = jobi[I_PREEMPTIONS, j]
    out[8] = (p if p < 20 else 20) / 20.0
    out[9] = _time_shown(remaining, lease, long_s, log_long)
    out[10] = offered & 1
    out[11] = (offered >> 1) & 1
    out[12] = (offered >> 2) & 1
    out[13] = speed_m
    out[14] = speed_r
    out[15] = speed_n
    out[16] = _time_shown(t_mc, lease, long_s, log_long)
    out[17] = _time_shown(t_rk, lease, long_s, log_long)
    out[18] = starvation >= t_mc
    out[19] = starvation >= t_rk
    g = jobi[I_GPUS, j]
    machines, most_m = _count_and_most(free_pm, g)
    racks, most_r = _count_and_most(free_pr, g)
    out[20] = free_total / cluster_gpus
    out[21] = machines / consts[OC_MACHINES]
    out[22] = racks / consts[OC_RACKS]
    out[23] = most_m / consts[OC_GPM]
    out[24] = most_r / consts[OC_GPR]
    out[25] = math.log1p(n_waiting) / log_1000
    queued = waiting_gpus / cluster_gpus
    out[26] = (queued if queued < 10.0 else 10.0) / 10.0
    out[27] = math.log1p(n_running) / log_1000
    jobs = consts[OC_JOBS]
    out[28] = (jobs - finished) / jobs
    elapsed = now - consts[OC_FIRST_ARRIVAL]
    out[29] = _time_shown(elapsed, lease, long_s, log_long)
    out[30] = (elapsed % lease) / lease
    out[31] = 0.0 if current < 0 else (current + 1) / 3.0


@njit(cache=True, nogil=True)
def queue_demands(c, jobi, best_of, present, demands, bests, row_stamp, stamp, stale, cluster, free_of):
    """The distinct GPU demands of candidates ``c``, increasing, into ``demands`` and each one's
    best possible tier into ``bests`` (and ``best_of[demand]``); ``present`` (indexed by
    demand) is all False on entry and left so. Also the candidates whose kept row is not of
    ``stamp`` (``row_stamp[j] != stamp``), in the order of ``c``, into ``stale``; and for each
    demand whether its best possible tier is the first the free GPUs offer it
    (``free_of[demand]``: Engine._offer_tiers(demand)[0] is that tier), ``cluster`` =
    (free_pm, free_pr, racks, mpr, free_total). Returns how many demands and how many stale
    candidates."""
    n_stale = 0
    for r in range(c.size):
        j = c[r]
        g = jobi[I_GPUS, j]
        best_of[g] = jobi[I_BEST, j]
        present[g] = True
        if row_stamp[j] != stamp:
            stale[n_stale] = j
            n_stale += 1
    free_pm, free_pr, racks, mpr, free_total = cluster
    limits = tier_limits(free_pm, free_pr, racks, mpr)
    m = 0
    for g in range(present.size):
        if present[g]:
            present[g] = False
            demands[m] = g
            bests[m] = best_of[g]
            m += 1
            free_of[g] = _best_offered(g, free_total, limits) == best_of[g]
    return m, n_stale


@njit(cache=True, nogil=True)
def queue_shown_rows(
    c,
    every,
    rows,
    row_estimate,
    now,
    largest,
    jobf,
    jobi,
    free_of,
    limits_of,
    timed,
    jobs,
    mask,
    shown,
    idle_per_machine,
    free_per_machine,
    free_per_rack,
):
    """QueueObservation.observe's job rows at a pick from rows kept by job (see
    QueueObservation._job_features_cached): candidate ``c[r]``'s kept row into row ``r`` of
    ``jobs``, with what the pick changes computed as :func:`queue_job_features` does (feature 4
    from ``free_of``, 17-18 from ``limits_of`` if ``timed``, 19 from ``row_estimate`` and
    ``largest``); ``mask`` 1 there. Rows ``c.size`` to ``shown`` (shown before, empty now) are
    cleared. Returns the summed GPU demand of ``every`` (all the candidates, shown or not) and,
    for the cluster features, the idle GPUs, the most free GPUs of a machine and of a rack."""
    k = c.size
    width = rows.shape[1]
    most = -np.inf
    for r in range(k):
        estimate = row_estimate[c[r]]
        if estimate > most:
            most = estimate
    scale = estimate_scale(largest, most)
    for r in range(k):
        j = c[r]
        row = jobs[r]
        kept = rows[j]
        for f in range(width):
            row[f] = kept[f]
        g = jobi[I_GPUS, j]
        row[4] = free_of[g]
        if timed:
            starvation = now - jobf[F_ANCHOR, j]
            row[17] = starvation >= limits_of[g, 0]
            row[18] = starvation >= limits_of[g, 1]
        row[19] = row_estimate[j] / scale
        mask[r] = 1.0
    for r in range(k, shown):
        for f in range(width):
            jobs[r, f] = 0.0
        mask[r] = 0.0
    demand = 0
    for i in range(every.size):
        demand += jobi[I_GPUS, every[i]]
    idle = 0
    for m in range(idle_per_machine.size):
        idle += idle_per_machine[m]
    return demand, idle, free_per_machine.max(), free_per_rack.max()


@njit(cache=True, nogil=True)
def makespan_bound(now, running, waiting, jobf, best_speed):
    """DallyQueueEnv.makespan_bound_s: the latest of ``now``, the running jobs' finish times
    and, for each waiting job, now + its remaining ideal time / ``best_speed``."""
    bound = now
    if running.size:
        most = jobf[F_FINISH, running[0]]
        for i in range(1, running.size):
            if jobf[F_FINISH, running[i]] > most:
                most = jobf[F_FINISH, running[i]]
        if most > bound:
            bound = most
    if waiting.size:
        most = -np.inf
        for i in range(waiting.size):
            j = waiting[i]
            rest = (jobf[F_TOTAL, j] - jobf[F_DONE, j]) * jobf[F_ITER_TIME, j] / best_speed[j]
            if rest > most:
                most = rest
        if now + most > bound:
            bound = now + most
    return bound
