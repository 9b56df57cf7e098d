"""The seeded random baseline: reproducible, and it never stalls."""

from __future__ import annotations

import numpy as np
from helpers import TierLatency, make_trace, run_engine

from dallygym.sim.cluster import ClusterSpec, Tier
from dallygym.sim.engine import DONE, Engine, EngineConfig, Offer, run_policy
from dallygym.sim.metrics import collect
from dallygym.sim.policies.random_policy import RandomPolicy


def _offer(tiers, best_possible):
    return Offer(0, 0, 4, 0.0, 0.0, tuple(tiers), best_possible)


def _answers(offer, seeds=range(200)):
    out = set()
    for seed in seeds:
        policy = RandomPolicy()
        policy.reset(None, np.random.default_rng(seed))
        out.add(policy.decide(offer, None))
    return out


def test_waits_only_while_a_better_tier_could_come():
    # Best possible tier free now: waiting is masked out, every offered tier can be drawn.
    assert _answers(_offer([Tier.MACHINE, Tier.RACK, Tier.NETWORK], Tier.MACHINE)) == {
        Tier.MACHINE,
        Tier.RACK,
        Tier.NETWORK,
    }
    # Only worse tiers free: waiting is one of the answers.
    only_worse = _offer([Tier.RACK, Tier.NETWORK], Tier.MACHINE)
    assert _answers(only_worse) == {None, Tier.RACK, Tier.NETWORK}


def _trace(n=40, seed=7):
    rng = np.random.default_rng(seed)
    rows = [
        (i, float(rng.integers(0, 20)) * 500.0, int(rng.choice([1, 2, 4, 8, 12])), int(rng.integers(50, 3000)), 1.0)
        for i in range(n)
    ]
    return make_trace(rows)


def test_same_seed_same_run_and_seeds_differ():
    spec = ClusterSpec(2, 2, 4)
    runs = [collect(run_engine(_trace(), spec, RandomPolicy(), lease_s=1000.0, seed=s)) for s in (1, 1, 2)]
    assert runs[0].jobs.equals(runs[1].jobs) and runs[0].summary == runs[1].summary
    assert not runs[0].jobs.equals(runs[2].jobs)


def test_never_stalls_on_an_idle_cluster():
    # max_idle_rounds=1: the engine raises if jobs wait on an idle cluster for more than one
    # round with nothing left to arrive; a policy that may wait on an idle cluster would trip it.
    spec = ClusterSpec(2, 2, 4)
    for seed in range(20):
        engine = Engine(
            _trace(seed=seed),
            spec,
            RandomPolicy(),
            TierLatency(),
            EngineConfig(lease_s=300.0, seed=seed, max_idle_rounds=1),
        )
        assert (run_policy(engine).state == DONE).all()
