"""Training runs exactly the requested number of steps and saves an agent that loads safely."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from helpers import tiny_train_args

from dallygym.learning.trainer import rollout_steps


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
    from dallygym.experiments.cli import _train_config, build_parser

    args = build_parser().parse_args(["train", "--env-id", "DallyQueue-v0", "--train-racks", "4", "8", "8", "16"])
    assert _train_config(args).train_racks == [4, 8, 8, 16]
    assert _train_config(build_parser().parse_args(["train"])).train_racks is None


def test_guard_and_teacher_share_on_the_command_line_reach_the_config_and_the_environment():
    from dallygym.experiments.cli import _train_config, build_parser

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
    from dallygym.experiments.cli import main

    out = tmp_path / "run"
    code = main(tiny_train_args("DallySmall-v0", out, n_steps=40))
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
    from dallygym.experiments.cli import main
    from dallygym.learning.nets import JobPointerPolicy
    from dallygym.learning.trainer import load_agent

    out = tmp_path / "queue"
    code = main(tiny_train_args("DallyQueueSmall-v0", out))
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
    from dallygym.learning.trainer import _return_label

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

    from dallygym.experiments.cli import main
    from dallygym.learning.trainer import LearnedAgent

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
        main(tiny_train_args("DallySmall-v0", out))
    assert {name: (out / name).read_bytes() for name in before} == before
    assert json.loads((out / "training.json").read_text())["env_id"] == "DallySmall-v0"
    assert LearnedAgent(out).env_id == "Dally-v0"


# --- the makespan penalty as a Lagrange multiplier ------------------------------------------------


def test_the_multiplier_takes_one_step_of_projected_dual_ascent_per_rollout():
    from dallygym.learning.trainer import MakespanMultiplier

    dual = MakespanMultiplier(penalty=3.0, lr=0.5, budget_pct=0.5)
    assert dual.update(100) is None and dual.history == []  # no episode ended: unchanged
    # Episodes that did not end, and infos without an excess, are not counted.
    dual.observe([{"makespan_excess_pct": 2.0}, {"makespan_excess_pct": 50.0}, {}], [True, False, True])
    dual.observe([{"makespan_excess_pct": -1.0}], [True])
    # Mean of max(0, excess): (2 + 0) / 2 = 1; penalty 3 + 0.5 x (1 - 0.5) = 3.25; one episode over budget.
    assert dual.update(200) == 3.25
    assert dual.history == [(200, 2, 1.0, 1, 3.25)]
    # Within budget, the penalty falls, and never below 0.
    dual.observe([{"makespan_excess_pct": 0.0}], [True])
    assert dual.update(300) == 3.0
    dual = MakespanMultiplier(penalty=0.1, lr=1.0, budget_pct=0.5)
    dual.observe([{"makespan_excess_pct": -5.0}], [True])
    assert dual.update(1) == 0.0


def test_the_dual_options_are_checked_and_reach_the_config_and_the_validation():
    from dallygym.experiments.cli import _train_config, build_parser
    from dallygym.learning.trainer import TrainConfig, train

    args = ["train", "--env-id", "DallyQueue-v0", "--makespan-dual", "0.2", "--makespan-budget", "1"]
    config = _train_config(build_parser().parse_args([*args, "--validation-makespan-penalty", "100"]))
    assert (config.makespan_dual_lr, config.makespan_budget_pct, config.validation_makespan_penalty) == (0.2, 1.0, 100)
    assert "makespan_penalty" not in config.env_kwargs()
    assert config.validation_env_config(8, ["t"]).options["makespan_penalty"] == 100
    assert config.validation_env_config(8, ["t"]).options["trace"] == ["t"]
    default = _train_config(build_parser().parse_args(["train"]))
    assert default.makespan_dual_lr is None and default.validation_makespan_penalty is None
    assert "makespan_penalty" not in default.validation_env_config(8, ["t"]).options
    for bad, match in (
        ({"makespan_dual_lr": 0.0}, "makespan_dual_lr"),
        ({"makespan_dual_lr": float("nan")}, "makespan_dual_lr"),
        ({"makespan_dual_lr": 1.0, "makespan_budget_pct": -1.0}, "makespan_budget_pct"),
        ({"makespan_dual_lr": 1.0, "reward": "jct"}, "relative-jct"),
        ({"validation_makespan_penalty": -1.0}, "validation_makespan_penalty"),
    ):
        with pytest.raises(ValueError, match=match):
            train(TrainConfig(env_id="DallyQueue-v0", **bad))


def test_training_with_the_dual_writes_the_multipliers_path(tmp_path):
    pytest.importorskip("sb3_contrib")
    import pandas as pd

    from dallygym.experiments.cli import main
    from dallygym.learning.trainer import MakespanMultiplier

    out = tmp_path / "dual"
    # Small episodes (a few tens of picks), so that several end in each rollout.
    command = tiny_train_args(
        "DallyQueue-v0",
        out,
        *("--gpus-per-machine", "8", "--offer-rule", "protected-remaining", "--n-epochs", "1"),
        *("--makespan-dual", "0.5", "--makespan-budget", "0.25"),
        total=400,
        n_steps=100,
    )
    assert main(command) == 0
    history = pd.read_csv(out / MakespanMultiplier.FILE)
    assert list(history.columns) == list(MakespanMultiplier.COLUMNS) and len(history) >= 1
    # Each row is one step of the rule from the previous penalty (3, the environment's default).
    previous = [3.0, *history.penalty.iloc[:-1]]
    expected = [max(0.0, p + 0.5 * (cost - 0.25)) for p, cost in zip(previous, history.mean_excess_pct)]
    assert history.penalty.tolist() == pytest.approx(expected, abs=1e-12)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["makespan_multiplier"]["updates"] == len(history)
    assert json.loads((out / "config.json").read_text())["makespan_dual_lr"] == 0.5


def test_an_agent_trained_with_limit_features_loads_and_acts_in_the_environment_it_saw(tmp_path):
    pytest.importorskip("sb3_contrib")
    from dallygym.experiments.cli import main
    from dallygym.learning.trainer import LearnedAgent, TrainConfig, run_agent, train
    from dallygym.sim.cluster import ClusterSpec
    from dallygym.sim.trace import load_trace

    out = tmp_path / "limit"
    assert main(tiny_train_args("DallyQueue-v0", out, "--limit-features", "--n-epochs", "1")) == 0
    assert json.loads((out / "config.json").read_text())["limit_features"] is True
    agent = LearnedAgent(out)
    assert agent.config.env_kwargs()["limit_features"] is True
    assert agent.policy.observation_space["jobs"].shape[1] == 21
    assert agent.policy.observation_space["cluster"].shape[0] == 18
    spec = ClusterSpec(2, 2, 8)
    assert run_agent(agent, load_trace("small", cluster=spec), spec).summary["jobs"] == 60
    # Off by default, and omitted from the environment's keywords when off.
    assert "limit_features" not in TrainConfig(env_id="DallyQueue-v0").env_kwargs()
    for bad, match in (
        ({"env_id": "Dally-v0"}, "is not an option of Dally-v0"),
        ({"env_id": "DallyQueue-v0", "reward": "jct"}, "makespan limit"),
    ):
        with pytest.raises(ValueError, match=match):
            train(TrainConfig(limit_features=True, **bad))
