"""A seeded random baseline (SPEC §5.4): FIFO order, a random answer to every offer."""

from __future__ import annotations

from .base import Policy


class RandomPolicy(Policy):
    """FIFO priority; each offer is answered uniformly at random among the valid answers.

    The valid answers are the offered tiers plus "wait" -- masked out when waiting cannot lead
    to a better tier (``offer.best_tier`` is already ``offer.best_possible_tier``). So a job
    waits only while a more consolidated placement could still come, and on an idle cluster
    every job is offered its best possible tier and accepts: a run never stalls.

    In ``"upgrade"`` renewal mode a running job keeps its placement; in ``"rebid"`` mode its
    renewal offer is answered like any other.

    Priority stays FIFO (arrival order) so that the baseline differs from ``fifo`` only in its
    offer decisions; all draws come from the run's seeded generator, so a run is reproducible
    for a given ``EngineConfig.seed``.
    """

    name = "random"
    accepts_upgrades = False  # running jobs keep their placement at lease renewal

    def reset(self, view, rng) -> None:
        self.rng = rng

    def decide(self, offer, view):
        if offer.renewal == "upgrade":
            return None  # a running job keeps its placement (no draw: the stream is unchanged)
        answers = (None, *offer.tiers) if offer.is_choice else offer.tiers
        return answers[int(self.rng.integers(len(answers)))]
