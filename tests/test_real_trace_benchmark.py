"""The real-trace section of benchmarks/compare.py: trace names, the rule choosing the cluster
sizes where a trace contends, the paper's directions and the sentences computed from the runs,
checked on small hand-built traces and result tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from helpers import load_script

from dallygym import ClusterSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/compare.py", "bench_compare_real")


def _trace(jobs: list[tuple[float, int]], hours: float = 10.0) -> pd.DataFrame:
    """Jobs (arrival_s, num_gpus) of resnet50 running about ``hours`` alone each."""
    return pd.DataFrame(
        {
            "job_id": range(len(jobs)),
            "arrival_s": [a for a, _ in jobs],
            "num_gpus": [g for _, g in jobs],
            "model": "resnet50",
            "total_iterations": int(hours * 3600),
            "iter_time_s": 1.0,
        }
    )


# --- names -----------------------------------------------------------------------------------


def test_real_trace_names_default_to_every_shipped_real_trace_in_order(bench):
    from dallygym.sim.trace.real import REAL_TRACES

    names = [t.name for t in REAL_TRACES]
    assert bench.real_trace_names() == names
    assert bench.real_trace_names(["all"]) == names
    assert bench.real_trace_names(["philly-48h", "tiresias-60", "philly-48h"]) == ["philly-48h", "tiresias-60"]


def test_a_name_that_is_not_a_shipped_real_trace_is_refused_naming_the_known_ones(bench):
    with pytest.raises(ValueError, match="not a shipped real trace: batch-500; choose from tiresias-60"):
        bench.real_trace_names(["batch-500"])


# --- the contention rule ---------------------------------------------------------------------


def test_uncontended_peak_counts_overlapping_jobs_and_not_one_ending_as_another_starts(bench):
    spec = ClusterSpec(1)
    first = _trace([(0.0, 8)])
    _, end = bench.alone_intervals(first, spec)
    back_to_back = _trace([(0.0, 8), (float(end[0]), 8)])
    assert bench.uncontended_peak(back_to_back, spec) == 8
    overlapping = _trace([(0.0, 8), (float(end[0]) / 2, 4), (float(end[0]) / 2, 2)])
    assert bench.uncontended_peak(overlapping, spec) == 14
    assert bench.makespan_bound(back_to_back, spec) == pytest.approx(2 * end[0])


def test_every_whole_rack_size_where_the_peak_exceeds_the_gpus_is_run(bench):
    trace = _trace([(0.0, 8)] * 20)  # peak 160 GPUs: more than 1 and 2 racks, less than 4
    sizes = bench.contention_sizes(trace, racks=(1, 2, 4, 8))
    assert [(s["label"], s["peak"], s["contends"], s["run"]) for s in sizes] == [
        ("1 rack", 160, True, True),
        ("2 racks", 160, True, True),
        ("4 racks", 160, False, False),
        ("8 racks", 160, False, False),
    ]


def test_sizes_that_cannot_hold_the_largest_job_are_not_tried(bench):
    trace = _trace([(0.0, 128)] + [(0.0, 8)] * 30)
    assert [s["spec"].racks for s in bench.contention_sizes(trace, racks=(1, 2, 4, 8))] == [2, 4, 8]


def test_a_trace_contending_at_no_whole_rack_size_is_shown_at_one_rack_and_run_on_a_smaller_one(bench):
    trace = _trace([(0.0, 8)] * 5)  # peak 40 GPUs < 64
    sizes = bench.contention_sizes(trace, racks=(1, 2), sub_rack=(4, 2, 1))
    assert [(s["label"], s["contends"], s["run"]) for s in sizes] == [
        ("1 rack", False, True),
        ("2 racks", False, False),
        ("1 rack of 4 machines", True, True),
    ]
    assert sizes[-1]["spec"] == ClusterSpec(1, 4)


def test_a_trace_that_never_contends_has_no_contending_size(bench):
    trace = _trace([(0.0, 8)])  # one job: it never waits
    sizes = bench.contention_sizes(trace, racks=(1, 2), sub_rack=(4, 2, 1))
    assert not any(s["contends"] for s in sizes)
    assert [s["label"] for s in sizes if s["run"]] == ["1 rack"]


# --- directions and sentences ----------------------------------------------------------------


METRICS = (
    "makespan_s",
    "jct_mean_s",
    "jct_median_s",
    "jct_p95_s",
    "jct_p99_s",
    "queue_mean_s",
    "queue_p95_s",
    "queue_p99_s",
    "comm_mean_s",
    "preemptions",
    "wall_s",
)


def _row(policy, size, trace="t", kind="heuristic", status="ok", **metrics):
    return {
        "trace": trace,
        "size": size,
        "gpus": 64,
        "kind": kind,
        "policy": policy,
        "status": status,
        **dict.fromkeys(METRICS, 100.0),
        **metrics,
    }


def test_direction_verdict_is_dally_lower_with_ties_within_the_printed_precision(bench):
    assert bench.direction_verdict(50.0, 100.0) == ("agrees", "+50 %")
    assert bench.direction_verdict(200.0, 100.0) == ("disagrees", "-100 %")
    assert bench.direction_verdict(0.0, 0.0) == ("tie", "equal")
    assert bench.direction_verdict(100.01, 100.0)[0] == "tie"
    assert bench.direction_verdict(5.0, 0.0) == ("disagrees", "baseline 0")


def test_directions_table_judges_each_size_from_the_heuristic_rows(bench):
    rows = pd.DataFrame(
        [
            _row("dally", "1 rack", makespan_s=80.0, comm_mean_s=0.0, queue_p99_s=0.0),
            _row("tiresias", "1 rack", makespan_s=100.0, comm_mean_s=0.0, queue_p99_s=0.0),
            _row("gandiva", "1 rack", jct_mean_s=50.0),
            _row("ppo-x", "1 rack", kind="learned", makespan_s=1.0),
        ]
    )
    table = bench.directions_table(rows).set_index("direction")
    assert len(table) == len(bench.REAL_DIRECTIONS)
    assert table.loc["makespan vs Tiresias", "verdict"] == "agrees"
    assert table.loc["makespan vs Tiresias", "improvement"] == "+20 %"
    assert table.loc["mean JCT vs Gandiva", "verdict"] == "disagrees"
    assert table.loc["communication vs Tiresias", "verdict"] == "tie"
    assert table.loc["P99 queueing vs Tiresias", "verdict"] == "tie"


def test_trace_sentences_are_computed_from_the_frame(bench):
    rows = pd.DataFrame(
        [
            _row("dally", "1 rack", jct_mean_s=200.0, makespan_s=7200.0),
            _row("tiresias", "1 rack", jct_mean_s=100.0, makespan_s=14400.0),
            _row("gandiva", "1 rack", jct_mean_s=400.0, makespan_s=7200.0),
            _row("fifo", "1 rack", jct_mean_s=50.0, makespan_s=9000.0),
            _row("dally", "2 racks", jct_mean_s=100.0, makespan_s=3600.0),
            _row("tiresias", "2 racks", jct_mean_s=100.0, makespan_s=7200.0),
            _row("gandiva", "2 racks", jct_mean_s=150.0, makespan_s=3600.0),
            _row("fifo", "2 racks", jct_mean_s=400.0, makespan_s=3600.0),
            _row("random", "2 racks", jct_mean_s=80.0, makespan_s=3600.0),
        ]
    )
    sizes = pd.DataFrame({"trace": ["t", "t"], "label": ["1 rack", "2 racks"], "makespan_bound_s": [3600.0, 3600.0]})
    (line,) = bench.trace_sentences(rows, "t", sizes)
    assert line.startswith("- **t** (1 rack and 2 racks): *mean JCT* (Dally 0.1 h, 0.0 h)")
    assert "Tiresias better than or equal to Dally (-100.0 %, +0.0 % at 1 rack and 2 racks)" in line
    assert "Dally better than Gandiva (+50.0 %, +33.3 % at 1 rack and 2 racks)" in line
    assert "the best other policy (fifo / random) better than Dally (-300.0 %, -25.0 % at 1 rack and 2 racks)" in line
    assert (
        "*makespan* (Dally 2.0 h, 1.0 h; the least possible, every job alone from its arrival: 1.0 h, 1.0 h; "
        "Dally is at it at 2 racks)" in line
    )
    assert "Dally better than Tiresias (+50.0 %, +50.0 % at 1 rack and 2 racks)" in line
    assert "holding at every size: makespan vs Tiresias" in line


def test_agent_sentences_give_the_range_the_goal_and_the_runs_stopped(bench):
    rows = pd.DataFrame(
        [
            _row("dally", "1 rack", jct_mean_s=100.0, makespan_s=100.0),
            _row("ppo-x", "1 rack", kind="learned", jct_mean_s=80.0, makespan_s=100.0),
            _row("dally", "2 racks", jct_mean_s=100.0, makespan_s=100.0),
            _row("ppo-x", "2 racks", kind="learned", jct_mean_s=95.0, makespan_s=110.0),
            _row("dally", "4 racks"),
            _row("ppo-x", "4 racks", kind="learned", status="stopped after 600 s", jct_mean_s=float("nan")),
        ]
    )
    (line,) = bench.agent_sentences(rows)
    assert line == (
        "- **ppo-x**: mean JCT -20.0 to -5.0 % and makespan +0.0 to +10.0 % against Dally over 2 "
        "(trace, size) cells; the goal (mean JCT at least 10 % lower, makespan no longer) is met on 1: "
        "t at 1 rack; too slow on t at 4 racks (stopped after 600 s)."
    )


def test_only_contending_sizes_enter_the_directions(bench):
    rows = pd.DataFrame([_row("dally", "1 rack"), _row("dally", "1 rack of 2 machines")])
    sizes = pd.DataFrame({"trace": ["t", "t"], "label": ["1 rack", "1 rack of 2 machines"], "contends": [False, True]})
    assert list(bench.contending_rows(sizes, rows)["size"]) == ["1 rack of 2 machines"]


def test_a_learned_agent_past_its_time_limit_is_stopped(bench):
    class Agent:
        name, env_id = "a", "Dally-v0"

        def predict(self, *args, **kwargs):
            return 0, None

    live = bench._Deadline(Agent(), 3600.0)
    assert live.predict(None) == (0, None) and live.env_id == "Dally-v0" and live.name == "a"
    with pytest.raises(bench.AgentTooSlow):
        bench._Deadline(Agent(), -1.0).predict(None)


def test_a_resumed_run_keeps_the_rows_it_has_and_orders_them_as_a_full_run(bench):
    sizes = pd.DataFrame({"trace": ["t"], "racks": [1], "machines_per_rack": [2], "run": [True]})
    size = "1 rack of 2 machines"
    kept = pd.DataFrame([_row("ppo-a", size, kind="learned"), _row("dally", size), _row("fifo", size)])
    rows = bench.run_real(sizes, ["dally", "fifo"], ["runs/ppo-a"], 1, kept=kept)  # nothing left to run
    assert list(rows["policy"]) == ["dally", "fifo", "ppo-a"]
