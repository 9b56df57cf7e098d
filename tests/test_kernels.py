"""The compiled kernels (dallygym.sim.kernels) give the Python reference's answers, bit for bit."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import numba
import numpy as np
import pytest
from helpers import POLICIES, TierLatency, assert_same_episode, make_trace, offers_seen, play, random_masked, small_runs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dallygym
from dallygym.sim import kernels
from dallygym.sim.cluster import _IDLE, ClusterError, ClusterSpec, ClusterState, Tier, canonical_shape
from dallygym.sim.engine import RENEWAL_MODES, Engine, EngineConfig, run_policy
from dallygym.sim.latency import get_latency_model
from dallygym.sim.metrics import collect
from dallygym.sim.policies import Policy, make_policy, protected
from dallygym.sim.policies.base import auto_accept_of, priority_keys_of, starts_in_batches
from dallygym.sim.policies.dally import DallyConsolidatedPolicy, DallyManualPolicy, DallyPolicy
from dallygym.sim.policies.protected import ProtectedRemainingPolicy
from dallygym.sim.policies.smallest_demand import SmallestDemandRemainingPolicy
from dallygym.sim.policies.tiresias import TiresiasPolicy
from dallygym.sim.trace import load_trace


def cluster_in_state(racks, mpr, gpm, owners, marks, compiled) -> ClusterState:
    """A cluster whose GPU owners and round-boundary marks are given, counters made to match
    (a marked GPU is free and not idle)."""
    spec = ClusterSpec(racks=racks, machines_per_rack=mpr, gpus_per_machine=gpm)
    c = ClusterState(spec)
    c.compiled = compiled
    owner = np.array(owners, dtype=np.int64)
    mark = np.where(owner == -1, np.array(marks, dtype=np.int64), _IDLE)
    c.owner[:] = owner
    c.mark[:] = mark
    free = owner == -1
    c.free_per_machine[:] = free.reshape(-1, gpm).sum(axis=1)
    c.idle_per_machine[:] = (free & (mark == _IDLE)).reshape(-1, gpm).sum(axis=1)
    c.free_per_rack[:] = c.free_per_machine.reshape(racks, mpr).sum(axis=1)
    c.free_total = int(free.sum())
    c.marks_active = bool((mark != _IDLE).any())
    return c


def outcome(c: ClusterState, need: int, tier: Tier):
    try:
        return c.place(need, tier).tolist()
    except ClusterError as e:
        return f"error: {e}"


@st.composite
def states(draw):
    racks = draw(st.integers(1, 4))
    mpr = draw(st.integers(1, 4))
    gpm = draw(st.integers(1, 8))
    n = racks * mpr * gpm
    owners = draw(st.lists(st.integers(-1, 5), min_size=n, max_size=n))
    # Ranks of lease-expired holders (several GPUs share a rank), or idle.
    marks = draw(st.lists(st.one_of(st.just(_IDLE), st.integers(0, 6)), min_size=n, max_size=n))
    return racks, mpr, gpm, owners, marks


@settings(max_examples=300, deadline=None)
@given(states())
def test_compiled_placement_is_the_reference_placement(state):
    racks, mpr, gpm, owners, marks = state
    ref = cluster_in_state(racks, mpr, gpm, owners, marks, compiled=False)
    fast = cluster_in_state(racks, mpr, gpm, owners, marks, compiled=True)
    for tier in Tier:
        for need in range(1, racks * mpr * gpm + 1):
            assert outcome(fast, need, tier) == outcome(ref, need, tier), (tier, need)


def test_compiled_placement_prefers_idle_then_the_latest_visited_holder():
    # One rack, two machines of 4 GPUs. Machine 0: 2 idle GPUs, 2 marked with rank 5;
    # machine 1: 3 GPUs marked with ranks 6, 9, 8 and one held.
    owners = [-1, -1, -1, -1, -1, -1, -1, 7]
    marks = [_IDLE, 5, _IDLE, 5, 6, 9, 8, _IDLE]
    for compiled in (False, True):
        c = cluster_in_state(1, 2, 4, owners, marks, compiled=compiled)
        # 2 GPUs: machine 0 holds them idle (nobody displaced), lowest slots first.
        assert c.place(2, Tier.MACHINE).tolist() == [0, 2]
        # 3 GPUs: either machine displaces someone. On machine 0 the job of rank 5 (one GPU);
        # on machine 1 the jobs of ranks 9, 8 and 6 -- all visited after rank 5, so machine 1
        # displaces only lower-priority jobs: its GPUs, latest visited first.
        assert c.place(3, Tier.MACHINE).tolist() == [5, 6, 4]


@pytest.mark.parametrize("tier", list(Tier))
def test_impossible_placement_gives_the_reference_error(tier):
    c = cluster_in_state(2, 2, 2, [0, 0, 0, 0, 0, 0, 0, -1], [_IDLE] * 8, compiled=True)
    with pytest.raises(ClusterError):
        c.place(2, tier)


# --- whole runs: the compiled engine is the reference engine ---------------------------------

#: Every per-job array an engine keeps (the results and what policies read).
JOB_ARRAYS = (
    "state",
    "done_iters",
    "speed",
    "rate",
    "seg_start_s",
    "seg_done0",
    "hold_start_s",
    "finish_s",
    "run_s",
    "overhead_s",
    "tier_s",
    "tier",
    "starve_anchor_s",
    "first_start_s",
    "end_s",
    "preemptions",
    "migrations",
    "upgrades",
    "speed_seen",
)


def assert_same_run(fast: Engine, plain: Engine) -> None:
    """Two finished engines made the same run: every per-job array bit for bit, the same GPU
    holders, areas, rounds, passes and results."""
    for name in JOB_ARRAYS:
        assert np.array_equal(getattr(fast, name), getattr(plain, name), equal_nan=True), name
    assert np.array_equal(fast.cluster.owner, plain.cluster.owner)
    assert [None if g is None else g.tolist() for g in fast.gpus] == [
        None if g is None else g.tolist() for g in plain.gpus
    ]
    assert [None if g is None else g.tolist() for g in fast.last_gpus] == [
        None if g is None else g.tolist() for g in plain.last_gpus
    ]
    assert (fast.in_system_area_s, fast.comm_area_s, fast.rounds, fast.passes) == (
        plain.in_system_area_s,
        plain.comm_area_s,
        plain.rounds,
        plain.passes,
    )
    a, b = collect(fast), collect(plain)
    assert a.summary == b.summary and a.jobs.equals(b.jobs) and a.timeline.equals(b.timeline)


def offers_and_engine(monkeypatch, compiled, trace, spec, policy_name, config):
    monkeypatch.setattr(ClusterState, "compiled", compiled)
    engine = Engine(trace, spec, POLICIES[policy_name](), TierLatency(), config)
    return offers_seen(engine), engine


@pytest.mark.parametrize("renewal", RENEWAL_MODES)
@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(run=small_runs())
def test_compiled_engine_runs_exactly_as_the_reference(monkeypatch, run, policy_name, renewal):
    """Same offers, and the same run (assert_same_run): per-job arrays bit for bit, GPU
    holders, results."""
    spec, trace, config = run
    config = dataclasses.replace(config, renewal=renewal)
    seen_a, fast = offers_and_engine(monkeypatch, True, trace, spec, policy_name, config)
    seen_b, plain = offers_and_engine(monkeypatch, False, trace, spec, policy_name, config)
    assert seen_a == seen_b
    assert_same_run(fast, plain)


def native_run(monkeypatch, compiled, trace, spec, policy_name, config) -> Engine:
    monkeypatch.setattr(ClusterState, "compiled", compiled)
    return run_policy(Engine(trace, spec, POLICIES[policy_name](), TierLatency(), config))


@pytest.mark.parametrize("renewal", RENEWAL_MODES)
@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(run=small_runs())
def test_native_runs_accepting_offers_unasked_are_the_runs_asking_every_offer(monkeypatch, run, policy_name, renewal):
    """run_policy lets the engine accept the offers the policy declares it takes at their best
    tier (compiled passes take many turns without Python). The run is the one in which every
    offer is asked, and the compiled run is the reference run."""
    spec, trace, config = run
    config = dataclasses.replace(config, renewal=renewal)
    _, asked = offers_and_engine(monkeypatch, True, trace, spec, policy_name, config)
    fast = native_run(monkeypatch, True, trace, spec, policy_name, config)
    plain = native_run(monkeypatch, False, trace, spec, policy_name, config)
    assert_same_run(fast, plain)
    assert_same_run(fast, asked)


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(run=small_runs())
def test_a_policy_declaring_auto_accept_answers_those_offers_with_their_best_tier(monkeypatch, run, policy_name):
    """Policy.auto_accept is a claim about decide(): check it on every offer of a run."""
    spec, trace, config = run
    engine = Engine(trace, spec, POLICIES[policy_name](), TierLatency(), config)
    rule = auto_accept_of(engine.policy)

    def check(engine, offer):
        if offer.is_renewal or rule is None:
            return
        if rule == "best" or not offer.is_choice:
            assert engine.policy.decide(offer, engine) == offer.best_tier, offer
        elif rule == "best-possible-only":  # and the rest declined
            assert engine.policy.decide(offer, engine) is None, offer

    offers_seen(engine, check)


def test_what_a_policy_declares_holds_only_for_the_methods_it_declares_it_of():
    class OwnDecide(DallyPolicy):
        def decide(self, offer, view):
            return None

    class OwnOnStart(Policy):
        def on_start(self, view, job, tier, starvation_s, now_s):
            pass

    class OwnPriority(DallyManualPolicy):
        def priority(self, view, jobs):
            return -view.arrival_s[jobs]

    assert auto_accept_of(Policy()) == "best" and auto_accept_of(DallyManualPolicy()) == "best-possible"
    assert (
        auto_accept_of(DallyConsolidatedPolicy()) == auto_accept_of(ProtectedRemainingPolicy()) == "best-possible-only"
    )
    assert auto_accept_of(OwnDecide()) is None and auto_accept_of(TiresiasPolicy()) is None
    patched = DallyPolicy()
    patched.decide = lambda offer, view: None
    assert auto_accept_of(patched) is None
    assert starts_in_batches(Policy()) and starts_in_batches(DallyPolicy())
    assert not starts_in_batches(OwnOnStart()) and not starts_in_batches(TiresiasPolicy())  # hook; own place
    assert priority_keys_of(Policy()) == "arrival" and priority_keys_of(DallyManualPolicy()) == "nw_sens"
    assert priority_keys_of(OwnPriority()) is None and priority_keys_of(TiresiasPolicy()) is None
    assert priority_keys_of(ProtectedRemainingPolicy()) == "protected-remaining"

    class NetWithoutParameters(Policy):
        priority_keys = "net"

        def priority(self, view, jobs):
            return view.arrival_s[jobs]

    with pytest.raises(ValueError, match="needs a compiled_keys"):
        priority_keys_of(NetWithoutParameters())
    assert priority_keys_of(SmallestDemandRemainingPolicy()) == "demand-remaining"

    class OwnRemaining(ProtectedRemainingPolicy):
        def priority(self, view, jobs):
            return -super().priority(view, jobs)

    assert priority_keys_of(OwnRemaining()) is None


def test_the_kernels_remaining_estimate_has_the_policy_s_constants():
    assert kernels.NEVER_MULTI == protected.NEVER_RUN_MULTI_MACHINE_NW_SENS
    assert kernels.PROTECT == protected.PROTECT_FRACTION


def test_a_cache_made_from_other_sources_is_dropped_whole(tmp_path):
    # numba checks a cached kernel against its own module only, but a kernel keeps the code of
    # the other modules' kernels it calls: a change to any module must drop every cached kernel.
    cached = [tmp_path / "events.run_events-186.py311.nbi", tmp_path / "passes.open_pass-600.py311.1.nbc"]
    other = tmp_path / "elsewhere.f-1.py311.nbi"
    for path in [*cached, other]:
        path.write_text("")
    assert kernels.drop_stale_cache(str(tmp_path), "digest-a")  # no stamp yet: dropped
    assert not any(path.exists() for path in cached) and other.exists()
    for path in cached:
        path.write_text("")
    assert not kernels.drop_stale_cache(str(tmp_path), "digest-a")  # made from these sources: kept
    assert all(path.exists() for path in cached)
    assert kernels.drop_stale_cache(str(tmp_path), "digest-b")  # a source changed: dropped
    assert not any(path.exists() for path in cached)
    assert (tmp_path / kernels.STAMP_FILE).read_text() == "digest-b"


def test_the_sources_digest_follows_every_kernel_module(tmp_path):
    module_dir = Path(kernels.__file__).parent
    for name in kernels._MODULES:
        shutil.copy(module_dir / f"{name}.py", tmp_path / f"{name}.py")
    before = kernels.sources_digest(str(tmp_path))
    assert before == kernels.sources_digest(str(module_dir))
    for name in kernels._MODULES:
        path = tmp_path / f"{name}.py"
        text = path.read_text()
        path.write_text(text + "\n")
        assert kernels.sources_digest(str(tmp_path)) != before, name
        path.write_text(text)


def test_an_unknown_auto_accept_is_refused():
    spec = ClusterSpec(1, 1, 2)
    engine = Engine(make_trace([(1, 0.0, 1, 10, 1.0)]), spec, Policy(), TierLatency())
    with pytest.raises(ValueError, match="auto_accept"):
        next(engine.decisions(auto_accept="always"))
    assert run_policy(engine).finished == 1  # a refused call does not use the engine up


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**16),
    lease_picks=st.sampled_from(["waiting", "all"]),
    guard=st.sampled_from([{}, {"guard_leases": 0.25, "guard_waiting": True}]),
    renewal=st.sampled_from(["upgrade", "keep", "rebid"]),
)
def test_compiled_picked_passes_are_the_reference_episode(monkeypatch, seed, lease_picks, guard, renewal):
    """DallyQueue (agent picks) under random masked picks: the same episode, step for step."""

    def episode(compiled):
        monkeypatch.setattr(ClusterState, "compiled", compiled)
        env = gym.make("DallyQueueSmall-v0", lease_picks=lease_picks, renewal=renewal, **guard)
        return play(env, seed, random_masked), dallygym.sim.metrics.collect(env.unwrapped.engine)

    assert_same_episode(episode(True), episode(False))


@pytest.mark.parametrize(
    ("env_id", "options"),
    [
        ("DallyQueue-v0", {}),  # the offer rule's timers, 512 candidates shown
        ("DallyQueueSmall-v0", {"sensitivity": "observed", "max_candidates": 3}),  # jobs beyond the window
        ("DallyQueueSmall-v0", {"sensitivity": "oracle", "offer_rule": "tiresias"}),  # no timers
        ("DallyQueueSmall-v0", {"offer_rule": "protected-remaining", "reward": "makespan"}),
        ("DallyQueueSmall-v0", {"offer_rule": "protected-remaining", "limit_features": True}),
    ],
)
def test_compiled_queue_observation_and_reward_are_the_reference_ones(monkeypatch, env_id, options):
    """DallyQueue's job features (kernels.queue_demands / queue_job_features) and makespan bound
    (kernels.makespan_bound) against the numpy reference: a whole random masked episode with the
    same observations, rewards and masks, bit for bit."""

    def episode(compiled):
        monkeypatch.setattr(ClusterState, "compiled", compiled)
        env = gym.make(env_id, **options)
        return play(env, 5, random_masked), dallygym.sim.metrics.collect(env.unwrapped.engine)

    fast, plain = episode(True), episode(False)
    assert len(fast[0]) > 20
    assert_same_episode(fast, plain)


def test_an_offer_to_a_preempted_lease_is_asked_after_the_kernel_preempted_it(monkeypatch):
    """A lease-expired job whose GPUs were claimed is preempted by the compiled loop, which then
    stops to ask it its offer (before, Python preempted it): at every question the same offer,
    the same unvisited leases (never the asked job) and the same job state as the reference."""
    spec = ClusterSpec(8)
    trace = load_trace("batch-500", cluster=spec)

    def questions(compiled):
        monkeypatch.setattr(ClusterState, "compiled", compiled)
        engine = Engine(trace, spec, make_policy("dally"), get_latency_model("dally-paper"), EngineConfig())
        rng = np.random.default_rng(4)
        seen = []
        gen = engine.decisions(auto_accept="best-possible")
        try:
            offer = next(gen)
            while True:
                j = offer.job
                seen.append(
                    (repr(offer), sorted(engine.expired_unvisited), int(engine.state[j]), int(engine.preemptions[j]))
                )
                assert j not in engine.expired_unvisited
                # mostly waiting (an agent early in training), now and then a random tier
                offer = gen.send(offer.tiers[rng.integers(len(offer.tiers))] if rng.random() < 0.1 else None)
        except StopIteration:
            pass
        return seen, engine

    (fast, a), (plain, b) = questions(True), questions(False)
    assert fast == plain
    assert_same_run(a, b)
    # Offers to jobs preempted at that very boundary were asked (waiting since now).
    assert sum(1 for text, _, state, preempted in fast if preempted and "starvation_s=0," in text) > 5


def test_queue_job_features_of_a_hand_made_state():
    """kernels.queue_job_features on two jobs whose features are worked out by hand."""
    n = 2
    jobf = np.zeros((len(kernels.JOB_FLOATS), n))
    jobi = np.zeros((len(kernels.JOB_INTS), n), dtype=np.int64)
    # Job 0: 4 GPUs (best tier MACHINE), ran 100 s for 50 of its 200 iterations of 1 s: nw 0.5,
    # remaining ideal 150 s, estimate 300 s; running at RACK, preempted 30 times; waited since 40.
    # Job 1: 16 GPUs (best RACK) never run: 100 iterations of 2 s, estimate 200 / 0.1 = 2,000 s.
    jobi[kernels.I_GPUS] = (4, 16)
    jobi[kernels.I_BEST] = (0, 1)
    jobi[kernels.I_TIER] = (1, -1)
    jobi[kernels.I_PREEMPTIONS] = (30, 0)
    jobf[kernels.F_RUN] = (100.0, 0.0)
    jobf[kernels.F_DONE] = (50.0, 0.0)
    jobf[kernels.F_TOTAL] = (200.0, 100.0)
    jobf[kernels.F_ITER_TIME] = (1.0, 2.0)
    jobf[kernels.F_ANCHOR] = (40.0, 10.0)
    state = np.array([2, 1], dtype=np.int8)  # running, waiting
    size = np.array([0.25, 0.5])
    free_of = np.zeros(17, dtype=bool)
    free_of[16] = True
    limits = np.zeros((17, 2))
    limits[4] = (50.0, 70.0)  # job 0 has starved 60 s: past the machine timer, not the rack one
    limits[16] = (0.0, 100.0)  # job 1, 90 s
    jobs = np.zeros((3, 20), dtype=np.float32)
    times = np.empty((4, 2))
    kernels.queue_job_features(
        np.array([0, 1]),
        100.0,
        10.0,
        64.0,
        8,
        0.1,
        1000.0,
        jobf,
        jobi,
        state,
        size,
        free_of,
        limits,
        True,
        jobs,
        times,
        np.zeros(3),
    )
    assert times.tolist() == [[6.0, 9.0], [15.0, 20.0], [30.0, 200.0], [0.625, 0.0]]  # / lease 10 s
    expected = np.zeros((3, 20), dtype=np.float32)
    expected[0, [0, 1, 6, 7, 11, 12, 13, 17, 19]] = (0.25, 1, 0.5, 0.25, 1.0, 1, 2 / 3, 1, 300 / 2000)
    expected[1, [0, 2, 4, 17, 19]] = (0.5, 1, 1, 1, 1.0)
    assert np.array_equal(jobs, expected)


def test_makespan_bound_of_a_hand_made_state():
    jobf = np.zeros((len(kernels.JOB_FLOATS), 3))
    jobf[kernels.F_FINISH] = (500.0, 800.0, 0.0)
    jobf[kernels.F_TOTAL, 2], jobf[kernels.F_ITER_TIME, 2] = 100.0, 3.0  # 300 s ideal, at speed 0.5
    none = np.zeros(0, dtype=np.int64)
    speed = np.array([1.0, 1.0, 0.5])
    assert kernels.makespan_bound(100.0, np.array([0, 1]), np.array([2]), jobf, speed) == 800.0
    assert kernels.makespan_bound(300.0, np.array([0, 1]), np.array([2]), jobf, speed) == 900.0
    assert kernels.makespan_bound(900.0, np.array([0, 1]), none, jobf, speed) == 900.0
    assert kernels.makespan_bound(0.0, none, none, jobf, speed) == 0.0


def test_offer_observation_on_a_state_worked_out_by_hand():
    """kernels.offer_observation on one job: 4 GPUs of 16 (2 racks x 2 machines x 4 GPUs),
    half its 100 iterations of 36 s done in 3,600 s held (Nw_sens 0.5), 3 preemptions; offered
    the rack and network tiers while it holds the network one; a 1-hour lease."""
    lease, long_s = 3600.0, 10_000 * 3600.0
    log_long, log_1000 = math.log1p(10_000), math.log1p(1000)
    consts = np.array([lease, long_s, log_long, log_1000, 16, 10, 100.0, 4, 2, 4, 8])
    static = np.array([[math.log2(5) / math.log2(17), 1.0, 0.0, 0.0]])
    jobf = np.zeros((len(kernels.JOB_FLOATS), 1))
    jobi = np.zeros((len(kernels.JOB_INTS), 1), dtype=np.int64)
    jobf[kernels.F_RUN, 0], jobf[kernels.F_DONE, 0] = 3600.0, 50.0
    jobf[kernels.F_TOTAL, 0], jobf[kernels.F_ITER_TIME, 0] = 100.0, 36.0
    jobi[kernels.I_GPUS, 0], jobi[kernels.I_PREEMPTIONS, 0] = 4, 3
    free_pm, free_pr = np.array([3, 1, 2, 0]), np.array([4, 2])
    out = np.full(32, -1.0, dtype=np.float32)
    now = 100.0 + 2.5 * lease
    kernels.offer_observation(
        out,
        consts,
        static,
        jobf,
        jobi,
        free_pm,
        free_pr,
        0,
        now,
        lease,
        0.0,
        math.inf,
        0b110,
        2,
        0.0,
        0.7,
        0.4,
        3,
        9,
        2,
        4,
        6,
    )

    def shown(t):
        return np.float32(math.log1p(t / lease) / log_long)

    expected = np.array(
        [
            static[0, 0],
            1,
            0,
            0,
            shown(lease),
            0.5,
            0.5,
            shown(4 * 3600.0 / 16),
            3 / 20,
            shown(50 * 36.0),
            0,
            1,
            1,  # rack and network offered
            0.0,
            0.7,
            0.4,
            0.0,
            1.0,
            1,
            0,  # T_Mc = 0 (shown 0, passed), T_Rk infinite (shown 1, not passed)
            6 / 16,
            0 / 4,
            1 / 2,
            3 / 4,
            4 / 8,  # no machine has 4 free GPUs, rack 0 has (3 + 1)
            math.log1p(3) / log_1000,
            9 / 16 / 10,
            math.log1p(2) / log_1000,
            (10 - 4) / 10,
            shown(2.5 * lease),
            0.5,
            1.0,  # half a lease into the round; holds the network tier
        ],
        dtype=np.float32,
    )
    assert out.tobytes() == expected.tobytes()
    out[:] = -1.0  # no time at all shows as 0, and a time of 10,000 leases or more as 1
    kernels.offer_observation(
        out,
        consts,
        static,
        jobf,
        jobi,
        free_pm,
        free_pr,
        0,
        100.0,
        0.0,
        long_s,
        math.nan,
        0b001,
        -1,
        0.0,
        0.0,
        0.0,
        0,
        0,
        0,
        10,
        0,
    )
    assert (out[4], out[16], out[17], out[29], out[30], out[31]) == (0.0, 1.0, 0.0, 0.0, 0.0, 0.0)
    assert (out[10], out[11], out[12], out[28]) == (1.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("env_id", "agent", "options"),
    [
        ("DallySmall-v0", "random", {}),
        ("Dally-v0", "random", {"sensitivity": "observed"}),
        ("Dally-v0", "dally", {"sensitivity": "oracle"}),  # the tuned timers of features 16-19
        ("DallySmall-v0", "tiresias", {"priority": "tiresias", "renewal": "rebid"}),  # renewal offers, no timers
    ],
)
def test_compiled_dally_env_episode_is_the_reference_episode(monkeypatch, env_id, agent, options):
    """A whole episode on the offer environment both ways: with the kernels, the observation
    comes from kernels.offer_observation; without, from OfferObservation.observe_reference. The same
    observations, rewards and infos, bit for bit."""

    def episode(compiled):
        monkeypatch.setattr(ClusterState, "compiled", compiled)
        env = gym.make(env_id, **options)
        rng = np.random.default_rng(7)
        heuristic = None if agent == "random" else dallygym.heuristic_agent(agent, env)
        obs, info = env.reset(seed=3)
        rewards, observations, infos = [], [obs], []
        done = False
        while not done:
            if heuristic is None:
                action = rng.choice(np.flatnonzero(env.unwrapped.action_masks()))
            else:
                action = int(heuristic.predict(obs)[0])
            obs, reward, terminated, truncated, info = env.step(action)
            rewards.append(reward)
            observations.append(obs)
            infos.append({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in info.items()})
            done = terminated or truncated
        return rewards, np.array(observations), infos

    (ra, oa, ia), (rb, ob, ib) = episode(True), episode(False)
    assert len(ra) > 3
    assert ra == rb and np.array_equal(oa, ob) and ia == ib
    assert oa.dtype == np.float32 and oa.tobytes() == ob.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 8), st.data())
def test_shape_of_counts_gpus_per_machine_and_rack(racks, mpr, gpm, data):
    """ClusterSpec.shape_of (compiled counting) against the definition: per rack, the GPU count
    of each machine used, by bincount."""
    spec = ClusterSpec(racks, mpr, gpm)
    gpus = np.array(
        data.draw(st.lists(st.integers(0, spec.num_gpus - 1), min_size=1, max_size=spec.num_gpus, unique=True)),
        dtype=np.int64,
    )
    per_rack = np.bincount(gpus // gpm, minlength=spec.num_machines).reshape(racks, mpr)
    assert spec.shape_of(gpus) == canonical_shape(per_rack.tolist())


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 8), st.data())
def test_a_shape_code_names_the_canonical_shape_and_no_other(racks, mpr, gpm, data):
    """kernels.shape_code (how the compiled pass finds a placement's speed factor) is the flat
    form of cluster.canonical_shape -- racks largest first in tuple order, each rack's machine
    counts largest first, a 0 after each rack -- so two placements get the same code exactly
    when they have the same shape."""
    spec = ClusterSpec(racks, mpr, gpm)
    draw_gpus = st.lists(st.integers(0, spec.num_gpus - 1), min_size=1, max_size=spec.num_gpus, unique=True)
    a, b = (np.array(data.draw(draw_gpus), dtype=np.int64) for _ in range(2))
    code_a, code_b = kernels.shape_code(a, gpm, mpr), kernels.shape_code(b, gpm, mpr)
    assert code_a.tolist() == [c for rack in spec.shape_of(a) for c in (*rack, 0)]
    assert (code_a.tolist() == code_b.tolist()) == (spec.shape_of(a) == spec.shape_of(b))


def test_shape_code_orders_racks_as_python_orders_tuples():
    """Worked by hand, 3 racks x 3 machines x 4 GPUs: racks holding (2, 1), (2, 1, 1) and (3)
    GPUs per machine; in tuple order (3,) > (2, 1, 1) > (2, 1)."""
    gpus = np.array([0, 1, 4, 12, 13, 16, 20, 24, 25, 26], dtype=np.int64)
    assert kernels.shape_code(gpus, 4, 3).tolist() == [3, 0, 2, 1, 1, 0, 2, 1, 0]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3000), st.integers(0, 2**32 - 1), st.integers(-6, 6))
def test_compiled_sum_is_numpy_pairwise_sum_bit_for_bit(n, seed, scale):
    values = np.random.default_rng(seed).random(n) * 10.0**scale
    assert kernels.pairwise_sum(values, 0, n) == np.add.reduce(values)


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 400), st.integers(0, 2**32 - 1), st.integers(-3, 6), st.booleans())
def test_compiled_tuned_timer_is_the_numpy_formula_bit_for_bit(n, seed, scale, repeats):
    """kernels.mean_plus_two_sd (the auto-tuner's timer) against its numpy definition, on
    starvation times of any spread, with ties (repeats) or without, in blocks past 128."""
    from dallygym.sim.policies.dally import _tuned_reference

    rng = np.random.default_rng(seed)
    values = rng.exponential(10.0**scale, n)
    if repeats:
        values = rng.choice(values[: max(2, n // 8)], n)
    assert kernels.mean_plus_two_sd(values) == _tuned_reference(values)


def test_compiled_event_loop_calls_batched_hooks_with_the_arguments_of_each_start(monkeypatch):
    """The compiled event loop calls Dally's on_start (batched) when it returns to Python, maybe
    several events after the start: with that start's tier, starvation and time -- a job that
    has finished by then included (its tier is no longer its current one). The tuner's records,
    hence every timer and the whole run, are the reference's."""
    from dallygym.sim.policies import dally

    record, record_many = dally.AutoTuner.record, dally.AutoTuner.record_many

    def run(compiled):
        records = []

        def spy(self, tier, num_gpus, starvation_s, now_s):
            records.append((int(tier), int(num_gpus), float(starvation_s), float(now_s)))
            return record(self, tier, num_gpus, starvation_s, now_s)

        def spy_many(self, tiers, num_gpus, starvation_s, now_s):
            records.extend(
                zip(
                    np.asarray(tiers).tolist(),
                    np.asarray(num_gpus).tolist(),
                    np.asarray(starvation_s, dtype=float).tolist(),
                    np.asarray(now_s, dtype=float).tolist(),
                )
            )
            return record_many(self, tiers, num_gpus, starvation_s, now_s)

        monkeypatch.setattr(dally.AutoTuner, "record", spy)
        monkeypatch.setattr(dally.AutoTuner, "record_many", spy_many)
        monkeypatch.setattr(ClusterState, "compiled", compiled)
        spec = ClusterSpec(2)
        engine = Engine(
            load_trace("batch-500", cluster=spec),
            spec,
            make_policy("dally"),
            get_latency_model("dally-paper"),
            EngineConfig(),
        )
        run_policy(engine)
        return records, engine

    (fast_records, fast), (plain_records, plain) = run(True), run(False)
    assert len(fast_records) > 1000 and fast_records == plain_records
    assert_same_run(fast, plain)


def test_vector_key_is_equal_for_equal_vectors_and_never_zero():
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = rng.integers(0, 9, size=int(rng.integers(1, 40)))
        assert kernels.vector_key(v) == kernels.vector_key(v.copy()) != 0
    assert kernels.vector_key(np.zeros(8, dtype=np.int64)) != 0
    assert kernels.vector_key(np.array([1, 0], dtype=np.int64)) != kernels.vector_key(np.array([0, 1], dtype=np.int64))


def test_compiled_loop_keeps_declined_upgrades_as_the_reference_does(monkeypatch):
    """An agent that declines every upgrade offer and takes the best tier of any other: the
    compiled loop knows a declined offer by the key of the free GPUs it was made with
    (Engine._declined_key). With no job waiting, it hands a boundary to Python only when that
    key matches (the same GPUs: no new offer, the rounds are skipped) and runs it itself
    otherwise. The episode is the reference's, decision for decision."""
    from dallygym.sim.engine import Engine as E

    def episode(compiled):
        monkeypatch.setattr(ClusterState, "compiled", compiled)
        handed = []
        event = E._next_event

        def spy(self):
            handed.append(self.now_s)
            return event(self)

        monkeypatch.setattr(E, "_next_event", spy)
        env = gym.make("Dally-v0")
        obs, info = env.reset(seed=2)
        base = env.unwrapped
        done, declined, seen = base._done, 0, []
        while not done:
            offer = base.offer
            seen.append((offer.job, offer.now_s, offer.tiers, offer.renewal))
            if offer.renewal == "upgrade":
                declined += 1
                action = 0
            else:
                action = 1 + int(offer.tiers[0])
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        return seen, declined, handed, info["summary"], base.engine

    seen_a, declined, handed, summary_a, fast = episode(True)
    seen_b, _, _, summary_b, plain = episode(False)
    assert declined > 0 and len(handed) > 0  # both paths exercised
    assert seen_a == seen_b and summary_a == summary_b
    assert_same_run(fast, plain)


def test_accepted_offers_are_started_by_the_kernel_or_by_python_as_in_the_reference(monkeypatch):
    """An offer the agent accepts is handed back to the compiled loop (LI_ANSWER), which
    starts the job from that very turn; where the start needs what only Python has (a shape
    not seen yet) the loop stops there and Python makes it. After a declined question the
    next turns are taken in Python up to the next accepted offer (or lease-expired job), which
    goes back to the loop the same way. All of these happen in a random agent's episode, which is the
    reference episode decision for decision."""
    from dallygym.sim.engine import turns

    made = {"kernel": 0, "python": 0, "after a decline": 0}
    run_events = kernels.run_events

    class TurnsSpy(turns.TurnsToHandOver):
        def step(self, engine, value):
            decision = super().step(engine, value)
            made["after a decline"] += decision is None and engine._ret is not None  # (handed over)
            return decision

    def spy(*args):
        loop = args[5]  # (the loop's bundle: sets, wkey, li, ...)
        li = loop[2]
        assert li.shape == (kernels.LI_SIZE,)
        answered = li[kernels.LI_ANSWER] >= 0
        stop = run_events(*args)
        if answered:
            made["python" if li[kernels.LI_ANSWER] >= 0 else "kernel"] += 1
        return stop

    def episode(compiled):
        monkeypatch.setattr(ClusterState, "compiled", compiled)
        monkeypatch.setattr(kernels, "run_events", spy)
        monkeypatch.setattr(turns, "TurnsToHandOver", TurnsSpy)
        env = gym.make("Dally-v0", trace="batch-500")
        rng = np.random.default_rng(11)
        obs, info = env.reset(seed=5)
        seen, done = [], env.unwrapped._done
        while not done:
            offer = env.unwrapped.offer
            action = int(rng.choice(np.flatnonzero(info["action_mask"])))
            seen.append((offer.job, offer.now_s, offer.tiers, action))
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        return seen, info["summary"], env.unwrapped.engine

    seen_a, summary_a, fast = episode(True)
    assert made["kernel"] > 0 and made["python"] > 0 and made["after a decline"] > 0, made
    seen_b, summary_b, plain = episode(False)
    assert seen_a == seen_b and summary_a == summary_b
    assert_same_run(fast, plain)


def test_speed_tables_find_every_shape_entered_and_no_other():
    """SpeedTables: one-machine factors in ``machine``, the others in the shape table, each
    found again through the hash index (grown as it fills), per model id; a shape not entered,
    or entered for another model, is not found."""
    from dallygym.sim.engine import SpeedTables

    tables = SpeedTables()
    ids = tables.model_ids(["resnet50", "vgg16"], gpus_per_machine=8)
    assert ids == [0, 1] and tables.model_ids(["vgg16", "bert"], gpus_per_machine=4) == [1, 2]
    rng = np.random.default_rng(3)
    entered = {}
    for k in range(300):  # many entries: the index is rebuilt several times
        racks = int(rng.integers(1, 4))
        shape = tuple(
            sorted(
                (
                    tuple(sorted(rng.integers(1, 5, size=int(rng.integers(1, 4))).tolist(), reverse=True))
                    for _ in range(racks)
                ),
                reverse=True,
            )
        )
        if len(shape) == 1 and len(shape[0]) == 1:
            continue
        model = int(rng.integers(0, 3))
        if (model, shape) not in entered:
            entered[(model, shape)] = 0.5 + k / 1000
            tables.add(model, shape, entered[(model, shape)])
    tables.add(2, ((3,),), 0.75)
    assert tables.machine[2, 3] == 0.75 and np.isnan(tables.machine[2, 4])
    for (model, shape), s in entered.items():
        code = np.array([c for rack in shape for c in (*rack, 0)], dtype=np.int64)
        e = kernels._find_shape(tables.rows, tables.seq, tables.slots, model, code)
        assert e >= 0 and tables.shapes[e] == shape and tables.speed[e] == s and tables.rows[e, 0] == model
        assert tables.cache[(model, shape)] == s
    missing = np.array([9, 9, 0], dtype=np.int64)
    assert kernels._find_shape(tables.rows, tables.seq, tables.slots, 0, missing) == -1


def test_runs_of_one_latency_model_share_its_speed_tables():
    """A second run with the same latency model object starts knowing the first one's speed
    factors (the same entries, the same ids), and makes the same run as a run on a fresh
    model object."""
    spec = ClusterSpec(2)
    latency = get_latency_model("dally-paper")
    trace = load_trace("batch-500", cluster=spec)
    first = run_policy(Engine(trace, spec, make_policy("dally"), latency, EngineConfig()))
    known = len(first._tables.cache)
    second = run_policy(Engine(trace, spec, make_policy("dally"), latency, EngineConfig()))
    fresh = run_policy(Engine(trace, spec, make_policy("dally"), get_latency_model("dally-paper"), EngineConfig()))
    assert second._tables is first._tables and known > 10 and len(second._tables.cache) == known
    assert fresh._tables is not first._tables
    assert_same_run(second, fresh)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 60), unique=True, max_size=30), st.lists(st.integers(0, 60), max_size=30), st.data())
def test_compiled_ordered_sets_insert_and_remove_as_sorted_lists(start, ops, data):
    """The event loop's job sets (kernels._set_insert / _set_remove: increasing indices;
    _keyed_insert / _keyed_remove: by (key, index)) shift their members in place, both ways:
    the same members, in the same order, as sorting a Python list."""
    members = np.full(64, -7, dtype=np.int64)
    keyed = np.full(64, -7, dtype=np.int64)
    wkey = np.zeros(64)
    keys = {j: float(data.draw(st.integers(0, 3))) for j in range(64)}
    current = sorted(start)
    size = 0
    for j in current:
        size = kernels._set_insert(members, size, j)
        kernels._keyed_insert(keyed, size - 1, wkey, keys[j], j)
    for j in ops:
        if j in current:
            current.remove(j)
            kernels._keyed_remove(keyed, size, wkey, j)
            size = kernels._set_remove(members, size, j)
        else:
            current.append(j)
            kernels._keyed_insert(keyed, size, wkey, keys[j], j)
            size = kernels._set_insert(members, size, j)
        assert members[:size].tolist() == sorted(current)
        assert keyed[:size].tolist() == sorted(current, key=lambda m: (keys[m], m))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 8), st.data())
def test_per_machine_counts_of_gpus_in_any_order(racks, mpr, gpm, data):
    """kernels._count_own (and _machine_of, which the per-GPU loops share) counts each GPU on its
    own machine, whatever the order of the GPUs: the machine is looked up again whenever a GPU
    is off the last one's."""
    n = racks * mpr * gpm
    gpus = np.array(data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n)), dtype=np.int64)
    store = np.concatenate([np.array([n - 1], dtype=np.int64), gpus])  # a GPU before the run
    counts = np.zeros(racks * mpr, dtype=np.int64)
    kernels._count_own(counts, store, 1, gpus.size, gpm, 2)
    assert counts.tolist() == (2 * np.bincount(gpus // gpm, minlength=racks * mpr)).tolist()
    for gpu in gpus.tolist():
        m, rack, lo, hi = kernels._machine_of(gpu, mpr, gpm)
        assert (m, rack, lo, hi) == (gpu // gpm, gpu // gpm // mpr, gpu // gpm * gpm, (gpu // gpm + 1) * gpm)


def test_the_event_loop_leaves_the_arrays_it_borrows_as_it_found_them():
    """kernels.run_events borrows the engine's arrays (no reference counting inside the loop):
    after a whole run every array the engine passed has the references it had before, and the
    run is the one the Python reference makes."""
    import sys

    spec = ClusterSpec(2)
    trace = load_trace("batch-500", cluster=spec)
    engine = Engine(trace, spec, make_policy("dally"), get_latency_model("dally-paper"), EngineConfig())
    arrays = [
        engine._jobf,
        engine._jobi,
        engine.state,
        engine._sets,
        engine._li,
        engine._lf,
        engine._plan,
        engine._turn_log,
        engine._rec_f,
        engine.cluster.buffer,
        engine._gpu_store,
        engine._log_f,
        engine._starts,
        engine._starts_f,
    ]
    before = [sys.getrefcount(a) for a in arrays]
    run_policy(engine)
    assert engine.finished == engine.n and engine.passes > 100
    # The job sets hold a row of _sets each, lent to them (JobSet.lend): taken back, they do not.
    assert engine._waiting.lent() and engine._running.lent()
    for job_set in (engine._waiting, engine._running):
        job_set.load(job_set.array())
    assert [sys.getrefcount(a) for a in arrays] == before


# --- the compile cache and its notice ---------------------------------------------------------

#: Compiles two small kernels (a second or two), in a fresh process.
COMPILE_TWO = (
    "import numpy as np; from dallygym.sim import kernels; kernels.vector_key(np.arange(3)); "
    "kernels._any_below_best(np.zeros(1, dtype=np.int64), 0, np.zeros((10, 1), dtype=np.int64))"
)


def run_python(code: str, cwd, **env) -> subprocess.CompletedProcess:
    """``python -c code`` with the environment's DALLYGYM_*, NUMBA_CACHE_DIR and XDG_CACHE_HOME
    replaced by ``env``."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("DALLYGYM_") and k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )


def notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("dallygym: compiling")]


@pytest.mark.slow  # (fresh processes)
def test_a_compile_from_an_empty_cache_is_announced_once_and_a_cached_run_is_quiet(tmp_path):
    cache = tmp_path / "cache"
    first = notices(run_python(COMPILE_TWO, tmp_path, NUMBA_CACHE_DIR=str(cache)).stderr)
    assert len(first) == 1  # two kernels compiled, one line
    assert "compiling the simulator's kernels once" in first[0] and str(cache) in first[0]
    assert not notices(run_python(COMPILE_TWO, tmp_path, NUMBA_CACHE_DIR=str(cache)).stderr)  # all cached
    # A kernel the cache has not seen yet: a shorter notice, or none when asked for quiet.
    other = "import numpy as np; from dallygym.sim import kernels; kernels.vector_key(np.arange(3.0))"
    assert not notices(run_python(other, tmp_path, NUMBA_CACHE_DIR=str(cache), DALLYGYM_QUIET="1").stderr)
    other = "import numpy as np; from dallygym.sim import kernels; kernels.vector_key(np.arange(3, dtype=np.int32))"
    partial = notices(run_python(other, tmp_path, NUMBA_CACHE_DIR=str(cache)).stderr)
    assert len(partial) == 1 and "not yet in the cache" in partial[0]
    assert not notices(
        run_python(COMPILE_TWO, tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "fresh"), DALLYGYM_QUIET="1").stderr
    )


def test_the_cache_goes_to_the_user_directory_when_the_package_is_read_only(tmp_path, monkeypatch):
    monkeypatch.setattr(numba.config, "CACHE_DIR", "")
    (tmp_path / "blocker").write_text("")
    read_only = str(tmp_path / "blocker" / "pkg")  # nothing can be made under a file, whoever runs this
    xdg = tmp_path / "xdg"
    assert kernels.choose_cache_dir(read_only, {"XDG_CACHE_HOME": str(xdg)}) == str(xdg / "dallygym" / "numba")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kernels.choose_cache_dir(read_only, {}) == str(tmp_path / "home" / ".cache" / "dallygym" / "numba")
    # With no writable home either, a directory in the temporary one (else the import would fail).
    unwritable_home = {"XDG_CACHE_HOME": str(tmp_path / "blocker" / "xdg")}
    assert kernels.choose_cache_dir(read_only, unwritable_home).startswith(tempfile.gettempdir())
    # The user's NUMBA_CACHE_DIR, and a writable package directory, are left to numba.
    assert kernels.choose_cache_dir(read_only, {"NUMBA_CACHE_DIR": str(tmp_path / "mine")}) is None
    assert kernels.choose_cache_dir(str(tmp_path / "pkg"), {"XDG_CACHE_HOME": str(xdg)}) is None


@pytest.mark.slow  # (fresh processes)
def test_an_installed_copy_that_cannot_cache_beside_itself_caches_in_the_user_directory(tmp_path):
    """A copy of the package whose kernels' ``__pycache__`` cannot be a directory (a file is in
    the way, which stops root as well): the kernels' cache is set to the user directory before
    any of them is defined."""
    site = tmp_path / "site"
    shutil.copytree(Path(dallygym.__file__).parent, site / "dallygym", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "dallygym" / "sim" / "kernels" / "__pycache__").write_text("")
    xdg = tmp_path / "xdg"
    code = (
        "import numba; from dallygym.sim import kernels; "
        "print(numba.config.CACHE_DIR); print(kernels.run_events._cache._cache_path)"
    )
    out = run_python(code, tmp_path, PYTHONPATH=str(site), XDG_CACHE_HOME=str(xdg)).stdout.splitlines()
    assert out[0] == str(xdg / "dallygym" / "numba")
    assert Path(out[1]).parent == xdg / "dallygym" / "numba"
