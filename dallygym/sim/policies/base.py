"""The scheduling-policy protocol (SPEC §5.5).

A scheduler is a priority order (who is offered GPUs first, and so who keeps them when leases
expire), an offer decision (accept at which tier, or wait) and optional hooks. The engine asks
the policy; the policy never changes engine state itself.

A new policy is one short file: subclass :class:`Policy`, set ``name``, override what differs.
Every method gets the running :class:`~dallygym.sim.engine.Engine` as ``view``: read its per-job
numpy arrays (``num_gpus``, ``arrival_s``, ``done_iters``, ``run_s``, ``total_iterations``,
``iter_time_s``, ``starve_anchor_s``, ...) but never write them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..cluster import Tier, tier_of_shape

if TYPE_CHECKING:  # imported for annotations only: the engine imports this module
    from ..engine import Decision, Engine, Offer, Pick


class Policy:
    """Base class of scheduling policies; by itself it is FIFO with greedy acceptance.

    Override:
      * :meth:`priority` -- sort keys of the given jobs, lower is offered first (ties: earlier
        arrival, then lower job index);
      * :meth:`decide` -- accept an offer at one of ``offer.tiers`` or wait (``None``); it also
        answers renewal offers (``offer.renewal`` set: a running job whose lease expired, see
        :class:`~dallygym.sim.engine.EngineConfig`), where in ``"upgrade"`` mode accepting moves the
        job to a strictly better tier and ``None`` keeps its GPUs;
      * optionally :meth:`place` (choose the GPUs), :meth:`migrate` (move a running job at a
        round boundary), :meth:`on_start` (bookkeeping when any job starts), :meth:`reset`.
    """

    name: ClassVar[str] = "base"
    #: Whether :meth:`decide` may accept ``"upgrade"`` renewal offers. A policy that never
    #: moves running jobs this way (it keeps placements, or has its own :meth:`migrate`) sets
    #: False: the engine then makes it no such offers and can step over more round boundaries.
    accepts_upgrades: ClassVar[bool] = True
    #: The offers to waiting jobs that :meth:`decide` answers with ``offer.best_tier`` whatever
    #: else holds: ``"best"`` every one, ``"best-possible"`` those whose best tier is the best
    #: the job could ever have, ``"best-possible-only"`` those, and every other offer it
    #: declines (None), None: none known. :func:`run_policy` lets the engine answer those
    #: itself, unasked (``Engine.decisions(auto_accept=...)``): the same run, fewer calls. It
    #: describes the ``decide`` of the class that sets it (with ``"best-possible-only"``, and
    #: the timers it reads); for a subclass that overrides ``decide`` without setting it again,
    #: :func:`auto_accept_of` gives None.
    auto_accept: ClassVar[str | None] = "best"
    #: Whether :meth:`on_start` reads nothing of the engine but ``view.num_gpus`` and
    #: ``view.placement_kind``, so that the engine may call it for a batch of starts just after
    #: making them (a compiled pass) rather than at each. Like ``auto_accept``, it describes
    #: the ``on_start`` of the class that sets it.
    batched_on_start: ClassVar[bool] = False
    #: The priority order of :meth:`priority`, if the engine can compute it itself: ``"arrival"``
    #: (these keys), ``"nw_sens"`` (increasing ``view.nw_sens(jobs)``, Dally's), or one of the
    #: remaining-time orders of :data:`PRIORITY_KEYS`; None: ask :meth:`priority`. Like
    #: ``auto_accept``, it describes the ``priority`` of the class that sets it.
    priority_keys: ClassVar[str | None] = "arrival"

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

    def pick(self, pick: Pick, view: Engine) -> int | None:
        """Which candidate of a :class:`~dallygym.sim.engine.Pick` is served next (engines built with
        ``agent_picks``), or None to stop the pass. The default serves ``pick.candidates[0]``,
        the one the priority order puts first."""
        return pick.candidates[0]

    def answer(self, decision: Decision, view: Engine) -> Tier | int | None:
        """Answer any decision the engine asks, by the method its ``hook`` names (``decide``
        for an :class:`~dallygym.sim.engine.Offer`, :meth:`pick` for a
        :class:`~dallygym.sim.engine.Pick`). Override those, not this."""
        return getattr(self, decision.hook)(decision, view)

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

    def on_start_batch(
        self, view: Engine, jobs: np.ndarray, tiers: np.ndarray, starvation_s: np.ndarray, now_s: np.ndarray
    ) -> None:
        """Optional: :meth:`on_start` for several starts at once, in their order (arrays: the
        job indices, their tiers as ints, their starvation and start times), which the
        compiled event loop calls for the starts it made (see :attr:`batched_on_start`) when
        the class that gives the policy its ``on_start`` gives it this too. It must do exactly
        what those ``on_start`` calls would; the engine calls ``on_start`` per start
        otherwise."""
        for j, level, waited, at in zip(jobs.tolist(), tiers.tolist(), starvation_s.tolist(), now_s.tolist()):
            self.on_start(view, j, Tier(level), waited, at)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def start_batch_hook(policy: Policy):
    """``policy.on_start_batch`` if the class giving ``policy`` its ``on_start`` also gives it
    its ``on_start_batch`` (and the instance replaces neither), else None."""
    cls = type(policy)
    instance = getattr(policy, "__dict__", {})
    if "on_start" in instance or "on_start_batch" in instance:
        return None
    owner = next(c for c in cls.__mro__ if "on_start" in vars(c))
    if "on_start_batch" not in vars(owner) or owner is Policy:
        return None
    return policy.on_start_batch


def _declared(policy: Policy, flag: str, method: str):
    """``flag`` of ``policy`` if the class that sets it also gives ``policy`` its ``method``
    (and the instance does not replace it), else None."""
    cls = type(policy)
    owner = next(c for c in cls.__mro__ if flag in vars(c))
    if method in getattr(policy, "__dict__", {}) or getattr(cls, method) is not getattr(owner, method):
        return None
    return vars(owner)[flag]


def auto_accept_of(policy: Policy) -> str | None:
    """Which offers ``policy.decide`` is known to answer with their best tier (see
    :attr:`Policy.auto_accept`), or None."""
    return _declared(policy, "auto_accept", "decide")


#: The priority orders the engine computes itself (``Policy.priority_keys``), in the order of
#: ``kernels.KEYS_*``: arrival; increasing Nw_sens (Dally's); the protected remaining-time
#: order (:class:`~dallygym.sim.policies.protected.ProtectedRemainingPolicy`'s); GPU demand x
#: remaining estimate (:class:`~dallygym.sim.policies.smallest_demand.SmallestDemandRemainingPolicy`'s);
#: a learned network's keys over the queue features (:class:`~dallygym.sim.policies.tuned.NetPriorityPolicy`'s,
#: from the parameters its ``compiled_keys`` gives the engine; when it gives none, the engine asks
#: :meth:`Policy.priority`).
PRIORITY_KEYS = ("arrival", "nw_sens", "protected-remaining", "demand-remaining", "net")


def priority_keys_of(policy: Policy) -> str | None:
    """The priority order the engine may compute for ``policy`` itself (see
    :attr:`Policy.priority_keys`), or None."""
    keys = _declared(policy, "priority_keys", "priority")
    if keys is not None and keys not in PRIORITY_KEYS:
        named = ", ".join(map(repr, PRIORITY_KEYS))
        raise ValueError(f"{type(policy).__name__}.priority_keys is {keys!r}; use one of {named} or None")
    if keys == "net" and not callable(getattr(policy, "compiled_keys", None)):
        raise ValueError(
            f"{type(policy).__name__}.priority_keys is 'net', which needs a compiled_keys(view) method giving the "
            "network's parameters (see NetPriorityPolicy)"
        )
    return keys


def hooks_on_start(policy: Policy) -> bool:
    """Whether ``policy`` has an :meth:`Policy.on_start` that does anything."""
    return type(policy).on_start is not Policy.on_start or "on_start" in getattr(policy, "__dict__", {})


def starts_in_batches(policy: Policy) -> bool:
    """Whether the engine may make starts without asking ``policy`` in between: it places
    jobs by the engine's best fit (no :meth:`Policy.place` of its own) and its
    :meth:`Policy.on_start`, if any, may be called after a batch of starts (see
    :attr:`Policy.batched_on_start`)."""
    if type(policy).place is not Policy.place or "place" in getattr(policy, "__dict__", {}):
        return False
    return not hooks_on_start(policy) or bool(_declared(policy, "batched_on_start", "on_start"))


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
