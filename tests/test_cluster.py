"""Cluster topology, shapes and deterministic placement search."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dallygym.sim.cluster import (
    ClusterError,
    ClusterSpec,
    ClusterState,
    Tier,
    canonical_shape,
    tier_of_shape,
)
from dallygym.sim.engine import Engine


def occupy(state: ClusterState, used_per_machine) -> None:
    """Hold the first ``used`` GPUs of each machine (by a dummy job 999)."""
    g = state.spec.gpus_per_machine
    for m, used in enumerate(used_per_machine):
        if used:
            state.allocate(999, np.arange(m * g, m * g + used))


def test_gpu_ids_run_rack_major():
    spec = ClusterSpec(racks=2, machines_per_rack=3, gpus_per_machine=4)
    assert spec.num_gpus == 24
    assert spec.gpu_location(0) == (0, 0, 0)
    assert spec.gpu_location(13) == (1, 0, 1)  # machine 3 is the first of rack 1
    assert spec.gpu_location(23) == (1, 2, 3)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"racks": 0}, "racks"),
        ({"racks": 2, "machines_per_rack": -1}, "machines_per_rack"),
        ({"racks": 2.5}, "racks"),
        ({"racks": 1, "gpus_per_machine": True}, "gpus_per_machine"),
    ],
)
def test_impossible_cluster_names_the_parameter(kwargs, name):
    with pytest.raises(ClusterError, match=name):
        ClusterSpec(**kwargs)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"racks": 1, "gpus_per_machine": 10**9}, "gpus_per_machine must be at most 1,024"),
        ({"racks": 10**7}, "racks must be at most 4,096"),
        ({"racks": 1, "machines_per_rack": 10**7}, "machines_per_rack must be at most 4,096"),
        ({"racks": 64, "machines_per_rack": 65}, "at most 4,096 machines"),
        ({"racks": 4096, "machines_per_rack": 1, "gpus_per_machine": 257}, "at most 1,048,576 GPUs"),
        ({"racks": -2}, "racks must be at least 1"),
        ({"racks": 2.0}, "racks must be a whole number"),
        ({"racks": False}, "racks must be a whole number"),
        ({"racks": "8"}, "racks must be a whole number"),
    ],
)
def test_cluster_sizes_are_bounded_before_anything_is_allocated(kwargs, words):
    with pytest.raises(ClusterError, match=words):
        ClusterSpec(**kwargs)


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--gpus-per-machine", "1000000000", "gpus_per_machine must be at most 1,024"),
        ("--racks", "10000000", "racks must be at most 4,096"),
        ("--machines-per-rack", "0", "machines_per_rack must be at least 1"),
    ],
)
def test_the_command_line_refuses_an_oversized_cluster_in_one_line(capsys, option, value, words):
    from dallygym.experiments.cli import main

    assert main(["simulate", "--trace", "small", option, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dallygym: error: ") and words in err and err.count("\n") == 1


def test_the_largest_clusters_allowed_are_usable():
    # The benchmarked shape, and the bounds themselves: accepted, with numpy integers too.
    assert ClusterSpec(64, 8, 8).num_gpus == 4096
    assert ClusterSpec(np.int64(4096), 1, 256).num_gpus == 1_048_576
    assert ClusterSpec(1, 1, 1024).num_gpus == 1024
    assert ClusterState(ClusterSpec(512, 8, 256)).free_total == 1_048_576


def test_shape_is_canonical_and_gives_the_tier():
    spec = ClusterSpec(2, 2, 4)
    assert spec.shape_of(np.array([0, 1, 2, 3, 4, 5, 6, 7])) == ((4, 4),)
    assert spec.shape_of(np.array([9, 0, 10, 1, 2])) == ((3,), (2,))
    assert canonical_shape([[1, 3], [2, 0, 2]]) == ((3, 1), (2, 2))
    assert tier_of_shape(((8,),)) == Tier.MACHINE
    assert tier_of_shape(((4, 4),)) == Tier.RACK
    assert tier_of_shape(((4,), (4,))) == Tier.NETWORK


@pytest.mark.parametrize("gpu", [-1, 16, 99])
def test_shape_of_a_gpu_outside_the_cluster_names_it(gpu):
    with pytest.raises(ClusterError, match=f"GPU id {gpu} out of range 0..15"):
        ClusterSpec(2, 2, 4).shape_of([0, 1, gpu])


def test_best_possible_tier_by_size():
    spec = ClusterSpec(2, 2, 4)
    assert [spec.best_possible_tier(g) for g in (1, 4, 5, 8, 9, 16)] == [
        Tier.MACHINE,
        Tier.MACHINE,
        Tier.RACK,
        Tier.RACK,
        Tier.NETWORK,
        Tier.NETWORK,
    ]
    with pytest.raises(ClusterError, match="larger than the cluster"):
        spec.best_possible_tier(17)


def test_machine_placement_is_best_fit_with_ties_to_lowest_id():
    state = ClusterState(ClusterSpec(1, 4, 4))
    occupy(state, [0, 2, 1, 2])  # free: 4, 2, 3, 2
    gpus = state.place(2, Tier.MACHINE)
    assert gpus.tolist() == [6, 7]  # machine 1: fewest free (2) that fits, lower id than 3
    assert state.place(3, Tier.MACHINE).tolist() == [9, 10, 11]  # machine 2 (3 free)


def test_rack_placement_spans_fewest_machines_remainder_best_fit():
    state = ClusterState(ClusterSpec(2, 3, 4))
    occupy(state, [0, 3, 2, 0, 0, 0])  # rack 0 free: 4, 1, 2 (7); rack 1 free 12
    gpus = state.place(6, Tier.RACK)
    # rack 0 is the best-fit rack (7 free >= 6); machine 0 whole (4), the remaining 2 on the
    # machine with the fewest free GPUs that holds 2: machine 2.
    assert sorted(state.spec.machine_of_gpu[gpus].tolist()) == [0, 0, 0, 0, 2, 2]


def test_rack_placement_always_spans_two_machines():
    state = ClusterState(ClusterSpec(1, 2, 4))
    gpus = state.place(4, Tier.RACK)
    assert tier_of_shape(state.spec.shape_of(gpus)) == Tier.RACK


def test_network_placement_uses_fewest_racks():
    state = ClusterState(ClusterSpec(3, 2, 4))
    occupy(state, [4, 2, 0, 0, 4, 3])  # rack free: 2, 8, 1
    gpus = state.place(9, Tier.NETWORK)
    racks = state.spec.rack_of_machine[state.spec.machine_of_gpu[gpus]]
    assert sorted(racks.tolist()) == [1] * 8 + [2]  # rack 1 whole, the 1 left on rack 2 (best fit)


@pytest.mark.parametrize(
    "spec, reclaimable, held, need, tier, expected",
    [
        # One rack of 3 machines x 8 GPUs at a round boundary: machine 0's 8 GPUs are
        # reclaimable (their holder's lease expired), machine 1 is idle, machine 2 has 1 idle
        # GPU. Six GPUs over two machines: 5 + 1 either way, so the 5 come from the idle
        # machine 1 rather than from machine 0, and nobody is displaced.
        (ClusterSpec(1, 3, 8), range(0, 8), range(16, 23), 6, Tier.RACK, [8, 9, 10, 11, 12, 23]),
        # Three racks of 1 machine x 4 GPUs: rack 0's GPUs are reclaimable, rack 1 is idle,
        # rack 2 has one idle GPU. Four GPUs over two racks: 3 + 1, the 3 from rack 1.
        (ClusterSpec(3, 1, 4), range(0, 4), range(8, 11), 4, Tier.NETWORK, [4, 5, 6, 11]),
    ],
    ids=["rack", "network"],
)
def test_placement_takes_idle_units_before_reclaimable_ones_of_equal_size(
    spec, reclaimable, held, need, tier, expected
):
    state = ClusterState(spec)
    state.allocate(5, np.array(reclaimable))
    state.allocate(6, np.array(held))
    state.mark_reclaimable(np.array(reclaimable), 3)
    assert sorted(state.place(need, tier).tolist()) == expected


def test_allocating_a_held_gpu_is_refused():
    state = ClusterState(ClusterSpec(1, 1, 4))
    state.allocate(0, np.array([0, 1]))
    with pytest.raises(ClusterError, match="already held"):
        state.allocate(1, np.array([1, 2]))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_every_offered_tier_has_a_placement_of_exactly_that_tier(data):
    racks = data.draw(st.integers(1, 3))
    mpr = data.draw(st.integers(1, 3))
    gpm = data.draw(st.integers(1, 4))
    spec = ClusterSpec(racks, mpr, gpm)
    state = ClusterState(spec)
    occupy(state, data.draw(st.lists(st.integers(0, gpm), min_size=spec.num_machines, max_size=spec.num_machines)))
    g = data.draw(st.integers(1, spec.num_gpus))
    engine = Engine.__new__(Engine)  # only _offer_tiers is used: it needs spec, cluster and its cache
    engine.spec, engine.cluster = spec, state
    engine._tiers_cache, engine._tiers_version = {}, -1
    offered = engine._offer_tiers(g)
    # Complete: every tier at which some placement of g GPUs exists is offered.
    per_machine = state.free_per_machine.reshape(racks, mpr)
    possible = {
        Tier.MACHINE: bool((state.free_per_machine >= g).any()),
        Tier.RACK: g >= 2 and any(row.sum() >= g and np.count_nonzero(row) >= 2 for row in per_machine),
        Tier.NETWORK: g >= 2 and state.free_total >= g and np.count_nonzero(state.free_per_rack) >= 2,
    }
    assert offered == tuple(t for t in Tier if possible[t])
    # Sound: each offered tier has a placement of exactly that tier.
    for tier in offered:
        free_before = state.free_total
        gpus = state.place(g, tier)
        assert len(np.unique(gpus)) == g
        assert state.all_free(gpus)
        assert tier_of_shape(spec.shape_of(gpus)) == tier
        assert state.free_total == free_before
