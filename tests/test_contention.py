"""The contention model: links, max-min fair shares, and the speed factor at a share.

Hand-worked cases first (the shares and speeds a reader can check on paper), then the
properties the model promises, with hypothesis.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dallygym.sim.cluster import ClusterSpec
from dallygym.sim.contention import Contention, Links, fair_shares, shared_speeds
from dallygym.sim.latency import NETWORK_SWITCH, RACK_RING, DallyPaperLatency, TierLink, cross_link_traffic
from dallygym.sim.models import MODEL_NAMES

LATENCY = DallyPaperLatency()
GB = 1e9


def _gpus(spec: ClusterSpec, *machine_counts: tuple[int, int]) -> np.ndarray:
    """GPUs of a placement given as (machine, count) pairs: the first ``count`` GPUs of each."""
    return np.concatenate([machine * spec.gpus_per_machine + np.arange(count) for machine, count in machine_counts])


# --- fair shares, worked on paper ---------------------------------------------------------


def test_three_jobs_on_two_links():
    # Link 0 holds a (2/s) and b (4/s), capacity 3; link 1 holds b (2/s) and c (6/s), capacity 6.
    # Rising together, link 0 is full at f = 3 / 6 = 0.5 (link 1 only at 6 / 8 = 0.75): a and b
    # stop at 0.5. Link 1 then holds b's 1/s and c's rising 6 f: full at f = (6 - 1) / 6 = 5/6.
    links = [np.array([0]), np.array([0, 1]), np.array([1])]
    rates = [np.array([2.0]), np.array([4.0, 2.0]), np.array([6.0])]
    shares = fair_shares(links, rates, np.array([3.0, 6.0]))
    assert shares == pytest.approx([0.5, 0.5, 5 / 6], rel=1e-15)


def test_a_job_that_fits_after_the_others_stop_gets_its_whole_rate():
    # Capacities (10, 6), every rate 4: link 1 is full first at 6 / 8 = 0.75 (b, c stop); link 0
    # then holds b's 3 and a's rising 4 f, full only at 7 / 4 > 1: a gets 1.
    links = [np.array([0]), np.array([0, 1]), np.array([1])]
    rates = [np.array([4.0]), np.array([4.0, 4.0]), np.array([4.0])]
    assert fair_shares(links, rates, np.array([10.0, 6.0])).tolist() == [1.0, 0.75, 0.75]


def test_jobs_that_ask_nothing_keep_share_one():
    links = [np.empty(0, dtype=np.int64), np.array([0]), np.array([0])]
    rates = [np.empty(0), np.array([3.0]), np.array([1.0])]
    # Link 0 (capacity 2) holds 3 f + 1 f: full at f = 0.5 for both.
    assert fair_shares(links, rates, np.array([2.0])).tolist() == [1.0, 0.5, 0.5]
    assert fair_shares([], [], np.array([1.0])).size == 0


# --- the cluster's links ------------------------------------------------------------------


def test_links_of_a_placement():
    spec = ClusterSpec(2, 2, 8)  # machines 0, 1 in rack 0; 2, 3 in rack 1; uplinks are links 4, 5
    links = Links(spec, 200 * GB, Contention("fair-share", 2.0))
    assert links.capacity.tolist() == [200 * GB] * 4 + [200 * GB] * 2  # 2 x 200 GB/s / 2
    machines, uplinks = links.of(_gpus(spec, (0, 8)))
    assert machines.size == 0 and uplinks.size == 0  # one machine: nothing shared
    machines, uplinks = links.of(_gpus(spec, (0, 4), (1, 4)))
    assert machines.tolist() == [0, 1] and uplinks.size == 0  # one rack
    machines, uplinks = links.of(_gpus(spec, (1, 2), (3, 6)))
    assert machines.tolist() == [1, 3] and uplinks.tolist() == [4, 5]
    assert Links(ClusterSpec(2, 8, 8), 200 * GB, Contention("fair-share", 4.0)).capacity[-1] == 400 * GB


def test_link_rates_of_a_shape_alone():
    # 2 racks x 1 machine: each machine sends 2 (2 - 1) / 2 = 1 byte per byte over its 200 GB/s
    # link, each rack 1 byte over its 400 GB/s uplink: the machine link sets the pace
    # (1 / 200 GB/s per byte), so 200 GB/s flow through both.
    assert LATENCY.link_rates(((4,), (4,))) == (200 * GB, 200 * GB)
    # 2 racks x 2 machines: 1.5 bytes per byte leave each machine, 1 each rack; 1.5 / 200 GB/s
    # per byte: 200 GB/s through each machine link, 200 / 1.5 GB/s through each uplink.
    machine_rate, uplink_rate = LATENCY.link_rates(((8, 8), (8, 8)))
    assert machine_rate == pytest.approx(200 * GB) and uplink_rate == pytest.approx(200 * GB / 1.5)
    assert LATENCY.link_rates(((4, 4),)) == (200 * GB, 0.0)
    assert LATENCY.link_rates(((8,),)) == (0.0, 0.0)
    assert cross_link_traffic(((8,),)) == (0.0, 0.0, 0.0)


# --- two jobs on one 2:1 uplink -------------------------------------------------------------


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_two_jobs_on_one_two_to_one_uplink_each_run_at_half_bandwidth(model):
    # 2 racks of 2 machines, 2:1: each uplink carries 2 x 200 / 2 = 200 GB/s. Jobs a (machines
    # 0 and 2) and b (machines 1 and 3) each ask 200 GB/s of both uplinks and nothing of each
    # other's machine links: 400 asked of 200, so both get f = 1/2, and each runs as it would
    # alone on links of half the bandwidth.
    spec = ClusterSpec(2, 2, 8)
    links = Links(spec, RACK_RING.bandwidth_bytes_per_s, Contention("fair-share", 2.0))
    jobs = [(model, _gpus(spec, (0, 4), (2, 4))), (model, _gpus(spec, (1, 4), (3, 4)))]
    shares, speeds = shared_speeds(LATENCY, links, jobs)
    assert shares.tolist() == [0.5, 0.5]
    half = DallyPaperLatency(
        rack_link=TierLink(RACK_RING.hop_latency_s, RACK_RING.hops_per_step, RACK_RING.bandwidth_bytes_per_s / 2),
        network_link=TierLink(
            NETWORK_SWITCH.hop_latency_s, NETWORK_SWITCH.hops_per_step, NETWORK_SWITCH.bandwidth_bytes_per_s / 2
        ),
    )
    assert speeds.tolist() == [half.speed_factor(model, ((4,), (4,)))] * 2
    assert speeds[0] <= LATENCY.speed_factor(model, ((4,), (4,)))
    # At 1:1 the uplinks carry 400 GB/s: both fit, and run exactly as alone.
    links = Links(spec, RACK_RING.bandwidth_bytes_per_s, Contention("fair-share", 1.0))
    shares, speeds = shared_speeds(LATENCY, links, jobs)
    assert shares.tolist() == [1.0, 1.0]
    assert speeds.tolist() == [LATENCY.speed_factor(model, ((4,), (4,)))] * 2


def test_two_jobs_on_one_machine_share_its_link():
    # Both jobs hold 4 GPUs of machine 0 and spread to another machine of the rack: machine 0's
    # 200 GB/s link is asked 200 by each, so each gets 1/2; the other machines' links are theirs.
    spec = ClusterSpec(1, 3, 8)
    links = Links(spec, 200 * GB, Contention("fair-share", 1.0))
    jobs = [
        ("vgg11", _gpus(spec, (0, 4), (1, 4))),  # GPUs 0-3 of machine 0, 4 of machine 1
        ("resnet18", np.concatenate([np.arange(4, 8), _gpus(spec, (2, 4))])),  # GPUs 4-7 of machine 0, 4 of machine 2
    ]
    shares, _ = shared_speeds(LATENCY, links, jobs)
    assert shares.tolist() == [0.5, 0.5]


def test_a_job_alone_runs_as_without_contention():
    spec = ClusterSpec(4, 8, 8)
    for x in (1.0, 2.0, 4.0, 8.0):  # 8 x 200 / X >= 200: any one job's uplink rate fits
        links = Links(spec, 200 * GB, Contention("fair-share", x))
        for gpus in (_gpus(spec, (0, 8), (8, 8)), _gpus(spec, (0, 3), (9, 1), (17, 8), (30, 2)), _gpus(spec, (5, 8))):
            for model in MODEL_NAMES:
                shares, speeds = shared_speeds(LATENCY, links, [(model, gpus)])
                assert shares.tolist() == [1.0]
                assert speeds.tolist() == [LATENCY.speed_factor(model, spec.shape_of(gpus))]


def test_a_thin_uplink_slows_even_a_job_alone():
    # 2 machines per rack at 8:1: the uplink carries 2 x 200 / 8 = 50 GB/s, a quarter of the
    # 200 GB/s a 2-rack job asks: f = 1/4.
    spec = ClusterSpec(2, 2, 8)
    links = Links(spec, 200 * GB, Contention("fair-share", 8.0))
    shares, _ = shared_speeds(LATENCY, links, [("vgg11", _gpus(spec, (0, 4), (2, 4)))])
    assert shares.tolist() == [0.25]


def test_shared_speed_factor_is_the_speed_factor_at_share_one_and_refuses_a_bad_share():
    assert LATENCY.shared_speed_factor("bert_large", ((8, 8), (8,)), 1.0) == LATENCY.speed_factor(
        "bert_large", ((8, 8), (8,))
    )
    assert LATENCY.shared_speed_factor("vgg11", ((8,),), 0.25) == LATENCY.speed_factor("vgg11", ((8,),))
    for bad in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="share must be in"):
            LATENCY.shared_speed_factor("vgg11", ((4,), (4,)), bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "fair"}, "unknown contention 'fair'"),
        ({"oversubscription": 0.0}, "oversubscription must be a positive number"),
        ({"oversubscription": float("inf")}, "oversubscription must be a positive number"),
        ({"oversubscription": True}, "oversubscription must be a positive number"),
    ],
)
def test_bad_contention_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Contention(**kwargs)


# --- properties -----------------------------------------------------------------------------


@st.composite
def _loads(draw):
    n_links = draw(st.integers(1, 5))
    capacity = np.array(draw(st.lists(st.floats(0.5, 20.0), min_size=n_links, max_size=n_links)))
    links, rates = [], []
    for _ in range(draw(st.integers(0, 7))):
        used = sorted(draw(st.sets(st.integers(0, n_links - 1), max_size=n_links)))
        links.append(np.array(used, dtype=np.int64))
        rates.append(np.array(draw(st.lists(st.floats(0.1, 10.0), min_size=len(used), max_size=len(used)))))
    return links, rates, capacity


def _use(links, rates, shares, size):
    use = np.zeros(size)
    for j, (used, rate) in enumerate(zip(links, rates)):
        np.add.at(use, used, shares[j] * rate)
    return use


@settings(max_examples=300, deadline=None)
@given(_loads())
def test_shares_never_exceed_a_capacity_and_are_max_min_fair(load):
    links, rates, capacity = load
    shares = fair_shares(links, rates, capacity)
    assert np.all(shares > 0) and np.all(shares <= 1.0)
    use = _use(links, rates, shares, capacity.size)
    assert np.all(use <= capacity * (1 + 1e-12))
    for j, used in enumerate(links):
        if shares[j] < 1.0:
            # Its bottleneck: a full link on which no job has a larger share.
            assert any(
                use[link] >= capacity[link] * (1 - 1e-9)
                and all(shares[k] <= shares[j] * (1 + 1e-12) for k, other in enumerate(links) if link in other)
                for link in used
            ), (j, shares, use, capacity)


def _filled_by_numpy(links, rates, capacity):
    """Progressive filling written with numpy's whole-array operations: the readable reference
    the compiled filling (kernels.fill_shares) must equal bit for bit."""
    n = len(links)
    shares = np.ones(n)
    asking = [j for j in range(n) if links[j].size and np.any(rates[j] > 0)]
    if not asking:
        return shares
    job_of = np.concatenate([np.full(links[j].size, j) for j in asking])
    link_of = np.concatenate([links[j] for j in asking])
    rate_of = np.concatenate([rates[j] for j in asking])
    active = np.zeros(n, dtype=bool)
    active[asking] = True
    level = 0.0
    while True:
        live = active[job_of]
        rising = np.bincount(link_of[live], weights=rate_of[live], minlength=capacity.size)
        frozen = np.bincount(link_of[~live], weights=rate_of[~live] * shares[job_of[~live]], minlength=capacity.size)
        used = np.flatnonzero(rising > 0)
        full_at = np.maximum((capacity[used] - frozen[used]) / rising[used], level)
        level = min(float(full_at.min()), 1.0)
        if level >= 1.0:
            shares[active] = 1.0
            return shares
        stopped = np.zeros(n, dtype=bool)
        stopped[job_of[live & np.isin(link_of, used[full_at <= level])]] = True
        shares[stopped] = level
        active &= ~stopped
        if not active.any():
            return shares


@settings(max_examples=300, deadline=None)
@given(_loads())
def test_the_compiled_filling_is_the_numpy_filling_bit_for_bit(load):
    links, rates, capacity = load
    assert fair_shares(links, rates, capacity).tolist() == _filled_by_numpy(links, rates, capacity).tolist()


@settings(max_examples=200, deadline=None)
@given(_loads(), st.integers(0, 4), st.floats(0.1, 10.0), st.floats(0.1, 1.0))
def test_more_load_or_less_capacity_never_raises_the_smallest_share(load, link, rate, scale):
    links, rates, capacity = load
    link = link % capacity.size
    before = fair_shares(links, rates, capacity)
    more = fair_shares([*links, np.array([link])], [*rates, np.array([rate])], capacity)
    assert more.min() <= before.min(initial=1.0) * (1 + 1e-12)
    thinner = capacity.copy()
    thinner[link] *= scale
    assert fair_shares(links, rates, thinner).min(initial=1.0) <= before.min(initial=1.0) * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=8), st.floats(0.5, 20.0), st.floats(0.1, 10.0))
def test_on_one_shared_link_no_share_rises_with_load(rates, capacity, extra):
    links = [np.array([0])] * len(rates)
    rates = [np.array([r]) for r in rates]
    before = fair_shares(links, rates, np.array([capacity]))
    assert before == pytest.approx([min(1.0, capacity / sum(float(r[0]) for r in rates))] * len(rates), rel=1e-12)
    after = fair_shares([*links, np.array([0])], [*rates, np.array([extra])], np.array([capacity]))
    assert np.all(after[:-1] <= before * (1 + 1e-12))


def test_a_job_can_gain_when_another_is_added_elsewhere():
    # a (link 2, 2/s) and b (links 0, 1, 2, 1/s each); capacities (1, 1, 2): link 2 is full at
    # f = 2/3 for both. Add c (link 0, 1/s): link 0 is full first at 1/2 (b, c stop); link 2 then
    # holds b's 1/2 and a's rising 2 f, full at 3/4: a gains from b's slowing.
    links = [np.array([2]), np.array([0, 1, 2])]
    rates = [np.array([2.0]), np.array([1.0, 1.0, 1.0])]
    capacity = np.array([1.0, 1.0, 2.0])
    assert fair_shares(links, rates, capacity) == pytest.approx([2 / 3, 2 / 3], rel=1e-15)
    added = fair_shares([*links, np.array([0])], [*rates, np.array([1.0])], capacity)
    assert added == pytest.approx([0.75, 0.5, 0.5], rel=1e-15)


def test_speed_falls_with_oversubscription():
    spec = ClusterSpec(2, 2, 8)
    jobs = [("vgg11", _gpus(spec, (0, 4), (2, 4))), ("vgg11", _gpus(spec, (1, 4), (3, 4)))]
    speeds = [
        shared_speeds(LATENCY, Links(spec, 200 * GB, Contention("fair-share", x)), jobs)[1][0]
        for x in (0.5, 1.0, 2.0, 4.0, 8.0)
    ]
    assert speeds == sorted(speeds, reverse=True) and speeds[0] > speeds[-1]
