"""Dally (paper §IV-B): Algorithm 1, the Algorithm 2 auto-tuner, Nw_sens priority, variants.

Decision tests use hand-made offers; engine tests use tiny hand-built clusters whose timings
are worked out in the comments.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import make_trace, run_engine
from hypothesis import given, settings
from hypothesis import strategies as st

from dallygym.sim.cluster import ClusterSpec, Tier, tier_of_shape
from dallygym.sim.engine import EngineConfig, Offer
from dallygym.sim.latency import LatencyModel
from dallygym.sim.metrics import collect
from dallygym.sim.policies import Policy
from dallygym.sim.policies.dally import (
    AutoTuner,
    DallyConsolidatedPolicy,
    DallyManualPolicy,
    DallyNoWaitPolicy,
    DallyPolicy,
    default_history_s,
)

H = 3600.0
M, R, N = Tier.MACHINE, Tier.RACK, Tier.NETWORK
SMALL = ClusterSpec(2, 2, 4)  # the default cluster of started() and offer()


class ModelTierLatency(LatencyModel):
    """Speed factor by (model, tier); single-GPU jobs run at 1. vgg11 is slowed even inside
    a machine, so a vgg11 job on a machine has Nw_sens 0.9 and outranks a resnet50 job that
    ran at full speed (Nw_sens 1)."""

    name = "model-tier-stub"
    FACTORS = {"resnet50": (1.0, 0.5, 0.25), "vgg11": (0.9, 0.45, 0.2)}

    def speed_factor(self, model, shape) -> float:
        if sum(map(sum, shape)) == 1:
            return 1.0
        return self.FACTORS[model][int(tier_of_shape(shape))]


def started(policy, spec=SMALL, lease_s=H):
    """The policy after reset() on a fake view of a cluster (2 racks x 2 machines x 4 GPUs)."""
    policy.reset(SimpleNamespace(spec=spec, config=EngineConfig(lease_s=lease_s)), np.random.default_rng(0))
    return policy


def offer(num_gpus, starvation_s, tiers, now_s=100 * H, spec=SMALL):
    return Offer(0, 0, num_gpus, now_s, starvation_s, tuple(tiers), spec.best_possible_tier(num_gpus))


# --- Algorithm 1 at the decision level (dally-manual: T_Mc = 12 h, T_Rk = 24 h) -------------


def test_job_that_fits_a_free_machine_accepts_machine_without_waiting():
    policy = started(DallyManualPolicy())
    assert policy.decide(offer(2, 0.0, [M, R, N]), None) == M


def test_job_starving_less_than_machine_timer_rejects_rack_offer():
    policy = started(DallyManualPolicy())
    assert policy.decide(offer(2, 12 * H - 1, [R, N]), None) is None


def test_job_starving_machine_timer_accepts_rack():
    policy = started(DallyManualPolicy())
    assert policy.decide(offer(2, 12 * H, [R, N]), None) == R


def test_job_past_machine_timer_without_rack_waits_until_rack_timer():
    policy = started(DallyManualPolicy())
    assert policy.decide(offer(2, 13 * H, [N]), None) is None
    assert policy.decide(offer(2, 24 * H - 1, [N]), None) is None


def test_job_starving_rack_timer_accepts_network():
    policy = started(DallyManualPolicy())
    assert policy.decide(offer(2, 24 * H, [N]), None) == N


def test_job_bigger_than_machine_has_zero_machine_timer():
    policy = started(DallyManualPolicy())
    assert policy.timers(6, 0.0) == (0.0, 24 * H)
    assert policy.decide(offer(6, 0.0, [R, N]), None) == R
    assert policy.decide(offer(6, 0.0, [N]), None) is None  # the rack timer still applies


def test_job_bigger_than_rack_has_both_timers_zero():
    policy = started(DallyManualPolicy())
    assert policy.timers(12, 0.0) == (0.0, 0.0)
    assert policy.decide(offer(12, 0.0, [N]), None) == N


def test_auto_tuned_decision_uses_tuned_timers():
    # Two machine acceptances of 2-GPU jobs after 1 h and 3 h: T_Mc = 2 + 2 x sqrt(2) h.
    policy = started(DallyPolicy(history_s=1000 * H))
    policy.tuner.record(M, 2, 1 * H, 10 * H)
    policy.tuner.record(M, 2, 3 * H, 11 * H)
    t_machine = (2 + 2 * math.sqrt(2)) * H
    assert policy.timers(2, 12 * H) == pytest.approx((t_machine, 24 * H))
    assert policy.decide(offer(2, t_machine - 1, [R], now_s=12 * H), None) is None
    assert policy.decide(offer(2, t_machine + 1, [R], now_s=12 * H), None) == R


# --- Algorithm 1 through the engine -------------------------------------------------------


def _waiter_trace(h1_iterations=1_000_000):
    # 1 rack x 2 machines x 4 GPUs, lease 1 h, ModelTierLatency.
    # t=0: H0 (vgg11, 3 GPUs) takes machine 0; W (resnet50, 2 GPUs) takes machine 1.
    # t=10: H1 (vgg11, 3 GPUs) fits no machine (1 + 2 free) and waits (never run: Nw_sens 0).
    # t=1 h: order H1 (0), H0 (0.9), W (1.0). H1 takes machine 1, displacing W, the lowest
    #   priority: W is preempted (starving from 1 h) and is offered only a rack (1 + 1 free).
    # From then on H0 and H1 (Nw_sens 0.9) outrank W (1.0), so W gets only rack offers.
    # W did 3600 of its 4500 iterations before it lost its machine.
    return make_trace(
        [(0, 0, 3, 1_000_000, 1.0, "vgg11"), (1, 0, 2, 4500, 1.0, "resnet50"), (2, 10, 3, h1_iterations, 1.0, "vgg11")]
    )


def _run_waiter(policy_cls, job_id=1, **kw):
    """Run the waiter scenario; also return the offers to ``job_id`` (W by default) as
    (job_id, now, starvation, tiers, answer)."""
    offers = []

    class Recording(policy_cls):
        def decide(self, offer, view):
            answer = super().decide(offer, view)
            offers.append((offer.job_id, offer.now_s, offer.starvation_s, offer.tiers, answer))
            return answer

    engine = run_engine(_waiter_trace(**kw), ClusterSpec(1, 2, 4), Recording(), ModelTierLatency(), lease_s=H)
    return engine, [o for o in offers if o[0] == job_id]


def test_manual_job_waits_exactly_machine_timer_then_accepts_rack_at_round_boundary():
    # W starves from 1 h; at each boundary 2 h .. 12 h it rejects the rack; at 13 h it has
    # starved exactly 12 h = T_Mc and accepts the rack (speed 0.5): its last 900 iterations
    # take 1800 s, so it ends at 13 h + 1800 s.
    engine, w_offers = _run_waiter(DallyManualPolicy)
    after_loss = [o for o in w_offers if o[1] >= H]
    assert [o[1] for o in after_loss] == [k * H for k in range(1, 14)]
    assert all(o[4] is None for o in after_loss[:-1])
    assert after_loss[-1][2:] == (12 * H, (R,), R)
    assert engine.end_s[1] == 13 * H + 1800.0
    assert engine.preemptions[1] == 1


def test_nowait_accepts_rack_at_once_where_manual_waits():
    # In the same scenario, at t=10 H1 is offered only a rack. dally-manual rejects it (and
    # takes W's machine at the 1 h boundary); dally-nowait accepts it at once (speed 0.45), so
    # W keeps its machine and ends at 4500 s.
    manual, manual_offers = _run_waiter(DallyManualPolicy, job_id=2)
    assert manual_offers[0][1:] == (10.0, 0.0, (R,), None)
    assert manual.tier_s[2].tolist()[:2] == [manual.end_s[2] - H, 0.0]
    engine, offers = _run_waiter(DallyNoWaitPolicy, job_id=2)
    # W ends at 4500 s and frees its machine; at the 2 h boundary H1's lease renewal is an
    # offer of that machine (its clock, as it is, counts from its arrival at 10 s), which it
    # accepts: it moves there.
    assert offers == [(2, 10.0, 0.0, (R,), R), (2, 2 * H, 2 * H - 10.0, (M,), M)]
    assert engine.end_s[1] == 4500.0
    assert engine.preemptions.tolist() == [0, 0, 0]
    assert engine.upgrades.tolist() == [0, 0, 1]


def test_consolidated_rejects_rack_however_long_and_accepts_freed_machine():
    # H1 (90000 iterations at speed 0.9) ends at 1 h + 100000 s, 27.8 h after W lost its
    # machine (past both manual timers). W, rejecting every rack offer until then, takes the
    # freed machine at once and runs its last 900 iterations at speed 1.
    free_at = H + 100_000.0
    engine, w_offers = _run_waiter(DallyConsolidatedPolicy, h1_iterations=90_000)
    rack_offers = [o for o in w_offers if o[3] == (R,)]
    assert len(rack_offers) == 28  # boundaries at 1 h .. 28 h
    assert all(o[4] is None for o in rack_offers)
    assert rack_offers[-1][2] > 24 * H
    assert w_offers[-1][1:] == (free_at, free_at - H, (M, R), M)
    assert engine.end_s[1] == free_at + 900.0


def test_auto_tuner_learns_from_every_placement_in_a_run():
    # The same run under auto-tuned Dally: W's lists hold fewer than two entries, so it falls
    # back to the manual 12 h and behaves as dally-manual. The machine lists recorded H0 and W
    # at t=0 (starvation 0) and H1 at 1 h (starvation 3590 s); W's rack acceptance at 13 h.
    engine, _ = _run_waiter(DallyPolicy)
    assert engine.end_s[1] == 13 * H + 1800.0
    tuner = engine.policy.tuner
    assert tuner.entries(M, 3).tolist() == [0.0, 3590.0]
    assert tuner.entries(M, 2).tolist() == [0.0]
    assert tuner.entries(R, 2).tolist() == [12 * H]


def test_job_bigger_than_machine_accepts_rack_at_once_in_a_run():
    # 1 rack x 2 machines x 4 GPUs: a 6-GPU job can only ever have a rack: T_Mc = 0, it starts
    # at 0 at speed 0.5 and its 100 iterations take 200 s.
    engine = run_engine(make_trace([(0, 0, 6, 100, 1.0)]), ClusterSpec(1, 2, 4), DallyManualPolicy())
    assert engine.first_start_s[0] == 0.0
    assert engine.end_s[0] == 200.0
    assert engine.placements_by_tier.tolist() == [0, 1, 0]


def test_job_bigger_than_rack_accepts_network_at_once_in_a_run():
    # 2 racks x 1 machine x 4 GPUs: a 6-GPU job spans both racks, speed 0.25: 400 s.
    engine = run_engine(make_trace([(0, 0, 6, 100, 1.0)]), ClusterSpec(2, 1, 4), DallyManualPolicy())
    assert engine.end_s[0] == 400.0
    assert engine.placements_by_tier.tolist() == [0, 0, 1]


# --- Algorithm 2: the auto-tuner ------------------------------------------------------------


def test_tuned_timer_is_mean_plus_two_sample_standard_deviations():
    # Starvations 2, 4, 6 h: mean 4 h, sample std 2 h -> 8 h.
    tuner = AutoTuner(history_s=1000 * H)
    for i, starved in enumerate((2, 4, 6)):
        tuner.record(M, 4, starved * H, i * H)
    assert tuner.timers(4, 3 * H) == pytest.approx((8 * H, 24 * H))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e7, allow_nan=False), min_size=2, max_size=60))
def test_tuned_timer_equals_numpys_mean_plus_two_std_exactly(starvations):
    # Algorithm 2, lines 13-14, to the last bit (the runs' determinism depends on it).
    tuner = AutoTuner(history_s=math.inf)
    for s in starvations:
        tuner.record(R, 16, s, 0.0)
    values = np.array(starvations)
    assert tuner.timers(16, 0.0)[1] == float(values.mean() + 2.0 * values.std(ddof=1))


def test_old_entries_leave_the_history_window():
    # Window 25 h. Entries recorded at 0, 10, 20, 30 h with starvations 2, 4, 6, 8 h.
    tuner = AutoTuner(history_s=25 * H)
    for t, starved in ((0, 2), (10, 4), (20, 6)):
        tuner.record(R, 8, starved * H, t * H)
    assert tuner.timers(8, 20 * H)[1] == pytest.approx(8 * H)  # 2, 4, 6: mean 4, std 2
    tuner.record(R, 8, 8 * H, 30 * H)
    # At 30 h the window starts at 5 h: 4, 6, 8 -> mean 6, std 2 -> 10 h; an entry recorded
    # exactly at now - window is still inside (35 h), one second later it is out.
    assert tuner.timers(8, 30 * H)[1] == pytest.approx(10 * H)
    assert tuner.timers(8, 35 * H)[1] == pytest.approx(10 * H)
    assert tuner.timers(8, 35 * H + 1)[1] == pytest.approx((7 + 2 * math.sqrt(2)) * H)  # 6, 8
    assert tuner.entries(R, 8, now_s=35 * H + 1).tolist() == [6 * H, 8 * H]
    # At 50 h only the 8 h entry is left: too few for a standard deviation -> manual 24 h.
    assert tuner.timers(8, 50 * H)[1] == 24 * H


def test_timer_with_fewer_than_two_entries_falls_back_to_manual():
    tuner = AutoTuner(history_s=1000 * H, t_machine_s=5.0, t_rack_s=7.0)
    assert tuner.timers(2, 0.0) == (5.0, 7.0)
    tuner.record(M, 2, 3 * H, 0.0)
    assert tuner.timers(2, 0.0) == (5.0, 7.0)
    tuner.record(M, 2, 3 * H, 0.0)
    assert tuner.timers(2, 0.0) == (3 * H, 7.0)  # two equal entries: std 0


def test_machine_and_rack_lists_are_separate_and_keyed_by_demand():
    tuner = AutoTuner(history_s=1000 * H)
    for starved in (1, 3):
        tuner.record(M, 2, starved * H, 0.0)
    for starved in (10, 10):
        tuner.record(R, 2, starved * H, 0.0)
    for starved in (5, 5):
        tuner.record(M, 4, starved * H, 0.0)
    tuner.record(N, 2, 99 * H, 0.0)  # network acceptances are not recorded
    assert tuner.timers(2, 0.0) == pytest.approx(((2 + 2 * math.sqrt(2)) * H, 10 * H))
    assert tuner.timers(4, 0.0) == (5 * H, 24 * H)
    assert tuner.timers(8, 0.0) == (12 * H, 24 * H)
    assert tuner.entries(N, 2).size == 0


def test_entries_are_read_only():
    tuner = AutoTuner(history_s=H)
    tuner.record(M, 1, 5.0, 0.0)
    with pytest.raises(ValueError):
        tuner.entries(M, 1)[0] = 0.0


def test_reference_floors_and_caps_clamp_tuned_timers_only_when_asked():
    lease = 100.0
    tuner = AutoTuner(history_s=10 * H, lease_s=lease, floors=True, caps=True)
    plain = AutoTuner(history_s=10 * H, lease_s=lease)
    for t in (tuner, plain):
        t.record(M, 2, 0.0, 0.0)
        t.record(M, 2, 0.0, 0.0)
        t.record(R, 2, 20 * H, 0.0)
        t.record(R, 2, 20 * H, 0.0)
    assert plain.timers(2, 0.0) == (0.0, 20 * H)
    assert tuner.timers(2, 0.0) == (6 * lease, 10 * H)  # floor 6 leases; cap H
    tuner.record(M, 2, 30 * H, 0.0)
    assert tuner.timers(2, 0.0)[0] == 0.8 * 10 * H  # cap 0.8 H


def test_entries_must_be_recorded_in_time_order():
    tuner = AutoTuner(history_s=H)
    tuner.record(M, 1, 0.0, 10.0)
    with pytest.raises(ValueError, match="time order"):
        tuner.record(M, 1, 0.0, 5.0)


def test_default_history_window_shrinks_with_cluster_size():
    assert default_history_s(ClusterSpec(8)) == 24 * H
    assert default_history_s(ClusterSpec(2)) == 96 * H
    assert default_history_s(ClusterSpec(16)) == 12 * H
    assert started(DallyPolicy(), ClusterSpec(4)).tuner.history_s == 48 * H
    assert started(DallyPolicy(history_s=5 * H), ClusterSpec(4)).tuner.history_s == 5 * H


# --- Nw_sens priority -----------------------------------------------------------------------


def test_slowed_job_is_offered_before_fast_one_and_never_run_jobs_first():
    # 1 rack x 2 machines x 4 GPUs, lease 100 s, TierLatency (rack 0.5).
    # t=0: S (2 GPUs) is forced onto a rack (speed 0.5); F (2 GPUs) takes a machine (speed 1).
    # t=50: N (8 GPUs) arrives, does not fit. t=100 (boundary): N (Nw_sens 0) first takes the
    #   whole rack (bigger than a machine: T_Mc = 0), preempting S and F; 5 iterations at 0.5
    #   end at 110. t=105: M (2 GPUs) arrives, nothing free.
    # t=110: offers in Nw_sens order: M never ran (0); S ran 100 s at speed 0.5 with 1-s
    #   iterations: 50 iterations in 100 s -> 0.5; F: 100 iterations in 100 s -> 1.
    seen = []

    class ForcedRack(DallyPolicy):
        def decide(self, offer, view):
            seen.append((offer.job_id, offer.now_s, float(view.nw_sens(np.array([offer.job]))[0])))
            if offer.job_id == 0 and offer.now_s == 0:
                return Tier.RACK
            return super().decide(offer, view)

    trace = make_trace([(0, 0, 2, 1000, 1.0), (1, 0, 2, 1000, 1.0), (2, 50, 8, 5, 1.0), (3, 105, 2, 10, 1.0)])
    engine = run_engine(trace, ClusterSpec(1, 2, 4), ForcedRack(), lease_s=100.0)
    assert [s for s in seen if s[1] == 110.0] == [(3, 110.0, 0.0), (0, 110.0, 0.5), (1, 110.0, 1.0)]
    assert engine.preemptions.tolist() == [1, 1, 0, 0]


def test_priority_is_nw_sens_for_every_variant():
    view = SimpleNamespace(nw_sens=lambda jobs: np.asarray(jobs, dtype=float) / 10)
    for cls in (DallyPolicy, DallyManualPolicy, DallyNoWaitPolicy, DallyConsolidatedPolicy):
        assert cls().priority(view, np.array([3, 1])).tolist() == [0.3, 0.1]


# --- variants -------------------------------------------------------------------------------


def test_variant_names():
    assert [c.name for c in (DallyPolicy, DallyManualPolicy, DallyNoWaitPolicy, DallyConsolidatedPolicy)] == [
        "dally",
        "dally-manual",
        "dally-nowait",
        "dally-consolidated",
    ]


def test_nowait_never_waits():
    policy = started(DallyNoWaitPolicy())
    for g, tiers in ((2, [R, N]), (2, [N]), (6, [N]), (1, [M])):
        assert policy.decide(offer(g, 0.0, tiers), None) == tiers[0]


def test_consolidated_waits_for_the_best_tier_the_job_can_fit_in():
    policy = started(DallyConsolidatedPolicy())
    forever = 1e12
    assert policy.decide(offer(2, forever, [R, N]), None) is None
    assert policy.decide(offer(2, forever, [M, R, N]), None) == M
    assert policy.decide(offer(6, forever, [N]), None) is None
    assert policy.decide(offer(6, 0.0, [R, N]), None) == R
    assert policy.decide(offer(12, 0.0, [N]), None) == N


def test_manual_timers_are_12_and_24_hours():
    assert started(DallyManualPolicy()).timers(2, 0.0) == (12 * H, 24 * H)
    assert started(DallyManualPolicy(t_machine_s=1.0, t_rack_s=2.0)).timers(2, 0.0) == (1.0, 2.0)
    assert started(DallyManualPolicy()).tuner is None


def test_timers_need_a_started_run():
    with pytest.raises(RuntimeError, match="reset"):
        DallyPolicy().timers(2, 0.0)


@pytest.mark.parametrize("kwargs", [{"history_s": 0}, {"history_s": float("nan")}, {"t_machine_s": -1}])
def test_bad_options_name_the_parameter(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        DallyPolicy(**kwargs)


# --- determinism ----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [DallyPolicy, DallyManualPolicy, DallyNoWaitPolicy, DallyConsolidatedPolicy])
def test_same_inputs_give_identical_summaries(cls):
    rng = np.random.default_rng(3)
    rows = [
        (
            i,
            float(rng.integers(0, 20_000)),
            int(rng.choice([1, 2, 4, 8, 16])),
            int(rng.integers(100, 5000)),
            float(rng.uniform(0.5, 5)),
        )
        for i in range(60)
    ]
    trace = make_trace(rows)
    runs = [
        collect(
            run_engine(
                trace, ClusterSpec(2, 2, 4), cls(history_s=6 * H) if cls is DallyPolicy else cls(), lease_s=600.0
            )
        )
        for _ in range(2)
    ]
    assert runs[0].summary == runs[1].summary
    assert runs[0].jobs.equals(runs[1].jobs)


@settings(max_examples=100, deadline=None)
@given(
    entries=st.lists(
        st.tuples(st.sampled_from([0, 1, 2]), st.sampled_from([1, 2, 4, 8]), st.floats(0, 1e5), st.floats(0, 1e3)),
        max_size=40,
    )
)
def test_record_many_is_record_for_each_entry(entries):
    """AutoTuner.record_many: the same lists and timers as record() per entry, in order."""
    one, many = AutoTuner(7200.0), AutoTuner(7200.0)
    now = 0.0
    rows = []
    for level, g, waited, step in entries:
        now += step
        rows.append((level, g, waited, now))
        one.record(Tier(level), g, waited, now)
    if rows:
        levels, gpus, waited, times = (np.array(col) for col in zip(*rows))
        many.record_many(levels, gpus, waited, times)
    assert one._times == many._times and one._values == many._values
    for g in (1, 2, 4, 8):
        assert one.timers(g, now) == many.timers(g, now)


def test_record_many_refuses_what_record_refuses():
    tuner = AutoTuner(3600.0)
    with pytest.raises(ValueError, match="starvation_s must be >= 0"):
        tuner.record_many(np.array([0]), np.array([2]), np.array([np.nan]), np.array([1.0]))
    with pytest.raises(ValueError, match="time order"):
        tuner.record_many(np.array([0, 1]), np.array([2, 2]), np.array([1.0, 1.0]), np.array([5.0, 4.0]))
    tuner.record(Tier.MACHINE, 2, 1.0, 10.0)
    with pytest.raises(ValueError, match="time order"):
        tuner.record_many(np.array([0]), np.array([2]), np.array([1.0]), np.array([9.0]))
    tuner.record_many(np.array([2]), np.array([2]), np.array([-1.0]), np.array([0.0]))  # NETWORK: not kept, not checked


def test_a_subclass_overriding_on_start_alone_gets_no_batch_hook():
    from dallygym.sim.policies.base import start_batch_hook

    class Counting(DallyPolicy):
        def on_start(self, view, job, tier, starvation_s, now_s):
            super().on_start(view, job, tier, starvation_s, now_s)

    assert start_batch_hook(DallyPolicy()) is not None
    assert start_batch_hook(Counting()) is None
    assert start_batch_hook(Policy()) is None


def test_policy_remembers_timers_until_time_moves_or_the_tuner_records_an_entry():
    """DallyPolicy.timers answers from its memo only while nothing they depend on changed: the
    same time, and no entry recorded since (also one recorded on the tuner directly). A demand
    beyond a machine or a rack keeps its size rules when remembered."""
    policy = started(DallyPolicy(history_s=100 * H, t_machine_s=12 * H, t_rack_s=24 * H))
    tuner = policy.tuner
    for at, waited in ((0.0, 2 * H), (1.0, 4 * H)):
        tuner.record(Tier.MACHINE, 4, waited, at)
    tuned = 3 * H + 2 * math.sqrt(2) * H
    assert policy.timers(4, 2.0) == (tuned, 24 * H)
    assert policy.timers(2, 2.0) == (12 * H, 24 * H)  # another demand at the same time: untuned
    assert policy.timers(4, 2.0) == (tuned, 24 * H)
    assert policy.timers(8, 2.0) == (0.0, 24 * H)  # bigger than a machine (4 GPUs)
    assert policy.timers(8, 2.0) == (0.0, 24 * H)
    assert policy.timers(16, 2.0) == (0.0, 0.0)  # bigger than a rack
    tuner.record(Tier.MACHINE, 2, H, 2.0)
    tuner.record(Tier.MACHINE, 2, 3 * H, 2.0)
    assert policy.timers(2, 2.0) == (2 * H + 2 * math.sqrt(2) * H, 24 * H)  # a record invalidates
    policy.on_start_batch(
        SimpleNamespace(placement_kind="new", num_gpus=np.array([2, 2])),
        np.array([0, 1]),
        np.array([0, 0]),
        np.array([2 * H, 2 * H]),
        np.array([2.0, 2.0]),
    )
    assert policy.timers(2, 2.0) == tuner.timers(2, 2.0) != (2 * H + 2 * math.sqrt(2) * H, 24 * H)
    assert policy.timers(4, 101 * H) == (12 * H, 24 * H)  # time moved: the window left them out
    assert tuner.timers(4, 2.0) == (tuned, 24 * H)  # the tuner itself remembers nothing


# --- readings of the open points: never_run_nw_sens, tuner_limit ---------------------------------


def _never_run_case():
    # 1 machine x 4 GPUs, lease 100 s, ModelTierLatency. R (resnet50, 4 GPUs, 1000 iterations
    # of 1 s) runs from 0 on the machine at speed 1. V (vgg11, 4 GPUs, 9 iterations of 1 s;
    # speed 0.9 on a machine) arrives at 50 and waits. At the boundary at 100, R has Nw_sens
    # 100 / 100 = 1; V never ran:
    #   "zero": V has 0 < 1 -> V first, takes the machine, R is preempted (100 done). V ends at
    #           100 + 9 / 0.9 = 110; R resumes and ends at 110 + 900 = 1010.
    #   "one":  V has 1 = R's; the tie goes to the earlier arrival, R: it keeps the machine and
    #           ends at 1000; V runs from 1000 to 1010.
    #   "best": V has the speed factor of its best placement (one machine): 0.9 < 1 -> as "zero".
    return make_trace([(0, 0, 4, 1000, 1.0, "resnet50"), (1, 50, 4, 9, 1.0, "vgg11")])


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(
    "reading, v_end, r_end, r_preempted",
    [("zero", 110.0, 1010.0, 1), ("one", 1010.0, 1000.0, 0), ("best", 110.0, 1010.0, 1)],
)
def test_never_run_nw_sens_readings_rank_a_new_job(monkeypatch, compiled, reading, v_end, r_end, r_preempted):
    from dallygym.sim.cluster import ClusterState

    monkeypatch.setattr(ClusterState, "compiled", compiled)
    engine = run_engine(
        _never_run_case(),
        ClusterSpec(1, 1, 4),
        DallyPolicy(never_run_nw_sens=reading),
        ModelTierLatency(),
        lease_s=100.0,
    )
    assert engine.end_s[1] == pytest.approx(v_end)
    assert engine.end_s[0] == pytest.approx(r_end)
    assert engine.preemptions[0] == r_preempted


@pytest.mark.parametrize("compiled", [True, False])
def test_never_run_nw_sens_values_before_the_run(monkeypatch, compiled):
    from dallygym.sim.cluster import ClusterState
    from dallygym.sim.engine import Engine

    monkeypatch.setattr(ClusterState, "compiled", compiled)
    # 2 racks x 2 machines x 4 GPUs: vgg11 on 2 GPUs fits a machine (0.9); resnet50 on 8 GPUs
    # fits a rack at best (0.5); a 1-GPU job runs at 1.
    trace = make_trace([(0, 0, 2, 10, 1.0, "vgg11"), (1, 0, 8, 10, 1.0, "resnet50"), (2, 0, 1, 10, 1.0, "vgg11")])
    expected = {"zero": [0.0, 0.0, 0.0], "one": [1.0, 1.0, 1.0], "best": [0.9, 0.5, 1.0]}
    for reading, values in expected.items():
        engine = Engine(
            trace,
            ClusterSpec(2, 2, 4),
            DallyPolicy(never_run_nw_sens=reading),
            ModelTierLatency(),
            EngineConfig(lease_s=100.0),
        )
        gen = engine.decisions()
        next(gen, None)  # the run starts: reset, then the first decision (or the end)
        assert engine._never_nw_sens.tolist() == values
        fresh = engine.nw_sens(np.flatnonzero(engine.run_s == 0))
        assert fresh.tolist() == [values[j] for j in np.flatnonzero(engine.run_s == 0)]


def test_best_placement_shape_fills_machines_then_racks():
    from dallygym.sim.policies.dally import best_placement_shape

    spec = ClusterSpec(4, 2, 8)
    assert best_placement_shape(3, spec) == ((3,),)
    assert best_placement_shape(8, spec) == ((8,),)
    assert best_placement_shape(12, spec) == ((8, 4),)
    assert best_placement_shape(20, spec) == ((8, 8), (4,))


def test_never_run_option_on_every_variant_and_checked():
    for cls in (DallyPolicy, DallyManualPolicy, DallyNoWaitPolicy, DallyConsolidatedPolicy):
        assert cls().never_run_nw_sens == "zero"
        assert cls(never_run_nw_sens="one").never_run_nw_sens == "one"
        assert "never_run_nw_sens='one'" in repr(cls(never_run_nw_sens="one"))
    with pytest.raises(ValueError, match="never_run_nw_sens"):
        DallyPolicy(never_run_nw_sens="half")
    with pytest.raises(ValueError, match="tuner_limit"):
        DallyPolicy(tuner_limit="count")
    assert repr(DallyPolicy()) == (
        "DallyPolicy(history_s=None, t_machine_s=43200, t_rack_s=86400, floors=False, caps=False)"
    )


def test_tuner_limit_window_versus_value():
    # History limit 10 h. Machine waits for 1-GPU jobs: 1 h recorded at 0, 3 h at 1 h, 20 h at 30 h.
    # At 31 h:
    #   "window": only entries recorded since 21 h count: the 20 h one alone -> fewer than two,
    #             the manual 12 h.
    #   "value":  waits above 10 h are removed whenever recorded: 1 h and 3 h count -> mean 2 h
    #             + 2 x sample sd sqrt(2) h = (2 + 2 sqrt 2) h.
    for limit, expected in (("window", 12 * H), ("value", (2 + 2 * math.sqrt(2)) * H)):
        tuner = AutoTuner(10 * H, limit=limit)
        tuner.record(M, 1, 1 * H, 0.0)
        tuner.record(M, 1, 3 * H, 1 * H)
        tuner.record(M, 1, 20 * H, 30 * H)
        assert tuner.timers(1, 31 * H)[0] == pytest.approx(expected)
    assert AutoTuner(10 * H, limit="value").entries(M, 1).size == 0
    by_value = AutoTuner(10 * H, limit="value")
    by_value.record_many(
        np.array([int(M)] * 3), np.array([1, 1, 1]), np.array([H, 3 * H, 20 * H]), np.array([0.0, H, 30 * H])
    )
    assert by_value.entries(M, 1, 31 * H).tolist() == [H, 3 * H]  # no recording-time window
    assert by_value.timers(1, 31 * H)[0] == pytest.approx((2 + 2 * math.sqrt(2)) * H)
    with pytest.raises(ValueError, match="tuner_limit"):
        AutoTuner(10 * H, limit="count")


def test_tuner_limit_value_keeps_a_wait_equal_to_the_limit():
    # Algorithm 2 removes a wait only if it *exceeds* the limit.
    tuner = AutoTuner(10 * H, limit="value")
    tuner.record(M, 1, 10 * H, 0.0)
    tuner.record(M, 1, 10 * H, 0.0)
    assert tuner.timers(1, 100 * H)[0] == 10 * H


def test_tuner_limit_reaches_the_policys_tuner_and_uses_the_scaled_limit():
    policy = started(DallyPolicy(tuner_limit="value"), ClusterSpec(2))
    assert policy.tuner.limit == "value" and policy.tuner.history_s == 96 * H
    assert started(DallyPolicy(), ClusterSpec(8)).tuner.limit == "window"


@pytest.mark.parametrize(
    "options", [dict(never_run_nw_sens="one"), dict(never_run_nw_sens="best"), dict(tuner_limit="value")]
)
def test_options_compiled_and_python_runs_agree(monkeypatch, options):
    from dallygym.sim.cluster import ClusterState
    from dallygym.sim.simulate import simulate

    results = []
    for compiled in (True, False):
        monkeypatch.setattr(ClusterState, "compiled", compiled)
        results.append(simulate("small", ClusterSpec(1, 4, 8), policy=DallyPolicy(**options)).summary)
    assert results[0] == results[1]
