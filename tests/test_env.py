"""The Gymnasium environment: checkers, spaces, masks, rewards, determinism, equivalence."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import check_holdings, play, random_masked

import dallygym
from dallygym import ClusterSpec, evaluate, heuristic_agent, simulate
from dallygym.envs.offer import OBS_DIM, OBS_FEATURES, DallyEnv, InvalidActionWarning

ENV_IDS = ["Dally-v0", "DallySmall-v0"]
DALLY_VARIANTS = ["dally", "dally-manual", "dally-nowait", "dally-consolidated"]
# Policies that accept every offer at the job's best possible tier, as the env does itself.
EQUIVALENT = [*DALLY_VARIANTS, "fifo"]


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.filterwarnings("ignore::dallygym.envs.offer.InvalidActionWarning")  # (the checkers send random actions)
def test_gymnasium_env_checker_passes(env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.filterwarnings("ignore::dallygym.envs.offer.InvalidActionWarning")  # (the checkers send random actions)
def test_stable_baselines3_env_checker_passes(env_id):
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    sb3_checker.check_env(gym.make(env_id), warn=True)


@pytest.mark.parametrize("env_id", ["Dally-v0", "DallySmall-v0", "DallyQueue-v0", "DallyQueueSmall-v0"])
def test_make_gives_the_environment_itself_which_refuses_steps_and_renders_before_reset(env_id):
    """The ids are registered without gymnasium's order-enforcing and passive-checker wrappers
    (pass-through after the first step, about 0.26 µs a step together): the environment refuses a
    step or a render before reset itself, and gym.make(..., disable_env_checker=False) puts
    the checker back."""
    env = gym.make(env_id, render_mode="ansi")
    assert env is env.unwrapped and env.spec.id == env_id
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step(0)
    with pytest.raises(RuntimeError, match=r"call reset\(\) before render\(\)"):
        env.render()
    checked = gym.make(env_id, disable_env_checker=False)
    assert isinstance(checked, gym.wrappers.PassiveEnvChecker)
    checked.reset(seed=0)
    checked.step(0)


def test_make_without_importing_registers_by_module_prefix():
    env = gym.make("dallygym:DallySmall-v0")
    assert isinstance(env.unwrapped, DallyEnv)


def test_spaces_and_observation_features_are_fixed_and_documented():
    env = gym.make("DallySmall-v0")
    assert env.action_space == gym.spaces.Discrete(4)
    assert env.observation_space.shape == (OBS_DIM,) and env.observation_space.dtype == np.float32
    doc = DallyEnv.__doc__
    for section in (
        "## Description",
        "## Action Space",
        "## Observation Space",
        "## Rewards",
        "## Starting State",
        "## Episode End",
        "## Arguments",
        "## Version History",
    ):
        assert section in doc
    for name in OBS_FEATURES:
        assert name in doc, name


def test_wait_is_always_valid_and_masks_match_the_offer():
    env = gym.make("DallySmall-v0")
    for obs, _, _terminated, info in play(env, 0, random_masked)[:-1]:
        mask = info["action_mask"]
        assert mask[0]
        assert mask[1:].any(), "a step is only made when some tier is offered"
        assert env.observation_space.contains(obs)


def test_steps_are_only_real_choices():
    env = gym.make("DallySmall-v0").unwrapped
    obs, info = env.reset(seed=0)
    while not env._done:
        offer = env.offer
        assert offer.best_tier != offer.best_possible_tier
        env.step(0)


def test_invalid_action_is_treated_as_wait_and_flagged():
    env = gym.make("DallySmall-v0")
    obs, info = env.reset(seed=0)
    mask = info["action_mask"]
    invalid = int(np.flatnonzero(~mask)[0])
    job = info["job_id"]
    with pytest.warns(InvalidActionWarning):
        _, _, _, _, info2 = env.step(invalid)
    assert info2["invalid_action"] is True
    assert env.unwrapped.engine.state[env.unwrapped.engine.job_id.tolist().index(job)] != 2  # not started
    strict = gym.make("DallySmall-v0", strict=True)
    _, info = strict.reset(seed=0)
    with pytest.raises(ValueError, match="not offered"):
        strict.step(int(np.flatnonzero(~info["action_mask"])[0]))


def step_warnings(env, action) -> tuple[list, tuple]:
    """The InvalidActionWarnings of one step (every warning shown, none deduplicated), and the
    step's result."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = env.step(action)
    return [w for w in caught if issubclass(w.category, InvalidActionWarning)], result


def test_the_first_invalid_action_of_an_environment_warns_and_later_ones_do_not():
    env = gym.make("DallySmall-v0")
    _, info = env.reset(seed=0)
    not_offered = int(np.flatnonzero(~info["action_mask"])[0])
    caught, _ = step_warnings(env, not_offered)
    assert len(caught) == 1
    message = str(caught[0].message)
    for words in (
        "DallySmall-v0",
        f"action {not_offered}",
        "invalid under the action mask",
        "0 (wait)",
        "MaskablePPO",
        "action_masks()",
    ):
        assert words in message
    assert caught[0].filename == __file__  # it points at the call of step
    assert issubclass(InvalidActionWarning, UserWarning) and dallygym.InvalidActionWarning is InvalidActionWarning
    for action in (7, -1, 1.0, None):  # later invalid actions of the instance are silent, after a reset too
        if env.unwrapped.offer is None:  # (waiting may end the episode)
            break
        caught, (_, _, _, _, info) = step_warnings(env, action)
        assert not caught and info["invalid_action"] is True
    env.reset(seed=1)
    assert not step_warnings(env, 7)[0]
    fresh = gym.make("DallySmall-v0")  # a new instance warns again
    fresh.reset(seed=0)
    assert len(step_warnings(fresh, 7)[0]) == 1


def test_an_invalid_action_warns_but_steps_exactly_as_wait():
    warned, waited = gym.make("DallySmall-v0"), gym.make("DallySmall-v0")
    _, info = warned.reset(seed=3)
    waited.reset(seed=3)
    not_offered = int(np.flatnonzero(~info["action_mask"])[0])
    with pytest.warns(InvalidActionWarning):
        obs, reward, terminated, truncated, info = warned.step(not_offered)
    obs0, reward0, terminated0, truncated0, info0 = waited.step(0)
    assert np.array_equal(obs, obs0) and reward == reward0 and (terminated, truncated) == (terminated0, truncated0)
    assert info.pop("invalid_action") is True and info0.pop("invalid_action") is False
    assert info.keys() == info0.keys() and all(np.array_equal(info[k], info0[k]) for k in info)


@pytest.mark.parametrize("env_id", ["DallySmall-v0", "DallyQueueSmall-v0"])
def test_valid_actions_never_warn_and_strict_raises_without_warning(env_id):
    with warnings.catch_warnings():
        warnings.simplefilter("error", InvalidActionWarning)
        steps = play(gym.make(env_id), 5, random_masked)
        assert not any(info["invalid_action"] for _, _, _, info in steps)
        strict = gym.make(env_id, strict=True)
        strict.reset(seed=0)
        with pytest.raises(ValueError):
            strict.step(strict.action_space.n + 1)


@pytest.mark.filterwarnings("ignore::dallygym.envs.offer.InvalidActionWarning")
def test_unmasked_random_actions_never_raise():
    env = gym.make("DallySmall-v0")
    steps = play(env, 3, lambda rng, mask: int(rng.integers(-2, 6)))
    assert steps[-1][2] is True


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_masked_episodes_keep_engine_invariants(seed):
    env = gym.make("DallySmall-v0")
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    info = {"action_mask": env.unwrapped.action_masks()}
    done = env.unwrapped._done
    while not done:
        check_holdings(env.unwrapped.engine)
        _, _, terminated, truncated, info = env.step(random_masked(rng, info["action_mask"]))
        done = terminated or truncated
    engine = env.unwrapped.engine
    assert np.array_equal(engine.done_iters, engine.total_iterations)
    jobs = dallygym.collect(engine).jobs
    assert (jobs["jct_s"] >= jobs["ideal_s"]).all()  # exactly: no tolerance


def test_same_seed_same_actions_identical_episode():
    a = play(gym.make("DallySmall-v0"), 7, random_masked)
    b = play(gym.make("DallySmall-v0"), 7, random_masked)
    assert len(a) == len(b)
    for (oa, ra, ta, ia), (ob, rb, tb, ib) in zip(a, b):
        assert np.array_equal(oa, ob) and ra == rb and ta == tb
        assert ia.keys() == ib.keys()
        for key in ia:
            if isinstance(ia[key], np.ndarray):
                assert np.array_equal(ia[key], ib[key])
            else:
                assert ia[key] == ib[key], key


def test_a_fixed_trace_is_read_once_and_every_episode_is_as_from_a_fresh_env():
    """A fixed trace's columns (and the observation's static job features) are made once for
    every reset; the third episode of one environment is the first of a fresh one with the
    same seed, step for step."""
    env = gym.make("DallySmall-v0", trace="small")
    play(env, 3, random_masked)
    arrival = env.unwrapped.engine.arrival_s
    static = env.unwrapped._observer.job_static
    play(env, 4, random_masked)
    assert env.unwrapped.engine.arrival_s is arrival and env.unwrapped._observer.job_static is static
    again = play(env, 5, random_masked)
    fresh = play(gym.make("DallySmall-v0", trace="small"), 5, random_masked)
    assert len(again) == len(fresh)
    for (oa, ra, ta, ia), (ob, rb, tb, ib) in zip(again, fresh):
        assert np.array_equal(oa, ob) and ra == rb and ta == tb and ia.keys() == ib.keys()


@pytest.mark.parametrize("reward, key", [("jct", "jct_mean_s"), ("makespan", "makespan_s"), ("comm", "comm_mean_s")])
def test_episode_return_is_the_documented_metric(reward, key):
    env = gym.make("DallySmall-v0", reward=reward)
    episode = play(env, 0, random_masked)
    ret = sum(r for _, r, _, _ in episode)
    summary = episode[-1][3]["summary"]
    jobs = summary["jobs"]
    expected = {
        "jct": -summary["jct_mean_s"] / 3600,
        "makespan": -summary["makespan_s"] / 3600 / jobs,
        "comm": -summary["comm_mean_s"] / 3600,
    }[reward]
    assert ret == pytest.approx(expected, rel=1e-9)
    assert all(isinstance(r, float) for _, r, _, _ in episode)


def test_final_info_has_the_simulate_summary_keys():
    episode = play(gym.make("DallySmall-v0"), 0, random_masked)
    summary = episode[-1][3]["summary"]
    assert set(dallygym.SUMMARY_KEYS) <= set(summary)


@pytest.mark.parametrize("variant", EQUIVALENT)
def test_dally_through_env_equals_native_run_small(variant):
    env = gym.make("DallySmall-v0", trace="small", priority=variant)
    native = simulate("small", ClusterSpec(2, 2, 8), policy=variant)
    assert evaluate(env, heuristic_agent(variant, env)) == native.summary


@pytest.mark.slow
@pytest.mark.parametrize("variant", EQUIVALENT)
def test_dally_through_env_equals_native_run_batch_500_two_racks(variant):
    env = gym.make("Dally-v0", racks=2, trace="batch-500", priority=variant)
    native = simulate("batch-500", 2, policy=variant)
    assert evaluate(env, heuristic_agent(variant, env)) == native.summary


def test_dally_agent_under_default_priority_equals_native_dally():
    env = gym.make("DallySmall-v0", trace="small")  # default priority is dally
    native = simulate("small", ClusterSpec(2, 2, 8), policy="dally").summary
    assert evaluate(env, heuristic_agent("dally", env)) == native


@pytest.mark.parametrize("mode", ["hidden", "observed", "oracle"])
def test_sensitivity_modes_fill_speed_features_as_documented(mode):
    env = gym.make("DallySmall-v0", trace="small", sensitivity=mode)
    speeds = OBS_FEATURES.index("speed_machine")
    episode = play(env, 0, random_masked)
    values = np.array([obs[speeds : speeds + 3] for obs, _, _, _ in episode[:-1]])
    if mode == "hidden":
        assert not values.any()
    else:
        assert values.any() and (values <= 1).all()
    if mode == "oracle":
        # Every offered tier has a positive speed factor; tiers not offered show 0.
        masks = np.array([info["action_mask"][1:] for _, _, _, info in episode[:-1]])
        assert ((values > 0) == masks).all()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_registered_ids_draw_a_fresh_seeded_trace_per_reset(env_id):
    env = gym.make(env_id)
    env.reset(seed=0)
    first = env.unwrapped.engine.arrival_s.copy(), env.unwrapped.engine.total_iterations.copy()
    env.reset(seed=1)
    assert not np.array_equal(first[1], env.unwrapped.engine.total_iterations)
    env.reset(seed=0)
    assert np.array_equal(first[0], env.unwrapped.engine.arrival_s)
    assert np.array_equal(first[1], env.unwrapped.engine.total_iterations)


def test_trace_per_reset_generator_and_cycled_list():
    gen = gym.make("DallySmall-v0", trace="gen:small")
    gen.reset(seed=0)
    first = gen.unwrapped.engine.arrival_s.copy()
    gen.reset()
    assert not np.array_equal(first, gen.unwrapped.engine.arrival_s)  # a fresh draw
    gen.reset(seed=0)
    assert np.array_equal(first, gen.unwrapped.engine.arrival_s)  # seeded
    cyc = gym.make("DallySmall-v0", trace=["small", "gen:small"])
    cyc.reset(seed=0)
    n_small = cyc.unwrapped.engine.n
    assert n_small == 60
    cyc.reset()
    cyc.reset()
    assert cyc.unwrapped.engine.n == n_small  # back to the first trace


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"reward": "x"}, "reward"),
        ({"sensitivity": "x"}, "sensitivity"),
        ({"priority": "nope"}, "nope"),
        ({"trace": "gen:nope"}, "nope"),
        ({"racks": 0}, "racks"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, word):
    with pytest.raises(Exception, match=word):
        gym.make("DallySmall-v0", **kwargs)


def test_render_modes():
    env = gym.make("DallySmall-v0", render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert "rack  0" in text and "offer: job" in text
    env = gym.make("DallySmall-v0", render_mode="rgb_array")
    env.reset(seed=0)
    image = env.render()
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    from dallygym.envs.render import TIER_RGB

    used = (image == np.array(TIER_RGB[0], dtype=np.uint8)).all(axis=2).sum()
    assert used > 0  # some GPU is held by a machine-tier job


@pytest.mark.parametrize("env_id, racks", [("DallySmall-v0", 2), ("Dally-v0", 8), ("Dally-v0", 16)])
def test_rgb_frames_are_legible_video_frames_with_status_and_legend(env_id, racks):
    from dallygym.envs.render import FREE_RGB, TIER_RGB, _text

    env = gym.make(env_id, racks=racks, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    height, width, _ = frame.shape
    assert width >= 960 and height >= 150 and width % 16 == 0 and height % 16 == 0
    colours = {tuple(c) for c in frame.reshape(-1, 3).tolist()}
    assert {FREE_RGB, *TIER_RGB} <= colours  # every legend swatch is drawn
    # The status lines are the frame's first rows: time, queue, the offer and its tiers.
    base = env.unwrapped
    expected = np.full_like(frame[:48], 250)
    _text(expected, 10, 10, f"t = {base.engine.now_s / 3600:,.2f} h")
    assert np.array_equal(frame[10:24, 10 : 10 + 12 * 11], expected[10:24, 10 : 10 + 12 * 11])
    offer = base.offer
    line = f"offer: job {offer.job_id}, {offer.num_gpus} GPUs"
    _text(expected, 10, 28, line)
    assert np.array_equal(frame[28:42, 10 : 10 + 12 * len(line)], expected[28:42, 10 : 10 + 12 * len(line)])
    # A later offer draws a different frame of the same size.
    env.step(0)
    later = env.render()
    assert later.shape == frame.shape and not np.array_equal(later, frame)


def test_async_vector_env_runs():
    envs = gym.vector.AsyncVectorEnv([lambda: gym.make("DallySmall-v0") for _ in range(2)])
    obs, infos = envs.reset(seed=0)
    assert obs.shape == (2, OBS_DIM)
    for _ in range(20):
        obs, rewards, terminated, truncated, infos = envs.step(np.zeros(2, dtype=np.int64))
    envs.close()


@pytest.mark.slow
def test_maskable_ppo_learns_a_few_thousand_steps_without_error():
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = gym.make("DallySmall-v0", trace="gen:small")
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=256, batch_size=64, seed=0, verbose=0, device="cpu")
    model.learn(total_timesteps=2048)
    obs, info = env.reset(seed=1)
    action, _ = model.predict(obs, action_masks=info["action_mask"], deterministic=True)
    assert info["action_mask"][int(action)]


def test_episode_without_any_real_choice_ends_at_the_first_step():
    # Seed 4 of the small generator gives a trace whose every offer is at its best tier.
    env = gym.make("DallySmall-v0", trace="gen:small", reward="jct")
    obs, info = env.reset(seed=4)
    assert env.unwrapped._done and info["action_mask"].tolist() == [True, False, False, False]
    obs, reward, terminated, truncated, info = env.step(0)
    assert terminated and not truncated and "summary" in info
    assert reward == pytest.approx(-info["summary"]["jct_mean_s"] / 3600)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)


# ---------------------------------------------------------------- hardening: actions, options, masks

NOT_ACTIONS = [
    None,
    float("nan"),
    1.7,
    1.0,
    np.float64(1.0),
    "abc",
    "1",
    b"1",
    [1],
    (1,),
    np.array([2]),
    np.array([[1]]),
    np.array(1.0),
    True,
    np.bool_(True),
    {1: 1},
    2**70,
    -1,
    4,
    np.int64(-3),
]


def _first_choice(**kwargs):
    env = gym.make("DallySmall-v0", **kwargs)
    _, info = env.reset(seed=0)
    return env, info


@pytest.mark.parametrize("action", NOT_ACTIONS, ids=[repr(a) for a in NOT_ACTIONS])
def test_anything_but_an_integer_in_range_is_flagged_invalid_and_waits(action):
    env, info = _first_choice()
    job = info["job_id"]
    with pytest.warns(InvalidActionWarning):
        _, _, _, _, after = env.step(action)
    assert after["invalid_action"] is True
    engine = env.unwrapped.engine
    assert engine.state[engine.job_id.tolist().index(job)] != 2  # not started
    # Treated as wait: the same run as an explicit wait.
    twin, _ = _first_choice()
    _, _, _, _, waited = twin.step(0)
    assert after["time_s"] == waited["time_s"] and after.get("job_id") == waited.get("job_id")


@pytest.mark.parametrize("action", NOT_ACTIONS, ids=[repr(a) for a in NOT_ACTIONS])
def test_strict_mode_raises_value_error_naming_the_action(action):
    env, _ = _first_choice(strict=True)
    with pytest.raises(ValueError, match="action") as info:
        env.step(action)
    assert repr(action)[:20] in str(info.value)


@pytest.mark.parametrize(
    "make",
    [int, np.int64, np.uint8, np.int32, lambda a: np.array(a), lambda a: np.array(a, dtype=np.int16)],
    ids=["int", "int64", "uint8", "int32", "0-d-array", "0-d-int16"],
)
def test_integer_actions_of_any_integer_type_are_accepted(make):
    env, info = _first_choice(strict=True)
    accept = int(np.flatnonzero(info["action_mask"])[-1])
    _, _, _, _, after = env.step(make(accept))
    assert after["invalid_action"] is False
    twin, _ = _first_choice(strict=True)
    _, _, _, _, same = twin.step(accept)
    assert after["time_s"] == same["time_s"] and after.get("job_id") == same.get("job_id")


@pytest.mark.parametrize(
    "options, error",
    [
        ("bad", TypeError),
        ([("a", 1)], TypeError),
        (3, TypeError),
        ({"trace": "small"}, ValueError),
        ({"seed": 1}, ValueError),
    ],
)
def test_bad_reset_options_raise_naming_them(options, error):
    env = gym.make("DallySmall-v0")
    with pytest.raises(error, match="options"):
        env.reset(seed=0, options=options)


def test_empty_or_no_reset_options_are_fine():
    env = gym.make("DallySmall-v0")
    a, _ = env.reset(seed=0, options={})
    b, _ = env.reset(seed=0, options=None)
    assert np.array_equal(a, b)


def test_masks_are_reachable_through_standard_wrappers():
    from gymnasium.wrappers import NormalizeObservation, RecordEpisodeStatistics

    env = RecordEpisodeStatistics(NormalizeObservation(gym.make("DallySmall-v0")))
    _, info = env.reset(seed=0)
    mask = env.get_wrapper_attr("action_masks")()
    assert mask.dtype == bool and np.array_equal(mask, info["action_mask"])
    assert env.has_wrapper_attr("action_masks")


def test_sb3_contrib_finds_masks_through_wrappers_and_vector_envs():
    pytest.importorskip("sb3_contrib")
    from gymnasium.wrappers import NormalizeObservation
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = Monitor(NormalizeObservation(gym.make("DallySmall-v0")))
    assert is_masking_supported(env)
    _, info = env.reset(seed=0)
    assert np.array_equal(get_action_masks(env), info["action_mask"])
    venv = DummyVecEnv([lambda: Monitor(NormalizeObservation(gym.make("DallySmall-v0")))] * 2)
    venv.seed(0)
    venv.reset()
    masks = get_action_masks(venv)
    assert masks.shape == (2, 4) and masks[:, 0].all()


def test_gymnasium_vector_env_gives_every_mask():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("DallySmall-v0")] * 2)
    _, infos = envs.reset(seed=0)
    masks = np.stack(envs.call("action_masks"))
    assert np.array_equal(masks, infos["action_mask"])
