"""Run metrics (SPEC §6): a hand-worked run, and the summary against the per-job frames."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import TierLatency, make_trace, run_engine
from hypothesis import given, settings
from hypothesis import strategies as st

from dallygym import ClusterSpec
from dallygym.sim.cluster import ClusterState
from dallygym.sim.engine import Engine, EngineConfig, run_policy
from dallygym.sim.latency import get_latency_model
from dallygym.sim.metrics import SUMMARY_KEYS, collect, queue_times, summarize
from dallygym.sim.policies import POLICIES, FifoPolicy, make_policy


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
    rows = [
        (
            i,
            float(rng.integers(0, 20_000)),
            int(rng.choice([1, 2, 4, 8, 16])),
            int(rng.integers(10, 3000)),
            float(rng.uniform(0.5, 3)),
        )
        for i in range(60)
    ]
    engine = Engine(make_trace(rows), ClusterSpec(2, 2, 8), FifoPolicy(), TierLatency(), EngineConfig(lease_s=900.0))
    result = collect(run_policy(engine))
    jobs, timeline, summary = result.jobs, result.timeline, result.summary
    assert tuple(summary) == SUMMARY_KEYS
    assert summary["jct_mean_s"] == pytest.approx(jobs["jct_s"].mean())
    assert summary["jct_p95_s"] == pytest.approx(np.percentile(jobs["jct_s"], 95))
    assert summary["queue_mean_s"] == pytest.approx(jobs["queue_s"].mean())
    assert summary["comm_mean_s"] == pytest.approx(jobs["comm_s"].mean())
    assert summary["makespan_s"] == pytest.approx(jobs["end_s"].max() - jobs["arrival_s"].min())
    ends = np.sort(jobs["end_s"].to_numpy())
    done = int(np.ceil(0.99 * len(ends)))  # the smallest end by which 99 % of the jobs are done
    assert summary["completion_p99_s"] == ends[done - 1] - jobs["arrival_s"].min()
    last = jobs.loc[jobs["end_s"] == ends[-1]].sort_values("job_id").iloc[0]
    assert summary["makespan_job"] == last["job_id"]
    assert summary["makespan_job_share"] == last["run_s"] / summary["makespan_s"]
    spans = np.diff(np.append(timeline["time_s"], jobs["end_s"].max()))
    busy = float((timeline["gpus_used"] * spans).sum())
    assert summary["utilization"] == pytest.approx(busy / (32 * summary["makespan_s"]))
    assert summary["preemptions"] == jobs["preemptions"].sum()


def test_completion_p99_and_the_job_that_sets_the_makespan():
    # 128 GPUs, 100 one-GPU jobs, all start on arrival (speed 1). Jobs 0..98 arrive at 10 + i
    # and run 100 s: they end at 110..208. Job 99 arrives at 20 and runs 1000 s: it ends at
    # 1020, last. Origin = first arrival = 10: makespan 1010. 99 % of 100 jobs = 99 jobs, done
    # at the 99th end (208): completion p99 = 198 -- the last job does not enter it (numpy's
    # interpolated p99 would give 216.12). Job 99 ran 1000 of the 1010 s.
    rows = [(i, 10 + i, 1, 100, 1.0) for i in range(99)] + [(99, 20, 1, 1000, 1.0)]
    engine = run_engine(make_trace(rows), ClusterSpec(2, 8, 8))
    summary = summarize(engine)
    assert summary["makespan_s"] == 1010.0
    assert summary["completion_p99_s"] == 198.0
    assert summary["makespan_job"] == 99 and isinstance(summary["makespan_job"], int)
    assert summary["makespan_job_share"] == pytest.approx(1000 / 1010)
    assert summary["jct_p99_s"] == pytest.approx(np.percentile([100.0] * 99 + [1000.0], 99))


def test_without_a_dominant_job_the_share_is_small_and_p99_is_near_the_makespan():
    # Same cluster; 100 jobs of 100 s arriving every 10 s: ends 100, 110, ..., 1090. Makespan
    # 1090; the 99th end is 1080; the last job (99) ran 100 of 1090 s.
    rows = [(i, 10 * i, 1, 100, 1.0) for i in range(100)]
    summary = summarize(run_engine(make_trace(rows), ClusterSpec(2, 8, 8)))
    assert summary["makespan_s"] == 1090.0 and summary["completion_p99_s"] == 1080.0
    assert summary["makespan_job"] == 99
    assert summary["makespan_job_share"] == pytest.approx(100 / 1090)


def test_a_tie_for_the_last_end_names_the_lowest_job_id():
    # Jobs 7 and 3 both end at 50; job 5 ends at 20. Makespan 50, set by job 3 (lower id), which
    # ran 50 of the 50 s.
    rows = [(7, 0, 1, 50, 1.0), (5, 0, 1, 20, 1.0), (3, 0, 1, 50, 1.0)]
    summary = summarize(run_engine(make_trace(rows), ClusterSpec(1, 1, 4)))
    assert summary["makespan_s"] == 50.0 and summary["makespan_job"] == 3
    assert summary["makespan_job_share"] == 1.0
    # ceil(0.99 x 3) = 3rd end of (20, 50, 50): 50.
    assert summary["completion_p99_s"] == 50.0


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

    code = "import dallygym; print(repr(dallygym.simulate('batch-500', 2, policy='gandiva').summary['utilization']))"
    values = set()
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
        values.add(
            subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=300
            ).stdout.strip()
        )
    assert len(values) == 1, values


# --- random episodes: queueing delays and the timeline's last row -----------------------------


@st.composite
def episodes(draw):
    """A small random run: trace, cluster, policy, engine options, compiled or not, and how
    many timeline rows it keeps (few rows force thinning)."""
    n = draw(st.integers(1, 40))
    gpus = draw(st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=n, max_size=n))
    rows = [
        (
            i,
            draw(st.floats(0, 20_000, allow_nan=False)),
            g,
            draw(st.integers(1, 2_000)),
            draw(st.floats(0.001, 7.0, allow_nan=False)),
        )
        for i, g in enumerate(gpus)
    ]
    # Leases from 30 s: a 1 s lease over runs of hours is tens of thousands of passes in the
    # Python reference, minutes an example under time-slicing Gandiva, for nothing more tested.
    config = EngineConfig(
        lease_s=draw(st.floats(30.0, 5_000.0)),
        restart_overhead_s=draw(st.sampled_from([0.0, 0.1, 33.3])),
        seed=draw(st.integers(0, 2**32)),
        renewal=draw(st.sampled_from(["upgrade", "keep", "rebid"])),
    )
    return (
        rows,
        draw(st.sampled_from(list(POLICIES))),
        config,
        draw(st.booleans()),
        draw(st.sampled_from([None, 2, 3, 7, 30])),
    )


def _run(episode):
    rows, policy, config, compiled, timeline_rows = episode
    latency = get_latency_model("dally-paper")
    saved = ClusterState.compiled  # (set by hand: hypothesis runs many examples per fixture)
    ClusterState.compiled = compiled
    try:
        engine = Engine(make_trace(rows), ClusterSpec(2, 2, 4), make_policy(policy), latency, config)
        if timeline_rows is not None:
            engine.timeline_rows = timeline_rows
        return engine, collect(run_policy(engine))
    finally:
        ClusterState.compiled = saved


@settings(max_examples=60, deadline=None)
@given(episode=episodes())
def test_queueing_delays_are_never_negative(episode):
    engine, result = _run(episode)
    queue = result.jobs["queue_s"].to_numpy()
    assert (queue >= 0).all(), queue[queue < 0]
    assert result.summary["queue_mean_s"] >= 0 and result.summary["queue_p95_s"] >= 0
    # Only rounding was set to zero: JCT - run time is the same up to a nanosecond per clock second.
    raw = result.jobs["jct_s"].to_numpy() - result.jobs["run_s"].to_numpy()
    assert np.all(np.abs(queue - raw) <= 1e-9 * np.maximum(1.0, result.jobs["end_s"].to_numpy()))


@settings(max_examples=60, deadline=None)
@given(episode=episodes())
def test_the_timeline_ends_with_the_last_completion_on_an_idle_cluster(episode):
    engine, result = _run(episode)
    timeline = result.timeline
    last = timeline.iloc[-1]
    assert last["time_s"] == engine.end_s.max()
    assert last["time_s"] - result.jobs["arrival_s"].min() == pytest.approx(result.summary["makespan_s"], abs=1e-6)
    idle = (last["gpus_used"], last["utilization"], last["running"], last["waiting"], last["remaining"])
    assert idle == (0, 0, 0, 0, 0)
    assert timeline["time_s"].is_monotonic_increasing and timeline["time_s"].is_unique
    assert len(timeline) < engine.timeline_rows


def test_a_thinned_timeline_still_ends_at_the_makespan():
    # Many events, few rows: thinning keeps rows a spacing apart, and the last event is kept too.
    rows = [(i, 10.0 * i, 1, 5 + i % 7, 1.0) for i in range(300)]
    engine = Engine(make_trace(rows), ClusterSpec(1, 1, 2), FifoPolicy(), TierLatency(), EngineConfig(lease_s=1e9))
    engine.timeline_rows = 20
    result = collect(run_policy(engine))
    timeline = result.timeline
    assert len(timeline) < 20
    assert timeline["time_s"].iloc[-1] == engine.end_s.max() == result.jobs["end_s"].max()
    assert timeline["gpus_used"].iloc[-1] == 0
    # The summary does not depend on the timeline: the same as without thinning.
    full = collect(
        run_policy(
            Engine(make_trace(rows), ClusterSpec(1, 1, 2), FifoPolicy(), TierLatency(), EngineConfig(lease_s=1e9))
        )
    )
    assert full.summary == result.summary
    assert full.timeline.iloc[-1].equals(timeline.iloc[-1])


def test_a_negative_queueing_delay_beyond_rounding_is_an_error():
    engine = run_policy(
        Engine(
            make_trace([(0, 0, 1, 100, 1.0), (1, 0, 1, 100, 1.0)]), ClusterSpec(1, 1, 1), FifoPolicy(), TierLatency()
        )
    )
    assert queue_times(engine).tolist() == [0.0, 100.0]
    engine.run_s[0] = np.nextafter(engine.run_s[0], np.inf)  # a float step over: rounding, so 0
    assert queue_times(engine)[0] == 0.0
    engine.run_s[0] += 1.0  # ran a second longer than it was in the system: not rounding
    with pytest.raises(ValueError, match="job 0 ran"):
        collect(engine)
