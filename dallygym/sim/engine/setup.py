"""An engine's construction from a trace, and its copies: the job table, the run's state, the
compiled loop's buffers, and the views and caches made again from them (:meth:`_bind`)."""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Self

import numpy as np
import pandas as pd

from .. import kernels
from ..cluster import ClusterError, ClusterSpec, ClusterState, Tier
from ..policies.base import (
    PRIORITY_KEYS,
    Policy,
    hooks_on_start,
    priority_keys_of,
    start_batch_hook,
    starts_in_batches,
)
from . import turns
from .decisions import PENDING, RUNNING, TIERS, WAITING, Offer, Pick

if TYPE_CHECKING:
    from ..latency import LatencyModel

from .jobs import JobGpus, JobSet, TraceArrays
from .speed import _SPEED_TABLES, speed_tables


class EngineSetup:
    """The parts of :class:`~dallygym.sim.engine.Engine` that build it and copy it."""

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
        self._best_tier_list: list[Tier] = list(map(TIERS.__getitem__, self._best_level_list))
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
        #: (kernels.RI_* / RF_*), as :func:`dallygym.sim.kernels.record` keeps them.
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
        # The run as plain data (see dallygym.sim.engine.turns): its frames, the value the top frame
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
        self._keys = -1 if keys is None else PRIORITY_KEYS.index(keys)
        #: With a network's keys (kernels.KEYS_NET): its parameters, from the policy's
        #: ``compiled_keys`` once the run starts (None until then, and for other keys).
        self._net_params = None
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
        "_one_job",
        "_one_least",
        "_no_positions",
        "_loop_args",
        "_net",
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
        # turns.Picked's visit plan of one served job, for kernels.pass_turns.
        self._one_job = np.zeros(1, dtype=np.int64)
        self._one_least = np.zeros(1, dtype=np.int64)
        self._no_positions = np.zeros(0, dtype=np.int64)
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
        self._net = None  # the network keys' bundle (CompiledPath._net_args), made when first needed

    def __getstate__(self) -> dict:
        """The engine as plain data, at any point of its run: no views (a copy of a view would
        be an array of its own, no longer its table's row) and no caches (:meth:`_bind` makes
        them again), the timeline cut to its rows, the job sets as plain arrays
        (:meth:`JobSet.__getstate__`) with a note of those the compiled loop's rows hold, and
        the run's frames (:mod:`dallygym.sim.engine.turns`), which are plain data too."""
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

    def __deepcopy__(self, memo: dict) -> Self:
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
