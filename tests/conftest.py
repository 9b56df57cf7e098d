"""Shared test helpers: hand-built traces and a latency model with known speed factors."""

from __future__ import annotations

import os
from pathlib import Path

# One torch thread per test process, set before anything imports torch: the tests' networks are
# tiny, and with pytest-xdist running a process per core, more threads only contend (a
# few-thousand-step MaskablePPO test took 61 s with the default threads under -n 2).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from dallygym.cluster import ClusterState, Tier, tier_of_shape
from dallygym.engine import Engine, EngineConfig, run_policy
from dallygym.latency import LatencyModel
from dallygym.policies import Policy


class TierLatency(LatencyModel):
    """Speed factor depends only on the tier of the shape: easy to compute by hand."""

    name = "tier-stub"

    def __init__(self, machine: float = 1.0, rack: float = 0.5, network: float = 0.25) -> None:
        self.factors = {Tier.MACHINE: machine, Tier.RACK: rack, Tier.NETWORK: network}

    def speed_factor(self, model, shape) -> float:
        if sum(map(sum, shape)) == 1:
            return 1.0
        return self.factors[tier_of_shape(shape)]


class TablePriority(Policy):
    """Fixed priority per job id (lower first); greedy acceptance."""

    name = "table"

    def __init__(self, priority: dict[int, float]) -> None:
        self.table = priority

    def priority(self, view, jobs):
        return np.array([self.table[int(view.job_id[j])] for j in jobs], dtype=float)


def make_trace(rows) -> pd.DataFrame:
    """rows: (job_id, arrival_s, num_gpus, total_iterations, iter_time_s[, model])."""
    records = []
    for row in rows:
        job_id, arrival, gpus, iters, iter_time, *model = row
        records.append(
            {
                "job_id": job_id,
                "arrival_s": float(arrival),
                "num_gpus": gpus,
                "model": model[0] if model else "resnet50",
                "total_iterations": iters,
                "iter_time_s": float(iter_time),
            }
        )
    return pd.DataFrame.from_records(records)


def run_engine(trace, spec, policy=None, latency=None, **config) -> Engine:
    engine = Engine(trace, spec, policy or Policy(), latency or TierLatency(), EngineConfig(**config))
    return run_policy(engine)


@pytest.fixture
def tier_latency() -> TierLatency:
    return TierLatency()


@pytest.fixture(autouse=True)
def check_every_allocation(monkeypatch):
    """In tests, every allocation re-checks that its GPUs are free (off on the hot path)."""
    monkeypatch.setattr(ClusterState, "check_allocations", True)


def load_script(relative: str, name: str):
    """A script of the repository (``benchmarks/compare.py``, ...) imported as module ``name``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
