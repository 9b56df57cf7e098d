"""A scheduling pass in Python, the reference semantics (SPEC §4): opening it (priority order,
expired leases, the visit plan), the offers and the tiers free, renewals in place, migrations."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import kernels
from ..cluster import Tier
from .decisions import RUNNING, TIERS, WAITING, EngineError, Offer

if TYPE_CHECKING:
    pass


_largest = np.maximum.reduce  # ndarray.max() without its Python-level wrapper
_MACHINE_ONLY = (Tier.MACHINE,)
_NO_DEMAND = np.iinfo(np.int64).max  # in a pass's demand list: an expired lease, not a waiting job


class Passes:
    """The parts of :class:`~dallygym.sim.engine.Engine` that open and take a pass in Python."""

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
        return TIERS[self._best_tier_in(self._free_with_own(j), self._num_gpus_list[j])]

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
        or None (it does not fit, or, with ``auto_accept="best-possible-only"``, the caller
        would decline: it waits)."""
        g = self._num_gpus_list[j]
        if g > self.cluster.free_total:
            return None
        tiers = self._offer_tiers(g)
        if not tiers:
            return None
        auto = self._auto
        if auto and (auto == kernels.AUTO_BEST or tiers[0] is self._best_tier_list[j]):
            return tiers[0]
        if auto == kernels.AUTO_BEST_POSSIBLE_ONLY:
            return None
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
        return TIERS[int(answer)]

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

    #: Renew in place several lease-expired jobs at once when nothing happens between their
    #: turns (:meth:`_renew_in_place`). False: every turn is taken alone, through
    #: :meth:`_visit` -- the plain reference the tests hold the fast path to, result for result.
    renew_together = True

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
