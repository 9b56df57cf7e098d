"""Helpers shared by the test modules: the one place a test module imports helpers from.

Test modules import shared helpers only from here (``from helpers import ...``), never from
``conftest`` or from another ``test_*`` module (``tests/test_lint.py`` checks this);
``conftest.py`` holds only pytest configuration and fixtures. A helper used by a single module
stays in that module.

- Hand-built runs: ``make_trace`` (a trace from tuples), ``TierLatency`` (speed factors by tier,
  easy to work out by hand), ``TablePriority`` (a fixed priority per job), ``run_engine`` (a
  native run to the end).
- Engine checks: ``check_holdings`` (GPU ownership and counters agree), ``check_renewal_offer``,
  ``drive`` (answer every offer with the policy, checking at each), ``offers_seen`` (the offers
  of a run, as text).
- Random runs (hypothesis): ``small_runs`` (a small cluster, trace and config), ``POLICIES``
  (every shipped policy plus ``RandomPolicy`` and ``RandomMigratePolicy``, which stress every
  engine path).
- Environment episodes: ``play`` (one episode with a chooser), ``random_masked`` (a random
  valid action), ``assert_same_episode`` (two episodes step for step).
- Scripts: ``load_script`` (a script of the repository imported as a module).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
from hypothesis import strategies as st

from dallygym.sim.cluster import ClusterSpec, Tier, tier_of_shape
from dallygym.sim.engine import RUNNING, Engine, EngineConfig, run_policy
from dallygym.sim.latency import LatencyModel
from dallygym.sim.policies import POLICIES as SHIPPED
from dallygym.sim.policies import Policy

# -- hand-built runs ---------------------------------------------------------------------------


class TierLatency(LatencyModel):
    """Speed factor depends only on the tier of the shape: easy to compute by hand."""

    name = "tier-stub"

    def __init__(self, machine: float = 1.0, rack: float = 0.5, network: float = 0.25) -> None:
        self.factors = {Tier.MACHINE: machine, Tier.RACK: rack, Tier.NETWORK: network}

    def speed_factor(self, model, shape) -> float:
        if sum(map(sum, shape)) == 1:
            return 1.0
        return self.factors[tier_of_shape(shape)]


class TablePriority(Policy):
    """Fixed priority per job id (lower first); greedy acceptance."""

    name = "table"

    def __init__(self, priority: dict[int, float]) -> None:
        self.table = priority

    def priority(self, view, jobs):
        return np.array([self.table[int(view.job_id[j])] for j in jobs], dtype=float)


def make_trace(rows) -> pd.DataFrame:
    """rows: (job_id, arrival_s, num_gpus, total_iterations, iter_time_s[, model])."""
    records = []
    for row in rows:
        job_id, arrival, gpus, iters, iter_time, *model = row
        records.append(
            {
                "job_id": job_id,
                "arrival_s": float(arrival),
                "num_gpus": gpus,
                "model": model[0] if model else "resnet50",
                "total_iterations": iters,
                "iter_time_s": float(iter_time),
            }
        )
    return pd.DataFrame.from_records(records)


def run_engine(trace, spec, policy=None, latency=None, **config) -> Engine:
    engine = Engine(trace, spec, policy or Policy(), latency or TierLatency(), EngineConfig(**config))
    return run_policy(engine)


# -- engine checks -----------------------------------------------------------------------------


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


# -- random runs -------------------------------------------------------------------------------


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


# -- environment episodes ----------------------------------------------------------------------


def play(env, seed: int, choose) -> list:
    """Run one episode; ``choose(rng, mask)`` picks actions. Returns (obs, reward, term, info)."""
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    out = [(obs, 0.0, False, info)]
    done = env.unwrapped._done
    while not done:
        obs, reward, terminated, truncated, info = env.step(choose(rng, info["action_mask"]))
        out.append((obs, reward, terminated, info))
        done = terminated or truncated
    return out


def random_masked(rng, mask):
    return int(rng.choice(np.flatnonzero(mask)))


def assert_same_episode(first, second) -> None:
    """Two ``(steps of play(), collect() of the engine)`` are the same episode, step for step."""
    (fast, a), (plain, b) = first, second
    assert len(fast) == len(plain)
    for (obs_a, r_a, _, info_a), (obs_b, r_b, _, info_b) in zip(fast, plain):
        assert r_a == r_b and np.array_equal(info_a["action_mask"], info_b["action_mask"])
        assert all(np.array_equal(obs_a[key], obs_b[key]) for key in obs_a)
    assert a.summary == b.summary and a.jobs.equals(b.jobs)


# -- scripts -----------------------------------------------------------------------------------


def load_script(relative: str, name: str):
    """A script of the repository (``benchmarks/compare.py``, ...) imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_run_args(env_id: str, total: int = 96, n_steps: int = 48) -> list[str]:
    """The training settings of a run of seconds (``train`` and ``train-sweep``): the small trace
    on 2 racks of 2 machines, ``total`` steps over two environments, ``n_steps`` preferred per
    rollout."""
    return [
        "--env-id",
        env_id,
        "--trace",
        "gen:small",
        "--racks",
        "2",
        "--machines-per-rack",
        "2",
        "--total-timesteps",
        str(total),
        "--n-envs",
        "2",
        "--n-steps",
        str(n_steps),
    ]


def tiny_train_args(env_id: str, out, *extra: str, total: int = 96, n_steps: int = 48) -> list[str]:
    """``dallygym train`` arguments for a run of seconds (:func:`tiny_run_args`), no validation, no
    checkpoint, no progress bar, written to ``out``; ``extra`` appended (a later flag wins)."""
    return [
        "train",
        *tiny_run_args(env_id, total, n_steps),
        "--eval-freq-steps",
        "1000000",
        "--checkpoint-freq-steps",
        "1000000",
        "--no-progress",
        "--out",
        str(out),
        *extra,
    ]
