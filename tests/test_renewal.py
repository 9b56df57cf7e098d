"""Lease renewal at round boundaries (SPEC §4 "Lease renewal is an offer"): the three modes.

A renewal scenario worked by hand: 2 racks x 1 machine x 4 GPUs, lease 1 h.
J0 (3 GPUs, resnet50, 7,200 iterations of 1 s) takes machine 0 and J1 (3 GPUs, resnet50,
360,000 iterations) machine 1 at t = 0; J2 (2 GPUs, mobilenet_v3, 180,000 iterations) only
fits as one GPU on each machine -- a network placement, slow for MobileNetV3. J0 ends at about
2.2 h and frees machine 0. The first boundary after that is 3 h: J2's lease renewal there is an
offer of machine 0 (its 3 idle GPUs and J2's own), and under every Dally variant it moves.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import TierLatency, make_trace

import dallygym
from dallygym.sim.cluster import ClusterSpec, ClusterState, Tier
from dallygym.sim.engine import RENEWAL_MODES, Engine, EngineConfig, EngineError, run_policy
from dallygym.sim.latency import get_latency_model
from dallygym.sim.policies import DallyManualPolicy, DallyPolicy, GandivaPolicy, Policy, make_policy

H = 3600.0
SPEC3 = ClusterSpec(racks=2, machines_per_rack=1, gpus_per_machine=4)
DALLY_VARIANTS = ("dally", "dally-manual", "dally-nowait", "dally-consolidated")


def three_jobs():
    return make_trace(
        [
            (0, 0, 3, 7_200, 1.0, "resnet50"),
            (1, 0, 3, 360_000, 1.0, "resnet50"),
            (2, 0, 2, 180_000, 1.0, "mobilenet_v3"),
        ]
    )


def run(policy, renewal="upgrade", trace=None, spec=SPEC3, latency=None, **config):
    engine = Engine(
        three_jobs() if trace is None else trace,
        spec,
        make_policy(policy),
        latency or get_latency_model("dally-paper"),
        EngineConfig(renewal=renewal, **config),
    )
    return run_policy(engine)


def speeds():
    model = get_latency_model("dally-paper")
    network = model.speed_factor("mobilenet_v3", ((1,), (1,)))
    machine = model.speed_factor("mobilenet_v3", ((2,),))
    return network, machine


def test_nowait_moves_the_network_job_to_the_freed_machine_at_the_next_boundary():
    s_net, s_machine = speeds()
    assert s_net < 0.01 < s_machine  # MobileNetV3 across racks: under 1 % speed
    engine = run("dally-nowait")
    assert engine.end_s[0] < 3 * H  # J0 frees machine 0 before the 3 h boundary ...
    assert engine.end_s[0] > 2 * H  # ... and after the 2 h one
    # J2 ran on the network from 0 to 3 h, then on machine 0 (no restart overhead by default).
    done_by_3h = 3 * H * s_net
    expected_end = 3 * H + (180_000 - done_by_3h) / s_machine
    assert engine.upgrades.tolist() == [0, 0, 1]
    assert engine.end_s[2] == pytest.approx(expected_end, rel=1e-12)
    assert engine.tier_s[2].tolist() == pytest.approx([expected_end - 3 * H, 0.0, 3 * H])
    assert engine.preemptions.tolist() == [0, 0, 0]


@pytest.mark.parametrize("policy", DALLY_VARIANTS)
def test_every_dally_variant_finishes_the_network_job_within_its_machine_time_plus_the_network_period(policy):
    # dally-nowait takes the network placement and moves at 3 h; the others wait for a machine
    # (Algorithm 1) and get one no later. Either way J2 ends by 3 h + its machine run time.
    _, s_machine = speeds()
    engine = run(policy)
    assert engine.end_s[2] <= 3 * H + 180_000 / s_machine
    assert engine.tier_s[2][Tier.NETWORK] <= 3 * H


def test_keep_mode_leaves_the_network_job_where_it_is():
    s_net, _ = speeds()
    engine = run("dally-nowait", renewal="keep")
    assert engine.upgrades.tolist() == [0, 0, 0]
    assert engine.end_s[2] == pytest.approx(180_000 / s_net, rel=1e-12)  # thousands of hours


def test_an_upgrade_pays_the_restart_overhead():
    s_net, s_machine = speeds()
    engine = run("dally-nowait", restart_overhead_s=600.0)
    expected_end = 3 * H + 600.0 + (180_000 - 3 * H * s_net) / s_machine
    assert engine.end_s[2] == pytest.approx(expected_end, rel=1e-12)
    assert engine.overhead_s[2] == 600.0


def test_an_upgrade_takes_idle_gpus_only_and_displaces_nobody():
    # At the 1 h boundary J2 (lowest Nw_sens: first in the pass) could claim J0's machine if
    # the renewal offer counted lease-expired jobs' GPUs; it does not: J0 and J1 keep theirs.
    engine = run("dally-nowait")
    assert engine.preemptions.tolist() == [0, 0, 0]
    assert engine.tier_s[2][Tier.NETWORK] == 3 * H


def test_rebid_mode_lets_the_network_job_claim_a_machine_at_the_first_boundary():
    # The reference simulator's rule: at 1 h every lease ends and J2 bids first (lowest
    # Nw_sens) for every GPU, so it takes a machine at once, displacing J0 or J1.
    engine = run("dally-nowait", renewal="rebid")
    assert engine.tier_s[2][Tier.NETWORK] == 1 * H
    assert engine.preemptions[:2].sum() >= 1


class FifoDallyManual(DallyManualPolicy):
    """Algorithm 1 with fixed timers, but FIFO priority (so running jobs are not displaced)."""

    name = "fifo-dally-manual"

    def priority(self, view, jobs):
        return view.arrival_s[jobs]


def test_rebid_makes_a_running_rack_job_wait_out_its_machine_timer_again():
    # 1 rack x 2 machines x 4 GPUs, lease 1000 s, T_Mc = T_Rk = 500 s, FIFO order. A and B
    # (3 GPUs each, long) hold the machines from t = 0; R (2 GPUs) arrives at 10 and is offered
    # only a rack (one GPU per machine): it waits. At the 1000 s boundary it has starved 990 s
    # >= T_Mc and accepts the rack. At the 2000 s boundary, under rebid, its clock restarts:
    # 0 < T_Mc, so it declines its own rack and waits; at 3000 s it has starved 1000 s and
    # takes the rack again. Under upgrade or keep it simply keeps the rack from 1000 s on.
    spec = ClusterSpec(1, 2, 4)
    trace = make_trace([(0, 0, 3, 100_000, 1.0), (1, 0, 3, 100_000, 1.0), (2, 10, 2, 1_000, 1.0)])
    offers = []

    class Recording(FifoDallyManual):
        def decide(self, offer, view):
            answer = super().decide(offer, view)
            if offer.job_id == 2:
                offers.append((offer.now_s, offer.starvation_s, offer.renewal, offer.tiers, answer))
            return answer

    def go(renewal):
        offers.clear()
        policy = Recording(t_machine_s=500.0, t_rack_s=500.0)
        engine = Engine(trace, spec, policy, TierLatency(), EngineConfig(lease_s=1000.0, renewal=renewal))
        return run_policy(engine)

    rebid = go("rebid")
    R = (Tier.RACK,)
    assert offers[:4] == [
        (10.0, 0.0, None, R, None),
        (1000.0, 990.0, None, R, Tier.RACK),
        (2000.0, 0.0, "rebid", R, None),
        (3000.0, 1000.0, None, R, Tier.RACK),
    ]
    assert rebid.preemptions[2] >= 1
    # 1000 iterations at speed 0.5 on the rack: 500 per lease, run in [1000, 2000] and
    # [3000, 4000] with a lease of waiting between them.
    assert rebid.end_s[2] == 4000.0
    for mode in ("upgrade", "keep"):
        kept = go(mode)
        assert kept.preemptions[2] == 0 and kept.end_s[2] == 3000.0  # run from 1000 on
        assert all(o[2] is None for o in offers)  # a rack is its best free tier: never asked


def test_a_job_at_its_best_tier_gets_no_renewal_offer_and_a_declined_offer_is_not_repeated():
    # The greedy base policy would accept anything; here a policy that declines every renewal
    # offer. J2 is on the network from t = 0 and machine 0 frees at 20 s: at the 50 s boundary
    # it is offered the machine and declines; nothing changes afterwards, so it is never asked
    # again (its answer to the same free GPUs stands), and J0/J1 (at their best tier) never are.
    spec = ClusterSpec(2, 1, 4)
    trace = make_trace([(0, 0, 3, 20, 1.0), (1, 0, 3, 1_000, 1.0), (2, 0, 2, 100, 1.0)])
    asked = []

    class Decline(dallygym.Policy):
        name = "decline"

        def decide(self, offer, view):
            if offer.is_renewal:
                asked.append((offer.job_id, offer.now_s, offer.current_tier, offer.tiers))
                return None
            return offer.best_tier

    engine = run_policy(Engine(trace, spec, Decline(), TierLatency(), EngineConfig(lease_s=50.0)))
    assert asked == [(2, 50.0, Tier.NETWORK, (Tier.MACHINE,))]
    assert engine.upgrades.sum() == 0
    assert engine.end_s[2] == 400.0  # 100 iterations at speed 0.25, never moved


def test_an_answer_outside_the_offered_tiers_is_an_engine_error():
    class Bad(dallygym.Policy):
        name = "bad"

        def decide(self, offer, view):
            return Tier.NETWORK if offer.is_renewal else offer.best_tier

    spec = ClusterSpec(1, 2, 4)
    trace = make_trace([(0, 0, 3, 20, 1.0), (1, 0, 3, 1_000, 1.0), (2, 0, 2, 100, 1.0)])
    with pytest.raises(EngineError, match="accept one of the offered tiers"):
        run_policy(Engine(trace, spec, Bad(), TierLatency(), EngineConfig(lease_s=50.0)))


def test_unknown_renewal_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown renewal mode 'never'"):
        EngineConfig(renewal="never")
    assert RENEWAL_MODES[0] == EngineConfig().renewal == "upgrade"


def test_upgrades_do_not_feed_the_auto_tuner():
    # J2's upgrade at 3 h (dally-nowait's order, auto-tuned decide) must not add a machine
    # entry with its starvation: only waiting jobs' acceptances are recorded.
    class NoWaitTuned(DallyPolicy):
        def base_timers(self, num_gpus, now_s):
            return 0.0, 0.0

    policy = NoWaitTuned()
    engine = Engine(three_jobs(), SPEC3, policy, get_latency_model("dally-paper"), EngineConfig())
    run_policy(engine)
    assert engine.upgrades[2] == 1
    assert policy.tuner.entries(Tier.MACHINE, 2).tolist() == []  # J2's only machine start was the upgrade
    assert policy.tuner.entries(Tier.MACHINE, 3).tolist() == [0.0, 0.0]


def test_gandiva_skips_boundaries_when_no_spread_job_could_move():
    # 3 racks x 1 machine x 4 GPUs, lease 100 s. J0, J1, J2 (3 GPUs each, 10,000 s) take one
    # machine each (FIFO); J3 (2 GPUs) gets two of the three GPUs left: spread over racks,
    # speed 0.25. One GPU stays free, but even with J3's own GPUs no machine has 2: no
    # migration is possible, so the engine steps over every boundary (its old test -- "a spread
    # job and a free GPU exist" -- ran a pass at each of the 80 boundaries before J3 ends).
    spec = ClusterSpec(3, 1, 4)
    trace = make_trace([(0, 0, 3, 10_000, 1.0), (1, 0, 3, 10_000, 1.0), (2, 0, 3, 10_000, 1.0), (3, 0, 2, 2_000, 1.0)])
    engine = run_policy(Engine(trace, spec, GandivaPolicy(), TierLatency(), EngineConfig(lease_s=100.0)))
    assert engine.migrations.sum() == 0
    assert engine.end_s.tolist() == [10_000.0, 10_000.0, 10_000.0, 8_000.0]  # J3 at speed 0.25
    assert engine.passes == 3  # t = 0; 8000 (J3 ends); 10,000 (the rest end)
    assert engine.rounds == 100


def test_gandiva_migrates_a_spread_job_once_a_machine_frees():
    # As above, but J2 ends at 1,000 s: at the 1,000 s boundary J3 (250 iterations done at
    # speed 0.25) moves to that machine and runs the other 1,750 at speed 1.
    spec = ClusterSpec(3, 1, 4)
    trace = make_trace([(0, 0, 3, 10_000, 1.0), (1, 0, 3, 10_000, 1.0), (2, 0, 3, 1_000, 1.0), (3, 0, 2, 2_000, 1.0)])
    engine = run_policy(Engine(trace, spec, GandivaPolicy(), TierLatency(), EngineConfig(lease_s=100.0)))
    assert engine.migrations.tolist() == [0, 0, 0, 1]
    assert engine.end_s[3] == 1_000.0 + 1_750.0


@pytest.mark.parametrize("renewal", RENEWAL_MODES)
def test_env_and_native_runs_agree_under_every_renewal_mode(renewal):
    # Through Dally-v0, the Dally agent answers renewal offers (feature 31 marks them) with the
    # policy's own decide: the summary is the native one.
    from dallygym.envs.heuristics import evaluate, heuristic_agent
    from dallygym.envs.offer import OBS_FEATURES, DallyEnv

    env = DallyEnv(racks=2, trace="small", priority="dally-nowait", renewal=renewal)
    summary = evaluate(env, heuristic_agent("dally-nowait", env))
    native = dallygym.simulate("small", 2, policy="dally-nowait", config=EngineConfig(renewal=renewal)).summary
    assert summary == native
    assert OBS_FEATURES[31] == "job_current_tier"


def test_env_shows_renewal_offers_with_the_current_tier():
    from dallygym.envs.offer import DallyEnv

    trace = three_jobs()
    env = DallyEnv(racks=2, machines_per_rack=1, gpus_per_machine=4, trace=trace, priority="dally-nowait")
    obs, info = env.reset(seed=0)
    seen = []
    done = False
    while not done:
        offer = env.offer
        if offer is not None:
            seen.append((offer.job_id, offer.renewal, float(obs[31])))
        obs, _, done, _, info = env.step(int(np.flatnonzero(env.action_masks())[-1]))
    # J2's network offer at t = 0 is a choice (wait for a machine?); it accepts network (the
    # last valid action). Its renewal at 3 h offers the machine -- its best tier -- and is
    # accepted automatically, so it is not a step.
    assert seen == [(2, None, 0.0)]
    assert info["summary"]["upgrades"] == 1


def test_cli_renewal_flag_reaches_the_engine(capsys, tmp_path):
    import json

    from dallygym.experiments.cli import main

    path = tmp_path / "three.csv"
    three_jobs().to_csv(path, index=False)
    args = [
        "simulate",
        "--policy",
        "dally-nowait",
        "--trace",
        str(path),
        "--racks",
        "2",
        "--machines-per-rack",
        "1",
        "--gpus-per-machine",
        "4",
        "--format",
        "json",
    ]
    results = {}
    for mode in RENEWAL_MODES:
        assert main([*args, "--renewal", mode]) == 0
        results[mode] = json.loads(capsys.readouterr().out)
    assert results["upgrade"]["upgrades"] == 1 and results["keep"]["upgrades"] == 0
    assert results["keep"]["makespan_s"] > 80 * results["upgrade"]["makespan_s"]  # J2 stuck across racks
    with pytest.raises(SystemExit) as stop:
        main([*args, "--renewal", "never"])
    assert stop.value.code == 2
    assert "invalid choice: 'never'" in capsys.readouterr().err


class NewestFirst(Policy):
    """The latest arrival first; greedy acceptance. Records every start: (job, time, GPUs)."""

    name = "newest-first"

    def __init__(self):
        self.starts = []

    def priority(self, view, jobs):
        return -view.arrival_s[jobs]

    def on_start(self, view, job, tier, starvation_s, now_s):
        self.starts.append((int(view.job_id[job]), now_s, sorted(view.gpus[job].tolist())))


@pytest.mark.parametrize("compiled", [False, True])
def test_leases_renewed_together_around_a_claimed_one(monkeypatch, compiled):
    """Worked by hand: 1 machine of 4 GPUs, lease 1 h. J1, J2, J3 (1 GPU each) start at 0, 10
    and 20 s on GPUs 0, 1, 2; W (2 GPUs) arrives at 30 s and waits (1 GPU free). At the 1 h
    boundary the order is W, J3, J2, J1: W takes the idle GPU 3 and, of the marked ones, J1's
    (visited last). J3 and J2 are renewed in place together, in one step (in the Python pass;
    the compiled pass renews them inside the kernel); J1, claimed, is preempted and waits
    until a job ends."""
    monkeypatch.setattr(ClusterState, "compiled", compiled)
    renewed = []
    original = Engine._renew_in_place

    def spy(self, jobs):
        n = original(self, jobs)
        renewed.append(
            [
                (int(self.job_id[j]), self.gpus[j].tolist(), bool((self.cluster.owner[self.gpus[j]] == j).all()))
                for j in jobs[:n]
            ]
        )
        return n

    monkeypatch.setattr(Engine, "_renew_in_place", spy)
    trace = make_trace(
        [(1, 0, 1, 36_000, 1.0), (2, 10, 1, 36_000, 1.0), (3, 20, 1, 36_000, 1.0), (4, 30, 2, 36_000, 1.0)]
    )
    policy = NewestFirst()
    engine = run_policy(Engine(trace, ClusterSpec(1, 1, 4), policy, TierLatency(), EngineConfig(lease_s=H)))
    assert policy.starts[:5] == [(1, 0.0, [0]), (2, 10.0, [1]), (3, 20.0, [2]), (4, H, [0, 3]), (1, 36_010.0, [1])]
    if not compiled:
        assert renewed[0] == [(3, [2], True), (2, [1], True)]
    started = [job for job, _, _ in policy.starts]
    assert started.count(2) == started.count(3) == 1  # renewed, never moved
    assert engine.preemptions.tolist() == [1, 0, 0, 0]


class NewestFirstDecliningW(NewestFirst):
    """NewestFirst, except that job id 9 is declined until 2 h."""

    def decide(self, offer, view):
        if offer.job_id == 9 and offer.now_s < 2 * H:
            return None
        return super().decide(offer, view)


@pytest.mark.parametrize("together", [True, False])
def test_a_job_below_its_best_tier_in_a_run_of_expired_leases_still_gets_its_upgrade(together):
    """Worked by hand: 1 rack x 2 machines x 4 GPUs, lease 1 h. A (3 GPUs, ends at 1,000 s)
    takes machine 0, C (3 GPUs) machine 1, B (2 GPUs) the last GPU of each: a rack placement.
    W (1 GPU, id 9) arrives at 2,000 s and is declined. At the 1 h boundary the order is W, B,
    C: W waits again, then B and C take their turns with nothing between them -- and B, below
    its best tier with machine 0's three idle GPUs and its own GPU 3 free, must get its upgrade
    offer rather than a renewal in place."""
    trace = make_trace([(1, 0, 3, 1_000, 1.0), (2, 1, 3, 36_000, 1.0), (3, 2, 2, 36_000, 1.0), (9, 2_000, 1, 100, 1.0)])
    policy = NewestFirstDecliningW()
    engine = Engine(trace, ClusterSpec(1, 2, 4), policy, TierLatency(), EngineConfig(lease_s=H))
    engine.renew_together = together
    run_policy(engine)
    assert policy.starts[:4] == [(1, 0.0, [0, 1, 2]), (2, 1.0, [4, 5, 6]), (3, 2.0, [3, 7]), (3, H, [0, 1])]
    assert engine.upgrades.tolist() == [0, 0, 1, 0]
