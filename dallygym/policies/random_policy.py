"""A seeded random baseline (SPEC §5.4): FIFO order, a random answer to every offer."""

from __future__ import annotations

from .base import Policy


class RandomPolicy(Policy):
    """FIFO priority; each offer is answered uniformly at random among the valid answers.

    The valid answers are the offered tiers plus "wait" -- masked out when waiting cannot lead
    to a better tier (``offer.best_tier`` is already ``offer.best_possible_tier``). So a job
    waits only while a more consolidated placement could still come, and on an idle cluster
    every job is offered its best possible tier and accepts: a run never stalls.

    Priority stays FIFO (arrival order) so that the baseline differs from ``fifo`` only in its
    offer decisions; all draws come from the run's seeded generator, so a run is reproducible
    for a given ``EngineConfig.seed``.
    """

    name = "random"

    def reset(self, view, rng) -> None:
        self.rng = rng

    def decide(self, offer, view):
        answers = (None, *offer.tiers) if offer.is_choice else offer.tiers
        return answers[int(self.rng.integers(len(answers)))]
