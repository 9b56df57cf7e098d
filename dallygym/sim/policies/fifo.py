"""First-come, first-served: offers in arrival order, accepts the best tier available now."""

from __future__ import annotations

from .base import Policy


class FifoPolicy(Policy):
    """FIFO admission with greedy acceptance (SPEC §5.4).

    Priority is arrival time (ties by trace order). Each offer is accepted at its most
    consolidated free tier. A job that arrived earlier but did not fit when it arrived (a large
    gang) is still ahead of every later job: at the next round boundary it claims the GPUs of
    later-arriving running jobs, whose leases expired. So large jobs are not starved, at the
    cost of preempting later ones.

    Renewal offers (``EngineConfig.renewal``): in ``"upgrade"`` mode a running job keeps its
    GPUs (FIFO does not care where a job runs); in ``"rebid"`` mode it bids like any waiting
    job and takes the best tier free at its turn.
    """

    name = "fifo"
    accepts_upgrades = False  # running jobs keep their placement at lease renewal
    auto_accept = "best"  # decide() takes the best tier of every offer to a waiting job

    def decide(self, offer, view):
        # A running job keeps its placement (it is network-agnostic): no renewal upgrades.
        return None if offer.renewal == "upgrade" else offer.best_tier
