"""The scheduling-policy protocol (SPEC §5.5).

A scheduler is a priority order (who is offered GPUs first, and so who keeps them when leases
expire), an offer decision (accept at which tier, or wait) and optional hooks. The engine asks
the policy; the policy never changes engine state itself.

A new policy is one short file: subclass :class:`Policy`, set ``name``, override what differs.
Every method gets the running :class:`~dallygym.engine.Engine` as ``view``: read its per-job
numpy arrays (``num_gpus``, ``arrival_s``, ``done_iters``, ``run_s``, ``total_iterations``,
``iter_time_s``, ``starve_anchor_s``, ...) but never write them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..cluster import Tier, tier_of_shape

if TYPE_CHECKING:  # imported for annotations only: the engine imports this module
    from ..engine import Engine, Offer


class Policy:
    """Base class of scheduling policies; by itself it is FIFO with greedy acceptance.

    Override:
      * :meth:`priority` -- sort keys of the given jobs, lower is offered first (ties: earlier
        arrival, then lower job index);
      * :meth:`decide` -- accept an offer at one of ``offer.tiers`` or wait (``None``); it also
        answers renewal offers (``offer.renewal`` set: a running job whose lease expired, see
        :class:`~dallygym.engine.EngineConfig`), where in ``"upgrade"`` mode accepting moves the
        job to a strictly better tier and ``None`` keeps its GPUs;
      * optionally :meth:`place` (choose the GPUs), :meth:`migrate` (move a running job at a
        round boundary), :meth:`on_start` (bookkeeping when any job starts), :meth:`reset`.
    """

    name: ClassVar[str] = "base"
    #: Whether :meth:`decide` may accept ``"upgrade"`` renewal offers. A policy that never
    #: moves running jobs this way (it keeps placements, or has its own :meth:`migrate`) sets
    #: False: the engine then makes it no such offers and can step over more round boundaries.
    accepts_upgrades: ClassVar[bool] = True

    def reset(self, view: Engine, rng: np.random.Generator) -> None:
        """Called once when a run starts; ``rng`` is the run's seeded generator."""

    def priority(self, view: Engine, jobs: np.ndarray) -> np.ndarray:
        """Sort keys for ``jobs`` (job indices); lower keys are offered first."""
        return view.arrival_s[jobs]

    def decide(self, offer: Offer, view: Engine) -> Tier | None:
        """Accept the offer at a tier from ``offer.tiers``, or return None to keep waiting.

        The default accepts the best tier offered, renewal offers included (an ``"upgrade"``
        renewal only offers tiers better than the job's own, so it moves to the best one)."""
        return offer.best_tier

    def place(self, view: Engine, job: int, tier: Tier) -> np.ndarray | None:
        """GPU ids for ``job`` at ``tier``, or None for the engine's best-fit placement."""
        return None

    def migrate(self, view: Engine, job: int, now_s: float) -> Tier | None:
        """At a round boundary, a running job whose GPUs are still its own may move.

        Return a tier better than its current one to move there (the engine checks that
        such a placement is free, counting the job's own GPUs as free), or None to stay.
        """
        return None

    def may_migrate(self, view: Engine) -> bool:
        """Could :meth:`migrate` move any running job now? The engine steps over round
        boundaries at which nothing can change; a policy that migrates should return False when
        no job could move (the default is True exactly when :meth:`migrate` is overridden)."""
        return type(self).migrate is not Policy.migrate

    def on_start(self, view: Engine, job: int, tier: Tier, starvation_s: float, now_s: float) -> None:
        """Called whenever a job is given a new placement (not when a lease is renewed on the
        same GPUs). ``view.placement_kind`` says why: ``"new"`` (a waiting job accepted an
        offer), ``"upgrade"`` / ``"rebid"`` (a renewal offer moved a running job) or
        ``"migration"`` (:meth:`migrate`)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class PlannedPlacementPolicy(Policy):
    """A policy that chooses its GPUs when it decides (Tiresias's consolidation, Gandiva's
    affinity): :meth:`plan` remembers the GPUs and returns their tier for ``decide`` to
    accept; the engine's following :meth:`place` call for that job gets them back."""

    _plan: tuple[int, float, Tier, np.ndarray] | None = None

    def plan(self, offer: "Offer", view: "Engine", gpus: np.ndarray) -> Tier | None:
        """Remember ``gpus`` for ``offer``'s job; their tier, or None if it is not offered."""
        tier = tier_of_shape(view.spec.shape_of(gpus))
        if tier not in offer.tiers:
            self._plan = None
            return None
        self._plan = (offer.job, offer.now_s, tier, gpus)
        return tier

    def place(self, view: "Engine", job: int, tier: Tier) -> np.ndarray | None:
        plan, self._plan = self._plan, None
        if plan is not None and plan[0] == job and plan[1] == view.now_s and plan[2] == tier:
            return plan[3]
        return None  # not planned (e.g. a migration): the engine's best fit
