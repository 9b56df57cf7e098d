"""The faster paths of the set network's training: the fused pointer-head product and the skipped
mask product give what the padded computation gives (mask weights other than 1 included), a small
training run is reproducible with other PPO settings, and benchmarks/train_speed.py builds the
config the command line builds and restores the networks it swaps in."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

th = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

import gymnasium as gym  # noqa: E402

from dallygym.envs.queue import CLUSTER_DIM, JOB_DIM  # noqa: E402
from dallygym.learning.nets import JobSetPolicy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def policy_and_batch(counts, slots: int = 64, seed: int = 0, weights: bool = False):
    obs_space = gym.spaces.Dict(
        {
            "jobs": gym.spaces.Box(0.0, 1.0, shape=(slots, JOB_DIM), dtype=np.float32),
            "job_mask": gym.spaces.Box(0.0, 1.0, shape=(slots,), dtype=np.float32),
            "cluster": gym.spaces.Box(0.0, 1.0, shape=(CLUSTER_DIM,), dtype=np.float32),
        }
    )
    th.manual_seed(seed)
    policy = JobSetPolicy(obs_space, gym.spaces.Discrete(slots + 1), lr_schedule=lambda _: 3e-4)
    rng = np.random.default_rng(seed)
    jobs = np.zeros((len(counts), slots, JOB_DIM), dtype=np.float32)
    job_mask = np.zeros((len(counts), slots), dtype=np.float32)
    masks = np.zeros((len(counts), slots + 1), dtype=bool)
    actions = []
    for i, k in enumerate(counts):
        jobs[i, :k] = rng.random((k, JOB_DIM), dtype=np.float32)
        # With weights, some live slots weigh less than 1 (the padded computation weights them so).
        job_mask[i, :k] = np.where(rng.random(k) < 0.3, 0.5, 1.0) if weights else 1.0
        masks[i, :k] = True
        masks[i, slots] = k == 0 or rng.random() < 0.5
        actions.append(int(rng.choice(np.flatnonzero(masks[i]))))
    obs = {
        "jobs": th.as_tensor(jobs),
        "job_mask": th.as_tensor(job_mask),
        "cluster": th.as_tensor(rng.random((len(counts), CLUSTER_DIM), dtype=np.float32)),
    }
    return policy, obs, masks, th.as_tensor(actions)


def outputs(policy, obs, masks, actions, packed: bool):
    policy.features_extractor.packed = packed
    policy.zero_grad()
    features = policy.extract_features(obs, policy.features_extractor)
    values, log_prob, entropy = policy.evaluate_actions(obs, actions, action_masks=masks)
    (values.sum() + log_prob.sum() + entropy.sum()).backward()
    grads = {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}
    return features[:, : policy.action_space.n].detach(), values.detach(), log_prob.detach(), grads


@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("counts", [[0, 1, 5, 17, 64, 2, 0, 40], [0, 0], [64, 64], [3]])
def test_the_fused_live_path_gives_the_padded_outputs_and_gradients(counts, weights):
    policy, obs, masks, actions = policy_and_batch(counts, weights=weights)
    logits_a, values_a, log_prob_a, grads_a = outputs(policy, obs, masks, actions, packed=True)
    logits_b, values_b, log_prob_b, grads_b = outputs(policy, obs, masks, actions, packed=False)
    valid = th.as_tensor(masks)
    th.testing.assert_close(logits_a[valid], logits_b[valid], rtol=1e-5, atol=1e-6)
    th.testing.assert_close(values_a, values_b, rtol=1e-5, atol=1e-6)
    th.testing.assert_close(log_prob_a, log_prob_b, rtol=1e-5, atol=1e-5)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        th.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-4, atol=1e-5, msg=name)


def test_the_fused_score_is_the_unfused_one():
    policy, *_ = policy_and_batch([1])
    encoder = policy.features_extractor
    gen = th.Generator().manual_seed(1)
    h = th.rand(50, encoder.job_dim, generator=gen)
    part = th.rand(50, encoder.job_dim, generator=gen)
    layer = encoder.score_hidden[0]
    unfused = encoder.score_out(th.relu(h @ layer.weight[:, : encoder.job_dim].T + part)).squeeze(-1)
    th.testing.assert_close(encoder._score(h, part), unfused, rtol=1e-6, atol=1e-6)
    # Broadcast shapes (one context row for many encodings) take the unfused path.
    th.testing.assert_close(encoder._score(h[:1], part[:7]), encoder._score(h[:1].expand(7, -1), part[:7]))


def _train(out, n_epochs: int, batch_size: int):
    from dallygym.learning.trainer import LearnedAgent, TrainConfig, train

    train(
        TrainConfig(
            env_id="DallyQueueSmall-v0",
            trace="gen:small",
            racks=2,
            train_racks=[1, 2],
            machines_per_rack=2,
            total_timesteps=128,
            n_envs=2,
            n_steps=32,
            batch_size=batch_size,
            n_epochs=n_epochs,
            seed=5,
            eval_freq_steps=10**6,
            checkpoint_freq_steps=10**6,
            progress_bar=False,
            time_limit_min=None,
            out_dir=str(out),
        )
    )
    return LearnedAgent(out).policy.state_dict()


@pytest.mark.slow
def test_a_small_training_with_other_ppo_settings_is_reproducible(tmp_path):
    first = _train(tmp_path / "a", n_epochs=2, batch_size=64)
    second = _train(tmp_path / "b", n_epochs=2, batch_size=64)
    assert first.keys() == second.keys()
    assert all(th.equal(first[k], second[k]) for k in first)
    other = _train(tmp_path / "c", n_epochs=1, batch_size=64)
    assert not all(th.equal(first[k], other[k]) for k in first)


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("train_speed_bench", ROOT / "benchmarks" / "train_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_builds_the_command_lines_config():
    from dallygym.experiments.cli import _train_config, build_parser

    bench = _benchmark_module()
    label, ref, overrides = bench.parse_variant("fewer@HEAD~1:n_epochs=2,n_envs=16,train_racks=2/4")
    assert (label, ref, overrides) == ("fewer", "HEAD~1", {"n_epochs": 2, "n_envs": 16, "train_racks": [2, 4]})
    assert bench.parse_variant("current") == ("current", None, {})
    # Fields whose default is None take their annotated type; strings stay strings.
    _, _, typed = bench.parse_variant("h:makespan_dual_lr=0.05,limit_features=true,offer_rule=protected-remaining")
    assert typed == {"makespan_dual_lr": 0.05, "limit_features": True, "offer_rule": "protected-remaining"}
    assert bench.parse_variant("m:max_candidates=64")[2] == {"max_candidates": 64}
    with pytest.raises(SystemExit):
        bench.parse_variant("x:no_such_field=1")
    cli = _train_config(
        build_parser().parse_args(
            [
                "train",
                "--env-id",
                "DallyQueue-v0",
                "--train-racks",
                "2",
                "4",
                "8",
                "16",
                "--total-timesteps",
                "4096",
                "--eval-freq-steps",
                str(10**12),
                "--checkpoint-freq-steps",
                str(10**12),
                "--no-progress",
                "--out",
                "/tmp/x",
            ]
        )
    )
    built = bench.config_for(dict(bench.CASES)["train racks 2 4 8 16"], {}, 4096, "/tmp/x")
    # The benchmark times whole runs (no wall-clock guard) without a progress bar.
    assert replace(cli, time_limit_min=None, progress_bar=False, out_dir="/tmp/x") == built


def test_the_benchmark_puts_the_current_networks_back():
    import dallygym.learning.nets

    bench = _benchmark_module()
    before = (dict(dallygym.learning.nets.QUEUE_POLICIES), dallygym.learning.nets.LiveRolloutBuffer)
    with bench.nets_at("HEAD"):
        assert dallygym.learning.nets.QUEUE_POLICIES["set"] is not before[0]["set"]
        assert dallygym.learning.nets.LiveRolloutBuffer is not before[1]
    assert dallygym.learning.nets.QUEUE_POLICIES == before[0] and dallygym.learning.nets.LiveRolloutBuffer is before[1]
