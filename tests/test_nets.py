"""The DallyQueue networks: the set network encodes only live candidates and gives what the
padded computation gives; its parameters do not depend on the slot count; training with it is
reproducible and saves an agent that loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import tiny_train_args

th = pytest.importorskip("torch")
pytest.importorskip("sb3_contrib")

import gymnasium as gym  # noqa: E402

from dallygym.envs.queue import CLUSTER_DIM, JOB_DIM  # noqa: E402
from dallygym.learning.nets import JobPointerPolicy, JobSetPolicy  # noqa: E402


def spaces_of(slots: int):
    obs = gym.spaces.Dict(
        {
            "jobs": gym.spaces.Box(0.0, 1.0, shape=(slots, JOB_DIM), dtype=np.float32),
            "job_mask": gym.spaces.Box(0.0, 1.0, shape=(slots,), dtype=np.float32),
            "cluster": gym.spaces.Box(0.0, 1.0, shape=(CLUSTER_DIM,), dtype=np.float32),
        }
    )
    return obs, gym.spaces.Discrete(slots + 1)


def set_policy(slots: int, seed: int = 0) -> JobSetPolicy:
    th.manual_seed(seed)
    return JobSetPolicy(*spaces_of(slots), lr_schedule=lambda _: 3e-4)


def observations(counts, slots: int, seed: int = 0, gaps: bool = False):
    """A batch with ``counts[i]`` live candidates in sample i (the first slots, as the environment
    fills them; with ``gaps``, spread over the slots instead), the masks as the environment makes
    them (stop sometimes invalid when there are candidates) and a valid action per sample."""
    rng = np.random.default_rng(seed)
    batch = len(counts)
    jobs = np.zeros((batch, slots, JOB_DIM), dtype=np.float32)
    job_mask = np.zeros((batch, slots), dtype=np.float32)
    masks = np.zeros((batch, slots + 1), dtype=bool)
    actions = []
    for i, k in enumerate(counts):
        live = np.sort(rng.choice(slots, k, replace=False)) if gaps else np.arange(k)
        jobs[i, live] = rng.random((k, JOB_DIM), dtype=np.float32)
        job_mask[i, live] = 1.0
        masks[i, live] = True
        masks[i, slots] = k == 0 or rng.random() < 0.5
        actions.append(int(rng.choice(np.flatnonzero(masks[i]))))
    obs = {
        "jobs": th.as_tensor(jobs),
        "job_mask": th.as_tensor(job_mask),
        "cluster": th.as_tensor(rng.random((batch, CLUSTER_DIM), dtype=np.float32)),
    }
    return obs, masks, th.as_tensor(actions)


def outputs(policy, obs, masks, actions, packed: bool):
    """Logits, values, log-probabilities, entropies and the gradient of their sum."""
    policy.features_extractor.packed = packed
    policy.zero_grad()
    features = policy.extract_features(obs, policy.features_extractor)
    values, log_prob, entropy = policy.evaluate_actions(obs, actions, action_masks=masks)
    (values.sum() + log_prob.sum() + entropy.sum()).backward()
    grads = {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}
    logits = features[:, : policy.action_space.n].detach()
    return logits, values.detach().flatten(), log_prob.detach(), entropy.detach(), grads


def assert_same(a, b, masks):
    logits_a, values_a, log_prob_a, entropy_a, grads_a = a
    logits_b, values_b, log_prob_b, entropy_b, grads_b = b
    valid = th.as_tensor(masks)
    th.testing.assert_close(logits_a[valid], logits_b[valid], rtol=1e-5, atol=1e-6)
    th.testing.assert_close(values_a, values_b, rtol=1e-5, atol=1e-6)
    th.testing.assert_close(log_prob_a, log_prob_b, rtol=1e-5, atol=1e-5)
    th.testing.assert_close(entropy_a, entropy_b, rtol=1e-5, atol=1e-5)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        th.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    "slots, counts",
    [
        (64, [0, 1, 5, 17, 33, 64, 2, 0, 40, 63]),  # no candidate, one, all slots live, ...
        (64, [0, 0, 0]),  # only "stop" anywhere in the batch
        (64, [64, 64]),  # every slot live
        (64, [3]),
        (512, [7, 110, 0, 512, 45, 90, 300, 12]),
    ],
)
def test_live_rows_only_give_what_every_slot_gives(slots, counts):
    policy = set_policy(slots)
    obs, masks, actions = observations(counts, slots)
    assert_same(
        outputs(policy, obs, masks, actions, packed=True), outputs(policy, obs, masks, actions, packed=False), masks
    )


def test_live_slots_anywhere_are_gathered_too():
    policy = set_policy(64)
    obs, masks, actions = observations([0, 3, 20, 64, 1], 64, seed=3, gaps=True)
    assert_same(
        outputs(policy, obs, masks, actions, packed=True), outputs(policy, obs, masks, actions, packed=False), masks
    )


def test_a_tail_of_empty_slots_cut_off_changes_nothing():
    """As the imitation warm start passes its batches: only up to the largest count."""
    policy = set_policy(64)
    obs, masks, actions = observations([0, 4, 9, 2], 64, seed=5)
    cut = {"jobs": obs["jobs"][:, :9], "job_mask": obs["job_mask"][:, :9], "cluster": obs["cluster"]}
    with th.no_grad():
        whole = policy.extract_features(obs, policy.features_extractor)
        short = policy.extract_features(cut, policy.features_extractor)
        values_whole, log_prob_whole, _ = policy.evaluate_actions(obs, actions, action_masks=masks)
        values_short, log_prob_short, _ = policy.evaluate_actions(cut, actions, action_masks=masks)
    assert th.equal(whole, short)
    assert th.equal(values_whole, values_short) and th.equal(log_prob_whole, log_prob_short)


def test_a_sample_does_not_depend_on_the_others_in_its_batch():
    policy = set_policy(64)
    obs, masks, actions = observations([5, 64, 0, 30], 64, seed=7)
    with th.no_grad():
        together = policy.extract_features(obs, policy.features_extractor)
        for i in range(4):
            alone = policy.extract_features({k: v[i : i + 1] for k, v in obs.items()}, policy.features_extractor)
            th.testing.assert_close(alone[0], together[i], rtol=1e-6, atol=1e-6)


def test_the_set_networks_parameters_do_not_depend_on_the_slot_count():
    small = {k: tuple(v.shape) for k, v in set_policy(64).state_dict().items()}
    large = {k: tuple(v.shape) for k, v in set_policy(512).state_dict().items()}
    assert small == large
    # The pointer network's value head reads every slot's score: it does depend on them.
    pointer = JobPointerPolicy(*spaces_of(64), lr_schedule=lambda _: 0.0, ortho_init=False)
    assert pointer.state_dict()["mlp_extractor.value_net.0.weight"].shape[1] == 64 + 1 + 64


def test_parameters_trained_at_one_slot_count_act_the_same_at_another():
    small, large = set_policy(64, seed=1), set_policy(512, seed=2)
    large.load_state_dict(small.state_dict(), strict=True)
    obs, masks, actions = observations([0, 12, 64], 64, seed=9)
    padded = {
        "jobs": th.nn.functional.pad(obs["jobs"], (0, 0, 0, 512 - 64)),
        "job_mask": th.nn.functional.pad(obs["job_mask"], (0, 512 - 64)),
        "cluster": obs["cluster"],
    }
    wide = np.zeros((3, 513), dtype=bool)
    wide[:, :64], wide[:, 512] = masks[:, :64], masks[:, 64]
    stop = actions.clone()
    stop[stop == 64] = 512
    with th.no_grad():
        values_small, log_prob_small, entropy_small = small.evaluate_actions(obs, actions, action_masks=masks)
        values_large, log_prob_large, entropy_large = large.evaluate_actions(padded, stop, action_masks=wide)
    th.testing.assert_close(values_small, values_large)
    th.testing.assert_close(log_prob_small, log_prob_large)
    th.testing.assert_close(entropy_small, entropy_large)


def test_minibatches_without_the_empty_slots_give_the_network_the_same_outputs():
    from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer

    from dallygym.learning.nets import LiveRolloutBuffer

    slots, steps, envs = 64, 8, 2
    obs_space, action_space = spaces_of(slots)
    buffers = [
        cls(steps, obs_space, action_space, device="cpu", n_envs=envs)
        for cls in (MaskableDictRolloutBuffer, LiveRolloutBuffer)
    ]
    rng = np.random.default_rng(11)
    for step in range(steps):
        obs, masks, actions = observations(rng.integers(0, 30, envs).tolist(), slots, seed=step)
        for buffer in buffers:
            buffer.add(
                {k: v.numpy() for k, v in obs.items()},
                actions.numpy()[:, None],
                rng.random(envs),
                np.array([step == 0] * envs),
                th.zeros(envs),
                th.zeros(envs),
                action_masks=masks,
            )
    for buffer in buffers:
        buffer.compute_returns_and_advantage(th.zeros(envs), np.zeros(envs, dtype=bool))
    policy = set_policy(slots)
    np.random.seed(0)
    whole = list(buffers[0].get(5))
    np.random.seed(0)
    cut = list(buffers[1].get(5))
    assert len(whole) == len(cut) == 4
    assert any(c.observations["jobs"].shape[1] < slots for c in cut)
    for a, b in zip(whole, cut):
        assert th.equal(a.actions, b.actions) and th.equal(a.action_masks, b.action_masks)
        with th.no_grad():
            out_a = policy.evaluate_actions(a.observations, a.actions.flatten(), action_masks=a.action_masks)
            out_b = policy.evaluate_actions(b.observations, b.actions.flatten(), action_masks=b.action_masks)
        assert all(th.equal(x, y) for x, y in zip(out_a, out_b))


def test_the_config_names_the_network_and_an_old_config_builds_the_pointer_one():
    from dallygym.learning.agent_files import AgentLoadError, check_config
    from dallygym.learning.trainer import TrainConfig, _queue_policy_network

    base = {"env_id": "DallyQueueSmall-v0"}
    assert TrainConfig().queue_net == "set"
    assert type(_queue_policy_network(base, "test")) is JobPointerPolicy
    assert type(_queue_policy_network({**base, "queue_net": "pointer"}, "test")) is JobPointerPolicy
    assert type(_queue_policy_network({**base, "queue_net": "set"}, "test")) is JobSetPolicy
    with pytest.raises(AgentLoadError, match="queue_net"):
        check_config({**base, "queue_net": "transformer"}, "test")
    with pytest.raises(AgentLoadError, match="queue_net"):
        check_config({**base, "queue_net": 3}, "test")
    with pytest.raises(ValueError, match="queue_net"):
        from dallygym.learning.trainer import train

        train(TrainConfig(env_id="DallyQueueSmall-v0", queue_net="transformer", out_dir="/nonexistent/x"))


def test_the_command_line_chooses_the_network():
    from dallygym.experiments.cli import _train_config, build_parser

    parse = build_parser().parse_args
    assert _train_config(parse(["train", "--env-id", "DallyQueue-v0"])).queue_net == "set"
    assert _train_config(parse(["train", "--env-id", "DallyQueue-v0", "--queue-net", "pointer"])).queue_net == "pointer"


def _train_small(out, seed: int = 3) -> None:
    from dallygym.experiments.cli import main

    code = main(tiny_train_args("DallyQueueSmall-v0", out, "--batch-size", "32", "--seed", str(seed), total=192))
    assert code == 0


@pytest.mark.slow
def test_training_the_set_network_is_reproducible_and_its_agent_evaluates(tmp_path, capsys):
    from dallygym.experiments.cli import main
    from dallygym.learning.trainer import LearnedAgent

    first, second = tmp_path / "a", tmp_path / "b"
    _train_small(first)
    _train_small(second)
    config = json.loads((first / "config.json").read_text())
    assert config["queue_net"] == "set"
    a, b = LearnedAgent(first), LearnedAgent(second)
    assert type(a.policy) is JobSetPolicy and a.config.queue_net == "set"
    state_a, state_b = a.policy.state_dict(), b.policy.state_dict()
    assert state_a.keys() == state_b.keys()
    assert all(th.equal(state_a[k], state_b[k]) for k in state_a)
    untrained = set_policy(64, seed=3).state_dict()
    assert not all(th.equal(state_a[k], untrained[k]) for k in state_a)
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                "--agent",
                str(first),
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
    assert str(first) in capsys.readouterr().out


@pytest.mark.parametrize("policy_class, name", [(JobSetPolicy, "set"), (JobPointerPolicy, "pointer")])
def test_a_zip_converted_without_its_config_gets_the_network_its_parameters_fill(tmp_path, policy_class, name):
    from sb3_contrib import MaskablePPO

    from dallygym.learning.agent_files import convert_agent
    from dallygym.learning.trainer import LearnedAgent

    model = MaskablePPO(
        policy_class,
        gym.make("dallygym:DallyQueueSmall-v0"),
        n_steps=32,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
    )
    model.save(tmp_path / "model.zip")
    convert_agent(tmp_path / "model.zip", env_id="DallyQueueSmall-v0")
    agent = LearnedAgent(tmp_path)
    assert type(agent.policy) is policy_class and agent.config.queue_net == name
    assert json.loads((tmp_path / "config.json").read_text())["queue_net"] == name
