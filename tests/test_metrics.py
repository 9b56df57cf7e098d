"""Run metrics (SPEC §6): a hand-worked run, and the summary against the per-job frames."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TierLatency, make_trace, run_engine

from dallygym import ClusterSpec
from dallygym.engine import Engine, EngineConfig, run_policy
from dallygym.metrics import SUMMARY_KEYS, collect, summarize
from dallygym.policies import FifoPolicy


def test_summary_of_a_hand_worked_run():
    # One machine of 4 GPUs, speed 1 on a machine. J0 (2 GPUs, 100 s) runs 0..100; J1 (2 GPUs,
    # 100 s) arrives at 50 and runs 50..150 on the other two GPUs. GPUs in use: 2 for 50 s,
    # 4 for 50 s, 2 for 50 s = 400 GPU-seconds of 4 x 150 = 600: utilisation 2/3.
    engine = run_engine(make_trace([(0, 0, 2, 100, 1.0), (1, 50, 2, 100, 1.0)]), ClusterSpec(1, 1, 4))
    summary = summarize(engine)
    assert summary["makespan_s"] == 150.0
    assert summary["jct_mean_s"] == summary["jct_median_s"] == 100.0
    assert summary["queue_mean_s"] == summary["queue_p99_s"] == 0.0
    assert summary["comm_mean_s"] == 0.0
    assert summary["utilization"] == pytest.approx(2 / 3)
    assert (summary["jobs"], summary["placements_machine"], summary["preemptions"]) == (2, 2, 0)


def test_summary_agrees_with_the_per_job_and_timeline_frames():
    rng = np.random.default_rng(3)
    rows = [(i, float(rng.integers(0, 20_000)), int(rng.choice([1, 2, 4, 8, 16])), int(rng.integers(10, 3000)),
             float(rng.uniform(0.5, 3))) for i in range(60)]
    engine = Engine(make_trace(rows), ClusterSpec(2, 2, 8), FifoPolicy(), TierLatency(), EngineConfig(lease_s=900.0))
    result = collect(run_policy(engine))
    jobs, timeline, summary = result.jobs, result.timeline, result.summary
    assert tuple(summary) == SUMMARY_KEYS
    assert summary["jct_mean_s"] == pytest.approx(jobs["jct_s"].mean())
    assert summary["jct_p95_s"] == pytest.approx(np.percentile(jobs["jct_s"], 95))
    assert summary["queue_mean_s"] == pytest.approx(jobs["queue_s"].mean())
    assert summary["comm_mean_s"] == pytest.approx(jobs["comm_s"].mean())
    assert summary["makespan_s"] == pytest.approx(jobs["end_s"].max() - jobs["arrival_s"].min())
    spans = np.diff(np.append(timeline["time_s"], jobs["end_s"].max()))
    busy = float((timeline["gpus_used"] * spans).sum())
    assert summary["utilization"] == pytest.approx(busy / (32 * summary["makespan_s"]))
    assert summary["preemptions"] == jobs["preemptions"].sum()


def test_metrics_of_an_unfinished_run_are_refused():
    engine = Engine(make_trace([(0, 0, 1, 10, 1.0)]), ClusterSpec(1, 1, 1), FifoPolicy(), TierLatency())
    with pytest.raises(ValueError, match="finished run"):
        summarize(engine)


def test_utilization_does_not_depend_on_the_number_of_blas_threads():
    """A long timeline (about 26,000 events): a BLAS dot product split over threads rounded
    differently with 1 and 2 threads, so results depended on the machine and the sweep backend."""
    import os
    import subprocess
    import sys

    code = ("import dallygym; print(repr(dallygym.simulate('batch-500', 2, policy='gandiva')"
            ".summary['utilization']))")
    values = set()
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
        values.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                  check=True, timeout=300).stdout.strip())
    assert len(values) == 1, values
