"""What a new user meets first outside the package itself: the rl-zoo3 hyperparameter file covers
every registered id, rl-zoo3's output stays out of git, and RecordVideo records a dallygym
episode when the plots extra (moviepy) is installed."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import dallygym  # noqa: F401 - registers the ids

ROOT = Path(__file__).resolve().parent.parent
DALLYGYM_IDS = sorted(k for k, spec in gym.registry.items() if str(spec.entry_point).startswith("dallygym."))


def _zoo_hyperparameters() -> dict:
    yaml = pytest.importorskip("yaml", reason="reading the rl-zoo3 file needs pyyaml")
    return yaml.safe_load((ROOT / "agents" / "rl_zoo3" / "ppo.yml").read_text())


def test_the_registered_ids_are_the_four_documented_ones():
    assert DALLYGYM_IDS == ["Dally-v0", "DallyQueue-v0", "DallyQueueSmall-v0", "DallySmall-v0"]


@pytest.mark.parametrize("env_id", DALLYGYM_IDS)
def test_rl_zoo3_file_has_an_entry_for_every_registered_id(env_id):
    entry = _zoo_hyperparameters().get(env_id)
    assert entry is not None, f"rl-zoo3 would stop with 'Hyperparameters not found' for {env_id}"
    assert {"n_timesteps", "policy"} <= set(entry)
    # PPO trains whole rollouts: the total is exactly n_steps x n_envs x a whole number.
    assert int(entry["n_timesteps"]) % (entry["n_steps"] * entry["n_envs"]) == 0
    assert entry["batch_size"] <= entry["n_steps"] * entry["n_envs"]
    # The options it passes are ones the environment accepts.
    env = gym.make(env_id, **entry.get("env_kwargs", {}))
    env.reset(seed=0)
    env.close()


@pytest.mark.parametrize("env_id", ["DallyQueue-v0", "DallyQueueSmall-v0"])
def test_rl_zoo3_queue_entries_use_the_job_set_encoder(env_id):
    torch = pytest.importorskip("torch", reason="the policy's classes need the agents extra")
    from dallygym.learning.nets import JobSetExtractor

    entry = _zoo_hyperparameters()[env_id]
    assert entry["policy"] == "MultiInputPolicy"  # the observation is a Dict
    # rl-zoo3 evaluates the string in a module that has torch.nn imported as nn.
    kwargs = eval(entry["policy_kwargs"], {"nn": torch.nn})
    assert kwargs["features_extractor_class"] is JobSetExtractor


def test_rl_zoo3_output_directory_is_ignored_by_git():
    assert "logs/" in (ROOT / ".gitignore").read_text().split()


def test_record_video_writes_an_episode(tmp_path):
    pytest.importorskip("moviepy", reason="RecordVideo needs moviepy (the plots extra)")
    folder = tmp_path / "videos"  # RecordVideo creates it (it warns when it already exists)
    env = gym.wrappers.RecordVideo(
        gym.make("DallySmall-v0", render_mode="rgb_array", trace="small"),
        str(folder),
        episode_trigger=lambda episode: True,
        disable_logger=True,
    )
    env.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, _, terminated, truncated, _ = env.step(0)  # always wait: valid at every offer
        done, steps = terminated or truncated, steps + 1
    env.close()
    videos = list(folder.glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0
    # One frame at reset and one after every step, read back with the ffmpeg moviepy used.
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(videos[0]))
    meta = next(reader)
    assert meta["size"][0] == 960
    assert steps > 1 and sum(1 for _ in reader) == steps + 1
