"""Gandiva (Xiao et al., OSDI'18) as the Dally paper characterises it (§III, §V-C; SPEC §5.3).

Network-agnostic: jobs are admitted FIFO (priority = arrival time) and take whatever GPUs are
free, never waiting for a better tier. The placement of a job of ``g`` GPUs:

1. ``g`` fits a machine: a machine already running a job of the same demand ``g`` with ``g``
   free GPUs (Gandiva's affinity: same-size jobs packed together); else any machine with ``g``
   free GPUs; else any free GPUs. Among several such machines the choice is random.
2. ``g`` larger than a machine: any free GPUs.

"Any free GPUs" is a random choice among the free GPUs. The reference simulator drew it from an
unseeded shuffle; here every draw comes from the run's seeded generator (``reset``), so a run is
reproducible and different seeds give different placements. "Random" is uniform over machines
at steps 1 and over GPUs at the last step. Affinity is judged on the GPUs currently held.

During a round-boundary pass, GPUs of lease-expired jobs not yet visited count as free (the
engine's lease mechanism: an earlier-arrived waiting job may claim them). Gandiva does not
preempt to place a job when it can avoid it, so every step above is tried first on idle GPUs
only (held by nobody) and only then on all free GPUs; and "any free GPUs" takes idle GPUs first,
then those of the latest-arrived lease-expired jobs.

Because the engine asks for a tier before the GPUs, :meth:`decide` computes the intended
placement, answers its tier, and :meth:`place` hands back the same GPUs (cached by job and time).
If the engine gives the job back its own previous GPUs instead (it does when they are free at
the accepted tier), that placement stands.

Order: FIFO by arrival (ties by trace order). The Dally paper's reference simulator ordered
Gandiva's jobs most recently started first, never-started last; the Gandiva paper admits jobs
FIFO, which is followed here.

Lease renewal (``EngineConfig.renewal``): in ``"upgrade"`` mode a running job keeps its GPUs
through the pass (Gandiva improves placements by its migration below, not by renewal offers);
in ``"rebid"`` mode it bids again like a waiting job.

Time-slicing (Gandiva's suspend-resume under oversubscription) is the variant
:class:`GandivaTimeslicePolicy` (``gandiva-timeslice``); this class, like the Dally paper's
characterisation, has migration only.

Migration (Gandiva's introspective migration, Dally paper §V-C: "migrating jobs to more
favorable GPU consolidation whenever resources become available"): at every round boundary,
after the pass, a running job spread over several machines moves to the most consolidated tier
free for it (counting its own GPUs as free) when that is better than its current one; the
engine places it there by its deterministic best fit, counts a migration and charges
``restart_overhead_s``.
"""

from __future__ import annotations

import numpy as np

from ..cluster import Tier
from .base import PlannedPlacementPolicy

_IDLE = -1  # ClusterState.mark of a free GPU nobody held at the last round boundary
_RUNNING_STATE = 2  # engine.RUNNING (not imported: the engine imports the policies)


class GandivaPolicy(PlannedPlacementPolicy):
    """FIFO, greedy, network-agnostic placement with affinity and migration (SPEC §5.3)."""

    name = "gandiva"
    accepts_upgrades = False  # running jobs keep their placement at lease renewal

    def __init__(self) -> None:
        self.rng: np.random.Generator | None = None

    def reset(self, view, rng) -> None:
        self.rng = rng
        self._plan = None
        self._may_key = None
        self._may_value = False

    # priority: the base class's arrival order (FIFO admission).

    def decide(self, offer, view):
        if offer.renewal == "upgrade":
            return None  # Gandiva moves running jobs by its own migration (after the pass)
        tier = self.plan(offer, view, self.placement(view, offer.job))
        return offer.best_tier if tier is None else tier  # None cannot happen: the GPUs are free now

    def may_migrate(self, view) -> bool:
        """Exactly: would :meth:`migrate` move some running job now? (The engine steps over
        round boundaries at which nothing can change, so this decides how many passes a run
        makes.) Cached until the cluster's GPUs change hands."""
        c = view.cluster
        key = (id(c), c.version)
        if key == self._may_key:
            return self._may_value
        value = c.free_total > 0 and view.upgrade_possible()
        self._may_key, self._may_value = key, value
        return value

    def migrate(self, view, job, now_s):
        current = int(view.tier[job])
        if current == Tier.MACHINE or view.cluster.free_total == 0:
            return None
        best = view.best_tier_with_own(job)
        return best if best < current else None

    # --- placement -------------------------------------------------------------------

    def placement(self, view, job: int) -> np.ndarray:
        """The GPUs Gandiva gives ``job`` now (module docstring); draws from the run's rng."""
        c = view.cluster
        spec = view.spec
        g = int(view.num_gpus[job])
        if g <= spec.gpus_per_machine:
            for counts in (c.idle_per_machine, c.free_per_machine):
                room = counts >= g
                if room.any():
                    pool = room & self._affinity(view, g)
                    machines = np.flatnonzero(pool if pool.any() else room)
                    return c.gpus_on_machine(int(self.rng.choice(machines)), g)
                if counts is c.idle_per_machine and int(counts.sum()) >= g:
                    break  # scattered idle GPUs suffice: take them rather than displace a job
        return self._any_free(c, g)

    def _affinity(self, view, g: int) -> np.ndarray:
        """Per machine: does it hold a GPU of a running job of demand ``g``?"""
        owner = view.cluster.owner
        held = np.flatnonzero(owner >= 0)
        same = held[view.num_gpus[owner[held]] == g]
        return np.bincount(view.spec.machine_of_gpu[same], minlength=view.spec.num_machines) > 0

    def _any_free(self, c, g: int) -> np.ndarray:
        """``g`` free GPUs at random: idle ones first, then the lowest-priority reclaimable."""
        free = self.rng.permutation(np.flatnonzero(c.owner == -1))
        marks = c.mark[free]
        key = np.where(marks == _IDLE, np.iinfo(np.int64).max, marks)
        return free[np.argsort(-key, kind="stable")[:g]]


class GandivaTimeslicePolicy(GandivaPolicy):
    """Gandiva with suspend-resume time-slicing (Xiao et al., OSDI'18, §3-4), at lease granularity.

    Gandiva's answer to oversubscription is to time-slice: a job that finds no free GPUs is
    not left waiting behind the running ones; running jobs are suspended (checkpointed) and
    resumed in turn, and jobs of the same size are packed onto the same GPUs so that one can be
    swapped for another. The engine gives every GPU to one job at a time and ends every lease
    at a round boundary, so the model here is suspend-resume at lease boundaries, one lease as
    the quantum:

    * **Turn order** (the priority): waiting jobs first, the one waiting longest first (since
      its arrival, or since it was last suspended); then the lease-expired running jobs, the
      one that started its current turn most recently first. So at a boundary, the jobs that
      have run longest without a break are the first whose GPUs a waiting job takes: round
      robin.
    * **Placement**: Gandiva's (:meth:`GandivaPolicy.placement`) when the idle GPUs (held by
      nobody, not up for renewal) suffice. Otherwise, at a round boundary, the waiting job
      takes over the whole GPU set of a lease-expired running job *of the same GPU demand* --
      the one latest in the turn order -- which is suspended (preempted; its progress is
      kept): the two now share those GPUs, one lease each in turn, so each progresses at about
      half its speed while two share. If no job of its size is up for renewal, it takes the
      free GPUs Gandiva's placement gives (idle first, then those of the jobs latest in the
      turn order). A job that arrived or was suspended at this very instant takes idle GPUs
      only -- it has had no wait, so no turn is due to it, and a suspended job does not in
      turn suspend another -- and waits for the next boundary otherwise.
    * Migration and affinity are Gandiva's, unchanged.

    Limits: the quantum is the lease (1 h by default; Gandiva's is about a minute), so two jobs
    sharing GPUs alternate whole leases rather than interleave within one; there is no
    co-running of two jobs on one GPU at once (no packing by memory or utilisation, Gandiva's
    "packing" of jobs on the same GPU concurrently), no profiling of whether sharing pays off,
    and a suspend-resume costs ``restart_overhead_s`` only when the job comes back on other
    GPUs (the engine's rule; default 0, Gandiva reports ~100 ms-1 s). Between boundaries
    (arrivals, completions) only idle GPUs are taken, so a newly arrived job that finds none
    waits for the next boundary.
    """

    name = "gandiva-timeslice"
    priority_keys = None  # priority() below: turn order

    def priority(self, view, jobs):
        now = view.now_s
        running = view.state[jobs] == _RUNNING_STATE
        waited = now - view.starve_anchor_s[jobs]  # a waiting job: how long since it last ran (or arrived)
        stint = now - view.hold_start_s[jobs]  # a running job: how long its current turn has lasted
        return np.where(running, stint, -waited)

    def decide(self, offer, view):
        if offer.renewal == "upgrade":
            return None
        gpus = self.placement(view, offer.job)
        if gpus is None:
            return None  # no turn yet: it has not waited at all (see placement)
        tier = self.plan(offer, view, gpus)
        return offer.best_tier if tier is None else tier

    def placement(self, view, job: int) -> np.ndarray | None:
        """Gandiva's placement on idle GPUs if they suffice; else, for a job that has waited
        (its starvation time is positive), a same-size job's turn or Gandiva's placement on the
        free GPUs; else None: a job that arrived or was suspended just now takes idle GPUs
        only (a suspended job does not suspend another in the same pass)."""
        c = view.cluster
        g = int(view.num_gpus[job])
        if int(c.idle_per_machine.sum()) < g:
            if not view.now_s > view.starve_anchor_s[job]:
                return None
            swap = self._same_size_turn(view, g)
            if swap is not None:
                return swap
        return super().placement(view, job)

    def _same_size_turn(self, view, g: int) -> np.ndarray | None:
        """The GPUs of the lease-expired job of demand ``g`` latest in the turn order whose
        GPUs are all still free (unclaimed in this pass), or None."""
        c = view.cluster
        best, best_rank = None, None
        for j in sorted(view.expired_unvisited):
            if int(view.num_gpus[j]) != g:
                continue
            gpus = view.gpus[j]
            if gpus is None or not (c.owner[gpus] == -1).all():
                continue
            rank = int(c.mark[gpus].max())
            if best_rank is None or rank > best_rank:
                best, best_rank = gpus, rank
        return best
