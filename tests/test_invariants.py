"""Engine invariants on random small traces (hypothesis), under several policies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import POLICIES, RandomPolicy, TierLatency, check_holdings, drive, offers_seen, small_runs
from hypothesis import HealthCheck, given, settings

from dallygym.sim.bounds import fastest_run_s, lower_bound
from dallygym.sim.engine import DONE, RENEWAL_MODES, Engine
from dallygym.sim.metrics import collect


@pytest.mark.parametrize("renewal", RENEWAL_MODES)
@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=small_runs())
def test_invariants_hold_on_random_small_traces(run, policy_name, renewal):
    spec, trace, config = run
    config = dataclasses.replace(config, renewal=renewal)
    policy = POLICIES[policy_name]()
    engine = drive(Engine(trace, spec, policy, TierLatency(), config))
    check_holdings(engine)
    assert (engine.state == DONE).all()
    assert np.array_equal(engine.done_iters, engine.total_iterations)
    assert engine.cluster.free_total == spec.num_gpus
    jobs = collect(engine).jobs
    assert (jobs["jct_s"] >= jobs["ideal_s"]).all()  # exactly: no tolerance
    assert (jobs["queue_s"] >= -1e-6).all()
    assert (jobs["comm_s"] >= -1e-6).all()
    assert np.allclose(jobs["machine_s"] + jobs["rack_s"] + jobs["network_s"], jobs["run_s"])


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=small_runs())
def test_no_policy_beats_the_lower_bound(run, policy_name):
    # Every relaxation of dallygym.sim.bounds holds for every policy, leases, restarts and
    # preemptions included (the bound's sum of completion times, its makespan, and each job's
    # own arrival + fastest run time).
    spec, trace, config = run
    bound = lower_bound(trace, spec, TierLatency())
    result = collect(drive(Engine(trace, spec, POLICIES[policy_name](), TierLatency(), config), check=False))
    tolerance = 1 - 1e-9
    assert result.summary["jct_mean_s"] >= bound["jct_mean_s"] * tolerance
    assert result.summary["makespan_s"] >= bound["makespan_s"] * tolerance
    assert (result.jobs["jct_s"].to_numpy() >= fastest_run_s(trace, spec, TierLatency()) * tolerance).all()


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@settings(max_examples=15, deadline=None)
@given(run=small_runs())
def test_same_seed_same_results_bit_for_bit(run, policy_name):
    spec, trace, config = run
    a = collect(drive(Engine(trace, spec, POLICIES[policy_name](), TierLatency(), config), check=False))
    b = collect(drive(Engine(trace, spec, POLICIES[policy_name](), TierLatency(), config), check=False))
    assert a.summary == b.summary
    assert a.jobs.equals(b.jobs)
    assert a.timeline.equals(b.timeline)


@settings(max_examples=60, deadline=None)
@given(small_runs())
def test_in_system_area_is_the_sum_of_jcts(run):
    spec, trace, config = run
    engine = drive(Engine(trace, spec, RandomPolicy(), TierLatency(), config), check=False)
    jobs = collect(engine).jobs
    assert np.isclose(engine.in_system_area_s, jobs["jct_s"].sum(), rtol=1e-9)
    if config.restart_overhead_s == 0:
        assert np.isclose(engine.comm_area_s, jobs["comm_s"].sum(), rtol=1e-9, atol=1e-6)


@pytest.mark.parametrize("renewal", RENEWAL_MODES)
@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=small_runs())
def test_renewing_leases_together_changes_nothing(run, policy_name, renewal):
    """The fast path that renews a run of lease-expired jobs in place at once gives the same
    offers and the same results as taking their turns one by one."""
    spec, trace, config = run
    config = dataclasses.replace(config, renewal=renewal)

    def offers_and_results(together):
        engine = Engine(trace, spec, POLICIES[policy_name](), TierLatency(), config)
        engine.renew_together = together
        seen = offers_seen(engine, check_holdings)
        return seen, collect(engine), engine

    seen_a, a, fast = offers_and_results(True)
    seen_b, b, plain = offers_and_results(False)
    assert seen_a == seen_b
    assert a.summary == b.summary
    assert a.jobs.equals(b.jobs)
    assert a.timeline.equals(b.timeline)
    assert np.array_equal(fast.preemptions, plain.preemptions)
    assert np.array_equal(fast.upgrades, plain.upgrades)
