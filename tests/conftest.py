"""Pytest configuration and fixtures only; shared helpers live in ``helpers.py``."""

from __future__ import annotations

import os

# One torch thread per test process, set before anything imports torch: the tests' networks are
# tiny, and with pytest-xdist running a process per core, more threads only contend (a
# few-thousand-step MaskablePPO test took 61 s with the default threads under -n 2).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

from dallygym.sim.cluster import ClusterState  # noqa: E402


@pytest.fixture(autouse=True)
def check_every_allocation(monkeypatch):
    """In tests, every allocation re-checks that its GPUs are free (off on the hot path)."""
    monkeypatch.setattr(ClusterState, "check_allocations", True)
