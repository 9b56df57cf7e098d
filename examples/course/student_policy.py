"""Assignment: write a scheduling policy for a shared GPU cluster.

Fill in the methods marked TODO, then rank your policy against every shipped one on the
held-out course traces:

    python -m examples.course.rank --policy examples/course/student_policy.py:StudentPolicy

As handed out, the file runs: it is the base class's behaviour (serve in arrival order, accept
the best tier free now, take any better tier offered at a lease renewal). Your goal: a lower
mean JCT than ``dally`` without a much worse makespan, and an explanation of why.

What the engine asks, and when (the full list of what you may read is docs/policy-api.md):

* ``priority(view, jobs)`` at every scheduling pass (an arrival, a completion, a round boundary
  every ``view.config.lease_s`` seconds): one sort key per job in ``jobs``; lower keys are served
  first. At a round boundary the running jobs are in ``jobs`` too (their lease expired): a
  waiting job you rank above a running one may take its GPUs (the running one is preempted,
  keeps its progress, and waits).
* ``decide(offer, view)`` at each served job's turn, if its gang fits somewhere: accept at one of
  ``offer.tiers`` (one machine, one rack, across racks: more spread = more communication =
  slower, very much so for some models, see Table I) or return ``None`` to wait.

``view`` is the running engine: numpy arrays indexed by job (``view.num_gpus[jobs]``,
``view.done_iters[jobs]``, ...). Read them; never assign to them.
"""

from __future__ import annotations

import numpy as np

from dallygym import Policy, Tier


class StudentPolicy(Policy):
    name = "student"

    def reset(self, view, rng: np.random.Generator) -> None:
        """Called once per run. Keep any state you need here (not in ``__init__``: the same
        object may run several traces). ``rng`` is the only randomness you should use."""
        # TODO (optional): e.g. self.history = {} to remember how long jobs waited.

    def priority(self, view, jobs: np.ndarray) -> np.ndarray:
        """One sort key per job in ``jobs`` (an array of job indices); lower is served first.

        Useful views (arrays over all jobs; index them with ``jobs``):
          view.arrival_s, view.num_gpus, view.total_iterations, view.done_iters,
          view.iter_time_s (seconds per iteration on an ideal placement), view.run_s (time
          held GPUs so far), view.starvation_s(jobs) (time waiting since arrival or the last
          preemption), view.nw_sens(jobs) (Dally's network sensitivity, 0 if never ran),
          view.state (1 waiting, 2 running), view.tier (-1, or the tier it runs at).
        """
        # TODO: replace FIFO with a better order. Ideas to compare: least remaining work
        # (total_iterations - done_iters) * iter_time_s; fewest GPUs; least attained service
        # num_gpus * run_s (Tiresias); a mix that protects long jobs from starving.
        return view.arrival_s[jobs]

    def decide(self, offer, view) -> Tier | None:
        """Accept ``offer`` at a tier in ``offer.tiers`` (best first), or ``None`` to wait.

        offer.best_tier is offer.tiers[0]; offer.best_possible_tier is the best this job can
        ever get here; offer.starvation_s is how long it has waited (seconds);
        offer.is_renewal is True for a running job offered a better placement at a lease
        renewal (waiting then keeps its current GPUs, so accepting a better tier is free).
        """
        # TODO: waiting for a consolidated placement pays for network-sensitive models
        # (view.model[offer.job]) and costs queueing time. Dally waits up to a timer per tier;
        # try e.g. "wait up to K leases for the best possible tier, then take what is free".
        return offer.best_tier

    # Optional hooks (delete them if unused; see docs/policy-api.md):

    def on_start(self, view, job: int, tier: Tier, starvation_s: float, now_s: float) -> None:
        """Called after every placement; ``starvation_s`` is how long ``job`` waited for it.
        Dally learns its timers from these waits."""
        # TODO (optional): record starvation_s per (tier, num_gpus) to tune a waiting rule.
