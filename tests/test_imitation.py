"""The imitation warm start of DallyQueue agents (``dallygym train --imitate-episodes``)."""

from __future__ import annotations

import json
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

from dallygym.envs.queue import protected_share_action
from dallygym.learning.trainer import TrainConfig, imitation_warm_start, train

pytestmark = [pytest.mark.slow]

SMALL = TrainConfig(
    env_id="DallyQueueSmall-v0",
    trace="gen:small",
    racks=2,
    machines_per_rack=2,
    total_timesteps=128,
    n_envs=2,
    n_steps=64,
    eval_freq_steps=64,
    checkpoint_freq_steps=10**6,
    progress_bar=False,
)


def teacher_keys(obs) -> np.ndarray:
    """The teacher's sort keys of the shown candidates (protected: -estimate, else estimate)."""
    from dallygym.envs.queue import JOB_FEATURES

    jobs = obs["jobs"][: int(obs["job_mask"].sum())]
    estimate = jobs[:, JOB_FEATURES.index("remaining_estimate")]
    return np.where(jobs[:, JOB_FEATURES.index("estimate_share")] >= 0.5, -estimate, estimate)


def agreement(model, seeds) -> float:
    """Share of steps on which the model's deterministic action is as good as the teacher's by
    the teacher's keys (ties are common: equal jobs), the teacher playing."""
    env = gym.make("DallyQueueSmall-v0")
    same = total = 0
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        done = env.unwrapped._done
        while not done:
            teacher = protected_share_action(obs, info["action_mask"])
            action, _ = model.predict(obs, action_masks=info["action_mask"], deterministic=True)
            keys = teacher_keys(obs)
            same += int(action) < len(keys) and keys[int(action)] == keys[teacher]
            total += 1
            obs, _, terminated, truncated, info = env.step(teacher)
            done = terminated or truncated
    return same / total


def test_warm_start_makes_the_policy_choose_as_the_teacher_on_unseen_episodes():
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from dallygym.learning.nets import JobPointerPolicy

    config = replace(SMALL, imitate_episodes=40, imitate_epochs=30, batch_size=64)
    model = sb3_contrib.MaskablePPO(JobPointerPolicy, gym.make("DallyQueueSmall-v0"), seed=0, device="cpu")
    before = agreement(model, seeds=[7, 8, 9])
    report = imitation_warm_start(model, config, "DallyQueueSmall-v0")
    after = agreement(model, seeds=[7, 8, 9])  # not among the teacher's episodes
    assert report["episodes"] == 40 and report["samples"] == sum(report["steps_per_episode"])
    assert report["loss_last_epoch"] < report["loss_first_epoch"]
    assert before < 0.3 and after >= 0.75, (before, after)  # measured: 0.23 and 0.81


def test_train_with_a_warm_start_keeps_the_best_validation_parameters(tmp_path):
    torch = pytest.importorskip("torch")
    from sb3_contrib import MaskablePPO

    config = replace(SMALL, imitate_episodes=4, imitate_epochs=2, keep="best", out_dir=str(tmp_path / "run"))
    train(config)
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    warm = meta["imitation_warm_start"]
    assert warm["teacher"] == "protected_share_action" and warm["episodes"] == 4
    assert meta["kept"] == "best" and meta["best_validation_return"] >= warm["validation_return"]
    saved = torch.load(tmp_path / "run" / "policy.pth", weights_only=True)
    best = MaskablePPO.load(tmp_path / "run" / "best" / "best_model.zip", device="cpu").policy.state_dict()
    assert saved.keys() == best.keys() and all(torch.equal(saved[k], best[k]) for k in saved)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["imitate_episodes"] == 4


def test_same_seed_same_warm_start():
    sb3_contrib = pytest.importorskip("sb3_contrib")
    import torch as th

    from dallygym.learning.nets import JobPointerPolicy

    states = []
    for _ in range(2):
        model = sb3_contrib.MaskablePPO(JobPointerPolicy, gym.make("DallyQueueSmall-v0"), seed=3, device="cpu")
        imitation_warm_start(model, replace(SMALL, seed=3, imitate_episodes=3, imitate_epochs=2), "DallyQueueSmall-v0")
        states.append(model.policy.state_dict())
    assert all(th.equal(states[0][k], states[1][k]) for k in states[0])


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"imitate_episodes": 2, "env_id": "DallySmall-v0"}, "DallyQueue id"),
        ({"keep": "first"}, "keep must be one of last, best"),
        ({"imitate_episodes": -1}, "imitate_episodes must be >= 0"),
        ({"teacher_share": 0.0}, "teacher_share must be a share"),
        ({"teacher_share": 1.5}, "teacher_share must be a share"),
        ({"guard_leases": 0.25, "env_id": "DallySmall-v0"}, "'guard_leases' is not an option of DallySmall-v0"),
        ({"guard_leases": 0.0, "env_id": "DallySmall-v0"}, "'guard_leases' is not an option of DallySmall-v0"),
        ({"guard_leases": 1.5}, r"guard_leases must be None or a share in \(0, 1\]"),
        ({"guard_waiting": True}, "guard_waiting=True needs guard_leases"),
    ],
)
def test_bad_warm_start_settings_are_refused_before_training(tmp_path, changes, words):
    pytest.importorskip("sb3_contrib")
    with pytest.raises(ValueError, match=words):
        train(replace(SMALL, out_dir=str(tmp_path / "run"), **changes))
    assert not (tmp_path / "run").exists()


def test_train_racks_cycle_over_the_environments_and_validation_covers_every_size():
    config = replace(SMALL, n_envs=4, train_racks=[2, 1, 1])
    assert [config.rank_racks(i) for i in range(5)] == [2, 1, 1, 2, 1]
    assert config.training_sizes() == [1, 2]
    assert config.env_kwargs(1)["racks"] == 1 and config.env_kwargs()["racks"] == SMALL.racks
    assert replace(SMALL).training_sizes() == [SMALL.racks] and SMALL.rank_racks(3) == SMALL.racks


def test_train_on_several_sizes_builds_each_size_for_training_teaching_and_validation(tmp_path, monkeypatch):
    pytest.importorskip("sb3_contrib")
    made = []
    real_make = gym.make

    def recording_make(env_id, **kwargs):
        made.append(kwargs.get("racks"))
        return real_make(env_id, **kwargs)

    monkeypatch.setattr(gym, "make", recording_make)
    config = replace(
        SMALL, train_racks=[1, 2], imitate_episodes=2, imitate_epochs=1, keep="best", out_dir=str(tmp_path / "run")
    )
    train(config)
    # teacher: one environment per size; training: ranks 0, 1 -> 1, 2 racks; validation: one per size.
    assert made == [1, 2, 1, 2, 1, 2], made
    results = np.load(tmp_path / "run" / "eval" / "evaluations.npz")["results"]
    assert results.shape[1] == 4  # 2 validation traces x 2 sizes per evaluation
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["train_racks"] == [1, 2]


@pytest.mark.parametrize(
    "train_racks, words",
    [
        ([], "non-empty list of positive integers"),
        ([2, 0], "non-empty list of positive integers"),
        ([1, 2, 2], "only 2 training environments"),
    ],
)
def test_bad_train_racks_are_refused_before_training(tmp_path, train_racks, words):
    with pytest.raises(ValueError, match=words):
        train(replace(SMALL, train_racks=train_racks, out_dir=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists()


def test_teacher_share_and_guard_reach_the_warm_start(monkeypatch):
    """The warm start's teacher protects from ``teacher_share``, in environments with the
    config's ``guard_leases``."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    import dallygym.envs.queue as queue_env
    from dallygym.learning.nets import JobPointerPolicy

    shares, guards = [], []
    original = queue_env.protected_share_action

    def spy(obs, mask=None, share=0.5):
        shares.append(share)
        return original(obs, mask, share=share)

    monkeypatch.setattr(queue_env, "protected_share_action", spy)
    made = gym.make

    def make(env_id, **kwargs):
        guards.append(kwargs.get("guard_leases"))
        return made(env_id, **kwargs)

    monkeypatch.setattr(gym, "make", make)
    config = replace(SMALL, imitate_episodes=1, imitate_epochs=1, teacher_share=0.25, guard_leases=0.3)
    model = sb3_contrib.MaskablePPO(JobPointerPolicy, made("DallyQueueSmall-v0"), seed=0, device="cpu")
    report = imitation_warm_start(model, config, "DallyQueueSmall-v0")
    assert shares and set(shares) == {0.25} and report["teacher_share"] == 0.25
    assert guards == [0.3]
