"""Engine invariants on random small traces (hypothesis), under several policies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import TierLatency, make_trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dallygym.cluster import ClusterSpec
from dallygym.engine import DONE, RENEWAL_MODES, RUNNING, Engine, EngineConfig
from dallygym.metrics import collect
from dallygym.policies import POLICIES as SHIPPED
from dallygym.policies import Policy


class RandomPolicy(Policy):
    """Random priorities each pass, random accept tier or wait: stresses every engine path."""

    name = "random-test"

    def reset(self, view, rng):
        self.rng = rng

    def priority(self, view, jobs):
        return self.rng.random(len(jobs))

    def decide(self, offer, view):
        choice = self.rng.integers(0, len(offer.tiers) + 1)
        return None if choice == len(offer.tiers) else offer.tiers[choice]


class RandomMigratePolicy(RandomPolicy):
    """Also asks, at random, to move running jobs to a better tier at round boundaries."""

    name = "random-migrate-test"

    def migrate(self, view, job, now_s):
        if view.tier[job] > 0 and self.rng.random() < 0.5:
            return int(self.rng.integers(0, view.tier[job]))
        return None


#: Every shipped policy, plus two test policies that stress every engine path.
POLICIES = {**SHIPPED, "random-test": RandomPolicy, "random-migrate-test": RandomMigratePolicy}


@st.composite
def small_runs(draw):
    spec = ClusterSpec(draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4])))
    n = draw(st.integers(1, 12))
    rows = []
    for i in range(n):
        rows.append(
            (
                i * 3 + 1,
                draw(st.integers(0, 20)) * 450.0,
                draw(st.integers(1, spec.num_gpus)),
                draw(st.integers(1, 400)),
                draw(st.sampled_from([0.5, 1.0, 7.25])),
            )
        )
    lease = draw(st.sampled_from([300.0, 1000.0, 3600.0]))
    overhead = draw(st.sampled_from([0.0, 30.0]))
    config = EngineConfig(lease_s=lease, restart_overhead_s=overhead, seed=draw(st.integers(0, 3)))
    return spec, make_trace(rows), config


def check_holdings(engine: Engine, offer=None) -> None:
    """No GPU held twice; the counters agree with the owner array; held <= total."""
    owner = engine.cluster.owner
    held = np.zeros_like(owner)
    renewing = offer.job if offer is not None and offer.is_renewal else -1
    for j in np.flatnonzero(engine.state == RUNNING):
        if j in engine.expired_unvisited or j == renewing:
            continue  # lease expired, not visited yet in this pass (or being offered): it holds nothing now
        gpus = engine.gpus[j]
        assert gpus is not None and len(gpus) == engine.num_gpus[j]
        assert (owner[gpus] == j).all()
        held[gpus] += 1
    assert held.max(initial=0) <= 1
    state = engine.state
    assert engine.n_waiting == int((state == 1).sum())
    assert engine.n_running == int((state == RUNNING).sum())
    assert engine.waiting_gpus == int(engine.num_gpus[state == 1].sum())
    assert np.array_equal(engine.running_jobs(), np.flatnonzero(state == RUNNING))
    used = int((owner != -1).sum())  # held, or hidden from an upgrade offer (owner -2)
    assert used == engine.spec.num_gpus - engine.cluster.free_total <= engine.spec.num_gpus
    per_machine = np.bincount(engine.spec.machine_of_gpu[owner == -1], minlength=engine.spec.num_machines)
    assert np.array_equal(per_machine, engine.cluster.free_per_machine)


def check_renewal_offer(engine: Engine, offer) -> None:
    """Renewal offers go to running jobs only, in the engine's mode; an upgrade offer goes to a
    job below its best tier and offers only strictly better tiers."""
    if not offer.is_renewal:
        assert offer.current_tier is None and engine.state[offer.job] == 1
        return
    assert offer.renewal == engine.config.renewal != "keep"
    assert engine.state[offer.job] == RUNNING and int(offer.current_tier) == engine.tier[offer.job]
    if offer.renewal == "upgrade":
        assert offer.current_tier > offer.best_possible_tier
        assert all(tier < offer.current_tier for tier in offer.tiers)


def drive(engine: Engine, check=True):
    gen = engine.decisions()
    decide = engine.policy.decide
    try:
        offer = next(gen)
        while True:
            if check:
                check_holdings(engine, offer)
                assert offer.starvation_s >= 0
                check_renewal_offer(engine, offer)
            offer = gen.send(decide(offer, engine))
    except StopIteration:
        pass
    return engine


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


def offers_seen(engine: Engine, check=None) -> list[str]:
    """Run ``engine`` to the end answering with its policy; the offers made, as text.
    ``check(engine, offer)``, if given, is called at each offer."""
    seen = []
    gen = engine.decisions()
    try:
        offer = next(gen)
        while True:
            seen.append(repr(offer))
            if check is not None:
                check(engine, offer)
            offer = gen.send(engine.policy.decide(offer, engine))
    except StopIteration:
        pass
    return seen


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
