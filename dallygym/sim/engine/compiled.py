"""The glue to the compiled kernels (:mod:`dallygym.sim.kernels`): the event loop's arguments and
state, a pass opened compiled, compiled turns and their log."""

from __future__ import annotations

import heapq
import struct
from typing import TYPE_CHECKING

import numpy as np

from .. import kernels
from .decisions import RUNNING, TIERS, WAITING

if TYPE_CHECKING:
    pass

from .config import RENEWAL_MODES

#: Engine._run_events's scalars in the compiled loop's int and float state (kernels.LI_* up to
#: LI_N_LOG included, kernels.LF_*), native int64 and float64.
_LI_PACK = struct.Struct(f"={kernels.LI_N_LOG + 1}q")
_LF_PACK = struct.Struct(f"={kernels.LF_SIZE}d")
#: The pass the compiled loop stopped in: kernels.LI_BOUNDARY up to LI_ANSWER.
_LI_PASS = struct.Struct(f"={kernels.LI_ANSWER - kernels.LI_BOUNDARY + 1}q")


#: The :func:`~dallygym.sim.kernels.net_keys` bundle of an engine whose policy's keys are not a
#: network's: arrays of its types, never read.
_NO_NET = (
    np.zeros((0, 0)),
    np.zeros(0),
    np.zeros(0),
    np.zeros((0, 2)),
    np.zeros(0),
    np.zeros(kernels.NK_SIZE),
    np.zeros((0, 0), dtype=np.float32),
    np.zeros((4, 0)),
    np.zeros(0),
    np.zeros(0, dtype=bool),
    np.zeros(0),
    np.zeros(0, dtype=np.int64),
)


class CompiledPath:
    """The parts of :class:`~dallygym.sim.engine.Engine` that run the compiled kernels and read back what they did."""

    def _make_loop_args(self) -> tuple:
        """The compiled loop's argument bundles (:func:`dallygym.sim.kernels.run_events`) but the
        speed tables': the same objects from the run's start to its end."""
        c = self.cluster
        run = (
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
            self._links is not None,
        )
        jobs = (self._jobf, self._jobi, self.state, self.speed_seen, self.tier_s, self.placements_by_tier)
        cluster = (self._gpu_store, c.buffer, *self._dims)
        loop = (self._sets, self._wkey, self._li, self._lf, self._plan, self._expired_buf)
        logs = (self._renewed_log, self._turn_log, self._log_f, self._starts, self._starts_f)
        records = (self._rec_i, self._rec_f, self._partials, self._timeline)
        return run, jobs, cluster, loop, logs, records

    def _net_args(self) -> tuple:
        """The bundle of :func:`dallygym.sim.kernels.net_keys` (the network's parameters from
        the policy's ``compiled_keys``, and scratch), made once per engine; for any other
        priority order, empty arrays of its types."""
        net = self._net
        if net is None:
            if self._net_params is None:
                net = _NO_NET
            else:
                w, b, v, limits, size_feature, consts = self._net_params
                n = self.n
                rows = np.zeros((n, int(consts[kernels.NK_FEATURES])), dtype=np.float32)
                free_of = np.zeros(self.spec.num_gpus + 1, dtype=bool)
                scratch = (rows, np.zeros((4, n)), np.zeros(n), free_of, np.zeros(n), np.zeros(n, dtype=np.int64))
                net = (w, b, v, limits, size_feature, consts, *scratch)
            self._net = net
        return net

    def _li_pass(self) -> tuple[int, ...]:
        """The pass the compiled loop stopped in: kernels.LI_BOUNDARY up to LI_ANSWER."""
        return _LI_PASS.unpack_from(self._li, 8 * kernels.LI_BOUNDARY)

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
        if self._links is not None:  # (starts and ends made in Python since it last stopped)
            li[kernels.LI_LINKS_CHANGED] = self._links_changed
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
        run, jobs, cluster, loop, logs, records = self._loop_args
        speeds = (tables.machine, tables.rows, tables.seq, tables.speed, tables.slots)
        stop = kernels.run_events(resume, run, jobs, speeds, cluster, loop, logs, records, self._net_args())
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

    def _open_pass(self, t: float, boundary: bool):
        """The start of a pass, compiled (:func:`dallygym.sim.kernels.open_pass`): the pass's
        candidates and visit plan ``(cand, queue, least_ahead, expired_pos)``, or None if
        there is nothing to visit. ``cand`` is made only for a policy that may migrate (None
        otherwise: nobody reads it)."""
        c = self.cluster
        racks, mpr, gpm = self._dims
        waiting = self.waiting_jobs()
        plan = self._plan
        status, n_cand, start, n_ranked, n_queue, n_expired_pos, n_expired, count = kernels.open_pass(
            waiting,
            self.running_jobs(),
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
            t,
            self._net_args(),
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

    def _compiled_turns(
        self, queue: np.ndarray, least_ahead: np.ndarray, expired_pos: np.ndarray, pos: int, t: float
    ) -> tuple[int, bool]:
        """The turns of a pass from position ``pos`` of its visit plan, compiled
        (:func:`dallygym.sim.kernels.pass_turns`), up to the first that needs Python: its position
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
            (self._jobf, self._jobi, self.state, self.speed_seen, self.tier_s, self.placements_by_tier),
            (tables.machine, tables.rows, tables.seq, tables.speed, tables.slots),
            (self._gpu_store, c.buffer, *self._dims),
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
            if self._links is not None:
                self._links_from_log(log)
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
                    on_start(self, j, TIERS[level], w, a)
            return
        heap = self._finish_heap
        expired = self.expired_unvisited
        shape_entry = self._shape_entry
        links = self._links is not None
        for code, j, entry, _ in log.tolist():
            if code == kernels.LOG_PREEMPTED:  # (a pass logs no completions)
                if declined:
                    declined.pop(j, None)
                expired.discard(j)
                self._note_state(j, RUNNING, WAITING)
                if links:
                    self._leave_links(j)
                continue
            # a start
            self._note_state(j, WAITING, RUNNING)
            if code == kernels.LOG_STARTED:
                shape_entry[j] = entry
            if heap is not None:
                heapq.heappush(heap, (self.finish_s.item(j), j))
            if links:
                self._join_started(j)
            if on_start is not None:
                on_start(self, j, TIERS[self.tier.item(j)], t - self.starve_anchor_s.item(j), t)

    def _links_from_log(self, log: np.ndarray) -> None:
        """The links of the placements kernels.run_events started and ended (its log, in
        order): what :meth:`_start` and :meth:`_close_segment` do for them in Python."""
        # Every end, and the starts of placements across machines (the rest use no shared
        # link). The tiers are read after the whole log: a start across machines is its job's
        # last row (the loop stops at the next event), so the tier read is that start's; an
        # earlier start of the same job, on one machine, is joined and left again by its rows.
        codes, jobs = log[:, 0], log[:, 1]
        ends = (codes == kernels.LOG_COMPLETED) | (codes == kernels.LOG_PREEMPTED)
        crossed = ends | (self._last_tier[jobs] > 0)
        for end, j in zip(ends[crossed].tolist(), jobs[crossed].tolist()):
            if end:
                self._leave_links(j)
            else:
                self._join_started(j)

    def _join_started(self, j: int) -> None:
        """Job ``j``, just started by a kernel (its GPUs and shape written), joins its links
        if its placement crosses machines."""
        if self._last_tier.item(j) > 0:
            off = self._gpu_off.item(j)
            self._join_links(j, self._gpu_store[off : off + self._num_gpus_list[j]], self._last_shape_of(j))
