"""Placement (``ClusterState.place``) and the cluster's bookkeeping (allocate, release, unmark)."""

from __future__ import annotations

import numpy as np
from numba import njit

from .layout import _I0, _I1, _I2, IDLE


@njit(cache=True, nogil=True)
def _pick_machine(mark, free_pm, idle_pm, gpm, need, marks_active):
    """ClusterState._pick_machine: best-fit machine for ``need`` GPUs, or -1."""
    n = free_pm.size
    best = -1
    if not marks_active:
        for m in range(n):
            f = free_pm[m]
            if f >= need and (best < 0 or f < free_pm[best]):
                best = m
        return best
    # Machines needing no reclaimed GPU first: plain best fit among them.
    for m in range(n):
        f = free_pm[m]
        if f >= need and idle_pm[m] >= need and (best < 0 or f < free_pm[best]):
            best = m
    if best >= 0:
        return best
    # Otherwise: the highest rank (latest visited) of the reclaimed GPUs' holders first, then
    # the fewest reclaimed GPUs, the fewest free GPUs, the lowest id.
    marks = np.empty(gpm, dtype=np.int64)
    best_victim = 0
    best_reclaim = 0
    for m in range(n):
        f = free_pm[m]
        if f < need:
            continue
        reclaim = need - idle_pm[m]
        # The reclaim-th largest mark of the machine (an insertion sort: a machine has a
        # handful of slots, and most machines here are skipped before it).
        for s in range(gpm):
            x = mark[m * gpm + s]
            pos = s
            while pos > 0 and marks[pos - 1] > x:
                marks[pos] = marks[pos - 1]
                pos -= 1
            marks[pos] = x
        victim = marks[gpm - reclaim]
        if (
            best < 0
            or victim > best_victim
            or (victim == best_victim and (reclaim < best_reclaim or (reclaim == best_reclaim and f < free_pm[best])))
        ):
            best = m
            best_victim = victim
            best_reclaim = reclaim
    return best


@njit(cache=True, nogil=True)
def _on_machine(owner, mark, gpm, machine, count, marks_active, out, at):
    """ClusterState.gpus_on_machine, written into ``out[at:at + count]``: idle slots first
    (lowest slot first), then marked ones by highest mark, then lowest slot."""
    base = machine * gpm
    if not marks_active:
        k = 0
        for s in range(gpm):
            if k == count:
                break
            if owner[base + s] == -1:
                out[at + k] = base + s
                k += 1
        return
    k = 0
    for s in range(gpm):  # idle free slots, in slot order
        if k == count:
            return
        if owner[base + s] == -1 and mark[base + s] == IDLE:
            out[at + k] = base + s
            k += 1
    while k < count:  # then the marked free slot with the highest mark (ties: lowest slot)
        pick = -1
        for s in range(gpm):
            g = base + s
            if owner[g] != -1 or mark[g] == IDLE:
                continue
            taken = False
            for q in range(k):
                if out[at + q] == g:
                    taken = True
                    break
            if taken:
                continue
            if pick < 0 or mark[g] > mark[pick]:
                pick = g
        out[at + k] = pick
        k += 1


@njit(cache=True, nogil=True)
def _fewest_units(free, idle, need, min_units, unit_out, count_out):
    """cluster._fewest_units over ``free``/``idle`` (one entry per unit): writes the shares
    to ``unit_out``/``count_out`` and returns how many, or -1 if impossible."""
    n = free.size
    total = 0
    for u in range(n):
        total += free[u]
    if total < need:
        return -1
    # Order: most free first, then most idle, then lowest id (a stable insertion sort).
    order = np.empty(n, dtype=np.int64)
    for u in range(n):
        pos = u
        while pos > 0:
            v = order[pos - 1]
            if free[v] > free[u] or (free[v] == free[u] and idle[v] >= idle[u]):
                break
            order[pos] = v
            pos -= 1
        order[pos] = u
    shares = 0
    left = need
    for pos in range(n):
        unit = order[pos]
        cap = free[unit]
        if cap == 0:
            break
        need_more = min_units - shares - 1
        if need_more > 0:
            rest = n - pos - 1
            nonzero = 0
            for q in range(pos + 1, n):
                if free[order[q]] > 0:
                    nonzero += 1
            if rest < need_more or nonzero < need_more:
                return -1
            take = min(cap, left - need_more)
        elif cap >= left:
            take = left
        else:
            take = cap
        if take >= left and need_more <= 0:
            # The remainder fits on one unit: best fit among this one and the rest (fewest
            # free, then most idle, then lowest id).
            best = -1
            for q in range(pos, n):
                c = order[q]
                if free[c] < left:
                    continue
                if (
                    best < 0
                    or free[c] < free[best]
                    or (free[c] == free[best] and (idle[c] > idle[best] or (idle[c] == idle[best] and c < best)))
                ):
                    best = c
            unit_out[shares] = best
            count_out[shares] = left
            return shares + 1
        unit_out[shares] = unit
        count_out[shares] = take
        shares += 1
        left -= take
    return -1


@njit(cache=True, nogil=True)
def _spread_in_rack(owner, mark, free_pm, idle_pm, mpr, gpm, rack, count, min_machines, marks_active, out, at):
    """ClusterState._spread_in_rack into ``out[at:]``; returns False if impossible."""
    first = rack * mpr
    units = np.empty(mpr, dtype=np.int64)
    counts = np.empty(mpr, dtype=np.int64)
    k = _fewest_units(free_pm[first : first + mpr], idle_pm[first : first + mpr], count, min_machines, units, counts)
    if k < 0:
        return False
    for i in range(k):
        _on_machine(owner, mark, gpm, first + units[i], counts[i], marks_active, out, at)
        at += counts[i]
    return True


@njit(cache=True, nogil=True)
def place(owner, mark, free_pm, idle_pm, free_pr, racks, mpr, gpm, need, tier, marks_active):
    """ClusterState.place: ``need`` free GPUs at exactly ``tier`` (0 machine, 1 rack,
    2 network). Returns the GPU ids, or an empty array if no such placement exists (the
    caller asks the reference method for the error)."""
    out = np.empty(need, dtype=np.int64)
    fail = out[:0]
    if tier == 0:
        m = _pick_machine(mark, free_pm, idle_pm, gpm, need, marks_active)
        if m < 0:
            return fail
        _on_machine(owner, mark, gpm, m, need, marks_active, out, _I0)
        return out
    idle_pr = np.zeros(racks, dtype=np.int64)
    for m in range(racks * mpr):
        idle_pr[m // mpr] += idle_pm[m]
    if tier == 1:
        if need < 2:
            return fail
        # Racks with free GPUs on two machines or more: fewest reclaimed GPUs needed, then
        # fewest free, then lowest id.
        best = -1
        best_reclaim = 0
        for r in range(racks):
            if free_pr[r] < need:
                continue
            spread = 0
            for m in range(r * mpr, (r + 1) * mpr):
                if free_pm[m] > 0:
                    spread += 1
            if spread < 2:
                continue
            reclaim = max(0, need - idle_pr[r])
            if best < 0 or reclaim < best_reclaim or (reclaim == best_reclaim and free_pr[r] < free_pr[best]):
                best = r
                best_reclaim = reclaim
        if best < 0:
            return fail
        if not _spread_in_rack(
            owner, mark, free_pm, idle_pm, mpr, gpm, np.int64(best), need, _I2, marks_active, out, _I0
        ):
            return fail
        return out
    if tier == 2:
        total = 0
        for r in range(racks):
            total += free_pr[r]
        if need > total or need < 2 or racks < 2:
            return fail
        units = np.empty(racks, dtype=np.int64)
        counts = np.empty(racks, dtype=np.int64)
        k = _fewest_units(free_pr, idle_pr, need, _I2, units, counts)
        if k < 0:
            return fail
        at = _I0  # (a literal 0 here would compile the callee twice: see _I0)
        for i in range(k):
            if not _spread_in_rack(
                owner, mark, free_pm, idle_pm, mpr, gpm, units[i], counts[i], _I1, marks_active, out, at
            ):
                return fail
            at += counts[i]
        return out
    return fail


@njit(cache=True, nogil=True)
def allocate(owner, mark, free_pm, idle_pm, free_pr, gpus, job, mpr, gpm):
    """ClusterState.allocate: each of ``gpus`` (free) becomes the job's; free counts fall, and
    idle counts for those that carried no round-boundary mark (the mark is cleared)."""
    m = rk = m_lo = m_hi = 0
    for i in range(gpus.size):
        gpu = gpus[i]
        owner[gpu] = job
        if not m_lo <= gpu < m_hi:
            m, rk, m_lo, m_hi = _machine_of(gpu, mpr, gpm)
        free_pm[m] -= 1
        free_pr[rk] -= 1
        if mark[gpu] == IDLE:
            idle_pm[m] -= 1
        else:
            mark[gpu] = IDLE


@njit(cache=True, nogil=True)
def release(owner, free_pm, idle_pm, free_pr, gpus, mpr, gpm):
    """ClusterState.release: ``gpus`` become free and idle."""
    m = rk = m_lo = m_hi = 0
    for i in range(gpus.size):
        gpu = gpus[i]
        owner[gpu] = -1
        if not m_lo <= gpu < m_hi:
            m, rk, m_lo, m_hi = _machine_of(gpu, mpr, gpm)
        free_pm[m] += 1
        idle_pm[m] += 1
        free_pr[rk] += 1


@njit(cache=True, nogil=True)
def unmark(owner, mark, idle_pm, gpus, gpm):
    """ClusterState.unmark: those of ``gpus`` that are free and marked count as idle again."""
    for i in range(gpus.size):
        gpu = gpus[i]
        if owner[gpu] == -1 and mark[gpu] != IDLE:
            mark[gpu] = IDLE
            idle_pm[gpu // gpm] += 1


@njit(cache=True, nogil=True)
def machine_counts(gpus, gpm, mpr, num_gpus):
    """The machines ``gpus`` are on, each as its rack and how many of ``gpus`` it holds (in
    order of first appearance): what ClusterSpec.shape_of needs. The third value is the
    position of the first id out of range 0..num_gpus-1, or -1."""
    machines = np.empty(gpus.size, dtype=np.int64)
    counts = np.zeros(gpus.size, dtype=np.int64)
    k = 0
    for i in range(gpus.size):
        if not 0 <= gpus[i] < num_gpus:
            return machines[:0], counts[:0], i
        m = gpus[i] // gpm
        for q in range(k):
            if machines[q] == m:
                counts[q] += 1
                break
        else:
            machines[k] = m
            counts[k] = 1
            k += 1
    return machines[:k] // mpr, counts[:k], -1


@njit(cache=True, nogil=True)
def _machine_of(gpu, mpr, gpm):
    """GPU ``gpu``'s machine and rack, and the GPUs of that machine (first, one past the last).

    A loop over a job's GPUs calls this only when a GPU is off the machine of the one before
    (``not m_lo <= gpu < m_hi``): a job's GPUs come machine by machine, so two integer
    divisions per machine instead of per GPU (they were most of the cost of these loops)."""
    m = gpu // gpm
    return m, m // mpr, m * gpm, m * gpm + gpm
