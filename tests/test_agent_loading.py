"""Loading a learned agent never executes code from its files.

The crafted files below carry real payloads: each test first shows that the unsafe way of
loading runs the payload (it creates a marker file), then that ``dallygym evaluate`` and
``dallygym agent convert`` never do, and exit 2 with one line saying why.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

from dallygym.envs.offer import OBS_DIM  # noqa: E402
from dallygym.experiments.cli import main  # noqa: E402
from dallygym.learning.trainer import AgentLoadError, LearnedAgent, convert_agent, load_agent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "agents" / "runs" / "ppo-hidden"
SMALL = ["--racks", "2", "--machines-per-rack", "2", "--trace", "small"]


class CreatesFile:
    """Unpickling this calls ``open(path, "w")``: a stand-in for any code an attacker wants run."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def poisoned_zip(tmp_path: Path, marker: Path) -> Path:
    """The committed model.zip with its ``data`` entry's observation space replaced by a payload
    (as stable-baselines3 stores it: base64 of a pickle under ':serialized:')."""
    source = COMMITTED / "model.zip"
    target = tmp_path / "crafted" / "model.zip"
    target.parent.mkdir()
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "data":
                fields = json.loads(data)
                payload = base64.b64encode(pickle.dumps(CreatesFile(marker))).decode()
                fields["observation_space"] = {":type:": "<class 'gymnasium.spaces.box.Box'>", ":serialized:": payload}
                data = json.dumps(fields).encode()
            dst.writestr(item, data)
    shutil.copy(COMMITTED / "config.json", target.parent / "config.json")
    return target


def poisoned_policy(directory: Path, marker: Path) -> Path:
    """A ``policy.pth`` that is a torch file holding a payload next to real tensors."""
    directory.mkdir(parents=True, exist_ok=True)
    state = torch.load(COMMITTED / "policy.pth", weights_only=True)
    buffer = io.BytesIO()
    torch.save({**state, "extra": CreatesFile(marker)}, buffer)
    (directory / "policy.pth").write_bytes(buffer.getvalue())
    # Without the committed hash, which would refuse these bytes before the unpickler sees them.
    config = json.loads((COMMITTED / "config.json").read_text())
    config.pop("policy_sha256")
    (directory / "config.json").write_text(json.dumps(config))
    return directory / "policy.pth"


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dallygym: error: ") and "Traceback" not in err
    return err


@pytest.mark.slow
def test_the_crafted_zip_really_runs_code_under_stable_baselines3_load(tmp_path):
    marker = tmp_path / "pwned-by-sb3-load"
    crafted = poisoned_zip(tmp_path, marker)
    code = (
        f"from sb3_contrib import MaskablePPO\ntry:\n    MaskablePPO.load({str(crafted)!r}, device='cpu')\n"
        "except Exception:\n    pass\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    assert marker.exists()  # so the payload is live: the tests below are meaningful


def test_evaluate_refuses_a_crafted_zip_without_running_it(tmp_path, capsys):
    marker = tmp_path / "pwned"
    crafted = poisoned_zip(tmp_path, marker)
    assert main(["evaluate", "--agent", str(crafted), *SMALL]) == 2
    err = one_line_error(capsys)
    assert str(crafted) in err and "dallygym agent convert" in err
    # A run directory holding only the crafted zip: refused too, with the conversion hint.
    assert main(["evaluate", "--agent", str(crafted.parent), *SMALL]) == 2
    assert "policy.pth" in one_line_error(capsys)
    assert not marker.exists()


def test_convert_reads_only_the_tensors_of_a_crafted_zip(tmp_path, capsys):
    marker = tmp_path / "pwned"
    crafted = poisoned_zip(tmp_path, marker)
    assert main(["agent", "convert", str(crafted)]) == 0
    assert not marker.exists()
    # The parameters it extracted are the committed agent's, and they evaluate.
    ours = torch.load(crafted.parent / "policy.pth", weights_only=True)
    committed = torch.load(COMMITTED / "policy.pth", weights_only=True)
    assert ours.keys() == committed.keys() and all(torch.equal(ours[k], committed[k]) for k in ours)
    capsys.readouterr()
    assert main(["evaluate", "--agent", str(crafted.parent), *SMALL, "--format", "csv"]) == 0
    assert not marker.exists()


def test_a_policy_file_with_a_payload_really_runs_code_under_an_unsafe_torch_load(tmp_path):
    marker = tmp_path / "pwned-by-unsafe-load"
    path = poisoned_policy(tmp_path / "run", marker)
    torch.load(path, weights_only=False)
    assert marker.exists()


def test_evaluate_refuses_a_policy_file_with_a_payload_without_running_it(tmp_path, capsys):
    marker = tmp_path / "pwned"
    path = poisoned_policy(tmp_path / "run", marker)
    for agent in (path, path.parent):
        assert main(["evaluate", "--agent", str(agent), *SMALL]) == 2
        err = one_line_error(capsys)
        assert "not a file of plain tensors" in err and str(path) in err
    assert not marker.exists()


def test_convert_refuses_a_zip_whose_policy_entry_carries_a_payload(tmp_path, capsys):
    marker = tmp_path / "pwned"
    bad = poisoned_policy(tmp_path / "src", marker)
    crafted = tmp_path / "crafted.zip"
    with zipfile.ZipFile(crafted, "w") as archive:
        archive.writestr("policy.pth", bad.read_bytes())
    assert main(["agent", "convert", str(crafted), "--out", str(tmp_path / "out")]) == 2
    assert "not a file of plain tensors" in one_line_error(capsys)
    assert not marker.exists() and not (tmp_path / "out" / "policy.pth").exists()


@pytest.mark.parametrize("case", ["no-config", "bad-json", "wrong-arch", "not-a-zip"])
def test_broken_agent_files_are_refused_naming_the_file(tmp_path, case):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(COMMITTED / "policy.pth", run / "policy.pth")
    if case != "no-config":
        config = json.loads((COMMITTED / "config.json").read_text())
        config["net_arch"] = [32] if case == "wrong-arch" else config["net_arch"]
        (run / "config.json").write_text("{not json" if case == "bad-json" else json.dumps(config))
    if case == "not-a-zip":
        (run / "model.zip").write_text("hello")
        with pytest.raises(AgentLoadError, match="model.zip"):
            convert_agent(run / "model.zip")
        return
    with pytest.raises(AgentLoadError, match="config.json" if case != "wrong-arch" else "net_arch"):
        load_agent(str(run))


@pytest.mark.parametrize(
    "run", sorted(p.name for p in (ROOT / "agents" / "runs").iterdir() if (p / "model.zip").exists())
)
def test_committed_agents_load_safely_and_act_exactly_as_stable_baselines3_loads_them(run):
    from sb3_contrib import MaskablePPO

    ours = LearnedAgent(ROOT / "agents" / "runs" / run)
    theirs = MaskablePPO.load(ROOT / "agents" / "runs" / run / "model.zip", device="cpu")  # committed: trusted
    rng = np.random.default_rng(0)
    if isinstance(theirs.observation_space, gym.spaces.Dict):  # a DallyQueue agent
        space = theirs.observation_space
        obs = {key: rng.random((30, *sub.shape)).astype(np.float32) for key, sub in space.spaces.items()}
        masks = rng.random((30, theirs.action_space.n)) < 0.6
    else:
        obs = rng.random((300, OBS_DIM)).astype(np.float32)
        masks = rng.random((300, 4)) < 0.6
    masks[:, 0] = True
    a, _ = ours.predict(obs, action_masks=masks)
    b, _ = theirs.predict(obs, action_masks=masks, deterministic=True)
    assert np.array_equal(a, b)
