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
    """

    name = "fifo"
