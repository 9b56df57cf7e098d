"""Placement that sees the links: among placements of the tier a job accepted, the one where it
is expected to run fastest under the links' current load (:mod:`dallygym.sim.contention`).

Any policy takes it: ``link_aware(policy)`` (or the name ``"<policy>+links"`` wherever a policy
name is accepted, e.g. ``dally+links``); a Dally policy can judge its offers by the links' load
too (:class:`LoadAwareOffers`, ``"dally+load"``). Without a contention model, or at machine tier (no link
is crossed), the engine's own best fit is used, so the policy runs exactly as without it.

The candidates at rack tier are the best-fit split of every rack that can hold the job; at
network tier, the engine's fewest-racks split and the same split over the racks taken in
decreasing order of residual uplink capacity. Each is scored by the speed factor the job would
have there: its fair share with the jobs already on those links
(:func:`~dallygym.sim.contention.fair_shares`, the job added) priced by the latency model. The
fastest wins; ties go to the earlier candidate (the engine's best fit first).
"""

from __future__ import annotations

import numpy as np

from ..cluster import Tier, _fewest_units
from ..contention import fair_shares
from .base import Policy

#: The suffix of a policy name that asks for link-aware placement (``"dally+links"``).
LINK_AWARE_SUFFIX = "+links"
#: The suffix that asks for load-aware offers too (:class:`LoadAwareOffers`, ``"dally+load"``).
LOAD_AWARE_SUFFIX = "+load"


class LinkAwarePlacement:
    """The mixin: :meth:`place` chooses among the tier's candidates by the job's expected speed."""

    def __reduce__(self):
        return _rebuild, (self._base, next(m for m in type(self).__mro__ if m in SUFFIXES.values()), self.__dict__)

    def place(self, view, job: int, tier: Tier) -> np.ndarray | None:
        if getattr(view, "_links", None) is None or tier == Tier.MACHINE:
            return super().place(view, job, tier)
        chosen = super().place(view, job, tier)
        if chosen is not None:  # the policy has its own placement: it stands
            return chosen
        plan = self.__dict__.pop("_link_plan", None)  # (LoadAwareOffers found it when it accepted)
        if plan is not None and plan[:3] == (job, view.now_s, tier):
            return plan[3]
        candidates = link_candidates(view, int(view.num_gpus[job]), tier)
        if len(candidates) < 2:
            return None
        speeds = [expected_speed(view, job, gpus) for gpus in candidates]
        return candidates[int(np.argmax(speeds))]  # (argmax: the first of ties)


class LoadAwareOffers(LinkAwarePlacement):
    """Dally's offers (Algorithm 1) judged by the speed a tier would give under the links' load,
    with :class:`LinkAwarePlacement`'s placements (the name suffix ``+load``: ``dally+load``).

    A rack or network tier whose expected speed (:func:`expected_speed` at its best candidate)
    is below the job's speed there alone counts as not free: Algorithm 1 runs on the other
    offered tiers, so a job past its machine-level delay waits for a rack where it would not be
    slowed, rather than taking a loaded one. Once it is past its rack-level delay too (it would
    take any tier), it takes the offered tier where it is expected to run fastest. A renewal
    offer, an offer at machine tier, and any offer without a contention model are answered as
    Dally answers them."""

    def decide(self, offer, view):
        self.__dict__.pop("_link_plan", None)
        if getattr(view, "_links", None) is None or offer.renewal == "upgrade" or Tier.MACHINE in offer.tiers:
            return super().decide(offer, view)
        expected = {tier: _best_expected(view, offer.job, tier) for tier in offer.tiers}
        free = tuple(tier for tier in offer.tiers if expected[tier][0] >= expected[tier][1])
        answer = super().decide(_with_tiers(offer, free), view) if free else None
        if answer is None:
            _, t_rack = self.timers(offer.num_gpus, offer.now_s)
            if offer.starvation_s < t_rack:
                return None
            answer = max(offer.tiers, key=lambda tier: (expected[tier][0], -int(tier)))
        # The placement found here is the one place() would find again: the job starts now.
        self._link_plan = (offer.job, offer.now_s, answer, expected[answer][2])
        return answer


def _best_expected(view, job: int, tier: Tier) -> tuple[float, float, np.ndarray]:
    """``(expected speed under the load, speed alone, GPUs)`` of ``job`` at its best candidate
    of ``tier`` (the first of ties, as :meth:`LinkAwarePlacement.place` takes it)."""
    best = None
    for gpus in link_candidates(view, int(view.num_gpus[job]), tier):
        speed = expected_speed(view, job, gpus)
        if best is None or speed > best[0]:
            best = (speed, view.latency.speed_factor(view.model[job], view.spec.shape_of(gpus)), gpus)
    return best


def _with_tiers(offer, tiers: tuple) -> object:
    """A copy of ``offer`` offering ``tiers`` only."""
    copy = object.__new__(type(offer))
    for name in type(offer).__slots__:
        setattr(copy, name, getattr(offer, name))
    copy.tiers = tiers
    copy.best_tier = tiers[0]
    return copy


def link_candidates(view, num_gpus: int, tier: Tier) -> list[np.ndarray]:
    """The placements of ``num_gpus`` at ``tier`` that :class:`LinkAwarePlacement` compares, the
    engine's best fit first."""
    cluster = view.cluster
    spec = view.spec
    first = cluster.place(num_gpus, tier)
    candidates = [first]
    if tier == Tier.RACK:
        free = cluster.free_per_machine.reshape(spec.racks, spec.machines_per_rack)
        for rack in np.flatnonzero((cluster.free_per_rack >= num_gpus) & ((free > 0).sum(axis=1) >= 2)).tolist():
            gpus = cluster._spread_in_rack(rack, num_gpus, min_machines=2)
            if not _same(gpus, candidates):
                candidates.append(gpus)
    elif tier == Tier.NETWORK:
        links = view._links
        jobs = list(view._on_links)
        use = links.use([view._on_links[j] for j in jobs], view.link_share[jobs])
        residual = (links.capacity - use)[spec.num_machines :]
        order = np.lexsort((np.arange(spec.racks), -cluster.free_per_rack, -residual))
        free = np.zeros(spec.racks, dtype=np.int64)
        left = num_gpus
        for rack in order.tolist():  # the racks with the most residual capacity, as few as hold the job
            if left <= 0:
                break
            free[rack] = cluster.free_per_rack[rack]
            left -= int(free[rack])
        shares = _fewest_units(free, num_gpus, min_units=2)
        if shares is not None:
            gpus = np.concatenate([cluster._spread_in_rack(rack, share, min_machines=1) for rack, share in shares])
            if not _same(gpus, candidates):
                candidates.append(gpus)
    return candidates


def expected_speed(view, job: int, gpus: np.ndarray) -> float:
    """The speed factor job ``job`` would have on ``gpus`` now: its fair share beside the jobs
    already on those links, priced by the engine's latency model."""
    shape = view.spec.shape_of(gpus)
    mine = view._links.asked(gpus, *view.asked_rates(view.model[job], shape))
    if not mine[0].size:
        return view.latency.speed_factor(view.model[job], shape)
    users = [u for j, u in view._on_links.items() if j != job] + [mine]
    shares = fair_shares([u[0] for u in users], [u[1] for u in users], view._links.capacity)
    return view.latency.shared_speed_factor(view.model[job], shape, float(shares[-1]))


def _same(gpus: np.ndarray, candidates: list[np.ndarray]) -> bool:
    key = np.sort(gpus)
    return any(np.array_equal(key, np.sort(c)) for c in candidates)


#: The name suffixes and the mixin each asks for.
SUFFIXES = {LINK_AWARE_SUFFIX: LinkAwarePlacement, LOAD_AWARE_SUFFIX: LoadAwareOffers}
#: (base policy class, mixin) -> the subclass (made once, so instances share one class).
_AWARE: dict[tuple[type, type], type] = {}


def aware_class(cls: type, mixin: type = LinkAwarePlacement) -> type:
    """The subclass of policy class ``cls`` with ``mixin`` (:class:`LinkAwarePlacement`, named
    ``<name>+links``, or :class:`LoadAwareOffers`, ``<name>+load``)."""
    aware = _AWARE.get((cls, mixin))
    if aware is None:
        suffix = next(s for s, m in SUFFIXES.items() if m is mixin)
        aware = _AWARE[cls, mixin] = type(
            f"{cls.__name__}{mixin.__name__}",
            (mixin, cls),
            {"name": cls.name + suffix, "__module__": __name__, "_base": cls},
        )
    return aware


def _rebuild(cls: type, mixin: type, state: dict) -> Policy:
    """An instance of ``aware_class(cls, mixin)`` with ``state`` (how such a policy unpickles:
    its class is made at run time, so pickle names the base class and the mixin instead)."""
    policy = object.__new__(aware_class(cls, mixin))
    policy.__dict__.update(state)
    return policy


def link_aware(policy: Policy, mixin: type = LinkAwarePlacement) -> Policy:
    """``policy`` with ``mixin`` (link-aware placement by default): an instance of
    :func:`aware_class` of its class with the same state (``policy`` itself if it already is
    one). :class:`LoadAwareOffers` needs a Dally policy (its offers are Algorithm 1's)."""
    if isinstance(policy, mixin):
        return policy
    if isinstance(policy, LinkAwarePlacement):
        raise ValueError(f"{policy.name!r} already places by the links")
    if mixin is LoadAwareOffers and not hasattr(policy, "timers"):
        raise ValueError(f"{LOAD_AWARE_SUFFIX} applies to Dally's policies (Algorithm 1's offers), not {policy.name!r}")
    return _rebuild(type(policy), mixin, dict(policy.__dict__))
