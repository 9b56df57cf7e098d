"""``DallyQueue-v0``'s observation: a row of job features per candidate slot
(:data:`JOB_FEATURES`), a slot mask and the cluster's features (:data:`CLUSTER_FEATURES`),
documented in the :class:`~dallygym.envs.queue.DallyQueueEnv` docstring and built by
:class:`QueueObservation`.
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from ..sim import kernels
from ..sim.cluster import ClusterSpec, Tier
from ..sim.engine import RUNNING, Engine, Pick
from ..sim.policies.protected import NEVER_RUN_MULTI_MACHINE_NW_SENS, ProtectedRemainingPolicy
from ..sim.policies.tuned import known_work
from .base import _LOG_1000, _LOG_LONG
from .offer_obs import load_shown


def _leases_shown(leases: np.ndarray) -> np.ndarray:
    """Times given in leases (>= 0) as log1p(t) / log1p(10,000), clipped to [0, 1]."""
    return np.minimum(np.log1p(leases) / _LOG_LONG, 1.0)


#: Per-candidate features, in order (see the DallyQueueEnv docstring).
JOB_FEATURES: tuple[str, ...] = (
    "gpus",
    "best_machine",
    "best_rack",
    "best_network",
    "best_tier_free",
    "starvation",
    "nw_sens",
    "progress",
    "remaining_ideal",
    "remaining_estimate",
    "attained_service",
    "preemptions",
    "holds_lease",
    "current_tier",
    "speed_machine",
    "speed_rack",
    "speed_network",
    "past_timer_machine",
    "past_timer_rack",
    "estimate_share",
)
#: Cluster and queue features, in order.
CLUSTER_FEATURES: tuple[str, ...] = (
    "free_gpus",
    "idle_gpus",
    "max_free_machine",
    "max_free_rack",
    "candidates",
    "candidate_demand",
    "waiting_jobs",
    "waiting_demand",
    "running_jobs",
    "jobs_remaining",
    "time_elapsed",
    "time_in_round",
    "boundary",
    "may_stop",
    "beyond_window",
)
JOB_DIM = len(JOB_FEATURES)
CLUSTER_DIM = len(CLUSTER_FEATURES)
#: The job feature ``limit_features=True`` appends (after :data:`JOB_FEATURES`).
LIMIT_JOB_FEATURES: tuple[str, ...] = ("limit_finish",)
#: The cluster features ``limit_features=True`` appends (after :data:`CLUSTER_FEATURES`).
LIMIT_CLUSTER_FEATURES: tuple[str, ...] = ("limit_elapsed", "limit_estimate", "limit_work")


def observation_dims(limit_features: bool = False) -> tuple[int, int]:
    """The number of job features and of cluster features of a ``DallyQueue`` observation."""
    if limit_features:
        return JOB_DIM + len(LIMIT_JOB_FEATURES), CLUSTER_DIM + len(LIMIT_CLUSTER_FEATURES)
    return JOB_DIM, CLUSTER_DIM


def _limit_shown(share: np.ndarray | float) -> np.ndarray | float:
    """A time as a share of the makespan limit, shown as min(share, 2) / 2: 0.5 at the limit."""
    return np.minimum(share, 2.0) / 2.0


class QueueObservation:
    """Writes the observation of a pick into buffers it keeps (:attr:`obs`; the environment
    hands out copies): the job rows of the candidates in the window, their mask and the
    cluster's features, and with ``limit_features`` the makespan limit's.

    Most of the work is cached by engine state: a candidate's row is computed once per pass
    (:meth:`_job_features_cached`), the largest remaining estimate once per engine state
    (:meth:`largest_estimate_s`). Its state is plain data (its caches name the engine they
    describe) and copies with the environment.
    """

    def __init__(
        self, spec: ClusterSpec, max_candidates: int, sensitivity: str, limit_features: bool, link_load: bool = False
    ) -> None:
        self.spec_cluster = spec
        self.max_candidates = max_candidates
        self.sensitivity = sensitivity
        self.limit_features = limit_features
        self.link_load = link_load
        job_dim, cluster_dim = observation_dims(limit_features)
        #: The observation space: ``jobs`` (a row per slot), ``job_mask`` (1 where a slot holds a
        #: candidate) and ``cluster``; with ``link_load``, ``links`` too (each shared link's load).
        boxes = {
            "jobs": spaces.Box(0.0, 1.0, shape=(max_candidates, job_dim), dtype=np.float32),
            "job_mask": spaces.Box(0.0, 1.0, shape=(max_candidates,), dtype=np.float32),
            "cluster": spaces.Box(0.0, 1.0, shape=(cluster_dim,), dtype=np.float32),
        }
        if link_load:
            boxes["links"] = spaces.Box(0.0, 1.0, shape=(spec.num_machines + spec.racks,), dtype=np.float32)
        self.space = spaces.Dict(boxes)
        self.engine: Engine | None = None
        self._num_gpus = float(spec.num_gpus)
        self._log_cluster = math.log2(1 + spec.num_gpus)
        self.obs = self.zeros()
        #: Candidates of the pick not shown (beyond the window).
        self.beyond = 0
        self._largest_estimate = None  # (engine, state key, value): see largest_estimate_s
        # Scratch tables of observe, indexed by a GPU demand (0 .. the cluster's GPUs).
        size = spec.num_gpus + 1
        self._demand_best = np.zeros(size, dtype=np.int64)
        self._demand_seen = np.zeros(size, dtype=bool)
        self._demand_free = np.zeros(size, dtype=bool)
        self._racks_mpr = (spec.racks, spec.machines_per_rack)  # (kernels.queue_demands's)
        self._demand_limits = np.zeros((size, 2))
        self._demand_list = np.zeros(size, dtype=np.int64)
        self._demand_best_list = np.zeros(size, dtype=np.int64)
        self._stale = np.zeros(max_candidates, dtype=np.int64)  # candidates whose kept row is old
        self._estimates = np.zeros(max_candidates)
        # The observation's buffers, rewritten in place at each pick (only the shown rows, and
        # the rows shown before but not now cleared).
        self._jobs_buf = np.zeros((max_candidates, JOB_DIM), dtype=np.float32)
        self._mask_buf = np.zeros(max_candidates, dtype=np.float32)
        self._shown = 0  # rows of the buffers that may be non-zero
        # limit_features: the observation's jobs, the first JOB_DIM columns copied from _jobs_buf.
        self._jobs_limit = np.zeros((max_candidates, job_dim), dtype=np.float32) if limit_features else None
        self._work_estimate = None  # (engine state key, value): see _work_estimate_s
        self._rows_of = None  # the engine whose jobs _rows describes (see _job_features_cached)
        self._elapsed_cache = None  # (engine, time, cluster feature 10)

    def start(self, engine: Engine, timers, makespan_limit_s: float | None) -> None:
        """At reset: observe ``engine`` from now on. ``timers`` is the offer rule's
        ``timers(gpus, now)`` (features 17-18), or None; ``makespan_limit_s`` the reward's
        makespan limit (``limit_features``)."""
        self.engine = engine
        self._lease_s = float(engine.config.lease_s)
        # Job feature 0 by job (it depends on the demand alone), for _job_features_compiled.
        self._size_feature = np.log2(1.0 + engine.num_gpus) / self._log_cluster
        self._timers = timers
        self.makespan_limit_s = makespan_limit_s
        self._oracle_cache: dict = {}

    def zeros(self) -> dict:
        """An observation of zeros (before the first pick and at the episode's end)."""
        return {key: np.zeros(box.shape, dtype=np.float32) for key, box in self.space.items()}

    def clear(self) -> None:
        """All zeros: the observation once the episode has ended."""
        self.obs = self.zeros()

    def _time(self, x: np.ndarray) -> np.ndarray:
        """Times as log1p(t / lease) / log1p(10,000 leases), clipped to [0, 1]."""
        return _leases_shown(np.maximum(x, 0.0) / self._lease_s)

    def observe(self, pick: Pick) -> int:
        """Write the observation of ``pick`` into :attr:`obs` (and :attr:`beyond`); return the
        number of candidates shown, which fill the first slots."""
        e = self.engine
        spec = self.spec_cluster
        k_max = self.max_candidates
        every = self._candidate_array(pick)
        k = min(every.size, k_max)
        self.beyond = every.size - k
        c = every[:k]
        now = e.now_s
        jobs = self._jobs_buf
        mask = self._mask_buf
        shown_before = self._shown
        cl = e.cluster
        if cl.compiled:
            demand_all, idle, most_machine, most_rack = self._job_features_cached(c, every, now, jobs, mask)
        else:
            if self._shown > k:  # rows shown at the previous pick and empty now
                jobs[k : self._shown] = 0.0
                mask[k : self._shown] = 0.0
            jobs[:k, 14:17] = 0.0  # (the only columns _job_features leaves alone)
            self._job_features(c, now, jobs)
            mask[:k] = 1.0
            demand_all = int(np.add.reduce(e.num_gpus[every]))
            idle = int(np.add.reduce(cl.idle_per_machine))
            most_machine = int(np.maximum.reduce(cl.free_per_machine))
            most_rack = int(np.maximum.reduce(cl.free_per_rack))
        self._shown = k
        if self.sensitivity != "hidden":
            jobs[:k, 14:17] = self._job_speeds(c)

        free = cl.free_total
        elapsed = now - e.first_arrival_s
        lease = self._lease_s
        cluster = np.array(
            (
                free / self._num_gpus,
                idle / self._num_gpus,
                most_machine / spec.gpus_per_machine,
                most_rack / spec.gpus_per_rack,
                math.log1p(every.size) / _LOG_1000,
                min(demand_all / max(free, 1), 10.0) / 10.0,
                math.log1p(e.n_waiting) / _LOG_1000,
                min(e.waiting_gpus / self._num_gpus, 10.0) / 10.0,
                math.log1p(e.n_running) / _LOG_1000,
                (e.n - e.finished) / e.n,
                self._elapsed_shown(now, elapsed),
                (elapsed % lease) / lease,
                pick.boundary,
                pick.may_stop,
                min(self.beyond / k_max, 1.0),
            ),
            dtype=np.float32,
        )
        if self.limit_features:
            jobs, cluster = self._with_limit(c, jobs, cluster, elapsed, shown_before)
        self.obs = {"jobs": jobs, "job_mask": mask, "cluster": cluster}
        if self.link_load:
            self.obs["links"] = load_shown(e.link_load()).astype(np.float32)
        return k

    def _with_limit(
        self, c: np.ndarray, jobs: np.ndarray, cluster: np.ndarray, elapsed: float, shown_before: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``limit_features``: the observation's jobs and cluster with the makespan limit's
        features appended (see the DallyQueueEnv docstring): for each candidate the time since the first
        arrival plus its remaining estimate, and for the cluster that time and that time plus the
        largest remaining estimate of any unfinished job, each as a share of the limit."""
        e = self.engine
        k = c.size
        out = self._jobs_limit
        if shown_before > k:
            out[k:shown_before] = 0.0
        out[:k, :JOB_DIM] = jobs[:k]
        if e.cluster.compiled:
            estimate = self._row_estimate[c]  # (kept by _job_features_cached, in seconds)
        else:
            estimate = ProtectedRemainingPolicy.remaining_estimate_s(e, c)
        limit = max(self.makespan_limit_s, 1e-9)
        out[:k, JOB_DIM] = _limit_shown((elapsed + estimate) / limit)
        extra = np.array(
            (
                _limit_shown(elapsed / limit),
                _limit_shown((elapsed + self.largest_estimate_s()) / limit),
                _limit_shown((elapsed + self._work_estimate_s()) / limit),
            ),
            dtype=np.float32,
        )
        return out, np.concatenate((cluster, extra))

    def _work_estimate_s(self) -> float:
        """The unfinished jobs' GPU demand x remaining estimate, summed, over the cluster's GPUs:
        the time the work left would take on the whole cluster, perfectly packed, at the
        estimated speeds. Computed once per engine state (see :meth:`largest_estimate_s`)."""
        e = self.engine
        key = (e, e.passes, e.now_s, e.finished, e._next_arrival)
        cached = self._work_estimate
        if cached is not None and cached[0] == key:
            return cached[1]
        value = known_work(e)[2]  # (the count a priority network's limit inputs read)
        self._work_estimate = (key, value)
        return value

    def _candidate_array(self, pick: Pick) -> np.ndarray:
        """``pick.candidates`` as an int64 array: the engine's own when it kept it."""
        kept = getattr(self.engine, "_pick_jobs", None)
        if kept is not None and kept[0] is pick:
            return kept[1]
        return np.fromiter(pick.candidates, dtype=np.int64, count=len(pick.candidates))

    def _demand_tables(self, demands: list[int], best_tiers: list[int], now: float) -> bool:
        """For each distinct GPU demand of the candidates (with its best possible tier): whether
        that tier is free now (``_demand_free``) and the offer rule's timers
        (``_demand_limits``, :meth:`_demand_timers`), if the policy has timers (returned)."""
        e = self.engine
        free_of = self._demand_free
        for demand, best_tier in zip(demands, best_tiers):
            tiers = e._offer_tiers(demand)
            free_of[demand] = bool(tiers) and tiers[0] == best_tier
        return self._demand_timers(demands, now)

    def _candidate_demand_tables(self, c: np.ndarray, now: float) -> bool:
        """:meth:`_demand_tables` for the distinct GPU demands of candidates ``c`` (the best
        possible tier depends on the demand alone). Tables indexed by the demand (at most the
        cluster's GPUs) stand in for a sort."""
        e = self.engine
        g = e.num_gpus[c]
        best_of = self._demand_best
        best_of[g] = e.best_possible_tier[c]
        present = self._demand_seen
        present[g] = True
        demands = np.flatnonzero(present)
        present[demands] = False
        return self._demand_tables(demands.tolist(), best_of[demands].tolist(), now)

    def _demand_timers(self, demands: list[int], now: float) -> bool:
        """The offer rule's timers of each demand into ``_demand_limits``, if the policy has
        timers (returned)."""
        timers = self._timers
        if timers is None:
            return False
        limits_of = self._demand_limits
        for demand in demands:
            limits_of[demand, 0], limits_of[demand, 1] = timers(demand, now)
        return True

    def _job_features(self, c: np.ndarray, now: float, jobs: np.ndarray) -> None:
        """Job features of candidates ``c`` (but 14-16) into the first rows of ``jobs``: the
        readable reference, in numpy (:meth:`_job_features_compiled` computes the same)."""
        e = self.engine
        k = c.size
        g = e.num_gpus[c]
        best = e.best_possible_tier[c]
        starvation = now - e.starve_anchor_s[c]
        run_s = e.run_s[c]
        nw = e.nw_sens(c)
        remaining_ideal = (e.total_iterations[c] - e.done_iters[c]) * e.iter_time_s[c]
        tier = e.tier[c]
        holds = (e.state[c] == RUNNING).astype(np.float32)

        timed = self._candidate_demand_tables(c, now)
        best_free = self._demand_free[g]
        if timed:
            limits = self._demand_limits[g]
            past_machine = starvation >= limits[:, 0]
            past_rack = starvation >= limits[:, 1]
        else:
            past_machine = past_rack = np.zeros(k, dtype=bool)

        view = jobs[:k]
        view[:, 0] = np.log2(1.0 + g) / self._log_cluster
        view[:, 1] = best == 0
        view[:, 2] = best == 1
        view[:, 3] = best == 2
        view[:, 4] = best_free
        # The four times at once: starvation, remaining ideal, remaining estimate, service.
        times = np.empty((4, k))
        times[0] = starvation
        times[1] = remaining_ideal
        times[2] = estimate = ProtectedRemainingPolicy.remaining_estimate_s(e, c)
        times[3] = g * run_s / self._num_gpus
        times = self._time(times)
        view[:, 5] = times[0]
        view[:, 6] = np.minimum(nw, 1.0)
        view[:, 7] = e.done_iters[c] / e.total_iterations[c]
        view[:, 8] = times[1]
        view[:, 9] = times[2]
        view[:, 10] = times[3]
        view[:, 11] = np.minimum(e.preemptions[c], 20) / 20.0
        view[:, 12] = holds
        view[:, 13] = np.where(tier >= 0, (tier + 1) / 3.0, 0.0)
        view[:, 17] = past_machine
        view[:, 18] = past_rack
        view[:, 19] = estimate / max(self.largest_estimate_s(), float(estimate.max()), 1e-9)

    def _job_features_compiled(self, c: np.ndarray, now: float, jobs: np.ndarray, timed: bool) -> None:
        """:meth:`_job_features` by :func:`kernels.queue_job_features`, but the per-demand
        tables (:meth:`_demand_tables`, made for ``c`` already: ``timed`` is its answer) and the
        times' log1p (numpy's, as in the reference: the same values bit for bit). The
        candidates' remaining estimates (seconds) are left in ``_estimates``."""
        e = self.engine
        k = c.size
        times = np.empty((4, k))
        kernels.queue_job_features(
            c,
            now,
            self._lease_s,
            self._num_gpus,
            self.spec_cluster.gpus_per_machine,
            NEVER_RUN_MULTI_MACHINE_NW_SENS,
            self.largest_estimate_s(),
            e._jobf,
            e._jobi,
            e.state,
            self._size_feature,
            self._demand_free,
            self._demand_limits,
            timed,
            jobs,
            times,
            self._estimates,
        )
        times = _leases_shown(times)  # (the kernel divided max(t, 0) by the lease: see _time)
        view = jobs[:k]
        view[:, 5] = times[0]
        view[:, 8] = times[1]
        view[:, 9] = times[2]
        view[:, 10] = times[3]

    def _job_features_cached(
        self, c: np.ndarray, every: np.ndarray, now: float, jobs: np.ndarray, mask: np.ndarray
    ) -> tuple[int, int, int, int]:
        """The job features of candidates ``c`` (but 14-16) into the first rows of ``jobs``,
        1 in ``mask`` there, and the rows shown at the previous pick but empty now cleared;
        returns the summed GPU demand of ``every`` (all the candidates, shown or not), the idle
        GPUs, and the most free GPUs of a machine and of a rack.

        The rows are not rebuilt at every pick. During a pass (same engine pass, same time) a
        candidate's features change only when it is served, and then it is no longer a
        candidate: its row is computed (:meth:`_job_features_compiled`) the first time it is
        shown in the pass and kept by job in ``_rows``. What a pick does change is recomputed
        at every pick for the shown rows, in :func:`kernels.queue_shown_rows`: whether the best
        tier is free (feature 4: the free GPUs moved), the timers (17-18: the auto-tuner may
        have recorded a start) and the share of the largest estimate (19: the candidates
        changed). The values are :meth:`_job_features`', bit for bit."""
        e = self.engine
        cl = e.cluster
        stamp_key = (e.passes, e.now_s)
        if self._rows_of is not e:
            self._rows_of = e
            self._rows = np.zeros((e.n, JOB_DIM), dtype=np.float32)
            self._row_estimate = np.zeros(e.n)
            self._row_stamp = np.full(e.n, -1, dtype=np.int64)
            self._stamp = 0
            self._stamp_key = stamp_key
        elif stamp_key != self._stamp_key:
            self._stamp += 1
            self._stamp_key = stamp_key
        # Per distinct demand of the shown candidates: is its best tier free, and the timers;
        # and the shown candidates whose row is not of this pass yet (stale).
        m, n_stale = kernels.queue_demands(
            c,
            e._jobi,
            self._demand_best,
            self._demand_seen,
            self._demand_list,
            self._demand_best_list,
            self._row_stamp,
            self._stamp,
            self._stale,
            (cl.free_per_machine, cl.free_per_rack, *self._racks_mpr, cl.free_total),
            self._demand_free,
        )
        timed = self._demand_timers(self._demand_list[:m].tolist(), now)
        if n_stale:
            stale = self._stale[:n_stale]
            block = np.zeros((stale.size, JOB_DIM), dtype=np.float32)
            self._job_features_compiled(stale, now, block, timed)
            self._rows[stale] = block
            self._row_estimate[stale] = self._estimates[: stale.size]
            self._row_stamp[stale] = self._stamp
        demand, idle, most_machine, most_rack = kernels.queue_shown_rows(
            c,
            every,
            self._rows,
            self._row_estimate,
            now,
            self.largest_estimate_s(),
            e._jobf,
            e._jobi,
            self._demand_free,
            self._demand_limits,
            timed,
            jobs,
            mask,
            self._shown,
            cl.idle_per_machine,
            cl.free_per_machine,
            cl.free_per_rack,
        )
        return int(demand), int(idle), int(most_machine), int(most_rack)

    def _elapsed_shown(self, now: float, elapsed: float) -> float:
        """Cluster feature 10 (time_elapsed), computed once per time (numpy's log1p, as in
        :meth:`_time`)."""
        cached = self._elapsed_cache
        if cached is not None and cached[0] is self.engine and cached[1] == now:
            return cached[2]
        value = float(self._time(np.float64(elapsed)))
        self._elapsed_cache = (self.engine, now, value)
        return value

    def largest_estimate_s(self) -> float:
        """The largest remaining estimate (job feature 9, in seconds) of any unfinished job,
        running or waiting; 0 when none is left.

        Asked at every pick, it is computed once per engine state: the estimates read
        iterations done and time run, which change only when time moves, and the unfinished
        jobs, which change only when one arrives or finishes -- never during a pass, whose
        picks only move jobs between waiting and running."""
        e = self.engine
        key = (e.passes, e.now_s, e.finished, e._next_arrival)
        cached = self._largest_estimate
        if cached is not None and cached[0] is e and cached[1] == key:
            return cached[2]
        if e.cluster.compiled:  # (the same values: see kernels.queue_job_features)
            value = float(
                kernels.largest_estimate(
                    e.running_jobs(),
                    e.waiting_jobs(),
                    e._jobf,
                    e._jobi,
                    self.spec_cluster.gpus_per_machine,
                    NEVER_RUN_MULTI_MACHINE_NW_SENS,
                )
            )
        else:
            jobs = np.concatenate([e.running_jobs(), e.waiting_jobs()])
            value = float(ProtectedRemainingPolicy.remaining_estimate_s(e, jobs).max()) if jobs.size else 0.0
        self._largest_estimate = (e, key, value)
        return value

    def _job_speeds(self, c: np.ndarray) -> np.ndarray:
        """Job features 14-16 for candidates ``c`` ("observed" or "oracle" ``sensitivity``)."""
        e = self.engine
        if self.sensitivity == "observed":
            return e.speed_seen[c]
        out = np.zeros((len(c), 3))
        for row, j in enumerate(c.tolist()):
            out[row] = self.oracle_speeds(j)
        return out

    def best_tier_speeds(self) -> np.ndarray:
        """Each job's speed factor at its best possible tier (:meth:`oracle_speeds`: its most
        consolidated placement); 1 for a job too big for any representative placement (wider
        than two racks), so that a makespan bound built on them is optimistic, never infinite."""
        best = self.engine.best_possible_tier.tolist()
        speeds = [self.oracle_speeds(j)[best[j]] for j in range(self.engine.n)]
        return np.array([s if s > 0 else 1.0 for s in speeds])

    def oracle_speeds(self, j: int) -> tuple[float, float, float]:
        """Job ``j``'s speed factors at the three tiers (:meth:`_oracle_speeds`), kept by model
        and GPU demand for the episode."""
        e = self.engine
        key = (e.model_index.item(j), e.num_gpus.item(j))
        speeds = self._oracle_cache.get(key)
        if speeds is None:
            speeds = self._oracle_cache[key] = self._oracle_speeds(j)
        return speeds

    def _oracle_speeds(self, j: int) -> tuple[float, float, float]:
        """The latency model's speed factor of a representative placement at each tier job
        ``j`` can fit: its GPUs over the fewest machines, evenly (network: over two racks)."""
        spec = self.spec_cluster
        e = self.engine
        g = int(e.num_gpus[j])
        gpm = spec.gpus_per_machine

        def even(total: int, parts: int) -> list[int]:
            return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]

        def rack_of(total: int, min_machines: int) -> list[int]:
            return even(total, max(min_machines, -(-total // gpm)))

        shapes: list = [None, None, None]
        if g <= gpm:
            shapes[Tier.MACHINE] = ((g,),)
        if 2 <= g <= spec.gpus_per_rack and spec.machines_per_rack >= 2:
            shapes[Tier.RACK] = (tuple(rack_of(g, 2)),)
        if g >= 2 and spec.racks >= 2:
            halves = even(g, 2)
            if max(halves) <= spec.gpus_per_rack:
                shapes[Tier.NETWORK] = tuple(sorted((tuple(rack_of(h, 1)) for h in halves), reverse=True))
        return tuple(0.0 if s is None else e._speed_factor(j, s) for s in shapes)
