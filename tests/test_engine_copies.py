"""Copies of an Engine (``copy.deepcopy``, ``pickle``) before, during and after its run.

A copy holds its own plain arrays with its views bound to them again (``Engine._bind``), and
the run's frames (``dallygym.sim.engine.turns``): driven to the end, a copy made before the run or at any
decision of it gives exactly the original's results, and a copy of an ended engine has them too.
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from helpers import TierLatency, make_trace

from dallygym.sim import kernels
from dallygym.sim.cluster import ClusterSpec, ClusterState
from dallygym.sim.engine import Engine, EngineConfig, EngineError, run_policy, speed_tables
from dallygym.sim.engine.speed import _SPEED_TABLES
from dallygym.sim.latency import get_latency_model
from dallygym.sim.metrics import collect
from dallygym.sim.policies import make_policy
from dallygym.sim.trace import load_trace

SMALL_SPEC = ClusterSpec(2, 2, 4)
SMALL_ROWS = [
    (0, 0, 4, 300, 1.0),
    (1, 10, 8, 200, 1.0, "vgg11"),
    (2, 20, 2, 500, 0.5),
    (3, 30, 16, 100, 1.0, "vgg11"),
    (4, 40, 1, 800, 0.25),
    (5, 900, 6, 200, 1.0),
    (6, 950, 3, 100, 2.0, "vgg11"),
    (7, 2000, 12, 150, 1.0),
]


def small_engine() -> Engine:
    return small_engine_with(TierLatency())


def batch_engine() -> Engine:
    spec = ClusterSpec(8)
    trace = load_trace("batch-500", cluster=spec)
    return Engine(trace, spec, make_policy("dally"), get_latency_model("dally-paper"))


ENGINES = {"small": small_engine, "batch-500": batch_engine}


def pickled(engine: Engine) -> Engine:
    return pickle.loads(pickle.dumps(engine, protocol=pickle.HIGHEST_PROTOCOL))


def assert_same_results(first: Engine, second: Engine) -> None:
    a, b = collect(first), collect(second)
    pd.testing.assert_frame_equal(a.jobs, b.jobs, check_exact=True)
    pd.testing.assert_frame_equal(a.timeline, b.timeline, check_exact=True)
    assert a.summary == b.summary


@pytest.fixture(params=[True, False], ids=["compiled", "python"])
def compiled(request, monkeypatch) -> bool:
    monkeypatch.setattr(ClusterState, "compiled", request.param)
    return request.param


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_copy_before_the_run_runs_as_the_original(compiled, name):
    original = ENGINES[name]()
    copies = [copy.deepcopy(original), pickled(original)]
    for engine in (original, *copies):
        run_policy(engine)
        assert engine.finished == engine.n
    for engine in copies:
        assert_same_results(original, engine)


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_copy_of_an_ended_engine_has_its_results(compiled, name):
    original = run_policy(ENGINES[name]())
    for engine in (copy.deepcopy(original), pickled(original)):
        assert_same_results(original, engine)
        assert engine.next_decision() is None  # (its run has ended, as the original's)
        with pytest.raises(EngineError, match="runs once"):
            next(engine.decisions())


def test_a_copy_s_views_are_of_its_own_tables():
    original = run_policy(small_engine())
    for engine in (copy.deepcopy(original), pickled(original)):
        before = original.done_iters.copy()
        engine._jobf[kernels.JOB_FLOATS.index("done_iters"), 0] = -1.0
        assert engine.done_iters[0] == -1.0
        assert (original.done_iters == before).all()
        engine._jobi[kernels.JOB_INTS.index("tier"), 1] = 2
        assert engine.tier[1] == 2 and original.tier[1] == -1
        for table, names in ((engine._jobf, kernels.JOB_FLOATS), (engine._jobi, kernels.JOB_INTS)):
            for k, name in enumerate(names):
                view = getattr(engine, name)
                assert view.shape == table[k].shape and np.shares_memory(view, table[k]), name
        # The job sets read the copy's states, the GPUs its store and flags.
        assert engine._waiting._state is engine.state is engine._running._state
        assert engine.gpus._store is engine._gpu_store and engine.gpus._flags is engine.tier
        assert engine.last_gpus._flags is engine._last_tier
        c = engine.cluster
        c.buffer[0] = 7
        c.buffer[-1] = 99
        assert c.owner[0] == 7 and c.free_per_rack[-1] == 99
        assert original.cluster.owner[0] == -1 and original.cluster.free_per_rack[-1] != 99
        for view in (c.owner, c.mark, c.free_per_machine, c.idle_per_machine, c.free_per_rack):
            assert np.shares_memory(view, c.buffer)


def test_a_deep_copy_shares_the_read_only_data():
    original = small_engine()
    twin = copy.deepcopy(original)
    for name in ("spec", "config", "latency", "_tables", "job_id", "arrival_s", "_num_gpus_list"):
        assert getattr(twin, name) is getattr(original, name), name
    for name in ("policy", "rng", "state", "_jobf", "_jobi", "cluster", "last_shape"):
        assert getattr(twin, name) is not getattr(original, name), name


def test_the_timeline_is_copied_cut_to_its_rows():
    original = run_policy(small_engine())
    rows = int(original._rec_i[kernels.RI_ROWS])
    assert len(original._timeline) == original.timeline_rows + 1
    for engine in (copy.deepcopy(original), pickled(original)):
        assert len(engine._timeline) == rows
        assert engine.timeline == original.timeline


def test_a_copy_before_the_run_keeps_an_instance_s_timeline_rows():
    original = small_engine()
    original.timeline_rows = 4
    for engine in (copy.deepcopy(original), pickled(original)):
        assert engine.timeline_rows == 4
        run_policy(engine)
        assert len(engine._timeline) == 5


def _answered(engine: Engine, decision):
    return engine.policy.answer(decision, engine)


def _send(run, answer):
    """The generator's next decision, or None once it returns."""
    try:
        return run.send(answer)
    except StopIteration:
        return None


def _decisions_from(engine: Engine, decision) -> list[str]:
    """Drive ``engine`` from its open ``decision`` to the end with its policy: what it asked."""
    seen = []
    while decision is not None:
        seen.append(repr(decision))
        decision = engine.answer(decision, _answered(engine, decision))
    return seen


COPIED_RUNS = {
    # name: (engine maker, auto_accept)
    "small-dally": (small_engine, None),
    "small-tiresias-rebid": (lambda: small_engine_with(TierLatency(), "tiresias", "rebid"), None),
    "small-gandiva": (lambda: small_engine_with(TierLatency(), "gandiva"), None),
    "small-picks": (lambda: small_engine_with(TierLatency(), agent_picks=True), None),
    "batch-500-dally": (batch_engine, None),
    "batch-500-dally-best-possible": (batch_engine, "best-possible"),
}


@pytest.mark.parametrize("name", list(COPIED_RUNS))
@pytest.mark.parametrize("how", ["next_decision", "decisions"])
def test_a_copy_at_any_decision_goes_on_as_the_original(compiled, name, how):
    """Copies taken at several decisions of a run (deep, pickled) ask the same decisions from
    there and end with the same results as the original."""
    make, auto = COPIED_RUNS[name]
    reference = make()
    reference.heard = _decisions_from(reference, reference.next_decision(auto))
    n_asked = len(reference.heard)
    assert n_asked > 3
    at = sorted({1, 2, n_asked // 3, n_asked // 2, n_asked - 1})
    original = make()
    if how == "decisions":
        run = original.decisions(auto)
        decision = next(run)
    else:
        decision = original.next_decision(auto)
    copies = []
    for k in range(n_asked):
        assert repr(decision) == reference.heard[k]
        if k in at:
            for make_copy in (copy.deepcopy, pickled):
                twin = make_copy(original)
                copies.append((k, twin, twin.next_decision(auto)))
        answer = _answered(original, decision)
        decision = _send(run, answer) if how == "decisions" else original.answer(decision, answer)
    assert decision is None and original.finished == original.n
    assert_same_results(reference, original)
    for k, twin, open_decision in copies:
        assert repr(open_decision) == reference.heard[k]
        assert _decisions_from(twin, open_decision) == reference.heard[k:]
        assert_same_results(reference, twin)


def test_an_error_ends_the_run_and_says_so():
    """A wrong answer raises; the engine then refuses to go on, naming the error, instead of
    looking ended."""
    engine = small_engine()
    offer = engine.next_decision()
    with pytest.raises(EngineError, match="accept one of the offered tiers"):
        engine.answer(offer, "no such tier")
    for step in (engine.next_decision, lambda: engine.answer(offer, offer.best_tier)):
        with pytest.raises(EngineError, match="stopped at an error .*accept one of the offered tiers"):
            step()
    assert engine.cluster.marks_active is False and not engine.expired_unvisited


def test_unpickled_tables_are_the_latency_s():
    original = run_policy(small_engine())
    engine = pickled(original)
    assert engine.latency is not original.latency
    assert speed_tables(engine.latency) is engine._tables
    assert engine._tables is not original._tables
    assert engine._tables.cache == original._tables.cache


# A latency model whose pickle names one object of this module: unpickled, it is that object.
THE_LATENCY = TierLatency(rack=0.75)


def _the_latency() -> TierLatency:
    return THE_LATENCY


class NamedLatency(TierLatency):
    def __reduce__(self):
        return _the_latency, ()


def test_a_latency_with_tables_already_keeps_them_and_the_engine_its_own():
    # THE_LATENCY's shared tables, made by a run here, and engines whose pickles hold others.
    run_policy(small_engine_with(THE_LATENCY))
    theirs = speed_tables(THE_LATENCY)
    original = run_policy(small_engine_with(NamedLatency(rack=0.75)))
    for engine in (pickled(original), run_policy(pickled(small_engine_with(NamedLatency(rack=0.75))))):
        assert engine.latency is THE_LATENCY
        assert speed_tables(THE_LATENCY) is theirs  # (the shared tables stay)
        assert engine._tables is not theirs  # (and the engine keeps the pair it was saved with)
        assert_same_results(original, engine)


def small_engine_with(latency, policy: str = "dally", renewal: str = "upgrade", agent_picks: bool = False) -> Engine:
    config = EngineConfig(lease_s=300.0, renewal=renewal)
    return Engine(make_trace(SMALL_ROWS), SMALL_SPEC, make_policy(policy), latency, config, agent_picks=agent_picks)


def test_a_copy_unpickled_in_another_process(tmp_path):
    # dally-paper, as TierLatency lives in the tests; in the new process the latency is a new
    # object, and the engine's tables become its shared ones.
    spec = ClusterSpec(2, 2, 4)
    config = EngineConfig(lease_s=300.0)
    engine = run_policy(Engine(make_trace(SMALL_ROWS), spec, make_policy("dally"), get_latency_model(), config))
    saved = tmp_path / "engine.pickle"
    saved.write_bytes(pickle.dumps(engine))
    script = (
        "import pickle, sys\n"
        "from dallygym.sim.engine import speed_tables\n"
        "from dallygym.sim.engine.speed import _SPEED_TABLES\n"
        "from dallygym.sim.metrics import collect\n"
        "engine = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "assert engine.latency in _SPEED_TABLES and speed_tables(engine.latency) is engine._tables\n"
        "print(repr(collect(engine).summary))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(saved)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(collect(engine).summary)
    assert engine.latency in _SPEED_TABLES  # (and here nothing changed)
