"""Shared links (:mod:`dallygym.sim.contention`): max-min fair shares by progressive filling."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def fill_shares(job_of, link_of, rate_of, capacity, shares, active):
    """Progressive filling (:func:`dallygym.sim.contention.fair_shares`) over flat entries:
    job ``job_of[e]`` asks ``rate_of[e]`` > 0 of link ``link_of[e]``; ``active`` marks the jobs
    that ask anything (their entries are the only ones), ``shares`` is 1 for every job. Writes
    each active job's share into ``shares`` (``active`` is used up).

    All shares rise together from 0; at each stage every link with rising jobs is full at the
    level ``(capacity - what the stopped jobs use) / what the rising jobs ask`` (never below the
    current level); the least such level stops the jobs on the links full there. The sums run
    over the entries in order, as ``numpy.bincount`` adds them: the same values bit for bit."""
    size = capacity.size
    n_entries = job_of.size
    rising = np.zeros(size)
    frozen = np.zeros(size)
    full_at = np.empty(size)
    stopped = np.zeros(shares.size, dtype=np.bool_)
    level = 0.0
    while True:
        rising[:] = 0.0
        frozen[:] = 0.0
        for e in range(n_entries):
            j = job_of[e]
            if active[j]:
                rising[link_of[e]] += rate_of[e]
            else:
                frozen[link_of[e]] += rate_of[e] * shares[j]
        least = np.inf
        for link in range(size):
            if rising[link] > 0:
                at = max((capacity[link] - frozen[link]) / rising[link], level)
                full_at[link] = at
                if at < least:
                    least = at
        level = min(least, 1.0)
        if level >= 1.0:
            for j in range(shares.size):
                if active[j]:
                    shares[j] = 1.0
            return
        for e in range(n_entries):
            j = job_of[e]
            link = link_of[e]
            if active[j] and rising[link] > 0 and full_at[link] <= level:
                stopped[j] = True
        any_active = False
        for j in range(shares.size):
            if stopped[j]:
                shares[j] = level
                active[j] = False
                stopped[j] = False
            elif active[j]:
                any_active = True
        if not any_active:
            return
