"""Scheduling policies: the protocol (:class:`Policy`) and the shipped schedulers.

``make_policy(name)`` builds a shipped policy by its CLI name; ``POLICIES`` maps names to
classes. To add one, subclass :class:`Policy` (see ``base.py``) and pass an instance wherever a
policy name is accepted.
"""

from __future__ import annotations

from .base import Policy
from .dally import DallyConsolidatedPolicy, DallyManualPolicy, DallyNoWaitPolicy, DallyPolicy
from .fifo import FifoPolicy
from .gandiva import GandivaPolicy, GandivaTimeslicePolicy
from .protected import ProtectedRemainingPolicy
from .random_policy import RandomPolicy
from .smallest_demand import SmallestDemandRemainingPolicy
from .tiresias import TiresiasLasPolicy, TiresiasPolicy
from .tuned import TunedPriorityPolicy

#: Shipped policies by CLI name, in the order ``dallygym compare`` runs them.
POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        DallyPolicy,
        DallyManualPolicy,
        DallyNoWaitPolicy,
        DallyConsolidatedPolicy,
        TiresiasPolicy,
        TiresiasLasPolicy,
        GandivaPolicy,
        GandivaTimeslicePolicy,
        ProtectedRemainingPolicy,
        SmallestDemandRemainingPolicy,
        TunedPriorityPolicy,
        FifoPolicy,
        RandomPolicy,
    )
}


def make_policy(policy: str | Policy, **kwargs) -> Policy:
    """A policy instance from a shipped name, or ``policy`` itself if already one. A name
    ending in ``+links`` (``"dally+links"``) is that policy with link-aware placement, one in
    ``+load`` (``"dally+load"``) a Dally policy whose offers are judged by the links' load too
    (:mod:`dallygym.sim.policies.links`)."""
    if isinstance(policy, Policy):
        if kwargs:
            raise TypeError("options are for policy names, not for a policy instance")
        return policy
    from .links import SUFFIXES, link_aware

    for suffix, mixin in SUFFIXES.items():
        if isinstance(policy, str) and policy.endswith(suffix) and policy[: -len(suffix)] in POLICIES:
            return link_aware(make_policy(policy[: -len(suffix)], **kwargs), mixin)
    try:
        cls = POLICIES[policy]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown policy {policy!r}; known policies: {', '.join(POLICIES)} "
            f"(any of them with +links places by the links' load; Dally's with +load judges offers by it too)"
        ) from None
    return cls(**kwargs)


__all__ = [
    "POLICIES",
    "DallyConsolidatedPolicy",
    "DallyManualPolicy",
    "DallyNoWaitPolicy",
    "DallyPolicy",
    "FifoPolicy",
    "GandivaPolicy",
    "GandivaTimeslicePolicy",
    "Policy",
    "ProtectedRemainingPolicy",
    "RandomPolicy",
    "SmallestDemandRemainingPolicy",
    "TiresiasLasPolicy",
    "TiresiasPolicy",
    "TunedPriorityPolicy",
    "make_policy",
]
