"""Smallest GPU demand x remaining estimate first, with Dally's offers.

A shortest-job-first rule weighted by size: the job whose estimated remaining GPU-time is
least is offered GPUs first. It is a baseline for learned job-ordering agents
(``DallyQueue-v0``), so it uses only what their observation shows.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .dally import DallyPolicy
from .protected import ProtectedRemainingPolicy


class SmallestDemandRemainingPolicy(DallyPolicy):
    """Priority ``num_gpus x remaining estimate`` (lower first); offers as auto-tuned ``dally``.

    * Priority key of a job (waiting, or running when the engine orders lease-expired jobs at
      a round boundary): its GPU demand times its estimated remaining run time in seconds.
      The estimate is :meth:`ProtectedRemainingPolicy.remaining_estimate_s`, the one
      ``DallyQueue-v0`` shows as job feature ``remaining_estimate``: remaining ideal time
      (iterations left x ``iter_time_s``) / the job's Nw_sens observed so far; a never-run job
      is taken at speed 1 if it fits one machine and at 0.1 if it spans more. Nothing about
      the future (the model's network sensitivity, later arrivals) is used. Ties: earlier
      arrival, then job index (the engine's rule).
    * Offers, lease renewal and the auto-tuner: inherited unchanged from
      :class:`~dallygym.sim.policies.dally.DallyPolicy` -- Algorithm 1 with the auto-tuned timers
      (the queue environment's ``offer_rule="dally"``); a renewal offer in ``"upgrade"`` mode
      is accepted at its best tier. So the policy differs from ``dally`` in its order only.
    """

    name: ClassVar[str] = "smallest-demand-remaining"
    priority_keys: ClassVar[str | None] = "demand-remaining"  # priority() below, computed by the engine too

    def priority(self, view, jobs: np.ndarray) -> np.ndarray:
        return view.num_gpus[jobs] * ProtectedRemainingPolicy.remaining_estimate_s(view, jobs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
