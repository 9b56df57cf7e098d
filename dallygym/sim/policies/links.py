"""Placement that sees the links: among placements of the tier a job accepted, the one where it
is expected to run fastest under the links' current load (:mod:`dallygym.sim.contention`).

Any policy takes it: ``link_aware(policy)`` (or the name ``"<policy>+links"`` wherever a policy
name is accepted, e.g. ``dally+links``). Without a contention model, or at machine tier (no link
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


class LinkAwarePlacement:
    """The mixin: :meth:`place` chooses among the tier's candidates by the job's expected speed."""

    def __reduce__(self):
        return _rebuild, (self._base, self.__dict__)

    def place(self, view, job: int, tier: Tier) -> np.ndarray | None:
        if getattr(view, "_links", None) is None or tier == Tier.MACHINE:
            return super().place(view, job, tier)
        chosen = super().place(view, job, tier)
        if chosen is not None:  # the policy has its own placement: it stands
            return chosen
        candidates = link_candidates(view, int(view.num_gpus[job]), tier)
        if len(candidates) < 2:
            return None
        speeds = [expected_speed(view, job, gpus) for gpus in candidates]
        return candidates[int(np.argmax(speeds))]  # (argmax: the first of ties)


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
        residual = links.capacity[spec.num_machines :] - _uplink_use(view)
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
    machine_links, uplinks = view._links.of(gpus)
    if not machine_links.size:
        return view.latency.speed_factor(view.model[job], shape)
    machine_rate, uplink_rate = view.latency.link_rates(shape)
    users = [u for j, u in view._on_links.items() if j != job]
    mine = (
        np.concatenate([machine_links, uplinks]),
        np.concatenate([np.full(machine_links.size, machine_rate), np.full(uplinks.size, uplink_rate)]),
    )
    shares = fair_shares([u[0] for u in users] + [mine[0]], [u[1] for u in users] + [mine[1]], view._links.capacity)
    return view.latency.shared_speed_factor(view.model[job], shape, float(shares[-1]))


def _uplink_use(view) -> np.ndarray:
    """Bytes per second each rack's uplink carries now (the running jobs at their shares)."""
    spec = view.spec
    use = np.zeros(spec.num_machines + spec.racks)
    for j, (links, rates) in view._on_links.items():
        np.add.at(use, links, rates * view.link_share[j])
    return use[spec.num_machines :]


def _same(gpus: np.ndarray, candidates: list[np.ndarray]) -> bool:
    key = np.sort(gpus)
    return any(np.array_equal(key, np.sort(c)) for c in candidates)


#: Base policy class -> its link-aware subclass (made once, so instances share one class).
_AWARE: dict[type, type] = {}


def link_aware_class(cls: type) -> type:
    """The subclass of policy class ``cls`` that places by :class:`LinkAwarePlacement`, named
    ``<name>+links``."""
    aware = _AWARE.get(cls)
    if aware is None:
        aware = _AWARE[cls] = type(
            f"{cls.__name__}LinkAware",
            (LinkAwarePlacement, cls),
            {"name": cls.name + LINK_AWARE_SUFFIX, "__module__": __name__, "_base": cls},
        )
    return aware


def _rebuild(cls: type, state: dict) -> Policy:
    """An instance of ``cls``'s link-aware subclass with ``state`` (how such a policy unpickles:
    its class is made at run time, so pickle names the base class instead)."""
    policy = link_aware_class(cls).__new__(link_aware_class(cls))
    policy.__dict__.update(state)
    return policy


def link_aware(policy: Policy) -> Policy:
    """``policy`` placing its jobs by :class:`LinkAwarePlacement`: an instance of
    :func:`link_aware_class` of its class with the same state (``policy`` itself if it
    already is one)."""
    if isinstance(policy, LinkAwarePlacement):
        return policy
    return _rebuild(type(policy), dict(policy.__dict__))
