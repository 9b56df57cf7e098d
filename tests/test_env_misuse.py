"""Misusing the environments: every wrong call either behaves as documented or fails at the
boundary with a clear one-line error naming what is wrong -- never an error from deep inside
numpy or numba, never a hang."""

from __future__ import annotations

import copy
import warnings

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from helpers import make_trace

import dallygym
from dallygym import ClusterError, EngineError, InvalidActionWarning, ResetNeeded, TraceError

IDS = ("Dally-v0", "DallySmall-v0", "DallyQueue-v0", "DallyQueueSmall-v0")
QUEUE_IDS = ("DallyQueue-v0", "DallyQueueSmall-v0")
DALLY_IDS = ("Dally-v0", "DallySmall-v0")

#: The errors a misuse may raise: the standard ones, Gymnasium's, and the project's own.
CLEAR_ERRORS = (ValueError, TypeError, ResetNeeded, gym.error.Error, ClusterError, TraceError, EngineError)

#: Three jobs: an episode of any id over it has no real choice, so it ends inside reset and
#: the first step reports the end.
TINY = make_trace([(0, 0, 1, 10, 1.0), (1, 10, 2, 10, 1.0), (2, 20, 1, 10, 1.0)])


def assert_clear(info: pytest.ExceptionInfo, *words: str) -> None:
    """The error is one of the clear kinds, its message one non-empty line naming ``words``,
    and it was raised by dallygym or Gymnasium, not inside numpy, pandas or numba."""
    assert isinstance(info.value, CLEAR_ERRORS), repr(info.value)
    message = str(info.value).strip()
    assert message and "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    raised_in = str(info.traceback[-1].path)
    assert not any(f"/{lib}/" in raised_in for lib in ("numpy", "pandas", "numba")), raised_in


def fresh(env_id: str, **kwargs) -> gym.Env:
    return gym.make(env_id, **kwargs)


# --- constructor keywords ---------------------------------------------------------------------

BAD_FRAME = pd.DataFrame({"job": [0], "when": [0.0]})
NEGATIVE_GPUS = make_trace([(0, 0, -2, 10, 1.0)])

#: (keywords, error, words the message must hold), for every id.
BAD_KWARGS = [
    pytest.param({"bogus": 1}, TypeError, ("bogus",), id="unknown-keyword"),
    pytest.param({"racks": "2"}, ClusterError, ("racks",), id="racks-string"),
    pytest.param({"racks": -1}, ClusterError, ("racks", "-1"), id="racks-negative"),
    pytest.param({"racks": 0}, ClusterError, ("racks",), id="racks-zero"),
    pytest.param({"machines_per_rack": 2.5}, ClusterError, ("machines_per_rack",), id="machines-fraction"),
    pytest.param({"gpus_per_machine": True}, ClusterError, ("gpus_per_machine",), id="gpus-bool"),
    pytest.param({"trace": "no-such-trace"}, TraceError, ("no-such-trace",), id="trace-unknown-name"),
    pytest.param({"trace": "gen:no-such"}, TraceError, ("no-such",), id="trace-unknown-generator"),
    pytest.param({"trace": "/no/such/file.csv"}, TraceError, ("/no/such/file.csv",), id="trace-missing-file"),
    pytest.param({"trace": 123}, TypeError, ("trace",), id="trace-int"),
    pytest.param({"trace": []}, ValueError, ("empty",), id="trace-empty-list"),
    pytest.param({"trace": BAD_FRAME}, TraceError, ("missing column",), id="trace-frame-malformed"),
    pytest.param({"trace": NEGATIVE_GPUS}, TraceError, ("num_gpus",), id="trace-frame-negative-gpus"),
    pytest.param({"latency": "nope"}, ValueError, ("nope",), id="latency-unknown"),
    pytest.param({"latency": 123}, TypeError, ("latency",), id="latency-int"),
    pytest.param({"lease_s": -1}, ValueError, ("lease_s",), id="lease-negative"),
    pytest.param({"lease_s": "1h"}, ValueError, ("lease_s",), id="lease-string"),
    pytest.param({"restart_overhead_s": -1.0}, ValueError, ("restart_overhead_s",), id="overhead-negative"),
    pytest.param({"renewal": "bogus"}, ValueError, ("renewal", "bogus"), id="renewal-unknown"),
    pytest.param({"reward": "bogus"}, ValueError, ("reward", "bogus"), id="reward-unknown"),
    pytest.param({"reward_scale_s": -1.0}, ValueError, ("reward_scale_s",), id="reward-scale-negative"),
    pytest.param({"reward_scale_s": "x"}, TypeError, ("reward_scale_s",), id="reward-scale-string"),
    pytest.param({"sensitivity": "psychic"}, ValueError, ("sensitivity", "psychic"), id="sensitivity-unknown"),
    pytest.param({"strict": "yes"}, TypeError, ("strict",), id="strict-string"),
    pytest.param(
        {"render_mode": "bogus"},
        ValueError,
        ("render_mode", "bogus"),
        id="render-mode-unknown",
        marks=pytest.mark.filterwarnings("ignore:.*render_mode"),
    ),  # (gym.make's own warning first)
]


@pytest.mark.parametrize("kwargs, error, words", BAD_KWARGS)
@pytest.mark.parametrize("env_id", IDS)
def test_bad_constructor_keywords_are_refused_clearly(env_id, kwargs, error, words):
    with pytest.raises(error) as info:
        fresh(env_id, **kwargs)
    assert_clear(info, *words)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        pytest.param({"priority": "nope"}, ValueError, ("nope",), id="priority-unknown"),
        pytest.param({"priority": 123}, TypeError, ("priority",), id="priority-int"),
        pytest.param({"max_candidates": 8}, TypeError, ("max_candidates",), id="queue-keyword"),
    ],
)
@pytest.mark.parametrize("env_id", DALLY_IDS)
def test_bad_dally_keywords_are_refused_clearly(env_id, kwargs, error, words):
    with pytest.raises(error) as info:
        fresh(env_id, **kwargs)
    assert_clear(info, *words)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        pytest.param({"offer_rule": "nope"}, ValueError, ("nope",), id="offer-rule-unknown"),
        pytest.param({"offer_rule": 123}, TypeError, ("offer_rule",), id="offer-rule-int"),
        pytest.param({"priority": "dally"}, TypeError, ("priority",), id="dally-keyword"),
        pytest.param({"max_candidates": 0}, ValueError, ("max_candidates",), id="max-candidates-zero"),
        pytest.param({"max_candidates": 1.5}, ValueError, ("max_candidates",), id="max-candidates-float"),
        pytest.param({"makespan_weight": -1}, ValueError, ("makespan_weight",), id="makespan-weight-negative"),
        pytest.param({"lease_picks": "some"}, ValueError, ("lease_picks",), id="lease-picks-unknown"),
        pytest.param({"makespan_credit": "later"}, ValueError, ("makespan_credit",), id="makespan-credit-unknown"),
        pytest.param({"guard_leases": 2.0}, ValueError, ("guard_leases",), id="guard-leases-above-one"),
        pytest.param({"guard_waiting": True}, ValueError, ("guard_leases",), id="guard-waiting-alone"),
    ],
)
@pytest.mark.parametrize("env_id", QUEUE_IDS)
def test_bad_queue_keywords_are_refused_clearly(env_id, kwargs, error, words):
    with pytest.raises(error) as info:
        fresh(env_id, **kwargs)
    assert_clear(info, *words)


def test_numpy_integers_are_accepted_where_integers_are():
    env = fresh("DallyQueueSmall-v0", racks=np.int64(2), max_candidates=np.int64(8))
    assert env.action_space.n == 9
    env.reset(seed=0)


# --- reset ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed, options, error, words",
    [
        pytest.param(-1, None, gym.error.Error, ("Seed",), id="seed-negative"),
        pytest.param("abc", None, gym.error.Error, ("Seed",), id="seed-string"),
        pytest.param(1.5, None, gym.error.Error, ("Seed",), id="seed-float"),
        pytest.param(0, "fast", TypeError, ("options",), id="options-string"),
        pytest.param(0, [1], TypeError, ("options",), id="options-list"),
        pytest.param(0, {"bogus": 1}, ValueError, ("bogus",), id="options-unknown-key"),
    ],
)
@pytest.mark.parametrize("env_id", IDS)
def test_bad_reset_arguments_are_refused_clearly(env_id, seed, options, error, words):
    env = fresh(env_id, trace=TINY)
    with pytest.raises(error) as info:
        env.reset(seed=seed, options=options)
    assert_clear(info, *words)
    env.reset(seed=0)  # and the environment is still usable


@pytest.mark.parametrize("env_id", IDS)
def test_reset_takes_no_seed_a_huge_seed_and_empty_options(env_id):
    env = fresh(env_id, trace=TINY)
    for seed, options in ((None, None), (2**70, {}), (0, None)):
        obs, info = env.reset(seed=seed, options=options)
        assert env.observation_space.contains(obs) and "action_mask" in info


# --- actions ----------------------------------------------------------------------------------

#: Not actions of a Discrete space (or not valid ones): by name, a function of the space's size.
BAD_ACTIONS = {
    "float": lambda n: 1.0,
    "float-zero": lambda n: 0.0,
    "array-1d": lambda n: np.array([0, 1]),
    "array-2d": lambda n: np.array([[0]]),
    "array-0d-float": lambda n: np.array(0.0),
    "out-of-range": lambda n: n + 5,
    "one-past-the-end": lambda n: np.int64(n),
    "negative": lambda n: -1,
    "huge": lambda n: 2**70,
    "none": lambda n: None,
    "string": lambda n: "1",
    "bytes": lambda n: b"0",
    "bool": lambda n: True,
    "list": lambda n: [0],
    "complex": lambda n: 0j,
}


@pytest.mark.parametrize("name", BAD_ACTIONS)
@pytest.mark.parametrize("env_id", IDS)
def test_a_bad_action_is_the_documented_fallback_flagged_and_warned(env_id, name):
    env = fresh(env_id)
    env.reset(seed=0)
    action = BAD_ACTIONS[name](env.action_space.n)
    with pytest.warns(InvalidActionWarning, match="invalid under the action mask"):
        obs, reward, terminated, truncated, info = env.step(action)
    assert info["invalid_action"] is True
    assert env.observation_space.contains(obs) and np.isfinite(reward) and not truncated


@pytest.mark.parametrize("name", ["float", "array-1d", "out-of-range", "negative", "none", "string", "bool"])
@pytest.mark.parametrize("env_id", IDS)
def test_a_bad_action_raises_naming_it_when_strict(env_id, name):
    env = fresh(env_id, strict=True)
    env.reset(seed=0)
    action = BAD_ACTIONS[name](env.action_space.n)
    with pytest.raises(ValueError) as info:
        env.step(action)
    assert_clear(info, "action", repr(action))


@pytest.mark.parametrize("action", [np.int8(0), np.uint64(0), np.array(0), 0])
@pytest.mark.parametrize("env_id", IDS)
def test_integer_actions_of_any_numpy_kind_are_actions(env_id, action):
    env = fresh(env_id)
    env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InvalidActionWarning)
        info = env.step(action)[4]
    assert info["invalid_action"] is False


# --- the episode's life cycle -----------------------------------------------------------------


def run_out(env: gym.Env) -> None:
    """Step ``env`` with valid actions until its episode ends."""
    done = False
    while not done:
        action = int(np.flatnonzero(env.unwrapped.action_masks())[0])
        _, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated


@pytest.mark.parametrize("env_id", IDS)
def test_step_and_render_before_reset_ask_for_a_reset(env_id):
    env = fresh(env_id, render_mode="ansi")
    with pytest.raises(ResetNeeded) as info:
        env.step(0)
    assert_clear(info, "reset()")
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, gym.error.ResetNeeded)
    with pytest.raises(ResetNeeded) as info:
        env.render()
    assert_clear(info, "reset()")


@pytest.mark.parametrize("env_id", IDS)
def test_step_after_the_end_asks_for_a_reset_and_reset_starts_again(env_id):
    env = fresh(env_id, trace=TINY)
    env.reset(seed=0)
    run_out(env)
    with pytest.raises(ResetNeeded) as info:
        env.step(0)
    assert_clear(info, "ended", "reset()")
    assert env.unwrapped.action_masks()[0]  # only the fallback action is left
    env.reset(seed=1)
    run_out(env)


@pytest.mark.parametrize("env_id", IDS)
def test_render_without_a_mode_warns_and_returns_none(env_id):
    env = fresh(env_id, trace=TINY)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None


@pytest.mark.parametrize("env_id", IDS)
def test_close_twice_is_harmless_and_reset_works_after_it(env_id):
    env = fresh(env_id, trace=TINY)
    env.close()
    env.reset(seed=0)
    env.close()
    env.close()
    env.reset(seed=0)
    run_out(env)


# --- snapshots (copy.deepcopy and pickle) ------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_snapshots_keep_the_state_of_the_life_cycle(env_id):
    env = fresh(env_id, trace=TINY).unwrapped
    with pytest.raises(ResetNeeded):
        copy.deepcopy(env).step(0)  # a copy before reset has no episode either
    env.reset(seed=0)
    run_out(env)
    with pytest.raises(ResetNeeded) as info:
        copy.deepcopy(env).step(0)  # nor does a copy of an ended one
    assert_clear(info, "ended")


@pytest.mark.parametrize("state", [None, {}, {"init_kwargs": 1, "episode": None}, "snapshot"])
@pytest.mark.parametrize("env_id", DALLY_IDS[1:] + QUEUE_IDS[1:])
def test_restoring_something_that_is_not_a_snapshot_is_refused(env_id, state):
    env = fresh(env_id).unwrapped
    with pytest.raises(ValueError) as info:
        env.__setstate__(state)
    assert_clear(info, "snapshot")


def test_the_errors_are_exported():
    assert issubclass(dallygym.ResetNeeded, RuntimeError) and issubclass(dallygym.InvalidActionWarning, UserWarning)
