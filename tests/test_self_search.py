"""Expert iteration without a teacher (``TrainConfig.search_rounds``): the policy's own order
as a lookahead's base (``ModelOrder``), the search's picks as targets, the options checked."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from helpers import tiny_train_args

import dallygym  # noqa: F401 - registers the ids


class _FixedPolicy:
    """A stand-in for a MaskablePPO model whose policy prefers higher slots (logit = slot)."""

    def __init__(self, slots: int) -> None:
        import torch as th

        self.logits = th.arange(slots + 1, dtype=th.float32)
        self.policy = self

    def obs_to_tensor(self, obs):
        return obs, False

    def get_distribution(self, obs, action_masks=None):
        import torch as th
        from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution

        dist = MaskableCategoricalDistribution(len(self.logits)).proba_distribution(self.logits[None].clone())
        dist.apply_masking(th.as_tensor(action_masks))
        return dist


def test_a_learned_policy_as_base_orders_the_candidates_by_its_probabilities():
    pytest.importorskip("sb3_contrib")
    from dallygym.envs.lookahead import LookaheadAgent, ModelOrder

    env = gym.make("DallyQueueSmall-v0")
    obs, info = env.reset(seed=4)
    rng = np.random.default_rng(4)
    while np.count_nonzero(info["action_mask"][:-1]) < 3:
        obs, _, terminated, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        assert not terminated
    base = ModelOrder(_FixedPolicy(env.unwrapped.max_candidates))
    valid = np.flatnonzero(info["action_mask"][:-1])
    order = base.slots(obs, env.unwrapped)
    assert order.tolist() == valid[::-1].tolist()  # the highest slot is the most likely
    assert base.first(obs, env.unwrapped) == valid[-1]  # (never the stop action)
    # With one candidate tried the search is the base itself: no copy.
    agent = LookaheadAgent(env, base=base, top_k=1)
    assert int(agent.predict(obs)[0]) == valid[-1] and agent.cost.copies == 0
    # With two, each tried on a copy rolled out by the base; the live environment untouched.
    before = env.unwrapped.steps
    agent = LookaheadAgent(env, base=base, top_k=2, horizon=3)
    assert int(agent.predict(obs)[0]) in valid[-2:].tolist()
    assert agent.cost.copies == 2 and agent.cost.rollout_steps <= 6 and env.unwrapped.steps == before


def test_self_search_trains_from_the_policy_s_own_improved_picks_and_the_agent_evaluates(tmp_path):
    pytest.importorskip("sb3_contrib")
    from dallygym.experiments.cli import main
    from dallygym.learning.trainer import LearnedAgent, run_agent
    from dallygym.sim.cluster import ClusterSpec
    from dallygym.sim.trace import load_trace

    out = tmp_path / "search"
    extra = ("--search-rounds", "2", "--search-episodes", "1", "--search-horizon", "3", "--n-epochs", "1")
    assert main(tiny_train_args("DallyQueueSmall-v0", out, *extra)) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["search_rounds"] == 2 and config["search_top_k"] == 3 and config["search_horizon"] == 3
    meta = json.loads((out / "meta.json").read_text())["self_search"]
    assert len(meta["rounds"]) == 2
    for done in meta["rounds"]:
        assert done["samples"] > 0 and done["copies"] > 0
        assert done["changed"] <= done["contested"] <= done["samples"]
        assert done["copies"] <= 3 * done["contested"] and np.isfinite(done["loss_last_epoch"])
    spec = ClusterSpec(2, 2, 8)
    assert run_agent(LearnedAgent(out), load_trace("small", cluster=spec), spec).summary["jobs"] == 60


def test_the_search_options_are_checked():
    from dallygym.learning.trainer import TrainConfig, check_train_config

    for bad, match in (
        ({"env_id": "Dally-v0", "search_rounds": 1}, "DallyQueue id"),
        ({"env_id": "DallyQueue-v0", "search_rounds": -1}, "search_rounds must be >= 0"),
        ({"env_id": "DallyQueue-v0", "search_rounds": 1, "search_episodes": 0}, "search_episodes"),
        ({"env_id": "DallyQueue-v0", "search_rounds": 1, "search_top_k": 1}, "search_top_k must be >= 2"),
        ({"env_id": "DallyQueue-v0", "search_rounds": 1, "search_horizon": 0}, "search_horizon"),
    ):
        with pytest.raises(ValueError, match=match):
            check_train_config(TrainConfig(**bad))
