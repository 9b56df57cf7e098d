"""Training runs exactly the requested number of steps and saves an agent that loads safely."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from dallygym.learn import rollout_steps


@pytest.mark.parametrize(
    "total, envs, preferred, expected",
    [
        (2048, 8, 512, 256),
        (1_000_000, 8, 512, 500),
        (4096, 8, 512, 512),
        (96, 2, 512, 48),
        (8 * 1009, 8, 512, 1009),
        (10, 1, 3, 2),
    ],
)
def test_rollout_size_divides_the_total_nearest_the_preferred_one(total, envs, preferred, expected):
    n_steps = rollout_steps(total, envs, preferred)
    assert n_steps == expected
    assert total % (n_steps * envs) == 0


def test_a_total_that_is_not_a_multiple_of_the_environments_is_refused():
    with pytest.raises(ValueError, match="multiple of n_envs"):
        rollout_steps(2049, 8, 512)


def test_train_racks_on_the_command_line_reach_the_config():
    from dallygym.cli import _train_config, build_parser

    args = build_parser().parse_args(["train", "--env-id", "DallyQueue-v0", "--train-racks", "4", "8", "8", "16"])
    assert _train_config(args).train_racks == [4, 8, 8, 16]
    assert _train_config(build_parser().parse_args(["train"])).train_racks is None


def test_guard_and_teacher_share_on_the_command_line_reach_the_config_and_the_environment():
    from dallygym.cli import _train_config, build_parser

    args = build_parser().parse_args(
        ["train", "--env-id", "DallyQueue-v0", "--guard-leases", "0.25", "--teacher-share", "0.3"]
    )
    config = _train_config(args)
    assert (config.guard_leases, config.teacher_share) == (0.25, 0.3)
    assert config.env_kwargs()["guard_leases"] == 0.25
    default = _train_config(build_parser().parse_args(["train", "--env-id", "DallyQueue-v0"]))
    assert default.guard_leases is None and default.teacher_share == 0.5
    assert "guard_leases" not in default.env_kwargs()
    assert not default.guard_waiting and "guard_waiting" not in default.env_kwargs()
    waiting = _train_config(
        build_parser().parse_args(["train", "--env-id", "DallyQueue-v0", "--guard-leases", "0.25", "--guard-waiting"])
    )
    assert waiting.guard_waiting and waiting.env_kwargs()["guard_waiting"] is True
    gym.make("dallygym:DallyQueueSmall-v0", **{k: v for k, v in waiting.env_kwargs().items() if k.startswith("guard")})


@pytest.mark.slow
def test_train_runs_exactly_the_requested_steps_and_its_agent_evaluates(tmp_path, capsys):
    pytest.importorskip("sb3_contrib")
    from dallygym.cli import main

    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--env-id",
            "DallySmall-v0",
            "--trace",
            "gen:small",
            "--racks",
            "2",
            "--machines-per-rack",
            "2",
            "--total-timesteps",
            "96",
            "--n-envs",
            "2",
            "--n-steps",
            "40",
            "--eval-freq-steps",
            "1000000",
            "--checkpoint-freq-steps",
            "1000000",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    meta = json.loads((out / "meta.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert meta["timesteps"] == 96 and meta["stopped_by_time_limit"] is False
    assert config["n_steps"] == 48 and config["total_timesteps"] == 96
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                "--agent",
                str(out),
                "--racks",
                "2",
                "--machines-per-rack",
                "2",
                "--trace",
                "small",
                "--format",
                "csv",
            ]
        )
        == 0
    )
    assert str(out) in capsys.readouterr().out


@pytest.mark.slow
def test_train_on_dally_queue_saves_a_pointer_agent_that_evaluate_runs_in_its_environment(tmp_path, capsys):
    pytest.importorskip("sb3_contrib")
    from dallygym.cli import main
    from dallygym.learn import load_agent
    from dallygym.nets import JobPointerPolicy

    out = tmp_path / "queue"
    code = main(
        [
            "train",
            "--env-id",
            "DallyQueueSmall-v0",
            "--trace",
            "gen:small",
            "--racks",
            "2",
            "--machines-per-rack",
            "2",
            "--total-timesteps",
            "96",
            "--n-envs",
            "2",
            "--n-steps",
            "48",
            "--eval-freq-steps",
            "1000000",
            "--checkpoint-freq-steps",
            "1000000",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["env_id"] == "DallyQueueSmall-v0" and config["offer_rule"] == "dally"
    agent = load_agent(str(out))
    assert isinstance(agent.policy, JobPointerPolicy) and agent.env_id == "DallyQueueSmall-v0"
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                "--agent",
                str(out),
                "--agent",
                "protected-remaining",
                "--racks",
                "2",
                "--machines-per-rack",
                "2",
                "--trace",
                "small",
                "--format",
                "csv",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert str(out) in printed and "protected-remaining" in printed


@pytest.mark.parametrize(
    "config, label",
    [
        ({"env_id": "Dally-v0", "reward": None}, "episode return = −mean JCT (leases)"),
        (
            {"env_id": "DallyQueue-v0", "reward": None, "makespan_weight": 10.0},
            "episode return = −(mean JCT + 10·makespan) / (100 leases)",
        ),
        (
            {"env_id": "DallyQueueSmall-v0", "reward": None, "makespan_weight": None},
            "episode return = −(mean JCT + 1·makespan) / (100 leases)",
        ),
        ({"env_id": "DallyQueue-v0", "reward": "jct"}, "episode return = −(mean JCT) / (100 leases)"),
    ],
)
def test_the_training_curve_says_what_its_return_is(tmp_path, config, label):
    from dallygym.learn import _return_label

    (tmp_path / "config.json").write_text(json.dumps(config))
    assert _return_label(tmp_path) == label


@pytest.mark.slow
def test_a_training_killed_in_a_directory_holding_an_agent_leaves_that_agent_whole(tmp_path, monkeypatch):
    """The settings of the new run go to training.json; config.json and policy.pth stay the old
    agent's until the new one is committed at the end."""
    pytest.importorskip("sb3_contrib")
    import shutil
    from pathlib import Path

    from sb3_contrib import MaskablePPO

    from dallygym.cli import main
    from dallygym.learn import LearnedAgent

    committed = Path(__file__).resolve().parents[1] / "agents" / "runs" / "ppo-hidden"
    out = tmp_path / "run"
    out.mkdir()
    for name in ("policy.pth", "config.json"):
        shutil.copy(committed / name, out / name)
    before = {name: (out / name).read_bytes() for name in ("policy.pth", "config.json")}

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt  # the process dies in the middle of training

    monkeypatch.setattr(MaskablePPO, "learn", killed)
    with pytest.raises(KeyboardInterrupt):
        main(
            [
                "train",
                "--env-id",
                "DallySmall-v0",
                "--trace",
                "gen:small",
                "--racks",
                "2",
                "--machines-per-rack",
                "2",
                "--total-timesteps",
                "96",
                "--n-envs",
                "2",
                "--n-steps",
                "48",
                "--eval-freq-steps",
                "1000000",
                "--checkpoint-freq-steps",
                "1000000",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
    assert {name: (out / name).read_bytes() for name in before} == before
    assert json.loads((out / "training.json").read_text())["env_id"] == "DallySmall-v0"
    assert LearnedAgent(out).env_id == "Dally-v0"
