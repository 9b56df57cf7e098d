"""Shared by the kernels: the layout of the engine's tables and of the event loop's state
(the index constants, in one place for both sides), the constant arguments, and the
borrowed-array intrinsic."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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


#: ``auto`` of :func:`pass_turns`: which offers the pass accepts itself, and with
#: AUTO_BEST_POSSIBLE_ONLY declines itself (see Engine.decisions).
AUTO_NONE, AUTO_BEST_POSSIBLE, AUTO_BEST, AUTO_BEST_POSSIBLE_ONLY = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def cluster_views(cl, racks, mpr, gpm):
    """ClusterState's arrays, which are views of one buffer ``cl``: owner, mark, free and idle
    GPUs per machine, free GPUs per rack."""
    g = racks * mpr * gpm
    m = racks * mpr
    return cl[:g], cl[g : 2 * g], cl[2 * g : 2 * g + m], cl[2 * g + m : 2 * g + 2 * m], cl[2 * g + 2 * m :]


#: Slots of the event loop's int state (``Engine._li``): what :func:`run_events` reads and
#: writes of the engine's counters, the round clock and the cluster's scalars (the slots before
#: LI_N_LOG, which the engine copies in and out), then its log's length and the pass it
#: stopped in, its start log's length, and whether a placement across machines started or
#: ended since the links' shares were last found (under a contention model).
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
    LI_LINKS_CHANGED,
    LI_SIZE,
) = range(25)


#: Slots of its float state (``Engine._lf``).
LF_NEXT_ROUND, LF_NOW, LF_LAST_SYNC, LF_IN_SYSTEM, LF_COMM, LF_SIZE = range(6)


#: Slots of the record state (``Engine._rec_i`` / ``_rec_f``, :func:`record`).
RI_ROWS, RI_PARTIALS, RI_HAS_LAST, RI_LAST_USED = range(4)


RF_STEP, RF_NEXT, RF_LAST_T = range(3)


#: Why :func:`run_events` returned: every job finished; a turn of a pass needs Python (at
#: ``LI_POS``); an event needs Python from its start (whether a round boundary may act); its
#: log is full (nothing done for the next event yet); the cluster idled too long; the links'
#: shares must be found again before time moves on (a contention model is on and a placement
#: across machines started or ended: nothing done for the next event yet).
STOP_DONE, STOP_TURN, STOP_EVENT, STOP_LOG, STOP_IDLE, STOP_RESHARE = range(6)


#: A log row of :func:`run_events` beyond :func:`pass_turns`'s: a job finished.
LOG_COMPLETED = 4


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
