"""Per-job quantities several kernels share: a job's Nw_sens and remaining estimate, the best
tier the free GPUs offer a demand, ``DallyQueue``'s job features, and a learned priority
network's keys over them (:func:`net_keys`, the compiled keys of
:class:`~dallygym.sim.policies.tuned.NetPriorityPolicy`)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .layout import (
    F_ANCHOR,
    F_DONE,
    F_ITER_TIME,
    F_NEVER,
    F_RUN,
    F_TOTAL,
    I_BEST,
    I_GPUS,
    I_PREEMPTIONS,
    I_TIER,
)
from .offers import tier_limits


@njit(cache=True, nogil=True)
def _best_offered(g, free_total, limits):
    """The first tier of Engine._offer_tiers(g) (0 machine, 1 rack, 2 network), or -1;
    ``limits`` are :func:`tier_limits` of the free GPUs."""
    if g > free_total:
        return -1
    if g == 1:
        return 0 if free_total > 0 else -1
    most_on_machine, most_on_rack, network = limits
    if g <= most_on_machine:
        return 0
    if 2 <= g <= most_on_rack:
        return 1
    if network and 2 <= g <= free_total:
        return 2
    return -1


@njit(cache=True, nogil=True)
def _nw_sens_of(j, jobf):
    run_s = jobf[F_RUN, j]
    return jobf[F_DONE, j] * jobf[F_ITER_TIME, j] / run_s if run_s > 0 else jobf[F_NEVER, j]


@njit(cache=True, nogil=True)
def _remaining_estimate(j, jobf, jobi, gpm, never_multi_nw):
    """Job ``j``'s remaining estimate in seconds: ProtectedRemainingPolicy.remaining_estimate_s
    (remaining ideal time over its measured Nw_sens; a job never run is taken at its never-run
    Nw_sens, or at ``never_multi_nw`` if that is unset and it needs more than a machine, else
    at 1), the arithmetic of :func:`queue_job_features`."""
    nw = _nw_sens_of(j, jobf)
    remaining = (jobf[F_TOTAL, j] - jobf[F_DONE, j]) * jobf[F_ITER_TIME, j]
    if nw > 0:
        return remaining / nw
    if jobi[I_GPUS, j] > gpm:
        return remaining / never_multi_nw
    return remaining / 1.0


@njit(cache=True, nogil=True)
def known_work(running, waiting, jobf, jobi, gpm, never_multi_nw, cluster_gpus):
    """The largest remaining estimate (:func:`_remaining_estimate`) of the jobs ``running`` and
    ``waiting``, and their GPU demand x estimate summed (in that order), over ``cluster_gpus``:
    ``dallygym.sim.policies.tuned.known_work``'s last two, 0 and 0 when there are none."""
    most = -np.inf
    work = 0.0
    for jobs in (running, waiting):
        for i in range(jobs.size):
            j = jobs[i]
            estimate = _remaining_estimate(j, jobf, jobi, gpm, never_multi_nw)
            work += jobi[I_GPUS, j] * estimate
            if estimate > most:
                most = estimate
    if running.size + waiting.size == 0:
        return 0.0, 0.0
    return most, work / cluster_gpus


@njit(cache=True, nogil=True)
def largest_estimate(running, waiting, jobf, jobi, gpm, never_multi_nw):
    """The largest remaining estimate of the jobs ``running`` and ``waiting`` (DallyQueueEnv's
    largest_estimate_s, :func:`_remaining_estimate`); 0 when there are none."""
    return known_work(running, waiting, jobf, jobi, gpm, never_multi_nw, 1.0)[0]


@njit(cache=True, nogil=True)
def remaining_estimates(running, waiting, jobf, jobi, gpm, never_multi_nw, out):
    """The remaining estimate (:func:`_remaining_estimate`) of each job of ``running`` and
    ``waiting`` into ``out`` (indexed by job; other entries untouched); returns the largest, 0
    when there are none (:func:`largest_estimate`)."""
    most = -np.inf
    for jobs in (running, waiting):
        for i in range(jobs.size):
            j = jobs[i]
            estimate = _remaining_estimate(j, jobf, jobi, gpm, never_multi_nw)
            out[j] = estimate
            if estimate > most:
                most = estimate
    return most if running.size + waiting.size else 0.0


@njit(cache=True, nogil=True)
def estimate_scale(largest, most):
    """What job feature 19 (``estimate_share``) divides a remaining estimate by: the largest of
    ``largest`` (any unfinished job's), ``most`` (the shown candidates') and 1e-9."""
    scale = largest
    if most > scale:
        scale = most
    if 1e-9 > scale:
        scale = 1e-9
    return scale


@njit(cache=True, nogil=True)
def queue_job_features(
    c,
    now,
    lease,
    cluster_gpus,
    gpm,
    never_multi_nw,
    largest,
    jobf,
    jobi,
    state,
    size_feature,
    free_of,
    limits_of,
    timed,
    jobs,
    times,
    estimates,
):
    """QueueObservation.observe's job features of candidates ``c`` into the rows of ``jobs``
    (float32), the same arithmetic as its numpy reference, value for value, but for the four
    times: their arguments max(t, 0) / lease go to ``times`` (4 x k: starvation, remaining
    ideal time, remaining estimate, attained service), whose log1p the caller takes with
    numpy as the reference does. ``size_feature``: feature 0 by job; ``free_of`` /
    ``limits_of``: by demand, whether its best tier is free and the offer rule's timers
    (read only if ``timed``); ``largest``: the largest estimate of any unfinished job;
    ``estimates``: scratch, k values."""
    k = c.size
    most = -np.inf
    for r in range(k):
        j = c[r]
        g = jobi[I_GPUS, j]
        best = jobi[I_BEST, j]
        starvation = now - jobf[F_ANCHOR, j]
        run = jobf[F_RUN, j]
        done = jobf[F_DONE, j]
        iter_time = jobf[F_ITER_TIME, j]
        total = jobf[F_TOTAL, j]
        nw = _nw_sens_of(j, jobf)
        remaining = (total - done) * iter_time
        # ProtectedRemainingPolicy.remaining_estimate_s
        if nw > 0:
            estimate = remaining / nw
        elif g > gpm:
            estimate = remaining / never_multi_nw
        else:
            estimate = remaining / 1.0
        if estimate > most:
            most = estimate
        service = g * run / cluster_gpus
        times[0, r] = (starvation if starvation > 0.0 else 0.0) / lease
        times[1, r] = (remaining if remaining > 0.0 else 0.0) / lease
        times[2, r] = (estimate if estimate > 0.0 else 0.0) / lease
        times[3, r] = (service if service > 0.0 else 0.0) / lease
        row = jobs[r]
        row[0] = size_feature[j]
        row[1] = best == 0
        row[2] = best == 1
        row[3] = best == 2
        row[4] = free_of[g]
        row[6] = nw if nw < 1.0 else 1.0
        row[7] = done / total
        p = jobi[I_PREEMPTIONS, j]
        row[11] = (p if p < 20 else 20) / 20.0
        row[12] = state[j] == 2  # RUNNING
        tier = jobi[I_TIER, j]
        row[13] = (tier + 1) / 3.0 if tier >= 0 else 0.0
        if timed:
            row[17] = starvation >= limits_of[g, 0]
            row[18] = starvation >= limits_of[g, 1]
        estimates[r] = estimate
    scale = estimate_scale(largest, most)
    for r in range(k):
        jobs[r, 19] = estimates[r] / scale


#: ``consts`` of a :func:`net_keys` bundle, in order: the lease (s), the cluster's GPUs, GPUs per
#: machine, a never-run multi-machine job's Nw_sens for its estimate, log1p of the longest time
#: shown (in leases), the number of job features (the rows of ``W`` past them are the known-work
#: inputs, :func:`net_keys`), the first arrival (s), and the makespan limit (s; 0: none).
NK_LEASE, NK_GPUS, NK_GPM, NK_NEVER_MULTI, NK_LOG_LONG, NK_FEATURES, NK_FIRST_ARRIVAL, NK_LIMIT = range(8)
#: The length of ``consts``.
NK_SIZE = 8
#: The known-work inputs a network may read after the job features, in order: ``drain_share``,
#: then the limit inputs (finish, elapsed, estimate, work).
KNOWN_INPUTS = 5


@njit(cache=True, nogil=True)
def _limit_shown(seconds, limit):
    """A time as a share of the makespan limit, shown as min(share, 2) / 2 (``limit_inputs``)."""
    share = seconds / limit
    return (share if share < 2.0 else 2.0) / 2.0


#: The job features that are times, shown as min(log1p(t / lease) / log1p(long), 1): their
#: columns, in the order of :func:`queue_job_features`'s ``times`` rows.
_TIME_COLUMNS = (5, 8, 9, 10)


@njit(cache=True, nogil=True)
def net_keys(cand, running, waiting, now, net, jobf, jobi, state, free_pm, free_pr, racks, mpr, free_total, fit):
    """A learned priority network's keys of ``cand`` now (lower first): for each job of at most
    ``fit`` GPUs its row of ``DallyQueue`` job features ``f`` as the queue observation shows
    them (float32, speed factors 0), then ``v . tanh(W f + b)``, each hidden unit's sum in
    input order (inputs 0 left out), the output's in hidden order.

    ``net`` = (W, b, v, limits, size_feature, consts, rows, times, estimates, free_of, keys,
    featured): ``W`` inputs x hidden (the transpose of the network's; 0 in the rows of the
    inputs it does not read), ``b`` and ``v`` hidden long, ``limits`` the offer rule's
    timers by GPU demand (features 17-18), ``size_feature`` feature 0 by job, ``consts``
    (NK_*); the rest scratch (``rows`` a row of job features for every job, ``times``,
    ``estimates`` and ``featured`` with room for every job, ``free_of`` for every demand),
    ``keys`` the result's room. ``running`` and ``waiting``: the unfinished jobs, for the
    largest remaining estimate (feature 19) and the known work. The cluster's free GPUs
    (``free_pm``, ``free_pr``, ``free_total``) say which demands' best tier is free (feature 4).

    The inputs are the NK_FEATURES job features, then, if ``W`` has more rows, the known-work
    inputs in float64 (``dallygym.sim.policies.tuned``'s ``drain_share`` and
    ``limit_inputs``): ``r / (r + D)`` for a job's remaining estimate ``r`` and the known work
    ``D`` (0 if ``D`` is 0); and, against the makespan limit (NK_LIMIT > 0), the time since
    the first arrival ``e`` plus ``r``, ``e``, ``e`` + the largest estimate, ``e`` + ``D``,
    each :func:`_limit_shown`.

    The values are those of the numpy path (``CandidateFeatures``,
    ``NetPriorityPolicy.priority``) but for the C library's log1p and tanh, which may differ
    from numpy's vectorised ones in the last bit. A job of more than ``fit`` GPUs gets key
    +inf unseen: outside a round boundary a pass visits no job bigger than the free GPUs, so
    their order does not matter (a boundary passes ``fit`` = BIG: there every job's rank
    counts)."""
    weights, bias, out_w, limits_of, size_feature, consts, rows, times, estimates, free_of, keys, featured = net
    k = cand.size
    lease = consts[NK_LEASE]
    gpm = np.int64(consts[NK_GPM])
    never_multi = consts[NK_NEVER_MULTI]
    log_long = consts[NK_LOG_LONG]
    limits = tier_limits(free_pm, free_pr, racks, mpr)
    m = 0
    for r in range(k):
        j = cand[r]
        g = jobi[I_GPUS, j]
        if g > fit:
            keys[r] = np.inf
            continue
        free_of[g] = _best_offered(g, free_total, limits) == jobi[I_BEST, j]
        featured[m] = j
        m += 1
    n_feat = np.int64(consts[NK_FEATURES])
    known = weights.shape[0] > n_feat
    largest, drain = known_work(running, waiting, jobf, jobi, gpm, never_multi, consts[NK_GPUS])
    view = rows[:m]
    view[:, :] = 0.0
    queue_job_features(
        featured[:m],
        now,
        lease,
        consts[NK_GPUS],
        gpm,
        never_multi,
        largest,
        jobf,
        jobi,
        state,
        size_feature,
        free_of,
        limits_of,
        True,
        view,
        times,
        estimates,
    )
    hidden = bias.size
    pre = np.empty(hidden)
    extra = np.zeros(KNOWN_INPUTS)
    limit = consts[NK_LIMIT]
    elapsed = now - consts[NK_FIRST_ARRIVAL]
    if known and limit > 0.0:
        limit = limit if limit > 1e-9 else 1e-9
        extra[2] = _limit_shown(elapsed, limit)
        extra[3] = _limit_shown(elapsed + largest, limit)
        extra[4] = _limit_shown(elapsed + drain, limit)
    q = 0
    for r in range(k):
        if jobi[I_GPUS, cand[r]] > fit:
            continue
        row = view[q]
        for c in range(4):
            shown = math.log1p(times[c, q]) / log_long
            row[_TIME_COLUMNS[c]] = shown if shown < 1.0 else 1.0
        pre[:] = 0.0
        for i in range(n_feat):
            x = np.float64(row[i])
            if x != 0.0:  # (0 adds nothing: many features are flags)
                for h in range(hidden):
                    pre[h] += weights[i, h] * x
        if known:
            estimate = estimates[q]
            extra[0] = estimate / (estimate + drain) if drain > 0.0 else 0.0
            if limit > 0.0:
                extra[1] = _limit_shown(elapsed + estimate, limit)
            for e in range(KNOWN_INPUTS):
                x = extra[e]
                if x != 0.0:
                    for h in range(hidden):
                        pre[h] += weights[n_feat + e, h] * x
        key = 0.0
        for h in range(hidden):
            key += out_w[h] * math.tanh(pre[h] + bias[h])
        keys[r] = key
        q += 1
    return keys[:k]
