"""Tiresias: discretised 2DAS queues, promotion, preemption by queue, skew-based consolidation."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import TierLatency, check_holdings, drive, make_trace, run_engine, small_runs
from hypothesis import HealthCheck, given, settings

from dallygym.sim.cluster import ClusterSpec, ClusterState
from dallygym.sim.engine import DONE, Engine
from dallygym.sim.metrics import collect
from dallygym.sim.policies.tiresias import (
    DEFAULT_QUEUE_LIMITS_GPU_S,
    TiresiasPolicy,
    consolidated_placement,
)

NO_ROUNDS = 1e9


def test_defaults_are_the_public_simulators_queues():
    policy = TiresiasPolicy()
    assert tuple(policy.queue_limits_gpu_s) == DEFAULT_QUEUE_LIMITS_GPU_S == (3250.0, 7200.0)
    assert policy.promote_knob is None and policy.skew_threshold == 0.3  # dlas-gpu: no guard


@pytest.mark.parametrize("limit, b_starts", [(200.0, 100.0), (201.0, 200.0)])
def test_job_is_demoted_exactly_when_gpus_times_run_time_reaches_the_threshold(limit, b_starts):
    # One machine of 2 GPUs, lease 100. A (2 GPUs) runs from 0; at t=100 it has attained
    # 2 x 100 = 200 GPU-s. With a threshold of 200 it is in queue 1 there, so B (arrived at 10,
    # queue 0) takes its GPUs at the boundary; with 201 A stays in queue 0 until t=200.
    spec = ClusterSpec(1, 1, 2)
    trace = make_trace([(0, 0, 2, 1000, 1.0), (1, 10, 2, 50, 1.0)])
    engine = run_engine(trace, spec, TiresiasPolicy((limit,), promote_knob=None), lease_s=100.0)
    assert engine.first_start_s[1] == b_starts
    assert engine.preemptions.tolist() == [1, 0]


def test_lower_queue_job_is_preempted_at_the_round_boundary_by_a_higher_queue_job():
    # One machine of 4 GPUs, lease 100, threshold 1000 GPU-s. A (4 GPUs) reaches 1000 GPU-s at
    # t=250: it is still queue 0 at the boundary at 200 (800 GPU-s) and keeps its GPUs although
    # B waits since 150; at 300 it is in queue 1 and B (queue 0) preempts it. B ends at 350 and
    # A resumes on its own GPUs: 300 iterations done, 700 left, ends at 1050.
    spec = ClusterSpec(1, 1, 4)
    trace = make_trace([(0, 0, 4, 1000, 1.0), (1, 150, 4, 50, 1.0)])
    engine = run_engine(trace, spec, TiresiasPolicy((1000.0,), promote_knob=None), lease_s=100.0)
    assert engine.first_start_s.tolist() == [0.0, 300.0]
    assert engine.end_s.tolist() == [1050.0, 350.0]
    assert engine.preemptions.tolist() == [1, 0]


def _starvation_trace():
    # One GPU, lease 100, threshold 100 GPU-s. A runs 0..100 and drops to queue 1; a stream of
    # 100-s jobs C1..C4 (arrivals 50, 150, 250, 350) keeps queue 0 busy.
    rows = [(0, 0, 1, 1000, 1.0)] + [(i, 100 * i - 50, 1, 100, 1.0) for i in range(1, 5)]
    return ClusterSpec(1, 1, 1), make_trace(rows)


def test_starving_job_is_promoted_to_the_top_queue_after_knob_times_its_run_time():
    # knob 1: at t=200 A has waited 100 s (100..200) >= 1 x its 100 s run, so it is promoted
    # to queue 0 with its attained service reset, and as the earliest arrival there it runs
    # 200..300 ahead of C2, which then starts at 300.
    spec, trace = _starvation_trace()
    policy = TiresiasPolicy((100.0,), promote_knob=1.0)
    engine = run_engine(trace, spec, policy, lease_s=100.0)
    assert engine.first_start_s[2] == 300.0
    assert policy.promotions[0] >= 1
    assert policy.promotions[1:].tolist() == [0, 0, 0, 0]


def test_without_the_guard_a_demoted_job_waits_for_every_top_queue_job():
    spec, trace = _starvation_trace()
    policy = TiresiasPolicy((100.0,), promote_knob=None)
    engine = run_engine(trace, spec, policy, lease_s=100.0)
    assert engine.first_start_s[1:].tolist() == [100.0, 200.0, 300.0, 400.0]
    assert engine.end_s[0] == 500.0 + 900.0
    assert policy.promotions.sum() == 0


def test_high_skew_model_waits_for_a_machine_while_low_skew_one_spreads_at_once():
    # 1 rack x 2 machines x 4 GPUs. X (3 GPUs) takes machine 0, Y (3 GPUs) machine 1: one GPU
    # free on each. V (vgg11, skew 0.77, 2 GPUs) arrives at 1 and refuses the rack offer; R
    # (resnet50, skew 0.09, 2 GPUs) arrives at 2 and takes it at once. V starts on machine 0
    # when X ends at 100.
    spec = ClusterSpec(1, 2, 4)
    trace = make_trace(
        [
            (0, 0, 3, 100, 1.0),
            (1, 0, 3, 1000, 1.0),
            (2, 1, 2, 10, 1.0, "vgg11"),
            (3, 2, 2, 500, 1.0, "resnet50"),
        ]
    )
    engine = run_engine(trace, spec, TiresiasPolicy(), lease_s=NO_ROUNDS)
    assert engine.first_start_s[2:].tolist() == [100.0, 2.0]
    jobs = collect(engine).jobs.set_index("job_id")
    assert jobs.loc[2, "machine_s"] == jobs.loc[2, "run_s"] > 0
    assert jobs.loc[3, "rack_s"] == jobs.loc[3, "run_s"] > 0


def test_high_skew_job_bigger_than_a_machine_waits_for_the_fewest_machines():
    # 1 rack x 3 machines x 4 GPUs. X (2 GPUs) on machine 0, Y (3 GPUs) on machine 1: free
    # 2 + 1 + 4 = 7. V (alexnet, 7 GPUs) needs ceil(7/4) = 2 machines, which hold only 6 free:
    # it waits (the engine would offer it 3 machines) until X ends at 50, then takes 4 + 3.
    spec = ClusterSpec(1, 3, 4)
    trace = make_trace([(0, 0, 2, 50, 1.0), (1, 0, 3, 1000, 1.0), (2, 1, 7, 10, 1.0, "alexnet")])
    engine = run_engine(trace, spec, TiresiasPolicy(), lease_s=NO_ROUNDS)
    assert engine.first_start_s[2] == 50.0
    # A low-skew model of the same demand spreads over the three machines at once.
    low = make_trace([(0, 0, 2, 50, 1.0), (1, 0, 3, 1000, 1.0), (2, 1, 7, 10, 1.0, "bert_large")])
    assert run_engine(low, spec, TiresiasPolicy(), lease_s=NO_ROUNDS).first_start_s[2] == 1.0


def _state(spec, used_per_machine):
    state = ClusterState(spec)
    g = spec.gpus_per_machine
    for m, used in enumerate(used_per_machine):
        if used:
            state.allocate(100 + m, np.arange(m * g, m * g + used))
    return state


def _machines(spec, gpus):
    return sorted(set((np.asarray(gpus) // spec.gpus_per_machine).tolist()))


def test_consolidated_placement_prefers_one_rack_on_the_fewest_machines():
    # 2 racks x 3 machines x 4 GPUs; free per machine: rack 0 (4, 2, 2), rack 1 (4, 4, 1).
    # 8 GPUs need 2 machines: rack 1's machines 3 and 4. (The engine's best-fit rack would be
    # rack 0, over 3 machines.)
    spec = ClusterSpec(2, 3, 4)
    gpus = consolidated_placement(_state(spec, [0, 2, 2, 0, 0, 3]), 8)
    assert _machines(spec, gpus) == [3, 4] and len(gpus) == 8


def test_consolidated_placement_crosses_racks_rather_than_use_more_machines():
    # Free: rack 0 (4, 2, 2), rack 1 (4, 1, 1): no rack has two machines for 8 GPUs, so the job
    # goes on machines 0 and 3 in two racks -- Tiresias does not see racks.
    spec = ClusterSpec(2, 3, 4)
    gpus = consolidated_placement(_state(spec, [0, 2, 2, 0, 3, 3]), 8)
    assert _machines(spec, gpus) == [0, 3]
    assert consolidated_placement(_state(spec, [1, 2, 2, 0, 3, 3]), 8) is None


@pytest.mark.parametrize("g", [5, 8, 9, 12, 16, 17])
def test_consolidated_placement_uses_ceil_g_over_gpus_per_machine_machines(g):
    spec = ClusterSpec(2, 4, 4)
    gpus = consolidated_placement(_state(spec, [1, 0, 2, 0, 3, 0, 0, 1]), g)
    assert len(gpus) == len(set(gpus.tolist())) == g
    assert len(_machines(spec, gpus)) == -(-g // 4)


class RecordingTiresias(TiresiasPolicy):
    """Tiresias that records how many machines every placement of a high-skew job spans."""

    def reset(self, view, rng):
        super().reset(view, rng)
        self.spans = []

    def on_start(self, view, job, tier, starvation_s, now_s):
        super().on_start(view, job, tier, starvation_s, now_s)
        if self.high_skew[job]:
            machines = len(np.unique(view.gpus[job] // view.spec.gpus_per_machine))
            self.spans.append((machines, -(-int(view.num_gpus[job]) // view.spec.gpus_per_machine)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_runs())
def test_invariants_hold_under_tiresias_and_high_skew_jobs_always_get_the_fewest_machines(run):
    spec, trace, config = run
    trace = trace.assign(model=np.where(trace["job_id"] % 2 == 0, "vgg11", "resnet50"))
    policy = RecordingTiresias((300.0, 900.0), promote_knob=2.0)
    engine = drive(Engine(trace, spec, policy, TierLatency(), config))
    check_holdings(engine)
    assert (engine.state == DONE).all()
    assert np.array_equal(engine.done_iters, engine.total_iterations)
    jobs = collect(engine).jobs
    assert (jobs["jct_s"] >= jobs["ideal_s"] * (1 - 1e-12)).all()
    assert (jobs["queue_s"] >= -1e-6).all()
    assert all(used == fewest for used, fewest in policy.spans)
