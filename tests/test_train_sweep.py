"""Training fan-out: independent runs as sweep tasks, gathered into one table; a failing run
does not stop the others; the same seed gives the same agent on every backend."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from helpers import tiny_run_args

import dallygym
from dallygym.experiments.sweep import LocalBackend, make_backend
from dallygym.learning.trainer import TrainConfig, run_name, train_sweep

pytestmark = [pytest.mark.slow]

TINY = [
    *tiny_run_args("DallySmall-v0", n_steps=40),
    "--eval-freq-steps",
    "48",
    "--checkpoint-freq-steps",
    "1000000",
    "--eval-trace",
    "small",
]


def _tiny(out, seed: int, **changes) -> TrainConfig:
    config = TrainConfig(
        env_id="DallySmall-v0",
        trace="gen:small",
        racks=2,
        machines_per_rack=2,
        total_timesteps=96,
        n_envs=2,
        n_steps=40,
        eval_freq_steps=48,
        checkpoint_freq_steps=1_000_000,
        seed=seed,
        progress_bar=False,
        out_dir=str(out / run_name("hidden", "dally", seed)),
    )
    return replace(config, **changes)


def test_train_sweep_command_gathers_every_run_and_its_evaluation(tmp_path, capsys):
    pytest.importorskip("sb3_contrib")
    from dallygym.experiments.cli import main

    assert main(["train-sweep", *TINY, "--seeds", "0", "1", "--workers", "2", "--out", str(tmp_path)]) == 0
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert runs["run"].tolist() == ["ppo-hidden-seed0", "ppo-hidden-seed1"]
    assert runs["seed"].tolist() == [0, 1] and (runs["timesteps"] == 96).all() and (runs["trace"] == "small").all()
    assert set(dallygym.SUMMARY_KEYS) <= set(runs.columns)
    curves = pd.read_csv(tmp_path / "curves.csv")
    validation = curves[curves["kind"] == "validation"]
    assert validation.groupby("run")["timesteps"].apply(list).to_dict() == {
        "ppo-hidden-seed0": [48, 96],
        "ppo-hidden-seed1": [48, 96],
    }
    assert (runs["final_validation_return"].to_numpy() == validation.groupby("run")["return"].last().to_numpy()).all()
    # Each row's evaluation is the saved agent's, re-evaluated here.
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                "--agent",
                str(tmp_path / "ppo-hidden-seed1"),
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
    again = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert again.loc[0, "jct_mean_s"] == runs.loc[1, "jct_mean_s"]


def test_a_failing_run_is_reported_and_the_others_still_run(tmp_path, capsys):
    pytest.importorskip("sb3_contrib")
    good = _tiny(tmp_path, 0)
    bad = _tiny(tmp_path, 1, total_timesteps=97)  # not a multiple of n_envs: train() refuses it
    runs, curves, failed = train_sweep([bad, good], ["small"], LocalBackend(1), tmp_path)
    assert failed == ["ppo-hidden-seed1"]
    assert runs["run"].tolist() == ["ppo-hidden-seed0"]
    assert "run failed: ppo-hidden-seed1 (seed 1, hidden): ValueError: total_timesteps (97)" in capsys.readouterr().err


def test_the_same_seed_trains_the_same_agent_on_ray_as_locally(tmp_path):
    pytest.importorskip("sb3_contrib")
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'dallygym[ray]')")
    local, _, _ = train_sweep([_tiny(tmp_path / "local", 0)], ["small"], LocalBackend(1))
    with make_backend("ray", workers=2) as backend:
        on_ray, _, failed = train_sweep([_tiny(tmp_path / "ray", 0)], ["small"], backend)
    assert not ray.is_initialized() and failed == []
    assert on_ray.drop(columns="wall_s").equals(local.drop(columns="wall_s"))
    name = run_name("hidden", "dally", 0)
    ray_policy, local_policy = tmp_path / "ray" / name / "policy.pth", tmp_path / "local" / name / "policy.pth"
    assert ray_policy.read_bytes() == local_policy.read_bytes()
