"""The event loop (:func:`run_events`): events and passes until one needs Python; the records."""

from __future__ import annotations

import numpy as np
from numba import njit

from .features import _nw_sens_of
from .layout import (
    _FALSE,
    _I0,
    _I1,
    _I_1,
    F_ANCHOR,
    F_DONE,
    F_END,
    F_FINISH,
    F_NEVER,
    F_TOTAL,
    I_BEST,
    I_DECLINED,
    I_GPU_OFF,
    I_GPUS,
    I_LAST_TIER,
    I_RANK,
    I_SHAPE,
    I_TIER,
    IDLE,
    LF_COMM,
    LF_IN_SYSTEM,
    LF_LAST_SYNC,
    LF_NEXT_ROUND,
    LF_NOW,
    LI_ANSWER,
    LI_ASKS,
    LI_BOUNDARY,
    LI_FINISHED,
    LI_FREE_TOTAL,
    LI_IDLE_ROUNDS,
    LI_KEYED,
    LI_LINKS_CHANGED,
    LI_MARKS_ACTIVE,
    LI_N_EXP_POS,
    LI_N_LOG,
    LI_N_QUEUE,
    LI_N_RANKED,
    LI_N_RUNNING,
    LI_N_STARTS,
    LI_N_WAITING,
    LI_NEXT_ARRIVAL,
    LI_PASSES,
    LI_POS,
    LI_ROUND_NO,
    LI_ROUNDS,
    LI_START,
    LI_VERSION,
    LI_WAITING_GPUS,
    LOG_COMPLETED,
    LOG_PREEMPTED,
    LOG_STARTED,
    RF_LAST_T,
    RF_NEXT,
    RF_STEP,
    RI_HAS_LAST,
    RI_LAST_USED,
    RI_PARTIALS,
    RI_ROWS,
    STOP_DONE,
    STOP_EVENT,
    STOP_IDLE,
    STOP_LOG,
    STOP_RESHARE,
    STOP_TURN,
    _borrowed,
    cluster_views,
)
from .offers import _count_own, advance, better_tier_in
from .passes import (
    KEYS_NW_SENS,
    _close,
    _keyed_insert,
    _keyed_remove,
    _shift_left,
    _shift_right,
    open_pass,
    pass_turns,
)
from .placement import release


@njit(cache=True, nogil=True)
def add_exact(partials, n, x):
    """Add ``x`` to the ``n`` non-overlapping partial sums ``partials[:n]`` without rounding
    (Shewchuk's algorithm); returns the new count. The engine's Python path runs this very
    code (its ``py_func``)."""
    i = 0
    for k in range(n):
        y = partials[k]
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i] = x
    return i + 1


@njit(cache=True, nogil=True)
def coupled_gpu_seconds(r, demand_score, noise, sorted_durations, gpus, partials):
    """The GPU-seconds of trace.generators._couple's assignment at coupling ``r``, as the
    non-overlapping partial sums of :func:`add_exact` in ``partials`` (``math.fsum`` of them is
    the correctly rounded total); returns their count. The job with the k-th smallest score
    ``r * demand_score + sqrt(1 - r^2) * noise`` (ties by index) gets the k-th shortest
    duration."""
    n = demand_score.size
    c = np.sqrt(1.0 - r * r)
    scores = np.empty(n)
    for i in range(n):
        scores[i] = r * demand_score[i] + c * noise[i]
    order = np.argsort(scores, kind="mergesort")
    k = _I0  # (a literal 0 here would compile add_exact twice: see _I0)
    for rank in range(n):
        k = add_exact(partials, k, gpus[order[rank]] * sorted_durations[rank])
    return k


@njit(cache=True, nogil=True)
def record(t, used, running, waiting, remaining, rec_i, rec_f, partials, timeline):
    """Engine._record: the busy GPU-seconds since the last event, and a timeline row."""
    if rec_i[RI_HAS_LAST]:
        rec_i[RI_PARTIALS] = add_exact(partials, rec_i[RI_PARTIALS], rec_i[RI_LAST_USED] * (t - rec_f[RF_LAST_T]))
    rec_i[RI_HAS_LAST] = 1
    rec_i[RI_LAST_USED] = used
    rec_f[RF_LAST_T] = t
    if t < rec_f[RF_NEXT]:
        return
    k = rec_i[RI_ROWS]
    timeline[k, 0] = t
    timeline[k, 1] = used
    timeline[k, 2] = running
    timeline[k, 3] = waiting
    timeline[k, 4] = remaining
    k += 1
    if k >= timeline.shape[0] - 1:  # (one spare row)
        rec_f[RF_STEP] = 2.0 * (t - timeline[0, 0]) / k
        kept = 0
        for i in range(0, k, 2):
            timeline[kept] = timeline[i]
            kept += 1
        k = kept
    rec_i[RI_ROWS] = k
    rec_f[RF_NEXT] = t + rec_f[RF_STEP]


@njit(cache=True, nogil=True)
def _set_insert(members, size, j):
    """Insert ``j`` into the increasing ``members[:size]``; returns the new size."""
    pos = np.searchsorted(members[:size], j)
    _shift_right(members, pos, size)
    members[pos] = j
    return size + 1


@njit(cache=True, nogil=True)
def _set_remove(members, size, j):
    """Remove ``j`` from the increasing ``members[:size]``; returns the new size."""
    pos = np.searchsorted(members[:size], j)
    _shift_left(members, pos, size)
    return size - 1


@njit(cache=True, nogil=True)
def _order_waiting(waiting, nw, jobf, wkey, ordered):
    """The waiting jobs ``waiting[:nw]`` into ``ordered[:nw]`` by (Nw_sens, index), their keys
    into ``wkey``."""
    for i in range(nw):
        wkey[waiting[i]] = _nw_sens_of(waiting[i], jobf)
    by_key = np.argsort(wkey[waiting[:nw]], kind="mergesort")
    for i in range(nw):
        ordered[i] = waiting[by_key[i]]


@njit(cache=True, nogil=True)
def run_events(resume, run, jobs, speeds, cluster, loop, logs, records, net):
    """Engine.decisions's loop, compiled: events, their passes (:func:`open_pass`,
    :func:`pass_turns`) and records, until one needs Python (see STOP_*); returns why.

    ``resume`` >= 0: first go on with the pass that stopped, from that position of its plan.
    The engine's scalars are in ``li`` / ``lf`` (LI_*, LF_*), the waiting and running jobs
    in ``sets[0, :n_waiting]`` / ``sets[1, :n_running]`` (increasing); with KEYS_NW_SENS the
    waiting jobs in priority order too, ``sets[2, :n_waiting]`` with their keys in ``wkey``
    (made again from the waiting jobs unless ``li[LI_KEYED]``), the record state in
    ``rec_i`` / ``rec_f`` / ``partials`` / ``timeline`` (:func:`record`). ``mode``: the
    renewal mode (0 upgrade, 1 keep, 2 rebid). ``auto``: which offers the passes accept
    themselves (AUTO_NONE: every offer stops them). The changes Python completes are logged
    in order (``log`` rows as :func:`pass_turns`'s plus LOG_COMPLETED; ``log_f``: the time
    and, for a start, the job's starvation then), from ``li[LI_N_LOG]`` on; the starts again,
    alone, from ``li[LI_N_STARTS]`` on (``starts``: the job and its tier; ``starts_f``: its
    starvation and the time), for the policy's start hooks.

    The arguments come in bundles, by role (the engine builds them once per run but
    ``speeds``, whose arrays grow): ``run`` = (arrival, first_s, lease_s, max_idle, n_gpus,
    mode, upgrades_offered, auto, keys, overhead_s, links_on); ``jobs`` = (jobf, jobi, state,
    speed_seen, tier_s, placements_by_tier); ``speeds`` = (machine_speed, shapes, shape_seq,
    shape_speed, slots), the speed tables; ``cluster`` = (gpu_store, cl, racks, mpr, gpm);
    ``loop`` = (sets, wkey, li, lf, plan, expired_buf); ``logs`` = (renewed, log, log_f,
    starts, starts_f); ``records`` = (rec_i, rec_f, partials, timeline); ``net``: the bundle of
    :func:`net_keys` for ``keys`` = KEYS_NET (any arrays of its types otherwise).
    """
    arrival, first_s, lease_s, max_idle, n_gpus, mode, upgrades_offered, auto, keys, overhead_s, links_on = run
    jobf, jobi, state, speed_seen, tier_s, placements_by_tier = jobs
    machine_speed, shapes, shape_seq, shape_speed, slots = speeds
    gpu_store, cl, racks, mpr, gpm = cluster
    sets, wkey, li, lf, plan, expired_buf = loop
    renewed, log, log_f, starts, starts_f = logs
    rec_i, rec_f, partials, timeline = records
    # Every array borrowed for the call (see _borrowed): no counting of references below.
    arrival, jobf, jobi, state, speed_seen, tier_s = (
        _borrowed(arrival),
        _borrowed(jobf),
        _borrowed(jobi),
        _borrowed(state),
        _borrowed(speed_seen),
        _borrowed(tier_s),
    )
    placements_by_tier, machine_speed, shapes = (
        _borrowed(placements_by_tier),
        _borrowed(machine_speed),
        _borrowed(shapes),
    )
    shape_seq, shape_speed, slots, gpu_store = (
        _borrowed(shape_seq),
        _borrowed(shape_speed),
        _borrowed(slots),
        _borrowed(gpu_store),
    )
    cl, sets, wkey, li, lf, plan = (
        _borrowed(cl),
        _borrowed(sets),
        _borrowed(wkey),
        _borrowed(li),
        _borrowed(lf),
        _borrowed(plan),
    )
    expired_buf, renewed, log, log_f = _borrowed(expired_buf), _borrowed(renewed), _borrowed(log), _borrowed(log_f)
    starts, starts_f = _borrowed(starts), _borrowed(starts_f)
    rec_i, rec_f, partials, timeline = _borrowed(rec_i), _borrowed(rec_f), _borrowed(partials), _borrowed(timeline)
    # The bundles passed on, of the borrowed arrays.
    jobs = (jobf, jobi, state, speed_seen, tier_s, placements_by_tier)
    speeds = (machine_speed, shapes, shape_seq, shape_speed, slots)
    cluster = (gpu_store, cl, racks, mpr, gpm)
    n = arrival.size
    num_gpus = jobi[I_GPUS]
    finish = jobf[F_FINISH]
    waiting = sets[0]
    running = sets[1]
    rank = jobi[I_RANK]
    cap = log.shape[0]
    owner, mark, free_pm, idle_pm, free_pr = cluster_views(cl, racks, mpr, gpm)
    keyed = keys == KEYS_NW_SENS
    ordered = sets[2]
    if keyed and not li[LI_KEYED]:
        _order_waiting(waiting, li[LI_N_WAITING], jobf, wkey, ordered)
        li[LI_KEYED] = 1
    pos = resume
    while True:
        if pos < 0:
            # --- the next event (Engine._next_event) ---
            if li[LI_FINISHED] >= n:
                return STOP_DONE
            if links_on and li[LI_LINKS_CHANGED]:
                return STOP_RESHARE  # (Python finds the shares at this instant, then goes on)
            na = li[LI_NEXT_ARRIVAL]
            t_arr = arrival[na] if na < n else np.inf
            t_fin = np.inf
            for i in range(li[LI_N_RUNNING]):
                f = finish[running[i]]
                if f < t_fin:
                    t_fin = f
            t_next = min(t_arr, t_fin)
            # Room in the log for everything this event may do: finishes, arrivals, and per
            # job of the pass a preemption and a start.
            arriving = 0
            while na + arriving < n and arrival[na + arriving] <= t_next:
                arriving += 1
            if li[LI_N_LOG] + 3 * (li[LI_N_RUNNING] + li[LI_N_WAITING] + arriving) + 1 > cap:
                return STOP_LOG
            next_round = lf[LF_NEXT_ROUND]
            if next_round < t_next and li[LI_N_WAITING] == 0:
                may_act = False
                if mode == 0:
                    if upgrades_offered and li[LI_FREE_TOTAL] > 0:
                        # A running job below its best tier for which the free GPUs and its own
                        # make a better tier would be offered an upgrade at the boundary, unless
                        # it declined one with these very free GPUs: Python keeps the declined
                        # offers, so it takes that event.
                        # jobi[I_DECLINED] holds a key of the GPUs a declined offer was made
                        # with (0: none): another key means other GPUs, and a new offer.
                        for i in range(li[LI_N_RUNNING]):
                            j = running[i]
                            if jobi[I_TIER, j] > jobi[I_BEST, j]:
                                key = _upgrade_key(j, free_pm, gpu_store, jobi, racks, mpr, gpm)
                                if key == 0:
                                    continue
                                if key == jobi[I_DECLINED, j]:
                                    return STOP_EVENT  # (or the same key for other GPUs)
                                may_act = True
                                break
                elif mode == 2:
                    may_act = li[LI_N_RUNNING] > 0
                if not may_act:
                    round_no = li[LI_ROUND_NO]
                    k = max(round_no, np.int64(np.floor((t_next - first_s) / lease_s)))
                    while first_s + k * lease_s > t_next:
                        k -= 1
                    while first_s + (k + 1) * lease_s <= t_next:
                        k += 1
                    if k > round_no:
                        li[LI_ROUNDS] += k - round_no
                        li[LI_ROUND_NO] = k
                        next_round = first_s + k * lease_s
                        lf[LF_NEXT_ROUND] = next_round
            t = min(t_next, next_round)
            # advance
            dt = t - lf[LF_LAST_SYNC]
            if dt > 0:
                lf[LF_IN_SYSTEM] += dt * (na - li[LI_FINISHED])
                n_run = li[LI_N_RUNNING]
                if n_run:
                    summed = advance(running, n_run, jobf, dt, t)  # (the speed factors, summed)
                    lf[LF_COMM] += dt * float(n_run - summed)
            lf[LF_LAST_SYNC] = t
            lf[LF_NOW] = t
            # completions, in increasing index order
            if t_fin <= t:
                n_run = li[LI_N_RUNNING]
                kept = 0
                done = 0
                freed = 0
                n_log = li[LI_N_LOG]
                for i in range(n_run):
                    j = running[i]
                    if finish[j] <= t:
                        g = num_gpus[j]
                        lo = jobi[I_GPU_OFF, j]
                        if jobi[I_LAST_TIER, j] > 0:  # (its placement crossed machines)
                            li[LI_LINKS_CHANGED] = 1
                        release(owner, free_pm, idle_pm, free_pr, gpu_store[lo : lo + g], mpr, gpm)
                        _close(j, t, jobf, jobi[I_TIER], tier_s)
                        jobf[F_DONE, j] = jobf[F_TOTAL, j]
                        jobf[F_END, j] = t
                        state[j] = 3  # DONE
                        freed += g
                        done += 1
                        log[n_log, 0] = LOG_COMPLETED
                        log[n_log, 1] = j
                        log_f[n_log, 0] = t
                        n_log += 1
                    else:
                        running[kept] = j
                        kept += 1
                li[LI_N_LOG] = n_log
                li[LI_N_RUNNING] = kept
                li[LI_FREE_TOTAL] += freed
                li[LI_VERSION] += done
                li[LI_FINISHED] += done
            # arrivals (indices follow arrival: each is the largest waiting index)
            while na < n and arrival[na] <= t:
                state[na] = 1  # WAITING
                if keyed:  # never run: the never-run Nw_sens (0 unless the policy sets one)
                    _keyed_insert(ordered, li[LI_N_WAITING], wkey, jobf[F_NEVER, na], na)
                waiting[li[LI_N_WAITING]] = na
                li[LI_N_WAITING] += 1
                li[LI_WAITING_GPUS] += num_gpus[na]
                na += 1
            li[LI_NEXT_ARRIVAL] = na
            boundary = t >= next_round
            if boundary:
                li[LI_ROUNDS] += 1
                li[LI_ROUND_NO] += 1
                lf[LF_NEXT_ROUND] = first_s + li[LI_ROUND_NO] * lease_s
                if li[LI_FREE_TOTAL] == n_gpus and na >= n:
                    li[LI_IDLE_ROUNDS] += 1
                    if li[LI_IDLE_ROUNDS] > max_idle and li[LI_FINISHED] < n:
                        return STOP_IDLE
                else:
                    li[LI_IDLE_ROUNDS] = 0
            # --- the pass (Engine._open_any_pass, turns.Pass) ---
            li[LI_PASSES] += 1
            li[LI_BOUNDARY] = boundary
            li[LI_N_QUEUE] = 0
            li[LI_N_RANKED] = 0
            if boundary or li[LI_N_WAITING] > 0:
                status, n_cand, start, n_ranked, n_queue, n_exp_pos, n_expired, count = open_pass(
                    (ordered if keyed else waiting)[: li[LI_N_WAITING]],
                    running[: li[LI_N_RUNNING]],
                    boundary,
                    keys,
                    mode != 2,
                    upgrades_offered and _any_below_best(running, li[LI_N_RUNNING], jobi),
                    _FALSE,
                    jobf,
                    jobi,
                    state,
                    gpu_store,
                    cl,
                    racks,
                    mpr,
                    gpm,
                    li[LI_FREE_TOTAL],
                    plan,
                    expired_buf,
                    keyed,
                    wkey,
                    t,
                    net,
                )
                if status == 2:
                    li[LI_N_QUEUE] = n_queue
                    li[LI_N_EXP_POS] = n_exp_pos
                    li[LI_START] = start
                    if n_expired:
                        li[LI_N_RANKED] = n_ranked
                        if count:
                            li[LI_FREE_TOTAL] += count
                            li[LI_VERSION] += 1
                            li[LI_MARKS_ACTIVE] = 1
                    pos = 0
        else:
            t = lf[LF_NOW]
            boundary = li[LI_BOUNDARY] != 0
        if pos >= 0:
            # --- the pass's turns, from ``pos`` ---
            n_queue = li[LI_N_QUEUE]
            n_log = li[LI_N_LOG]
            answer = li[LI_ANSWER]
            stop, asks, n_new, _, free_total, ops = pass_turns(
                plan[1, :n_queue],
                plan[2, :n_queue],
                plan[3, : li[LI_N_EXP_POS]],
                pos,
                t,
                auto,
                mode != 2,
                upgrades_offered,
                overhead_s,
                jobs,
                speeds,
                cluster,
                li[LI_FREE_TOTAL],
                li[LI_MARKS_ACTIVE] != 0,
                log[n_log:],
                renewed,
                answer,
            )
            if answer >= 0 and stop != pos:  # the answered start is made (else Python makes it)
                li[LI_ANSWER] = -1
            li[LI_FREE_TOTAL] = free_total
            li[LI_VERSION] += ops
            for r in range(n_log, n_log + n_new):
                j = log[r, 1]
                log_f[r, 0] = t
                if jobi[I_LAST_TIER, j] > 0:  # a placement across machines started or ended
                    li[LI_LINKS_CHANGED] = 1
                if log[r, 0] == LOG_PREEMPTED:
                    if keyed:
                        _keyed_insert(ordered, li[LI_N_WAITING], wkey, _nw_sens_of(j, jobf), j)
                    li[LI_N_RUNNING] = _set_remove(running, li[LI_N_RUNNING], j)
                    li[LI_N_WAITING] = _set_insert(waiting, li[LI_N_WAITING], j)
                    li[LI_WAITING_GPUS] += num_gpus[j]
                else:  # a start
                    log[r, 3] = jobi[I_TIER, j]
                    if log[r, 0] == LOG_STARTED:
                        jobi[I_SHAPE, j] = log[r, 2]
                    log_f[r, 1] = t - jobf[F_ANCHOR, j]
                    k = li[LI_N_STARTS]
                    starts[0, k] = j
                    starts[1, k] = log[r, 3]
                    starts_f[0, k] = log_f[r, 1]
                    starts_f[1, k] = t
                    li[LI_N_STARTS] = k + 1
                    if keyed:
                        _keyed_remove(ordered, li[LI_N_WAITING], wkey, j)
                    li[LI_N_WAITING] = _set_remove(waiting, li[LI_N_WAITING], j)
                    li[LI_WAITING_GPUS] -= num_gpus[j]
                    li[LI_N_RUNNING] = _set_insert(running, li[LI_N_RUNNING], j)
            li[LI_N_LOG] = n_log + n_new
            if stop >= 0:
                li[LI_POS] = stop
                li[LI_ASKS] = asks
                return STOP_TURN
            pos = -1
            if boundary:  # the end of a boundary pass: ClusterState.clear_marks, ranks reset
                if li[LI_MARKS_ACTIVE]:
                    mark[:] = IDLE
                    idle_pm[:] = free_pm
                    li[LI_MARKS_ACTIVE] = 0
                start = li[LI_START]
                for i in range(start, start + li[LI_N_RANKED]):
                    rank[plan[0, i]] = -1
        # --- the record (Engine._record) ---
        record(
            t,
            n_gpus - li[LI_FREE_TOTAL],
            li[LI_N_RUNNING],
            li[LI_N_WAITING],
            n - li[LI_FINISHED],
            rec_i,
            rec_f,
            partials,
            timeline,
        )


@njit(cache=True, nogil=True)
def vector_key(v):
    """A key of the int64 vector ``v``, never 0 (FNV-1a over its values): equal vectors have
    equal keys, so different keys mean different vectors."""
    h = np.uint64(14695981039346656037)
    for i in range(v.size):
        h = (h ^ np.uint64(v[i])) * np.uint64(1099511628211)
    return np.int64(h | np.uint64(1))


@njit(cache=True, nogil=True)
def _upgrade_key(j, free_pm, gpu_store, jobi, racks, mpr, gpm):
    """Outside a pass, for running job ``j`` below its best tier: 0 if no tier better than its
    own is free for it, counting its own GPUs as free (Engine._upgrade_free_for); else the
    :func:`vector_key` of those free GPUs per machine, with which its offer would be made."""
    lo = jobi[I_GPU_OFF, j]
    g = jobi[I_GPUS, j]
    _count_own(free_pm, gpu_store, lo, g, gpm, _I1)  # counted in free_pm itself, and taken out again
    key = vector_key(free_pm) if better_tier_in(free_pm, racks, mpr, gpm, g, jobi[I_TIER, j]) else 0
    _count_own(free_pm, gpu_store, lo, g, gpm, _I_1)
    return key


@njit(cache=True, nogil=True)
def _any_below_best(running, n_running, jobi):
    for i in range(n_running):
        j = running[i]
        if jobi[I_TIER, j] > jobi[I_BEST, j]:
            return True
    return False
