"""benchmarks/speed.py runs (its numbers are benchmarks, never asserted here)."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import load_script


@pytest.mark.slow
def test_the_training_speed_part_trains_each_environment_and_writes_its_table(tmp_path):
    pytest.importorskip("sb3_contrib")
    speed = load_script("benchmarks/speed.py", "bench_speed")
    assert speed.main(["--train", "--train-steps", "64", "--out", str(tmp_path)]) == 0
    frame = pd.read_csv(tmp_path / "train_speed.csv")
    assert frame["env"].tolist() == ["Dally-v0", "DallyQueue-v0"]
    assert (frame["steps"] == 64).all() and (frame["steps_per_s"] > 0).all() and (frame["cartpole_ratio"] > 0).all()
    assert "--train --train-steps 64" in (tmp_path / "train_speed.md").read_text()


@pytest.mark.slow
def test_the_whole_trace_part_runs_every_policy_and_reports_a_stopped_run(tmp_path):
    from pathlib import Path

    from dallygym.sim.policies import POLICIES

    speed = load_script("benchmarks/speed.py", "bench_speed")
    source = str(Path(__file__).parent / "data" / "philly_small.csv")
    frame = speed.whole_trace_rows(1e-5, source, racks=1, limit_s=60.0)
    assert frame["policy"].tolist() == list(POLICIES)
    assert (frame["status"] == "ok").all() and frame["makespan_h"].notna().all()
    stopped = speed.run_measured(["simulate", "--policy", "dally", "--racks", "1", "--trace", source], limit_s=0.01)
    assert stopped["summary"] is None


def test_the_priority_cost_part_times_both_key_paths_and_finds_the_same_runs(tmp_path, monkeypatch):
    speed = load_script("benchmarks/speed.py", "bench_speed")
    monkeypatch.setattr(speed, "PRIORITY_COST_CELLS", (("poisson-411", 16),))
    monkeypatch.setattr(speed, "cartpole_step_s", lambda: 1e-5)
    assert speed.main(["--priority-cost", "--repeats", "1", "--out", str(tmp_path)]) == 0
    frame = pd.read_csv(tmp_path / "priority_cost.csv")
    assert frame[["trace", "racks"]].values.tolist() == [["poisson-411", 16]]
    assert frame["same_result"].all() and (frame[["net_compiled_ms", "limit_compiled_ms"]] > 0).all().all()
    assert (frame[["net_speedup", "limit_speedup"]] > 0).all().all()
    assert "--priority-cost --repeats 1" in (tmp_path / "priority_cost.md").read_text()
