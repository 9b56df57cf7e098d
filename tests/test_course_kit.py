"""examples/course: the student skeleton, the PPO script and the ranking command.

Tiny configurations only (one held-out trace, a few shipped policies, one PPO update); the
committed ranking table is checked against a fresh run of its command (slow).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import dallygym
from examples.course import course, rank

torch = pytest.importorskip("torch", reason="the PPO script needs the agents extra (torch)")
from examples.course import ppo_masked  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COURSE = ROOT / "examples" / "course"
STUDENT = f"{COURSE / 'student_policy.py'}:StudentPolicy"


def test_student_skeleton_runs_as_handed_out():
    cls = rank.load_policy_class(STUDENT)
    result = dallygym.simulate("small", course.CLUSTER, policy=cls())
    assert result.summary["jobs"] == 60


def test_rank_refuses_what_is_not_a_policy(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("class NotAPolicy:\n    pass\n")
    with pytest.raises(SystemExit, match="not a dallygym.Policy"):
        rank.load_policy_class(f"{bad}:NotAPolicy")


def test_heldout_traces_are_never_training_draws():
    rng = np.random.default_rng(0)
    seeds = {int(course.training_trace(rng).attrs["generator"]["seed"]) for _ in range(20)}
    assert min(seeds) >= course.FIRST_TRAINING_SEED > max(course.HELDOUT_SEEDS)
    assert not set(course.VALIDATION_SEEDS) & set(course.HELDOUT_SEEDS)


def test_constant_zero_through_the_course_env_is_dally_exactly():
    ((_, trace),) = course.heldout_traces([2001])
    via_env = dallygym.evaluate(course.make_env(trace), course.MaskedChoice("first"))
    native = dallygym.simulate(trace, course.CLUSTER, policy="dally").summary
    assert via_env == native


@pytest.fixture(scope="module")
def tiny_agent(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ppo")
    args = ppo_masked.Args(total_timesteps=256, num_envs=2, num_steps=128, eval_every=0, out=str(out))
    return ppo_masked.train(args)


def test_ppo_script_saves_an_agent_that_loads_with_tensors_only(tiny_agent):
    saved = torch.load(tiny_agent, weights_only=True)
    assert saved["args"]["total_timesteps"] == 256
    agent = ppo_masked.load_agent(tiny_agent)
    env = course.make_env(course.heldout_traces([2001])[0][1])
    obs, info = env.reset(seed=0)
    action, _ = agent.predict(obs, action_masks=info["action_mask"])
    assert info["action_mask"][action]


def test_rank_command_on_a_tiny_configuration(tiny_agent, tmp_path, capsys):
    out = tmp_path / "table.md"
    code = rank.main(
        [
            "--policy",
            STUDENT,
            "--agent",
            str(tiny_agent),
            "--seeds",
            "2001",
            "--shipped",
            "dally",
            "fifo",
            "--format",
            "markdown",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    text = out.read_text()
    assert text == capsys.readouterr().out
    entries = [line.split("|")[1].strip() for line in text.splitlines()[2:]]
    assert sorted(entries) == sorted(
        [
            "dally",
            "fifo",
            "student (yours)",
            f"{tiny_agent.parent.name} (agent)",
            "random picks",
            "constant 0",
            "always stop",
        ]
    )
    # constant 0 is Dally exactly, so its relative columns are zero
    row = next(line for line in text.splitlines() if line.startswith("| constant 0 |"))
    assert "+0.0 %" in row


@pytest.mark.slow
def test_committed_ranking_is_what_its_command_prints(capsys):
    """examples/course/results/ranking.md starts with the command that produced it; a fresh
    run of that command prints the same table."""
    committed = (COURSE / "results" / "ranking.md").read_text()
    command = re.search(r"`python -m examples\.course\.rank ([^`]*)`", committed).group(1)
    argv = [a for a in shlex.split(command)]
    assert "--out" not in argv
    rank.main(argv + ["--format", "markdown"])
    table = capsys.readouterr().out
    assert table in committed


def test_course_readme_commands_and_facts_match_the_committed_run():
    """The page's training commands use the committed run's length and learning rate, and its
    episode count is that run's (read from its log), so a student reproduces what is measured."""
    import json

    text = (COURSE / "README.md").read_text()
    log = json.loads((COURSE / "runs" / "ppo-s0" / "log.json").read_text())
    committed, last = log["args"], log["log"][-1]
    commands = re.findall(r"python -m examples\.course\.ppo_masked[^\n]*", text.replace("\\\n", " "))
    assert len(commands) >= 2
    for command in commands:
        argv = shlex.split(command)
        assert argv[argv.index("--total-timesteps") + 1] == str(committed["total_timesteps"])
        assert float(argv[argv.index("--learning-rate") + 1]) == committed["learning_rate"]
    steps, episodes = last["steps"], last["episodes"]
    assert f"{episodes:,} episodes in the {steps:,} steps of the run below" in text
    assert f"about {round(steps / episodes)} steps each" in text
