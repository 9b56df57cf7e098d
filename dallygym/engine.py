"""The discrete-event engine (SPEC §4).

One engine serves every use: a native run with a heuristic policy and the Gymnasium
environment with an agent. :meth:`Engine.decisions` is a generator that yields an
:class:`Offer` whenever a waiting job is offered GPUs and receives the answer (a :class:`Tier`
to accept at, or ``None`` to wait); :func:`run_policy` drives it with a policy's ``decide``.

Time is continuous. A running job progresses at ``speed / iter_time_s`` iterations per second,
where ``speed`` is the latency model's speed factor of its placement; completion times are
computed analytically, and the engine only wakes on events:

* **arrival** of a job (it joins the waiting jobs, its starvation clock starts);
* **completion** of a job (its GPUs are freed);
* **round boundary** every ``lease_s`` from the first arrival: every running job's lease
  expires. The jobs -- waiting and lease-expired alike -- are visited in the policy's priority
  order. A lease-expired job whose GPUs were not claimed by a higher-priority job keeps them and
  continues at no cost (no decision is asked: it never lost them). A lease-expired job that lost
  any GPU is preempted: its progress is kept, it becomes a waiting job with starvation clock
  reset to now, the GPUs it still had are free for anyone (taking them displaces nobody), and
  it is offered the remaining GPUs like any waiting job. If it later restarts
  on a different GPU set it pays ``restart_overhead_s`` before progressing again.

After a boundary's pass, a policy with a ``migrate`` hook may move running jobs that kept their
GPUs to a more consolidated tier, using free GPUs (Gandiva's migration). A boundary at which no
job waits changes nothing, so the engine steps over such boundaries (the round count stays
exact) unless the policy migrates.

A scheduling pass runs at every event time (after all events of that instant). Waiting jobs are
visited in priority order; a job that does not fit anywhere is skipped and lower-priority jobs
are still offered (no head-of-line blocking). Only waiting jobs receive offers.

Per-job state lives in numpy arrays indexed by job index (the row of the trace, sorted by
arrival then id); policies read them through the engine object.

The small-array work of a pass (placements, opening a boundary, runs of renewals, tier tests,
progress, completions) runs as compiled kernels (:mod:`dallygym.kernels`). Where the policy's
priority is one the engine knows and it neither migrates nor lets an agent pick, the whole
event loop runs compiled (:func:`dallygym.kernels.run_events`: events, passes, records) up to
each event or turn that needs Python, which is taken here (:meth:`Engine._event`,
:meth:`Engine._python_turn`); otherwise events are taken here one by one, with compiled passes
(:meth:`Engine._open_pass`, :meth:`Engine._compiled_turns`) where the policy's hooks allow.
With ``ClusterState.compiled`` false the Python methods here and in
:mod:`dallygym.cluster` run instead, with the same results bit for bit (they are the reference
the tests hold the kernels to).
"""

from __future__ import annotations

import copy
import heapq
import math
import struct
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pandas as pd

from . import kernels, turns
from .cluster import ClusterError, ClusterSpec, ClusterState, Tier, tier_of_shape
from .decisions import DONE, PENDING, RUNNING, TIERS, WAITING, Decision, EngineError, Offer, Pick  # noqa: F401 (re-exported)
from .policies.base import Policy, auto_accept_of, hooks_on_start, priority_keys_of, start_batch_hook, starts_in_batches

if TYPE_CHECKING:
    from .latency import LatencyModel


class SpeedTables:
    """The speed factors asked of one latency model so far, shared by the runs that use the
    same model object (an environment's episodes): a latency model is a pure function of
    (model, shape) (see :class:`~dallygym.latency.LatencyModel`), and a run that starts knowing
    them makes its placements compiled from its first pass. Models have ids here (``ids``,
    by name), the same in every run.

    ``cache[(id, shape)]`` is every factor; the compiled passes read one-machine placements
    from ``machine[id, g]`` (NaN: not asked yet) and the others from the shape table: entry e
    is model ``rows[e, 0]`` on the shape whose kernels.shape_code is
    ``seq[rows[e, 1]:][:rows[e, 2]]``, factor ``speed[e]``, the shape itself ``shapes[e]``,
    found through the hash index ``slots`` (kernels.index_shapes). Entries only grow, and
    stay where they are: a run may keep an entry's number.
    """

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.cache: dict[tuple[int, tuple], float] = {}
        self.machine = np.full((4, 9), np.nan)
        self.shapes: list = []
        self.rows = np.zeros((16, 3), dtype=np.int64)
        self.seq = np.zeros(64, dtype=np.int64)
        self.speed = np.zeros(16)
        self.seq_used = 0
        self.slots = np.zeros(32, dtype=np.int64)

    def model_ids(self, names, gpus_per_machine: int) -> list[int]:
        """The ids of models ``names`` (new ones added), with room in ``machine`` for
        placements of up to ``gpus_per_machine`` GPUs."""
        for name in names:
            self.ids.setdefault(name, len(self.ids))
        rows, cols = self.machine.shape
        new_rows = rows if len(self.ids) <= rows else max(len(self.ids), 2 * rows)
        new_cols = max(cols, gpus_per_machine + 1)
        if (new_rows, new_cols) != (rows, cols):
            grown = np.full((new_rows, new_cols), np.nan)
            grown[:rows, :cols] = self.machine
            self.machine = grown
        return [self.ids[name] for name in names]

    def add(self, model: int, shape: tuple, s: float) -> None:
        """Enter the factor ``s`` of model id ``model`` on ``shape`` (a new one)."""
        self.cache[(model, shape)] = s
        if len(shape) == 1 and len(shape[0]) == 1:  # one machine
            self.machine[model, shape[0][0]] = s
            return
        code = [c for rack in shape for c in (*rack, 0)]  # as kernels.shape_code
        e = len(self.shapes)
        if e == len(self.rows):
            self.rows = np.concatenate((self.rows, np.zeros_like(self.rows)))
            self.speed = np.concatenate((self.speed, np.zeros_like(self.speed)))
        lo, end = self.seq_used, self.seq_used + len(code)
        if end > len(self.seq):
            self.seq = np.concatenate((self.seq, np.zeros(max(len(self.seq), len(code)), dtype=np.int64)))
        self.seq[lo:end] = code
        self.rows[e] = (model, lo, len(code))
        self.speed[e] = s
        self.seq_used = end
        self.shapes.append(shape)
        if 2 * (e + 1) > len(self.slots):  # at most half full: index them all again, twice as wide
            self.slots = np.zeros(2 * len(self.slots), dtype=np.int64)
            kernels.index_shapes(self.slots, self.rows, self.seq, 0, e + 1)
        else:
            kernels.index_shapes(self.slots, self.rows, self.seq, e, e + 1)


#: The speed tables of each latency model object (:class:`SpeedTables`).
_SPEED_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def speed_tables(latency) -> SpeedTables:
    """``latency``'s shared :class:`SpeedTables` (a new one for a model that cannot be weakly
    referenced: each run its own)."""
    try:
        tables = _SPEED_TABLES.get(latency)
        if tables is None:
            tables = _SPEED_TABLES[latency] = SpeedTables()
        return tables
    except TypeError:
        return SpeedTables()


_largest = np.maximum.reduce  # ndarray.max() without its Python-level wrapper
_TIERS = TIERS
_MACHINE_ONLY = (Tier.MACHINE,)
#: Engine._run_events's scalars in the compiled loop's int and float state (kernels.LI_* up to
#: LI_N_LOG included, kernels.LF_*), native int64 and float64.
_LI_PACK = struct.Struct(f"={kernels.LI_N_LOG + 1}q")
_LF_PACK = struct.Struct(f"={kernels.LF_SIZE}d")
#: The pass the compiled loop stopped in: kernels.LI_BOUNDARY up to LI_ANSWER.
_LI_PASS = struct.Struct(f"={kernels.LI_ANSWER - kernels.LI_BOUNDARY + 1}q")
_NO_DEMAND = np.iinfo(np.int64).max  # in a pass's demand list: an expired lease, not a waiting job
STATE_NAMES = ("pending", "waiting", "running", "done")
#: Lease-renewal modes of :class:`EngineConfig` (the first is the default).
RENEWAL_MODES = ("upgrade", "keep", "rebid")
#: ``Engine.decisions(auto_accept=...)``: the offers the engine accepts itself (by position:
#: the codes of :mod:`dallygym.kernels`, ``AUTO_NONE``, ``AUTO_BEST_POSSIBLE``, ``AUTO_BEST``).
AUTO_ACCEPT = (None, "best-possible", "best")
_FIRST_CALL = object()  # Engine.next_decision's auto_accept when left out
#: What a round boundary's picks offer an agent (``Engine(lease_picks=...)``): every
#: lease-expired job too, or the waiting jobs only (the leases follow the policy's order).
LEASE_PICKS = ("all", "waiting")


class JobSet:
    """The jobs in one state, handed out as a sorted int64 array of job indices.

    An event adds or removes a few members while the set may hold thousands, and the trace
    far more jobs than that. So changes are noted and applied when the array is next asked
    for: new members are merged in, and members that left are found by reading their state
    -- a few numpy calls whose cost grows with the set, not with the trace (scanning the whole
    state array at every event made long runs quadratic). An array handed out is never
    changed afterwards (a change makes a new one).

    The compiled event loop keeps the set in a row of its own (:meth:`lend`): the members are
    then copied out of that row only when asked for, and the loop is given them again only if
    they changed since (:meth:`lent`).
    """

    __slots__ = ("_added", "_array", "_code", "_compiled", "_left", "_n", "_row", "_state")

    def __init__(self, state: np.ndarray, code: int, compiled: bool = False) -> None:
        self._state = state  # the engine's per-job states (read only here)
        self._code = code
        self._compiled = compiled  # merge with kernels.job_set
        self._array = np.flatnonzero(state == code)
        self._added: list[int] = []
        self._left = False
        self._row = None  # the compiled loop's row holding the members (lend), if it still does
        self._n = 0

    def add(self, j: int) -> None:
        """``j`` has just entered the state."""
        self._added.append(j)

    def remove(self, j: int) -> None:
        """``j`` has just left the state."""
        self._left = True

    def load(self, members: np.ndarray) -> None:
        """The members are now ``members`` (increasing; kept, not copied)."""
        self._array = members
        self._added = []
        self._left = False
        self._row = None

    def lend(self, row: np.ndarray, n: int) -> None:
        """The members are now the first ``n`` of ``row`` (increasing), which the compiled loop
        keeps and only it writes: copied out when first asked for."""
        self._array = None
        self._added = []
        self._left = False
        self._row = row
        self._n = n

    def lent(self) -> bool:
        """Whether the row of the last :meth:`lend` still holds exactly the members."""
        return self._row is not None and not self._added and not self._left

    def array(self) -> np.ndarray:
        """The members in increasing order."""
        arr = self._array
        if arr is None:
            arr = self._array = self._row[: self._n].copy()
        if self._compiled:
            if self._added or self._left:
                arr = self._array = kernels.job_set(
                    arr, np.array(self._added, dtype=np.int64), self._state, self._code, self._left
                )
                self._added = []
                self._left = False
                self._row = None
            return arr
        if self._added:
            arr = np.concatenate((arr, self._added))
            arr.sort(kind="stable")
        if self._left:
            arr = arr[self._state[arr] == self._code]
            if self._added and arr.size > 1:  # a job that left and came back is listed twice
                first = np.ones(arr.size, dtype=bool)
                np.not_equal(arr[1:], arr[:-1], out=first[1:])
                arr = arr[first]
        if self._added or self._left:
            self._array = arr
            self._added = []
            self._left = False
            self._row = None
        return arr

    def __getstate__(self) -> dict:
        """The members as a plain array (pending changes applied; no lent row: a copy of the
        compiled loop's row would no longer be that row)."""
        arr = self.array()
        return {"_state": self._state, "_code": self._code, "_compiled": self._compiled, "_array": arr}

    def __setstate__(self, state: dict) -> None:
        self._state = state["_state"]
        self._code = state["_code"]
        self._compiled = state["_compiled"]
        self.load(state["_array"])
        self._n = 0


def _in_arrival_order(trace: pd.DataFrame) -> bool:
    """Whether the rows of ``trace`` are already in (arrival_s, job_id) order (a stable sort on
    those keys would leave them as they are)."""
    if len(trace) < 2:
        return True
    arrival = trace["arrival_s"].to_numpy()
    step = np.diff(arrival)
    if not (step >= 0).all():  # (a NaN compares false: such a trace is sorted as before)
        return False
    ties = step == 0
    return not ties.any() or bool((np.diff(trace["job_id"].to_numpy())[ties] >= 0).all())


class TraceArrays:
    """A trace's columns as an :class:`Engine` reads them: in (arrival_s, job_id) order, copied
    out of the frame once and read-only, with the Python lists its per-offer loop reads.

    An Engine built from a frame makes one; a caller that runs the same trace many times (an
    environment's fixed trace, reset after reset) makes it once and passes it instead of the
    frame, and every engine shares it (none writes to it)."""

    __slots__ = (
        "arrival_s",
        "ideal_s",
        "iter_time_list",
        "iter_time_s",
        "job_id",
        "job_id_list",
        "model",
        "model_index",
        "model_index_list",
        "model_names",
        "n",
        "num_gpus",
        "num_gpus_list",
        "total_iterations",
        "total_iterations_list",
    )

    def __init__(self, trace: pd.DataFrame) -> None:
        frame = trace if _in_arrival_order(trace) else trace.sort_values(["arrival_s", "job_id"], kind="stable")
        n = len(frame)
        if n == 0:
            raise ValueError("the trace has no jobs")
        self.n = n
        # (Copies: the arrays never share the caller's frame.)
        self.job_id = frame["job_id"].to_numpy(dtype=np.int64, copy=True)
        self.arrival_s = frame["arrival_s"].to_numpy(dtype=np.float64, copy=True)
        self.num_gpus = frame["num_gpus"].to_numpy(dtype=np.int64, copy=True)
        self.model = frame["model"].to_numpy(dtype=object, copy=True)
        names, self.model_index = np.unique(self.model.astype(str), return_inverse=True)
        self.model_names: tuple[str, ...] = tuple(str(m) for m in names)
        self.total_iterations = frame["total_iterations"].to_numpy(dtype=np.float64, copy=True)
        self.iter_time_s = frame["iter_time_s"].to_numpy(dtype=np.float64, copy=True)
        self.ideal_s = self.total_iterations * self.iter_time_s
        for name in (
            "job_id",
            "arrival_s",
            "num_gpus",
            "model",
            "model_index",
            "total_iterations",
            "iter_time_s",
            "ideal_s",
        ):
            getattr(self, name).flags.writeable = False
        self.num_gpus_list: list[int] = self.num_gpus.tolist()
        self.job_id_list: list[int] = self.job_id.tolist()
        self.model_index_list: list[int] = self.model_index.tolist()
        self.iter_time_list: list[float] = self.iter_time_s.tolist()
        self.total_iterations_list: list[float] = self.total_iterations.tolist()

    def __repr__(self) -> str:
        return f"TraceArrays(n={self.n}, models={list(self.model_names)})"


class JobGpus:
    """Each job's GPUs, read from the engine's GPU store (``num_gpus[j]`` slots from
    ``offsets[j]``: its current GPUs while it holds a placement, its last ones after): item
    ``j`` is a new array of them, or None while ``flags[j] < 0`` -- the job's tier for the
    GPUs it holds now (-1 unless it holds a placement), its last tier for the GPUs it held
    last (-1 until its first placement). Read only; the store is the one record."""

    __slots__ = ("_flags", "_num_gpus", "_offsets", "_store")

    def __init__(self, store: np.ndarray, offsets: list[int], num_gpus: list[int], flags: np.ndarray) -> None:
        self._store, self._offsets, self._num_gpus, self._flags = store, offsets, num_gpus, flags

    def __len__(self) -> int:
        return self._flags.size

    def __getitem__(self, j: int) -> np.ndarray | None:
        if self._flags.item(j) < 0:  # (an index out of range raises IndexError here)
            return None
        lo = self._offsets[j]
        return self._store[lo : lo + self._num_gpus[j]].copy()

    def __iter__(self):
        return (self[j] for j in range(len(self)))


@dataclass(frozen=True)
class EngineConfig:
    """Run parameters shared by ``dallygym simulate``, ``compare`` and the environment.

    Attributes:
        lease_s: length of a scheduling round (global lease) in seconds. The paper's delay
            timers are in hours and its reference simulator scales them by the lease, so the
            default is one hour. From :data:`MIN_LEASE_S` (1 s) to :data:`MAX_LEASE_S` (1e9 s):
            every round boundary with a job waiting is a scheduling pass, so a run takes about
            (makespan / lease) passes, and a lease of a nanosecond would never finish. Real
            leases are minutes to hours; one second is far below any of them.
        restart_overhead_s: time a preempted job spends restoring its checkpoint when it
            restarts on a different GPU set (the paper calls it negligible: default 0). From 0
            to :data:`MAX_RESTART_OVERHEAD_S` (one day): real restores take seconds to minutes,
            and each restart stretches the run by this much, every round of it a pass.
        seed: seed of the run's ``numpy.random.Generator`` (the only source of randomness),
            an integer from 0 to 2**63 - 1 (it is stored in int64 result columns).
        max_idle_rounds: a run stops with :class:`EngineError` if jobs keep waiting on a
            completely idle cluster, with nothing left to arrive, for this many rounds (a
            policy that never accepts would otherwise loop forever); from 1 to
            :data:`MAX_IDLE_ROUNDS`, since a larger bound only delays that error.

        Each is checked when the config is made: a bool, a non-number, NaN or infinity, or a
        value out of range is a ``ValueError`` naming the field and its bounds.
        renewal: what a round boundary does to a running job whose lease expired and whose
            GPUs no higher-priority job claimed (SPEC §4, "Lease renewal is an offer"):

            * ``"upgrade"`` (default): if its tier is worse than the best it could have, it is
              offered the tiers strictly better than its own that are free at its turn in the
              pass (its own GPUs count as free for it); accepting moves it there (a
              re-placement paying ``restart_overhead_s``, counted in ``upgrades``), waiting
              keeps its GPUs at no cost. A job at its best tier keeps its GPUs unasked, and so
              does one that declined an upgrade offer of the very same free GPUs (per machine,
              its own included) at an earlier boundary: its answer is taken to stand, and a
              boundary with nothing new to offer is stepped over.
            * ``"keep"``: it keeps its GPUs, never asked (the engine before this option).
            * ``"rebid"``: the Dally reference simulator's rule: it loses its lease and bids
              again like a waiting job whose starvation clock was reset at the boundary, with
              its own GPUs free for it. Accepting its current tier gives it back the same GPUs
              at no cost; another tier moves it (restart overhead); waiting leaves it waiting
              (a preemption), so delay timers apply again.
    """

    lease_s: float = 3600.0
    restart_overhead_s: float = 0.0
    seed: int = 0
    max_idle_rounds: int = 1000
    renewal: str = "upgrade"

    def __post_init__(self) -> None:
        if not (_is_real(self.lease_s) and MIN_LEASE_S <= self.lease_s <= MAX_LEASE_S):
            raise ValueError(
                f"lease_s must be a number of seconds from {MIN_LEASE_S:g} to {MAX_LEASE_S:g}, got "
                f"{self.lease_s!r} (each round is a scheduling pass: a shorter lease makes a run "
                f"take about makespan / lease passes)"
            )
        if not (_is_real(self.restart_overhead_s) and 0 <= self.restart_overhead_s <= MAX_RESTART_OVERHEAD_S):
            raise ValueError(
                f"restart_overhead_s must be a number of seconds from 0 to {MAX_RESTART_OVERHEAD_S:g}, "
                f"got {self.restart_overhead_s!r}"
            )
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, (int, np.integer))
            or not 0 <= self.seed <= MAX_SEED
        ):
            raise ValueError(f"seed must be an integer from 0 to 2**63 - 1, got {self.seed!r}")
        if (
            isinstance(self.max_idle_rounds, bool)
            or not isinstance(self.max_idle_rounds, int)
            or not 1 <= self.max_idle_rounds <= MAX_IDLE_ROUNDS
        ):
            raise ValueError(
                f"max_idle_rounds must be a whole number from 1 to {MAX_IDLE_ROUNDS:,}, got {self.max_idle_rounds!r}"
            )
        if self.renewal not in RENEWAL_MODES:
            raise ValueError(f"unknown renewal mode {self.renewal!r}; choose one of {', '.join(RENEWAL_MODES)}")


#: Shortest lease, seconds. A run passes every round boundary at which a job waits, so the
#: number of passes grows as makespan / lease: at 1 s a day-long trace takes at most 86,400
#: boundary passes, while a lease of 1e-9 s would never finish. Scheduling rounds in practice
#: are minutes to hours long.
MIN_LEASE_S = 1.0
#: Longest lease, seconds: the longest time a trace may hold (``trace.schema.MAX_TIME_S``);
#: a longer lease means the same as "no round boundary in the run".
MAX_LEASE_S = 1e9
#: Largest restart overhead, seconds (one day). Checkpoint restores take seconds to minutes;
#: every restart makes its job hold GPUs this much longer, with one pass per round meanwhile
#: for the jobs waiting behind it.
MAX_RESTART_OVERHEAD_S = 86_400.0
#: Largest seed: it is written to int64 columns (sweep results), and numpy takes any of them.
MAX_SEED = 2**63 - 1
#: Largest ``max_idle_rounds``: a guard against a policy that never accepts, which a larger
#: bound would only delay (the compiled loop also holds it as an int64).
MAX_IDLE_ROUNDS = 1_000_000


def _is_real(value: object) -> bool:
    """A finite int or float (numpy's float64 is one), not a bool. Other numpy scalars are
    refused as before: the compiled loop takes these fields as they are."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


class Engine:
    """Discrete-event simulation of one trace on one cluster under one policy.

    Args:
        trace: a canonical trace DataFrame (see :func:`dallygym.trace.load_trace`), or its
            :class:`TraceArrays` (made once for a trace run many times); it is bound to the
            cluster here, so a job larger than the cluster is an error.
        cluster: the cluster size.
        policy: the scheduling policy (priority order, decisions, hooks).
        latency: the latency model giving each placement's speed factor.
        config: lease, restart overhead, seed.
        agent_picks: if True, every pass in which the order matters yields a :class:`Pick`
            (an agent chooses which job is served next); if False (native runs) the pass
            follows the policy's priority order and no pick is made.
        lease_picks: with ``agent_picks``, what a round boundary's picks offer:
            ``"all"`` puts every lease-expired job among the candidates (picking one renews
            it before anyone else can claim its GPUs); ``"waiting"`` offers only the waiting
            jobs, and serving one first serves every lease-expired job the policy ranks
            ahead of it, in order (so a waiting job may claim only the GPUs of lease-expired
            jobs ranked after it, as in a native pass). See :data:`LEASE_PICKS`.

    Per-job arrays (index = row of the trace sorted by arrival then id), all read-only for
    policies: ``job_id``, ``arrival_s``, ``num_gpus``, ``model`` (names), ``model_index``,
    ``total_iterations``, ``iter_time_s``, ``state`` (PENDING/WAITING/RUNNING/DONE),
    ``done_iters``, ``speed`` (current speed factor, 0 when not running), ``run_s`` (time
    holding GPUs), ``overhead_s``, ``tier_s`` (n x 3: time held at each tier, counted when a
    placement ends), ``tier`` (current tier or -1), ``starve_anchor_s``, ``first_start_s``,
    ``end_s``, ``preemptions``, ``migrations`` (moves by the policy's migrate hook),
    ``upgrades`` (moves to a better tier accepted at lease renewal), ``speed_seen`` (n x 3: speed factor of its last
    placement at each tier), ``gpus`` (list: current GPU ids or None).
    """

    #: The frame each job's turn in a pass is taken by (:class:`dallygym.turns.Visit`); a
    #: subclass may name its own (e.g. one that asks a new kind of decision).
    Visit: ClassVar[type[turns.Visit]] = turns.Visit

    def __init__(
        self,
        trace: pd.DataFrame | TraceArrays,
        cluster: ClusterSpec,
        policy: Policy,
        latency: LatencyModel,
        config: EngineConfig | None = None,
        agent_picks: bool = False,
        lease_picks: str = "all",
    ) -> None:
        self.spec = cluster
        self.agent_picks = bool(agent_picks)
        if lease_picks not in LEASE_PICKS:
            raise ValueError(f"unknown lease_picks {lease_picks!r}; choose one of {', '.join(LEASE_PICKS)}")
        #: Whether a boundary's picks include the lease-expired jobs (``lease_picks="all"``).
        self.pick_leases = lease_picks == "all"
        self.policy = policy
        # A policy that keeps the default priority (arrival time) orders a pass's jobs as their
        # indices already are (indices follow arrival, then id): no sort needed.
        self._arrival_order = getattr(type(policy), "priority", None) is Policy.priority and "priority" not in getattr(
            policy, "__dict__", {}
        )
        self.latency = latency
        self.config = config or EngineConfig()
        self.rng = np.random.default_rng(self.config.seed)

        self._take_trace(trace, cluster)
        self._init_jobs(cluster, latency)
        self._init_run_state(policy)
        self._init_policy_traits(policy)
        self._init_compiled_state()

    def _take_trace(self, trace: pd.DataFrame | TraceArrays, cluster: ClusterSpec) -> None:
        """The trace's columns (read-only, shared), checked against the cluster, and their
        Python twins."""
        # The trace's columns, shared read-only with every engine given the same TraceArrays.
        arrays = trace if isinstance(trace, TraceArrays) else TraceArrays(trace)
        self.n = arrays.n
        self.job_id = arrays.job_id
        self.arrival_s = arrays.arrival_s
        self.num_gpus = arrays.num_gpus
        self.model = arrays.model
        self.model_index = arrays.model_index
        self.model_names = arrays.model_names
        self.total_iterations = arrays.total_iterations
        self.iter_time_s = arrays.iter_time_s
        self.ideal_s = arrays.ideal_s
        too_big = np.flatnonzero(self.num_gpus > cluster.num_gpus)
        if too_big.size:
            j = int(too_big[0])
            raise ClusterError(
                f"job {self.job_id[j]} needs {self.num_gpus[j]} GPUs but the cluster has "
                f"{cluster.num_gpus} ({cluster.racks} racks x {cluster.machines_per_rack} machines "
                f"x {cluster.gpus_per_machine} GPUs)"
            )
        self.best_possible_tier = np.where(
            self.num_gpus <= cluster.gpus_per_machine,
            int(Tier.MACHINE),
            np.where(self.num_gpus <= cluster.gpus_per_rack, int(Tier.RACK), int(Tier.NETWORK)),
        ).astype(np.int64)

        # Python copies of static per-job data for the per-offer loop (numpy scalar access and
        # enum construction would dominate it).
        self._num_gpus_list = arrays.num_gpus_list
        self._job_id_list = arrays.job_id_list
        self._best_level_list: list[int] = self.best_possible_tier.tolist()
        self._best_tier_list: list[Tier] = list(map(_TIERS.__getitem__, self._best_level_list))
        self._model_index_list = arrays.model_index_list
        self._iter_time_list = arrays.iter_time_list
        self._total_iterations_list = arrays.total_iterations_list

    def _init_jobs(self, cluster: ClusterSpec, latency: LatencyModel) -> None:
        """Every job's state before the run (pending, never placed), the cluster empty."""
        n = self.n
        self.cluster = ClusterState(cluster)
        self._dims = (cluster.racks, cluster.machines_per_rack, cluster.gpus_per_machine)
        self.state = np.full(n, PENDING, dtype=np.int8)
        self.done_iters = np.zeros(n)
        self.speed = np.zeros(n)
        self.rate = np.zeros(n)  # iterations per second in the current run segment
        self.seg_start_s = np.zeros(n)  # when progress (re)starts, after any restart overhead
        self.seg_done0 = np.zeros(n)  # iterations done when the current segment started
        self.hold_start_s = np.zeros(n)  # when the job got its current GPUs
        self.finish_s = np.full(n, np.inf)
        self.run_s = np.zeros(n)
        self.overhead_s = np.zeros(n)
        self.tier_s = np.zeros((n, 3))
        self.tier = np.full(n, -1, dtype=np.int64)
        self.starve_anchor_s = self.arrival_s.copy()
        self.first_start_s = np.full(n, np.nan)
        self.end_s = np.full(n, np.nan)
        self._scratch_f = np.zeros(n)  # (kernels.advance gathers the running jobs' speeds here)
        #: Each job's Nw_sens while it has never run (the paper's formula is 0/0 then): 0 unless
        #: the policy has a ``never_run_nw_sens_of(engine)`` giving one per job, asked at the
        #: start of the run (DallyPolicy's ``never_run_nw_sens`` option).
        self._never_nw_sens = np.zeros(n)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.migrations = np.zeros(n, dtype=np.int64)
        self.upgrades = np.zeros(n, dtype=np.int64)
        #: Speed factor of the last placement each job had at each tier (0 if never there).
        self.speed_seen = np.zeros((n, 3))
        self._last_tier = np.full(n, -1, dtype=np.int64)  # tier and shape of gpus / last_gpus
        # Shape of each job's last placement: its entry in the shape table, -1 for one machine,
        # or kernels.SHAPE_LISTED for a start made in Python, whose shape is in ``last_shape``.
        self._shape_entry = np.full(n, -1, dtype=np.int64)
        self.last_shape: list = [None] * n
        # Each job's GPUs in one flat array, ``num_gpus[j]`` slots from ``_gpu_off[j]``: its
        # current ones while it runs, its last ones otherwise (``gpus`` / ``last_gpus`` as the
        # compiled pass reads them).
        self._gpu_off = np.zeros(n, dtype=np.int64)
        np.cumsum(self.num_gpus[:-1], out=self._gpu_off[1:])
        self._gpu_store = np.zeros(int(self.num_gpus.sum()), dtype=np.int64)
        self._gpu_off_list: list[int] = self._gpu_off.tolist()
        #: The speed factors known (:class:`SpeedTables`, shared by the runs of ``latency``),
        #: and each job's model's id in them (what the kernels read).
        self._tables = speed_tables(latency)
        self._model_id = np.asarray(self._tables.model_ids(self.model_names, cluster.gpus_per_machine), dtype=np.int64)[
            self.model_index
        ]
        self._model_id_list: list[int] = self._model_id.tolist()
        self.placements_by_tier = np.zeros(3, dtype=np.int64)

    def _init_run_state(self, policy: Policy) -> None:
        """The run's clock, counters, sets and records before its first event."""
        n = self.n
        # A picked pass (turns.Picked): each job's position in the pass's queue, and the last
        # Pick with its candidates as an array (the environment's observation reads it).
        self._queue_position = np.zeros(n, dtype=np.int64)
        self._pick_jobs: tuple[Pick, np.ndarray] | None = None
        #: Why the placement being made now is made: "new" (a waiting job accepted an offer),
        #: "upgrade" (a renewal offer moved a running job), "rebid" (a running job that bid
        #: again moved) or "migration" (the policy's migrate hook). Policies may read it in
        #: :meth:`Policy.on_start`.
        self.placement_kind = "new"
        self._renewal = self.config.renewal
        #: Whether a boundary makes upgrade renewal offers (the mode, and a policy that may
        #: accept them).
        self._upgrades_offered = self._renewal == "upgrade" and policy.accepts_upgrades
        #: job -> the free GPUs per machine (its own included) of the upgrade offer it declined;
        #: the offer is not repeated while they are the same (see EngineConfig.renewal).
        self._declined: dict[int, bytes] = {}
        # expired_unvisited's set, and, while it is still to be made from a pass the compiled
        # loop stopped in, (visit plan, positions of the leases): see expired_unvisited.
        self._expired: set[int] = set()
        self._expired_from: tuple[np.ndarray, np.ndarray] | None = None

        #: Counters kept in step with ``state`` (cheaper than scanning it at every event).
        self.n_waiting = 0
        self.n_running = 0
        self.waiting_gpus = 0  # GPU demand of the waiting jobs
        # Index sets kept in step with ``state`` too, so that no event scans all n jobs.
        self._waiting = JobSet(self.state, WAITING, self.cluster.compiled)
        self._running = JobSet(self.state, RUNNING, self.cluster.compiled)
        #: (finish time, job) of every placement made; an entry whose time is no longer the
        #: job's ``finish_s`` is stale (the placement ended early) and is dropped when met.
        self._finish_heap: list[tuple[float, int]] = []
        #: During a boundary pass: each visited job's rank in it (the marks of its GPUs if its
        #: lease expired); -1 between passes. ``_ranked``: the jobs ranked.
        self._rank = np.full(n, -1, dtype=np.int64)
        self._ranked: np.ndarray | None = None
        #: A key (kernels.vector_key) of the free GPUs per machine with which each job last
        #: declined an upgrade offer, 0 if none: the compiled loop's view of ``_declined``.
        self._declined_key = np.zeros(n, dtype=np.int64)
        self.now_s = float(self.arrival_s[0])
        self.first_arrival_s = float(self.arrival_s[0])
        self.finished = 0
        self.rounds = 0
        self.passes = 0  # scheduling passes run (one per event time the engine stops at)
        self._last_sync_s = self.now_s
        self._next_arrival = 0  # position in arrival order (the arrays are arrival-sorted)
        #: The timeline: ``(time_s, gpus_used, running, waiting, remaining)`` after each event,
        #: at most :attr:`timeline_rows` rows (:attr:`timeline`): when full, every other row
        #: is dropped and later rows are recorded at least the new mean spacing apart, so a
        #: long run's memory stays bounded. (The summary does not read it: see ``busy_gpu_s``.)
        #: Rows in ``_timeline`` (made when the run starts), their count and the least spacing
        #: of new rows (0 until the first thinning) in ``_rec_i`` / ``_rec_f``
        #: (kernels.RI_* / RF_*), as :func:`dallygym.kernels.record` keeps them.
        self._timeline = np.zeros((0, 5))
        self._rec_i = np.zeros(4, dtype=np.int64)
        self._rec_f = np.array([0.0, -math.inf, 0.0])
        #: Exact partial sums (Shewchuk) of GPUs used x time from the first event to the last
        #: one, ``_partials[:_rec_i[RI_PARTIALS]]``: :meth:`busy_gpu_s` adds the span to the
        #: end of the run and rounds once. (At most about 40 partials: a double's exponent range.)
        self._partials = np.zeros(128)
        #: Integral over time of the number of jobs in the system (arrived, not finished), in
        #: job-seconds: at the end it equals the sum of all JCTs.
        self.in_system_area_s = 0.0
        #: Integral over time of sum over running jobs of (1 - speed factor), in seconds: the
        #: exposed communication accrued so far (restart-overhead periods count as running).
        self.comm_area_s = 0.0
        self._started = False
        self._auto = kernels.AUTO_NONE
        # The run as plain data (see dallygym.turns): its frames, the value the top frame
        # returned, the decision it waits on, what drives it (next_decision or decisions) with
        # which auto_accept, and the error that ended it, if one did.
        self._frames: list[turns.Frame] = []
        self._ret = None
        self._open: Offer | Pick | None = None
        self._driver: str | None = None
        self._auto_arg: str | None = None
        self._failed: str | None = None

    def _init_policy_traits(self, policy: Policy) -> None:
        """What the engine may do itself for this policy (compiled starts, priority keys, hooks)."""
        # The compiled pass may start jobs only if the policy need not be asked at each start.
        self._batch_starts = starts_in_batches(policy)
        # A priority order the compiled pass computes itself (kernels.KEYS_*), or -1: the policy's keys.
        keys = priority_keys_of(policy)
        self._keys = -1 if keys is None else ("arrival", "nw_sens").index(keys)
        self._on_start_hook = hooks_on_start(policy)
        self._on_start_batch = start_batch_hook(policy)
        # Whether the policy may migrate (then a boundary pass keeps its candidates for it).
        self._migrates = any(
            getattr(type(policy), name) is not getattr(Policy, name) or name in getattr(policy, "__dict__", {})
            for name in ("migrate", "may_migrate")
        )

    def _init_compiled_state(self) -> None:
        """The compiled loop's registers and buffers, and the job tables its kernels read."""
        n = self.n
        #: The compiled loop's state (kernels.run_events): scalars (kernels.LI_*, LF_*), and
        #: the waiting and running jobs (rows 0 and 1, increasing; lent to the job sets, see
        #: JobSet.lend), and for Nw_sens priority the waiting jobs in
        #: priority order (row 2) with their keys (``_wkey``).
        self._li = np.zeros(kernels.LI_SIZE, dtype=np.int64)
        self._li[kernels.LI_ANSWER] = -1  # (no answered offer for the kernel to start)
        self._lf = np.zeros(kernels.LF_SIZE)
        self._sets = np.zeros((3, n), dtype=np.int64)
        self._wkey = np.zeros(n)  # (a waiting job's priority key: kernels.run_events)
        #: The compiled pass's plan: jobs ranked, queue, least demand ahead, expired positions.
        self._plan = np.zeros((4, n), dtype=np.int64)
        self._expired_buf = np.zeros(n, dtype=np.int64)
        # The per-job arrays the kernels read and write are rows of two tables (one argument
        # each): ``done_iters`` is ``_jobf[kernels.F_DONE]``, and so on (views made by _bind).
        self._jobf = np.stack([getattr(self, name) for name in kernels.JOB_FLOATS])
        self._jobi = np.stack([getattr(self, name) for name in kernels.JOB_INTS])
        self._bind()

    # --- the views and caches, made from the plain state; copies ---------------------------

    #: What :meth:`_bind` makes, never copied: views of the engine's own arrays (``_jobf`` /
    #: ``_jobi`` rows, ``gpus`` / ``last_gpus``), and caches and scratch made anew as here,
    #: whose content nothing reads across a decision (the compiled pass's logs are read before
    #: every question is asked). And ``_tier_limits``, valid only with ``_tiers_version``;
    #: ``_loop_args``, made again if the compiled loop is running.
    _BOUND = (
        *kernels.JOB_FLOATS,
        *kernels.JOB_INTS,
        "gpus",
        "last_gpus",
        "_tiers_cache",
        "_tiers_version",
        "_tier_limits",
        "_upgrade_version",
        "_upgrade_value",
        "_turn_log",
        "_log_f",
        "_starts",
        "_starts_f",
        "_renewed_log",
        "_lease_flags",
        "_loop_args",
    )
    #: What a deep copy shares with the original instead of copying: read-only data (the
    #: trace's columns and their Python twins, the cluster, the config) and the latency model
    #: with its speed tables (shared by every run of the model anyway).
    _SHARED = (
        "spec",
        "config",
        "latency",
        "_tables",
        "job_id",
        "arrival_s",
        "model",
        "model_index",
        "model_names",
        "ideal_s",
        "_dims",
        "_num_gpus_list",
        "_job_id_list",
        "_best_level_list",
        "_best_tier_list",
        "_model_index_list",
        "_iter_time_list",
        "_total_iterations_list",
        "_gpu_off_list",
        "_model_id_list",
    )

    def _bind(self) -> None:
        """Make every view and cache from the plain state: the named per-job arrays as rows of
        ``_jobf`` / ``_jobi``, ``gpus`` / ``last_gpus`` over the GPU store, and the caches and
        scratch arrays, empty (see ``_BOUND``). Called by ``__init__`` and ``__setstate__``."""
        n = self.n
        for k, name in enumerate(kernels.JOB_FLOATS):
            setattr(self, name, self._jobf[k])
        for k, name in enumerate(kernels.JOB_INTS):
            setattr(self, name, self._jobi[k])
        #: The GPUs each job holds now (None if none), and those it held last (None before its
        #: first placement), as arrays: views of the GPU store (:class:`JobGpus`).
        self.gpus = JobGpus(self._gpu_store, self._gpu_off_list, self._num_gpus_list, self.tier)
        self.last_gpus = JobGpus(self._gpu_store, self._gpu_off_list, self._num_gpus_list, self._last_tier)
        self._tiers_cache: dict[int, tuple[Tier, ...]] = {}  # _offer_tiers, per cluster version
        self._tiers_version = -1
        self._upgrade_version = -1
        self._upgrade_value = False
        self._lease_flags = np.zeros(n, dtype=bool)  # turns.Picked's scratch: a flag per job, all False
        #: The compiled pass's log: (code, job, shape entry, tier) per change it made
        #: (kernels.LOG_*; the tier is kernels.run_events's, as the job may have another by
        #: the time Python reads the log), and per row the time and a start's starvation
        #: then. Room for an event's changes: 3 per job at most.
        self._turn_log = np.zeros((3 * n + 16, 4), dtype=np.int64)
        self._log_f = np.zeros((3 * n + 16, 2))
        #: The starts of the same log alone (kernels.run_events): job and tier; starvation and time.
        self._starts = np.zeros((2, 3 * n + 16), dtype=np.int64)
        self._starts_f = np.zeros((2, 3 * n + 16))
        self._renewed_log = np.zeros(n, dtype=np.int64)  # and the jobs it renewed in place

    def __getstate__(self) -> dict:
        """The engine as plain data, at any point of its run: no views (a copy of a view would
        be an array of its own, no longer its table's row) and no caches (:meth:`_bind` makes
        them again), the timeline cut to its rows, the job sets as plain arrays
        (:meth:`JobSet.__getstate__`) with a note of those the compiled loop's rows hold, and
        the run's frames (:mod:`dallygym.turns`), which are plain data too."""
        state = self.__dict__.copy()
        for name in self._BOUND:
            state.pop(name, None)
        state["_timeline"] = self._timeline[: self._rec_i[kernels.RI_ROWS]].copy()
        if getattr(self, "_loop_args", None) is not None:  # the compiled loop's: made again
            state["_loop_args"] = True
        state["_lent"] = tuple(s._n if s.lent() else -1 for s in (self._waiting, self._running))
        if self._driver == "decisions":  # a copy is driven by next_decision (it has no generator)
            state["_driver"] = "next_decision"
        return state

    def __setstate__(self, state: dict) -> None:
        lent = state.pop("_lent", (-1, -1))
        self.__dict__.update(state)
        if self._started and self.finished < self.n:  # a run to continue: the timeline's room back
            rows = self._timeline
            self._timeline = np.zeros((self.timeline_rows + 1, 5))
            self._timeline[: len(rows)] = rows
        for row, (job_set, n) in enumerate(zip((self._waiting, self._running), lent)):
            if n >= 0:  # the compiled loop's row still holds the set: the copy's row does too
                job_set.lend(self._sets[row], n)
        self._bind()
        if state.get("_loop_args") is True:
            self._loop_args = self._make_loop_args()
        # The latency model and the speed tables the job's model ids and shape entries number
        # into travel together. Unpickled in another process the model is a new object: the
        # tables become its shared ones. A model that already has shared tables (the same
        # object, or one whose pickle names an existing object) keeps them, and this engine its
        # own tables: renumbering its entries into those would gain nothing (the factors are the
        # same function of the model), while the pair it has is consistent.
        try:
            if _SPEED_TABLES.get(self.latency) is None:
                _SPEED_TABLES[self.latency] = self._tables
        except TypeError:  # (a model that cannot be weakly referenced: each run its own tables)
            pass

    def __deepcopy__(self, memo: dict) -> Engine:
        """A copy sharing the read-only data (``_SHARED``) and copying the rest."""
        state = self.__getstate__()
        for name in self._SHARED:
            value = state.get(name)
            if value is not None:
                memo[id(value)] = value
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(state, memo))
        return new

    # --- views for policies and the environment ------------------------------------------

    @property
    def expired_unvisited(self) -> set[int]:
        """During a round-boundary pass: running jobs whose lease expired and that the pass has
        not visited yet. Their GPUs count as free (a higher-priority job may claim them).

        (After the compiled loop stops in a pass to ask a question, the set is made when first
        read: the engine's own turns up to the next lease-expired job need only its position.)"""
        lazy = self._expired_from
        if lazy is not None:
            self._expired_from = None
            queue, positions = lazy
            self._expired.update(queue[positions].tolist())
        return self._expired

    def waiting_jobs(self) -> np.ndarray:
        """Indices of the waiting jobs, increasing (do not modify the array)."""
        return self._waiting.array()

    def running_jobs(self) -> np.ndarray:
        """Indices of the running jobs, increasing (do not modify the array)."""
        return self._running.array()

    def below_best_jobs(self) -> np.ndarray:
        """Indices of the running jobs whose tier is worse than their best possible one,
        increasing."""
        run = self.running_jobs()
        return run[self.tier[run] > self.best_possible_tier[run]]

    @property
    def n_below_best(self) -> int:
        """Running jobs whose tier is worse than their best possible one."""
        return self.below_best_jobs().size

    def _set_state(self, j: int, new: int) -> None:
        """The one place job states change, keeping the counters right."""
        old = self.state.item(j)
        if old == new:
            return
        self._note_state(j, old, new)
        self.state[j] = new

    def _note_state(self, j: int, old: int, new: int) -> None:
        """Counters and job sets for job ``j`` moving from state ``old`` to ``new`` (the state
        array itself is the caller's: :meth:`_set_state`, or a compiled pass that set it)."""
        g = self._num_gpus_list[j]
        if old == WAITING:
            self.n_waiting -= 1
            self.waiting_gpus -= g
            self._waiting.remove(j)
        elif old == RUNNING:
            self.n_running -= 1
            self._running.remove(j)
        if new == WAITING:
            self.n_waiting += 1
            self.waiting_gpus += g
            self._waiting.add(j)
        elif new == RUNNING:
            self.n_running += 1
            self._running.add(j)

    def starvation_s(self, jobs: np.ndarray | int) -> np.ndarray | float:
        return self.now_s - self.starve_anchor_s[jobs]

    def nw_sens(self, jobs: np.ndarray) -> np.ndarray:
        """Dally's priority (paper §IV-B1): W_compl / T_norm = ideal time of completed
        iterations / time run. For a job that has never run, ``_never_nw_sens`` (0 by default)."""
        if self.cluster.compiled:
            return kernels.nw_sens(jobs, self.done_iters, self.iter_time_s, self.run_s, self._never_nw_sens)
        run = self.run_s[jobs]
        return np.divide(
            self.done_iters[jobs] * self.iter_time_s[jobs], run, out=self._never_nw_sens[jobs], where=run > 0
        )

    # --- the run -------------------------------------------------------------------------

    def decisions(self, auto_accept: str | None = None) -> Generator[Offer | Pick, Tier | int | None, None]:
        """Run the simulation, yielding each decision and receiving the answer.

        To an :class:`Offer` send back a :class:`Tier` from ``offer.tiers`` to accept, or
        ``None`` to wait; to a :class:`Pick` (only with ``agent_picks``) a job index from
        ``pick.candidates``, or ``None`` to stop the pass. The
        generator returns when every job has finished; read the results with
        :func:`dallygym.metrics.collect` (or use :func:`run_policy`).

        ``auto_accept`` names offers to waiting jobs the caller would answer with their best
        tier anyway, so that the engine accepts them itself and never yields them (the run is
        the same): ``"best-possible"`` -- an offer whose best tier is the best the job could
        ever have (``not offer.is_choice``); ``"best"`` -- every such offer; None (default) --
        none. Renewal offers are always yielded. See :data:`AUTO_ACCEPT`.

        A generator over :meth:`next_decision` and :meth:`answer` (the run itself is plain data,
        :mod:`dallygym.turns`: a copy of the engine taken at any decision goes on by those two).
        """
        decision = self._start_run(auto_accept, "decisions")
        while decision is not None:
            decision = self.answer(decision, (yield decision))

    def _start_run(self, auto_accept: str | None, driver: str) -> Offer | Pick | None:
        """Start the run (once) and run it to its first decision, which is returned."""
        if self._started:
            raise EngineError("an Engine runs once; build a new one for another run")
        if auto_accept not in AUTO_ACCEPT:
            raise ValueError(f"unknown auto_accept {auto_accept!r}; choose one of {AUTO_ACCEPT}")
        self._auto = AUTO_ACCEPT.index(auto_accept)  # kernels.AUTO_NONE, AUTO_BEST_POSSIBLE, AUTO_BEST
        self._auto_arg = auto_accept
        self._driver = driver
        self._started = True
        self.policy.reset(self, self.rng)
        never_run = getattr(self.policy, "never_run_nw_sens_of", None)
        if never_run is not None:
            self._never_nw_sens[:] = never_run(self)
        self._round_no = 1
        self._next_round = self.first_arrival_s + self.config.lease_s
        self._idle_rounds = 0
        self._timeline = np.zeros((self.timeline_rows + 1, 5))  # (one spare row: see _record)
        compiled = self._compiled_loop()
        if compiled:
            # The loop runs compiled (kernels.run_events) until an event or a turn needs Python.
            self._finish_heap = None  # the next finish is found among the running jobs instead
            self._loop_args = self._make_loop_args()
        self._frames = [turns.Run(compiled)]
        self._open = turns.drive(self, None)
        return self._open

    def _make_loop_args(self) -> tuple:
        """The compiled loop's arguments (:meth:`_run_events`), but for the speed tables'
        arrays: the same objects from the run's start to its end."""
        c = self.cluster
        return (
            (
                self.arrival_s,
                self.first_arrival_s,
                self.config.lease_s,
                self.config.max_idle_rounds,
                self.spec.num_gpus,
                RENEWAL_MODES.index(self._renewal),
                self._upgrades_offered,
                self._auto if self._batch_starts else kernels.AUTO_NONE,
                self._keys,
                self.config.restart_overhead_s,
                self._jobf,
                self._jobi,
                self.state,
                self.speed_seen,
                self.tier_s,
                self.placements_by_tier,
            ),
            (
                self._gpu_store,
                c.buffer,
                *self._dims,
                self._sets,
                self._wkey,
                self._li,
                self._lf,
                self._plan,
                self._expired_buf,
                self._renewed_log,
                self._turn_log,
                self._log_f,
                self._starts,
                self._starts_f,
                self._rec_i,
                self._rec_f,
                self._partials,
                self._timeline,
            ),
        )

    def next_decision(self, auto_accept: str | None | object = _FIRST_CALL) -> Offer | Pick | None:
        """The decision the run waits on (an :class:`Offer`, or a :class:`Pick` with
        ``agent_picks``), or None once every job has finished. The first call starts the run,
        with ``auto_accept`` as for :meth:`decisions` (default None) and runs it to its first
        decision; until that decision is answered (:meth:`answer`), every call returns it again.
        A later call may repeat the first one's ``auto_accept`` or leave it out, not change it."""
        if self._driver is None:
            return self._start_run(None if auto_accept is _FIRST_CALL else auto_accept, "next_decision")
        if self._driver != "next_decision":
            raise EngineError("this engine's run was driven by decisions(); build a new Engine to use next_decision")
        if auto_accept is not _FIRST_CALL and auto_accept != self._auto_arg:
            raise ValueError(f"auto_accept is fixed when the run starts ({self._auto_arg!r} here), got {auto_accept!r}")
        self._check_not_failed()
        return self._open

    def answer(self, decision: Offer | Pick, response: Tier | int | None) -> Offer | Pick | None:
        """Answer ``decision``, the one :meth:`next_decision` returned (to an offer a tier from
        ``offer.tiers`` or None to wait; to a pick a job from ``pick.candidates`` or None to
        stop the pass), run to the next decision and return it (None once every job has finished)."""
        if self._failed is not None:
            self._check_not_failed()
        if decision is None or decision is not self._open:
            what = "no decision is open" if self._open is None else f"the open decision is {self._open!r}"
            raise EngineError(f"answer() takes the decision next_decision() returned; {what}, got {decision!r}")
        self._open = None
        self._open = turns.drive(self, response)
        return self._open

    def _check_not_failed(self) -> None:
        if self._failed is not None:
            raise EngineError(f"this engine's run stopped at an error ({self._failed}); build a new Engine")

    def _compiled_loop(self) -> bool:
        """Whether :meth:`decisions` runs compiled: the kernels are on, the policy's priority
        order is one the engine computes, it does not migrate, and no agent picks."""
        return (
            self.cluster.compiled
            and self.renew_together
            and self._keys >= 0
            and not self.agent_picks
            and not self._migrates
        )

    def _next_event(self) -> tuple[float, bool]:
        """The next event (:class:`dallygym.turns.Event`): time moves to it (arrival, finish or
        round boundary, whichever comes first), jobs finish and arrive. Returns its time and
        whether it is a round boundary; its pass and timeline record come next."""
        n = self.n
        lease = self.config.lease_s
        first = self.first_arrival_s
        arrival = self.arrival_s
        t_arr = arrival[self._next_arrival] if self._next_arrival < n else math.inf
        t_fin = self._next_finish_s()
        if self._next_round < min(t_arr, t_fin) and self.n_waiting == 0 and not self._boundary_may_act():
            # With no job waiting, no renewal offer to make and no possible migration, a
            # round boundary changes nothing: every lease is renewed on the same GPUs.
            # Nothing changes either until the next event, so jump to the last boundary
            # not after it.
            t_next = min(t_arr, t_fin)
            k = max(self._round_no, math.floor((t_next - first) / lease))
            while first + k * lease > t_next:
                k -= 1
            while first + (k + 1) * lease <= t_next:
                k += 1
            if k > self._round_no:
                self.rounds += k - self._round_no
                self._round_no = k
                self._next_round = first + k * lease
        t = min(t_arr, t_fin, self._next_round)
        self._advance(t)
        if t_fin <= t:
            self._complete(self._finishing_by(t), t)
        while self._next_arrival < n and arrival[self._next_arrival] <= t:
            self._set_state(self._next_arrival, WAITING)
            self._next_arrival += 1
        boundary = t >= self._next_round
        if boundary:
            self.rounds += 1
            self._round_no += 1
            self._next_round = first + self._round_no * lease
            if self.cluster.free_total == self.spec.num_gpus and self._next_arrival >= n:
                self._idle_rounds += 1
                if self._idle_rounds > self.config.max_idle_rounds and self.finished < n:
                    raise self._idle_error()
            else:
                self._idle_rounds = 0
        return t, boundary

    def _open_any_pass(self, t: float, boundary: bool):
        """Count the event's pass and open it: its plan ``(cand, queue, least_ahead,
        expired_pos)`` (:meth:`_open_pass`), or None if it has no turn to take."""
        self.passes += 1
        if not boundary and self.n_waiting == 0:
            return None
        if self._keys >= 0 and self.cluster.compiled:
            return self._open_pass(t, boundary)
        return self._python_open_pass(t, boundary)

    def _li_pass(self) -> tuple[int, ...]:
        """The pass the compiled loop stopped in: kernels.LI_BOUNDARY up to LI_ANSWER."""
        return _LI_PASS.unpack_from(self._li, 8 * kernels.LI_BOUNDARY)

    def _idle_error(self) -> EngineError:
        return EngineError(
            f"policy {self.policy.name!r} left {self.n - self.finished} job(s) waiting on an "
            f"idle cluster for {self.config.max_idle_rounds} rounds"
        )

    def _run_events(self, resume: int) -> int:
        """Run kernels.run_events (from the pass stopped at ``resume`` if >= 0) and complete
        what it did in Python: the engine's scalars and job sets, then its log. Returns why it
        stopped (kernels.STOP_*)."""
        c = self.cluster
        li, lf = self._li, self._lf
        # The scalars in kernels.LI_* and LF_* order (the first LI_N_LOG and LF_SIZE; packed
        # into the arrays' bytes by struct, several times faster than numpy's assignment).
        _LI_PACK.pack_into(
            li,
            0,
            self._next_arrival,
            self.finished,
            self.rounds,
            self._round_no,
            self._idle_rounds,
            self.passes,
            self.n_waiting,
            self.n_running,
            self.waiting_gpus,
            c.free_total,
            c.version,
            c.marks_active,
            0,
        )  # (LI_N_LOG: no log yet)
        li[kernels.LI_N_STARTS] = 0
        _LF_PACK.pack_into(
            lf, 0, self._next_round, self.now_s, self._last_sync_s, self.in_system_area_s, self.comm_area_s
        )
        sets = self._sets
        # The job sets, unless the kernel's rows hold them still (see JobSet.lend).
        if not self._waiting.lent():
            waiting = self._waiting.array()
            sets[0, : waiting.size] = waiting
            li[kernels.LI_KEYED] = 0  # the kernel orders the waiting jobs again
        if not self._running.lent():
            running = self._running.array()
            sets[1, : running.size] = running
        tables = self._tables  # (its arrays grow: read at each call)
        head, tail = self._loop_args
        stop = kernels.run_events(
            resume, *head, tables.machine, tables.rows, tables.seq, tables.speed, tables.slots, *tail
        )
        (
            self._next_arrival,
            self.finished,
            self.rounds,
            self._round_no,
            self._idle_rounds,
            self.passes,
            self.n_waiting,
            self.n_running,
            self.waiting_gpus,
            c.free_total,
            c.version,
            marks,
            n_log,
        ) = _LI_PACK.unpack_from(li)
        c.marks_active = bool(marks)
        (self._next_round, self.now_s, self._last_sync_s, self.in_system_area_s, self.comm_area_s) = (
            _LF_PACK.unpack_from(lf)
        )
        self._waiting.lend(sets[0], self.n_waiting)
        self._running.lend(sets[1], self.n_running)
        if n_log:
            self._apply_turn_log(n_log, None)
        return stop

    def _end_pass(self, boundary: bool) -> None:
        """A boundary pass's end: no lease-expired job left unvisited, no GPU marked, no rank."""
        if boundary:
            self._expired_from = None
            self._expired.clear()
            self.cluster.clear_marks()
            if self._ranked is not None:
                self._rank[self._ranked] = -1
                self._ranked = None

    def _next_finish_s(self) -> np.float64:
        """The earliest finish time of a running job (inf if none), dropping stale heap
        entries on the way (without the heap: the least over the running jobs)."""
        heap = self._finish_heap
        finish = self.finish_s
        if heap is None:
            run = self.running_jobs()
            return finish[run].min() if run.size else np.float64(math.inf)
        while heap:
            f, j = heap[0]
            if finish.item(j) == f:
                return finish[j]
            heapq.heappop(heap)
        return np.float64(math.inf)

    def _finishing_by(self, t: float) -> list[int]:
        """The running jobs whose finish time is ``t`` or earlier, in increasing index order
        (taken off the heap)."""
        heap = self._finish_heap
        finish = self.finish_s
        if heap is None:
            run = self.running_jobs()
            return run[finish[run] <= t].tolist()
        due = set()
        while heap and heap[0][0] <= t:
            f, j = heapq.heappop(heap)
            if finish.item(j) == f:
                due.add(j)
        return sorted(due)

    def _boundary_may_act(self) -> bool:
        """With no job waiting, could a round boundary change anything? Only through renewal
        offers (``upgrade``: a running job that a better tier is free for; ``rebid``: any
        running job) or the policy's migrations."""
        mode = self._renewal
        if mode == "upgrade":
            if self._upgrades_offered and self.upgrade_possible():
                return True
        elif mode == "rebid" and self.n_running:
            return True
        return self.policy.may_migrate(self)

    def _with_own(self, per_machine: np.ndarray, j: int) -> np.ndarray:
        """``per_machine`` GPUs plus running job ``j``'s own, per machine (a new array)."""
        return per_machine + np.bincount(self.spec.machine_of_gpu[self.gpus[j]], minlength=self.spec.num_machines)

    def _free_with_own(self, j: int) -> np.ndarray:
        """Free GPUs per machine if running job ``j``'s own GPUs were free too (outside a
        boundary pass: the free GPUs are the idle ones)."""
        return self._with_own(self.cluster.free_per_machine, j)

    def best_tier_with_own(self, j: int) -> Tier:
        """The most consolidated tier free now for running job ``j`` if its own GPUs were
        free too (they always make its current tier, so there is one)."""
        return _TIERS[self._best_tier_in(self._free_with_own(j), self._num_gpus_list[j])]

    def upgrade_possible(self) -> bool:
        """Is a better tier than its own free now for some running job below its best tier
        (counting its own GPUs as free)? Cached until GPUs change hands."""
        c = self.cluster
        if self.n_below_best == 0 or c.free_total == 0:
            return False
        if self._upgrade_version != c.version:
            self._upgrade_version = c.version
            below = self.below_best_jobs().tolist()
            self._upgrade_value = any(self._upgrade_free_for(j) for j in below)
        return self._upgrade_value

    def _upgrade_free_for(self, j: int) -> bool:
        """Outside a pass: would job ``j`` get a new upgrade offer at a boundary now? A better
        tier is free for it, and it has not declined one with these very free GPUs."""
        free = self._free_with_own(j)
        if not self._better_tier_in(free, self._num_gpus_list[j], self.tier.item(j)):
            return False
        return free.tobytes() != self._declined.get(j)

    def _open_pass(self, t: float, boundary: bool):
        """The start of a pass, compiled (:func:`dallygym.kernels.open_pass`): the pass's
        candidates and visit plan ``(cand, queue, least_ahead, expired_pos)``, or None if
        there is nothing to visit. ``cand`` is made only for a policy that may migrate (None
        otherwise: nobody reads it)."""
        c = self.cluster
        racks, mpr, gpm = self._dims
        waiting = self.waiting_jobs()
        running = self.running_jobs() if boundary else waiting
        plan = self._plan
        status, n_cand, start, n_ranked, n_queue, n_expired_pos, n_expired, count = kernels.open_pass(
            waiting,
            running,
            boundary,
            self._keys,
            self._renewal != "rebid",
            self._upgrades_offered and self.n_below_best > 0,
            self.agent_picks,
            self._jobf,
            self._jobi,
            self.state,
            self._gpu_store,
            c.buffer,
            racks,
            mpr,
            gpm,
            c.free_total,
            plan,
            self._expired_buf,
            False,
            self._wkey,
        )
        if status == 0:
            return None
        cand = None
        if boundary and self._migrates:  # the candidates in increasing order (_migrations sorts them)
            cand = plan[0, :n_cand] if self._keys == kernels.KEYS_ARRIVAL else np.sort(plan[0, :n_cand])
        if status == 1:
            self._migrations(cand, t)  # nobody waits or bids: every lease is renewed as it stands
            return None
        # (Views of the plan buffers: the next pass writes them again, after this one ends.)
        if n_expired:
            self._ranked = plan[0, start : start + n_ranked]
            if count:  # as ClusterState.mark_reclaimable
                c.free_total += count
                c.version += 1
                c.marks_active = True
            self.expired_unvisited.update(self._expired_buf[:n_expired].tolist())
        return cand, plan[1, :n_queue], plan[2, :n_queue], plan[3, :n_expired_pos]

    def _python_open_pass(self, t: float, boundary: bool):
        """:meth:`_open_pass` for any policy, step by step (priority keys from the policy)."""
        cluster = self.cluster
        if boundary:
            cand = np.concatenate((self.waiting_jobs(), self.running_jobs()))
            cand.sort(kind="stable")  # two sorted runs: merged in linear time (quicksort is n log n)
        else:
            cand = self.waiting_jobs()
            if cand.size == 0 or self.num_gpus[cand].min() > cluster.free_total:
                return None
        if cand.size == 0:
            return None
        order = self._priority_order(cand)
        if boundary:
            order = self._expire_leases(order)
            if order is None:  # nobody waits or bids: every lease is renewed as it stands
                self._migrations(cand, t)
                return None
        return (cand, *self._visit_plan(order, boundary))

    def _offer_to(self, j: int, t: float) -> Offer | Tier | None:
        """The question :meth:`_ask` puts to waiting job ``j``: its :class:`Offer`; or, without
        asking, the tier it takes (an offer the caller would accept at its best tier anyway),
        or None (it does not fit)."""
        g = self._num_gpus_list[j]
        if g > self.cluster.free_total:
            return None
        tiers = self._offer_tiers(g)
        if not tiers:
            return None
        auto = self._auto
        if auto and (auto == kernels.AUTO_BEST or tiers[0] is self._best_tier_list[j]):
            return tiers[0]
        return Offer(j, self._job_id_list[j], g, t, t - self.starve_anchor_s.item(j), tiers, self._best_tier_list[j])

    def _checked(self, answer: Tier | None, offer: Offer) -> Tier | None:
        """The tier of an answer to ``offer`` (None: it waits); an answer it does not offer is
        an error."""
        if answer is None:
            return None
        if answer not in offer.tiers:
            raise EngineError(
                f"{self.policy.name!r} answered {answer!r} to {offer!r}; accept one of the offered tiers or None"
            )
        return _TIERS[int(answer)]

    def _position_in(self, q: np.ndarray, position: np.ndarray, answer) -> int:
        """The position in ``q`` of job ``answer`` (``position``: by job, set for ``q``'s jobs),
        or -1 if it is not in ``q``."""
        if isinstance(answer, (int, np.integer)) and not isinstance(answer, bool) and 0 <= answer < self.n:
            at = position.item(answer)
            return at if at < q.size and q.item(at) == answer else -1
        try:  # (anything else equal to a job index, as list.index finds it)
            hits = np.flatnonzero(q == answer)
        except (TypeError, ValueError):
            return -1
        return int(hits[0]) if hits.size == 1 else -1

    def _may_stop(self) -> bool:
        """Would some job still hold GPUs if the pass stopped now? (Then a later event comes.)"""
        expired = self.expired_unvisited
        if self.n_running > len(expired):
            return True
        return any(self.cluster.all_free(self.gpus[j]) for j in expired)

    def _stop_pass(self, remaining: list[int]) -> None:
        """End a picked pass early: waiting jobs keep waiting; a lease-expired job keeps its
        GPUs if none was claimed (no renewal offer) and is preempted otherwise."""
        cluster = self.cluster
        expired = self.expired_unvisited
        for j in remaining:
            if j not in expired:
                continue
            expired.discard(j)
            held = self.gpus[j]
            if cluster.all_free(held):
                cluster.allocate(j, held, self._machine_of(j))
            else:
                cluster.unmark(held)
                self._preempt(j, self.now_s)

    def _expire_leases(self, order: np.ndarray) -> np.ndarray | None:
        """Open a round boundary's pass over ``order`` (waiting and running jobs, in priority
        order). The pass starts at the first job that may act: a waiting job, or a running job
        that gets a renewal offer (``upgrade``: one below its best tier; ``rebid``: any).
        Running jobs ahead of it keep their GPUs: nobody before them could claim any (with
        ``agent_picks`` the pass starts at the first job all the same). The other
        running jobs' GPUs become claimable by higher-priority jobs until their own turn comes
        (marked with their rank in the pass). Returns the jobs to visit, or None if none may
        act."""
        state = self.state
        mode = self._renewal
        c = self.cluster
        if c.compiled:
            _, mpr, gpm = self._dims
            start, n_expired, count = kernels.expire_leases(
                order,
                state,
                self.tier,
                self.best_possible_tier,
                mode != "rebid",
                self._upgrades_offered and self.n_below_best > 0,
                self.agent_picks,
                self._rank,
                c.owner,
                c.mark,
                c.free_per_machine,
                c.free_per_rack,
                mpr,
                gpm,
                self._gpu_store,
                self._gpu_off,
                self.num_gpus,
                self._expired_buf,
            )
            expired = self._expired_buf[:n_expired]
            if start < 0:
                return None
            visit = order[start:]
            if expired.size:
                self._ranked = visit
                if count:  # as ClusterState.mark_reclaimable
                    c.free_total += count
                    c.version += 1
                    c.marks_active = True
                self.expired_unvisited.update(expired.tolist())
            return visit
        if mode == "rebid":
            start = 0
        else:
            acts = state[order] == WAITING
            if self._upgrades_offered and self.n_below_best:
                acts |= self.tier[order] > self.best_possible_tier[order]  # tier is -1 unless running
            first = np.flatnonzero(acts)
            if first.size == 0:
                return None
            # Under agent picks every expired lease is a candidate (any may be claimed); a
            # visit to one ahead of the first job that may act just renews it in place.
            start = 0 if self.agent_picks else int(first[0])
        visit = order[start:]
        expired = visit[state[visit] == RUNNING]
        if expired.size:
            rank = self._rank
            rank[visit] = np.arange(visit.size)  # kept until the pass ends (see _renew_in_place)
            self._ranked = visit
            owner = self.cluster.owner
            gpus = np.flatnonzero(owner >= 0)
            ranks = rank[owner[gpus]]
            later = ranks >= 0
            self.cluster.mark_reclaimable(gpus[later], ranks[later])
            self.expired_unvisited.update(expired.tolist())
        return visit

    def _visit_plan(self, order: np.ndarray, boundary: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The jobs a pass visits, in order, with what lets it skip the hopeless ones.

        The free GPUs only shrink during a pass (GPUs are taken, never given back: expired
        leases were freed when the pass opened), so a waiting job too big for them now is
        skipped all pass long: such jobs are dropped here. Returns the job indices to visit,
        ``least_ahead`` (at each position, the smallest demand of a waiting job there or
        later: once the free GPUs are fewer, only expired leases are left to visit) and the
        positions of the expired leases (always visited: renewed or preempted).
        """
        if self.cluster.compiled:
            return kernels.visit_plan(order, self.num_gpus, self.state, self.cluster.free_total, boundary)
        demand = self.num_gpus[order]
        fits = demand <= self.cluster.free_total
        if boundary:
            expired_at = self.state[order] == RUNNING
            fits |= expired_at
            order, demand, expired_at = order[fits], demand[fits], expired_at[fits]
            demand[expired_at] = _NO_DEMAND
            expired_pos = np.flatnonzero(expired_at)
        else:
            order, demand = order[fits], demand[fits]
            expired_pos = np.empty(0, dtype=np.int64)
        least_ahead = np.minimum.accumulate(demand[::-1])[::-1]
        # Arrays, read one item at a time: a pass usually ends long before its last job (once
        # nobody left fits), and with thousands waiting, making a Python list of them all at
        # every pass was most of a long run's time (py-spy, the whole Philly trace under fifo).
        return order, least_ahead, expired_pos

    #: With ``agent_picks``: None, or ``lease_guard(engine, jobs) -> bool per job``, asked at
    #: each round boundary's pass about its lease-expired jobs (in the offer order). Those it
    #: flags take their turns first, before any pick, so no picked job can claim their GPUs
    #: (``DallyQueue-v0``'s ``guard_leases``).
    lease_guard: Callable[[Engine, np.ndarray], np.ndarray] | None = None

    #: With ``agent_picks``: None, or ``pick_guard(engine, candidates) -> job or None``, asked
    #: before each :class:`Pick` with its candidates (in the offer order). A job it returns is
    #: served as if the agent had picked it, without asking; None asks the agent
    #: (``DallyQueue-v0``'s ``guard_waiting``).
    pick_guard: Callable[[Engine, list[int]], int | None] | None = None

    #: Renew in place several lease-expired jobs at once when nothing happens between their
    #: turns (:meth:`_renew_in_place`). False: every turn is taken alone, through
    #: :meth:`_visit` -- the plain reference the tests hold the fast path to, result for result.
    renew_together = True

    def _compiled_turns(
        self, queue: np.ndarray, least_ahead: np.ndarray, expired_pos: np.ndarray, pos: int, t: float
    ) -> tuple[int, bool]:
        """The turns of a pass from position ``pos`` of its visit plan, compiled
        (:func:`dallygym.kernels.pass_turns`), up to the first that needs Python: its position
        (-1 if the pass is over) and whether it asks the caller a question. Completes here what
        the kernel cannot do (job sets, GPU lists, the finish heap, the policy's ``on_start``),
        from its log."""
        c = self.cluster
        tables = self._tables
        stop, asks, n_log, n_renewed, free_total, ops = kernels.pass_turns(
            queue,
            least_ahead,
            expired_pos,
            pos,
            t,
            self._auto,
            self._renewal != "rebid",
            self._upgrades_offered,
            self.config.restart_overhead_s,
            self._jobf,
            self._jobi,
            self.state,
            self.speed_seen,
            self.tier_s,
            self.placements_by_tier,
            tables.machine,
            tables.rows,
            tables.seq,
            tables.speed,
            tables.slots,
            self._gpu_store,
            c.buffer,
            *self._dims,
            c.free_total,
            c.marks_active,
            self._turn_log,
            self._renewed_log,
        )
        if ops:
            c.free_total = free_total
            c.version += ops
        if n_renewed:
            self.expired_unvisited.difference_update(self._renewed_log[:n_renewed].tolist())
        if n_log:
            self._apply_turn_log(n_log, t)
        return stop, asks

    def _apply_turn_log(self, n_log: int, t: float | None) -> None:
        """What :meth:`_start`, :meth:`_preempt` and :meth:`_complete` do beyond the arrays,
        for the changes in a compiled pass's log, in order (:meth:`_let_go` written out: this
        runs for most starts and ends of a run). ``t`` None: the log of kernels.run_events,
        which kept the job sets and counters itself and logged the tiers and times. (The GPU
        lists, the shapes and the jobs below their best tier are read from the arrays the
        kernels wrote: nothing to do for them here.)"""
        log = self._turn_log[:n_log]
        declined = self._declined
        on_start = self.policy.on_start if self._on_start_hook else None
        if t is None:
            if declined:
                codes = log[:, 0]
                ended = log[(codes == kernels.LOG_COMPLETED) | (codes == kernels.LOG_PREEMPTED), 1]
                for j in ended.tolist():
                    declined.pop(j, None)
            k = self._li.item(kernels.LI_N_STARTS)  # the starts alone, in a log of their own
            if on_start is not None and k:
                starts, starts_f = self._starts, self._starts_f  # (fresh copies of the rows: the hook's own)
                jobs, levels = starts[0, :k].copy(), starts[1, :k].copy()
                waited, at = starts_f[0, :k].copy(), starts_f[1, :k].copy()
                if self._on_start_batch is not None:
                    self._on_start_batch(self, jobs, levels, waited, at)
                    return
                for j, level, w, a in zip(jobs.tolist(), levels.tolist(), waited.tolist(), at.tolist()):
                    on_start(self, j, _TIERS[level], w, a)
            return
        heap = self._finish_heap
        expired = self.expired_unvisited
        shape_entry = self._shape_entry
        for code, j, entry, _ in log.tolist():
            if code == kernels.LOG_PREEMPTED:  # (a pass logs no completions)
                if declined:
                    declined.pop(j, None)
                expired.discard(j)
                self._note_state(j, RUNNING, WAITING)
                continue
            # a start
            self._note_state(j, WAITING, RUNNING)
            if code == kernels.LOG_STARTED:
                shape_entry[j] = entry
            if heap is not None:
                heapq.heappush(heap, (self.finish_s.item(j), j))
            if on_start is not None:
                on_start(self, j, _TIERS[self.tier.item(j)], t - self.starve_anchor_s.item(j), t)

    def _renew_in_place(self, jobs: np.ndarray) -> int:
        """Renew at once the leading ``jobs`` (lease-expired, in their turns' order, with no
        other turn between them) whose turn would just give them back the GPUs they hold: none
        of their GPUs was claimed, and the renewal mode makes them no offer (``keep``; or
        ``upgrade`` when the policy takes no upgrades, or the job is at its best possible tier,
        or no better tier is idle for it).
        The same as their turns one by one (each takes only its own marked GPUs, so it changes
        nothing the next one sees); returns how many were renewed."""
        mode = self._renewal
        if mode == "rebid":
            return 0
        c = self.cluster
        if c.compiled:
            racks, mpr, gpm = self._dims
            n, count = kernels.renew_in_place(
                jobs,
                self._rank,
                c.mark,
                c.owner,
                c.free_per_machine,
                c.idle_per_machine,
                c.free_per_rack,
                self.num_gpus,
                self.tier,
                self.best_possible_tier,
                racks,
                mpr,
                gpm,
                self._upgrades_offered,
                self._gpu_store,
                self._gpu_off,
            )
            if count:  # as ClusterState.renew_marked
                c.free_total -= count
                c.version += 1
            if n:
                self.expired_unvisited.difference_update(jobs[:n].tolist())
            return n
        ranks = self._rank[jobs]
        lo = ranks.item(0)
        span = ranks.item(-1) - lo + 1
        mark = self.cluster.mark
        # Every mark in [lo, lo + span) belongs to one of ``jobs``: the jobs ranked between two
        # of them are waiting ones (no GPUs) or in ``jobs``; those visited earlier hold no marks.
        marked = np.flatnonzero((mark >= lo) & (mark < lo + span))
        unclaimed = np.bincount(mark[marked] - lo, minlength=span)[ranks - lo] == self.num_gpus[jobs]
        n = jobs.size if unclaimed.all() else int(np.argmin(unclaimed))
        if n and self._upgrades_offered:
            # A job below its best tier gets an upgrade offer at its turn if the idle GPUs and
            # its own make a better tier (see _renew). The idle GPUs stay as they are while the
            # jobs before it renew in place, so the test can be made now.
            below = self.tier[jobs[:n]] > self.best_possible_tier[jobs[:n]]
            for i in np.flatnonzero(below).tolist():
                j = jobs.item(i)
                idle = self._with_own(self.cluster.idle_per_machine, j)
                if self._better_tier_in(idle, self._num_gpus_list[j], self.tier.item(j)):
                    n = i
                    break
        if n == 0:
            return 0
        gpus = marked[mark[marked] <= ranks.item(n - 1)]
        owner_of_rank = np.empty(span, dtype=np.int64)
        owner_of_rank[ranks - lo] = jobs
        self.cluster.renew_marked(gpus, owner_of_rank[mark[gpus] - lo])
        self.expired_unvisited.difference_update(jobs[:n].tolist())
        return n

    def _migrations(self, jobs: np.ndarray, t: float) -> None:
        """After a boundary pass: running jobs that kept their GPUs may move to a better tier
        using free GPUs, in priority order, if the policy asks (e.g. Gandiva)."""
        if jobs is None or not self.policy.may_migrate(self):
            return  # (None: the policy has no migrate hook, see Engine._migrates)
        for j in self._priority_order(jobs).tolist():
            if self.state[j] == RUNNING and self.hold_start_s[j] < t:
                self._maybe_migrate(j, t)

    def _priority_order(self, jobs: np.ndarray) -> np.ndarray:
        """``jobs`` (increasing indices) in the policy's order: by its keys, ties by earlier
        arrival, then by index."""
        if self._arrival_order:  # the keys would be arrival_s[jobs], already in order
            return jobs
        keys = np.asarray(self.policy.priority(self, jobs), dtype=np.float64)
        if keys.shape != jobs.shape:
            raise EngineError(f"policy {self.policy.name!r} returned {keys.shape} priority keys for {jobs.size} jobs")
        # Job indices follow (arrival, id), so a stable sort on the keys alone breaks ties by
        # arrival, then by index.
        return jobs[np.argsort(keys, kind="stable")]

    def _offer_tiers(self, g: int) -> tuple[Tier, ...]:
        """Tiers at which ``g`` GPUs can be placed now, most consolidated first (cached per
        demand until the free GPUs change: a pass offers many jobs of the same size)."""
        c = self.cluster
        if g == 1:  # fast path: any free GPU is a machine placement, and the only one
            return _MACHINE_ONLY if c.free_total else ()
        if self._tiers_version != c.version:
            self._tiers_cache.clear()
            self._tiers_version = c.version
            self._tier_limits = self._compute_tier_limits()
        tiers = self._tiers_cache.get(g)
        if tiers is None:
            most_on_machine, most_on_rack, network = self._tier_limits
            tiers = self._tiers_cache[g] = tuple(
                tier
                for tier, ok in (
                    (Tier.MACHINE, g <= most_on_machine),
                    (Tier.RACK, 2 <= g <= most_on_rack),
                    (Tier.NETWORK, network and 2 <= g <= c.free_total),
                )
                if ok
            )
        return tiers

    def _best_tier_in(self, per_machine: np.ndarray, g: int) -> int:
        """The most consolidated tier (as an int; 3: none) at which ``g`` GPUs fit in
        ``per_machine`` available GPUs (the offer rule of :meth:`_offer_tiers`)."""
        spec = self.spec
        if g <= spec.gpus_per_machine and _largest(per_machine) >= g:
            return 0
        per_rack = per_machine.reshape(spec.racks, spec.machines_per_rack)
        rack_total = per_rack.sum(axis=1)
        if g >= 2 and ((rack_total >= g) & ((per_rack > 0).sum(axis=1) >= 2)).any():
            return 1
        if g >= 2 and np.count_nonzero(rack_total) >= 2 and rack_total.sum() >= g:
            return 2
        return 3

    def _better_tier_in(self, per_machine: np.ndarray, g: int, current: int) -> bool:
        """Whether ``g`` GPUs fit in ``per_machine`` available GPUs at a tier more consolidated
        than ``current`` (an int): ``_best_tier_in(per_machine, g) < current``, without the
        rack test when a machine-tier answer settles it (renewals ask this of many jobs)."""
        if current == 0:
            return False
        if self.cluster.compiled:
            racks, mpr, gpm = self._dims
            return kernels.better_tier_in(per_machine, racks, mpr, gpm, g, current)
        spec = self.spec
        if g <= spec.gpus_per_machine and _largest(per_machine) >= g:
            return True
        if current == 1 or g < 2:
            return False
        # No machine holds g here, so a rack with g available has them on two machines or
        # more: the rack rule reduces to the largest rack total.
        per_rack = np.add.reduce(per_machine.reshape(spec.racks, spec.machines_per_rack), axis=1)
        return bool(_largest(per_rack) >= g)

    def _compute_tier_limits(self) -> tuple[int, int, bool]:
        """What the free GPUs allow, whatever the demand: the most free GPUs on one machine;
        the most on one rack among racks with free GPUs on at least two machines (a rack
        placement spans two machines); whether two racks have free GPUs (a network placement
        spans two racks)."""
        c = self.cluster
        spec = self.spec
        if c.compiled:
            return kernels.tier_limits(c.free_per_machine, c.free_per_rack, spec.racks, spec.machines_per_rack)
        # A rack has free GPUs on two machines exactly when its free count exceeds that of
        # its freest machine. (A few numpy reductions cost more than this loop over racks.)
        freest = c.free_per_machine.reshape(spec.racks, spec.machines_per_rack).max(axis=1).tolist()
        most_on_rack = 0
        racks_with_free = 0
        for free, on_machine in zip(c.free_per_rack.tolist(), freest):
            if free:
                racks_with_free += 1
                if on_machine < free and most_on_rack < free:
                    most_on_rack = free
        return max(freest), most_on_rack, racks_with_free >= 2

    # --- state changes -------------------------------------------------------------------

    def _advance(self, t: float) -> None:
        """Bring running jobs' progress and time accounting forward to ``t``."""
        dt = t - self._last_sync_s
        if dt > 0:
            # Jobs in the system (arrived, unfinished) do not change between events.
            self.in_system_area_s += dt * (self._next_arrival - self.finished)
            run = self.running_jobs()
            if run.size and self.cluster.compiled:
                speeds = kernels.advance(run, run.size, self._jobf, dt, t)
                self.comm_area_s += dt * float(run.size - speeds)
            elif run.size:
                self.run_s[run] += dt
                self.done_iters[run] = self.seg_done0[run] + self.rate[run] * np.maximum(0.0, t - self.seg_start_s[run])
                self.comm_area_s += dt * float(run.size - np.add.reduce(self.speed[run]))
        self._last_sync_s = t
        self.now_s = t

    def _let_go(self, j: int) -> None:
        """The Python part of ending job ``j``'s placement (:meth:`_close_segment`; a compiled
        kernel does the arrays): an upgrade offer it declined is forgotten. (Its GPUs become its
        last ones by themselves: :class:`JobGpus`.)"""
        self._declined.pop(j, None)  # (only a job below its best tier has an entry)

    def _last_shape_of(self, j: int):
        """The shape of job ``j``'s last placement (:meth:`ClusterSpec.shape_of`)."""
        entry = self._shape_entry.item(j)
        if entry == kernels.SHAPE_LISTED:
            return self.last_shape[j]
        return ((self._num_gpus_list[j],),) if entry < 0 else self._tables.shapes[entry]

    def _close_segment(self, j: int, t: float) -> None:
        self._let_go(j)
        self.tier_s[j, self.tier[j]] += t - self.hold_start_s[j]
        self.overhead_s[j] += max(0.0, min(self.seg_start_s[j], t) - self.hold_start_s[j])
        self.speed[j] = 0.0
        self.rate[j] = 0.0
        self.finish_s[j] = np.inf
        self.tier[j] = -1

    def _machine_of(self, j: int) -> int:
        """The machine holding all of job ``j``'s current GPUs, or -1 if they span machines."""
        if self._last_tier.item(j) != 0:
            return -1
        return self._gpu_store.item(self._gpu_off.item(j)) // self.spec.gpus_per_machine

    def _complete(self, jobs: list[int], t: float) -> None:
        c = self.cluster
        if c.compiled:
            racks, mpr, gpm = self._dims
            c.free_total += kernels.complete(
                np.array(jobs, dtype=np.int64),
                t,
                self._jobf,
                self._jobi,
                self.state,
                self.tier_s,
                self._gpu_store,
                c.buffer,
                racks,
                mpr,
                gpm,
            )
            c.version += len(jobs)
            for j in jobs:  # the rest of _close_segment and _set_state
                self._let_go(j)
                self._note_state(j, RUNNING, DONE)
            self.finished += len(jobs)
            return
        for j in jobs:
            self.cluster.release(self.gpus[j], self._machine_of(j))
            self._close_segment(j, t)
            self.done_iters[j] = self.total_iterations[j]
            self.end_s[j] = t
            self._set_state(j, DONE)
            self.finished += 1

    def _preempt(self, j: int, t: float) -> None:
        """A lease-expired job lost GPUs to a higher-priority job (its GPUs are already free)."""
        self._close_segment(j, t)
        self._set_state(j, WAITING)
        self.starve_anchor_s[j] = t
        self.preemptions[j] += 1

    def _maybe_migrate(self, j: int, t: float) -> None:
        target = self.policy.migrate(self, j, t)
        if target is None:
            return
        target = Tier(target)
        if target >= self.tier[j]:
            raise EngineError(
                f"{self.policy.name!r} asked to migrate job {self.job_id[j]} to {target.label}, "
                f"which is not better than its {Tier(int(self.tier[j])).label} placement"
            )
        held = self.gpus[j]
        self.cluster.release(held)
        if target not in self._offer_tiers(int(self.num_gpus[j])):
            self.cluster.allocate(j, held)  # nothing better is free: stay
            return
        self._close_segment(j, t)
        self.migrations[j] += 1
        self.starve_anchor_s[j] = t  # it gives up its GPUs and gets new ones at once
        self._start(j, target, t, restarted=True, kind="migration")

    def _speed_factor(self, j: int, shape) -> float:
        tables = self._tables
        key = (self._model_id_list[j], shape)
        s = tables.cache.get(key)
        if s is None:
            s = float(self.latency.speed_factor(self.model[j], shape))
            if not 0.0 < s <= 1.0:
                raise EngineError(f"latency model {self.latency!r} gave speed factor {s} for {self.model[j]} {shape}")
            tables.add(key[0], shape, s)
        return s

    def _start(self, j: int, tier: Tier, t: float, restarted: bool = False, kind: str = "new") -> None:
        g = self._num_gpus_list[j]
        level = int(tier)
        prev = self.last_gpus[j]
        # Its old GPUs, if all free again and of the accepted tier: take them back at no
        # restart cost. (Any other placement differs from the old set: either some old GPU is
        # held, or the tier differs.)
        same = prev is not None and not restarted and self._last_tier.item(j) == level and self.cluster.all_free(prev)
        if same:
            gpus = prev
            shape = self._last_shape_of(j)
        else:
            gpus = self.policy.place(self, j, tier)
            if gpus is None:
                gpus = self.cluster.place(g, tier)
            else:
                gpus = np.asarray(gpus, dtype=np.int64)
                self._check_placement(j, gpus, tier)
            if level == 0:
                shape = ((g,),)
            else:
                shape = None
                if self.cluster.compiled:  # a shape seen before: from the shape table
                    _, mpr, gpm = self._dims
                    tables = self._tables
                    entry = kernels.shape_entry(
                        gpus, gpm, mpr, tables.rows, tables.seq, tables.slots, self._model_id_list[j]
                    )
                    if entry >= 0:
                        shape = tables.shapes[entry]
                if shape is None:
                    shape = self.spec.shape_of(gpus)
            off = self._gpu_off.item(j)
            self._gpu_store[off : off + g] = gpus
        speed = self._speed_factor(j, shape)
        overhead = self.config.restart_overhead_s if (prev is not None and not same) else 0.0
        self._last_tier[j] = level
        self.last_shape[j] = shape
        self._shape_entry[j] = kernels.SHAPE_LISTED
        self.cluster.allocate(j, gpus, self._machine_of(j))
        self._set_state(j, RUNNING)
        self.tier[j] = level
        self.speed[j] = speed
        self.speed_seen[j, level] = speed
        rate = speed / self._iter_time_list[j]
        self.rate[j] = rate
        self.hold_start_s[j] = t
        progress_s = t + overhead
        self.seg_start_s[j] = progress_s
        done = self.done_iters.item(j)
        self.seg_done0[j] = done
        finish = progress_s + (self._total_iterations_list[j] - done) / rate
        self.finish_s[j] = finish
        if self._finish_heap is not None:
            heapq.heappush(self._finish_heap, (finish, j))
        if math.isnan(self.first_start_s.item(j)):
            self.first_start_s[j] = t
        self.placements_by_tier[level] += 1
        self.placement_kind = kind
        self.policy.on_start(self, j, tier, t - self.starve_anchor_s.item(j), t)
        self.placement_kind = "new"

    def _check_placement(self, j: int, gpus: np.ndarray, tier: Tier) -> None:
        g = int(self.num_gpus[j])
        name = self.policy.name
        if gpus.ndim != 1 or len(gpus) != g or len(np.unique(gpus)) != g:
            raise EngineError(f"{name!r} placed job {self.job_id[j]} on {gpus.tolist()}, not {g} distinct GPUs")
        if gpus.min() < 0 or gpus.max() >= self.spec.num_gpus or not (self.cluster.owner[gpus] == -1).all():
            raise EngineError(f"{name!r} placed job {self.job_id[j]} on GPUs that are not free: {gpus.tolist()}")
        got = tier_of_shape(self.spec.shape_of(gpus))
        if got != tier:
            raise EngineError(f"{name!r} placed job {self.job_id[j]} at {got.label}, but it accepted {tier.label}")

    #: Most rows :attr:`timeline` keeps (class default; set on an instance before the run).
    timeline_rows = 100_000

    def _record(self, t: float) -> None:
        used = self.cluster.used_total
        remaining = self.n - self.finished
        if self.cluster.compiled:
            kernels.record(
                t,
                used,
                self.n_running,
                self.n_waiting,
                remaining,
                self._rec_i,
                self._rec_f,
                self._partials,
                self._timeline,
            )
            return
        rec_i, rec_f, rows = self._rec_i, self._rec_f, self._timeline
        if rec_i[kernels.RI_HAS_LAST]:
            t0 = rec_f[kernels.RF_LAST_T]
            rec_i[kernels.RI_PARTIALS] = _add_exact(
                self._partials, int(rec_i[kernels.RI_PARTIALS]), rec_i[kernels.RI_LAST_USED] * (t - t0)
            )
        rec_i[kernels.RI_HAS_LAST] = 1
        rec_i[kernels.RI_LAST_USED] = used
        rec_f[kernels.RF_LAST_T] = t
        if t < rec_f[kernels.RF_NEXT]:
            return
        k = int(rec_i[kernels.RI_ROWS])
        rows[k] = (t, used, self.n_running, self.n_waiting, remaining)
        k += 1
        if k >= len(rows) - 1:  # (one spare row)
            rec_f[kernels.RF_STEP] = 2.0 * (t - rows[0, 0]) / k
            kept = rows[:k:2].copy()
            rows[: len(kept)] = kept
            k = len(kept)
        rec_i[kernels.RI_ROWS] = k
        rec_f[kernels.RF_NEXT] = t + rec_f[kernels.RF_STEP]

    @property
    def timeline(self) -> list[tuple[float, int, int, int, int]]:
        """``(time_s, gpus_used, running, waiting, remaining)`` after each event, at most
        :attr:`timeline_rows` rows (see ``_timeline``). Once the run has finished, the last
        row is its last event (the last completion, no GPU in use) even when thinning skipped
        it: a thinned timeline records an event only once the spacing since the last kept row
        has passed, which the run's final event often has not."""
        rows = self._timeline[: self._rec_i[kernels.RI_ROWS]]
        rec_i, last_t = self._rec_i, float(self._rec_f[kernels.RF_LAST_T])
        if self.finished == self.n and rec_i[kernels.RI_HAS_LAST] and (len(rows) == 0 or rows[-1, 0] < last_t):
            final = np.array(
                [[last_t, rec_i[kernels.RI_LAST_USED], self.n_running, self.n_waiting, 0]], dtype=rows.dtype
            )
            # Within the row budget: the final row takes the place of the last kept one if need be.
            keep = rows if len(rows) < self.timeline_rows - 1 else rows[:-1]
            rows = np.concatenate((keep, final))
        counts = rows[:, 1:].astype(np.int64).T.tolist()
        return list(zip(rows[:, 0].tolist(), *counts))

    def busy_gpu_s(self, end_s: float) -> float:
        """GPU-seconds in use from the first event to ``end_s`` (the end of the run): the sum
        over events of GPUs used x time to the next event, correctly rounded (``math.fsum``
        of the same products the per-event timeline gives)."""
        rec_i = self._rec_i
        if not rec_i[kernels.RI_HAS_LAST]:
            return 0.0
        t0 = float(self._rec_f[kernels.RF_LAST_T])
        last = int(rec_i[kernels.RI_LAST_USED]) * (end_s - t0)
        return math.fsum([*self._partials[: rec_i[kernels.RI_PARTIALS]].tolist(), last])


def _add_exact(partials, n: int, x: float) -> int:
    """Add ``x`` to the non-overlapping partial sums ``partials[:n]`` without rounding
    (Shewchuk's algorithm, the one inside ``math.fsum``), so a running total costs O(1) memory
    and ``math.fsum(partials[:n])`` is the correctly rounded sum of everything added. Returns
    the new number of partials (``partials`` must have room for one more)."""
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


def run_policy(engine: Engine, progress: Callable[[Engine], None] | None = None) -> Engine:
    """Drive an engine to the end, answering every decision with its policy
    (:meth:`Policy.answer <dallygym.policies.Policy.answer>`: offers by ``decide``, and with
    ``agent_picks`` picks by ``pick``). Built without ``agent_picks`` it is a native run.
    ``progress``, if given, is called with the engine every 256 decisions and once at the end
    (e.g. :class:`dallygym.simulate.ProgressLine`)."""
    policy = engine.policy
    hooks: dict[str, Callable] = {}  # kind -> the policy's bound method (Policy.answer, looked up once)
    decision = engine.next_decision(auto_accept_of(policy))
    asked = 0
    while decision is not None:
        hook = hooks.get(decision.kind)
        if hook is None:
            hook = hooks[decision.kind] = getattr(policy, decision.hook)
        decision = engine.answer(decision, hook(decision, engine))
        asked += 1
        if progress is not None and not asked & 255:
            progress(engine)
    if progress is not None:
        progress(engine)
    return engine
