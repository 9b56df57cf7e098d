"""Gandiva: FIFO, affinity placement, random-but-seeded spreading, migration to consolidate."""

from __future__ import annotations

import numpy as np
from helpers import make_trace, run_engine

from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.metrics import collect
from dallygym.sim.policies import FifoPolicy
from dallygym.sim.policies.gandiva import GandivaPolicy

NO_ROUNDS = 1e9


def machines_of(engine, job_id):
    j = int(np.flatnonzero(engine.job_id == job_id)[0])
    return set((engine.last_gpus[j] // engine.spec.gpus_per_machine).tolist())


def _affinity_trace():
    # 3 machines x 8 GPUs, no round boundaries. A and B (8 GPUs) take two machines (random);
    # C (2 GPUs) the third, where D (6 GPUs, 1..21) joins it. A ends at 10; E (5 GPUs, at 11)
    # can only go to A's old machine (3 free left). D ends at 21: C's machine has 6 free.
    # F (2 GPUs, at 22) could go to E's machine (3 free: best fit) or C's (6 free).
    return make_trace(
        [
            (1, 0, 8, 10, 1.0),
            (2, 0, 8, 1000, 1.0),
            (3, 0, 2, 1000, 1.0),
            (4, 1, 6, 20, 1.0),
            (5, 11, 5, 1000, 1.0),
            (6, 22, 2, 100, 1.0),
        ]
    )


def test_small_job_goes_to_a_machine_running_jobs_of_its_size_not_best_fit():
    spec = ClusterSpec(1, 3, 8)
    for seed in range(8):  # a random choice between the two machines would fail 255 in 256
        engine = run_engine(_affinity_trace(), spec, GandivaPolicy(), lease_s=NO_ROUNDS, seed=seed)
        assert machines_of(engine, 6) == machines_of(engine, 3)  # with C, the other 2-GPU job
        assert machines_of(engine, 6) != machines_of(engine, 5)
    best_fit = run_engine(_affinity_trace(), spec, FifoPolicy(), lease_s=NO_ROUNDS)
    assert machines_of(best_fit, 6) == machines_of(best_fit, 5)  # what best fit would do


def test_spread_job_migrates_to_one_machine_at_the_next_round_boundary():
    # 1 rack x 2 machines x 4 GPUs, lease 150, restart overhead 10. X and Y (3 GPUs) take one
    # machine each; Z (2 GPUs, at 1) never waits: it takes the last free GPU of each machine
    # (rack tier, speed 0.5). X ends at 100; at the boundary at 150 Z (74.5 of 1000 iterations
    # done) moves to X's machine, pays 10 s and runs at speed 1 from 160: it ends at 1085.5.
    spec = ClusterSpec(1, 2, 4)
    trace = make_trace([(0, 0, 3, 100, 1.0), (1, 0, 3, 5000, 1.0), (2, 1, 2, 1000, 1.0)])
    engine = run_engine(trace, spec, GandivaPolicy(), lease_s=150.0, restart_overhead_s=10.0)
    assert engine.first_start_s[2] == 1.0
    assert engine.migrations.tolist() == [0, 0, 1]
    assert engine.end_s[2] == 1085.5
    assert machines_of(engine, 2) == machines_of(engine, 0)
    jobs = collect(engine).jobs.set_index("job_id")
    assert jobs.loc[2, "overhead_s"] == 10.0
    assert jobs.loc[2, "rack_s"] == 149.0 and jobs.loc[2, "machine_s"] == 1085.5 - 150.0
    assert collect(engine).summary["migrations"] == 1


def test_spread_job_stays_when_no_consolidated_slot_frees():
    spec = ClusterSpec(1, 2, 4)
    trace = make_trace([(0, 0, 3, 5000, 1.0), (1, 0, 3, 5000, 1.0), (2, 1, 2, 1000, 1.0)])
    engine = run_engine(trace, spec, GandivaPolicy(), lease_s=150.0)
    assert engine.migrations.sum() == 0
    assert engine.end_s[2] == 1.0 + 2000.0  # rack tier throughout


def _placements(seed):
    # 2 racks x 2 machines x 4 GPUs: every job has several equally good choices.
    rows = [(i, i, 1 + i % 3, 10_000, 1.0) for i in range(6)]
    spec = ClusterSpec(2, 2, 4)
    engine = run_engine(make_trace(rows), spec, GandivaPolicy(), lease_s=NO_ROUNDS, seed=seed)
    return [tuple(sorted(g.tolist())) for g in engine.last_gpus]


def test_placements_are_reproducible_under_a_seed_and_differ_across_seeds():
    assert _placements(3) == _placements(3)
    assert len({tuple(_placements(seed)) for seed in range(6)}) > 1


def test_job_never_waits_for_a_better_tier():
    # 2 racks x 1 machine x 4 GPUs: X (3 GPUs) on one machine, Y (3 GPUs) on the other; Z (2)
    # starts at once across the racks (network tier) instead of waiting for X to end.
    spec = ClusterSpec(2, 1, 4)
    trace = make_trace([(0, 0, 3, 100, 1.0), (1, 0, 3, 5000, 1.0), (2, 1, 2, 1000, 1.0)])
    engine = run_engine(trace, spec, GandivaPolicy(), lease_s=NO_ROUNDS)
    assert engine.first_start_s[2] == 1.0
    assert collect(engine).jobs.loc[2, "network_s"] > 0


# --- time-slicing (gandiva-timeslice) ---------------------------------------------------------


def test_timeslice_two_jobs_take_turns_on_one_gpu():
    # 1 machine x 1 GPU, lease 100 s. A and B (1 GPU, 250 iterations of 1 s) both arrive at 0.
    # Plain Gandiva: A runs 0-250, B 250-500. Time-slicing, one lease per turn: A 0-100, B
    # 100-200 (A suspended with 100 done), A 200-300, B 300-400 (each 200 done), A 400-450
    # (done), B resumes on the idle GPU at 450 and ends at 500. Each is suspended twice.
    from dallygym.sim.policies import GandivaTimeslicePolicy

    spec = ClusterSpec(1, 1, 1)
    trace = make_trace([(0, 0, 1, 250, 1.0), (1, 0, 1, 250, 1.0)])
    plain = run_engine(trace, spec, GandivaPolicy(), lease_s=100.0)
    assert plain.end_s.tolist() == [250.0, 500.0]
    sliced = run_engine(trace, spec, GandivaTimeslicePolicy(), lease_s=100.0)
    assert sliced.end_s.tolist() == [450.0, 500.0]
    assert sliced.preemptions.tolist() == [2, 2]
    assert sliced.run_s.tolist() == [250.0, 250.0]


def test_timeslice_swaps_with_a_job_of_the_same_size():
    # 1 machine x 4 GPUs, lease 100 s. X (2 GPUs) and Y (1 GPU) run from 0; Z (2 GPUs) arrives
    # at 10 and finds 1 idle GPU. At the boundary at 100 it takes X's two GPUs (same demand),
    # not Y's plus the idle one: X is suspended, Y keeps running.
    from dallygym.sim.policies import GandivaTimeslicePolicy

    spec = ClusterSpec(1, 1, 4)
    trace = make_trace([(0, 0, 2, 10_000, 1.0), (1, 0, 1, 10_000, 1.0), (2, 10, 2, 50, 1.0)])
    engine = run_engine(trace, spec, GandivaTimeslicePolicy(), lease_s=100.0)
    assert engine.first_start_s[2] == 100.0
    assert engine.preemptions.tolist()[:2] == [1, 0]
    assert engine.end_s[2] == 150.0


def test_timeslice_running_state_constant_is_the_engines():
    from dallygym.sim.engine import RUNNING
    from dallygym.sim.policies.gandiva import _RUNNING_STATE

    assert _RUNNING_STATE == RUNNING


def test_timeslice_is_registered():
    from dallygym.sim.policies import POLICIES, GandivaTimeslicePolicy, make_policy

    assert POLICIES["gandiva-timeslice"] is GandivaTimeslicePolicy
    assert isinstance(make_policy("gandiva-timeslice"), GandivaPolicy)
