"""What the engine asks and how it answers back: the decisions (:class:`Offer`, :class:`Pick`,
and the :class:`Decision` protocol every kind follows), the error a wrong answer raises, and the
job states the engine's tables hold. The engine (:mod:`dallygym.sim.engine`) and its resumable turns
(:mod:`dallygym.sim.engine.turns`) both speak these; ``dallygym.sim.engine`` re-exports them."""

from __future__ import annotations

from typing import ClassVar, Protocol

from ..cluster import Tier

#: A job's state in the engine's ``state`` array.
PENDING, WAITING, RUNNING, DONE = 0, 1, 2, 3
#: Tier by index, without enum lookups.
TIERS = (Tier.MACHINE, Tier.RACK, Tier.NETWORK)


class EngineError(RuntimeError):
    """A policy or agent answered the engine with something it cannot carry out."""


class Decision(Protocol):
    """What the engine asks (:meth:`Engine.next_decision`): an :class:`Offer` or a :class:`Pick`.

    ``kind`` names it; ``hook`` names the :class:`~dallygym.sim.policies.Policy` method that answers
    it, so :meth:`Policy.answer` (and with it :func:`run_policy` and the environments' offer
    rules) answers a kind it has never seen by that method alone. A new kind is a class with
    these two attributes, the engine code that asks it, that policy method (with a default on
    ``Policy``) and, if an environment shows it to an agent, that environment's branch.
    """

    kind: ClassVar[str]
    hook: ClassVar[str]


class Offer:
    """The free GPUs, summarised per tier, offered to one job (SPEC §4).

    Most offers go to a waiting job. At a round boundary a running job whose lease expired may
    get one too (a *renewal offer*, see :attr:`EngineConfig.renewal`): then ``renewal`` says
    which kind and ``current_tier`` is the tier it holds now.

    Attributes:
        job: job index in the engine's arrays.
        job_id: the job's id in the trace.
        num_gpus: its gang size.
        now_s: simulation time of the offer.
        starvation_s: now − (arrival, or the time it last lost its GPUs); 0 for a ``"rebid"``
            renewal (its clock restarts at the boundary).
        tiers: the tiers at which a placement is free now, most consolidated first. For an
            ``"upgrade"`` renewal only those strictly better than ``current_tier``.
        best_tier: ``tiers[0]``, the most consolidated tier available now.
        best_possible_tier: the most consolidated tier this job could ever have on this
            cluster (MACHINE if it fits a machine, RACK if it fits a rack, else NETWORK).
        current_tier: the tier of the GPUs the job holds (renewal offers), or None.
        renewal: None for a waiting job; ``"upgrade"`` (waiting keeps its GPUs; accepting
            moves it) or ``"rebid"`` (waiting gives its GPUs up) for a renewal offer.
    """

    #: What every decision has (see :class:`Decision`): its kind, and the name of the
    #: :class:`~dallygym.sim.policies.Policy` method that answers it (:meth:`Policy.answer`).
    kind: ClassVar[str] = "offer"
    hook: ClassVar[str] = "decide"

    __slots__ = (
        "best_possible_tier",
        "best_tier",
        "current_tier",
        "job",
        "job_id",
        "now_s",
        "num_gpus",
        "renewal",
        "starvation_s",
        "tiers",
    )

    def __init__(
        self, job, job_id, num_gpus, now_s, starvation_s, tiers, best_possible_tier, current_tier=None, renewal=None
    ):
        self.job = job
        self.job_id = job_id
        self.num_gpus = num_gpus
        self.now_s = now_s
        self.starvation_s = starvation_s
        self.tiers = tiers
        self.best_tier = tiers[0]
        self.best_possible_tier = best_possible_tier
        self.current_tier = current_tier
        self.renewal = renewal

    @property
    def is_choice(self) -> bool:
        """True when waiting is a real choice: the job's best possible tier is not free now."""
        return self.best_tier != self.best_possible_tier

    @property
    def is_renewal(self) -> bool:
        """True for an offer to a running job whose lease expired (it holds GPUs)."""
        return self.renewal is not None

    def __repr__(self) -> str:
        tiers = ",".join(t.label for t in self.tiers)
        extra = f", renewal={self.renewal}, current_tier={self.current_tier.label}" if self.renewal else ""
        return (
            f"Offer(job_id={self.job_id}, num_gpus={self.num_gpus}, now_s={self.now_s:g}, "
            f"starvation_s={self.starvation_s:g}, tiers=[{tiers}]{extra})"
        )


class Pick:
    """A scheduling pass in which the order matters: which candidate is served next?

    Made only when the engine was built with ``agent_picks=True`` (``DallyQueue-v0``); a native
    run visits jobs in its policy's priority order and never makes one. A pass's order matters
    while the free GPUs -- at a round boundary counting those of lease-expired jobs not yet
    served, which anyone may claim -- cannot serve every candidate that fits: their summed GPU
    demand exceeds the free GPUs, and there are at least two.

    Answer with a job index from ``candidates``: that job takes its turn now, exactly as in a
    native pass -- a waiting job gets an offer (answered by the engine's policy, see
    :class:`Offer`), a lease-expired job renews its lease if nobody claimed its GPUs (or is
    preempted and then offered the free GPUs). Or answer ``None`` to stop the pass (only when
    ``may_stop``): the remaining waiting jobs wait for the next pass, and each remaining
    lease-expired job keeps its GPUs if none was claimed (no renewal offer) or is preempted.

    Attributes:
        now_s: simulation time of the pass.
        candidates: job indices in the policy's priority order: waiting jobs that fit in the
            free GPUs and lease-expired jobs not yet served. ``candidates[0]`` is the job a
            native pass would serve next.
        may_stop: whether stopping is allowed: some job would still hold GPUs (so a later event
            comes and the run cannot stall).
        boundary: whether the pass is at a round boundary (lease-expired jobs are candidates).
    """

    kind: ClassVar[str] = "pick"
    hook: ClassVar[str] = "pick"

    __slots__ = ("boundary", "candidates", "may_stop", "now_s")

    def __init__(self, now_s: float, candidates: tuple[int, ...], may_stop: bool, boundary: bool) -> None:
        self.now_s = now_s
        self.candidates = candidates
        self.may_stop = may_stop
        self.boundary = boundary

    def __repr__(self) -> str:
        return f"Pick(now_s={self.now_s:g}, candidates={list(self.candidates)}, may_stop={self.may_stop})"
