"""A scheduling pass's turns (``Engine``'s pass, :mod:`dallygym.sim.engine.turns`), compiled: shapes
and their table, starts and completions, the waiting jobs' priority order, a pass opened."""

from __future__ import annotations

import numpy as np
from numba import njit

from .features import _best_offered, _nw_sens_of, net_keys
from .layout import (
    _FALSE,
    _I0,
    AUTO_BEST,
    AUTO_BEST_POSSIBLE_ONLY,
    AUTO_NONE,
    BIG,
    F_ANCHOR,
    F_DONE,
    F_END,
    F_FINISH,
    F_FIRST_START,
    F_HOLD_START,
    F_ITER_TIME,
    F_NEVER,
    F_OVERHEAD,
    F_RATE,
    F_RUN,
    F_SEG_DONE0,
    F_SEG_START,
    F_SPEED,
    F_TOTAL,
    I_BEST,
    I_GPU_OFF,
    I_GPUS,
    I_LAST_TIER,
    I_MODEL,
    I_PREEMPTIONS,
    I_RANK,
    I_TIER,
    LOG_PREEMPTED,
    LOG_RESTARTED_SAME,
    LOG_STARTED,
    cluster_views,
)
from .offers import _visit_plan_into, expire_leases, nw_sens, renew_in_place, tier_limits
from .placement import allocate, place, release, unmark


@njit(cache=True, nogil=True)
def _all_free(owner, gpus):
    for i in range(gpus.size):
        if owner[gpus[i]] >= 0:
            return False
    return True


@njit(cache=True, nogil=True)
def _rack_after(seq, a0, a1, b0, b1):
    """Whether the rack counts seq[a0:a1] come after seq[b0:b1] in Python's tuple order."""
    for k in range(min(a1 - a0, b1 - b0)):
        if seq[a0 + k] != seq[b0 + k]:
            return seq[a0 + k] > seq[b0 + k]
    return a1 - a0 > b1 - b0


@njit(cache=True, nogil=True)
def shape_code(gpus, gpm, mpr):
    """The canonical shape of a placement (cluster.canonical_shape) as a flat sequence: its
    racks, largest first in tuple order, each as its machines' GPU counts, largest first,
    followed by a 0 (counts are positive, so the sequence names one shape)."""
    n = gpus.size
    machines = np.sort(gpus // gpm)
    counts = np.empty(n, dtype=np.int64)
    rack_of = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        if k > 0 and machines[i] == machines[i - 1]:
            counts[k - 1] += 1
        else:
            counts[k] = 1
            rack_of[k] = machines[i] // mpr
            k += 1
    # Machines are in id order, so each rack's machines are consecutive: sort each group.
    starts = np.empty(k + 1, dtype=np.int64)
    r = 0
    for i in range(k):
        if i == 0 or rack_of[i] != rack_of[i - 1]:
            starts[r] = i
            r += 1
    starts[r] = k
    for q in range(r):
        for i in range(starts[q] + 1, starts[q + 1]):
            x = counts[i]
            p = i
            while p > starts[q] and counts[p - 1] < x:
                counts[p] = counts[p - 1]
                p -= 1
            counts[p] = x
    order = np.empty(r, dtype=np.int64)  # racks, largest first (a stable insertion sort)
    for q in range(r):
        p = q
        while p > 0 and _rack_after(counts, starts[q], starts[q + 1], starts[order[p - 1]], starts[order[p - 1] + 1]):
            order[p] = order[p - 1]
            p -= 1
        order[p] = q
    out = np.empty(k + r, dtype=np.int64)
    at = 0
    for q in order:
        for i in range(starts[q], starts[q + 1]):
            out[at] = counts[i]
            at += 1
        out[at] = 0
        at += 1
    return out


@njit(cache=True, nogil=True)
def shape_hash(model, code):
    """A hash of (model, shape code) for the shape table's index (FNV-1a)."""
    h = np.uint64(14695981039346656037)
    h = (h ^ np.uint64(model)) * np.uint64(1099511628211)
    for i in range(code.size):
        h = (h ^ np.uint64(code[i])) * np.uint64(1099511628211)
    return h


@njit(cache=True, nogil=True)
def _same_shape(shapes, shape_seq, e, model, code):
    if shapes[e, 0] != model or shapes[e, 2] != code.size:
        return False
    lo = shapes[e, 1]
    for k in range(code.size):
        if shape_seq[lo + k] != code[k]:
            return False
    return True


@njit(cache=True, nogil=True)
def _find_shape(shapes, shape_seq, slots, model, code):
    """The entry of (model, shape code) in the shape table, or -1: ``slots`` (a power of two
    long, at most half full) holds entry + 1 at the first free slot from the entry's
    :func:`shape_hash` on (0: free)."""
    mask = np.uint64(slots.size - 1)
    h = shape_hash(model, code) & mask
    while True:
        e = slots[h] - 1
        if e < 0:
            return -1
        if _same_shape(shapes, shape_seq, e, model, code):
            return e
        h = (h + np.uint64(1)) & mask


@njit(cache=True, nogil=True)
def index_shapes(slots, shapes, shape_seq, lo, hi):
    """Enter the shape table's entries ``lo`` to ``hi`` in its index ``slots``."""
    mask = np.uint64(slots.size - 1)
    for e in range(lo, hi):
        a = shapes[e, 1]
        h = shape_hash(shapes[e, 0], shape_seq[a : a + shapes[e, 2]]) & mask
        while slots[h] != 0:
            h = (h + np.uint64(1)) & mask
        slots[h] = e + 1


@njit(cache=True, nogil=True)
def shape_entry(gpus, gpm, mpr, shapes, shape_seq, slots, model):
    """The entry of ``model`` on the shape of ``gpus`` in the shape table, or -1."""
    return _find_shape(shapes, shape_seq, slots, model, shape_code(gpus, gpm, mpr))


@njit(cache=True, nogil=True)
def pass_turns(
    queue,
    least_ahead,
    expired_pos,
    pos,
    t,
    auto,
    renew,
    upgrades_offered,
    overhead_s,
    jobs,
    speeds,
    cluster,
    free_total,
    marks_active,
    log,
    renewed,
    answer=-1,
):
    """A pass's turns (turns.Pass, PythonTurns) over ``queue`` (its visit plan) from position ``pos``, for as long
    as each turn needs nothing from Python.

    A turn is taken here when it is one of: a lease-expired job renewing in place (with
    ``renew``: the renewal mode is not ``rebid``; the same test as :func:`renew_in_place`);
    a lease-expired job whose GPUs were claimed, preempted, then left waiting or started on
    one machine as below; a waiting job skipped (too big, or no tier free); a waiting job whose
    offer the pass accepts itself (``auto``: at the best tier offered if that is its best
    possible tier, or at the best tier offered) and whose start needs no policy placement and
    no new speed factor: its last GPUs again, a machine placement whose speed factor
    ``machine_speed[model, g]`` is known (not NaN), or a rack or network placement whose
    shape is in the shape table (``shapes[e]`` = model, offset and length of its
    :func:`shape_code` in ``shape_seq``, speed factor ``shape_speed[e]``; ``slots``, its
    index: :func:`_find_shape`). Models are the speed tables' ids (``jobi[I_MODEL]``).

    Per-job state comes in the engine's tables, ``jobs`` = (jobf, jobi, state, speed_seen,
    tier_s, placements_by_tier) (``jobf``, ``jobi``: rows JOB_FLOATS and JOB_INTS); the speed
    tables in ``speeds`` = (machine_speed, shapes, shape_seq, shape_speed, slots); the cluster
    in ``cluster`` = (gpu_store, cl, racks, mpr, gpm), its buffer ``cl`` (:func:`cluster_views`):
    the bundles of :func:`dallygym.sim.kernels.run_events`.

    ``answer`` >= 0: the turn at ``pos`` is a waiting job whose offer the caller accepted at
    that tier: it starts there, as above, unless its start needs Python (then the loop stops
    at ``pos``, not asking).

    Any other turn stops the loop before changing anything for it, but for an offer to ask a
    lease-expired job whose GPUs were claimed: it is preempted first, so the question is one
    to a waiting job. Returns (position of that
    turn, or -1 when the pass is over; whether that turn asks the caller a question -- an
    offer or a renewal offer -- rather than needing a placement only Python makes; log rows
    written; jobs renewed in place; free GPUs; cluster changes). The log holds the preemptions
    and the starts in order (LOG_*);
    ``renewed`` the jobs renewed in place.
    """
    jobf, jobi, state, speed_seen, tier_s, placements_by_tier = jobs
    machine_speed, shapes, shape_seq, shape_speed, slots = speeds
    gpu_store, cl, racks, mpr, gpm = cluster
    owner, mark, free_pm, idle_pm, free_pr = cluster_views(cl, racks, mpr, gpm)
    num_gpus = jobi[I_GPUS]
    best_tier = jobi[I_BEST]
    model_index = jobi[I_MODEL]
    tier = jobi[I_TIER]
    last_tier = jobi[I_LAST_TIER]
    gpu_off = jobi[I_GPU_OFF]
    rank = jobi[I_RANK]
    n_visit = queue.size
    n_log = 0
    n_renewed = 0
    ops = 0
    # The offer-tier limits of the free GPUs, computed again only after they change (most
    # turns change nothing: a job too big, or one that waits).
    limits = tier_limits(free_pm, free_pr, racks, mpr)
    limits_of = ops
    while pos < n_visit:
        j = queue[pos]
        if state[j] == 2:  # RUNNING: a lease-expired job not visited yet
            k = np.searchsorted(expired_pos, pos)
            rest = free_total < least_ahead[pos]
            if rest:  # no waiting job fits any more: the leases left
                run_pos = expired_pos[k:]
            else:  # the leases at consecutive positions from here
                last = k + 1
                while last < expired_pos.size and expired_pos[last] == pos + last - k:
                    last += 1
                run_pos = expired_pos[k:last]
            run = np.empty(run_pos.size, dtype=np.int64)
            for i in range(run_pos.size):
                run[i] = queue[run_pos[i]]
            i = 0
            while i < run.size:
                if renew:
                    r, count = renew_in_place(
                        run[i:],
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
                    )
                    if count:
                        free_total -= count
                        ops += 1
                    for q in range(i, i + r):
                        renewed[n_renewed] = run[q]
                        n_renewed += 1
                    i += r
                    if i == run.size:
                        break
                jj = run[i]
                g = num_gpus[jj]
                held = gpu_store[gpu_off[jj] : gpu_off[jj] + g]
                if _all_free(owner, held):
                    return run_pos[i], True, n_log, n_renewed, free_total, ops  # a renewal offer to make
                # Claimed: preempted; then offered like a waiting job (unmarking changes no
                # free count, so the offer can be settled first).
                if limits_of != ops:
                    limits = tier_limits(free_pm, free_pr, racks, mpr)
                    limits_of = ops
                b = _best_offered(g, free_total, limits)
                accept = b >= 0 and (auto == AUTO_BEST or (auto != AUTO_NONE and b == best_tier[jj]))
                ask = b >= 0 and not accept and auto != AUTO_BEST_POSSIBLE_ONLY
                if not accept:
                    b = -1  # (asked, or declined unasked: no start here)
                if b > 0 or (b == 0 and np.isnan(machine_speed[model_index[jj], g])):
                    return run_pos[i], False, n_log, n_renewed, free_total, ops  # a placement Python makes
                unmark(owner, mark, idle_pm, held, gpm)
                _close(jj, t, jobf, tier, tier_s)
                state[jj] = 1
                jobf[F_ANCHOR, jj] = t
                jobi[I_PREEMPTIONS, jj] += 1
                log[n_log, 0] = LOG_PREEMPTED
                log[n_log, 1] = jj
                n_log += 1
                if ask:  # an offer to ask about, now to a waiting job (the preemption is made here)
                    return run_pos[i], True, n_log, n_renewed, free_total, ops
                if b == 0:
                    gpus = place(owner, mark, free_pm, idle_pm, free_pr, racks, mpr, gpm, g, _I0, marks_active)
                    _start(
                        jj,
                        _I0,
                        t,
                        _FALSE,
                        gpus,
                        machine_speed[model_index[jj], g],
                        overhead_s,
                        jobf,
                        jobi,
                        state,
                        speed_seen,
                        placements_by_tier,
                        gpu_store,
                        owner,
                        mark,
                        free_pm,
                        idle_pm,
                        free_pr,
                        mpr,
                        gpm,
                    )
                    free_total -= g
                    ops += 1
                    log[n_log, 0] = LOG_STARTED
                    log[n_log, 1] = jj
                    log[n_log, 2] = -1
                    n_log += 1
                i += 1
            pos = n_visit if rest else run_pos[run_pos.size - 1] + 1
            continue
        pos += 1
        g = num_gpus[j]
        if g > free_total:
            # Too big for the free GPUs, which only shrink during the pass: skip it, and every
            # waiting job up to the next expired lease if none can fit.
            if pos < n_visit and free_total < least_ahead[pos]:
                k = np.searchsorted(expired_pos, pos)
                pos = expired_pos[k] if k < expired_pos.size else n_visit
            continue
        if limits_of != ops:
            limits = tier_limits(free_pm, free_pr, racks, mpr)
            limits_of = ops
        b = _best_offered(g, free_total, limits)
        if answer >= 0:  # (the first turn, an offer the caller answered)
            b = answer
            answer = -1
        elif b < 0:
            continue
        elif not (auto == AUTO_BEST or (auto != AUTO_NONE and b == best_tier[j])):
            if auto == AUTO_BEST_POSSIBLE_ONLY:
                continue  # declined unasked: it waits
            return pos - 1, True, n_log, n_renewed, free_total, ops
        lo = gpu_off[j]
        same = last_tier[j] == b and _all_free(owner, gpu_store[lo : lo + g])
        entry = -1
        if same:
            gpus = gpu_store[lo : lo + g]
            s = speed_seen[j, b]
        elif b == 0:
            s = machine_speed[model_index[j], g]
            if np.isnan(s):
                return pos - 1, False, n_log, n_renewed, free_total, ops
            gpus = place(owner, mark, free_pm, idle_pm, free_pr, racks, mpr, gpm, g, _I0, marks_active)
        else:  # placing changes nothing: the turn can still be left to Python
            gpus = place(owner, mark, free_pm, idle_pm, free_pr, racks, mpr, gpm, g, b, marks_active)
            entry = _find_shape(shapes, shape_seq, slots, model_index[j], shape_code(gpus, gpm, mpr))
            if entry < 0:
                return pos - 1, False, n_log, n_renewed, free_total, ops
            s = shape_speed[entry]
        _start(
            j,
            b,
            t,
            same,
            gpus,
            s,
            overhead_s,
            jobf,
            jobi,
            state,
            speed_seen,
            placements_by_tier,
            gpu_store,
            owner,
            mark,
            free_pm,
            idle_pm,
            free_pr,
            mpr,
            gpm,
        )
        free_total -= g
        ops += 1
        log[n_log, 0] = LOG_RESTARTED_SAME if same else LOG_STARTED
        log[n_log, 1] = j
        log[n_log, 2] = entry
        n_log += 1
    return -1, False, n_log, n_renewed, free_total, ops


@njit(cache=True, nogil=True)
def _close(j, t, jobf, tier, tier_s):
    """The array part of Engine._close_segment."""
    hold = jobf[F_HOLD_START, j]
    tier_s[j, tier[j]] += t - hold
    jobf[F_OVERHEAD, j] += max(0.0, min(jobf[F_SEG_START, j], t) - hold)
    jobf[F_SPEED, j] = 0.0
    jobf[F_RATE, j] = 0.0
    jobf[F_FINISH, j] = np.inf
    tier[j] = -1


@njit(cache=True, nogil=True)
def complete(jobs, t, jobf, jobi, state, tier_s, gpu_store, cl, racks, mpr, gpm):
    """The array part of Engine._complete: ``jobs`` (running) finish at ``t``: their GPUs are
    released, their placements closed, their work done. Returns the GPUs freed."""
    owner, _, free_pm, idle_pm, free_pr = cluster_views(cl, racks, mpr, gpm)
    freed = 0
    for j in jobs:
        g = jobi[I_GPUS, j]
        lo = jobi[I_GPU_OFF, j]
        release(owner, free_pm, idle_pm, free_pr, gpu_store[lo : lo + g], mpr, gpm)
        _close(j, t, jobf, jobi[I_TIER], tier_s)
        jobf[F_DONE, j] = jobf[F_TOTAL, j]
        jobf[F_END, j] = t
        state[j] = 3  # DONE
        freed += g
    return freed


@njit(cache=True, nogil=True)
def _start(
    j,
    level,
    t,
    same,
    gpus,
    s,
    overhead_s,
    jobf,
    jobi,
    state,
    speed_seen,
    placements_by_tier,
    gpu_store,
    owner,
    mark,
    free_pm,
    idle_pm,
    free_pr,
    mpr,
    gpm,
):
    """The array part of Engine._start for a waiting job at ``level`` on ``gpus`` (its last
    ones again if ``same``) at speed factor ``s``."""
    g = jobi[I_GPUS, j]
    lo = jobi[I_GPU_OFF, j]
    overhead = 0.0
    if not same:
        if jobi[I_LAST_TIER, j] >= 0:
            overhead = overhead_s
        gpu_store[lo : lo + g] = gpus
    allocate(owner, mark, free_pm, idle_pm, free_pr, gpu_store[lo : lo + g], j, mpr, gpm)
    state[j] = 2
    jobi[I_LAST_TIER, j] = level
    jobi[I_TIER, j] = level
    jobf[F_SPEED, j] = s
    speed_seen[j, level] = s
    r = s / jobf[F_ITER_TIME, j]
    jobf[F_RATE, j] = r
    jobf[F_HOLD_START, j] = t
    progress_s = t + overhead
    jobf[F_SEG_START, j] = progress_s
    done = jobf[F_DONE, j]
    jobf[F_SEG_DONE0, j] = done
    jobf[F_FINISH, j] = progress_s + (jobf[F_TOTAL, j] - done) / r
    if np.isnan(jobf[F_FIRST_START, j]):
        jobf[F_FIRST_START, j] = t
    placements_by_tier[level] += 1


#: ``keys`` of :func:`open_pass`: the priority orders it computes itself (the names of
#: ``Policy.priority_keys``, in this order: :data:`dallygym.sim.policies.base.PRIORITY_KEYS`).
KEYS_ARRIVAL, KEYS_NW_SENS, KEYS_PROTECTED, KEYS_DEMAND_REMAINING, KEYS_NET = 0, 1, 2, 3, 4
#: The remaining-time estimate's constants (ProtectedRemainingPolicy's own,
#: NEVER_RUN_MULTI_MACHINE_NW_SENS and PROTECT_FRACTION; a test holds them equal).
NEVER_MULTI, PROTECT = 0.1, 0.5


@njit(cache=True, nogil=True)
def remaining_keys(cand, keys, jobf, jobi, gpm, never_multi, protect):
    """The priority keys of ``cand`` for KEYS_PROTECTED or KEYS_DEMAND_REMAINING, from each
    job's remaining-time estimate (ProtectedRemainingPolicy.remaining_estimate_s: remaining
    ideal time / its Nw_sens so far; a job with none at 1, or at ``never_multi`` if it spans
    more than a machine of ``gpm`` GPUs). KEYS_PROTECTED: the jobs whose estimate is at least
    ``protect`` x the largest first, longest first (key -estimate), the rest shortest first
    (ProtectedRemainingPolicy.priority); KEYS_DEMAND_REMAINING: GPU demand x estimate
    (SmallestDemandRemainingPolicy.priority). The same operations as numpy's, so the same keys."""
    n = cand.size
    est = np.empty(n)
    largest = -np.inf
    for i in range(n):
        j = cand[i]
        nw = _nw_sens_of(j, jobf)
        if not nw > 0:
            nw = never_multi if jobi[I_GPUS, j] > gpm else 1.0
        e = (jobf[F_TOTAL, j] - jobf[F_DONE, j]) * jobf[F_ITER_TIME, j] / nw
        est[i] = e
        if e > largest:
            largest = e
    if keys == KEYS_DEMAND_REMAINING:
        for i in range(n):
            est[i] = jobi[I_GPUS, cand[i]] * est[i]
        return est
    bar = protect * largest
    for i in range(n):
        if est[i] >= bar:
            est[i] = -est[i]
    return est


@njit(cache=True, nogil=True)
def _merge(a, b, out):
    """Two increasing arrays of distinct job indices, merged into ``out``."""
    i = 0
    k = 0
    for x in b:
        while i < a.size and a[i] < x:
            out[k] = a[i]
            i += 1
            k += 1
        out[k] = x
        k += 1
    out[k : k + a.size - i] = a[i:]


@njit(cache=True, nogil=True)
def _merge_keyed(a, akey, b, bkey, b_order, out):
    """Merge ``a`` (jobs in order of ``akey[job]`` then index) and ``b[b_order]`` (in order
    of ``bkey[b_order]``, ties by index) into ``out``, by key then index."""
    i = 0
    k = 0
    for q in range(b_order.size):
        x = b[b_order[q]]
        kx = bkey[b_order[q]]
        while i < a.size and (akey[a[i]] < kx or (akey[a[i]] == kx and a[i] < x)):
            out[k] = a[i]
            i += 1
            k += 1
        out[k] = x
        k += 1
    out[k : k + a.size - i] = a[i:]


@njit(cache=True, nogil=True)
def _shift_right(a, pos, size):
    """``a[pos + 1:size + 1] = a[pos:size]`` in place (last first: the ranges overlap)."""
    b = a[pos : size + 1]  # (on a view from 0, as _shift_left)
    for i in range(b.size - 1, 0, -1):
        b[i] = b[i - 1]


@njit(cache=True, nogil=True)
def _shift_left(a, pos, size):
    """``a[pos:size - 1] = a[pos + 1:size]`` in place (first first: the ranges overlap)."""
    b = a[pos:size]  # (on a view from 0, the loop compiles to a block move: 2-3x faster)
    for i in range(b.size - 1):
        b[i] = b[i + 1]


@njit(cache=True, nogil=True)
def _keyed_pos(order, size, wkey, key, j):
    """The first position of the increasing-by-(key, index) ``order[:size]`` not before
    (``key``, ``j``)."""
    lo = 0
    hi = size
    while lo < hi:
        mid = (lo + hi) // 2
        m = order[mid]
        if wkey[m] < key or (wkey[m] == key and m < j):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _keyed_insert(order, size, wkey, key, j):
    """Insert waiting job ``j`` with priority key ``key`` into ``order[:size]``."""
    wkey[j] = key
    pos = _keyed_pos(order, size, wkey, key, j)
    _shift_right(order, pos, size)
    order[pos] = j
    return size + 1


@njit(cache=True, nogil=True)
def _keyed_remove(order, size, wkey, j):
    pos = _keyed_pos(order, size, wkey, wkey[j], j)
    _shift_left(order, pos, size)
    return size - 1


@njit(cache=True, nogil=True)
def open_pass(
    waiting,
    running,
    boundary,
    keys,
    scan,
    upgrades,
    from_zero,
    jobf,
    jobi,
    state,
    gpu_store,
    cl,
    racks,
    mpr,
    gpm,
    free_total,
    plan,
    expired_out,
    keyed,
    wkey,
    now,
    net,
):
    """The start of a pass (Engine._open_any_pass) at time ``now`` for a policy whose priority
    order the engine computes (``keys``, KEYS_*: arrival order, increasing Nw_sens, a
    remaining-time order, or a learned network's keys over the job features, :func:`net_keys`
    with the bundle ``net``; ``running`` are the running jobs, read for the candidates at a
    boundary and by the network's features): the candidates, their priority order
    (a stable sort: ties by index, as Engine._priority_order), the round boundary's expired
    leases (:func:`expire_leases`) and the visit plan (:func:`visit_plan`).

    Writes the candidates in priority order to ``plan[0]`` (the jobs ranked in the pass are
    ``plan[0, start:start + ranked]``), the visit plan's queue, least demand ahead and expired
    positions to ``plan[1]``, ``plan[2]``, ``plan[3]``, and the lease-expired jobs to
    ``expired_out``. Returns (status, candidates, start, jobs ranked, queue length, expired
    positions, lease-expired jobs, GPUs marked), status 0: no pass (nobody waiting fits); 1: a
    boundary where nobody may act (every lease renewed as it stands); 2: a pass over the
    queue. With ``keyed`` (KEYS_NW_SENS only), ``waiting`` is already in priority order, by
    their keys ``wkey[j]`` then index (a waiting job's Nw_sens does not change while it waits):
    only the running jobs are sorted, and merged in. (Arrays go to the caller's buffers, which
    are reused: returning one costs about a microsecond, and a copy of a long queue more.)
    """
    num_gpus = jobi[I_GPUS]
    order = plan[0]
    keyed = keyed and keys == KEYS_NW_SENS
    sorted_here = keys != KEYS_ARRIVAL and not keyed  # (keys computed for the candidates now)
    if boundary:
        n = waiting.size + running.size
        if n == 0:
            return 0, 0, 0, 0, 0, 0, 0, 0
        if keyed:
            rkey = nw_sens(running, jobf[F_DONE], jobf[F_ITER_TIME], jobf[F_RUN], jobf[F_NEVER])
            by_key = np.argsort(rkey, kind="mergesort")
            _merge_keyed(waiting, wkey, running, rkey, by_key, order)
        elif sorted_here:
            cand = plan[1, :n]
            _merge(waiting, running, cand)
        else:
            cand = order[:n]
            _merge(waiting, running, cand)
    else:
        n = waiting.size
        least = BIG
        for j in waiting:
            if num_gpus[j] < least:
                least = num_gpus[j]
        if n == 0 or least > free_total:
            return 0, 0, 0, 0, 0, 0, 0, 0
        cand = waiting
        if not sorted_here:
            order[:n] = waiting
    if sorted_here:
        if keys == KEYS_NW_SENS:
            keys_now = nw_sens(cand, jobf[F_DONE], jobf[F_ITER_TIME], jobf[F_RUN], jobf[F_NEVER])
        elif keys == KEYS_NET:
            _, _, free_pm, _, free_pr = cluster_views(cl, racks, mpr, gpm)
            fit = BIG if boundary else free_total
            keys_now = net_keys(
                cand, running, waiting, now, net, jobf, jobi, state, free_pm, free_pr, racks, mpr, free_total, fit
            )
        else:
            keys_now = remaining_keys(cand, keys, jobf, jobi, gpm, NEVER_MULTI, PROTECT)
        by_key = np.argsort(keys_now, kind="mergesort")
        for i in range(n):
            order[i] = cand[by_key[i]]
    n_expired = 0
    count = 0
    start = 0
    if boundary:
        owner, mark, free_pm, _, free_pr = cluster_views(cl, racks, mpr, gpm)
        start, n_expired, count = expire_leases(
            order[:n],
            state,
            jobi[I_TIER],
            jobi[I_BEST],
            scan,
            upgrades,
            from_zero,
            jobi[I_RANK],
            owner,
            mark,
            free_pm,
            free_pr,
            mpr,
            gpm,
            gpu_store,
            jobi[I_GPU_OFF],
            jobi[I_GPUS],
            expired_out,
        )
        if start < 0:
            return 1, n, 0, 0, 0, 0, 0, 0
    k, e = _visit_plan_into(order[start:n], num_gpus, state, free_total + count, boundary, plan[1], plan[2], plan[3])
    return 2, n, start, n - start, k, e, n_expired, count
