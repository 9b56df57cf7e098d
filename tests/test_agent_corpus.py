"""Every agent directory of the corpus (tests/agent_corpus.py) either loads or is refused with one
bounded line naming the file and what is wrong: no traceback, no import, no read outside the run
directory, no allocation its author sized, no hang."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

import agent_corpus  # noqa: E402

from dallygym.learning.agent_files import AgentLoadError  # noqa: E402
from dallygym.learning.trainer import LearnedAgent, load_agent  # noqa: E402

SMALL = ["--racks", "2", "--machines-per-rack", "2", "--trace", "small", "--format", "csv"]


def test_the_corpus_is_as_large_as_promised():
    assert len(agent_corpus.CASES) >= 50
    assert len({name for name, _, _ in agent_corpus.CASES}) == len(agent_corpus.CASES)


@pytest.mark.parametrize("name,build,expected", agent_corpus.CASES, ids=[c[0] for c in agent_corpus.CASES])
def test_each_agent_directory_loads_or_is_refused_in_one_line(tmp_path, monkeypatch, name, build, expected):
    run = tmp_path / "run"
    build(run)
    monkeypatch.syspath_prepend(str(run))  # a module the config names would be importable from here
    monkeypatch.chdir(run)
    before = set(sys.modules)
    if expected == "load":
        agent = load_agent(str(run))
        assert isinstance(agent, LearnedAgent)
    else:
        with pytest.raises(AgentLoadError) as caught:
            load_agent(str(run))
        message = str(caught.value)
        assert "\n" not in message and len(message) <= 400 and message.isprintable(), message
        assert expected in message, message
        assert str(run) in message or "--env-id" in message, message
    assert not (run / "IMPORTED").exists()
    assert not {"evilmod", "this"} & (set(sys.modules) - before)


def test_an_evil_env_id_is_refused_by_the_command_line_without_importing_it(tmp_path):
    run = tmp_path / "run"
    dict(((n, b) for n, b, _ in agent_corpus.CASES))["env-id-evil-module"](run)
    # Run from inside the directory, as the attack did: the cwd is on sys.path for -m.
    done = subprocess.run(
        [sys.executable, "-m", "dallygym", "evaluate", "--agent", ".", *SMALL],
        cwd=run,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("dallygym: error: ") and "env_id" in done.stderr
    assert "Traceback" not in done.stderr and not (run / "IMPORTED").exists()


@pytest.mark.parametrize("case", ["policy-a-fifo", "config-a-fifo", "policy-eight-gigabytes", "net-arch-huge"])
def test_files_that_could_hang_or_exhaust_memory_are_refused_by_the_command_line(tmp_path, case):
    run = tmp_path / "run"
    dict(((n, b) for n, b, _ in agent_corpus.CASES))[case](run)
    done = subprocess.run(
        [sys.executable, "-m", "dallygym", "evaluate", "--agent", str(run), *SMALL],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def test_build_all_writes_every_case(tmp_path):
    made = agent_corpus.build_all(tmp_path)
    assert len(made) == len(agent_corpus.CASES) and all(p.is_dir() for p in made)


# --- a killed training never leaves a mix -------------------------------------------------------


def _two_agents(tmp_path: Path) -> tuple[Path, dict, dict]:
    """A run directory holding the offer agent, and the queue agent's state and config."""
    from dallygym.learning.agent_files import commit_agent

    run = tmp_path / "run"
    old_config = json.loads((agent_corpus.OFFER_AGENT / "config.json").read_text())
    commit_agent(run, torch.load(agent_corpus.OFFER_AGENT / "policy.pth", weights_only=True), old_config)
    new_state = torch.load(agent_corpus.QUEUE_AGENT / "policy.pth", weights_only=True)
    new_config = json.loads((agent_corpus.QUEUE_AGENT / "config.json").read_text())
    return run, new_state, new_config


def test_commit_replaces_one_agent_by_another_whole(tmp_path):
    from dallygym.learning.agent_files import commit_agent

    run, new_state, new_config = _two_agents(tmp_path)
    assert LearnedAgent(run).env_id == "Dally-v0"
    commit_agent(run, new_state, new_config)
    assert LearnedAgent(run).env_id == "DallyQueue-v0"
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "policy.pth"]  # no temporary left


def test_a_commit_cut_short_between_its_renames_is_refused_not_mixed(tmp_path, monkeypatch):
    from dallygym.learning import agent_files

    run, new_state, new_config = _two_agents(tmp_path)
    real = agent_files.write_atomic

    def killed_before_the_config(path, data):
        if path.name == "config.json" and b"DallyQueue" in data:
            raise KeyboardInterrupt  # the process dies here
        real(path, data)

    monkeypatch.setattr(agent_files, "write_atomic", killed_before_the_config)
    with pytest.raises(KeyboardInterrupt):
        agent_files.commit_agent(run, new_state, new_config)
    with pytest.raises(AgentLoadError, match="different runs"):
        LearnedAgent(run)


def test_an_older_config_without_a_hash_is_bound_before_it_is_replaced(tmp_path, monkeypatch):
    """An agent written before configs carried the hash: a commit cut short must still not pair
    the new parameters with it."""
    import shutil

    from dallygym.learning import agent_files

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(agent_corpus.OFFER_AGENT / "policy.pth", run / "policy.pth")
    config = json.loads((agent_corpus.OFFER_AGENT / "config.json").read_text())
    del config["policy_sha256"]
    (run / "config.json").write_text(json.dumps(config))
    real = agent_files.write_atomic
    monkeypatch.setattr(
        agent_files,
        "write_atomic",
        lambda path, data: (
            (_ for _ in ()).throw(KeyboardInterrupt)
            if path.name == "config.json" and b"DallyQueue" in data
            else real(path, data)
        ),
    )
    new_state = torch.load(agent_corpus.QUEUE_AGENT / "policy.pth", weights_only=True)
    with pytest.raises(KeyboardInterrupt):
        agent_files.commit_agent(run, new_state, json.loads((agent_corpus.QUEUE_AGENT / "config.json").read_text()))
    with pytest.raises(AgentLoadError, match="different runs"):
        LearnedAgent(run)


# --- converting a zip -------------------------------------------------------------------------


def _zip_with(tmp_path: Path, source: Path, config: bool) -> Path:
    """The committed ``model.zip`` of ``source`` in a directory of its own, with or without the
    config beside it."""
    import shutil

    directory = tmp_path / "zipped"
    directory.mkdir()
    shutil.copy(source / "model.zip", directory / "model.zip")
    if config:
        shutil.copy(source / "config.json", directory / "config.json")
    return directory / "model.zip"


def test_convert_without_a_config_asks_for_the_environment_and_names_the_ids_that_fit(tmp_path):
    from dallygym.learning.agent_files import convert_agent

    zipped = _zip_with(tmp_path, agent_corpus.QUEUE_AGENT, config=False)
    with pytest.raises(AgentLoadError, match="--env-id.*DallyQueue-v0 or DallyQueueSmall-v0"):
        convert_agent(zipped)
    assert not (zipped.parent / "policy.pth").exists()


def test_convert_with_env_id_writes_an_agent_that_evaluates(tmp_path, capsys):
    from dallygym.experiments.cli import main

    zipped = _zip_with(tmp_path, agent_corpus.OFFER_AGENT, config=False)
    assert main(["agent", "convert", str(zipped), "--env-id", "Dally-v0", "--racks", "4"]) == 0
    config = json.loads((zipped.parent / "config.json").read_text())
    assert config["env_id"] == "Dally-v0" and config["net_arch"] == [64, 64] and config["racks"] == 4
    assert len(config["policy_sha256"]) == 64
    assert "dallygym evaluate --agent" in capsys.readouterr().out
    assert main(["evaluate", "--agent", str(zipped.parent), *SMALL]) == 0


def test_convert_refuses_an_env_id_the_parameters_do_not_fit(tmp_path):
    from dallygym.learning.agent_files import convert_agent

    zipped = _zip_with(tmp_path, agent_corpus.QUEUE_AGENT, config=False)
    with pytest.raises(AgentLoadError, match="parameters do not fit"):
        convert_agent(zipped, env_id="Dally-v0")
    assert not (zipped.parent / "config.json").exists()


def test_convert_refuses_a_zip_whose_policy_entry_inflates_past_the_bound(tmp_path):
    import zipfile

    from dallygym.learning.agent_files import MAX_POLICY_BYTES, convert_agent

    bomb = tmp_path / "model.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("policy.pth", b"\0" * (MAX_POLICY_BYTES + 1))
    assert bomb.stat().st_size < 1_000_000
    with pytest.raises(AgentLoadError, match="inflates"):
        convert_agent(bomb, env_id="Dally-v0")


def test_convert_keeps_the_config_beside_the_zip_and_binds_it(tmp_path):
    from dallygym.learning.agent_files import convert_agent

    zipped = _zip_with(tmp_path, agent_corpus.QUEUE_AGENT, config=True)
    convert_agent(zipped)
    config = json.loads((zipped.parent / "config.json").read_text())
    assert config["env_id"] == "DallyQueue-v0" and "policy_sha256" in config
    assert LearnedAgent(zipped.parent).env_id == "DallyQueue-v0"


@pytest.mark.slow
def test_a_maskable_ppo_zip_trained_here_converts_and_evaluates(tmp_path, capsys):
    """The path a user takes with their own MaskablePPO: train, save, convert, evaluate."""
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    from dallygym.experiments.cli import main
    from dallygym.learning.nets import JobPointerPolicy

    env = gym.make("dallygym:DallyQueueSmall-v0")
    model = MaskablePPO(JobPointerPolicy, env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=64)
    model.save(tmp_path / "mine" / "model.zip")
    assert (
        main(
            [
                "agent",
                "convert",
                str(tmp_path / "mine" / "model.zip"),
                "--env-id",
                "DallyQueueSmall-v0",
                "--racks",
                "2",
                "--machines-per-rack",
                "2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", "--agent", str(tmp_path / "mine"), "--agent", "dally", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "mine" in out and "dally" in out
