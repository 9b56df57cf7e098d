"""agents/queue_baselines.py and agents/guard_sweep.py: the rows they compute."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from conftest import load_script

from dallygym import ClusterSpec, simulate
from dallygym.trace import generate_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
baselines = load_script("agents/queue_baselines.py", "queue_baselines_under_test")
guard_sweep = load_script("agents/guard_sweep.py", "guard_sweep_under_test")


def test_a_cell_has_every_baseline_row_and_constant_zero_is_dally():
    trace = generate_trace("small", seed=11)
    rows = baselines.run_cell(("other", trace, 2), "DallyQueueSmall-v0", (), machines_per_rack=2)
    by_agent = {row["agent"]: row for row in rows}
    assert {"dally", "protected-share picks", "guarded protected-share picks", "constant-0",
            "always-stop", "random-picks", "full guard: protected-share picks", "full guard: random picks",
            "full guard: constant-0"} <= set(by_agent)
    assert by_agent["constant-0"]["makespan_s"] == by_agent["dally"]["makespan_s"]
    assert by_agent["dally"]["jct_vs_dally_%"] == 0.0


def test_guard_sweep_writes_each_episode_relative_to_dally(tmp_path):
    out = tmp_path / "sweep.md"
    assert guard_sweep.main(["--seeds", "5001", "--shares", "0.25", "--guards", "0.25", "none", "--racks", "16",
                             "--workers", "1", "--out", str(out)]) == 0
    rows = pd.read_csv(out.with_suffix(".csv"), keep_default_na=False)
    trace = generate_trace("batch-500", seed=5001)
    spec = ClusterSpec(16, 8, 8)
    dally = simulate(trace, spec, policy="dally").summary
    for guard in (0.25, None):
        summary = baselines.through_env("DallyQueue-v0", trace, spec, baselines.protected_quarter, guard_leases=guard)
        change = round(100 * (summary["jct_mean_s"] / dally["jct_mean_s"] - 1), 1)
        label = "none" if guard is None else "0.25"
        row = rows[rows.guard_leases.astype(str) == label]
        assert row["jct_vs_dally_%"].tolist() == [change]
    assert "Every episode" in out.read_text()
