"""The event engine on hand-built clusters and traces whose answers are worked out by hand."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from helpers import TablePriority, TierLatency, make_trace, run_engine

from dallygym.sim.cluster import ClusterError, ClusterSpec, Tier
from dallygym.sim.engine import DONE, Engine, EngineConfig, EngineError
from dallygym.sim.metrics import collect
from dallygym.sim.policies import FifoPolicy, Policy
from dallygym.sim.policies.base import auto_accept_of

NO_ROUNDS = 1e9  # a lease longer than any test run


def test_completion_time_is_ideal_time_over_speed_factor():
    # One rack of 2 machines x 4 GPUs. An 8-GPU job must span both machines: rack tier,
    # speed 0.5, so 100 iterations of 1 s take 200 s; a 4-GPU job fits a machine: 100 s.
    spec = ClusterSpec(1, 2, 4)
    trace = make_trace([(0, 0, 8, 100, 1.0), (1, 500, 4, 100, 1.0)])
    engine = run_engine(trace, spec, lease_s=NO_ROUNDS)
    assert engine.end_s.tolist() == [200.0, 600.0]
    jobs = collect(engine).jobs
    assert jobs["comm_s"].tolist() == [100.0, 0.0]
    assert jobs["rack_s"].tolist() == [200.0, 0.0]
    assert jobs["machine_s"].tolist() == [0.0, 100.0]


def test_waiting_job_that_does_not_fit_does_not_block_smaller_ones():
    # 8 GPUs (1 rack x 2 machines x 4). J0 holds 4 GPUs until 100. J1 (8 GPUs) arrives at 1
    # and cannot fit; J2 (2 GPUs) arriving at 2 is still offered and runs 2..12.
    # J1 starts when J0 ends, at rack tier (speed 0.5): 10 s of compute take 20 s.
    spec = ClusterSpec(1, 2, 4)
    trace = make_trace([(0, 0, 4, 100, 1.0), (1, 1, 8, 10, 1.0), (2, 2, 2, 10, 1.0)])
    engine = run_engine(trace, spec, FifoPolicy(), lease_s=NO_ROUNDS)
    assert engine.first_start_s.tolist() == [0.0, 100.0, 2.0]
    assert engine.end_s.tolist() == [100.0, 120.0, 12.0]


def test_lease_renewal_on_same_gpus_costs_nothing():
    spec = ClusterSpec(1, 1, 4)
    trace = make_trace([(0, 0, 4, 100, 1.0)])
    engine = run_engine(trace, spec, lease_s=10.0, restart_overhead_s=50.0)
    assert engine.end_s[0] == 100.0
    assert engine.preemptions[0] == 0
    assert engine.placements_by_tier.tolist() == [1, 0, 0]
    assert engine.rounds == 10  # boundaries at 10, 20, ..., 100 (the last one at its completion)


def test_higher_priority_job_preempts_at_round_boundary_not_before():
    # One machine of 4 GPUs, lease 50 s. J0 (4 GPUs, 1000 s) starts at 0. J1 (4 GPUs, 100 s,
    # higher priority) arrives at 10 but must wait for the boundary at 50, where J0's lease
    # expires and J1 takes the GPUs. J0 (50 iterations done) resumes on its own GPUs when J1
    # ends at 150, so it pays no restart overhead: it ends at 150 + 950 = 1100.
    spec = ClusterSpec(1, 1, 4)
    trace = make_trace([(0, 0, 4, 1000, 1.0), (1, 10, 4, 100, 1.0)])
    engine = run_engine(trace, spec, TablePriority({0: 1, 1: 0}), lease_s=50.0, restart_overhead_s=7.0)
    assert engine.first_start_s.tolist() == [0.0, 50.0]
    assert engine.end_s.tolist() == [1100.0, 150.0]
    assert engine.preemptions.tolist() == [1, 0]
    jobs = collect(engine).jobs.set_index("job_id")
    assert jobs.loc[0, "queue_s"] == 100.0  # waited 50..150
    assert jobs.loc[0, "run_s"] == 50.0 + 950.0  # 0..50 and 150..1100
    assert jobs.loc[1, "queue_s"] == 40.0
    assert jobs.loc[0, "overhead_s"] == 0.0


def test_restart_on_other_gpus_pays_overhead_and_victim_is_lowest_priority():
    # 1 rack x 2 machines x 2 GPUs, lease 50, restart overhead 7.
    # t=0: J1 (priority 1) takes machine 0 (best fit, lowest id), J0 (priority 2) machine 1.
    # t=10: J2 (priority 0) arrives; nothing is free until the boundary.
    # t=50: J2 is offered first and displaces the lowest-priority job, J0, from machine 1;
    #       J1 keeps machine 0. J0 is preempted with 50 of 1000 iterations done.
    # t=75: J1 ends; J0 restarts on machine 0 (not its old GPUs): 7 s overhead, progress from
    #       82, so it ends at 82 + 950 = 1032. J2 runs 50..150.
    spec = ClusterSpec(1, 2, 2)
    trace = make_trace([(0, 0, 2, 1000, 1.0), (1, 0, 2, 75, 1.0), (2, 10, 2, 100, 1.0)])
    engine = run_engine(trace, spec, TablePriority({0: 2, 1: 1, 2: 0}), lease_s=50.0, restart_overhead_s=7.0)
    assert engine.end_s.tolist() == [1032.0, 75.0, 150.0]
    assert engine.preemptions.tolist() == [1, 0, 0]
    jobs = collect(engine).jobs.set_index("job_id")
    assert jobs.loc[0, "overhead_s"] == 7.0
    assert jobs.loc[0, "run_s"] == 50.0 + (1032.0 - 75.0)
    assert jobs.loc[0, "comm_s"] == 0.0
    assert jobs.loc[0, "queue_s"] == 25.0


def test_gpus_left_by_a_preempted_job_are_taken_before_displacing_another():
    # 1 rack x 2 machines x 4 GPUs, lease 100. Arrivals one per second place X (3 GPUs) on
    # GPUs 0-2, W (1) on 3 (best fit), V (3) on 4-6, Y (1) on 7. C (2 GPUs) and D (1) arrive at
    # 4 and 5 and wait. Priorities: W, V, C, X, D, Y. At the boundary at 100 the leases of X and
    # Y expire (W and V are ahead of every waiting job and keep theirs). C only fits machine 0
    # and takes X's GPUs 0 and 1, so X is preempted at its turn; it needs 3 GPUs, only 2 are
    # free, so it waits. Its GPU 2 is now nobody's: D takes it, and Y keeps GPU 7 -- rather
    # than D displacing Y from GPU 7 and Y restarting on GPU 2.
    starts = []

    class Recorder(TablePriority):
        def on_start(self, view, job, tier, starvation_s, now_s):
            starts.append((int(view.job_id[job]), now_s, view.gpus[job].tolist()))

    x, w, v, y, c, d = range(6)
    trace = make_trace(
        [
            (x, 0, 3, 1000, 1.0),
            (w, 1, 1, 1000, 1.0),
            (v, 2, 3, 1000, 1.0),
            (y, 3, 1, 1000, 1.0),
            (c, 4, 2, 1000, 1.0),
            (d, 5, 1, 1000, 1.0),
        ]
    )
    engine = run_engine(trace, ClusterSpec(1, 2, 4), Recorder({w: 1, v: 2, c: 3, x: 4, d: 5, y: 6}), lease_s=100.0)
    assert starts[:4] == [(x, 0.0, [0, 1, 2]), (w, 1.0, [3]), (v, 2.0, [4, 5, 6]), (y, 3.0, [7])]
    assert starts[4:6] == [(c, 100.0, [0, 1]), (d, 100.0, [2])]
    assert engine.preemptions.tolist() == [1, 0, 0, 0, 0, 0]


def test_expired_leases_behind_jobs_that_no_longer_fit_are_renewed():
    # One machine of 8 GPUs, lease 100. At 0: C (4 GPUs) takes 0-3, X (1) 4, Y (1) 5, W (2) 6-7.
    # A (2 GPUs), B (3) and E (3) arrive at 1 and wait. Priorities C, A, B, X, E, Y, W.
    # Boundary at 100: C is ahead of every waiting job and keeps its GPUs; the leases of X, Y
    # and W expire (4 GPUs claimable). A takes W's 2 GPUs (the lowest priority). Now only 2
    # are claimable: B and E no longer fit, X and Y keep theirs, W is preempted with 100 of 500
    # iterations done. At 150 A, X and Y end; B runs 150..250, E 250..350, then W 350..750.
    c, x, y, w, a, b, e = range(7)
    trace = make_trace(
        [
            (c, 0, 4, 1000, 1.0),
            (x, 0, 1, 150, 1.0),
            (y, 0, 1, 150, 1.0),
            (w, 0, 2, 500, 1.0),
            (a, 1, 2, 50, 1.0),
            (b, 1, 3, 100, 1.0),
            (e, 1, 3, 100, 1.0),
        ]
    )
    priority = TablePriority({c: 0, a: 1, b: 2, x: 3, e: 4, y: 5, w: 6})
    engine = run_engine(trace, ClusterSpec(1, 1, 8), priority, lease_s=100.0)
    assert engine.end_s.tolist() == [1000.0, 150.0, 150.0, 750.0, 150.0, 250.0, 350.0]
    assert engine.preemptions.tolist() == [0, 0, 0, 1, 0, 0, 0]


def test_preempted_job_without_room_waits_with_starvation_clock_reset():
    spec = ClusterSpec(1, 1, 4)
    trace = make_trace([(0, 0, 4, 1000, 1.0), (1, 10, 4, 100, 1.0)])
    seen = []

    class Recorder(TablePriority):
        def decide(self, offer, view):
            seen.append((offer.job_id, offer.now_s, offer.starvation_s))
            return offer.best_tier

    run_engine(trace, spec, Recorder({0: 1, 1: 0}), lease_s=50.0)
    # J1 offered at the boundary after 40 s of starvation; J0 re-offered when J1 ends at 150,
    # starving since it lost its GPUs at 50.
    assert seen == [(0, 0.0, 0.0), (1, 50.0, 40.0), (0, 150.0, 100.0)]


def test_offers_list_every_free_tier_and_mark_real_choices():
    # 2 racks x 2 machines x 4 GPUs; four 3-GPU jobs leave one GPU free on every machine. A
    # 2-GPU job then fits no machine but fits a rack (1 + 1) and the network, so waiting for a
    # machine is a real choice.
    spec = ClusterSpec(2, 2, 4)
    trace = make_trace(
        [(0, 0, 3, 100, 1.0), (1, 0, 3, 100, 1.0), (2, 0, 3, 100, 1.0), (3, 0, 3, 100, 1.0), (4, 1, 2, 10, 1.0)]
    )
    engine = Engine(trace, spec, FifoPolicy(), TierLatency(), EngineConfig(lease_s=NO_ROUNDS))
    gen = engine.decisions()
    offers = []
    offer = next(gen)
    try:
        while True:
            offers.append(offer)
            offer = gen.send(offer.best_tier)
    except StopIteration:
        pass
    last = [o for o in offers if o.job_id == 4][0]
    assert last.tiers == (Tier.RACK, Tier.NETWORK)
    assert last.best_possible_tier == Tier.MACHINE
    assert last.is_choice


def test_accepting_a_tier_not_offered_is_an_error():
    class Bad(Policy):
        name = "bad"

        def decide(self, offer, view):
            return Tier.NETWORK

    spec = ClusterSpec(2, 1, 4)
    with pytest.raises(EngineError, match="not|accept one of the offered"):
        run_engine(make_trace([(0, 0, 1, 10, 1.0)]), spec, Bad())


def test_policy_that_never_accepts_stops_with_error_instead_of_looping():
    class Never(Policy):
        name = "never"

        def decide(self, offer, view):
            return None

    with pytest.raises(EngineError, match="idle cluster"):
        run_engine(make_trace([(0, 0, 1, 10, 1.0)]), ClusterSpec(1, 1, 1), Never(), lease_s=1.0, max_idle_rounds=5)


def test_job_larger_than_cluster_is_rejected_naming_the_job():
    with pytest.raises(ClusterError, match="job 7 needs 9 GPUs but the cluster has 8"):
        Engine(make_trace([(7, 0, 9, 10, 1.0)]), ClusterSpec(1, 2, 4), FifoPolicy(), TierLatency())


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"lease_s": 0}, "lease_s"),
        ({"lease_s": float("nan")}, "lease_s"),
        ({"restart_overhead_s": -1}, "restart_overhead_s"),
        ({"seed": -3}, "seed"),
    ],
)
def test_bad_engine_config_names_the_parameter(kwargs, word):
    with pytest.raises(ValueError, match=word):
        EngineConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"lease_s": 1e-9}, "lease_s must be a number of seconds from 1 to 1e\\+09"),
        ({"lease_s": 0.999}, "lease_s"),
        ({"lease_s": 1.1e9}, "lease_s"),
        ({"lease_s": float("inf")}, "lease_s"),
        ({"lease_s": True}, "lease_s"),
        ({"lease_s": "3600"}, "lease_s"),
        ({"lease_s": -3600.0}, "lease_s"),
        ({"restart_overhead_s": float("nan")}, "restart_overhead_s"),
        ({"restart_overhead_s": float("inf")}, "restart_overhead_s"),
        ({"restart_overhead_s": 86_401.0}, "restart_overhead_s must be a number of seconds from 0 to 86400"),
        ({"restart_overhead_s": False}, "restart_overhead_s"),
        ({"seed": 2**63}, "seed must be an integer from 0 to 2\\*\\*63 - 1"),
        ({"seed": 1.0}, "seed"),
        ({"seed": True}, "seed"),
        ({"max_idle_rounds": 10**6 + 1}, "max_idle_rounds"),
        ({"max_idle_rounds": 0}, "max_idle_rounds"),
        ({"max_idle_rounds": 5.0}, "max_idle_rounds"),
    ],
)
def test_engine_options_that_would_hang_or_mean_nothing_are_refused(kwargs, words):
    with pytest.raises(ValueError, match=words):
        EngineConfig(**kwargs)


def test_engine_option_bounds_are_inclusive():
    EngineConfig(lease_s=1, restart_overhead_s=86_400, seed=2**63 - 1, max_idle_rounds=10**6)
    EngineConfig(lease_s=1e9, seed=np.int64(7))


@pytest.mark.parametrize(
    "option, value",
    [
        ("--lease-s", "1e-9"),
        ("--lease-s", "nan"),
        ("--lease-s", "inf"),
        ("--restart-overhead-s", "1e12"),
        ("--seed", "-1"),
    ],
)
def test_the_command_line_refuses_such_options_in_one_line(capsys, option, value):
    from dallygym.experiments.cli import main

    assert main(["simulate", "--trace", "small", "--racks", "2", "--machines-per-rack", "2", option, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dallygym: error: ") and option[2:].replace("-", "_") in err and err.count("\n") == 1


def test_environment_keywords_reach_the_same_checks():
    import gymnasium as gym

    for env_id in ("dallygym:Dally-v0", "dallygym:DallyQueue-v0"):
        with pytest.raises(ValueError, match="lease_s"):
            gym.make(env_id, lease_s=1e-9)
        with pytest.raises(ValueError, match="restart_overhead_s"):
            gym.make(env_id, restart_overhead_s=float("nan"))
        with pytest.raises(ClusterError, match="gpus_per_machine must be at most"):
            gym.make(env_id, gpus_per_machine=10**9)


def test_engine_runs_once():
    engine = run_engine(make_trace([(0, 0, 1, 10, 1.0)]), ClusterSpec(1, 1, 1))
    with pytest.raises(EngineError, match="runs once"):
        next(engine.decisions())


def test_next_decision_and_answer_drive_the_run_decisions_yields():
    # The five jobs of the offers case above: the same offers, answered alike, and the same run.
    spec = ClusterSpec(2, 2, 4)
    rows = [(0, 0, 3, 100, 1.0), (1, 0, 3, 100, 1.0), (2, 0, 3, 100, 1.0), (3, 0, 3, 100, 1.0), (4, 1, 2, 10, 1.0)]

    def engine():
        return Engine(make_trace(rows), spec, FifoPolicy(), TierLatency(), EngineConfig(lease_s=NO_ROUNDS))

    by_generator, gen = engine(), None
    gen = by_generator.decisions()
    seen = []
    try:
        offer = next(gen)
        while True:
            seen.append(repr(offer))
            offer = gen.send(offer.tiers[-1])  # the worst tier offered, so that the run differs from FIFO's own
    except StopIteration:
        pass
    stepped = engine()
    offer = stepped.next_decision()
    assert stepped.next_decision() is offer  # asked again before an answer: the same decision
    stepped_seen = []
    while offer is not None:
        stepped_seen.append(repr(offer))
        offer = stepped.answer(offer, offer.tiers[-1])
    assert stepped_seen == seen and len(seen) == 5
    assert stepped.next_decision() is None
    assert collect(stepped).jobs.equals(collect(by_generator).jobs)


def test_answer_takes_only_the_open_decision_and_auto_accept_is_fixed_at_the_start():
    spec = ClusterSpec(1, 1, 2)
    trace = make_trace([(0, 0, 1, 10, 1.0), (1, 0, 1, 10, 1.0)])
    engine = Engine(trace, spec, FifoPolicy(), TierLatency(), EngineConfig(lease_s=NO_ROUNDS))
    first = engine.next_decision(None)
    with pytest.raises(ValueError, match="auto_accept is fixed when the run starts"):
        engine.next_decision("best")
    assert engine.next_decision(None) is first
    second = engine.answer(first, first.best_tier)
    with pytest.raises(EngineError, match="the open decision is"):
        engine.answer(first, first.best_tier)  # already answered
    assert engine.answer(second, second.best_tier) is None
    with pytest.raises(EngineError, match="no decision is open"):
        engine.answer(second, second.best_tier)
    # An engine run by its generator cannot be stepped as well.
    other = Engine(trace, spec, FifoPolicy(), TierLatency(), EngineConfig(lease_s=NO_ROUNDS))
    next(other.decisions())
    with pytest.raises(EngineError, match="driven by decisions"):
        other.next_decision()


def test_a_new_decision_kind_is_a_class_a_place_that_asks_it_and_a_policy_hook(monkeypatch):
    """A test-only kind of decision, in four places -- its class, the turn that asks it, the
    engine that takes its turns so, and the policy method that answers it -- is answered
    through run_policy unchanged, and an engine copied while it waits on one goes on alike."""
    from dallygym.sim.cluster import ClusterState
    from dallygym.sim.engine import run_policy, turns

    monkeypatch.setattr(ClusterState, "compiled", False)  # (every turn is a Visit frame)

    class Probe:  # 1. the kind
        kind = "probe"
        hook = "probe"

        def __init__(self, job: int) -> None:
            self.job = job

    class ProbingVisit(turns.Visit):  # 2. where it is asked: before each job's turn
        def step(self, engine, value):
            if self.pc == 0:
                self.pc = -1
                return Probe(self.j)
            if self.pc == -1:  # the answer; then the turn as ever
                engine.heard.append((self.j, value))
                self.pc, value = 0, None
            return super().step(engine, value)

    class ProbingEngine(Engine):  # 3. the engine that takes its turns so
        Visit = ProbingVisit

    class ProbedFifo(FifoPolicy):  # 4. the hook that answers it
        def probe(self, probe, view):
            return 10 * probe.job

    spec = ClusterSpec(1, 1, 2)
    rows = [(0, 0, 1, 10, 1.0), (1, 0, 1, 20, 1.0), (2, 5, 2, 10, 1.0)]
    probed = ProbingEngine(make_trace(rows), spec, ProbedFifo(), TierLatency(), EngineConfig(lease_s=NO_ROUNDS))
    probed.heard = []
    run_policy(probed)
    assert probed.heard[:2] == [(0, 0), (1, 10)] and {j for j, _ in probed.heard} == {0, 1, 2}
    assert all(answer == 10 * j for j, answer in probed.heard)
    plain = run_engine(make_trace(rows), spec, FifoPolicy(), TierLatency(), lease_s=NO_ROUNDS)
    assert collect(probed).jobs.equals(collect(plain).jobs)
    # Copied while waiting on a probe, the engine and its copy go on alike.
    halfway = ProbingEngine(make_trace(rows), spec, ProbedFifo(), TierLatency(), EngineConfig(lease_s=NO_ROUNDS))
    halfway.heard = []
    decision = halfway.next_decision(auto_accept_of(halfway.policy))
    for _ in range(2):
        decision = halfway.answer(decision, halfway.policy.answer(decision, halfway))
    assert isinstance(decision, Probe)
    twin = copy.deepcopy(halfway)
    for engine in (halfway, twin):
        run_policy(engine)
        assert engine.heard == probed.heard
        assert collect(engine).jobs.equals(collect(probed).jobs)


def test_migration_hook_moves_job_to_better_tier_with_overhead():
    # 1 rack x 2 machines x 4 GPUs, lease 50, restart overhead 5. At t=0 J0 (3 GPUs, ends at
    # 20) takes machine 0 and J1 (3 GPUs, long) machine 1, so J2 (2 GPUs) only fits the rack:
    # one GPU on each machine, speed 0.5. At the boundary at 50 machine 0 has 3 free GPUs
    # besides J2's own, and the policy moves J2 there: 25 iterations were done by then, the
    # other 75 run at speed 1 after 5 s of overhead, so J2 ends at 50 + 5 + 75 = 130.
    class Migrate(Policy):
        name = "migrate"
        accepts_upgrades = False  # moves by the hook, not by renewal offers

        def migrate(self, view, job, now_s):
            return Tier.MACHINE if view.tier[job] > Tier.MACHINE else None

    spec = ClusterSpec(1, 2, 4)
    trace = make_trace([(0, 0, 3, 20, 1.0), (1, 0, 3, 1000, 1.0), (2, 0, 2, 100, 1.0)])
    engine = run_engine(trace, spec, Migrate(), lease_s=50.0, restart_overhead_s=5.0)
    assert engine.migrations.tolist() == [0, 0, 1]
    assert engine.end_s[2] == 130.0
    assert engine.placements_by_tier.tolist() == [3, 1, 0]
    assert collect(engine).jobs["overhead_s"].tolist() == [0.0, 0.0, 5.0]


def test_upgrade_at_lease_renewal_moves_job_to_better_tier_with_overhead():
    # The same scenario without a migrate hook, under the default renewal="upgrade": at the
    # boundary at 50 J2's lease renewal is an offer of the machine tier (machine 0's 3 idle
    # GPUs plus J2's own one there); the base policy accepts the best tier offered, so J2 moves
    # with the same arithmetic: it ends at 50 + 5 + 75 = 130, counted as an upgrade.
    offers = []

    class Greedy(Policy):
        name = "greedy"

        def decide(self, offer, view):
            offers.append((offer.job_id, offer.now_s, offer.renewal, offer.current_tier, offer.tiers))
            return offer.best_tier

    spec = ClusterSpec(1, 2, 4)
    trace = make_trace([(0, 0, 3, 20, 1.0), (1, 0, 3, 1000, 1.0), (2, 0, 2, 100, 1.0)])
    engine = run_engine(trace, spec, Greedy(), lease_s=50.0, restart_overhead_s=5.0)
    assert offers[-1] == (2, 50.0, "upgrade", Tier.RACK, (Tier.MACHINE,))
    assert engine.upgrades.tolist() == [0, 0, 1] and engine.migrations.tolist() == [0, 0, 0]
    assert engine.end_s[2] == 130.0
    assert engine.placements_by_tier.tolist() == [3, 1, 0]
    assert collect(engine).jobs["overhead_s"].tolist() == [0.0, 0.0, 5.0]
    # renewal="keep": J2 stays on its rack placement at speed 0.5 and ends at 200.
    kept = run_engine(trace, spec, Greedy(), lease_s=50.0, restart_overhead_s=5.0, renewal="keep")
    assert kept.upgrades.tolist() == [0, 0, 0] and kept.end_s[2] == 200.0


def test_all_jobs_finish_with_exact_iterations():
    spec = ClusterSpec(2, 2, 4)
    rng = np.random.default_rng(1)
    rows = [
        (
            i,
            float(rng.integers(0, 5000)),
            int(rng.choice([1, 2, 4, 8, 16])),
            int(rng.integers(1, 500)),
            float(rng.uniform(0.5, 5)),
        )
        for i in range(40)
    ]
    engine = run_engine(make_trace(rows), spec, lease_s=600.0)
    assert (engine.state == DONE).all()
    assert np.array_equal(engine.done_iters, engine.total_iterations)


def test_a_priority_given_on_the_instance_is_used_not_the_arrival_shortcut():
    # Two one-GPU jobs on one GPU: arrival order runs job 0 first; a priority set on the
    # instance (not the class) that puts job 1 first must be honoured.
    trace = make_trace([(0, 0, 1, 10, 1.0), (1, 0, 1, 10, 1.0)])
    spec = ClusterSpec(1, 1, 1)
    by_arrival = run_engine(trace, spec, FifoPolicy())
    assert by_arrival._arrival_order and by_arrival.end_s[0] < by_arrival.end_s[1]
    reordered = FifoPolicy()
    reordered.priority = lambda view, jobs: -np.asarray(jobs, dtype=float)
    engine = run_engine(trace, spec, reordered)
    assert not engine._arrival_order and engine.end_s[1] < engine.end_s[0]
    assert not run_engine(trace, spec, TablePriority({0: 1.0, 1: 0.0}))._arrival_order


def test_trace_rows_in_any_order_make_the_same_run_and_the_frame_is_not_shared():
    """The engine orders jobs by (arrival, job id) whatever the rows' order (ties in arrival
    by id); a trace already in that order is taken as it is, and the engine's arrays are its
    own copies."""
    rows = [
        (3, 0.0, 2, 100, 1.0),
        (1, 0.0, 4, 50, 1.0),
        (2, 5.0, 1, 80, 1.0),
        (0, 5.0, 2, 10, 1.0),
        (4, 9.0, 4, 30, 1.0),
    ]
    shuffled = make_trace(rows)
    ordered = shuffled.sort_values(["arrival_s", "job_id"]).reset_index(drop=True)
    spec = ClusterSpec(1, 2, 4)
    a, b = run_engine(shuffled, spec), run_engine(ordered, spec)
    assert a.job_id.tolist() == [1, 3, 0, 2, 4] == b.job_id.tolist()
    assert collect(a).summary == collect(b).summary and collect(a).jobs.equals(collect(b).jobs)
    for name in ("job_id", "arrival_s", "num_gpus", "total_iterations", "iter_time_s"):
        assert not np.shares_memory(getattr(b, name), ordered[name].to_numpy()), name


def test_trace_arrays_are_read_only_shared_by_engines_and_make_the_same_run():
    """An Engine given a TraceArrays (made once for a trace run many times) makes the run it
    makes from the frame; engines built on the same TraceArrays share its columns, which are
    read-only, and one run leaves nothing in them for the next."""
    from dallygym.sim.engine import TraceArrays

    rows = [
        (3, 0.0, 2, 100, 1.0),
        (1, 0.0, 4, 50, 1.5),
        (2, 5.0, 1, 80, 1.0),
        (0, 5.0, 8, 10, 2.0),
        (4, 9.0, 4, 30, 1.0),
        (5, 9.0, 2, 300, 0.5),
    ]
    frame = make_trace(rows)
    spec = ClusterSpec(1, 2, 4)
    arrays = TraceArrays(frame)
    assert arrays.job_id.tolist() == [1, 3, 0, 2, 4, 5] and arrays.n == 6  # (arrival, id) order
    for name in (
        "job_id",
        "arrival_s",
        "num_gpus",
        "model",
        "model_index",
        "total_iterations",
        "iter_time_s",
        "ideal_s",
    ):
        assert not getattr(arrays, name).flags.writeable, name
    for name in ("job_id", "arrival_s", "num_gpus", "total_iterations", "iter_time_s"):
        assert not np.shares_memory(getattr(arrays, name), frame[name].to_numpy()), name
    from_frame = run_engine(frame, spec)
    first, second = run_engine(arrays, spec), run_engine(arrays, spec)
    assert first.job_id is arrays.job_id and second.arrival_s is arrays.arrival_s
    for run in (first, second):
        assert collect(run).summary == collect(from_frame).summary
        assert collect(run).jobs.equals(collect(from_frame).jobs)
    with pytest.raises(ValueError, match="read-only"):
        first.arrival_s[0] = 1.0
    with pytest.raises(ValueError, match="no jobs"):
        TraceArrays(frame.iloc[:0])
    with pytest.raises(ClusterError, match="needs 8 GPUs"):
        Engine(arrays, ClusterSpec(1, 1, 4), FifoPolicy(), TierLatency(), EngineConfig())
