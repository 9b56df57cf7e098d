"""Profiles (dallygym.sim.profiles): each profile's readings, their application to policies,
configs, sweeps, environments and the CLI, and the default profile equal to no profile."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest

from dallygym.experiments.compare import compare
from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.engine import EngineConfig
from dallygym.sim.policies import (
    DallyConsolidatedPolicy,
    DallyManualPolicy,
    DallyNoWaitPolicy,
    DallyPolicy,
    GandivaPolicy,
    GandivaTimeslicePolicy,
    TiresiasPolicy,
)
from dallygym.sim.profiles import (
    PROFILES,
    READINGS,
    SOURCES,
    make_profile_policy,
    profile_config,
    profile_renewal,
    resolve,
)
from dallygym.sim.simulate import simulate


def test_every_profile_gives_every_reading_a_valid_value_and_a_source():
    assert set(PROFILES) == {"default", "paper", "reference"}
    for name, settings in PROFILES.items():
        assert set(settings) == set(READINGS), name
        assert set(SOURCES[name]) == set(READINGS), name
        for reading, value in settings.items():
            assert value in READINGS[reading]
            assert len(SOURCES[name][reading]) > 20


def test_profile_settings():
    assert PROFILES["default"] == {
        "never_run_nw_sens": "zero",
        "tuner_limit": "window",
        "tuner_floors": False,
        "tuner_caps": False,
        "gandiva": "migrate",
        "renewal": "upgrade",
    }
    assert PROFILES["paper"] == {
        "never_run_nw_sens": "one",
        "tuner_limit": "value",
        "tuner_floors": False,
        "tuner_caps": False,
        "gandiva": "timeslice",
        "renewal": "upgrade",
    }
    assert PROFILES["reference"] == {
        "never_run_nw_sens": "zero",
        "tuner_limit": "window",
        "tuner_floors": True,
        "tuner_caps": True,
        "gandiva": "migrate",
        "renewal": "rebid",
    }


def test_default_profile_is_the_constructors_defaults():
    # The default profile is today's behaviour: each value is the option's own default.
    policy = DallyPolicy()
    settings = PROFILES["default"]
    assert (policy.never_run_nw_sens, policy.tuner_limit, policy.floors, policy.caps) == (
        settings["never_run_nw_sens"],
        settings["tuner_limit"],
        settings["tuner_floors"],
        settings["tuner_caps"],
    )
    assert EngineConfig().renewal == settings["renewal"]


def test_unknown_profile_reading_or_value_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown profile 'papers'; choose one of default, paper, reference"):
        resolve("papers")
    with pytest.raises(ValueError, match="unknown profile"):
        simulate("small", 2, profile="nope")
    with pytest.raises(ValueError, match="unknown reading"):
        resolve("paper", never_run="one")
    with pytest.raises(ValueError, match="never_run_nw_sens cannot be 'two'"):
        resolve("paper", never_run_nw_sens="two")
    with pytest.raises(ValueError, match="tuner_floors cannot be 1"):
        resolve(None, tuner_floors=1)


def test_explicit_options_override_the_profile():
    assert resolve("paper", never_run_nw_sens="zero")["never_run_nw_sens"] == "zero"
    assert resolve("paper", never_run_nw_sens="zero")["tuner_limit"] == "value"
    assert profile_renewal("reference") == "rebid"
    assert profile_renewal("reference", "keep") == "keep"
    assert profile_renewal(None) == "upgrade"
    # A policy instance carries explicit options: the profile leaves it as it is.
    mine = DallyPolicy(never_run_nw_sens="best")
    assert make_profile_policy(mine, "paper") is mine
    # A config with a renewal other than the default was set explicitly and keeps it.
    assert profile_config(EngineConfig(renewal="keep"), "reference").renewal == "keep"
    assert profile_config(EngineConfig(seed=3), "reference") == EngineConfig(seed=3, renewal="rebid")
    assert profile_config(None, "paper") == EngineConfig()
    assert profile_config(None, resolve("reference", renewal="upgrade")).renewal == "upgrade"
    assert profile_config(None, None) is None


def test_profiles_build_the_policies():
    paper = make_profile_policy("dally", "paper")
    assert (paper.never_run_nw_sens, paper.tuner_limit, paper.floors, paper.caps) == ("one", "value", False, False)
    reference = make_profile_policy("dally", "reference")
    assert (reference.never_run_nw_sens, reference.tuner_limit, reference.floors, reference.caps) == (
        "zero",
        "window",
        True,
        True,
    )
    for cls in (DallyManualPolicy, DallyNoWaitPolicy, DallyConsolidatedPolicy):
        built = make_profile_policy(cls.name, "paper")
        assert type(built) is cls and built.never_run_nw_sens == "one"
    assert type(make_profile_policy("gandiva", "paper")) is GandivaTimeslicePolicy
    assert type(make_profile_policy("gandiva", "reference")) is GandivaPolicy
    assert type(make_profile_policy("tiresias", "paper")) is TiresiasPolicy
    with pytest.raises(ValueError, match="unknown policy"):
        make_profile_policy("nope", "paper")


@pytest.mark.parametrize("racks", [2, 8])
def test_default_profile_equals_no_profile_bit_for_bit(racks):
    for policy in ("dally", "dally-manual", "tiresias", "gandiva"):
        plain = simulate("batch-500", racks, policy=policy).summary
        profiled = simulate("batch-500", racks, policy=policy, profile="default").summary
        assert profiled.keys() == plain.keys()
        for key in plain:
            assert profiled[key] == plain[key] or (profiled[key] != profiled[key] and plain[key] != plain[key]), key


def test_profiles_change_the_runs_they_should():
    spec = ClusterSpec(1, 4, 8)  # "small" contends here
    plain = simulate("small", spec, policy="dally").summary
    assert (
        simulate("small", spec, policy="dally", profile="paper").summary
        == simulate("small", spec, policy=DallyPolicy(never_run_nw_sens="one", tuner_limit="value")).summary
    )
    assert (
        simulate("small", spec, policy="dally", profile="reference").summary
        == simulate(
            "small", spec, policy=DallyPolicy(floors=True, caps=True), config=EngineConfig(renewal="rebid")
        ).summary
    )
    assert simulate("small", spec, policy="dally", profile="paper").summary != plain


def test_compare_takes_a_profile():
    spec = ClusterSpec(1, 4, 8)
    frame = compare("small", spec, ["dally", "gandiva"], profile="paper")
    assert frame["policy"].tolist() == ["dally", "gandiva-timeslice"]
    assert frame.loc[0, "jct_mean_s"] == simulate("small", spec, "dally", profile="paper").summary["jct_mean_s"]


def test_sweep_grid_takes_a_profile():
    from dallygym.experiments.sweep import CELL_KEYS, grid, run_cell

    assert "profile" in CELL_KEYS
    cells = grid(["dally"], ["small"], [2], profile="reference", renewal=None)
    assert [(c.profile, c.renewal) for c in cells] == [("reference", "rebid")]
    assert grid(["dally"], ["small"], [2], profile="reference", renewal=["keep"])[0].renewal == "keep"
    assert grid(["dally"], ["small"], [2])[0].profile == "default"
    with pytest.raises(ValueError, match="unknown profile"):
        grid(["dally"], ["small"], [2], profile="nope")
    cell = dataclasses.replace(grid(["dally"], ["small"], [1], machines_per_rack=4, profile="paper")[0])
    row = run_cell(cell)
    assert row["profile"] == "paper"
    assert row["jct_mean_s"] == simulate("small", ClusterSpec(1, 4, 8), "dally", profile="paper").summary["jct_mean_s"]


def test_environments_take_a_profile():
    env = gym.make("dallygym:Dally-v0", profile="paper", trace="small", racks=2).unwrapped
    assert isinstance(env._priority, DallyPolicy) and env._priority.never_run_nw_sens == "one"
    assert env.config.renewal == "upgrade"
    env = gym.make("dallygym:Dally-v0", profile="reference", trace="small", racks=2).unwrapped
    assert env.config.renewal == "rebid" and env._priority.floors
    env = gym.make("dallygym:Dally-v0", profile="reference", renewal="keep", trace="small", racks=2).unwrapped
    assert env.config.renewal == "keep"  # explicit wins
    env = gym.make("dallygym:Dally-v0", trace="small", racks=2).unwrapped
    assert env.config.renewal == "upgrade" and env._priority == "dally"
    queue = gym.make("dallygym:DallyQueue-v0", profile="paper", trace="small", racks=2).unwrapped
    assert queue._priority.never_run_nw_sens == "one"
    queue.reset(seed=0)
    with pytest.raises(ValueError, match="unknown profile"):
        gym.make("dallygym:Dally-v0", profile="nope", trace="small", racks=2)


# --- CLI --------------------------------------------------------------------------------------


def _cli(capsys, args):
    from dallygym.experiments.cli import main

    code = main(args)
    return code, capsys.readouterr()


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--trace", "small", "--racks", "2", "--format", "csv", "--no-progress"],
        ["compare", "--trace", "small", "--racks", "2", "--policies", "dally", "fifo", "--quiet", "--format", "csv"],
        ["evaluate", "--agent", "dally", "--trace", "small", "--racks", "2", "--format", "csv"],
    ],
)
@pytest.mark.parametrize("profile", ["default", "paper", "reference"])
def test_cli_commands_accept_a_profile(capsys, command, profile):
    code, out = _cli(capsys, [*command, "--profile", profile])
    assert code == 0, out.err
    assert "jct_mean_s" in out.out


def test_cli_simulate_profile_equals_the_api(capsys):
    import io

    import pandas as pd

    code, out = _cli(
        capsys,
        [
            "simulate",
            "--trace",
            "small",
            "--racks",
            "1",
            "--machines-per-rack",
            "4",
            "--format",
            "csv",
            "--no-progress",
            "--profile",
            "paper",
        ],
    )
    assert code == 0
    shown = pd.read_csv(io.StringIO(out.out)).iloc[0]
    assert (
        shown["jct_mean_s"] == simulate("small", ClusterSpec(1, 4, 8), "dally", profile="paper").summary["jct_mean_s"]
    )


def test_cli_sweep_accepts_a_profile(capsys, tmp_path):
    from dallygym.experiments.sweep import read_results

    code, out = _cli(
        capsys,
        [
            "sweep",
            "--policies",
            "dally",
            "--traces",
            "small",
            "--racks",
            "2",
            "--profile",
            "reference",
            "--out",
            str(tmp_path),
            "--no-progress",
        ],
    )
    assert code == 0, out.err
    rows = read_results(tmp_path / "results.csv")
    assert rows["profile"].tolist() == ["reference"] and rows["renewal"].tolist() == ["rebid"]


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--trace", "small", "--racks", "2"],
        ["compare", "--trace", "small", "--racks", "2"],
        ["sweep", "--traces", "small", "--racks", "2", "--out", "unused"],
        ["evaluate", "--agent", "dally", "--trace", "small", "--racks", "2"],
    ],
)
def test_cli_bad_profile_is_exit_2_with_one_line(capsys, command):
    with pytest.raises(SystemExit) as exc:
        _cli(capsys, [*command, "--profile", "nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--profile" in err and "default" in err and "paper" in err and "reference" in err
