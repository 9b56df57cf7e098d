"""dallygym.envs.lookahead: the planning baseline that tries the base order's first picks on copies.

The hand-built cases run on one machine of 8 GPUs with a lease longer than the run (so no round
boundary asks anything), ``fifo`` offers (the slots in arrival order) and speed 1 on a machine,
so every time below is worked out on paper.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import TierLatency, load_script, make_trace

import dallygym  # noqa: F401 - registers the ids
from dallygym.envs.heuristics import QueueHeuristicAgent, evaluate, heuristic_agent
from dallygym.envs.lookahead import (
    LookaheadAgent,
    _BaseOrder,
    parse_lookahead,
    search_agent,
    spec_label,
    teacher_order,
)
from dallygym.envs.queue import DallyQueueEnv, protected_share_action
from dallygym.sim.trace import generate_trace

HOUR = 3600.0


def one_machine(rows, makespan_penalty: float = 3.0) -> DallyQueueEnv:
    """``DallyQueue`` on one machine of 8 GPUs: ``fifo`` offers, speed 1, a 100-hour lease."""
    return DallyQueueEnv(
        racks=1,
        machines_per_rack=1,
        gpus_per_machine=8,
        trace=make_trace(rows),
        offer_rule="fifo",
        latency=TierLatency(),
        lease_s=100 * HOUR,
        max_candidates=4,
        makespan_penalty=makespan_penalty,
    )


#: Two 8-GPU jobs at time 0: a long one (10 h) first in arrival order, then a short one (1 h).
#: FIFO serves the long one first: JCTs 10 h and 11 h, mean 10.5 h. Serving the short one
#: first: 1 h and 11 h, mean 6 h, the same 11 h makespan. The first pick is the only decision
#: (after it one candidate is left), so one step played on each copy ends the episode and sees
#: the whole difference: a return of 100 x (21 - 12) / 21 = +42.9 against 0.
LONG_THEN_SHORT = [(1, 0, 8, 36000, 1.0), (2, 0, 8, 3600, 1.0)]

#: A 4-GPU job R runs from 0 to 1 h; at 100 s two 4-GPU jobs arrive, L (10 h) then Z (0.5 h),
#: and only one fits. FIFO starts L at 100 s (ends 36,100 s), Z when R ends (3,600-5,400 s):
#: JCTs 3,600 + 36,000 + 5,300 = 44,900 s, makespan 36,100 s, which is the limit (the reference
#: is FIFO's own run). Z first: Z 100-1,900 s, L 1,900-37,900 s: JCTs 3,600 + 1,800 + 37,800 =
#: 43,200 s (3.79 % less) but makespan 37,900 s (4.99 % beyond the limit).
JCT_AGAINST_MAKESPAN = [(1, 0, 4, 3600, 1.0), (2, 100, 4, 36000, 1.0), (3, 100, 4, 1800, 1.0)]


def first_pick(env, agent) -> int:
    obs, info = env.reset(seed=0)
    return int(agent.predict(obs, action_masks=info["action_mask"])[0])


def test_one_step_of_lookahead_serves_the_short_job_first():
    env = one_machine(LONG_THEN_SHORT)
    assert first_pick(env, QueueHeuristicAgent("fifo", env)) == 0  # the base: the long job
    agent = LookaheadAgent(env, top_k=2, horizon=1)
    assert first_pick(env, agent) == 1
    assert agent.cost.copies == 2 and agent.cost.rollout_steps == 2 and agent.cost.changed == 1
    base = evaluate(one_machine(LONG_THEN_SHORT), LookaheadAgent(env, top_k=1))
    searched = evaluate(env, LookaheadAgent(env, top_k=2, horizon=1))
    assert base["jct_mean_s"] == 10.5 * HOUR and searched["jct_mean_s"] == 6 * HOUR
    assert base["makespan_s"] == searched["makespan_s"] == 11 * HOUR


def test_a_rollout_beyond_the_makespan_limit_loses_whatever_its_return():
    # With no makespan penalty Z first has the larger return (+3.79 against 0): taken by the
    # "return" objective, refused by "within-limit" (its makespan exceeds the limit).
    free = one_machine(JCT_AGAINST_MAKESPAN, makespan_penalty=0.0)
    assert first_pick(free, LookaheadAgent(free, top_k=2, horizon=1, objective="return")) == 1
    assert first_pick(free, LookaheadAgent(free, top_k=2, horizon=1)) == 0
    summary = evaluate(free, LookaheadAgent(free, top_k=2, horizon=1, objective="return"))
    assert (summary["jct_mean_s"] * 3, summary["makespan_s"]) == (43200.0, 37900.0)
    # With the default penalty (3 per percent beyond) the return already says no: 3.79 - 14.96.
    priced = one_machine(JCT_AGAINST_MAKESPAN)
    assert first_pick(priced, LookaheadAgent(priced, top_k=2, horizon=1, objective="return")) == 0
    summary = evaluate(priced, LookaheadAgent(priced, top_k=2, horizon=1))
    assert (summary["jct_mean_s"] * 3, summary["makespan_s"]) == (44900.0, 36100.0)


def played(env, agent, seed: int = 3, steps: int | None = None) -> tuple[list[int], list[float], dict]:
    """The actions and rewards of an episode (or its first ``steps``) and its summary (or {})."""
    obs, info = env.reset(seed=seed)
    actions, rewards, done = [], [], env.unwrapped._done
    while not done and (steps is None or len(actions) < steps):
        action = int(agent.predict(obs, action_masks=info["action_mask"])[0])
        obs, reward, done, _, info = env.step(action)
        actions.append(action)
        rewards.append(reward)
    return actions, rewards, info.get("summary", {})


@pytest.mark.parametrize("base", ["offer-rule", "teacher", "smallest-demand-remaining"])
def test_horizon_zero_or_top_one_is_exactly_the_base(base):
    def base_agent(env):
        if base == "offer-rule":
            return heuristic_agent("dally", env)  # the offer rule dally: always slot 0
        if base == "teacher":

            class Teacher:
                def predict(self, obs, state=None, episode_start=None, deterministic=True, action_masks=None):
                    return np.int64(protected_share_action(obs)), state

            return Teacher()
        return heuristic_agent(base, env)

    env = gym.make("DallyQueueSmall-v0")
    reference = played(env, base_agent(env))
    assert reference[2]  # (the whole episode)
    for options in ({"top_k": 1}, {"top_k": 3, "horizon": 0}):
        agent = LookaheadAgent(env, base=base, **options)
        assert played(env, agent) == reference
        assert agent.cost.copies == agent.cost.rollout_steps == agent.cost.changed == 0
        assert agent.cost.decisions == len(reference[0])


def test_the_base_orders_start_with_the_base_answer():
    env = gym.make("DallyQueueSmall-v0")
    obs, info = env.reset(seed=4)
    orders = {base: _BaseOrder(base, env.unwrapped) for base in ("offer-rule", "teacher", "tiresias-las")}
    for _ in range(25):
        valid = np.flatnonzero(info["action_mask"][:-1])
        for base, order in orders.items():
            slots = order.slots(obs)
            assert sorted(slots.tolist()) == valid.tolist(), base
            assert int(slots[0]) == order.first(obs), base
        assert int(teacher_order(obs)[0]) == protected_share_action(obs)
        obs, _, done, _, info = env.step(int(valid[-1]))
        if done:
            break


def test_the_same_seed_gives_the_same_picks():
    runs = []
    for _ in range(2):
        env = gym.make("DallyQueueSmall-v0")
        agent = LookaheadAgent(env, top_k=3, horizon=4)
        runs.append((played(env, agent, seed=7, steps=12), agent.cost.copies, agent.cost.rollout_steps))
    assert runs[0] == runs[1]
    assert runs[0][1] > 0  # (the search ran)


def test_the_search_leaves_the_live_environment_as_it_was():
    env = gym.make("DallyQueueSmall-v0")
    agent = LookaheadAgent(env, top_k=3, horizon=3)
    actions, rewards, _ = played(env, agent, seed=9, steps=12)
    assert agent.cost.changed > 0  # (the search chose otherwise at least once)
    # The same actions on a fresh environment, no search: the same rewards, the same state.
    fresh = gym.make("DallyQueueSmall-v0")
    fresh.reset(seed=9)
    assert [fresh.step(a)[1] for a in actions] == rewards
    live, twin = env.unwrapped, fresh.unwrapped
    assert live.steps == twin.steps and live.engine.now_s == twin.engine.now_s
    assert np.array_equal(live.action_masks(), twin.action_masks())
    assert np.array_equal(live.engine.done_iters, twin.engine.done_iters)
    assert live.np_random.bit_generator.state == twin.np_random.bit_generator.state


def test_a_copy_shares_no_mutable_state_with_the_live_environment():
    import copy

    env = gym.make("DallyQueueSmall-v0")
    env.reset(seed=2)
    live = env.unwrapped
    twin = copy.deepcopy(live)
    for name in ("state", "done_iters", "finish_s", "tier"):
        assert not np.shares_memory(getattr(live.engine, name), getattr(twin.engine, name)), name
    assert not np.shares_memory(live.engine.cluster.owner, twin.engine.cluster.owner)
    assert twin.policy is not live.policy and twin.np_random is not live.np_random
    before = (live.engine.now_s, live.steps, live.engine.done_iters.copy())
    while not twin.step(0)[2]:
        pass
    assert (live.engine.now_s, live.steps) == before[:2] and np.array_equal(live.engine.done_iters, before[2])


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": -2}, "top_k"),
        ({"top_k": 1.5}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"horizon": -1}, "horizon"),
        ({"horizon": 2.0}, "horizon"),
        ({"objective": "jct"}, "objective"),
        ({"base": "nope"}, "base"),
    ],
)
def test_bad_options_raise_naming_the_option(options, named):
    env = gym.make("DallyQueueSmall-v0")
    with pytest.raises(ValueError, match=named):
        LookaheadAgent(env, **options)


def test_an_offer_environment_is_refused_by_its_id():
    with pytest.raises(TypeError, match="DallySmall-v0"):
        LookaheadAgent(gym.make("DallySmall-v0"))


def test_search_agents_by_name_and_spec():
    env = gym.make("DallyQueueSmall-v0")
    default = search_agent("lookahead", env)
    assert (default.top_k, default.horizon, default.base) == (3, 10, "offer-rule")
    agent = search_agent("lookahead:2:end:teacher", env)
    assert (agent.top_k, agent.horizon, agent.base) == (2, None, "teacher")
    assert parse_lookahead("4:0") == {"top_k": 4, "horizon": 0}
    assert spec_label(2, None, "teacher") == "lookahead 2:end:teacher" and spec_label(3, 10) == "lookahead 3:10"
    for bad, named in (("3", "TOPK:HORIZON"), ("x:2", "TOPK"), ("3:soon", "HORIZON"), ("0:3", "top_k")):
        with pytest.raises(ValueError, match=named):
            parse_lookahead(bad)
    with pytest.raises(ValueError, match="unknown search agent 'planner'"):
        search_agent("planner", env)


def test_the_baselines_search_row_is_its_own_kind(capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agents"))
    baselines = load_script("agents/queue_baselines.py", "queue_baselines_lookahead")
    trace = generate_trace("small", seed=11)
    rows = baselines.run_cell(
        ("other", trace, 2), "DallyQueueSmall-v0", (), machines_per_rack=2, policies=("dally",), lookaheads=("2:2",)
    )
    row = next(r for r in rows if r["row"] == "lookahead 2:2")
    assert row["row_kind"] == "search" and row["goal_met"] is None
    assert "lookahead 2:2 on other at 2 racks" in capsys.readouterr().err
