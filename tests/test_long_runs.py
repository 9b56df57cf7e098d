"""What keeps long runs cheap: index sets instead of scans, a bounded timeline,
scaled generators, a progress line -- each giving exactly the results of the plain way."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest

from dallygym import simulate
from dallygym.experiments.cli import main
from dallygym.sim import kernels
from dallygym.sim.cluster import ClusterSpec, ClusterState
from dallygym.sim.engine import RUNNING, Engine, EngineConfig, JobSet, run_policy
from dallygym.sim.engine.state import _add_exact
from dallygym.sim.latency import get_latency_model
from dallygym.sim.metrics import collect
from dallygym.sim.policies import make_policy
from dallygym.sim.simulate import ProgressLine
from dallygym.sim.trace import GENERATORS, generate_trace, load_trace, scaled_spec


@pytest.mark.parametrize("compiled", [False, True])
def test_job_set_lists_the_jobs_in_its_state_in_increasing_order(compiled):
    rng = np.random.default_rng(1)
    state = np.zeros(40, dtype=np.int8)
    members = JobSet(state, RUNNING, compiled)
    for _ in range(5000):
        j, new = int(rng.integers(40)), int(rng.integers(4))
        if state[j] == new:
            continue
        if state[j] == RUNNING:
            members.remove(j)
        if new == RUNNING:
            members.add(j)
        state[j] = new
        if rng.random() < 0.3:  # changes pile up between reads, leaving and coming back too
            assert members.array().tolist() == np.flatnonzero(state == RUNNING).tolist()


@pytest.mark.parametrize("compiled", [False, True])
def test_job_set_lent_to_a_row_is_lent_until_a_member_changes(compiled):
    """JobSet.lend (the compiled loop keeps the members in a row of its own): read from the
    row, and lent until a job enters or leaves -- then the members are the row's plus the
    changes."""
    rng = np.random.default_rng(3)
    state = np.zeros(40, dtype=np.int8)
    members = JobSet(state, RUNNING, compiled)
    row = np.full(40, -1, dtype=np.int64)
    assert not members.lent()  # made from the states, never lent
    for _ in range(3000):
        if rng.random() < 0.1:  # the loop returns: its row holds the members
            now = np.flatnonzero(state == RUNNING)
            row[:] = -1
            row[: now.size] = now
            members.lend(row, now.size)
            assert members.lent()
        j, new = int(rng.integers(40)), int(rng.integers(4))
        old = state[j]
        if old != new:
            lent = members.lent()
            if old == RUNNING:
                members.remove(j)
            if new == RUNNING:
                members.add(j)
            state[j] = new
            assert members.lent() == (lent and RUNNING not in (old, new))
        if rng.random() < 0.3:
            lent = members.lent()
            assert members.array().tolist() == np.flatnonzero(state == RUNNING).tolist()
            assert members.lent() == lent  # reading changes nothing
    members.load(members.array())
    assert not members.lent()


@pytest.mark.parametrize("add", [_add_exact, kernels.add_exact], ids=["reference", "compiled"])
def test_exact_partial_sums_round_like_fsum(add):
    rng = np.random.default_rng(2)
    values = (rng.standard_normal(3000) * 10.0 ** rng.integers(-8, 12, 3000)).tolist()
    partials = np.zeros(128)
    n = 0
    for x in values:
        n = add(partials, n, x)
    assert n < 64  # far from the buffer's end
    assert math.fsum(partials[:n].tolist()) == math.fsum(values)


def _engine(trace: str, racks: int, policy: str) -> Engine:
    spec = ClusterSpec(racks)
    return Engine(
        load_trace(trace, cluster=spec), spec, make_policy(policy), get_latency_model("dally-paper"), EngineConfig()
    )


@pytest.mark.parametrize("compiled", [False, True])
def test_a_thinned_timeline_stays_bounded_and_leaves_the_summary_unchanged(monkeypatch, compiled):
    monkeypatch.setattr(ClusterState, "compiled", compiled)
    full = collect(run_policy(_engine("poisson-411", 4, "dally")))
    engine = _engine("poisson-411", 4, "dally")
    engine.timeline_rows = 50
    thinned = collect(run_policy(engine))
    assert len(full.timeline) > 200
    assert 25 <= len(thinned.timeline) < 50
    assert thinned.summary == full.summary  # utilization too, bit for bit
    times = thinned.timeline["time_s"]
    assert times.is_monotonic_increasing and times.iloc[0] == full.timeline["time_s"].iloc[0]
    assert set(times) <= set(full.timeline["time_s"])  # rows are real event rows, not interpolated


def test_a_scaled_workload_keeps_its_mixes_and_arrival_rate():
    spec = scaled_spec("philly-like", 5000)
    base = GENERATORS["philly-like"]
    assert spec.num_jobs == 5000 and sum(c for _, c in spec.model_counts) == 5000
    assert dict(spec.gpu_counts) == {g: c * 5 for g, c in base.gpu_counts}
    assert spec.mean_interarrival_s == base.mean_interarrival_s
    frame = generate_trace("philly-like", seed=3, jobs=5000)
    assert len(frame) == 5000 and frame["job_id"].tolist() == list(range(5000))
    assert frame["arrival_s"].max() == pytest.approx(5000 * 150.0, rel=0.05)
    pd.testing.assert_frame_equal(frame, generate_trace("philly-like", seed=3, jobs=5000))
    assert frame.attrs["generator"]["jobs"] == 5000


def test_a_workload_scaled_to_its_own_size_is_the_workload():
    pd.testing.assert_frame_equal(generate_trace("batch-500", 4, jobs=500), generate_trace("batch-500", 4))
    with pytest.raises(ValueError, match="jobs"):
        generate_trace("small", 0, jobs=0)


@pytest.mark.parametrize("name", list(GENERATORS))
def test_a_generated_trace_is_its_own_validated_form(name):
    frame = generate_trace(name, seed=11)
    pd.testing.assert_frame_equal(load_trace(frame), frame, check_exact=True)


def test_trace_generate_takes_a_job_count(tmp_path, capsys):
    out = tmp_path / "big.csv"
    assert main(["trace", "generate", "philly-like", "--jobs", "2500", "--seed", "1", "--out", str(out)]) == 0
    assert "2500 jobs" in capsys.readouterr().out
    pd.testing.assert_frame_equal(load_trace(out), generate_trace("philly-like", 1, jobs=2500), check_exact=True)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_shows_on_a_terminal_and_is_cleared_at_the_end():
    stream = _Terminal()
    meter = ProgressLine("dally", stream=stream, every_s=0.0)
    engine = run_policy(_engine("batch-500", 8, "dally"), progress=meter)
    text = stream.getvalue()
    assert "dally: " in text and "/500 jobs done" in text
    assert text.endswith("\r\033[K") and engine.finished == 500


def test_progress_line_is_off_when_stderr_is_not_a_terminal_or_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert not ProgressLine.wanted(io.StringIO())
    assert ProgressLine.wanted(_Terminal())
    monkeypatch.setenv("CI", "true")
    assert not ProgressLine.wanted(_Terminal())


def test_a_run_with_progress_gives_the_same_results():
    assert (
        simulate("small", ClusterSpec(2, 2, 8), progress=True).summary
        == simulate("small", ClusterSpec(2, 2, 8)).summary
    )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("spec", [ClusterSpec(3, 4, 8), ClusterSpec(2, 2, 4), ClusterSpec(1, 3, 2)])
def test_the_quick_better_tier_test_agrees_with_the_best_tier_rule(spec, compiled):
    engine = Engine(load_trace("small"), ClusterSpec(4), make_policy("fifo"), get_latency_model("dally-paper"))
    # The rule reads only the cluster's shape (the compiled test takes it as three ints).
    engine.spec = spec
    engine._dims = (spec.racks, spec.machines_per_rack, spec.gpus_per_machine)
    engine.cluster.compiled = compiled
    rng = np.random.default_rng(5)
    for _ in range(1000):
        per_machine = rng.integers(0, spec.gpus_per_machine + 1, spec.num_machines) * (
            rng.random(spec.num_machines) < 0.6
        )
        g = int(rng.integers(1, spec.num_gpus + 1))
        current = int(rng.integers(0, 3))
        assert engine._better_tier_in(per_machine, g, current) == (engine._best_tier_in(per_machine, g) < current)
