"""Protected remaining time: short remaining work first, the makespan-critical jobs protected.

A strong ordering heuristic for ``DallyQueue-v0``, and a baseline a learned job-ordering agent
is compared with. Its definition, untuned:

    "protected remaining time: estimate each job's remaining run time as remaining ideal time
    ÷ its observed Nw_sens (÷ 0.1 for a never-run job that spans more than one machine); jobs
    whose estimate is at least ½ of the largest go first, longest first; the rest shortest
    first"
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .dally import DallyConsolidatedPolicy

#: Divisor of a never-run multi-machine job's remaining ideal time: its Nw_sens is unknown,
#: and a job that spans machines may run far below its ideal speed (0.1, the rule's own choice).
NEVER_RUN_MULTI_MACHINE_NW_SENS = 0.1
#: Jobs whose estimate is at least this fraction of the largest estimate are protected.
PROTECT_FRACTION = 0.5


class ProtectedRemainingPolicy(DallyConsolidatedPolicy):
    """Protected remaining-time order, offers answered "wait for the best tier".

    * Priority: each job's estimated remaining run time ``est`` = remaining ideal time
      (iterations left x ``iter_time_s``) / its Nw_sens as observed so far (the scheduler's
      only view of network sensitivity; the model stays hidden). A never-run job has no
      Nw_sens: one that fits one machine is taken at speed 1, one that spans more than one
      machine at 0.1. Among the jobs being ordered, those with ``est >= ½ max(est)`` (the jobs
      that decide the makespan) come first, longest first; the rest follow, shortest first.
      Ties by arrival, then job index (the engine's rule).
    * Offers: as ``dally-consolidated`` -- a job waits for the most consolidated tier it can
      fit in (the rule the order was defined with); lease renewal likewise.

    Nothing here was tuned on held-out traces: the ½ and the 0.1 are the rule's own, as first stated.
    """

    name: ClassVar[str] = "protected-remaining"
    priority_keys: ClassVar[str | None] = "protected-remaining"  # priority() below, computed by the engine too

    def priority(self, view, jobs: np.ndarray) -> np.ndarray:
        est = self.remaining_estimate_s(view, jobs)
        largest = est.max() if est.size else 0.0
        protected = est >= PROTECT_FRACTION * largest
        # Protected keys are <= 0 (longest first), the others >= 0 (shortest first).
        return np.where(protected, -est, est)

    @staticmethod
    def remaining_estimate_s(view, jobs: np.ndarray) -> np.ndarray:
        """Estimated remaining run time in seconds of ``jobs`` (see the class docstring)."""
        remaining_ideal = (view.total_iterations[jobs] - view.done_iters[jobs]) * view.iter_time_s[jobs]
        nw = view.nw_sens(jobs)
        never = ~(nw > 0)
        if never.any():
            multi = view.num_gpus[jobs] > view.spec.gpus_per_machine
            nw = np.where(never, np.where(multi, NEVER_RUN_MULTI_MACHINE_NW_SENS, 1.0), nw)
        return remaining_ideal / nw

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
