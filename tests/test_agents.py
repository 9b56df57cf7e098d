"""Learned agents: the committed model loads and evaluates; the evaluation and report commands."""

from __future__ import annotations

import io
import json
from pathlib import Path

import gymnasium as gym
import pandas as pd
import pytest
from helpers import load_script

pytest.importorskip("sb3_contrib")

import dallygym  # noqa: E402
from dallygym import ClusterSpec  # noqa: E402
from dallygym.experiments.cli import main  # noqa: E402
from dallygym.learning.trainer import LearnedAgent, evaluate_agents, load_agent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "agents" / "runs" / "ppo-hidden"
HELDOUT_BATCH = ROOT / "traces" / "heldout" / "batch-500-seed2001.csv"
SMALL_ARGS = ["--racks", "2", "--machines-per-rack", "2", "--trace", "small"]


@pytest.mark.parametrize("run", sorted(p.parent.name for p in (ROOT / "agents" / "runs").glob("*/model.zip")))
def test_committed_agents_have_their_provenance(run):
    config = json.loads((ROOT / "agents" / "runs" / run / "config.json").read_text())
    meta = json.loads((ROOT / "agents" / "runs" / run / "meta.json").read_text())
    assert config["env_id"] in ("Dally-v0", "DallyQueue-v0", "DallyQueueSmall-v0")
    # Seed 0, or a -sN seed run (queue-ppo-s1, ...) trained with seed N.
    suffix = run.rsplit("-s", 1)[-1]
    assert config["seed"] == (int(suffix) if suffix.isdigit() else 0)
    # The full total, unless the wall-clock guard stopped the run (then meta.json says so).
    assert meta["timesteps"] >= config["total_timesteps"] or meta.get("stopped_by_time_limit") is True
    assert meta["wall_s"] <= 3600
    # `dallygym train ...`, or the same entry point run as `python -m dallygym train ...` or
    # `python -m dallygym.experiments.cli train ...`.
    assert meta["command"].startswith(("dallygym train", "python -m dallygym train", "cli.py train"))
    assert f"--seed {config['seed']}" in meta["command"]
    assert (ROOT / "agents" / "runs" / run / "curve.png").exists()
    assert (ROOT / "agents" / "runs" / run / "policy.pth").exists()  # what dallygym evaluate loads


def test_a_learned_agent_is_run_on_one_torch_thread_and_the_count_restored():
    import torch

    from dallygym.learning.trainer import run_agent

    agent = LearnedAgent(ROOT / "agents" / "runs" / "queue-small-ppo-s0")
    seen = []

    class Spy:
        config, env_id, name = agent.config, agent.env_id, agent.name

        def predict(self, *args, **kwargs):
            seen.append(torch.get_num_threads())
            return agent.predict(*args, **kwargs)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        spied = run_agent(Spy(), "small", ClusterSpec(2, 2, 8)).summary
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1}
    assert spied == run_agent(agent, "small", ClusterSpec(2, 2, 8)).summary


def test_training_records_the_command_as_typed(monkeypatch):
    from dallygym.learning.trainer import _command_line

    monkeypatch.setattr("sys.argv", ["/work/venv/lib/dallygym/__main__.py", "train", "--seed", "2"])
    assert _command_line() == "python -m dallygym train --seed 2"
    monkeypatch.setattr("sys.argv", ["/usr/bin/dallygym", "train", "--out", "a b"])
    assert _command_line() == "dallygym train --out 'a b'"


def test_agent_trained_under_another_priority_is_evaluated_under_it():
    run = ROOT / "agents" / "runs" / "ppo-hidden-tiresias-order"
    if not (run / "model.zip").exists():
        pytest.skip("no such committed run")
    assert load_agent(str(run)).priority == "tiresias"
    assert load_agent(str(COMMITTED)).priority == "dally"  # runs saved before the field: the default


def test_committed_agent_loads_and_evaluates_on_the_small_env():
    agent = load_agent(str(COMMITTED))
    assert isinstance(agent, LearnedAgent)
    env = gym.make("DallySmall-v0", sensitivity=agent.sensitivity)
    summary = dallygym.evaluate(env, agent, seed=0)
    assert summary["jobs"] == 60 and set(dallygym.SUMMARY_KEYS) <= set(summary)


@pytest.mark.slow
def test_committed_agent_evaluates_on_a_held_out_trace():
    frame = evaluate_agents([str(COMMITTED)], [str(HELDOUT_BATCH)], ClusterSpec(8))
    assert len(frame) == 1 and frame.loc[0, "jobs"] == 500
    assert frame.loc[0, "makespan_s"] > 0


def test_evaluate_command_prints_one_row_per_agent_with_the_summary_keys(capsys):
    code = main(
        [
            "evaluate",
            "--agent",
            "dally",
            "--agent",
            "tiresias",
            "--agent",
            str(COMMITTED),
            *SMALL_ARGS,
            "--format",
            "csv",
        ]
    )
    assert code == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert frame["agent"].tolist() == ["dally", "tiresias", str(COMMITTED)]
    assert set(dallygym.SUMMARY_KEYS) <= set(frame.columns)
    # A heuristic through evaluate is exactly its native simulation.
    native = dallygym.simulate("small", ClusterSpec(2, 2, 8), policy="tiresias").summary
    assert frame.loc[1, "jct_mean_s"] == pytest.approx(native["jct_mean_s"], rel=1e-12)


def test_evaluate_unknown_agent_exits_2_naming_it(capsys):
    assert main(["evaluate", "--agent", "no-such-agent", *SMALL_ARGS]) == 2
    assert "no-such-agent" in capsys.readouterr().err


@pytest.mark.slow
def test_report_command_runs_end_to_end_on_a_tiny_configuration(tmp_path):
    report = load_script("benchmarks/report.py", "report")
    code = report.main(
        [
            "--agent",
            str(COMMITTED),
            "--policies",
            "dally",
            "tiresias",
            "gandiva",
            "fifo",
            "--racks",
            "2",
            "--machines-per-rack",
            "2",
            "--goal-racks",
            "2",
            "--batch-traces",
            "small",
            "--poisson-traces",
            "small",
            "--imported-traces",
            "--probe-thresholds",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    rows = pd.read_csv(tmp_path / "report.csv")
    assert set(rows["agent"]) == {"dally", "tiresias", "gandiva", "fifo", "ppo-hidden"}
    text = (tmp_path / "report.md").read_text()
    assert "does a learned agent beat auto-tuned Dally" in text and "ppo-hidden" in text
    assert (tmp_path / "makespan_normalised.png").exists() and (tmp_path / "timelines.png").exists()


def test_a_hand_written_dally_v0_agent_without_a_saved_config_runs_through_run_agent():
    # The report's oracle-threshold probes are such agents: attributes say how they observe.
    import numpy as np

    from dallygym.learning.trainer import run_agent

    class AlwaysWait:
        sensitivity, reward = "hidden", "jct"

        def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
            return np.int64(0), state

    spec = ClusterSpec(2, 2, 8)
    waited = run_agent(AlwaysWait(), "small", spec).summary
    assert waited == dallygym.simulate("small", spec, policy="dally-consolidated").summary


def _goal_rows(makespans: dict) -> pd.DataFrame:
    """Report rows of batch traces: {(agent, trace, racks): makespan_h}; mean JCT 100 h for Dally, 50 h else."""
    return pd.DataFrame(
        [
            {
                "workload": "batch",
                "agent": a,
                "trace": t,
                "racks": r,
                "makespan_s": 3600.0 * m,
                "jct_mean_s": 3600.0 * (100 if a == "dally" else 50),
            }
            for (a, t, r), m in makespans.items()
        ]
    )


@pytest.mark.parametrize(
    "agent_at_16, verdict",
    [
        ({"t1": 100, "t2": 100}, "goal met"),
        ({"t1": 100, "t2": 106}, "goal not met"),  # one trace beyond +5 % at 16 racks
        ({"t1": 100}, "goal not decided"),  # t2 never ran at 16 racks
    ],
)
def test_the_report_decides_issue_10s_goal_on_every_trace_at_the_other_sizes(agent_at_16, verdict):
    report = load_script("benchmarks/report.py", "report")
    makespans = {}
    for agent in ("dally", "tiresias", "queue-x"):
        for trace in ("t1", "t2"):
            makespans[(agent, trace, 8)] = makespans[(agent, trace, 4)] = 100
            if agent != "queue-x":
                makespans[(agent, trace, 16)] = 100
    makespans.update({("queue-x", t, 16): m for t, m in agent_at_16.items()})
    rows = _goal_rows(makespans)
    goal = report.goal_table(rows, 8, ["queue-x"])
    lines = report.queue_goal_lines(rows, goal, ["queue-x"], 8)
    sentence = next(line for line in lines if line.startswith("- **queue-x**"))
    assert sentence.endswith(verdict + "." if verdict != "goal not decided" else "16 racks).")
    assert verdict in sentence
    assert "4 racks +0.0, +0.0 %" in sentence
