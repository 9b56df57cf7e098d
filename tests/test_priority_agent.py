"""Learned priority agents: the network's priority on hand-built queues, the search (determinism,
its objective), the run files and their loading (nothing run, bad files refused), and the agent
through ``evaluate`` and the held-out grid script."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from helpers import TierLatency, load_script, make_trace

from dallygym import ClusterSpec, simulate
from dallygym.envs.queue_obs import JOB_DIM, JOB_FEATURES
from dallygym.experiments.cli import main
from dallygym.learning import priority_search as ps
from dallygym.learning.agent_files import AgentLoadError
from dallygym.learning.priority_search import NET_INPUTS
from dallygym.learning.trainer import load_agent, run_agent
from dallygym.sim import kernels
from dallygym.sim.engine import RUNNING, Engine, EngineConfig, run_policy
from dallygym.sim.metrics import collect
from dallygym.sim.policies.tuned import LIMIT_INPUTS, CandidateFeatures, NetPriorityPolicy, drain_share, limit_inputs
from dallygym.sim.trace import generate_trace

SMALL = ["--racks", "2", "--machines-per-rack", "2", "--trace", "small"]
# One machine of 8 GPUs, speed 1 (as tests/test_baselines.py): job 0 (8 GPUs, 100 s) holds it
# from t=0; jobs 1 (4 GPUs, 10 s), 2 (8 GPUs, 1 s) and 3 (2 GPUs, 5 s) queue behind it.
QUEUE = [(0, 0, 8, 100, 1.0), (1, 1, 4, 10, 1.0), (2, 2, 8, 1, 1.0), (3, 3, 2, 5, 1.0)]
#: The queue features and drain_share.
DRAIN_INPUTS = ps.INPUT_SETS["queue+drain"]


def reading(feature: str, sign: float = 1.0) -> NetPriorityPolicy:
    """One hidden unit reading one feature; key = sign x tanh(feature): monotone in it."""
    inputs = NET_INPUTS if feature in NET_INPUTS else DRAIN_INPUTS
    w = np.zeros((1, len(inputs)))
    w[0, inputs.index(feature)] = 1.0
    return NetPriorityPolicy(w, np.zeros(1), np.array([sign]), inputs=inputs)


def run(trace, spec, policy):
    return collect(run_policy(Engine(trace, spec, policy, TierLatency(), EngineConfig())))


def test_a_unit_reading_the_demand_orders_smallest_demand_first():
    # Order at t=100 by demand: job 3 (2 GPUs) 100-105, job 1 (4) 100-110, job 2 (8 GPUs)
    # waits for the whole machine: 110-111. A negative output weight: largest first, job 2
    # takes the machine at 100-101, then jobs 1 and 3 at 101.
    trace, spec = make_trace(QUEUE), ClusterSpec(1, 1, 8)
    assert run(trace, spec, reading("gpus")).jobs["first_start_s"].tolist() == [0.0, 100.0, 110.0, 100.0]
    assert run(trace, spec, reading("gpus", -1.0)).jobs["first_start_s"].tolist() == [0.0, 101.0, 100.0, 101.0]


@pytest.mark.parametrize("inputs", [NET_INPUTS, DRAIN_INPUTS])
def test_the_key_is_the_network_over_the_queue_features(inputs):
    rows = [(0, 0, 1, 1000, 1.0), (1, 0, 4, 100, 1.0), (2, 0, 8, 200, 1.0), (3, 0, 16, 10, 1.0), (4, 0, 2, 500, 1.0)]
    rng = np.random.default_rng(5)
    params = ps.unpack(ps.initial_parameters(3, rng, inputs), 3, inputs)
    policy = NetPriorityPolicy(**params, inputs=inputs)
    engine = Engine(make_trace(rows), ClusterSpec(1, 2, 8), policy, TierLatency(), EngineConfig())
    policy.reset(engine, np.random.default_rng(0))
    jobs = np.arange(5)
    f = CandidateFeatures(engine, policy)(jobs).astype(np.float64)
    from dallygym.envs.queue import JOB_FEATURES

    f = np.column_stack([f, drain_share(engine, jobs)])
    f = f[:, [len(JOB_FEATURES) if name == "drain_share" else JOB_FEATURES.index(name) for name in inputs]]
    expected = np.array(
        [
            sum(
                params["output_weights"][h] * math.tanh(f[j] @ params["hidden_weights"][h] + params["hidden_bias"][h])
                for h in range(3)
            )
            for j in range(5)
        ]
    )
    np.testing.assert_allclose(policy.priority(engine, jobs), expected, rtol=1e-12)


def test_the_features_kernel_gives_the_reference_rows_bit_for_bit_over_a_contended_run(monkeypatch):
    """Every feature block a priority agent computes on a contended run (waiting jobs at each
    pass, lease-expired running ones at round boundaries) equals the numpy reference's."""
    from dallygym.envs.queue import JOB_DIM

    compiled = CandidateFeatures.__call__
    calls = []

    def checked(self, jobs):
        rows = compiled(self, jobs)
        ref = np.zeros((jobs.size, JOB_DIM), dtype=np.float32)
        if jobs.size:
            self._job_features(jobs, self.engine.now_s, ref)
        calls.append((int(jobs.size), int((self.engine.state[jobs] == RUNNING).sum()), np.array_equal(rows, ref)))
        return rows

    monkeypatch.setattr(CandidateFeatures, "__call__", checked)
    monkeypatch.setattr(NetPriorityPolicy, "compiled_keys", lambda self, view: None)  # (priority() computes)
    policy = ps.policy_of(ps.initial_parameters(4, np.random.default_rng(2)), 4)
    simulate(generate_trace("batch-500", seed=10), ClusterSpec(2, 8, 8), policy=policy)
    assert len(calls) > 500 and all(equal for _, _, equal in calls)
    assert max(size for size, _, _ in calls) > 50 and sum(running > 0 for _, running, _ in calls) > 100


def _net_bundle(view, params) -> tuple:
    """A kernels.net_keys bundle of ``params`` (NetPriorityPolicy.compiled_keys) for ``view``."""
    n = view.n
    scratch = (np.zeros((n, JOB_DIM), dtype=np.float32), np.zeros((4, n)), np.zeros(n))
    return (*params, *scratch, np.zeros(view.spec.num_gpus + 1, dtype=bool), np.zeros(n), np.zeros(n, dtype=np.int64))


def _kernel_keys(view, net, jobs, fit=kernels.BIG) -> np.ndarray:
    cl = view.cluster
    racks, mpr, _ = view._dims
    running, waiting = view.running_jobs(), view.waiting_jobs()
    args = (view._jobf, view._jobi, view.state, cl.free_per_machine, cl.free_per_rack, racks, mpr, cl.free_total, fit)
    return kernels.net_keys(np.asarray(jobs, dtype=np.int64), running, waiting, view.now_s, net, *args).copy()


def _random_net(hidden: int, seed: int, inputs: str, limit_s: float) -> NetPriorityPolicy:
    """A network of random initial parameters over input set ``inputs`` (``limit_s``: the
    makespan limit, for the limit inputs)."""
    names = ps.INPUT_SETS[inputs]
    return ps.policy_of(ps.initial_parameters(hidden, np.random.default_rng(seed), names), hidden, names, limit_s)


@pytest.mark.parametrize(
    "gen, racks, inputs, limit_h",
    [
        ("batch-500", 2, "queue", 0),
        ("poisson-411", 4, "queue", 0),
        ("batch-500", 2, "queue+drain", 0),
        ("poisson-411", 4, "queue+limit", 300),
        ("batch-500", 2, "queue+limit", 4000),
    ],
)
def test_the_engine_computes_a_networks_keys_itself_and_runs_as_the_policy_orders(
    monkeypatch, gen, racks, inputs, limit_h
):
    """On a compiled cluster the engine orders a network's passes itself (kernels.net_keys),
    whatever its inputs: priority() is never asked, and the run is the one priority() orders.
    (The limits are of the order of those runs' makespans, so the limit inputs vary.)"""
    policy = _random_net(4, 3, inputs, limit_h * 3600.0)
    trace = generate_trace(gen, seed=10)
    asked = []
    original = NetPriorityPolicy.priority

    def spy(self, view, jobs):
        asked.append(len(jobs))
        return original(self, view, jobs)

    monkeypatch.setattr(NetPriorityPolicy, "priority", spy)
    ours = simulate(trace, ClusterSpec(racks, 8, 8), policy=policy)
    assert not asked
    monkeypatch.setattr(NetPriorityPolicy, "compiled_keys", lambda self, view: None)
    theirs = simulate(trace, ClusterSpec(racks, 8, 8), policy=policy)
    assert len(asked) > 200 and max(asked) > 50
    assert ours.jobs.equals(theirs.jobs) and ours.summary == theirs.summary


@pytest.mark.parametrize("inputs", ["queue", "queue+drain", "queue+limit"])
def test_the_network_keys_kernel_gives_the_policys_keys_and_order_at_every_pass(monkeypatch, inputs):
    """At every pass of a contended run (waiting jobs, and at round boundaries the lease-expired
    running ones too) the compiled keys equal priority()'s to rounding (the C library's tanh
    and log1p against numpy's, and the known work summed in another order) and sort the jobs
    the same way, the known-work inputs included."""
    original = NetPriorityPolicy.priority
    own_params = NetPriorityPolicy.compiled_keys
    checked = []

    def spy(self, view, jobs):
        keys = original(self, view, jobs)
        got = _kernel_keys(view, _net_bundle(view, own_params(self, view)), jobs)
        np.testing.assert_allclose(got, keys, rtol=1e-12, atol=1e-15)
        same_order = np.array_equal(np.argsort(got, kind="stable"), np.argsort(keys, kind="stable"))
        checked.append((len(jobs), int((view.state[jobs] == RUNNING).sum()), same_order))
        return keys

    monkeypatch.setattr(NetPriorityPolicy, "priority", spy)
    monkeypatch.setattr(NetPriorityPolicy, "compiled_keys", lambda self, view: None)
    policy = _random_net(8, 7, inputs, 4000 * 3600.0)
    simulate(generate_trace("batch-500", seed=11), ClusterSpec(2, 8, 8), policy=policy)
    assert len(checked) > 500 and all(same for _, _, same in checked)
    assert sum(running > 0 for _, running, _ in checked) > 100


def test_jobs_too_big_for_the_free_gpus_get_no_network_key():
    """Outside a round boundary a pass visits no job bigger than the free GPUs: the kernel keys
    only the others (the same keys as when it keys every job) and gives those +inf."""
    rows = [(0, 0, 1, 1000, 1.0), (1, 0, 4, 100, 1.0), (2, 0, 8, 200, 1.0), (3, 0, 16, 10, 1.0), (4, 0, 2, 500, 1.0)]
    params = ps.unpack(ps.initial_parameters(3, np.random.default_rng(5)), 3)
    policy = NetPriorityPolicy(**params)
    engine = Engine(make_trace(rows), ClusterSpec(1, 2, 8), policy, TierLatency(), EngineConfig())
    policy.reset(engine, np.random.default_rng(0))
    net = _net_bundle(engine, policy.compiled_keys(engine))
    jobs = np.arange(5)
    every = _kernel_keys(engine, net, jobs)
    some = _kernel_keys(engine, net, jobs, fit=4)
    assert np.isfinite(every).all()
    np.testing.assert_array_equal(some, np.where([True, True, False, False, True], every, np.inf))
    np.testing.assert_allclose(every, policy.priority(engine, jobs), rtol=1e-12)


def test_every_input_set_gets_compiled_keys_laid_out_as_the_kernel_reads_them():
    """The queue features alone: W's rows are the job features. With drain_share or the limit
    inputs, five more rows follow (drain_share, then the limit inputs), and the constants carry
    the first arrival and the limit (0 without limit inputs)."""
    trace, spec = make_trace(QUEUE), ClusterSpec(1, 1, 8)
    for inputs, rows, limit in (
        ("queue", JOB_DIM, 0.0),
        ("queue+drain", JOB_DIM + 5, 0.0),
        ("queue+limit", JOB_DIM + 5, 50.0),
    ):
        policy = _random_net(2, 1, inputs, limit)
        engine = Engine(trace, spec, policy, TierLatency(), EngineConfig())
        run_policy(engine)
        assert engine._keys == kernels.KEYS_NET
        w, _, _, _, _, consts = engine._net_params
        names = ps.INPUT_SETS[inputs]
        assert w.shape == (rows, 2) and (w != 0).any(axis=1).sum() == len(names)
        extra = ("drain_share", *LIMIT_INPUTS)
        for name, column in zip(names, policy.hidden_weights.T):
            at = JOB_DIM + extra.index(name) if name in extra else JOB_FEATURES.index(name)
            np.testing.assert_array_equal(w[at], column)
        assert consts[kernels.NK_FEATURES] == JOB_DIM and consts[kernels.NK_LIMIT] == limit
        assert consts[kernels.NK_FIRST_ARRIVAL] == 0.0


@pytest.mark.parametrize(
    "w, b, v, match",
    [
        (np.zeros((2, 3)), np.zeros(2), np.zeros(2), "hidden x 17"),
        (np.zeros((2, 17)), np.zeros(3), np.zeros(2), "2 entries each"),
        (np.zeros((2, 17)), np.zeros(2), np.array([1.0, np.nan]), "finite"),
        (np.zeros((0, 17)), np.zeros(0), np.zeros(0), "hidden x 17"),
        (np.zeros((2, 17)), np.zeros(2), np.zeros(2), "hidden x 18"),  # (with inputs=DRAIN_INPUTS)
    ],
)
def test_bad_network_shapes_are_refused(w, b, v, match):
    with pytest.raises(ValueError, match=match):
        NetPriorityPolicy(w, b, v, inputs=DRAIN_INPUTS if "18" in match else None)


def test_drain_share_is_each_estimate_over_itself_plus_the_time_theknown_work_needs(monkeypatch):
    """Two machines of 8 GPUs (16), four jobs arriving at 0, none run yet. Estimates: job 0
    (8 GPUs, 100 s) 100 s; job 1 (4, 10 s) 10 s; job 2 (16 GPUs, 20 s, spans machines, never
    run: / 0.1) 200 s; job 3 (2, 5 s) 5 s. Known work 800 + 40 + 3,200 + 10 = 4,050 GPU-s over
    16 GPUs: D = 253.125 s. At the first pass every job waits: share = est / (est + D)."""
    rows = [(0, 0, 8, 100, 1.0), (1, 0, 4, 10, 1.0), (2, 0, 16, 20, 1.0), (3, 0, 2, 5, 1.0)]
    seen = []
    original = NetPriorityPolicy.priority

    def spy(self, view, jobs):
        seen.append((np.asarray(jobs).copy(), drain_share(view, jobs)))
        return original(self, view, jobs)

    monkeypatch.setattr(NetPriorityPolicy, "priority", spy)
    monkeypatch.setattr(NetPriorityPolicy, "compiled_keys", lambda self, view: None)  # (Python's count)
    run(make_trace(rows), ClusterSpec(1, 2, 8), reading("drain_share", -1.0))
    jobs, shares = seen[0]
    d = 4050 / 16
    assert jobs.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(shares, [100 / (100 + d), 10 / (10 + d), 200 / (200 + d), 5 / (5 + d)], rtol=1e-12)


def test_drain_share_over_a_contended_run_equals_a_job_by_job_count(monkeypatch):
    """At every pass of a contended run (running jobs part way through, Nw_sens observed),
    drain_share equals the definition counted job by job."""
    from dallygym.sim.policies.protected import NEVER_RUN_MULTI_MACHINE_NW_SENS

    def estimate(view, j):
        nw = float(view.nw_sens(np.array([j]))[0])
        if not nw > 0:
            nw = NEVER_RUN_MULTI_MACHINE_NW_SENS if view.num_gpus[j] > view.spec.gpus_per_machine else 1.0
        return (view.total_iterations[j] - view.done_iters[j]) * view.iter_time_s[j] / nw

    checked = []
    original = NetPriorityPolicy.priority

    def spy(self, view, jobs):
        if len(checked) % 25 == 0 and len(view.running_jobs()):
            unfinished = [*view.running_jobs(), *view.waiting_jobs()]
            d = sum(view.num_gpus[j] * estimate(view, j) for j in unfinished) / view.spec.num_gpus
            expected = [estimate(view, j) / (estimate(view, j) + d) for j in jobs]
            np.testing.assert_allclose(drain_share(view, jobs), expected, rtol=1e-9)
        checked.append(len(jobs))
        return original(self, view, jobs)

    monkeypatch.setattr(NetPriorityPolicy, "priority", spy)
    monkeypatch.setattr(NetPriorityPolicy, "compiled_keys", lambda self, view: None)  # (Python's count)
    simulate(generate_trace("batch-500", seed=11), ClusterSpec(2, 8, 8), policy=reading("drain_share", -1.0))
    assert len(checked) > 200 and max(checked) > 50


def test_theknown_work_kernel_gives_the_reference_numbers_bit_for_bit_over_a_contended_run(monkeypatch):
    """At every pass of a contended run with never-run multi-machine jobs, the compiled count of
    the known work (estimates, the largest, the summed work) equals the numpy reference's."""
    from dallygym.sim.policies.tuned import known_work

    checked = []
    original = NetPriorityPolicy.priority

    def spy(self, view, jobs):
        estimates, largest, work = known_work(view)
        view.cluster.compiled = False  # (an instance attribute over the class's; removed below)
        try:
            ref = known_work(view)
        finally:
            del view.cluster.compiled
        assert view.cluster.compiled
        checked.append(np.array_equal(estimates, ref[0]) and largest == ref[1] and work == ref[2])
        return original(self, view, jobs)

    monkeypatch.setattr(NetPriorityPolicy, "priority", spy)
    monkeypatch.setattr(NetPriorityPolicy, "compiled_keys", lambda self, view: None)  # (Python's count)
    simulate(generate_trace("batch-500", seed=11), ClusterSpec(2, 8, 8), policy=reading("drain_share", -1.0))
    assert len(checked) > 200 and all(checked)


def test_a_unit_reading_drain_share_serves_the_makespan_critical_job_first():
    # Same jobs: negative weight on drain_share = longest estimate first. Job 2 (200 s
    # estimated, 16 GPUs) takes both machines at t=0, its 20 s at the rack tier's speed 0.5
    # taking 40 s; the rest start at 40.
    rows = [(0, 0, 8, 100, 1.0), (1, 0, 4, 10, 1.0), (2, 0, 16, 20, 1.0), (3, 0, 2, 5, 1.0)]
    starts = run(make_trace(rows), ClusterSpec(1, 2, 8), reading("drain_share", -1.0)).jobs["first_start_s"]
    assert starts.tolist() == [40.0, 40.0, 0.0, 40.0]


def test_a_network_with_drain_share_weighted_zero_is_the_network_without_it():
    rows = [(0, 0, 1, 1000, 1.0), (1, 0, 4, 100, 1.0), (2, 0, 8, 200, 1.0), (3, 0, 16, 10, 1.0), (4, 0, 2, 500, 1.0)]
    params = ps.unpack(ps.initial_parameters(3, np.random.default_rng(5)), 3)
    assert ps.INPUT_SETS["queue"] == NET_INPUTS and DRAIN_INPUTS == (*NET_INPUTS, "drain_share")
    padded = {**params, "hidden_weights": np.column_stack([params["hidden_weights"], np.zeros(3)])}
    ours = run(make_trace(rows), ClusterSpec(1, 2, 8), NetPriorityPolicy(**params))
    theirs = run(make_trace(rows), ClusterSpec(1, 2, 8), NetPriorityPolicy(**padded, inputs=DRAIN_INPUTS))
    assert ours.jobs.equals(theirs.jobs)
    with pytest.raises(ValueError, match="must be distinct names"):
        NetPriorityPolicy(**params, inputs=(*NET_INPUTS[:-1], NET_INPUTS[0]))


class _View:
    """The parts of an engine the limit inputs read, set by hand: 32 GPUs in machines of 8, now
    300 s, first arrival 100 s (200 s elapsed). Job 0 runs (4 GPUs, 50 iterations of 2 s
    left, Nw_sens 0.5: estimate 200 s); job 1 waits, never run (2 GPUs, one machine: speed
    1, 10 x 3 s: 30 s); job 2 waits, never run (16 GPUs, spans machines: / 0.1, 5 x 10 s:
    500 s)."""

    n = 3
    now_s, first_arrival_s = 300.0, 100.0
    num_gpus = np.array([4, 2, 16])
    total_iterations = np.array([100, 10, 5])
    done_iters = np.array([50, 0, 0])
    iter_time_s = np.array([2.0, 3.0, 10.0])
    spec = ClusterSpec(1, 4, 8)
    cluster = SimpleNamespace(compiled=False)  # (the numpy reference: no compiled arrays here)

    def nw_sens(self, jobs):
        return np.array([0.5, 0.0, 0.0])[jobs]

    def running_jobs(self):
        return np.array([0])

    def waiting_jobs(self):
        return np.array([1, 2])


def test_the_limit_inputs_are_the_queue_environments_limit_features_worked_by_hand():
    """Work (4 x 200 + 2 x 30 + 16 x 500) / 32 = 276.875 s; the largest estimate 500 s. Against
    a 1,000 s limit, each share halved: job 1 finishes at (200 + 30) / 1000, job 2 at 0.7; the
    pass's elapsed 0.2, longest job 0.7, all work 0.476875. Against 200 s, shares beyond 2 show
    as 1."""
    got = limit_inputs(_View(), np.array([1, 2]), 1000.0)
    assert LIMIT_INPUTS == ("limit_finish", "limit_elapsed", "limit_estimate", "limit_work")
    np.testing.assert_allclose(got, [[0.115, 0.1, 0.35, 0.2384375], [0.35, 0.1, 0.35, 0.2384375]], rtol=1e-12)
    np.testing.assert_allclose(limit_inputs(_View(), np.array([2]), 200.0), [[1.0, 0.5, 1.0, 1.0]], rtol=1e-12)


def test_a_network_reading_the_limit_needs_it_and_reads_it_where_its_inputs_say():
    inputs = ps.INPUT_SETS["queue+limit"]
    assert inputs == (*NET_INPUTS, *LIMIT_INPUTS)
    params = ps.unpack(ps.initial_parameters(2, np.random.default_rng(2), inputs), 2, inputs)
    for bad in (None, 0.0, -5.0, float("inf"), "1000"):
        with pytest.raises(ValueError, match="need the makespan limit"):
            NetPriorityPolicy(**params, inputs=inputs, makespan_limit_s=bad)
    # One unit reading limit_finish alone: its key is tanh(limit_finish) of each job.
    w = np.zeros((1, len(inputs)))
    w[0, inputs.index("limit_finish")] = 1.0
    policy = NetPriorityPolicy(w, np.zeros(1), np.ones(1), inputs=inputs, makespan_limit_s=1000.0)
    policy.features = lambda view, jobs: np.zeros((len(jobs), JOB_DIM), dtype=np.float32)  # the queue features
    np.testing.assert_allclose(policy.priority(_View(), np.array([1, 2])), np.tanh([0.115, 0.35]), rtol=1e-12)
    # A network without limit inputs ignores a limit given.
    plain = ps.unpack(ps.initial_parameters(2, np.random.default_rng(2)), 2)
    assert NetPriorityPolicy(**plain, makespan_limit_s=None).makespan_limit_s is None


def test_a_network_with_the_limit_inputs_weighted_zero_is_the_network_without_them():
    rows = [(0, 0, 1, 1000, 1.0), (1, 0, 4, 100, 1.0), (2, 0, 8, 200, 1.0), (3, 5, 16, 10, 1.0), (4, 9, 2, 500, 1.0)]
    params = ps.unpack(ps.initial_parameters(3, np.random.default_rng(5)), 3)
    padded = {**params, "hidden_weights": np.column_stack([params["hidden_weights"], np.zeros((3, 4))])}
    limited = NetPriorityPolicy(**padded, inputs=ps.INPUT_SETS["queue+limit"], makespan_limit_s=700.0)
    ours = run(make_trace(rows), ClusterSpec(1, 2, 8), NetPriorityPolicy(**params))
    assert ours.jobs.equals(run(make_trace(rows), ClusterSpec(1, 2, 8), limited).jobs)


def test_a_limit_agent_is_searched_against_dallys_makespan_and_evaluated_with_it(tmp_path):
    result = tiny_search(inputs="queue+limit")
    assert result["inputs"] == list(ps.INPUT_SETS["queue+limit"]) and result["settings"]["inputs"] == "queue+limit"
    # The objective of a draw builds the policy with Dally's makespan of that draw.
    vector = ps.initial_parameters(2, np.random.default_rng(3), ps.INPUT_SETS["queue+limit"])
    objective = ps.DrawObjective(np.random.default_rng(0), 2, [("batch-500", 16)], inputs=ps.INPUT_SETS["queue+limit"])
    trace, spec = generate_trace("batch-500", seed=10), ClusterSpec(16, 8, 8)
    dally = simulate(trace, spec, policy="dally").summary
    policy = ps.policy_of(vector, 2, ps.INPUT_SETS["queue+limit"], dally["makespan_s"])
    ours = simulate(trace, spec, policy=policy).summary
    excess = 100 * (ours["makespan_s"] / dally["makespan_s"] - 1)
    expected = math.log(ours["jct_mean_s"] / dally["jct_mean_s"]) + ps.PENALTY * max(0.0, excess - ps.MARGIN_PP)
    assert objective.on_draw(vector, "batch-500", 10, 16) == pytest.approx(expected, rel=1e-12)
    # By hand: twice Dally's mean JCT, 3 % over its makespan: ln 2 + 1 x (3 - 0.5).
    run, ref = {"jct_mean_s": 20.0, "makespan_s": 103.0}, {"jct_mean_s": 10.0, "makespan_s": 100.0}
    assert ps.objective_value(run, ref) == pytest.approx(math.log(2) + 2.5, rel=1e-12)
    assert ps.objective_value({**run, "makespan_s": 100.4}, ref) == pytest.approx(math.log(2), rel=1e-12)
    # Loaded from its run, the agent needs the limit; run_agent gives it Dally's on that cluster.
    ps.write_run(tmp_path / "run", result)
    agent = load_agent(str(tmp_path / "run"))
    committed = Path(__file__).resolve().parent.parent / "agents" / "runs" / "priority-s0"
    assert agent.needs_limit and not load_agent(str(committed)).needs_limit
    with pytest.raises(ValueError, match="need the makespan limit"):
        agent.policy()
    small = ClusterSpec(2, 2, 8)
    limit = simulate("small", small, policy="dally").summary["makespan_s"]
    assert run_agent(agent, "small", small).summary == simulate("small", small, policy=agent.policy(limit)).summary


def test_parameters_flatten_and_unflatten():
    vector = np.arange(ps.parameter_count(4), dtype=float)
    params = ps.unpack(vector, 4)
    assert params["hidden_weights"].shape == (4, len(NET_INPUTS))
    assert params["hidden_weights"][1, 0] == len(NET_INPUTS)
    assert params["hidden_bias"].tolist() == [68.0, 69.0, 70.0, 71.0]
    assert params["output_weights"].tolist() == [72.0, 73.0, 74.0, 75.0]
    with pytest.raises(ValueError, match="76 parameters"):
        ps.unpack(vector[:-1], 4)
    np.testing.assert_array_equal(ps.parameter_vector(ps.policy_of(vector, 4)), vector)
    start = ps.initial_parameters(4, np.random.default_rng(0))
    assert np.all(ps.unpack(start, 4)["hidden_bias"] == 0)
    np.testing.assert_array_equal(start, ps.initial_parameters(4, np.random.default_rng(0)))


def test_the_objective_is_log_jct_ratio_plus_the_makespan_penalty_beyond_the_margin():
    objective = ps.DrawObjective(np.random.default_rng(0), 2, [("batch-500", 16)])
    vector = ps.initial_parameters(2, np.random.default_rng(3))
    trace = generate_trace("batch-500", seed=10)
    ours = simulate(trace, ClusterSpec(16, 8, 8), policy=ps.policy_of(vector, 2)).summary
    dally = simulate(trace, ClusterSpec(16, 8, 8), policy="dally").summary
    excess = 100 * (ours["makespan_s"] / dally["makespan_s"] - 1)
    expected = math.log(ours["jct_mean_s"] / dally["jct_mean_s"]) + ps.PENALTY * max(0.0, excess - ps.MARGIN_PP)
    assert objective.on_draw(vector, "batch-500", 10, 16) == pytest.approx(expected, rel=1e-12)
    # By hand: twice Dally's mean JCT, 3 % over its makespan: ln 2 + 1 x (3 - 0.5).
    run, ref = {"jct_mean_s": 20.0, "makespan_s": 103.0}, {"jct_mean_s": 10.0, "makespan_s": 100.0}
    assert ps.objective_value(run, ref) == pytest.approx(math.log(2) + 2.5, rel=1e-12)
    assert ps.objective_value({**run, "makespan_s": 100.4}, ref) == pytest.approx(math.log(2), rel=1e-12)


def tiny_search(seed: int = 1, **kw):
    return ps.search(seed=seed, hidden=2, iterations=2, population=3, elite=1, cells=[("batch-500", 16)], **kw)


def test_the_search_is_deterministic_and_records_what_it_did():
    first, again = tiny_search(), tiny_search()
    assert first["hidden_weights"] == again["hidden_weights"] and first["output_weights"] == again["output_weights"]
    assert [r["draws"] for r in first["history"]] == [r["draws"] for r in again["history"]]
    assert first["settings"]["iterations_done"] == 2 and len(first["history"]) == 2
    # The initial parameters are the seed's random initialisation, before any update.
    start = ps.unpack(ps.initial_parameters(2, np.random.default_rng(1)), 2)
    assert first["initial"]["hidden_weights"] == np.round(start["hidden_weights"], 8).tolist()
    assert first["hidden_weights"] != first["initial"]["hidden_weights"]
    # Each iteration evaluates the current mean first: iteration 0's is the initialisation's value.
    objective = ps.DrawObjective(np.random.default_rng(0), 2, [("batch-500", 16)])
    _, seed, racks = first["history"][0]["draws"][0].split("/")
    value = objective.on_draw(ps.initial_parameters(2, np.random.default_rng(1)), "batch-500", int(seed[4:]), 16)
    assert first["history"][0]["mean_objective"] == pytest.approx(value, rel=1e-12)


def test_worker_processes_give_the_same_search():
    one, two = tiny_search(seed=4), tiny_search(seed=4, workers=2)
    assert two["hidden_weights"] == one["hidden_weights"] and two["output_weights"] == one["output_weights"]
    assert [r["mean_objective"] for r in two["history"]] == [r["mean_objective"] for r in one["history"]]


def test_the_time_limit_ends_the_search_between_iterations():
    result = tiny_search(time_limit_s=1e-9)
    assert result["settings"]["iterations_done"] == 1


def test_the_history_records_each_mean_and_the_last_is_the_agent():
    result = tiny_search()
    last = ps.unpack(np.array(result["history"][-1]["mean"]), 2)
    assert result["hidden_weights"] == last["hidden_weights"].tolist()
    assert result["output_weights"] == last["output_weights"].tolist()
    assert "selection" not in result["settings"]


def test_selection_draws_are_every_training_seed_of_every_distinct_cell():
    draws = ps.selection_draws([("batch-500", 2), ("batch-500", 2), ("poisson-411", 8)], seeds=(10, 11))
    assert draws == [("batch-500", 10, 2), ("batch-500", 11, 2), ("poisson-411", 10, 8), ("poisson-411", 11, 8)]
    assert len(ps.selection_draws([(g, r) for g in ps.TRAIN_GENERATORS for r in ps.TRAIN_RACKS])) == 80


def test_keep_the_best_takes_the_lowest_of_the_last_means_the_latest_on_a_tie(monkeypatch):
    """A hand-made history of four means; an objective that reads the mean's first entry plus
    the draw's seed / 1000: the fixed draws add the same to every mean, so the order is the
    first entries' (3, 1, 2, 1 over iterations 0-3)."""
    seen = []

    def fake(self, vector, gen, seed, racks):
        seen.append((gen, seed, racks))
        return float(vector[0]) + seed / 1000

    monkeypatch.setattr(ps.DrawObjective, "on_draw", fake)
    n = ps.parameter_count(1)
    history = [{"iteration": i, "mean": [first] + [0.0] * (n - 1)} for i, first in enumerate([3.0, 1.0, 2.0, 1.0])]
    result = {
        **ps.agent_content(np.full(n, 9.0), 1, {"training": {"cells": ["batch-500:2", "batch-500:4"]}}, history, 5.0),
        "initial": {"hidden": 1},
    }
    chosen = ps.select_best(result, last=3)
    assert chosen["settings"]["selection"]["chosen_iteration"] == 3  # iterations 1 and 3 tie at 1.0
    assert chosen["hidden_weights"][0][0] == 1.0 and chosen["initial"] == {"hidden": 1}
    objectives = chosen["settings"]["selection"]["objectives"]
    assert list(objectives) == ["1", "2", "3"] and objectives["2"] == pytest.approx(2.0 + 0.0145)
    assert len(seen) == 3 * 20 and set(seen) == set(ps.selection_draws([("batch-500", 2), ("batch-500", 4)]))
    assert ps.select_best(result, last=4)["settings"]["selection"]["chosen_iteration"] == 3
    assert ps.select_best(result, last=1)["hidden_weights"][0][0] == 1.0
    for bad in (0, 5):
        with pytest.raises(ValueError, match="last 1-4 means"):
            ps.select_best(result, last=bad)


def test_selection_in_the_search_equals_selection_of_its_saved_run_afterwards():
    """What ``select_last`` chooses inside the search is what :func:`select_best` chooses from
    the unselected run's file: the search's path does not depend on it."""
    plain, selected = tiny_search(seed=3), tiny_search(seed=3, select_last=2)
    assert [r["mean"] for r in plain["history"]] == [r["mean"] for r in selected["history"]]
    later = ps.select_best(json.loads(json.dumps(plain)), last=2)
    for key in ("hidden_weights", "hidden_bias", "output_weights"):
        assert later[key] == selected[key]
    picked = selected["settings"]["selection"]
    assert later["settings"]["selection"]["objectives"] == picked["objectives"]
    row = selected["history"][[r["iteration"] for r in selected["history"]].index(picked["chosen_iteration"])]
    assert selected["hidden_weights"] == ps.unpack(np.array(row["mean"]), 2)["hidden_weights"].tolist()
    with pytest.raises(ValueError, match="select_last"):
        tiny_search(select_last=3)


def test_snes_rank_utilities_and_rates_follow_the_paper():
    eta_mean, eta_std, u = ps.snes_rates(152, 14)
    assert eta_mean == 1.0 and eta_std == pytest.approx((3 + math.log(152)) / (5 * math.sqrt(152)))
    assert u.sum() == pytest.approx(0.0, abs=1e-12) and np.all(np.diff(u) <= 0)
    # ln(14/2 + 1) - ln k is positive for k <= 7 only: the better half is weighted by rank, the
    # worse half shares the smallest utility, -1/14.
    assert np.all(u[:7] > -1 / 14) and np.allclose(u[7:], -1 / 14)
    assert u[0] == pytest.approx(math.log(8) / sum(math.log(8 / k) for k in range(1, 8)) - 1 / 14)


def test_snes_samples_in_mirrored_pairs_and_moves_toward_the_better_side():
    seen = []

    def objective(candidates, iteration):
        seen.append(candidates.copy())
        return candidates[:, 0]  # smaller first coordinate is better

    mean, history = ps.snes(objective, np.zeros(3), 0.5, np.random.default_rng(0), 1, 6)
    candidates = seen[0]
    assert len(candidates) == 5  # the mean and two mirrored pairs (population - 1 rounded down)
    np.testing.assert_array_equal(candidates[0], np.zeros(3))
    np.testing.assert_allclose(candidates[1:3], -candidates[3:5])
    assert mean[0] < 0 and history[0]["mean_objective"] == 0.0
    assert history[0]["best_objective"] == candidates[1:, 0].min()


def test_snes_finds_the_minimum_of_a_quadratic_and_keeps_its_deviation_where_it_matters():
    target = np.linspace(-2.0, 2.0, 12)

    def objective(candidates, iteration):
        return ((candidates - target) ** 2).sum(axis=1)

    mean, history = ps.snes(objective, np.zeros(12), 0.5, np.random.default_rng(0), 150, 12)
    np.testing.assert_allclose(mean, target, atol=0.02)
    assert history[-1]["mean_objective"] < 1e-3 * history[0]["mean_objective"]
    with pytest.raises(ValueError, match="at least 3"):
        ps.snes(objective, np.zeros(12), 0.5, np.random.default_rng(0), 1, 2)


def test_the_search_method_is_chosen_and_recorded():
    first, again = tiny_search(method="cem"), tiny_search(method="cem")
    assert first["hidden_weights"] == again["hidden_weights"] and first["output_weights"] == again["output_weights"]
    assert first["settings"]["method"] == ps.METHODS["cem"] and first["settings"]["elite"] == 1
    default = tiny_search()
    assert default["settings"]["method"] == ps.METHODS["snes"] and "elite" not in default["settings"]
    assert first["hidden_weights"] != default["hidden_weights"]
    assert first["initial"]["hidden_weights"] == default["initial"]["hidden_weights"]
    with pytest.raises(ValueError, match="method must be one of"):
        tiny_search(method="adam")
    with pytest.raises(ValueError, match="population of at least 3"):
        ps.search(hidden=2, iterations=1, population=2, cells=[("batch-500", 16)])


def test_the_input_set_is_chosen_and_recorded(tmp_path):
    default, drain = tiny_search(), tiny_search(inputs="queue+drain")
    assert default["inputs"] == list(NET_INPUTS) and default["settings"]["inputs"] == "queue"
    assert drain["inputs"] == list(DRAIN_INPUTS) and drain["settings"]["inputs"] == "queue+drain"
    assert np.array(drain["hidden_weights"]).shape == (2, len(NET_INPUTS) + 1)
    assert drain["initial"]["inputs"] == drain["inputs"]
    ps.write_run(tmp_path / "run", drain)
    agent = load_agent(str(tmp_path / "run"))
    assert agent.inputs == DRAIN_INPUTS and agent.policy().inputs == DRAIN_INPUTS
    with pytest.raises(ValueError, match="inputs must be one of"):
        tiny_search(inputs="everything")


@pytest.mark.parametrize("run", ["priority-s0", "priority-cem-s0/initial"])
def test_committed_agents_load_with_the_inputs_they_name(run):
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "agents" / "runs" / run
    agent = load_agent(str(path))
    named = tuple(json.loads((path / ps.PRIORITY_FILE).read_text())["inputs"])
    assert agent.inputs == named == agent.policy().inputs


def test_a_written_run_loads_and_runs_as_the_parameters_it_holds(tmp_path):
    result = tiny_search()
    ps.write_run(tmp_path / "run", result)
    agent = load_agent(str(tmp_path / "run"))
    assert isinstance(agent, ps.PriorityAgent) and agent.name == "run"
    initial = load_agent(str(tmp_path / "run" / "initial"))
    assert initial.name == "run/initial"
    spec = ClusterSpec(2, 2, 8)
    ours = run_agent(agent, "small", spec).summary
    params = {k: np.asarray(result[k]) for k in ("hidden_weights", "hidden_bias", "output_weights")}
    assert ours == simulate("small", spec, policy=NetPriorityPolicy(**params)).summary


def write(tmp_path, content) -> str:
    run = tmp_path / "bad"
    run.mkdir(exist_ok=True)
    text = content if isinstance(content, str) else json.dumps(content)
    (run / ps.PRIORITY_FILE).write_text(text)
    return str(run)


@pytest.mark.parametrize(
    "change, match",
    [
        ({"format": "something-else/1"}, "not a priority agent"),
        ({"inputs": ["gpus"]}, "not a valid network"),
        ({"inputs": [*NET_INPUTS[:-1], "future_arrivals"]}, r"\['future_arrivals'\] are unknown"),
        ({"inputs": "gpus"}, "'inputs' must be a list"),
        ({"hidden_bias": [0.0]}, "not a valid network"),
        ({"hidden_weights": "rm -rf /"}, "not a valid network"),
        ({"output_weights": None}, "not a valid network"),
    ],
)
def test_bad_agent_files_are_refused_naming_the_file(tmp_path, change, match):
    good = ps.agent_content(ps.initial_parameters(2, np.random.default_rng(0)), 2, {}, [], 0.0)
    path = write(tmp_path, {**good, **change})
    with pytest.raises(AgentLoadError, match=match) as info:
        load_agent(path)
    assert "priority.json" in str(info.value)


def test_non_finite_and_non_json_numbers_and_links_are_refused(tmp_path):
    good = json.dumps(ps.agent_content(ps.initial_parameters(2, np.random.default_rng(0)), 2, {}, [], 0.0))
    with pytest.raises(AgentLoadError, match="finite"):
        load_agent(
            write(
                tmp_path, good.replace('"hidden_bias": [', '"hidden_bias": [1e999, ', 1).replace("0.0, 0.0]", "0.0]", 1)
            )
        )
    with pytest.raises(AgentLoadError, match="not valid JSON"):
        load_agent(write(tmp_path, good.replace('"hidden_bias": [', '"hidden_bias": [NaN, ', 1)))
    target = tmp_path / "elsewhere.json"
    target.write_text(good)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ps.PRIORITY_FILE).symlink_to(target)
    with pytest.raises(AgentLoadError, match="symbolic link"):
        load_agent(str(linked))


def test_evaluate_runs_a_priority_agent_natively(tmp_path, capsys):
    ps.write_run(tmp_path / "run", tiny_search())
    assert (
        main(
            ["evaluate", "--agent", str(tmp_path / "run"), "--agent", "protected-remaining", *SMALL, "--format", "csv"]
        )
        == 0
    )
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    agent = ps.PriorityAgent(tmp_path / "run")
    native = simulate("small", ClusterSpec(2, 2, 8), policy=agent.policy()).summary
    assert frame.loc[0, "jct_mean_s"] == pytest.approx(native["jct_mean_s"], rel=1e-9)


def test_the_grid_script_adds_a_priority_agents_initial_row_and_its_offer_rule(tmp_path):
    grid = load_script("agents/queue_baselines.py", "queue_baselines_priority")
    ps.write_run(tmp_path / "run", tiny_search())
    rows = grid.agent_rows([str(tmp_path / "run")])
    assert rows == [("run", str(tmp_path / "run")), ("run (initial)", str(tmp_path / "run" / "initial"))]
    assert grid._loaded_agent(str(tmp_path / "run")).offer_rule == "protected-remaining"


def test_the_training_script_writes_a_run(tmp_path, capsys):
    train = load_script("agents/train_priority.py", "train_priority_under_test")
    args = ["--seed", "2", "--hidden", "2", "--iterations", "1", "--population", "3"]
    assert train.main([*args, "--cell", "batch-500:16", "--out", str(tmp_path / "run")]) == 0
    content = json.loads((tmp_path / "run" / ps.PRIORITY_FILE).read_text())
    assert content["settings"]["command"].startswith("python agents/train_priority.py --seed 2")
    assert content["settings"]["training"]["cells"] == ["batch-500:16"]
    assert (tmp_path / "run" / "initial" / ps.PRIORITY_FILE).is_file()
    assert train.main([*args, "--cell", "batch-500:16", "--select-last", "1", "--out", str(tmp_path / "best")]) == 0
    best = json.loads((tmp_path / "best" / ps.PRIORITY_FILE).read_text())
    assert best["settings"]["selection"]["chosen_iteration"] == 0
    drain = ["--cell", "batch-500:16", "--inputs", "queue+drain", "--out", str(tmp_path / "d")]
    assert train.main([*args, *drain]) == 0
    assert json.loads((tmp_path / "d" / ps.PRIORITY_FILE).read_text())["inputs"] == list(DRAIN_INPUTS)
    # From the first run, with the limit's inputs added: it starts where that run ended.
    limit = ["--cell", "batch-500:16", "--inputs", "queue+limit", "--start", str(tmp_path / "run")]
    assert train.main([*args, *limit, "--out", str(tmp_path / "l")]) == 0
    started = json.loads((tmp_path / "l" / "initial" / ps.PRIORITY_FILE).read_text())
    assert started["settings"]["start"]["agent"] == "run"
    assert np.array(started["hidden_weights"])[:, : len(NET_INPUTS)].tolist() == content["hidden_weights"]
    with pytest.raises(SystemExit):
        train.main([*args, "--cell", "batch-500", "--out", str(tmp_path / "x")])
    assert "GENERATOR:RACKS" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*args, "--start", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")])
    assert "--start:" in capsys.readouterr().err


def test_a_search_started_from_an_agent_orders_as_it_does_and_records_it(tmp_path):
    ps.write_run(tmp_path / "queue", tiny_search())
    agent = ps.PriorityAgent(tmp_path / "queue")
    limit_inputs_set = ps.INPUT_SETS["queue+limit"]
    vector = ps.embedded(agent, 2, limit_inputs_set)
    w = ps.unpack(vector, 2, limit_inputs_set)["hidden_weights"]
    assert np.all(w[:, len(NET_INPUTS) :] == 0)  # the limit's columns
    trace, spec = generate_trace("small", seed=3), ClusterSpec(2, 2, 8)
    before = simulate(trace, spec, policy=agent.policy()).jobs
    after = simulate(trace, spec, policy=ps.policy_of(vector, 2, limit_inputs_set, 1e6)).jobs
    pd.testing.assert_frame_equal(before, after)
    result = tiny_search(inputs="queue+limit", start=agent)
    np.testing.assert_array_equal(ps_vector(result["initial"]), np.round(vector, 8))  # (files keep 8 decimals)
    assert result["settings"]["start"] == {
        "agent": "queue",
        "inputs": list(NET_INPUTS),
        "command": None,
        "iterations_done": 2,
    }
    assert tiny_search(inputs="queue+limit", start=agent)["hidden_weights"] == result["hidden_weights"]
    with pytest.raises(ValueError, match="a start needs 3 hidden units"):
        ps.embedded(agent, 3, limit_inputs_set)
    ps.write_run(tmp_path / "limit", result)
    with pytest.raises(ValueError, match="inputs among"):
        ps.embedded(ps.PriorityAgent(tmp_path / "limit"), 2, NET_INPUTS)


def ps_vector(content: dict) -> np.ndarray:
    """A run file's flattened parameters."""
    return np.concatenate([np.ravel(content["hidden_weights"]), content["hidden_bias"], content["output_weights"]])


def test_a_draw_repeated_in_an_iteration_is_played_once_and_counted_as_often_as_it_appears(monkeypatch):
    """Two entries of one cell that draw the same seed: one episode per candidate, and the
    value is the mean over all three entries (the repeated one weighing twice)."""
    seen = []

    def fake(self, vector, gen, seed, racks):
        seen.append((float(vector[0]), gen, seed, racks))
        return float(vector[0]) + seed

    monkeypatch.setattr(ps.DrawObjective, "on_draw", fake)
    objective = ps.DrawObjective(np.random.default_rng(0), 1, [("batch-500", 2)] * 3)
    candidates = np.zeros((2, ps.parameter_count(1)))
    candidates[1, 0] = 100.0
    draws = [("batch-500", 10, 2), ("batch-500", 13, 2), ("batch-500", 10, 2)]
    values = objective.values(candidates, draws)
    assert values.tolist() == [pytest.approx(11.0), pytest.approx(111.0)]  # (10 + 13 + 10) / 3 + first entry
    assert sorted(seen) == [
        (0.0, "batch-500", 10, 2),
        (0.0, "batch-500", 13, 2),
        (100.0, "batch-500", 10, 2),
        (100.0, "batch-500", 13, 2),
    ]
