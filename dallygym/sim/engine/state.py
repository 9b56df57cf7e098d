"""State changes of jobs -- start, preemption, completion, progress -- and the run's records
(timeline, busy GPU time)."""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import numpy as np

from .. import kernels
from ..cluster import Tier, tier_of_shape
from .decisions import DONE, RUNNING, WAITING, EngineError

if TYPE_CHECKING:
    pass


class JobState:
    """The parts of :class:`~dallygym.sim.engine.Engine` that change jobs' states and record the run."""

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
        if self._links is not None:
            self._leave_links(j)

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
                if self._links is not None:
                    self._leave_links(j)
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
        if self._links is not None:
            self._join_links(j, gpus, shape)
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


#: Add ``x`` to the non-overlapping partial sums ``partials[:n]`` without rounding (Shewchuk's
#: algorithm, the one inside ``math.fsum``), so a running total costs O(1) memory and
#: ``math.fsum(partials[:n])`` is the correctly rounded sum of everything added; returns the new
#: number of partials (``partials`` must have room for one more). The compiled kernel's own
#: Python code (one source for both paths).
_add_exact = getattr(kernels.add_exact, "py_func", kernels.add_exact)
