"""Baselines for the learned-agent benchmark: smallest-demand-remaining, tuned-priority, the
lower bound, and the tuning script's search."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from helpers import TierLatency, load_script, make_trace

import dallygym
from dallygym import ClusterSpec, evaluate, heuristic_agent, simulate
from dallygym.envs.queue import JOB_FEATURES
from dallygym.sim.bounds import completion_sum_bound_s, fastest_run_s, fastest_shapes, fluid_completion_s, lower_bound
from dallygym.sim.engine import Engine, EngineConfig, run_policy
from dallygym.sim.metrics import collect
from dallygym.sim.policies import POLICIES, make_policy
from dallygym.sim.policies.smallest_demand import SmallestDemandRemainingPolicy
from dallygym.sim.policies.tuned import CandidateFeatures, TunedPriorityPolicy, shipped_weights

NEW = ["smallest-demand-remaining", "tuned-priority"]
tune = load_script("agents/tune_priority.py", "tune_priority_under_test")


def only(feature: str, value: float = 1.0) -> np.ndarray:
    w = np.zeros(len(JOB_FEATURES))
    w[JOB_FEATURES.index(feature)] = value
    return w


# One machine of 8 GPUs, speed 1. Job 0 (8 GPUs, 100 s) holds the machine from t=0; jobs 1-3
# queue behind it. At t=100 the queue is, with GPU demand x remaining estimate (never run, fits
# a machine: estimate = ideal time):
#   job 1: 4 GPUs x 10 s = 40;  job 2: 8 GPUs x 1 s = 8;  job 3: 2 GPUs x 5 s = 10.
QUEUE = [(0, 0, 8, 100, 1.0), (1, 1, 4, 10, 1.0), (2, 2, 8, 1, 1.0), (3, 3, 2, 5, 1.0)]


def run(trace, spec, policy, **config):
    return collect(run_policy(Engine(trace, spec, policy, TierLatency(), EngineConfig(**config))))


# --- smallest demand x remaining estimate --------------------------------------------------------


def test_the_rule_orders_a_hand_built_queue_by_demand_times_remaining_estimate():
    # Order at t=100: job 2 (8), job 3 (10), job 1 (40). Job 2 takes the machine 100-101; then
    # job 3 runs 101-106 and job 1 101-111. JCTs 100, 110, 99, 103: mean 103, makespan 111.
    # Dally (Nw_sens 0 for all, so arrival order): job 1 100-110, job 2 does not fit beside it,
    # job 3 100-105, job 2 110-111. JCTs 100, 109, 109, 102: mean 105.
    trace, spec = make_trace(QUEUE), ClusterSpec(1, 1, 8)
    ours = run(trace, spec, SmallestDemandRemainingPolicy())
    assert ours.jobs["first_start_s"].tolist() == [0.0, 101.0, 100.0, 101.0]
    assert ours.summary["jct_mean_s"] == pytest.approx(103.0)
    assert ours.summary["makespan_s"] == pytest.approx(111.0)
    dally = run(trace, spec, make_policy("dally"))
    assert dally.summary["jct_mean_s"] == pytest.approx(105.0)


def test_the_rule_keys_use_the_remaining_estimate_of_the_queue_env():
    # 2 machines of 8 GPUs. Never-run jobs: a job that spans machines is estimated at speed 0.1.
    # Keys: 1 x 1000 = 1000; 4 x 100 = 400; 8 x 200 = 1600; 16 x 10 / 0.1 = 1600; 2 x 500 = 1000.
    rows = [(0, 0, 1, 1000, 1.0), (1, 0, 4, 100, 1.0), (2, 0, 8, 200, 1.0), (3, 0, 16, 10, 1.0), (4, 0, 2, 500, 1.0)]
    engine = Engine(
        make_trace(rows), ClusterSpec(1, 2, 8), SmallestDemandRemainingPolicy(), TierLatency(), EngineConfig()
    )
    jobs = np.arange(5)
    keys = engine.policy.priority(engine, jobs)
    assert keys.tolist() == pytest.approx([1000.0, 400.0, 1600.0, 1600.0, 1000.0])
    # Ties by arrival then index (the engine's stable sort): 1, 0, 4, 2, 3.
    assert jobs[np.argsort(keys, kind="stable")].tolist() == [1, 0, 4, 2, 3]


def test_the_rule_differs_from_dally_in_its_order_only():
    policy = SmallestDemandRemainingPolicy()
    for method in ("decide", "on_start", "on_start_batch", "timers", "reset"):
        assert getattr(type(policy), method) is getattr(POLICIES["dally"], method)
    assert type(policy).priority is not POLICIES["dally"].priority


# --- tuned linear priority -----------------------------------------------------------------------


def test_tuned_policy_with_weight_on_gpus_only_is_smallest_demand_first():
    # Order at t=100 by demand: job 3 (2), job 1 (4), job 2 (8). Job 3 runs 100-105, job 1
    # 100-110, job 2 waits for the whole machine: 110-111. JCTs 100, 109, 109, 102: mean 105.
    trace, spec = make_trace(QUEUE), ClusterSpec(1, 1, 8)
    result = run(trace, spec, TunedPriorityPolicy(weights=only("gpus")))
    assert result.jobs["first_start_s"].tolist() == [0.0, 100.0, 110.0, 100.0]
    assert result.summary["jct_mean_s"] == pytest.approx(105.0)
    # Negative weight: largest demand first -- job 2 takes the machine at 100, then 1 and 3.
    largest = run(trace, spec, TunedPriorityPolicy(weights=only("gpus", -1.0)))
    assert largest.jobs["first_start_s"].tolist() == [0.0, 101.0, 100.0, 101.0]


def test_tuned_policy_with_weight_on_the_remaining_estimate_is_shortest_estimate_first():
    rows = [(0, 0, 1, 1000, 1.0), (1, 0, 4, 100, 1.0), (2, 0, 8, 200, 1.0), (3, 0, 16, 10, 1.0), (4, 0, 2, 500, 1.0)]
    policy = TunedPriorityPolicy(weights=only("remaining_estimate"))
    engine = Engine(make_trace(rows), ClusterSpec(1, 2, 8), policy, TierLatency(), EngineConfig())
    policy.reset(engine, np.random.default_rng(0))
    jobs = np.arange(5)
    # Estimates 1000, 100, 200, 100 (10 s / 0.1), 500: ties by index.
    assert jobs[np.argsort(policy.priority(engine, jobs), kind="stable")].tolist() == [1, 3, 2, 4, 0]


def test_tuned_policy_features_are_the_queue_observation_rows():
    env = gym.make("DallyQueueSmall-v0", trace="small")
    obs, _ = env.reset(seed=3)
    base = env.unwrapped
    for _ in range(5):
        k = int(obs["job_mask"].sum())
        candidates = np.asarray(base.pick.candidates[:k], dtype=np.int64)
        rows = CandidateFeatures(base.engine, base.policy)(candidates)
        np.testing.assert_array_equal(rows, obs["jobs"][:k])
        obs, _, terminated, _, _ = env.step(int(np.argmax(obs["jobs"][:k, 0])))
        if terminated:
            break


def test_tuned_policy_loads_the_shipped_weights():
    data = shipped_weights()
    assert data["features"] == list(JOB_FEATURES)
    assert TunedPriorityPolicy().weights.tolist() == pytest.approx(data["weights"])
    assert data["history"], "the shipped file carries its tuning history"
    with pytest.raises(ValueError, match="20 finite"):
        TunedPriorityPolicy(weights=[1.0, 2.0])


# --- CEM -----------------------------------------------------------------------------------------


def test_cem_converges_on_a_toy_objective():
    target = np.array([0.5, -1.0, 2.0])

    def objective(candidates, iteration):
        return ((candidates - target) ** 2).sum(axis=1)

    mean, history = tune.cem(
        objective,
        np.zeros(3),
        2.0,
        np.random.default_rng(0),
        iterations=30,
        population=20,
        elite=5,
        std_floor=1e-3,
        normalise=False,
    )
    assert np.abs(mean - target).max() < 0.05
    assert history[-1]["mean_objective"] < history[0]["mean_objective"]
    again, _ = tune.cem(
        objective,
        np.zeros(3),
        2.0,
        np.random.default_rng(0),
        iterations=30,
        population=20,
        elite=5,
        std_floor=1e-3,
        normalise=False,
    )
    assert again.tolist() == mean.tolist()


def test_cem_on_directions_keeps_unit_length():
    target = np.array([3.0, 4.0]) / 5.0
    mean, _ = tune.cem(
        lambda c, it: -(c @ target),
        np.array([1.0, 0.0]),
        0.5,
        np.random.default_rng(1),
        iterations=15,
        population=10,
        elite=3,
    )
    assert np.linalg.norm(mean) == pytest.approx(1.0)
    assert mean @ target > 0.99


def test_tuning_draws_are_training_seeds_only():
    assert not set(tune.TRAIN_SEEDS) & ({100, 101} | set(range(2000, 2100)))
    assert tune.full_weights(np.ones(len(tune.SEARCHED)))[[JOB_FEATURES.index(f) for f in tune.FIXED_ZERO]].sum() == 0


# --- the lower bound -----------------------------------------------------------------------------


def test_lower_bound_on_a_hand_built_trace():
    # 2 racks x 2 machines x 4 GPUs; speed 1 on a machine, 0.5 in a rack, 0.25 over the network.
    # Fastest run times: job 0 (1 GPU) 100 s; job 1 (4 GPUs, one machine) 50 x 2 s = 100 s;
    # job 2 (8 GPUs, one rack of two machines) 10 / 0.5 = 20 s; job 3 (12 GPUs, two racks)
    # 5 / 0.25 = 20 s. Mean JCT bound (100 + 100 + 20 + 20) / 4 = 60. Ends 105, 115, 45, 55 with
    # arrivals 5, 15, 25, 35: makespan bound 115 - 5 = 110.
    rows = [(0, 5, 1, 100, 1.0), (1, 15, 4, 50, 2.0), (2, 25, 8, 10, 1.0), (3, 35, 12, 5, 1.0)]
    trace, spec = make_trace(rows), ClusterSpec(2, 2, 4)
    assert fastest_run_s(trace, spec, TierLatency()).tolist() == pytest.approx([100.0, 100.0, 20.0, 20.0])
    # Capacity (16 GPUs): work 100, 400, 160, 240 GPU-s = 6.25, 25, 10, 15 s of the pool. Fluid
    # shortest-remaining-first: job 0 5-11.25; job 1 from 15, preempted at 25 (15 s left) by
    # job 2 (25-35); at 35 job 3 (15 s) ties job 1 (15 s) and the earlier arrival goes first:
    # job 1 35-50, job 3 50-65. Sum 161.25 < 320 = the sum of arrival + fastest run: the
    # no-queueing terms bind (no job's fluid end reaches its own, so the next set tried is
    # empty). Makespan: the work from t=5 on needs 56.25 s, ending at 61.25 < 115.
    assert fluid_completion_s(np.array([5.0, 15, 25, 35]), np.array([100.0, 400, 160, 240]), 16).tolist() == [
        11.25,
        50.0,
        35.0,
        65.0,
    ]
    bound = lower_bound(trace, spec, TierLatency())
    assert bound == {
        "jct_mean_s": pytest.approx(60.0),
        "makespan_s": pytest.approx(110.0),
        "jct_mean_no_queue_s": pytest.approx(60.0),
        "makespan_no_queue_s": pytest.approx(110.0),
        "jobs": 4,
    }
    for name in POLICIES:
        summary = run(trace, spec, make_policy(name)).summary
        assert summary["jct_mean_s"] >= bound["jct_mean_s"] - 1e-9
        assert summary["makespan_s"] >= bound["makespan_s"] - 1e-9


def test_the_capacity_bound_binds_where_jobs_queue():
    # One machine of 4 GPUs; three 4-GPU jobs at t=0 running 10, 20 and 30 s. No queueing says
    # mean JCT >= 20 and makespan >= 30; but only one runs at a time: shortest first ends them
    # at 10, 30 and 60, mean 100 / 3, makespan 60 -- the capacity bound, and what
    # smallest-demand-remaining does.
    trace, spec = make_trace([(0, 0, 4, 10, 1.0), (1, 0, 4, 20, 1.0), (2, 0, 4, 30, 1.0)]), ClusterSpec(1, 1, 4)
    bound = lower_bound(trace, spec, TierLatency())
    assert bound["jct_mean_no_queue_s"] == pytest.approx(20.0)
    assert bound["makespan_no_queue_s"] == pytest.approx(30.0)
    assert bound["jct_mean_s"] == pytest.approx(100.0 / 3.0)
    assert bound["makespan_s"] == pytest.approx(60.0)
    sdr = run(trace, spec, SmallestDemandRemainingPolicy()).summary
    assert sdr["jct_mean_s"] == pytest.approx(bound["jct_mean_s"])
    assert sdr["makespan_s"] == pytest.approx(bound["makespan_s"])
    for name in POLICIES:
        summary = run(trace, spec, make_policy(name)).summary
        assert summary["jct_mean_s"] >= bound["jct_mean_s"] * (1 - 1e-12)


def test_splitting_the_jobs_beats_both_relaxations_alone():
    # 4 GPUs. Job A: 1 GPU for 100 s; jobs B and C: 4 GPUs for 10 s; all at t=0. Capacity alone
    # (work 100, 40, 40 GPU-s = 25, 10, 10 s): B 10, C 20, A 45, sum 75. No queueing alone:
    # 100 + 10 + 10 = 120. Split: A by its own end (100; its fluid end 45 is below it) and {B, C}
    # by capacity (10 + 20): 130. (The best real schedule, B then C then A, sums 150.)
    arrival, fastest, gpus = np.zeros(3), np.array([100.0, 10.0, 10.0]), np.array([1, 4, 4])
    assert fluid_completion_s(arrival, gpus * fastest, 4).tolist() == [45.0, 10.0, 20.0]
    assert completion_sum_bound_s(arrival, fastest, gpus, 4) == pytest.approx(130.0)


def test_rank_by_rank_beats_the_sums_of_both_relaxations():
    # 2 GPUs, all at t=0. Job A: 2 GPUs for 10 s; jobs B and C: 1 GPU for 12 s each. On the one
    # server (work 20, 12, 12 GPU-s = 10, 6, 6 s) B ends at 6, C at 12, A at 22: sum 40. Own ends
    # 10, 12, 12. Split: {A, C} (A's 16 and C's 6 on the server, ranked against their own 10
    # and 12: 10 + 16) plus B's own 12 = 38; {A} plus B and C: 10 + 24 = 34. Rank by rank over
    # all three: max(6, 10) + max(12, 12) + max(22, 12) = 44, above 40. (The best real
    # schedule: B and C together, then A: 12 + 12 + 22 = 46.)
    arrival, fastest, gpus = np.zeros(3), np.array([10.0, 12.0, 12.0]), np.array([2, 1, 1])
    assert fluid_completion_s(arrival, gpus * fastest, 2).tolist() == [22.0, 6.0, 12.0]
    assert completion_sum_bound_s(arrival, fastest, gpus, 2) == pytest.approx(44.0)
    # The same jobs on one machine of 2 GPUs: smallest-demand-remaining runs the best schedule.
    trace, spec = make_trace([(0, 0, 2, 10, 1.0), (1, 0, 1, 12, 1.0), (2, 0, 1, 12, 1.0)]), ClusterSpec(1, 1, 2)
    bound = lower_bound(trace, spec, TierLatency())
    assert bound["jct_mean_s"] == pytest.approx(44.0 / 3.0)
    assert run(trace, spec, SmallestDemandRemainingPolicy()).summary["jct_mean_s"] == pytest.approx(46.0 / 3.0)
    for name in POLICIES:
        assert run(trace, spec, make_policy(name)).summary["jct_mean_s"] >= bound["jct_mean_s"] * (1 - 1e-12)


@pytest.mark.parametrize(
    "arrival, work, gpus, error",
    [
        ([0.0, 1.0], [1.0], 4, "one length"),
        ([0.0], [-1.0], 4, "work_gpu_s >= 0"),
        ([np.nan], [1.0], 4, "finite"),
        ([0.0], [1.0], 0, "gpus must be positive"),
    ],
)
def test_fluid_completion_rejects_bad_input(arrival, work, gpus, error):
    with pytest.raises(ValueError, match=error):
        fluid_completion_s(np.array(arrival), np.array(work), gpus)


def test_fastest_shapes_are_the_fewest_machines():
    spec = ClusterSpec(2, 8, 8)
    assert fastest_shapes(3, spec) == [((3,),)]
    assert fastest_shapes(12, spec) == [((8, 4),), ((7, 5),), ((6, 6),)]
    assert fastest_shapes(16, spec) == [((8, 8),)]
    assert all(len(shape) == 2 and sum(map(sum, shape)) == 100 for shape in fastest_shapes(100, spec))


@pytest.mark.parametrize("racks", [2, 8])
def test_no_policy_beats_the_bound_job_by_job(racks):
    spec = ClusterSpec(racks, 8, 8)
    bound = fastest_run_s("batch-500", spec)
    for name in ("dally", "smallest-demand-remaining", "gandiva", "tiresias"):
        jobs = simulate("batch-500", spec, policy=name).jobs
        assert (jobs["jct_s"].to_numpy() >= bound - 1e-6).all()


# --- running through simulate, the CLI and the queue environment ---------------------------------


@pytest.mark.parametrize("name", NEW)
def test_new_policies_run_and_are_deterministic(name):
    a = simulate("small", ClusterSpec(2, 2, 8), policy=name)
    b = simulate("small", ClusterSpec(2, 2, 8), policy=name)
    assert a.summary == b.summary
    assert a.summary["jobs"] == len(a.jobs)


@pytest.mark.parametrize("name", NEW)
def test_new_policies_through_the_cli(name):
    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "dallygym", *args], capture_output=True, text=True, check=True)
        return out.stdout

    summary = json.loads(
        cli(
            "simulate",
            "--policy",
            name,
            "--trace",
            "small",
            "--racks",
            "2",
            "--machines-per-rack",
            "2",
            "--format",
            "json",
            "--no-progress",
        )
    )
    native = simulate("small", ClusterSpec(2, 2, 8), policy=name).summary
    assert summary["jct_mean_s"] == pytest.approx(native["jct_mean_s"])
    assert name in cli(
        "compare",
        "--policies",
        "dally",
        name,
        "--trace",
        "small",
        "--racks",
        "2",
        "--machines-per-rack",
        "2",
        "--format",
        "csv",
        "--quiet",
    )
    assert name in cli(
        "evaluate", "--agent", name, "--trace", "small", "--racks", "2", "--machines-per-rack", "2", "--format", "csv"
    )


@pytest.mark.parametrize("lease_picks", ["waiting", "all"])
@pytest.mark.parametrize("name", NEW)
def test_new_orders_through_queue_picks_equal_their_native_runs(name, lease_picks):
    env = gym.make("DallyQueueSmall-v0", trace="small", offer_rule=name, lease_picks=lease_picks)
    assert evaluate(env, heuristic_agent(name, env)) == simulate("small", ClusterSpec(2, 2, 8), policy=name).summary


def test_registered_for_every_entry_point():
    for name in NEW:
        assert name in POLICIES and make_policy(name).name == name
    assert dallygym.sim.policies.SmallestDemandRemainingPolicy is SmallestDemandRemainingPolicy
