"""agents/attainable.py: the per-job offset design and the searches it runs on one cell."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
from helpers import TierLatency, load_script, make_trace

from dallygym import ClusterSpec, simulate
from dallygym.learning import priority_search as ps
from dallygym.sim.engine import Engine, EngineConfig, run_policy
from dallygym.sim.metrics import collect
from dallygym.sim.trace import generate_trace

attainable = load_script("agents/attainable.py", "attainable_under_test")
NET = ps.parameter_count(attainable.HIDDEN)


def offsets_policy(offsets, net=None) -> "attainable.OffsetNetPolicy":
    net = np.zeros(NET) if net is None else net
    return attainable.OffsetNetPolicy(np.concatenate([net, offsets]), len(offsets))


def test_with_a_zero_network_the_offsets_alone_set_the_order():
    # One machine of 8 GPUs, speed 1: job 0 (8 GPUs, 100 s) holds it from t=0; jobs 1 (4 GPUs,
    # 10 s), 2 (8 GPUs, 1 s) and 3 (2 GPUs, 5 s) queue behind it. Equal offsets tie, and ties go
    # by arrival: jobs 1 and 3 share the machine at 100, job 2 waits for all of it until 110.
    # Offsets 0.3, 0.1, 0.2 put job 2 first (100-101), then 3 and 1 (both at 101).
    trace = make_trace([(0, 0, 8, 100, 1.0), (1, 1, 4, 10, 1.0), (2, 2, 8, 1, 1.0), (3, 3, 2, 5, 1.0)])
    spec = ClusterSpec(1, 1, 8)

    def starts(offsets):
        engine = Engine(trace, spec, offsets_policy(np.array(offsets)), TierLatency(), EngineConfig())
        return collect(run_policy(engine)).jobs["first_start_s"].tolist()

    assert starts([0.0, 0.0, 0.0, 0.0]) == [0.0, 100.0, 110.0, 100.0]
    assert starts([0.0, 0.3, 0.1, 0.2]) == [0.0, 101.0, 100.0, 101.0]


def test_offsets_zero_give_the_networks_own_run():
    trace, spec = generate_trace("small", seed=3), ClusterSpec(2, 2, 8)
    net = ps.initial_parameters(attainable.HIDDEN, np.random.default_rng(4))
    alone = simulate(trace, spec, policy=ps.policy_of(net, attainable.HIDDEN)).jobs
    with_offsets = simulate(trace, spec, policy=offsets_policy(np.zeros(len(trace)), net)).jobs
    pd.testing.assert_frame_equal(alone, with_offsets)


def test_a_cell_gets_one_row_per_search_no_worse_than_its_start_and_the_same_twice(tmp_path):
    trace = generate_trace("small", seed=11)
    start = ps.initial_parameters(attainable.HIDDEN, np.random.default_rng(7))
    args = SimpleNamespace(
        searches=list(attainable.SEARCHES),
        iterations=2,
        population=3,
        workers=1,
        std=0.5,
        start_std=0.2,
        offset_std=0.05,
    )
    info = attainable.cell_info(("batch", trace, 2), machines_per_rack=2)
    rows, vectors = attainable.run_cell(info, args, start)
    assert [r["search"] for r in rows] == list(attainable.SEARCHES)
    spec = ClusterSpec(2, 2, 8)
    dally = simulate(trace, spec, policy="dally").summary
    safe_jct = simulate(trace, spec, policy=rows[0]["best_safe"]).summary["jct_mean_s"]
    own = simulate(trace, spec, policy=ps.policy_of(start, attainable.HIDDEN)).summary
    for row in rows:
        assert row["vectors_played"] == 2 * 3
        assert row["target"] == 0.9
        assert row["reaches_target"] == (row["best_jct_vs_best_safe"] <= 0.9 * (1 + 1e-6))
        if not np.isnan(row["best_makespan_vs_dally"]):
            assert row["best_makespan_vs_dally"] <= 1.01 + 1e-6
    if own["makespan_s"] <= 1.01 * dally["makespan_s"]:  # the start is played first: the best is no worse
        for row in (rows[0], rows[2]):
            assert row["best_jct_vs_best_safe"] <= own["jct_mean_s"] / safe_jct * (1 + 1e-12)
    for search, vector in vectors.items():  # the best vector met is the run reported
        row = rows[attainable.SEARCHES.index(search)]
        policy = (
            attainable.OffsetNetPolicy(vector, len(trace))
            if search == attainable.SEARCHES[2]
            else ps.policy_of(vector, attainable.HIDDEN)
        )
        assert simulate(trace, spec, policy=policy).summary["jct_mean_s"] / safe_jct == row["best_jct_vs_best_safe"]
    transfer = attainable.transfer_rows({"tuned": vectors[attainable.SEARCHES[0]]}, [info], start)
    assert [r["tuned_on"] for r in transfer] == ["start agent", "tuned"]
    assert transfer[0]["jct_vs_best_safe"] == own["jct_mean_s"] / safe_jct
    assert transfer[1]["jct_vs_best_safe"] == rows[0]["best_jct_vs_best_safe"]
    again, _ = attainable.run_cell(info, args, start)
    drop = ("seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in again] == [
        {k: v for k, v in r.items() if k not in drop} for r in rows
    ]
    # The tables render again from the CSVs: one line per cell, each search's number.
    csv = tmp_path / "a.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    pd.DataFrame(transfer).to_csv(attainable.transfer_path(csv), index=False)
    out = tmp_path / "a.md"
    attainable.main(["--from-csv", str(csv), "--run-command", "python agents/attainable.py", "--out", str(out)])
    text = out.read_text()
    assert "Produced by `python agents/attainable.py` (tables rendered from its CSVs by" in text
    line = next(row for row in text.splitlines() if row.startswith("| batch | 2 |"))
    assert line.endswith(" | ".join(f"{r['best_jct_vs_best_safe']:.3f}" for r in rows) + " |")
    assert "| start agent |" in text and "| tuned |" in text
