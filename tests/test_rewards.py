"""The "relative-jct" reward: job-seconds relative to a reference run, makespan as a constraint.

Hand-worked cases on one-GPU and two-machine clusters (speed factor 1 on one machine, 1/2
across machines: see conftest.TierLatency), where the reference run (the offer rule's native
run) and the agent's run can be worked out on paper, then the properties every episode has.
"""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import TierLatency, make_trace

import dallygym
from dallygym import heuristic_agent
from dallygym.envs.offer import MAKESPAN_PENALTY, RELATIVE_JCT, DallyEnv, ReferenceRun
from dallygym.envs.queue import DallyQueueEnv, protected_share_action

ENV_IDS = ["Dally-v0", "DallyQueue-v0", "DallySmall-v0", "DallyQueueSmall-v0"]


def one_gpu_queue(rows, **kwargs) -> DallyQueueEnv:
    """DallyQueue on a single GPU, lease 10^6 s (no round boundary in these traces)."""
    return DallyQueueEnv(
        racks=1,
        machines_per_rack=1,
        gpus_per_machine=1,
        trace=make_trace(rows),
        latency=TierLatency(),
        lease_s=1e6,
        max_candidates=4,
        **kwargs,
    )


def play(env, actions) -> list[float]:
    """The rewards of one episode (seed 0) answered with ``actions`` in turn."""
    env.reset(seed=0)
    rewards = []
    for action in actions:
        _, reward, terminated, truncated, _ = env.step(action)
        rewards.append(reward)
        if terminated:
            return rewards
    raise AssertionError("the episode had more decisions than actions given")


def play_with(env, choose, seed: int) -> tuple[list[float], dict]:
    """The rewards and final info of one episode; ``choose(obs, info)`` gives each action."""
    obs, info = env.reset(seed=seed)
    rewards = []
    terminated = truncated = False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(choose(obs, info))
        rewards.append(reward)
    return rewards, info


def random_choice(seed: int):
    rng = np.random.default_rng(seed)
    return lambda obs, info: int(rng.choice(np.flatnonzero(info["action_mask"])))


# --- defaults -------------------------------------------------------------------------------------


def test_relative_jct_is_the_default_of_every_registered_id():
    for env_id in ENV_IDS:
        env = gym.make(env_id).unwrapped
        assert env.reward_kind == RELATIVE_JCT and env.makespan_penalty == MAKESPAN_PENALTY == 3.0


def test_makespan_penalty_is_checked():
    with pytest.raises(ValueError, match="makespan_penalty"):
        DallyQueueEnv(makespan_penalty=-1.0)
    with pytest.raises(TypeError, match="makespan_penalty"):
        DallyEnv(makespan_penalty="10")


# --- hand-worked: DallyQueue ----------------------------------------------------------------------

# One GPU. Jobs 0 (100 s) and 1 (10 s) arrive at 0; jobs 2 and 3 (10 s each) at 50.
#
# Reference (the offer rule's order, Nw_sens ties broken by arrival then id): job 0 runs 0-100;
# at 100 jobs 1, 2, 3 wait (a pick), job 1 runs 100-110; at 110 jobs 2, 3 (a pick), 2 runs
# 110-120 and 3 120-130. JCTs 100, 110, 70, 80: total 360 job-seconds, makespan 130. Jobs in
# the system: 2 on [0, 50), 4 on [50, 100), 3 on [100, 110), 2 on [110, 120), 1 on [120, 130),
# so the reference's job-seconds by time t are R(100) = 300, R(110) = 330, R(130) = 360.
#
# The default scale is percent of the reference's total JCT: one unit of return = 3.6 job-s.
FOUR_JOBS = [(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0), (2, 50, 1, 10, 1.0), (3, 50, 1, 10, 1.0)]


def test_the_reference_run_and_its_curve_as_worked_out():
    env = one_gpu_queue(FOUR_JOBS)
    env.reset(seed=0)
    ref = env.reference_run
    assert isinstance(ref, ReferenceRun)
    assert ref.area_s == 360.0 and ref.makespan_s == 130.0 and ref.n == 4
    for t, area in ((0, 0), (25, 50), (50, 100), (100, 300), (110, 330), (125, 355), (130, 360), (500, 360)):
        assert ref.area_until(t) == pytest.approx(area, abs=1e-9)


def test_reproducing_the_reference_pays_nothing_at_any_step():
    # Action 0 is the offer rule's first candidate: three picks (at 0, 100, 110), each reward 0.
    rewards = play(one_gpu_queue(FOUR_JOBS), [0, 0, 0])
    assert len(rewards) == 3
    assert rewards == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)


def test_serving_the_short_job_first_is_paid_as_it_happens():
    # Job 1 first: it runs 0-10, job 0 10-110 (alone: no pick), jobs 2, 3 wait from 50; the next
    # pick is at 110. The agent's job-seconds by then: 2 x 10 + 1 x 40 + 3 x 60 = 240; the
    # reference's, R(110) = 330. Step 1 pays -(240 - 330) / 3.6 = +25. Then job 2 runs 110-120
    # and 3 120-130, as in the reference from 110 on (both have 30 job-seconds left to accrue):
    # the final step pays 0. JCTs 10, 110, 70, 80: total 270; return -(270 - 360) / 3.6 = +25.
    env = one_gpu_queue(FOUR_JOBS)
    rewards = play(env, [1, 0])
    assert rewards == pytest.approx([25.0, 0.0], abs=1e-9)
    assert sum(rewards) == pytest.approx(-100 * (270 - 360) / 360, abs=1e-9)


def test_the_final_step_carries_only_the_remainder_the_earlier_actions_determined():
    # The reference's picks at 0 and 100, then job 3 before job 2 at 110: same JCT total (both
    # 10 s), so every step, the last included, pays 0 ...
    assert play(one_gpu_queue(FOUR_JOBS), [0, 0, 1]) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)
    # ... and job 2 first at 100 (job 1 waits): 2 runs 100-110, then at 110 the pick of 1 or 3.
    # Steps 1 and 2 accrue what the reference does (R(100) = 300, R(110) = 330: the same jobs
    # are in the system). Serving 1 then 3: JCTs 100, 120, 60, 80 = 360, the reference's total:
    # the last step pays 0 again. Serving 3 then 1: JCTs 100, 130, 60, 70 = 360 as well.
    assert play(one_gpu_queue(FOUR_JOBS), [0, 1, 0]) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)
    assert play(one_gpu_queue(FOUR_JOBS), [0, 1, 1]) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)
    # With job 3 three times as long (30 s), the last pick matters. Reference: 2 runs 110-120,
    # 3 120-150: JCTs 100, 110, 70, 100 = 380, makespan 150. Job 3 first at 110: 3 runs 110-140,
    # 2 140-150: JCTs 100, 110, 100, 90 = 400, makespan 150. The first two steps pay 0 (the
    # runs are the same up to 110), the last one what the last pick caused: -20 / 3.8.
    rows = FOUR_JOBS[:3] + [(3, 50, 1, 30, 1.0)]
    assert play(one_gpu_queue(rows), [0, 0, 1]) == pytest.approx([0.0, 0.0, -100 * 20 / 380], abs=1e-9)
    assert play(one_gpu_queue(rows), [0, 0, 0]) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)


# Two GPUs on one machine. Job 0 (30 s) arrives at 0 and starts; jobs 1 (100 s) and 2 (10 s)
# arrive at 10 with one GPU free: the one pick.
# Reference (job 1 first): 1 runs 10-110, 2 waits for job 0's GPU and runs 30-40. JCTs 30,
# 100, 30: total 160 job-seconds; makespan 110.
THREE_JOBS = [(0, 0, 1, 30, 1.0), (1, 10, 1, 100, 1.0), (2, 10, 1, 10, 1.0)]


def two_gpu_queue(**kwargs) -> DallyQueueEnv:
    return DallyQueueEnv(
        racks=1,
        machines_per_rack=1,
        gpus_per_machine=2,
        trace=make_trace(THREE_JOBS),
        latency=TierLatency(),
        lease_s=1e6,
        max_candidates=4,
        **kwargs,
    )


def test_the_makespan_penalty_is_zero_within_the_reference_makespan_and_positive_beyond():
    env = two_gpu_queue()
    env.reset(seed=0)
    assert [int(env.engine.job_id[j]) for j in env.pick.candidates] == [1, 2]
    assert env.reference_run.area_s == 160.0 and env.reference_run.makespan_s == 110.0
    # Action 0 is the reference: return 0.
    assert play(env, [0]) == [0.0]
    # Job 2 first: it runs 10-20, job 1 20-120. JCTs 30, 110, 10: total 150, 10 job-s better
    # (+6.25 % of 160); makespan 120, 10 s over 110: penalty x 100 x 10/110 charged.
    for penalty in (0.0, 1.0, MAKESPAN_PENALTY, 10.0):
        (reward,) = play(two_gpu_queue(makespan_penalty=penalty), [1])
        assert reward == pytest.approx(6.25 - penalty * 100 * 10 / 110, abs=1e-9)
    # Stop: both wait for job 0's GPU and start at 30 (1 30-130, 2 30-40). JCTs 30, 120, 30:
    # total 180 (-12.5 %); makespan 130, 20 s over (the default penalty, 3: 3 x 100 x 20/110).
    (reward,) = play(two_gpu_queue(), [4])
    assert reward == pytest.approx(-12.5 - 3.0 * 100 * 20 / 110, abs=1e-9)


def test_the_short_job_first_on_one_gpu():
    # One GPU, jobs 0 (100 s) and 1 (10 s) at 0: the makespan is 110 in either order (a shorter
    # makespan than the reference's earns no bonus: see the Dally-v0 case below). Job 1 first:
    # JCTs 10, 110 against the reference's 100, 110: -(120 - 210) / 2.1.
    (reward,) = play(one_gpu_queue([(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0)]), [1])
    assert reward == pytest.approx(100 * 90 / 210, abs=1e-9)


def test_reward_scale_s_makes_the_units_seconds_of_mean_jct_and_makespan():
    # As above (job 2 first): -(mean JCT excess + 3 x makespan excess) / reward_scale_s
    # = -((150 - 160) / 3 + 3 x 10) / 5.
    (reward,) = play(two_gpu_queue(reward_scale_s=5.0), [1])
    assert reward == pytest.approx(-((150 - 160) / 3 + 3 * 10) / 5, abs=1e-9)


# --- hand-worked: Dally-v0 ------------------------------------------------------------------------


# Two machines of two GPUs. Job 0 (1 GPU, 100 s) and job 1 (1 GPU, 5 s) start at 0 on one
# machine; job 2 (1 GPU, 100 s) arrives at 1 and takes the other. At 5 job 1 ends: one GPU is
# free on each machine. Job 3 (2 GPUs, `iters` iterations of 1 s) arrives at 6: it fits one
# rack, not one machine -- an offer where waiting is a real choice. Dally's timers make it
# wait (the reference) until job 0 frees its machine at 100; accepting runs it across two
# machines at half speed from 6.
def offer_env(iters: int, **kwargs) -> DallyEnv:
    rows = [(0, 0, 1, 100, 1.0), (1, 0, 1, 5, 1.0), (2, 1, 1, 100, 1.0), (3, 6, 2, iters, 1.0)]
    return DallyEnv(
        racks=1,
        machines_per_rack=2,
        gpus_per_machine=2,
        trace=make_trace(rows),
        latency=TierLatency(),
        lease_s=1e6,
        reward="relative-jct",
        **kwargs,
    )


def test_dally_v0_accepting_the_worse_tier_early_is_credited():
    # 10 iterations. Reference: job 3 waits, runs 100-110: JCTs 100, 5, 100, 104 = 309, makespan
    # 110. Accepting at the rack tier: 6-26, JCT 20: total 225, makespan 101 (job 2's end), under
    # 110 (no penalty, no bonus). Return -(225 - 309) / 3.09 = +27.18.
    env = offer_env(10)
    env.reset(seed=0)
    assert env.offer.job_id == 3 and env.action_masks().tolist() == [True, False, True, False]
    assert (env.reference_run.area_s, env.reference_run.makespan_s) == (309.0, 110.0)
    assert play(env, [0]) == [0.0]  # waiting, as Dally does
    assert play(env, [2]) == pytest.approx([100 * 84 / 309], abs=1e-9)


def test_dally_v0_the_makespan_penalty_applies_beyond_the_reference_makespan():
    # 200 iterations. Reference: job 3 runs 100-300: JCTs 100, 5, 100, 294 = 499, makespan 300.
    # Accepting at the rack tier: 6-406 (400 s at half speed): total 605, makespan 406, 106 s
    # over. Return -100 x 106/499 - 3 x 100 x 106/300 (the default penalty, 3).
    env = offer_env(200)
    assert play(env, [0]) == [0.0]
    assert play(env, [2]) == pytest.approx([-100 * 106 / 499 - 3 * 100 * 106 / 300], abs=1e-9)
    assert play(offer_env(200, makespan_penalty=0.0), [2]) == pytest.approx([-100 * 106 / 499], abs=1e-9)


# --- every episode --------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["DallySmall-v0", "DallyQueueSmall-v0"])
@pytest.mark.parametrize("seed", [0, 1])
def test_rewards_telescope_to_the_documented_return(env_id, seed):
    """Sum of rewards = -100 x (agent's total JCT - reference's) / reference's total JCT
    - penalty x 100 x max(0, makespan - reference's) / reference's makespan."""
    env = gym.make(env_id).unwrapped
    rewards, info = play_with(env, random_choice(seed), seed)
    ref = env.reference_run
    summary = info["summary"]
    total_jct = summary["jct_mean_s"] * ref.n
    expected = (
        -100 * (total_jct - ref.area_s) / ref.area_s
        - env.makespan_penalty * 100 * max(0.0, summary["makespan_s"] - ref.makespan_s) / ref.makespan_s
    )
    assert sum(rewards) == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert all(type(r) is float for r in rewards)


@pytest.mark.parametrize("env_id", ["DallySmall-v0", "DallyQueueSmall-v0"])
def test_the_reference_policy_through_the_env_scores_zero(env_id):
    env = gym.make(env_id)
    agent = heuristic_agent("dally", env)

    def choose(obs, info):
        return int(agent.predict(obs, deterministic=True, action_masks=info["action_mask"])[0])

    for seed in (0, 3):
        rewards, _ = play_with(env, choose, seed)
        assert len(rewards) > 1
        assert max(abs(r) for r in rewards) < 1e-9 and abs(sum(rewards)) < 1e-9


def test_the_reference_is_the_native_run_of_the_same_trace():
    env = gym.make("DallyQueueSmall-v0", trace="small").unwrapped
    env.reset(seed=0)
    native = dallygym.simulate("small", dallygym.ClusterSpec(2, 2, 8), policy="dally")
    assert env.reference_run.area_s / env.reference_run.n == pytest.approx(native.summary["jct_mean_s"], rel=1e-12)
    assert env.reference_run.makespan_s == pytest.approx(native.summary["makespan_s"], rel=1e-12)
    # Computed once for a fixed trace: the next reset reuses it.
    first = env.reference_run
    env.reset(seed=1)
    assert env.reference_run is first


@pytest.mark.parametrize("env_id", ["DallySmall-v0", "DallyQueueSmall-v0"])
def test_same_seed_same_rewards(env_id):
    runs = [play_with(gym.make(env_id), random_choice(7), 5)[0] for _ in range(2)]
    assert runs[0] == runs[1]
    env = gym.make(env_id)  # and again on one instance, after another episode in between
    first = play_with(env, random_choice(7), 5)[0]
    play_with(env, random_choice(8), 6)
    assert play_with(env, random_choice(7), 5)[0] == first


def test_the_protected_order_beats_the_reference_on_a_small_trace():
    env = gym.make("DallyQueueSmall-v0")
    rewards, _ = play_with(env, lambda obs, info: protected_share_action(obs, info["action_mask"]), 0)
    assert sum(rewards) > 0


def test_an_episode_without_a_decision_pays_nothing():
    # Seed 4 of the small generator: every offer is at its best tier, so the run is the
    # reference's and the one (terminal) step pays exactly 0 -- no action-independent lump.
    env = gym.make("DallySmall-v0", trace="gen:small")
    env.reset(seed=4)
    assert env.unwrapped._done
    _, reward, terminated, _, _ = env.step(0)
    assert terminated and reward == 0.0


def test_the_old_rewards_have_no_reference_run():
    env = gym.make("DallyQueueSmall-v0", reward="jct-makespan").unwrapped
    env.reset(seed=0)
    assert env.reference_run is None


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.filterwarnings("ignore::dallygym.envs.offer.InvalidActionWarning")  # (the checkers send random actions)
def test_gymnasium_env_checker_passes_with_the_default_reward(env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.filterwarnings("ignore::dallygym.envs.offer.InvalidActionWarning")  # (the checkers send random actions)
def test_stable_baselines3_env_checker_passes_with_the_default_reward(env_id):
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    sb3_checker.check_env(gym.make(env_id), warn=True)


# --- makespan_reference ---------------------------------------------------------------------------


def test_makespan_reference_moves_the_limit_to_another_policys_native_makespan():
    env = gym.make("DallySmall-v0", trace="small", makespan_reference="dally-consolidated").unwrapped
    rewards, info = play_with(env, random_choice(2), 2)
    ref = env.reference_run
    other = dallygym.simulate("small", dallygym.ClusterSpec(2, 2, 8), policy="dally-consolidated").summary
    assert env.makespan_limit_s == pytest.approx(other["makespan_s"], rel=1e-12)
    summary = info["summary"]
    expected = (
        -100 * (summary["jct_mean_s"] * ref.n - ref.area_s) / ref.area_s
        - env.makespan_penalty * 100 * max(0.0, summary["makespan_s"] - env.makespan_limit_s) / env.makespan_limit_s
    )
    assert sum(rewards) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_makespan_reference_of_the_reference_policy_changes_nothing():
    plain, _ = play_with(gym.make("DallySmall-v0").unwrapped, random_choice(4), 4)
    same, _ = play_with(gym.make("DallySmall-v0", makespan_reference="dally").unwrapped, random_choice(4), 4)
    assert same == plain
    env = gym.make("DallySmall-v0").unwrapped
    env.reset(seed=0)
    assert env.makespan_limit_s == env.reference_run.makespan_s


def test_makespan_reference_is_checked():
    with pytest.raises(ValueError, match="nosuch"):
        gym.make("DallySmall-v0", makespan_reference="nosuch")
    with pytest.raises(TypeError, match="makespan_reference"):
        gym.make("DallySmall-v0", makespan_reference=3)


# --- when the makespan excess is charged (DallyQueue makespan_credit) -----------------------------

# THREE_JOBS plus job 3 (10 s) arriving at 15. Reference (job 1 first at 10): 1 runs 10-110,
# at 30 job 0's GPU frees and 2 (then 3) run 30-40, 40-50. JCTs 30, 100, 30, 35: 195; makespan
# 110. Job 2 first at 10: it runs 10-20; at 20 its GPU frees with 1 and 3 waiting (the second
# pick). Up to 20 both runs hold the same jobs (45 job-seconds), so the first step's JCT part is
# 0; but job 1 cannot end before 20 + 100 = 120: the makespan bound is 10 s over 110.
FOUR_ON_TWO = THREE_JOBS + [(3, 15, 1, 10, 1.0)]


def four_on_two(**kwargs) -> DallyQueueEnv:
    return DallyQueueEnv(
        racks=1,
        machines_per_rack=1,
        gpus_per_machine=2,
        trace=make_trace(FOUR_ON_TWO),
        latency=TierLatency(),
        lease_s=1e6,
        max_candidates=4,
        **kwargs,
    )


def test_bound_credit_charges_the_makespan_excess_at_the_pick_that_causes_it():
    over = 3.0 * 100 * 10 / 110
    env = four_on_two()
    env.reset(seed=0)
    assert env.reference_run.area_s == 195.0 and env.reference_run.makespan_s == 110.0
    assert env.makespan_credit == "bound"  # the default
    # Then job 1 (action 0): 1 runs 20-120, 3 waits for job 0's GPU and runs 30-40. JCTs 30, 110,
    # 10, 25: 175 (20 job-s better: +100 x 20/195); makespan 120, the excess charged at step 1.
    rewards = play(env, [1, 0])
    assert rewards == pytest.approx([-over, 100 * 20 / 195], abs=1e-9)
    # With elapsed credit the same return, the excess paid only at the end.
    rewards = play(four_on_two(makespan_credit="elapsed"), [1, 0])
    assert rewards == pytest.approx([0.0, 100 * 20 / 195 - over], abs=1e-9)
    # Job 3 before job 1 at 20: 3 runs 20-30, 1 30-130 (JCTs 30, 120, 10, 15: 175 again), makespan
    # 130: the second step is charged the further 20 - 10 s.
    rewards = play(four_on_two(), [1, 1])
    assert rewards == pytest.approx([-over, 100 * 20 / 195 - over], abs=1e-9)


# --- the end of an episode says how far the makespan went, and the penalty can be moved -----------


def test_the_last_info_gives_the_makespan_limit_and_the_excess_in_percent():
    # Job 2 first: makespan 120 against the reference's 110 (as worked out above): +100 x 10/110 %.
    env = two_gpu_queue()
    env.reset(seed=0)
    *_, terminated, _, info = env.step(1)
    assert terminated and info["makespan_limit_s"] == 110.0
    assert info["makespan_excess_pct"] == pytest.approx(100 * 10 / 110, abs=1e-12)
    # The reference's own order: no excess. Stop: makespan 130, +100 x 20/110 %.
    for action, excess in ((0, 0.0), (4, 100 * 20 / 110)):
        env.reset(seed=0)
        info = env.step(action)[-1]
        assert info["makespan_excess_pct"] == pytest.approx(excess, abs=1e-12)
    # Rewards without a makespan limit do not report one.
    env = two_gpu_queue(reward="jct")
    env.reset(seed=0)
    assert "makespan_excess_pct" not in env.step(1)[-1]


def test_a_new_makespan_penalty_applies_from_the_next_episode():
    env = two_gpu_queue()
    env.reset(seed=0)
    env.set_makespan_penalty(10.0)
    assert env.makespan_penalty == MAKESPAN_PENALTY  # the episode under way keeps its price
    (reward,) = [env.step(1)[1]]
    assert reward == pytest.approx(6.25 - MAKESPAN_PENALTY * 100 * 10 / 110, abs=1e-9)
    assert play(env, [1]) == pytest.approx([6.25 - 10.0 * 100 * 10 / 110], abs=1e-9)
    assert env.makespan_penalty == 10.0
    # A snapshot taken after that reset carries the new penalty.
    env.reset(seed=0)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.makespan_penalty == 10.0
    assert copy.step(1)[1] == pytest.approx(6.25 - 10.0 * 100 * 10 / 110, abs=1e-9)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="makespan_penalty"):
            env.set_makespan_penalty(bad)
    with pytest.raises(TypeError, match="makespan_penalty"):
        env.set_makespan_penalty("3")


def test_a_normalised_penalty_divides_the_return_by_one_plus_the_penalty():
    # Job 2 first, as worked out above: JCT part +6.25, makespan part 100 x 10/110 per unit of penalty.
    env = two_gpu_queue()
    env.set_makespan_penalty(9.0, normalise=True)
    assert play(env, [1]) == pytest.approx([(6.25 - 9.0 * 100 * 10 / 110) / 10.0], abs=1e-9)
    assert env.relative_divisor == 10.0
    env.reset(seed=0)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.relative_divisor == 10.0 and copy.makespan_penalty == 9.0
    assert copy.step(1)[1] == pytest.approx((6.25 - 9.0 * 100 * 10 / 110) / 10.0, abs=1e-9)
    # Without normalise the divisor goes back to 1.
    env.set_makespan_penalty(9.0)
    assert play(env, [1]) == pytest.approx([6.25 - 9.0 * 100 * 10 / 110], abs=1e-9)


# --- limit_features: the observation shows the makespan limit the reward holds the agent to -------


def test_limit_features_show_each_finish_as_a_share_of_the_makespan_limit():
    # At the pick (t = 10) of THREE_JOBS the limit is the reference's makespan, 110. Job 1 (100 s
    # left, never run, one GPU: estimated at speed 1) would end at 10 + 100 = 110, the limit
    # itself (shown 0.5); job 2 at 20. The cluster: 10 s elapsed; the longest estimate of any
    # unfinished job is job 1's 100 (job 0 has 20 s left); the work left is 20 + 100 + 10
    # GPU-seconds on 2 GPUs, 65 s. Shares are shown halved (min(share, 2) / 2).
    env = two_gpu_queue(limit_features=True)
    obs, _ = env.reset(seed=0)
    assert obs["jobs"].shape == (4, 21) and obs["cluster"].shape == (18,)
    assert [int(env.engine.job_id[j]) for j in env.pick.candidates] == [1, 2]
    np.testing.assert_allclose(obs["jobs"][:, 20], [110 / 220, 20 / 220, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(obs["cluster"][15:], [10 / 220, 110 / 220, 75 / 220], rtol=1e-6)
    # The first 20 job and 15 cluster features are the plain observation's.
    plain, _ = two_gpu_queue().reset(seed=0)
    np.testing.assert_array_equal(obs["jobs"][:, :20], plain["jobs"])
    np.testing.assert_array_equal(obs["cluster"][:15], plain["cluster"])
    # The limit exists only under relative-jct.
    with pytest.raises(ValueError, match="limit_features=True shows the makespan limit"):
        two_gpu_queue(limit_features=True, reward="jct")
    with pytest.raises(ValueError, match="limit_features must be True or False"):
        two_gpu_queue(limit_features=1)
