"""Snapshots of an environment mid-episode: copy.deepcopy, pickle and cloudpickle
give a copy that continues exactly as the original does."""

from __future__ import annotations

import copy
import pickle

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dallygym  # noqa: F401 - registers the ids

SMALL_IDS = ["DallySmall-v0", "DallyQueueSmall-v0"]
COPIES = {
    "deepcopy": copy.deepcopy,
    "pickle": lambda env: pickle.loads(pickle.dumps(env)),
    "cloudpickle": lambda env: cloudpickle.loads(cloudpickle.dumps(env)),
}


def rest_of_episode(env, info, seed: int) -> list:
    """Play ``env`` to the end of its episode with seeded random masked actions, then reset once
    more (unseeded: the environment's own generator draws the next trace); return everything
    observed."""
    rng = np.random.default_rng(seed)
    seen = []
    done = False
    mask = info["action_mask"]
    while not done:
        obs, reward, terminated, truncated, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        mask = info["action_mask"]
        seen.append((obs, reward, terminated, info.get("summary")))
        done = terminated or truncated
    obs, info = env.reset()
    seen.append((obs, None, None, env.unwrapped.engine.total_iterations.tolist()))
    return seen


def same(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for (oa, ra, ta, sa), (ob, rb, tb, sb) in zip(a, b):
        if isinstance(oa, dict):
            if not all(np.array_equal(oa[k], ob[k]) for k in oa):
                return False
        elif not np.array_equal(oa, ob):
            return False
        if ra != rb or ta != tb or sa != sb:
            return False
    return True


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("env_id", SMALL_IDS)
def test_a_copy_mid_episode_continues_exactly_like_the_original(env_id, how):
    env = gym.make(env_id)
    obs, info = env.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(2):
        obs, _, terminated, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        assert not terminated
    twin = COPIES[how](env)
    assert twin.unwrapped.steps == env.unwrapped.steps == 2
    assert np.array_equal(twin.unwrapped.action_masks(), env.unwrapped.action_masks())
    assert twin.unwrapped.engine.now_s == env.unwrapped.engine.now_s
    assert same(rest_of_episode(twin, info, 1), rest_of_episode(env, info, 1))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), steps=st.integers(0, 30), env_id=st.sampled_from(SMALL_IDS))
def test_any_point_of_any_episode_can_be_copied(seed, steps, env_id):
    env = gym.make(env_id, lease_s=600.0)
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        if env.unwrapped._done:
            break
        obs, _, terminated, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        if terminated:
            break
    if env.unwrapped._done and not env.unwrapped._terminal_pending:
        obs, info = env.reset()
    twin = copy.deepcopy(env)
    assert same(rest_of_episode(twin, info, seed), rest_of_episode(env, info, seed))


def test_an_environment_copies_before_its_first_reset_and_the_copy_is_independent():
    env = gym.make("DallyQueueSmall-v0", makespan_weight=2.0)
    twin = pickle.loads(pickle.dumps(env))
    assert twin.unwrapped.engine is None and twin.unwrapped.makespan_weight == 2.0
    a, _ = env.reset(seed=3)
    b, _ = twin.reset(seed=3)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    env.step(0)
    assert env.unwrapped.steps == 1 and twin.unwrapped.steps == 0  # stepping one leaves the other


# Every id and decision kind: offers to waiting jobs (the compiled loop handing turns over),
# renewal offers under "upgrade" and "rebid", picks with and without lease-expired candidates,
# and the guards that serve some picks themselves.
FULL_CASES = {
    "Dally-v0": ("Dally-v0", {}),
    "Dally-v0 rebid": ("Dally-v0", {"renewal": "rebid"}),
    "DallyQueue-v0": ("DallyQueue-v0", {}),
    "DallyQueue-v0 waiting picks, guards": (
        "DallyQueue-v0",
        {"lease_picks": "waiting", "guard_leases": 0.5, "guard_waiting": True},
    ),
    "DallyQueue-v0 rebid, limit features": (
        "DallyQueue-v0",
        {"renewal": "rebid", "makespan_reference": "dally", "limit_features": True},
    ),
}


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("case", sorted(FULL_CASES))
def test_every_id_copies_at_any_decision_kind_and_goes_on_alike(case, how):
    env_id, kwargs = FULL_CASES[case]
    env = gym.make(env_id, **kwargs)
    obs, info = env.reset(seed=11)
    rng = np.random.default_rng(11)
    kinds = set()
    for _ in range(60):
        base = env.unwrapped
        decision = base.offer if base.offer is not None else getattr(base, "pick", None)
        kinds.add((decision.kind, getattr(decision, "renewal", None)))
        obs, _, terminated, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        assert not terminated
    twin = COPIES[how](env)
    assert twin.unwrapped.engine is not env.unwrapped.engine
    assert same(rest_of_episode(twin, info, 3), rest_of_episode(env, info, 3))
    if env_id == "DallyQueue-v0":
        assert ("pick", None) in kinds
    elif "renewal" in kwargs:
        assert ("offer", "rebid") in kinds


def test_a_snapshot_does_not_grow_with_the_steps_taken():
    """What a copy holds is the state, not the history: the pickled environment after 1,500
    steps is about as large as after 50 (the run's records grow with simulated time, a few
    numbers per event)."""
    env = gym.make("DallyQueue-v0")
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    sizes = {}
    for steps in range(1, 1501):
        obs, _, terminated, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        assert not terminated
        if steps in (50, 1500):
            sizes[steps] = len(pickle.dumps(env))
    assert sizes[1500] < 1.5 * sizes[50], sizes
