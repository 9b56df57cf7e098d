"""The sentences benchmarks/compare.py writes are computed from the runs: checked on small,
hand-made result tables whose right wording is known."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/compare.py", "bench_compare")


def _row(policy, racks, trace="batch-500", **metrics):
    base = dict.fromkeys(
        (
            "makespan_s",
            "jct_mean_s",
            "jct_median_s",
            "jct_p95_s",
            "jct_p99_s",
            "queue_mean_s",
            "queue_p95_s",
            "queue_p99_s",
            "comm_mean_s",
        ),
        100.0,
    )
    return {"trace": trace, "racks": racks, "policy": policy, **base, **metrics}


def test_dally_losses_name_each_metric_where_dally_is_worse(bench):
    grid = pd.DataFrame(
        [
            _row("dally", 2),
            _row("gandiva", 2, jct_median_s=80.0),
            _row("dally", 4),
            _row("gandiva", 4, makespan_s=300.0),
        ]
    )
    assert bench._dally_losses(grid, "gandiva") == ["jct_median_s on batch-500 at 2 racks (100 vs 80)"]


def test_lease_sentence_names_the_sizes_where_tiresias_keeps_the_lower_jct(bench):
    rows = []
    for lease in (1, 4):
        rows += [
            {
                "racks": 2,
                "lease_h": lease,
                "policy": "dally",
                "jct_mean_s": 10.0 if lease == 1 else 8.0,
                "preemptions": 100 if lease == 1 else 40,
            },
            {"racks": 2, "lease_h": lease, "policy": "tiresias", "jct_mean_s": 5.0},
            {"racks": 8, "lease_h": lease, "policy": "dally", "jct_mean_s": 10.0, "preemptions": 50},
            {"racks": 8, "lease_h": lease, "policy": "tiresias", "jct_mean_s": 20.0 if lease == 4 else 5.0},
        ]
    (line,) = bench._lease_lines(pd.DataFrame(rows))
    assert "keeps the lower mean JCT at every lease on 2 racks" in line
    assert "at 2 racks its preemptions go from 100 to 40 and its mean JCT changes by -20 %" in line
    assert bench._lease_lines(None) == []


def test_history_changes_are_against_the_default_window_of_each_size(bench):
    sweep = pd.DataFrame(
        [
            {
                "racks": 2,
                "window_h": 96.0,
                "default": True,
                "makespan_s": 100.0,
                "jct_mean_s": 50.0,
                "comm_mean_s": 10.0,
            },
            {
                "racks": 2,
                "window_h": 12.0,
                "default": False,
                "makespan_s": 150.0,
                "jct_mean_s": 50.0,
                "comm_mean_s": 5.0,
            },
            {
                "racks": 2,
                "window_h": math.inf,
                "default": False,
                "makespan_s": 100.0,
                "jct_mean_s": 55.0,
                "comm_mean_s": 10.0,
            },
        ]
    )
    changes = bench.history_changes(sweep).set_index("window_h")
    assert changes.loc[12.0, "makespan_s"] == pytest.approx(50.0)
    assert changes.loc[12.0, "comm_mean_s"] == pytest.approx(-50.0)
    assert changes.loc[math.inf, "jct_mean_s"] == pytest.approx(10.0)
    assert "makespan by up to 50 %" in bench._history_sentence(sweep)


def test_seed_improvements_are_one_minus_dally_over_baseline(bench):
    sweep = pd.DataFrame(
        [
            {"racks": 4, "seed": 11, "policy": "dally", "makespan_s": 30.0, "jct_mean_s": 20.0, "comm_mean_s": 1.0},
            {"racks": 4, "seed": 11, "policy": "tiresias", "makespan_s": 60.0, "jct_mean_s": 10.0, "comm_mean_s": 4.0},
            {"racks": 4, "seed": 11, "policy": "gandiva", "makespan_s": 120.0, "jct_mean_s": 40.0, "comm_mean_s": 2.0},
        ]
    )
    row = bench.seed_improvements(sweep).iloc[0]
    assert row["makespan vs tiresias"] == pytest.approx(50.0)
    assert row["jct_mean vs tiresias"] == pytest.approx(-100.0)
    assert row["makespan vs gandiva"] == pytest.approx(75.0)
    assert row["comm_mean vs gandiva"] == pytest.approx(50.0)


def _grid_cell(racks, renewal="upgrade", **makespans):
    rows = []
    for policy in ("dally", "dally-nowait", "dally-consolidated", "tiresias", "gandiva", "dally-manual"):
        rows.append(
            {**_row(policy, racks, makespan_s=makespans.get(policy.replace("-", "_"), 100.0)), "renewal": renewal}
        )
    return rows


def test_section_vi_claims_are_judged_per_size(bench):
    # 2 racks: noWait better than Tiresias (agrees), Gandiva within 25 % of Dally (agrees);
    # 8 racks: noWait better than Tiresias (disagrees: it should be worse), Gandiva 1.2 x (not
    # "much worse": disagrees). Consolidated between Dally and Tiresias at 2 racks only.
    grid = pd.DataFrame(
        _grid_cell(2, dally=100.0, dally_nowait=90.0, tiresias=120.0, gandiva=110.0, dally_consolidated=110.0)
        + _grid_cell(8, dally=100.0, dally_nowait=90.0, tiresias=120.0, gandiva=120.0, dally_consolidated=130.0)
    )
    table = bench.claims_table(grid).set_index("claim")
    row = lambda key: table.loc[next(t for k, t in bench.SECTION_VI_CLAIMS if k == key)]  # noqa: E731
    assert row("nowait-vs-tiresias")["2 racks"].startswith("agrees (noWait/Tiresias 0.75)")
    assert row("nowait-vs-tiresias")["8 racks"].startswith("disagrees")
    assert row("gandiva")["2 racks"].startswith("agrees") and row("gandiva")["8 racks"].startswith("disagrees")
    assert row("consolidated")["2 racks"].startswith("agrees")
    assert row("consolidated")["8 racks"].startswith("disagrees")
    assert row("comm")["2 racks"].startswith("agrees")  # all equal: Dally is (one of) the lowest


def test_versus_sentence_follows_the_sign_of_the_improvements(bench):
    assert bench._versus(pd.Series([10.0, 20.0]), "X", [2, 4]).startswith("Dally is better than X at every size")
    assert bench._versus(pd.Series([-10.0, -5.0]), "X", [2, 4]).startswith("X is better than Dally")
    assert bench._versus(pd.Series([-10.0, 5.0]), "X", [2, 4]).startswith("it depends on the size")


def _gap(policy, racks, preemptions, queue, jct):
    return {
        "policy": policy,
        "racks": racks,
        "renewal": "upgrade",
        "jobs": 500,
        "preemptions": preemptions,
        "one_gpu_jobs": 270,
        "one_gpu_queue_mean_s": queue,
        "one_gpu_queue_after_start_share": 0.99,
        "one_gpu_jct_mean_s": queue,
        "jct_mean_s": jct,
        "jct_median_s": jct,
    }


def test_gap_sentence_is_computed_from_the_per_job_facts(bench):
    gap = pd.DataFrame(
        [
            _gap("dally", 2, 800, 300.0, 200.0),
            _gap("tiresias", 2, 1000, 100.0, 100.0),
            _gap("tiresias-las", 2, 9000, 10.0, 50.0),
        ]
    )
    (line,) = bench._gap_lines(gap)
    assert "Not time-sharing: Dally preempts 800 times" in line and "Tiresias (1,000" in line
    assert "wait more than under Tiresias" in line and "3.0 × Tiresias's" in line and "2.00 × Tiresias's" in line
    more = gap.assign(preemptions=[2000, 1000, 9000])
    assert "so time-sharing contributes" in bench._gap_lines(more)[0]
    none = gap.assign(jct_mean_s=[90.0, 100.0, 50.0])
    assert "no gap to explain" in bench._gap_lines(none)[0]
    assert bench._gap_lines(None) == []
