"""Offers and renewals: the tiers free, expired leases, renewals in place, the visit plan, and the
small numeric helpers the engine's Python side calls (sums, progress, Nw_sens, job sets)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .layout import _I1, _I_1, BIG, F_DONE, F_RATE, F_RUN, F_SCRATCH, F_SEG_DONE0, F_SEG_START, F_SPEED, IDLE
from .placement import _machine_of


@njit(cache=True, nogil=True)
def better_tier_in(per_machine, racks, mpr, gpm, g, current):
    """Engine._better_tier_in: do ``g`` GPUs fit in ``per_machine`` available GPUs at a tier
    more consolidated than ``current`` (0 machine, 1 rack, 2 network)?"""
    if current == 0:
        return False
    if g <= gpm:
        for m in range(per_machine.size):
            if per_machine[m] >= g:
                return True
    if current == 1 or g < 2:
        return False
    for r in range(racks):
        total = 0
        for m in range(r * mpr, (r + 1) * mpr):
            total += per_machine[m]
        if total >= g:
            return True
    return False


@njit(cache=True, nogil=True)
def _count_and_most(free, g):
    """How many of ``free`` are ``g`` or more, and the largest (0 if none is positive)."""
    count = 0
    most = 0
    for i in range(free.size):
        f = free[i]
        if f >= g:
            count += 1
        if f > most:
            most = f
    return count, most


@njit(cache=True, nogil=True)
def tier_limits(free_pm, free_pr, racks, mpr):
    """Engine._compute_tier_limits: the most free GPUs on one machine; the most on one rack
    among racks with free GPUs on two machines or more; whether two racks have free GPUs."""
    most_on_machine = 0
    most_on_rack = 0
    racks_with_free = 0
    for r in range(racks):
        freest = 0
        for m in range(r * mpr, (r + 1) * mpr):
            if free_pm[m] > freest:
                freest = free_pm[m]
        if freest > most_on_machine:
            most_on_machine = freest
        free = free_pr[r]
        if free:
            racks_with_free += 1
            if freest < free and most_on_rack < free:
                most_on_rack = free
    return most_on_machine, most_on_rack, racks_with_free >= 2


@njit(cache=True, nogil=True)
def _count_own(per_machine, gpu_store, lo, g, gpm, by):
    """Add ``by`` to ``per_machine`` for each of the ``g`` GPUs ``gpu_store[lo:lo + g]``."""
    m = m_lo = m_hi = 0
    for q in range(lo, lo + g):
        gpu = gpu_store[q]
        if not m_lo <= gpu < m_hi:
            m = gpu // gpm
            m_lo = m * gpm
            m_hi = m_lo + gpm
        per_machine[m] += by


@njit(cache=True, nogil=True)
def expire_leases(
    order,
    state,
    tier,
    best_tier,
    scan,
    upgrades,
    from_zero,
    rank,
    owner,
    mark,
    free_pm,
    free_pr,
    mpr,
    gpm,
    gpu_store,
    gpu_off,
    num_gpus,
    expired,
):
    """Engine._expire_leases over ``order`` (waiting and running jobs in priority order).

    With ``scan``, the pass starts at the first job that may act -- a waiting job, or with
    ``upgrades`` a running one below its best tier -- and does not open if none may; it starts
    at 0 without ``scan``, or with ``from_zero`` once one may act (agent picks). From there on each job gets its rank
    in the pass, and the GPUs of the running ones (lease expired) become free and marked with
    their holder's rank: free counts rise, idle counts do not (ClusterState.mark_reclaimable).
    A running job's GPUs are ``gpu_store[gpu_off[j]:gpu_off[j] + num_gpus[j]]``: the work is
    per GPU of the expired jobs, not per GPU of the cluster. The lease-expired jobs are written
    to ``expired`` (room for ``order.size``).
    Returns (start or -1 if no job may act, how many leases expired, GPUs marked)."""
    start = 0
    if scan:
        start = -1
        for i in range(order.size):
            j = order[i]
            if state[j] == 1 or (upgrades and tier[j] > best_tier[j]):  # WAITING; tier is -1 unless running
                start = i
                break
        if start < 0:
            return -1, 0, 0
        if from_zero:
            start = 0
    n_expired = 0
    for i in range(start, order.size):
        j = order[i]
        if state[j] == 2:  # RUNNING
            expired[n_expired] = j
            n_expired += 1
    if n_expired == 0:
        return start, 0, 0
    count = 0
    m = rk = m_lo = m_hi = 0  # the machine (and rack) of GPUs m_lo..m_hi - 1 (see _machine_of)
    for i in range(start, order.size):
        j = order[i]
        r = i - start
        rank[j] = r
        if state[j] != 2:
            continue
        lo = gpu_off[j]
        for q in range(lo, lo + num_gpus[j]):
            gpu = gpu_store[q]
            owner[gpu] = -1
            mark[gpu] = r
            if not m_lo <= gpu < m_hi:
                m, rk, m_lo, m_hi = _machine_of(gpu, mpr, gpm)
            free_pm[m] += 1
            free_pr[rk] += 1
        count += num_gpus[j]
    return start, n_expired, count


@njit(cache=True, nogil=True)
def _held_marked(j, r, mark, gpu_store, gpu_off, num_gpus):
    """How many of running job ``j``'s GPUs still carry its pass rank ``r`` (none claimed)."""
    held = 0
    lo = gpu_off[j]
    for q in range(lo, lo + num_gpus[j]):
        if mark[gpu_store[q]] == r:
            held += 1
    return held


@njit(cache=True, nogil=True)
def renew_in_place(
    jobs,
    rank,
    mark,
    owner,
    free_pm,
    idle_pm,
    free_pr,
    num_gpus,
    tier,
    best_tier,
    racks,
    mpr,
    gpm,
    upgrades_offered,
    gpu_store,
    gpu_off,
):
    """Engine._renew_in_place: of ``jobs`` (lease-expired, in their turns' order, nothing
    between their turns), renew the leading ones whose turn would give back just the GPUs they
    hold -- none claimed, and no upgrade offer due (a job below its best tier is offered one if
    the idle GPUs and its own make a better tier). Gives their marked GPUs back to them.
    Each job's GPUs are ``gpu_store[gpu_off[j]:gpu_off[j] + num_gpus[j]]`` (only they can
    carry its mark). Returns (jobs renewed, GPUs given back)."""
    n = jobs.size
    for i in range(jobs.size):
        j = jobs[i]
        if _held_marked(j, rank[j], mark, gpu_store, gpu_off, num_gpus) != num_gpus[j]:
            n = i
            break
    if n and upgrades_offered:
        for i in range(n):
            j = jobs[i]
            if tier[j] <= best_tier[j]:
                continue
            # The idle GPUs with its own (all marked with its rank, checked above), counted in
            # idle_pm itself for the test and taken out again.
            lo = gpu_off[j]
            _count_own(idle_pm, gpu_store, lo, num_gpus[j], gpm, _I1)
            better = better_tier_in(idle_pm, racks, mpr, gpm, num_gpus[j], tier[j])
            _count_own(idle_pm, gpu_store, lo, num_gpus[j], gpm, _I_1)
            if better:
                n = i
                break
    count = 0
    m = rk = m_lo = m_hi = 0
    for i in range(n):
        j = jobs[i]
        lo = gpu_off[j]
        for q in range(lo, lo + num_gpus[j]):
            gpu = gpu_store[q]
            owner[gpu] = j
            mark[gpu] = IDLE
            if not m_lo <= gpu < m_hi:
                m, rk, m_lo, m_hi = _machine_of(gpu, mpr, gpm)
            free_pm[m] -= 1
            free_pr[rk] -= 1
        count += num_gpus[j]
    return n, count


@njit(cache=True, nogil=True)
def visit_plan(order, num_gpus, state, free_total, boundary):
    """Engine._visit_plan: the jobs of ``order`` a pass visits (lease-expired ones, and waiting
    ones no bigger than the free GPUs), ``least_ahead`` (at each position the smallest demand
    of a waiting job there or later; lease-expired jobs count as no demand) and the positions
    of the lease-expired jobs."""
    n = order.size
    queue = np.empty(n, dtype=np.int64)
    least = np.empty(n, dtype=np.int64)
    expired_pos = np.empty(n, dtype=np.int64)
    k, e = _visit_plan_into(order, num_gpus, state, free_total, boundary, queue, least, expired_pos)
    return queue[:k], least[:k], expired_pos[:e]


@njit(cache=True, nogil=True)
def _visit_plan_into(order, num_gpus, state, free_total, boundary, queue, least, expired_pos):
    """:func:`visit_plan` written into the given arrays; returns the lengths of the queue and
    of the expired positions."""
    n = order.size
    k = 0
    e = 0
    for i in range(n):
        j = order[i]
        if boundary and state[j] == 2:  # RUNNING: its lease expired
            queue[k] = j
            least[k] = BIG
            expired_pos[e] = k
            e += 1
            k += 1
        elif num_gpus[j] <= free_total:
            queue[k] = j
            least[k] = num_gpus[j]
            k += 1
    for i in range(k - 2, -1, -1):
        if least[i + 1] < least[i]:
            least[i] = least[i + 1]
    return k, e


@njit(cache=True, nogil=True)
def _block_sum(a, lo, n):
    """numpy's pairwise sum of a block of at most 128: eight accumulators."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, nogil=True)
def pairwise_sum(a, lo, n):
    """The sum of ``a[lo:lo + n]`` exactly as ``numpy.add.reduce`` adds a contiguous float64
    array (numpy's pairwise summation: blocks of at most 128 with eight accumulators; a longer
    run is split in two halves, the first a multiple of 8, whose sums are added), so that a
    compiled total is the reference's bit for bit. Iterative (numba cannot cache recursion):
    a stack of pending halves, and a stack of partial sums combined in the same tree."""
    if n <= 128:
        return _block_sum(a, np.int64(lo), n)
    # Post-order walk of the split tree: a node is (lo, n, visited).
    node_lo = np.empty(128, dtype=np.int64)
    node_n = np.empty(128, dtype=np.int64)
    node_seen = np.zeros(128, dtype=np.bool_)
    sums = np.empty(128)
    top = 0
    depth = 0
    node_lo[0] = lo
    node_n[0] = n
    node_seen[0] = False
    top = 1
    while top:
        k = top - 1
        m = node_n[k]
        if m <= 128:
            sums[depth] = _block_sum(a, node_lo[k], m)
            depth += 1
            top -= 1
        elif node_seen[k]:
            sums[depth - 2] = sums[depth - 2] + sums[depth - 1]
            depth -= 1
            top -= 1
        else:
            node_seen[k] = True
            half = m // 2
            half -= half % 8
            # The second half is pushed first, so the first half is summed first.
            node_lo[top] = node_lo[k] + half
            node_n[top] = m - half
            node_seen[top] = False
            node_lo[top + 1] = node_lo[k]
            node_n[top + 1] = half
            node_seen[top + 1] = False
            top += 2
    return sums[0]


@njit(cache=True, nogil=True)
def mean_plus_two_sd(values):
    """AutoTuner's tuned timer (Algorithm 2, lines 13-14) of ``values`` (two or more): their
    mean plus two sample standard deviations, with numpy's arithmetic (pairwise sums, the
    same operations in the same order) so that it equals ``policies.dally._tuned_reference`` bit
    for bit."""
    n = values.size
    mean = pairwise_sum(values, 0, n) / n
    squares = np.empty(n)
    for i in range(n):
        deviation = values[i] - mean
        squares[i] = deviation * deviation
    return mean + 2.0 * math.sqrt(pairwise_sum(squares, 0, n) / (n - 1))


@njit(cache=True, nogil=True)
def advance(run, n_run, jobf, dt, t):
    """Engine._advance for the running jobs ``run[:n_run]`` (rows of the job table ``jobf``):
    time held grows by ``dt``, iterations done are brought to time ``t`` (none before the
    restart overhead is over). Returns the sum of their speed factors (for the
    exposed-communication integral), added as numpy adds them. (The table is passed whole
    and the speeds gathered in its scratch row: no view or array is made per event.)"""
    speeds = jobf[F_SCRATCH]
    for i in range(n_run):
        j = run[i]
        jobf[F_RUN, j] += dt
        jobf[F_DONE, j] = jobf[F_SEG_DONE0, j] + jobf[F_RATE, j] * max(0.0, t - jobf[F_SEG_START, j])
        speeds[i] = jobf[F_SPEED, j]
    return pairwise_sum(speeds, 0, n_run)


@njit(cache=True, nogil=True)
def nw_sens(jobs, done_iters, iter_time_s, run_s, never):
    """Engine.nw_sens: ideal time of the completed iterations / time run; ``never[j]`` (the
    engine's ``_never_nw_sens``, 0 unless the policy sets it) if never run."""
    out = np.zeros(jobs.size)
    for i in range(jobs.size):
        j = jobs[i]
        if run_s[j] > 0:
            out[i] = done_iters[j] * iter_time_s[j] / run_s[j]
        else:
            out[i] = never[j]
    return out


@njit(cache=True, nogil=True)
def job_set(members, added, state, code, left):
    """JobSet.array: ``members`` (increasing) with ``added`` merged in, and if ``left`` those
    no longer in state ``code`` dropped (a job that left and came back is listed once)."""
    merged = np.empty(members.size + added.size, dtype=np.int64)
    extra = np.sort(added)
    a = 0
    b = 0
    k = 0
    while a < members.size or b < extra.size:
        if b == extra.size or (a < members.size and members[a] <= extra[b]):
            j = members[a]
            a += 1
        else:
            j = extra[b]
            b += 1
        if left and (state[j] != code or (k > 0 and merged[k - 1] == j)):
            continue
        merged[k] = j
        k += 1
    return merged[:k]
