"""Compiled kernels for the engine's hot paths (numba, SPEC §4).

Each kernel does, in one compiled call, what a method of :class:`dallygym.cluster.ClusterState`
or :class:`dallygym.engine.Engine` does with many small numpy calls; :func:`run_events` runs
the engine's whole event loop, calling the others, until an event or a turn needs Python
(``Engine.decisions``'s loop, :meth:`Engine._event`, is its reference). The Python methods stay
the readable reference: every kernel gives the same answer bit for bit, and the tests hold it
to that (``ClusterState.compiled = False`` runs the reference, in the engine too).

The kernels take the cluster's arrays as they are (``owner``, ``mark``, free and idle counts
per machine and per rack) and the cluster's shape as three ints, so a call costs well under a
microsecond of dispatch; state they change is changed in place, and the Python side keeps its
scalar counters (``free_total``, ``version``) in step.

Compiled code is cached on disk (``cache=True``): the first run on a machine compiles the
kernels it uses (20-40 CPU-seconds for a whole episode), later processes load them in well
under a second. numba compiles a kernel at its first call, never at import, so a run compiles
only what it uses. The cache goes beside this file (``__pycache__``) when that is writable;
in a read-only install, unless ``NUMBA_CACHE_DIR`` says otherwise, it goes to a user cache
directory (:func:`user_cache_dir`), set before any kernel is defined (numba picks a function's
cache directory as it is decorated). A compile that the cache cannot spare is announced once
per process on stderr (``DALLYGYM_QUIET=1`` silences it). numba cannot cache a recursive
function, so none is (see :func:`pairwise_sum`).
"""

from __future__ import annotations

import glob
import math
import os
import sys
import tempfile

import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.core import event as _numba_event
from numba.extending import intrinsic

# --- where the compiled code is cached, and saying so when it must be compiled ---------------


def user_cache_dir(environ=os.environ) -> str:
    """The per-user directory for the compiled kernels when the package's own is read-only:
    ``$XDG_CACHE_HOME/dallygym/numba``, by default ``~/.cache/dallygym/numba`` (on Windows
    under ``%LOCALAPPDATA%``)."""
    base = environ.get("XDG_CACHE_HOME")
    if not base and sys.platform == "win32":
        base = environ.get("LOCALAPPDATA")
    if not base:
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dallygym", "numba")


def _writable_dir(path: str) -> bool:
    """Whether files can be made in ``path`` (created if missing): numba's own test of a cache
    directory, made here first so that a read-only install is found before numba silently
    gives up on caching beside the module."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def choose_cache_dir(module_dir: str, environ=os.environ) -> str | None:
    """The directory numba should cache the kernels in, or None to leave numba's choice:
    the user's ``NUMBA_CACHE_DIR`` if set, else ``module_dir/__pycache__`` if writable, else
    :func:`user_cache_dir`, else (no writable home either) a directory in the temporary one --
    with none at all numba would refuse to define the kernels, failing the import."""
    if environ.get("NUMBA_CACHE_DIR") or numba.config.CACHE_DIR:
        return None
    if _writable_dir(os.path.join(module_dir, "__pycache__")):
        return None
    user = user_cache_dir(environ)
    if _writable_dir(user):
        return user
    return os.path.join(tempfile.gettempdir(), f"dallygym-numba-{getattr(os, 'getuid', lambda: 'user')()}")


_fallback = choose_cache_dir(os.path.dirname(os.path.abspath(__file__)))
if _fallback is not None:
    # numba reads NUMBA_CACHE_DIR once, when it is imported (already done by now); its
    # config attribute is what the cache locators read as each function below is decorated.
    numba.config.CACHE_DIR = _fallback
del _fallback


class _CompileNotice(_numba_event.Listener):
    """Prints one line on stderr before the first compile of a kernel of this module in this
    process. numba reports a compile only when the cache could not supply the code, so a
    process whose kernels are all cached never prints. With no kernel of this module cached
    at all (a first run, an upgrade, a new cache directory) the line says the full cost."""

    printed = False

    def on_start(self, event) -> None:
        if self.printed:
            return
        dispatcher = event.data.get("dispatcher") if isinstance(event.data, dict) else None
        if getattr(getattr(dispatcher, "py_func", None), "__module__", None) != __name__:
            return
        type(self).printed = True
        if os.environ.get("DALLYGYM_QUIET", "").strip() not in ("", "0"):
            return
        where = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None) or "numba's cache"
        cold = not glob.glob(os.path.join(glob.escape(where), f"{__name__.rsplit('.', 1)[-1]}.*.nbi"))
        if cold:
            what = "compiling the simulator's kernels once (about 20-40 CPU-seconds)"
        else:
            what = "compiling simulator kernels not yet in the cache (a few seconds)"
        print(f"dallygym: {what}; cached in {where} ...", file=sys.stderr, flush=True)

    def on_end(self, event) -> None:
        pass


_numba_event.register("numba:compile", _CompileNotice())

IDLE = -1  # the mark of a free GPU nobody held at the last round boundary (cluster._IDLE is this)
BIG = np.iinfo(np.int64).max
# Constant arguments of one kernel to another, as numpy scalars: numba compiles a separate
# specialization of the callee for each literal Python constant it is passed (``0``, ``2``,
# ``False``), and for the one a Python caller's plain ints and bools need. Typed as int64 and
# bool, every call shares one compiled version -- the same values, a few seconds less of
# compiling when the cache is cold.
_I0, _I1, _I2, _I_1 = np.int64(0), np.int64(1), np.int64(2), np.int64(-1)
_FALSE = np.bool_(False)


@intrinsic
def _borrowed(typingctx, array):
    """``array`` without its reference count (a null meminfo), for a kernel entered from Python.

    Compiled code counts references to an array as it is passed and sliced: an atomic
    increment and decrement of its meminfo at every call of a helper that takes it. The event
    loop (:func:`run_events`) makes hundreds of such calls per scheduling pass; counted, they
    were about a quarter of its time. The Python caller holds every array it passes for the
    whole call, and the loop neither keeps nor returns one, so the loop borrows them: their
    views and the helpers' arguments carry a null meminfo, whose counting is a no-op. Arrays
    the helpers allocate themselves are counted as usual."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        view = context.make_array(array)(context, builder, value=args[0])
        view.meminfo = cgutils.get_null_value(view.meminfo.type)
        return view._getvalue()

    return array(array), codegen


# --- placement (ClusterState.place) ---------------------------------------------------------


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


# --- offers and renewals (Engine) -----------------------------------------------------------


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
def _machine_of(gpu, mpr, gpm):
    """GPU ``gpu``'s machine and rack, and the GPUs of that machine (first, one past the last).

    A loop over a job's GPUs calls this only when a GPU is off the machine of the one before
    (``not m_lo <= gpu < m_hi``): a job's GPUs come machine by machine, so two integer
    divisions per machine instead of per GPU (they were most of the cost of these loops)."""
    m = gpu // gpm
    return m, m // mpr, m * gpm, m * gpm + gpm


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


# --- a scheduling pass's turns (Engine._pass) -----------------------------------------------

#: Rows of the engine's per-job float table (``Engine._jobf``; the named arrays are its rows).
JOB_FLOATS = (
    "done_iters",
    "speed",
    "rate",
    "seg_start_s",
    "seg_done0",
    "hold_start_s",
    "finish_s",
    "run_s",
    "overhead_s",
    "starve_anchor_s",
    "first_start_s",
    "total_iterations",
    "iter_time_s",
    "end_s",
    "_scratch_f",
    "_never_nw_sens",
)
#: Rows of the engine's per-job int table (``Engine._jobi``).
JOB_INTS = (
    "num_gpus",
    "best_possible_tier",
    "_model_id",
    "tier",
    "_last_tier",
    "_gpu_off",
    "preemptions",
    "_rank",
    "_declined_key",
    "_shape_entry",
)
(
    F_DONE,
    F_SPEED,
    F_RATE,
    F_SEG_START,
    F_SEG_DONE0,
    F_HOLD_START,
    F_FINISH,
    F_RUN,
    F_OVERHEAD,
    F_ANCHOR,
    F_FIRST_START,
    F_TOTAL,
    F_ITER_TIME,
    F_END,
    F_SCRATCH,
    F_NEVER,
) = range(len(JOB_FLOATS))
(I_GPUS, I_BEST, I_MODEL, I_TIER, I_LAST_TIER, I_GPU_OFF, I_PREEMPTIONS, I_RANK, I_DECLINED, I_SHAPE) = range(
    len(JOB_INTS)
)
#: ``Engine._shape_entry`` of a job whose last placement's shape is in ``Engine.last_shape``
#: (a start made in Python); otherwise its shape table entry, or -1 for one machine.
SHAPE_LISTED = -2

#: What :func:`pass_turns` writes to its log, one ``(code, job, shape)`` row per change that
#: the Python side completes (job sets, GPU lists, the finish heap, policy hooks): a
#: lease-expired job preempted, a job started on new GPUs (``shape``: the entry of its
#: placement's shape in the shape table, -1 for one machine), a job started on its last GPUs
#: again.
LOG_PREEMPTED, LOG_STARTED, LOG_RESTARTED_SAME = 1, 2, 3
#: ``auto`` of :func:`pass_turns`: which offers the pass accepts itself (see Engine.decisions).
AUTO_NONE, AUTO_BEST_POSSIBLE, AUTO_BEST = 0, 1, 2


@njit(cache=True, nogil=True)
def cluster_views(cl, racks, mpr, gpm):
    """ClusterState's arrays, which are views of one buffer ``cl``: owner, mark, free and idle
    GPUs per machine, free GPUs per rack."""
    g = racks * mpr * gpm
    m = racks * mpr
    return cl[:g], cl[g : 2 * g], cl[2 * g : 2 * g + m], cl[2 * g + m : 2 * g + 2 * m], cl[2 * g + 2 * m :]


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
    jobf,
    jobi,
    state,
    speed_seen,
    tier_s,
    placements_by_tier,
    machine_speed,
    shapes,
    shape_seq,
    shape_speed,
    slots,
    gpu_store,
    cl,
    racks,
    mpr,
    gpm,
    free_total,
    marks_active,
    log,
    renewed,
    answer=-1,
):
    """Engine._pass's loop over ``queue`` (its visit plan) from position ``pos``, for as long
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

    Per-job state comes in the engine's tables (``jobf``, ``jobi``: rows JOB_FLOATS and
    JOB_INTS) and the cluster's in its buffer ``cl`` (:func:`cluster_views`).

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
                ask = b >= 0 and not (auto == AUTO_BEST or (auto == AUTO_BEST_POSSIBLE and b == best_tier[jj]))
                if not ask and (b > 0 or (b == 0 and np.isnan(machine_speed[model_index[jj], g]))):
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
        elif not (auto == AUTO_BEST or (auto == AUTO_BEST_POSSIBLE and b == best_tier[j])):
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


#: ``keys`` of :func:`open_pass`: the priority orders it computes itself.
KEYS_ARRIVAL, KEYS_NW_SENS = 0, 1


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
def _nw_sens_of(j, jobf):
    run_s = jobf[F_RUN, j]
    return jobf[F_DONE, j] * jobf[F_ITER_TIME, j] / run_s if run_s > 0 else jobf[F_NEVER, j]


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
):
    """The start of Engine._pass for a policy whose priority is arrival order (``keys`` =
    KEYS_ARRIVAL) or increasing Nw_sens (KEYS_NW_SENS): the candidates, their priority order
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
    if boundary:
        n = waiting.size + running.size
        if n == 0:
            return 0, 0, 0, 0, 0, 0, 0, 0
        if keyed:
            rkey = nw_sens(running, jobf[F_DONE], jobf[F_ITER_TIME], jobf[F_RUN], jobf[F_NEVER])
            by_key = np.argsort(rkey, kind="mergesort")
            _merge_keyed(waiting, wkey, running, rkey, by_key, order)
        elif keys == KEYS_NW_SENS:
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
        if keys != KEYS_NW_SENS or keyed:
            order[:n] = waiting
    if keys == KEYS_NW_SENS and not keyed:
        keys_now = nw_sens(cand, jobf[F_DONE], jobf[F_ITER_TIME], jobf[F_RUN], jobf[F_NEVER])
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


# --- the event loop (Engine.decisions) ------------------------------------------------------

#: Slots of the event loop's int state (``Engine._li``): what :func:`run_events` reads and
#: writes of the engine's counters, the round clock and the cluster's scalars (the slots before
#: LI_N_LOG, which the engine copies in and out), then its log's length and the pass it
#: stopped in, and its start log's length.
(
    LI_NEXT_ARRIVAL,
    LI_FINISHED,
    LI_ROUNDS,
    LI_ROUND_NO,
    LI_IDLE_ROUNDS,
    LI_PASSES,
    LI_N_WAITING,
    LI_N_RUNNING,
    LI_WAITING_GPUS,
    LI_FREE_TOTAL,
    LI_VERSION,
    LI_MARKS_ACTIVE,
    LI_N_LOG,
    LI_BOUNDARY,
    LI_N_QUEUE,
    LI_N_EXP_POS,
    LI_START,
    LI_N_RANKED,
    LI_POS,
    LI_ASKS,
    LI_KEYED,
    LI_ANSWER,
    LI_N_STARTS,
    LI_SIZE,
) = range(24)
#: Slots of its float state (``Engine._lf``).
LF_NEXT_ROUND, LF_NOW, LF_LAST_SYNC, LF_IN_SYSTEM, LF_COMM, LF_SIZE = range(6)
#: Slots of the record state (``Engine._rec_i`` / ``_rec_f``, :func:`record`).
RI_ROWS, RI_PARTIALS, RI_HAS_LAST, RI_LAST_USED = range(4)
RF_STEP, RF_NEXT, RF_LAST_T = range(3)
#: Why :func:`run_events` returned: every job finished; a turn of a pass needs Python (at
#: ``LI_POS``); an event needs Python from its start (whether a round boundary may act); its
#: log is full (nothing done for the next event yet); the cluster idled too long.
STOP_DONE, STOP_TURN, STOP_EVENT, STOP_LOG, STOP_IDLE = range(5)
#: A log row of :func:`run_events` beyond :func:`pass_turns`'s: a job finished.
LOG_COMPLETED = 4


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
def run_events(
    resume,
    arrival,
    first_s,
    lease_s,
    max_idle,
    n_gpus,
    mode,
    upgrades_offered,
    auto,
    keys,
    overhead_s,
    jobf,
    jobi,
    state,
    speed_seen,
    tier_s,
    placements_by_tier,
    machine_speed,
    shapes,
    shape_seq,
    shape_speed,
    slots,
    gpu_store,
    cl,
    racks,
    mpr,
    gpm,
    sets,
    wkey,
    li,
    lf,
    plan,
    expired_buf,
    renewed,
    log,
    log_f,
    starts,
    starts_f,
    rec_i,
    rec_f,
    partials,
    timeline,
):
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
    """
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
                    speeds = advance(running, n_run, jobf, dt, t)
                    lf[LF_COMM] += dt * float(n_run - speeds)
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
            # --- the pass (Engine._pass) ---
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
                jobf,
                jobi,
                state,
                speed_seen,
                tier_s,
                placements_by_tier,
                machine_speed,
                shapes,
                shape_seq,
                shape_speed,
                slots,
                gpu_store,
                cl,
                racks,
                mpr,
                gpm,
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


# --- Dally-v0's observation (DallyEnv._observe) ---------------------------------------------

#: ``offer_observation``'s constants, by position in its ``consts`` array.
(
    OC_LEASE,
    OC_LONG,
    OC_LOG_LONG,
    OC_LOG_1000,
    OC_GPUS,
    OC_JOBS,
    OC_FIRST_ARRIVAL,
    OC_MACHINES,
    OC_RACKS,
    OC_GPM,
    OC_GPR,
    OC_SIZE,
) = range(12)


@njit(cache=True, nogil=True, inline="always")
def _time_shown(t, lease, long_s, log_long):
    """A time as DallyEnv shows it: log1p(t / lease) / log1p(LONG_LEASES), 1 from ``long_s``
    on, 0 for t <= 0 (and NaN)."""
    if t > 0:
        return 1.0 if t >= long_s else math.log1p(t / lease) / log_long
    return 0.0


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
    """DallyEnv._observe's features of job ``j``'s offer into ``out`` (float32): the same
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


# --- DallyQueue's observation (DallyQueueEnv._observe) ---------------------------------------


@njit(cache=True, nogil=True)
def queue_demands(c, jobi, best_of, present, demands):
    """The distinct GPU demands of candidates ``c``, increasing, into ``demands`` (returns how
    many), with each one's best possible tier in ``best_of[demand]``. ``present`` (indexed by
    demand) is all False on entry and left so."""
    for r in range(c.size):
        g = jobi[I_GPUS, c[r]]
        best_of[g] = jobi[I_BEST, c[r]]
        present[g] = True
    m = 0
    for g in range(present.size):
        if present[g]:
            present[g] = False
            demands[m] = g
            m += 1
    return m


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
    """DallyQueueEnv._observe's job features of candidates ``c`` into the rows of ``jobs``
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
    scale = largest
    if most > scale:
        scale = most
    if 1e-9 > scale:
        scale = 1e-9
    for r in range(k):
        jobs[r, 19] = estimates[r] / scale


@njit(cache=True, nogil=True)
def queue_shown_rows(
    c, every, rows, row_estimate, now, largest, jobf, jobi, free_of, limits_of, timed, jobs, mask, shown
):
    """DallyQueueEnv._observe's job rows at a pick from rows kept by job (see
    DallyQueueEnv._job_features_cached): candidate ``c[r]``'s kept row into row ``r`` of
    ``jobs``, with what the pick changes computed as :func:`queue_job_features` does (feature 4
    from ``free_of``, 17-18 from ``limits_of`` if ``timed``, 19 from ``row_estimate`` and
    ``largest``); ``mask`` 1 there. Rows ``c.size`` to ``shown`` (shown before, empty now) are
    cleared. Returns the summed GPU demand of ``every`` (all the candidates, shown or not)."""
    k = c.size
    width = rows.shape[1]
    most = -np.inf
    for r in range(k):
        estimate = row_estimate[c[r]]
        if estimate > most:
            most = estimate
    scale = largest
    if most > scale:
        scale = most
    if 1e-9 > scale:
        scale = 1e-9
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
    return demand


@njit(cache=True, nogil=True)
def largest_estimate(running, waiting, jobf, jobi, gpm, never_multi_nw):
    """The largest remaining estimate of the jobs ``running`` and ``waiting`` (DallyQueueEnv's
    largest_estimate_s: ProtectedRemainingPolicy.remaining_estimate_s, the arithmetic of
    :func:`queue_job_features`); 0 when there are none."""
    most = -np.inf
    for jobs in (running, waiting):
        for i in range(jobs.size):
            j = jobs[i]
            nw = _nw_sens_of(j, jobf)
            remaining = (jobf[F_TOTAL, j] - jobf[F_DONE, j]) * jobf[F_ITER_TIME, j]
            if nw > 0:
                estimate = remaining / nw
            elif jobi[I_GPUS, j] > gpm:
                estimate = remaining / never_multi_nw
            else:
                estimate = remaining / 1.0
            if estimate > most:
                most = estimate
    return most if running.size + waiting.size else 0.0


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
