"""DallyQueue-v0: the agent picks which job is served next (SPEC §7b)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from helpers import TierLatency, assert_same_episode, check_holdings, make_trace, play, random_masked
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dallygym
from dallygym import ClusterSpec, evaluate, heuristic_agent, simulate
from dallygym.envs.offer import InvalidActionWarning
from dallygym.envs.queue import CLUSTER_FEATURES, JOB_FEATURES, DallyQueueEnv, protected_share_action
from dallygym.envs.queue_obs import QueueObservation
from dallygym.sim.engine import Engine, EngineConfig, EngineError, Pick
from dallygym.sim.latency import get_latency_model
from dallygym.sim.metrics import collect
from dallygym.sim.policies import POLICIES, make_policy
from dallygym.sim.policies.protected import ProtectedRemainingPolicy
from dallygym.sim.trace import load_trace

QUEUE_IDS = ["DallyQueue-v0", "DallyQueueSmall-v0"]
ORDERS = ["dally", "tiresias", "fifo"]


def one_gpu_env(rows, lease_s=1e6, **kwargs) -> DallyQueueEnv:
    """A single-GPU cluster, speed factor 1: JCTs can be worked out by hand."""
    return DallyQueueEnv(
        racks=1,
        machines_per_rack=1,
        gpus_per_machine=1,
        trace=make_trace(rows),
        latency=TierLatency(),
        lease_s=lease_s,
        max_candidates=4,
        **kwargs,
    )


# --- hand-worked cases ---------------------------------------------------------------------------


def test_choosing_the_short_job_first_halves_its_wait():
    # One GPU; at t=0 job 0 (100 s) and job 1 (10 s) both arrive. Serving 0 first: JCTs 100 and
    # 110, mean 105. Serving 1 first: JCTs 10 and 110, mean 60. Makespan 110 either way. The
    # pass at t=0 is the only one where the order matters (at t=10 or 100 one job is left).
    rows = [(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0)]
    for slot_of, jct_mean in ((0, 105.0), (1, 60.0)):
        env = one_gpu_env(rows, reward="jct")
        obs, info = env.reset(seed=0)
        assert [int(env.engine.job_id[j]) for j in env.pick.candidates] == [0, 1]  # Nw_sens ties: arrival
        assert info["action_mask"].tolist() == [True, True, False, False, False]  # nothing runs: no stop
        _, reward, terminated, _, info = env.step(slot_of)
        assert terminated  # one decision in the whole episode
        assert info["summary"]["jct_mean_s"] == pytest.approx(jct_mean)
        assert info["summary"]["makespan_s"] == pytest.approx(110.0)
        assert reward == pytest.approx(-jct_mean / 1e8)  # the return is -mean JCT / (100 leases)


def test_at_a_boundary_a_waiting_job_served_first_preempts_the_running_one():
    # One GPU, lease 50 s. Job 0 (100 s) starts at 0; job 1 (10 s) arrives at 20 and cannot fit.
    # At the boundary t=50 both are candidates. Dally's order puts job 1 first (Nw_sens 0 < 1):
    # it preempts job 0 and runs 50-60, job 0 resumes 60-110: JCTs 40 and 110, mean 75.
    # Serving job 0 first renews its lease: it ends at 100, job 1 runs 100-110: mean (100+90)/2.
    rows = [(0, 0, 1, 100, 1.0), (1, 20, 1, 10, 1.0)]
    env = one_gpu_env(rows, lease_s=50.0, lease_picks="all")
    _, info = env.reset(seed=0)
    pick = env.pick
    assert pick.boundary and pick.now_s == 50.0
    assert [int(env.engine.job_id[j]) for j in pick.candidates] == [1, 0]
    assert info["action_mask"].tolist() == [True, True, False, False, True]  # stop: job 0 keeps running
    obs = env._observation()
    holds = JOB_FEATURES.index("holds_lease")
    assert obs["jobs"][:2, holds].tolist() == [0.0, 1.0]
    _, _, terminated, _, info = env.step(0)
    assert terminated and info["summary"]["jct_mean_s"] == pytest.approx(75.0)
    assert info["summary"]["preemptions"] == 1
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(1)
    assert terminated and info["summary"]["jct_mean_s"] == pytest.approx(95.0)
    assert info["summary"]["preemptions"] == 0


def test_waiting_picks_serve_the_leases_ranked_ahead_first():
    # The case above with lease_picks="waiting" (the default): at t=50 only job 1 is a candidate;
    # the choice is serving it or stopping. Under Dally's order job 1 ranks ahead of the
    # lease-expired job 0, so serving it claims job 0's GPU (JCTs 40 and 110); stopping keeps job
    # 0 running (JCTs 100 and 90). Under fifo's order job 0 ranks ahead: serving job 1 first
    # renews job 0's lease, and job 1 finds no free GPU and waits (JCTs 100 and 90, no preemption).
    rows = [(0, 0, 1, 100, 1.0), (1, 20, 1, 10, 1.0)]
    env = one_gpu_env(rows, lease_s=50.0)
    _, info = env.reset(seed=0)
    assert env.pick.boundary and [int(env.engine.job_id[j]) for j in env.pick.candidates] == [1]
    assert info["action_mask"].tolist() == [True, False, False, False, True]
    assert env.makespan_bound_s() == pytest.approx(100.0)  # job 0 ends at 100; job 1 could end at 60
    _, _, terminated, _, info = env.step(0)
    assert terminated and info["summary"]["jct_mean_s"] == pytest.approx(75.0)
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(4)
    assert terminated and info["summary"]["jct_mean_s"] == pytest.approx(95.0)
    fifo = one_gpu_env(rows, lease_s=50.0, offer_rule="fifo")
    _, info = fifo.reset(seed=0)
    assert [int(fifo.engine.job_id[j]) for j in fifo.pick.candidates] == [1]
    _, _, terminated, _, info = fifo.step(0)
    assert terminated and info["summary"]["jct_mean_s"] == pytest.approx(95.0)
    assert info["summary"]["preemptions"] == 0


def test_a_guarded_lease_is_renewed_before_any_pick():
    # The case above with guard_leases. At t=50 job 0 has 50 s left (observed Nw_sens 1) and
    # job 1 10 s (never run, one machine: Nw_sens taken as 1), so job 0's estimate_share is 1:
    # with any share its lease is renewed before the pick, job 1 finds no free GPU, and there
    # is no choice left -- the episode ends at reset with job 0's run uninterrupted (JCTs 100
    # and 90). Without the guard, slot 0 preempted job 0 (test above).
    rows = [(0, 0, 1, 100, 1.0), (1, 20, 1, 10, 1.0)]
    for share in (0.5, 1.0):
        env = one_gpu_env(rows, lease_s=50.0, guard_leases=share)
        env.reset(seed=0)
        assert env._done and env.pick is None
        summary = dallygym.sim.metrics.summarize(env.engine)
        assert summary["jct_mean_s"] == pytest.approx(95.0) and summary["preemptions"] == 0


def test_the_guard_flags_leases_by_estimate_share():
    # Two GPUs, lease 50 s: job 0 (100 s) and job 1 (80 s) run from 0; job 2 (10 s) arrives at
    # 20 and waits. At the t=50 boundary job 0 has 50 s left (the largest estimate) and job 1
    # 30 s, a share of 0.6: a guard of 0.5 flags both leases, one of 0.7 only job 0's.
    rows = [(0, 0, 1, 100, 1.0), (1, 0, 1, 80, 1.0), (2, 20, 1, 10, 1.0)]
    for share, flagged in ((0.5, [True, True]), (0.7, [True, False])):
        env = DallyQueueEnv(
            racks=1,
            machines_per_rack=1,
            gpus_per_machine=2,
            trace=make_trace(rows),
            latency=TierLatency(),
            lease_s=50.0,
            max_candidates=4,
            guard_leases=share,
        )
        seen = []
        guard = env._guarded

        def spy(engine, jobs, guard=guard, seen=seen):
            flags = guard(engine, jobs)
            seen.append(([int(engine.job_id[j]) for j in jobs], flags.tolist()))
            return flags

        env._guarded = spy
        env.reset(seed=0)
        assert sorted(zip(*seen[0])) == sorted(zip([0, 1], flagged))


def test_guard_waiting_serves_the_protected_candidate_and_asks_for_the_rest():
    # Two GPUs on one machine, no boundary. At t=0 job 0 (100 s), job 1 (10 s), job 2 (20 s) and
    # job 3 (30 s) arrive, never run, one machine each: their estimates are their lengths, the
    # largest 100. With a guard of 0.5 only job 0 is protected (30 < 50): guard_waiting serves
    # it without asking, and the agent orders 1, 2 and 3 on the other GPU, job 0 still running
    # (at t=10 its 90 s left keep 45 as the bar, above every candidate). Shortest first: JCTs
    # 100, 10, 30, 60 (mean 50); longest first: 100, 60, 50, 30 (mean 60). Makespan 100 both ways.
    rows = [(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0), (2, 0, 1, 20, 1.0), (3, 0, 1, 30, 1.0)]

    def env(**kwargs):
        return DallyQueueEnv(
            racks=1,
            machines_per_rack=1,
            gpus_per_machine=2,
            trace=make_trace(rows),
            latency=TierLatency(),
            max_candidates=4,
            guard_leases=0.5,
            **kwargs,
        )

    lease_guard_only = env()
    lease_guard_only.reset(seed=0)
    assert [int(lease_guard_only.engine.job_id[j]) for j in lease_guard_only.pick.candidates] == [0, 1, 2, 3]
    for slots, jct_mean in (([0, 0], 50.0), ([2, 1], 60.0)):
        guarded = env(guard_waiting=True)
        guarded.reset(seed=0)
        e = guarded.engine
        assert [int(e.job_id[j]) for j in guarded.pick.candidates] == [1, 2, 3]
        assert int(e.job_id[e.running_jobs()[0]]) == 0 and e.first_start_s[0] == 0.0
        for slot in slots:
            _, _, terminated, _, info = guarded.step(slot)
        assert terminated and guarded.steps == 2  # the last candidate alone is no choice
        assert info["summary"]["jct_mean_s"] == pytest.approx(jct_mean)
        assert info["summary"]["makespan_s"] == pytest.approx(100.0)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), share=st.sampled_from([0.25, 0.5, 1.0]))
def test_under_guard_waiting_the_agent_never_sees_a_protected_candidate(seed, share):
    # At every step of a random episode no candidate is protected: the guard served them all,
    # and every step is still a real choice (two candidates or more, or stop valid).
    env = gym.make("DallyQueueSmall-v0", guard_leases=share, guard_waiting=True).unwrapped
    _, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    while not env._done:
        pick = env.pick
        largest = env.largest_estimate_s()
        estimate = ProtectedRemainingPolicy.remaining_estimate_s(env.engine, np.array(pick.candidates))
        assert (estimate < share * largest).all()
        assert len(pick.candidates) >= 2 or pick.may_stop
        _, _, _, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))


def test_a_pick_guard_that_serves_a_non_candidate_is_an_error():
    rows = [(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0)]
    env = one_gpu_env(rows)
    env.reset(seed=0)
    engine = Engine(
        make_trace(rows), ClusterSpec(1, 1, 1), make_policy("dally"), TierLatency(), EngineConfig(), agent_picks=True
    )
    engine.pick_guard = lambda engine, candidates: 7
    with pytest.raises(EngineError, match="pick_guard served 7"):
        next(engine.decisions())


def test_makespan_bound_moves_when_the_longest_job_waits():
    # One GPU. Job 0 (100 s) and job 1 (10 s) arrive at 0. At the pick the bound is 100 (job 0
    # alone from now). Serving job 1 first delays job 0 by 10 s: the bound, and the makespan, 110.
    # With reward="makespan" the return is -(110 - 100) / scale under the bound credit (the
    # excess over the first bound), -110 / scale under the elapsed one.
    rows = [(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0)]
    for credit, (first, second) in (("bound", (-10.0, -10.0)), ("elapsed", (-110.0, -110.0))):
        env = one_gpu_env(rows, reward="makespan", reward_scale_s=1.0, makespan_credit=credit)
        env.reset(seed=0)
        assert env.makespan_bound_s() == pytest.approx(100.0)
        assert env.initial_makespan_bound_s == (100.0 if credit == "bound" else 0.0)
        assert env.step(1)[1] == pytest.approx(first)
        env.reset(seed=0)
        assert env.step(0)[1] == pytest.approx(second)  # the short job second: 110 all the same


def test_stop_leaves_the_rest_waiting_until_the_next_event():
    # Two GPUs on one machine. Job 0 (30 s) starts at 0. Jobs 1 and 2 (100 s each) arrive at
    # 10 with one GPU free. Stopping leaves the GPU idle: both start when job 0 ends at 30
    # (JCTs 30, 120, 120). Serving job 1 instead: it runs 10-110, job 2 30-130.
    rows = [(0, 0, 1, 30, 1.0), (1, 10, 1, 100, 1.0), (2, 10, 1, 100, 1.0)]
    env = DallyQueueEnv(
        racks=1,
        machines_per_rack=1,
        gpus_per_machine=2,
        trace=make_trace(rows),
        latency=TierLatency(),
        lease_s=1e6,
        max_candidates=4,
    )
    _, info = env.reset(seed=0)
    assert env.pick.now_s == 10.0 and info["action_mask"][4]
    _, _, terminated, _, info = env.step(4)
    assert terminated
    jobs = dallygym.collect(env.engine).jobs.set_index("job_id")
    assert jobs.loc[[1, 2], "first_start_s"].tolist() == [30.0, 30.0]
    assert info["summary"]["jct_mean_s"] == pytest.approx((30 + 120 + 120) / 3)
    env.reset(seed=0)
    _, _, _, _, info = env.step(0)
    assert info["summary"]["jct_mean_s"] == pytest.approx((30 + 100 + 120) / 3)


def test_jct_makespan_return_adds_the_weighted_makespan():
    rows = [(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0)]
    env = one_gpu_env(rows, reward="jct-makespan", makespan_weight=2.0, makespan_credit="elapsed")
    env.reset(seed=0)
    _, reward, _, _, _ = env.step(1)
    assert reward == pytest.approx(-(60.0 + 2.0 * 110.0) / 1e8)
    env = one_gpu_env(rows, reward="jct-makespan", makespan_weight=2.0)  # the excess over the bound, 100
    env.reset(seed=0)
    assert env.step(1)[1] == pytest.approx(-(60.0 + 2.0 * 10.0) / 1e8)
    env = one_gpu_env(rows, reward="makespan", reward_scale_s=10.0, makespan_credit="elapsed")
    env.reset(seed=0)
    assert env.step(1)[1] == pytest.approx(-110.0 / 10.0)


# --- the engine's pick decision ------------------------------------------------------------------


def test_native_engine_makes_no_picks_and_run_policy_answers_an_agent_engines_picks_natively():
    trace = make_trace([(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0)])
    engine = Engine(trace, ClusterSpec(1, 1, 1), make_policy("dally"), TierLatency(), EngineConfig())
    assert not any(isinstance(d, Pick) for d in _drive(engine))
    # With agent picks, run_policy answers each pick by Policy.pick (the first candidate): the
    # native run, on a trace whose passes have real picks.
    spec = ClusterSpec(2, 2, 8)
    small = load_trace("small", cluster=spec)

    def dally(agent_picks: bool) -> Engine:
        latency = get_latency_model("dally-paper")
        return Engine(small, spec, make_policy("dally"), latency, EngineConfig(), agent_picks=agent_picks)

    assert sum(isinstance(d, Pick) for d in _drive(dally(True))) > 10
    native = dallygym.run_policy(dally(False))
    by_picks = dallygym.run_policy(dally(True))
    assert collect(by_picks).jobs.equals(collect(native).jobs)


def _drive(engine):
    gen = engine.decisions()
    seen = []
    try:
        d = next(gen)
        while True:
            seen.append(d)
            d = gen.send(d.candidates[0] if isinstance(d, Pick) else engine.policy.decide(d, engine))
    except StopIteration:
        return seen


def test_a_pick_answer_that_is_not_a_candidate_or_a_forbidden_stop_is_an_error():
    trace = make_trace([(0, 0, 1, 100, 1.0), (1, 0, 1, 10, 1.0)])
    for answer, word in ((99, "not a candidate"), (None, "not allowed")):
        engine = Engine(
            trace, ClusterSpec(1, 1, 1), make_policy("dally"), TierLatency(), EngineConfig(), agent_picks=True
        )
        gen = engine.decisions()
        assert isinstance(next(gen), Pick)
        with pytest.raises(EngineError, match=word):
            gen.send(answer)


# --- heuristics through the same actions ---------------------------------------------------------


@pytest.mark.parametrize("lease_picks", ["waiting", "all"])
@pytest.mark.parametrize("order", ORDERS)
def test_heuristic_order_through_picks_equals_native_run_small(order, lease_picks):
    env = gym.make("DallyQueueSmall-v0", trace="small", offer_rule=order, lease_picks=lease_picks)
    native = simulate("small", ClusterSpec(2, 2, 8), policy=order)
    assert evaluate(env, heuristic_agent(order, env)) == native.summary


@pytest.mark.parametrize("lease_picks", ["waiting", "all"])
@pytest.mark.parametrize("order", ORDERS)
def test_heuristic_order_through_picks_equals_native_run_batch_500_two_racks(order, lease_picks):
    env = gym.make("DallyQueue-v0", racks=2, trace="batch-500", offer_rule=order, lease_picks=lease_picks)
    native = simulate("batch-500", 2, policy=order)
    assert evaluate(env, heuristic_agent(order, env)) == native.summary


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**16),
    lease_picks=st.sampled_from(["waiting", "all"]),
    guard=st.sampled_from([{}, {"guard_leases": 0.25}, {"guard_leases": 0.25, "guard_waiting": True}]),
    renewal=st.sampled_from(["upgrade", "keep"]),
)
def test_picked_passes_renewing_leases_together_equal_one_by_one(monkeypatch, seed, lease_picks, guard, renewal):
    # Engine.renew_together (runs of lease-expired turns renewed at once, e.g. the leases served
    # ahead of a pick) against every turn alone: the same episode, step for step.
    def episode(together):
        monkeypatch.setattr(Engine, "renew_together", together)
        env = gym.make("DallyQueueSmall-v0", lease_picks=lease_picks, renewal=renewal, **guard)
        steps = play(env, seed, random_masked)
        return steps, dallygym.sim.metrics.collect(env.unwrapped.engine)

    assert_same_episode(episode(True), episode(False))


def test_waiting_picks_never_offer_a_lease_expired_job_and_cut_the_steps():
    counts = {}
    for lease_picks in ("waiting", "all"):
        env = gym.make("DallyQueueSmall-v0", trace="small", lease_picks=lease_picks)
        obs, info = env.reset(seed=0)
        base = env.unwrapped
        steps = leases = 0
        while not base._done:
            holds = obs["jobs"][: len(base.pick.candidates), JOB_FEATURES.index("holds_lease")]
            leases += int(holds.sum())
            obs, _, terminated, _, info = env.step(0)
            steps += 1
            if terminated:
                break
        counts[lease_picks] = (steps, leases)
    assert counts["waiting"][1] == 0 and counts["all"][1] > 0
    assert counts["waiting"][0] < counts["all"][0]


def test_another_order_under_the_dally_offer_rule_picks_by_its_own_keys():
    env = gym.make("DallyQueueSmall-v0", trace="small")
    agent = heuristic_agent("tiresias-las", env)
    obs, info = env.reset(seed=0)
    base = env.unwrapped
    for _ in range(30):
        pick = base.pick
        if pick is None:
            break
        slot = int(agent.predict(obs)[0])
        shown = np.array(pick.candidates)
        service = base.engine.num_gpus[shown] * base.engine.run_s[shown]
        assert service[slot] == service.min()
        # Ties go to the earliest arrival (lowest index).
        assert shown[slot] == shown[service == service.min()].min()
        obs, _, terminated, _, info = env.step(slot)
        if terminated:
            break


def test_protected_remaining_order_is_the_issue_definition():
    # Remaining ideal times 100, 40, 60, 10 s (never run, one machine: estimate = the same) and a
    # never-run 16-GPU job with 8 s left (spans machines: 8 / 0.1 = 80 s). Largest 100: protected
    # (>= 50) are 100, 80, 60, longest first; then 10, 40 shortest first.
    rows = [(0, 0, 1, 100, 1.0), (1, 0, 1, 40, 1.0), (2, 0, 1, 60, 1.0), (3, 0, 1, 10, 1.0), (4, 0, 16, 8, 1.0)]
    engine = Engine(make_trace(rows), ClusterSpec(1, 2, 8), make_policy("protected-remaining"), TierLatency())
    order = engine._priority_order(np.arange(5))
    assert engine.job_id[order].tolist() == [0, 4, 2, 3, 1]
    # A job that has run: its observed Nw_sens divides. Job 1 ran 20 s for 10 s of ideal work.
    engine.run_s[1] = 20.0
    engine.done_iters[1] = 10.0
    est = POLICIES["protected-remaining"].remaining_estimate_s(engine, np.array([1]))
    assert est.tolist() == [30.0 / 0.5]


def two_gpu_env(long_s: float) -> DallyQueueEnv:
    """One machine of 2 GPUs, speed 1. Job 0 (``long_s``, 1 GPU) starts alone at t=0; at t=10
    jobs 1, 2, 3 (100, 400, 600 s, 1 GPU each) arrive for the one free GPU: the pick."""
    rows = [(0, 0, 1, long_s, 1.0), (1, 10, 1, 100, 1.0), (2, 10, 1, 400, 1.0), (3, 10, 1, 600, 1.0)]
    return DallyQueueEnv(
        racks=1,
        machines_per_rack=1,
        gpus_per_machine=2,
        trace=make_trace(rows),
        latency=TierLatency(),
        lease_s=1e6,
        max_candidates=4,
    )


@pytest.mark.parametrize(
    "long_s, largest, chosen",
    [
        # Job 0 has 990 s left (ran 10 s at speed 1): only job 3 (600 >= 495) is protected: served first.
        (1000, 990.0, 3),
        # Job 0 has 9,990 s left: nobody waiting is protected (the running job is the makespan's),
        # so the shortest goes first. (Over the candidates alone, 400 and 600 would be protected.)
        (10_000, 9990.0, 1),
        # Job 0 has 190 s left: the largest estimate is a candidate's; 400 and 600 are protected.
        (200, 600.0, 3),
    ],
)
def test_estimate_share_counts_running_jobs_and_the_protected_share_action_follows_it(long_s, largest, chosen):
    env = two_gpu_env(long_s)
    obs, _ = env.reset(seed=0)
    assert env.pick.now_s == 10.0
    assert [int(env.engine.job_id[j]) for j in env.pick.candidates] == [1, 2, 3]
    share = obs["jobs"][:3, JOB_FEATURES.index("estimate_share")]
    assert share.tolist() == pytest.approx([100 / largest, 400 / largest, 600 / largest])
    assert env.largest_estimate_s() == pytest.approx(largest)
    action = protected_share_action(obs, env.action_masks())
    assert int(env.engine.job_id[env.pick.candidates[action]]) == chosen


def test_protected_share_action_protects_from_its_share():
    # Two candidates: estimates 0.9 and 0.3 (as shown), shares 0.99 and 0.3. With the issue's
    # share of 1/2 only the first is protected and goes first (longest protected); with 1/4 both
    # are, and the longest still goes first; with a share of 1, above both, nobody is protected
    # and the shortest (slot 1) goes first.
    obs = {
        "jobs": np.zeros((4, len(JOB_FEATURES)), dtype=np.float32),
        "job_mask": np.array([1, 1, 0, 0], dtype=np.float32),
    }
    est, share = JOB_FEATURES.index("remaining_estimate"), JOB_FEATURES.index("estimate_share")
    obs["jobs"][0, [est, share]] = (0.9, 0.99)
    obs["jobs"][1, [est, share]] = (0.3, 0.3)
    assert protected_share_action(obs) == 0
    assert protected_share_action(obs, share=0.25) == 0
    assert protected_share_action(obs, share=1.0) == 1


def test_protected_share_action_serves_only_shown_candidates_and_never_stops():
    env = gym.make("DallyQueueSmall-v0")
    obs, info = env.reset(seed=4)
    done, steps = False, 0
    while not done:
        action = protected_share_action(obs, info["action_mask"])
        assert action < env.unwrapped.stop_action and info["action_mask"][action]
        obs, _, terminated, truncated, info = env.step(action)
        done, steps = terminated or truncated, steps + 1
    assert not info["invalid_action"] and info["summary"]["jobs"] == 60


def test_protected_remaining_is_a_named_policy_that_waits_for_the_best_tier():
    from dallygym.sim.policies.dally import DallyConsolidatedPolicy

    policy = make_policy("protected-remaining")
    assert isinstance(policy, DallyConsolidatedPolicy)  # offers: wait for the best tier
    assert "at least ½ of the largest" in dallygym.sim.policies.protected.__doc__
    assert simulate("small", ClusterSpec(2, 2, 8), policy="protected-remaining").summary["jobs"] == 60


# --- the Gymnasium contract -----------------------------------------------------------------------


@pytest.mark.parametrize("env_id", QUEUE_IDS)
@pytest.mark.filterwarnings("ignore::dallygym.envs.offer.InvalidActionWarning")  # (the checkers send random actions)
def test_gymnasium_env_checker_passes(env_id):
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", QUEUE_IDS)
@pytest.mark.filterwarnings("ignore::dallygym.envs.offer.InvalidActionWarning")  # (the checkers send random actions)
def test_stable_baselines3_env_checker_passes(env_id):
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker")
    sb3_checker.check_env(gym.make(env_id), warn=True)


def test_docstring_has_the_sections_and_every_feature():
    doc = DallyQueueEnv.__doc__
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
    for name in (*JOB_FEATURES, *CLUSTER_FEATURES):
        assert f"| {name} |" in doc or f", {name}" in doc or f"{name}, " in doc, name


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    offer_rule=st.sampled_from(["dally", "consolidated", "nowait"]),
    lease_picks=st.sampled_from(["waiting", "all"]),
)
def test_masks_are_valid_on_every_step_and_the_engine_stays_consistent(seed, offer_rule, lease_picks):
    env = gym.make("DallyQueueSmall-v0", offer_rule=offer_rule, lease_picks=lease_picks)
    obs, info = env.reset(seed=seed)
    base = env.unwrapped
    rng = np.random.default_rng(seed)
    done = base._done
    while not done:
        mask = info["action_mask"]
        pick = base.pick
        k = len(pick.candidates)
        assert mask[:k].all() and not mask[k:-1].any() and mask[-1] == pick.may_stop
        assert obs["job_mask"].sum() == k and env.observation_space.contains(obs)
        assert k >= 2 or pick.may_stop  # every step is a real choice
        check_holdings(base.engine)
        obs, _, terminated, truncated, info = env.step(random_masked(rng, mask))
        assert not info["invalid_action"]
        done = terminated or truncated
    engine = base.engine
    assert np.array_equal(engine.done_iters, engine.total_iterations)


def test_invalid_action_is_replaced_by_slot_zero_and_flagged_or_raises_when_strict():
    env = gym.make("DallyQueueSmall-v0", trace="small")
    _, info = env.reset(seed=0)
    invalid = int(np.flatnonzero(~info["action_mask"])[0])
    first = env.unwrapped.pick.candidates[0]
    with pytest.warns(InvalidActionWarning):
        _, _, _, _, info = env.step(invalid)
    assert info["invalid_action"] is True
    assert env.unwrapped.engine.state[first] != 1  # slot 0 was served (not left waiting), or declined
    strict = gym.make("DallyQueueSmall-v0", trace="small", strict=True)
    _, info = strict.reset(seed=0)
    with pytest.raises(ValueError, match="not valid"):
        strict.step(invalid)


def test_the_first_invalid_pick_of_an_environment_warns_and_later_ones_do_not():
    env = gym.make("DallyQueueSmall-v0")
    _, info = env.reset(seed=0)
    empty_slot = int(np.flatnonzero(~info["action_mask"])[0])
    with pytest.warns(InvalidActionWarning) as caught:
        _, _, _, _, info = env.step(empty_slot)
    assert info["invalid_action"] is True and len(caught) == 1
    message = str(caught[0].message)
    for words in (
        "DallyQueueSmall-v0",
        f"action {empty_slot}",
        "invalid under the action mask",
        "action 0",
        "MaskablePPO",
        "action_masks()",
    ):
        assert words in message
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error", InvalidActionWarning)  # the instance has warned: silent now
        for action in (env.action_space.n, -1, 0.5, "0"):
            if env.unwrapped._done:
                break
            assert env.step(action)[4]["invalid_action"] is True
    fresh = gym.make("DallyQueueSmall-v0")
    fresh.reset(seed=0)
    with pytest.warns(InvalidActionWarning):
        fresh.step(fresh.action_space.n + 3)


def test_an_invalid_pick_warns_but_steps_exactly_as_action_zero():
    warned, native = gym.make("DallyQueueSmall-v0"), gym.make("DallyQueueSmall-v0")
    _, info = warned.reset(seed=2)
    native.reset(seed=2)
    with pytest.warns(InvalidActionWarning):
        obs, reward, terminated, _, info = warned.step(-1)
    obs0, reward0, terminated0, _, info0 = native.step(0)
    assert all(np.array_equal(obs[k], obs0[k]) for k in obs0) and reward == reward0 and terminated == terminated0
    assert info.pop("invalid_action") is True and info0.pop("invalid_action") is False
    assert info.keys() == info0.keys() and all(np.array_equal(info[k], info0[k]) for k in info)


def test_same_seed_same_actions_identical_episode_and_seeds_differ():
    a = play(gym.make("DallyQueueSmall-v0"), 7, random_masked)
    b = play(gym.make("DallyQueueSmall-v0"), 7, random_masked)
    assert len(a) == len(b)
    for (oa, ra, ta, ia), (ob, rb, tb, ib) in zip(a, b):
        assert all(np.array_equal(oa[key], ob[key]) for key in oa) and ra == rb and ta == tb
        assert ia.keys() == ib.keys()
        for key in ia:
            assert np.array_equal(ia[key], ib[key]) if isinstance(ia[key], np.ndarray) else ia[key] == ib[key]
    env = gym.make("DallyQueueSmall-v0")
    env.reset(seed=0)
    first = env.unwrapped.engine.total_iterations.copy()
    env.reset(seed=1)
    assert not np.array_equal(first, env.unwrapped.engine.total_iterations)


@pytest.mark.parametrize("credit", ["bound", "elapsed"])
@pytest.mark.parametrize("reward, key", [("jct", "jct_mean_s"), ("makespan", "makespan_s")])
def test_episode_return_is_the_documented_metric(reward, key, credit):
    env = gym.make("DallyQueueSmall-v0", trace="small", reward=reward, makespan_credit=credit)
    episode = play(env, 0, random_masked)
    total = sum(r for _, r, _, _ in episode)
    excess = env.unwrapped.initial_makespan_bound_s if reward == "makespan" else 0.0
    assert total == pytest.approx(-(episode[-1][3]["summary"][key] - excess) / (100 * 3600.0))


@pytest.mark.parametrize("credit", ["bound", "elapsed"])
def test_jct_makespan_return_on_a_generated_episode(credit):
    env = gym.make("DallyQueueSmall-v0", reward="jct-makespan", makespan_weight=3.0, makespan_credit=credit)
    episode = play(env, 4, random_masked)
    summary = episode[-1][3]["summary"]
    span = summary["makespan_s"] - env.unwrapped.initial_makespan_bound_s
    assert env.unwrapped.initial_makespan_bound_s > 0 if credit == "bound" else span == summary["makespan_s"]
    expected = -(summary["jct_mean_s"] + 3.0 * span) / (100 * 3600.0)
    assert sum(r for _, r, _, _ in episode) == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["hidden", "observed", "oracle"])
def test_sensitivity_modes_fill_speed_features(mode):
    env = gym.make("DallyQueueSmall-v0", trace="small", sensitivity=mode)
    first = JOB_FEATURES.index("speed_machine")
    episode = play(env, 0, random_masked)
    values = np.concatenate([obs["jobs"][:, first : first + 3] for obs, _, _, _ in episode[:-1]])
    if mode == "hidden":
        assert not values.any()
    else:
        assert values.any() and (values <= 1).all()


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"reward": "x"}, "reward"),
        ({"offer_rule": "nope"}, "nope"),
        ({"max_candidates": 0}, "max_candidates"),
        ({"makespan_weight": -1}, "makespan_weight"),
        ({"sensitivity": "x"}, "sensitivity"),
        ({"lease_picks": "some"}, "lease_picks"),
        ({"makespan_credit": "x"}, "makespan_credit"),
        ({"guard_leases": 0}, "guard_leases"),
        ({"guard_leases": 1.5}, "guard_leases"),
        ({"guard_leases": True}, "guard_leases"),
        ({"guard_waiting": True}, "guard_waiting=True needs guard_leases"),
        ({"guard_leases": 0.5, "guard_waiting": 1}, "guard_waiting"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, word):
    with pytest.raises(ValueError, match=word):
        gym.make("DallyQueueSmall-v0", **kwargs)


def test_maskable_ppo_trains_with_the_job_pointer_policy_and_saves_and_loads(tmp_path):
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from dallygym.learning.nets import JobPointerPolicy

    env = gym.make("DallyQueueSmall-v0")
    model = sb3_contrib.MaskablePPO(
        JobPointerPolicy, env, n_steps=128, batch_size=64, n_epochs=2, seed=0, verbose=0, device="cpu"
    )
    model.learn(total_timesteps=256)
    model.save(tmp_path / "m.zip")
    loaded = sb3_contrib.MaskablePPO.load(tmp_path / "m.zip", device="cpu")
    obs, info = env.reset(seed=3)
    action, _ = loaded.predict(obs, action_masks=info["action_mask"], deterministic=True)
    assert info["action_mask"][int(action)]


def test_job_set_extractor_gives_the_same_features_with_the_empty_tail_cut_off():
    th = pytest.importorskip("torch")
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from dallygym.learning.nets import JobPointerPolicy

    env = gym.make("DallyQueueSmall-v0")
    model = sb3_contrib.MaskablePPO(JobPointerPolicy, env, seed=0, device="cpu")
    observations = [obs for obs, _, _, _ in play(env, 2, random_masked)[:20]]
    full = {k: th.as_tensor(np.stack([o[k] for o in observations])) for k in observations[0]}
    shown = int(full["job_mask"].sum(dim=1).max())
    assert shown < env.unwrapped.max_candidates
    cut = {"jobs": full["jobs"][:, :shown], "job_mask": full["job_mask"][:, :shown], "cluster": full["cluster"]}
    extractor = model.policy.features_extractor
    with th.no_grad():
        assert th.allclose(extractor(full), extractor(cut), atol=1e-6)


def test_a_window_smaller_than_the_candidates_shows_the_first_in_priority_order_and_counts_the_rest():
    env = gym.make("DallyQueueSmall-v0", trace="small", max_candidates=2)
    assert env.action_space == gym.spaces.Discrete(3)
    episode = play(env, 0, random_masked)
    beyond = [info["beyond_window"] for _, _, _, info in episode[:-1]]
    assert max(beyond) > 0
    for _, _, _, info in episode[:-1]:
        assert info["beyond_window"] == max(0, info["candidates"] - 2)
    assert episode[-1][3]["summary"]["jobs"] == 60


@pytest.mark.parametrize("guard", [{}, {"guard_leases": 0.25, "guard_waiting": True}])
def test_the_largest_estimate_is_computed_once_per_engine_state_and_always_current(guard):
    """largest_estimate_s is cached within a pass; at every step (and at every guard question)
    it equals a fresh computation over the unfinished jobs."""
    env = gym.make("DallyQueueSmall-v0", **guard)
    base = env.unwrapped

    def fresh() -> float:
        e = base.engine
        jobs = np.concatenate([e.running_jobs(), e.waiting_jobs()])
        return float(ProtectedRemainingPolicy.remaining_estimate_s(e, jobs).max()) if jobs.size else 0.0

    asked = []
    observer = base._observer  # (computes it for the observation, the guards and the env's method)
    cached = QueueObservation.largest_estimate_s

    def checked(self):
        value = cached(self)
        asked.append(value == fresh())
        return value

    observer.largest_estimate_s = checked.__get__(observer)
    rng = np.random.default_rng(3)
    obs, info = env.reset(seed=5)
    done = False
    while not done:
        assert base.largest_estimate_s() == fresh()
        obs, _, terminated, truncated, info = env.step(random_masked(rng, info["action_mask"]))
        done = terminated or truncated
    assert len(asked) > 100 and all(asked)
