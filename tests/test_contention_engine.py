"""Contention in the engine: a run's speeds follow the shared links, exactly between events."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from helpers import make_trace

from dallygym import ClusterSpec, simulate
from dallygym.sim.cluster import Tier
from dallygym.sim.engine import Engine, EngineConfig, EngineError, run_policy
from dallygym.sim.latency import DallyPaperLatency, LatencyModel
from dallygym.sim.metrics import collect
from dallygym.sim.policies import Policy, make_policy

LATENCY = DallyPaperLatency()
FAIR = EngineConfig(contention="fair-share")
#: A 12-GPU VGG11 job on one machine and half of another: alone (A) and at half its rate (H).
A = LATENCY.speed_factor("vgg11", ((8, 4),))
H = LATENCY.shared_speed_factor("vgg11", ((8, 4),), 0.5)


def _trace(*jobs: tuple[float, int, str, int]) -> pd.DataFrame:
    """Jobs (arrival_s, num_gpus, model, total_iterations), 1 s per iteration."""
    rows = [(k, arrival, gpus, iters, 1.0, model) for k, (arrival, gpus, model, iters) in enumerate(jobs, 1)]
    return make_trace(rows)


#: Two 12-GPU VGG11 jobs at 0 s, of 1,000 and 2,000 iterations.
TWO_JOBS = _trace((0.0, 12, "vgg11", 1000), (0.0, 12, "vgg11", 2000))


def _ends(trace, spec, config, policy="fifo") -> list[float]:
    return simulate(trace, spec, policy=policy, config=config).jobs["end_s"].tolist()


def test_two_jobs_sharing_a_machine_link_worked_on_paper():
    # One rack of three 8-GPU machines; two 12-GPU VGG11 jobs at 0 s. The first takes machine 0
    # and 4 GPUs of machine 1, the second the other 4 of machine 1 and machine 2: both cross
    # machine 1's 200 GB/s link, each asking 200 GB/s, so each gets half. Job 1 (1,000
    # iterations) runs at h = s(share 1/2) and ends at 1000 / h; job 2 (3,000) has then done
    # 1000 iterations too, and finishes the other 2,000 alone at a = s(share 1).
    trace = _trace((0.0, 12, "vgg11", 1000), (0.0, 12, "vgg11", 3000))
    spec = ClusterSpec(1, 3, 8)
    a = LATENCY.speed_factor("vgg11", ((8, 4),))
    h = LATENCY.shared_speed_factor("vgg11", ((8, 4),), 0.5)
    assert h < a
    first = 1000 / h
    assert _ends(trace, spec, FAIR) == pytest.approx([first, first + 2000 / a], rel=1e-12)
    # Every second held is run time, none of it restart overhead; communication is what is
    # not compute (1 s per iteration).
    jobs = simulate(trace, spec, policy="fifo", config=FAIR).jobs
    assert jobs["overhead_s"].tolist() == [0.0, 0.0]
    assert jobs["run_s"].tolist() == pytest.approx([first, first + 2000 / a], rel=1e-12)
    assert jobs["comm_s"].tolist() == pytest.approx([first - 1000, first + 2000 / a - 3000], rel=1e-12)
    assert _ends(trace, spec, EngineConfig()) == pytest.approx([1000 / a, 3000 / a], rel=1e-12)


def test_a_job_that_starts_later_slows_one_running():
    # Job 1 (12 GPUs: machine 0 and half of 1) runs alone for 500 s at a, then job 2 takes the
    # rest of machine 1 and machine 2 and both run at h until job 1 is done.
    trace = _trace((0.0, 12, "vgg11", 1000), (500.0, 12, "vgg11", 1000))
    spec = ClusterSpec(1, 3, 8)
    a = LATENCY.speed_factor("vgg11", ((8, 4),))
    h = LATENCY.shared_speed_factor("vgg11", ((8, 4),), 0.5)
    done_1 = 500 * a  # iterations of job 1 when job 2 arrives
    end_1 = 500 + (1000 - done_1) / h
    done_2 = (end_1 - 500) * h
    end_2 = end_1 + (1000 - done_2) / a
    assert _ends(trace, spec, FAIR) == pytest.approx([end_1, end_2], rel=1e-12)


def test_with_nothing_shared_a_fair_share_run_is_the_run_without_contention():
    # 1-GPU jobs cross no link; multi-machine jobs that never overlap in time each have all
    # they ask (they end long before the next arrives).
    small = _trace(*[(30.0 * k, 1, "resnet50", 500 + 37 * k) for k in range(40)])
    spread = _trace(*[(1e5 * k, 12 + 4 * (k % 3), ("vgg11", "bert_large")[k % 2], 900 + k) for k in range(6)])
    spec = ClusterSpec(2, 2, 8)
    for trace in (small, spread):
        for policy in ("fifo", "dally", "tiresias"):
            assert _ends(trace, spec, FAIR, policy) == _ends(trace, spec, EngineConfig(), policy)


def _run_to_the_end(engine, decision) -> None:
    while decision is not None:
        decision = engine.answer(decision, engine.policy.answer(decision, engine))


def test_a_contended_run_is_deterministic_and_copies_continue_identically():
    from dallygym.sim.trace import load_trace

    config = EngineConfig(contention="fair-share", oversubscription=4.0, seed=3)
    spec = ClusterSpec(2, 8, 8)
    first = simulate("batch-500", spec, policy="dally", config=config).summary
    assert simulate("batch-500", spec, policy="dally", config=config).summary == first
    trace = load_trace("batch-500", cluster=spec)
    engines = []
    for copied in (False, True):
        engine = Engine(trace, spec, make_policy("dally"), LATENCY, config)
        decision = engine.next_decision()
        for _ in range(200):
            decision = engine.answer(decision, engine.policy.answer(decision, engine))
        if copied:
            engine = copy.deepcopy(engine)
            decision = engine.next_decision()
        _run_to_the_end(engine, decision)
        engines.append(collect(engine).summary)
    assert engines[0] == engines[1]


def test_contention_changes_a_contended_run():
    spec = ClusterSpec(2, 8, 8)
    alone = simulate("batch-500", spec, policy="dally").summary
    shared = simulate("batch-500", spec, policy="dally", config=FAIR).summary
    assert shared != alone
    assert shared["jobs"] == alone["jobs"]


def test_a_latency_model_without_links_is_refused_under_contention():
    class Flat(LatencyModel):
        name = "flat"

        def speed_factor(self, model, shape):
            return 0.5 if sum(map(sum, shape)) > 1 else 1.0

    trace = _trace((0.0, 12, "vgg11", 10))
    with pytest.raises(EngineError, match="needs a latency model that prices shared links"):
        Engine(trace, ClusterSpec(1, 3, 8), make_policy("fifo"), Flat(), FAIR)
    engine = Engine(trace, ClusterSpec(1, 3, 8), make_policy("fifo"), Flat(), EngineConfig())
    run_policy(engine)
    assert np.isfinite(engine.end_s).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"contention": "max-min"}, "unknown contention"), ({"oversubscription": -1.0}, "oversubscription must be")],
)
def test_engine_config_checks_the_contention_fields(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**kwargs)


# --- link-aware placement --------------------------------------------------------------------


def test_link_aware_placement_avoids_a_loaded_machine_link():
    # Racks of four 8-GPU machines. Job 1 (12 GPUs) takes machine 0 and 4 GPUs of machine 1.
    # Job 2 (12 GPUs): the engine's best fit is rack 0 again (20 free < 32), machine 2 whole
    # and the other 4 GPUs of machine 1, whose link job 1 already uses: both run at half rate.
    # Placed by the links, job 2 goes to rack 1 (machines 4 and 5), and both run as alone.
    spec = ClusterSpec(2, 4, 8)
    assert _ends(TWO_JOBS, spec, FAIR, "fifo") == pytest.approx([1000 / H, 1000 / H + 1000 / A], rel=1e-12)
    assert _ends(TWO_JOBS, spec, FAIR, "fifo+links") == pytest.approx([1000 / A, 2000 / A], rel=1e-12)


@pytest.mark.parametrize("policy", ["dally", "tiresias", "gandiva"])
def test_without_contention_link_aware_placement_changes_nothing(policy):
    spec = ClusterSpec(4, 8, 8)
    plain = simulate("batch-500", spec, policy=policy).summary
    assert simulate("batch-500", spec, policy=f"{policy}+links").summary == plain


def test_a_link_aware_policy_is_named_copied_and_pickled():
    import pickle

    from dallygym.sim.policies.dally import DallyPolicy
    from dallygym.sim.policies.links import LinkAwarePlacement, link_aware

    policy = make_policy("dally+links")
    assert policy.name == "dally+links"
    assert isinstance(policy, DallyPolicy) and isinstance(policy, LinkAwarePlacement)
    assert type(pickle.loads(pickle.dumps(policy))) is type(policy) is type(copy.deepcopy(policy))
    assert link_aware(policy) is policy
    assert type(link_aware(make_policy("dally"))) is type(policy)
    with pytest.raises(ValueError, match="unknown policy 'nope\\+links'"):
        make_policy("nope+links")


@pytest.mark.parametrize("policy", ["dally", "tiresias", "gandiva", "dally+links"])
def test_a_contended_run_is_the_same_with_the_compiled_kernels_and_without(policy, monkeypatch):
    from dallygym.sim.cluster import ClusterState

    config = EngineConfig(contention="fair-share", oversubscription=4.0)
    spec = ClusterSpec(2, 8, 8)
    compiled = simulate("batch-500", spec, policy=policy, config=config)
    monkeypatch.setattr(ClusterState, "compiled", False)
    reference = simulate("batch-500", spec, policy=policy, config=config)
    assert compiled.summary == reference.summary
    assert compiled.jobs.equals(reference.jobs)


@pytest.mark.parametrize("mode", ["fair-share", "interleaved"])
@pytest.mark.parametrize("policy", ["dally", "dally-consolidated"])
def test_the_compiled_event_loop_shares_links_as_the_python_events_do(mode, policy, monkeypatch):
    # The compiled loop starts and ends placements itself and stops for the shares after each
    # event that changes a link's users; taking every event in Python gives the same run.
    config = EngineConfig(contention=mode, oversubscription=4.0)
    spec = ClusterSpec(4, 8, 8)
    calls = {"loop": 0, "reshare": 0}
    run_events, reshare = Engine._run_events, Engine._reshare

    def counted_loop(self, resume):
        calls["loop"] += 1
        return run_events(self, resume)

    def counted_reshare(self):
        calls["reshare"] += self._links_changed
        return reshare(self)

    monkeypatch.setattr(Engine, "_run_events", counted_loop)
    monkeypatch.setattr(Engine, "_reshare", counted_reshare)
    loop = simulate("batch-500", spec, policy=policy, config=config)
    assert calls["loop"] > 0 and calls["reshare"] > 0
    monkeypatch.setattr(Engine, "_compiled_loop", lambda self: False)
    events = simulate("batch-500", spec, policy=policy, config=config)
    assert loop.summary == events.summary
    assert loop.jobs.equals(events.jobs)
    if mode == "fair-share":  # (it slows jobs here; the interleaved demands fit the links)
        assert loop.summary != simulate("batch-500", spec, policy=policy).summary


def test_load_aware_offers_wait_for_an_unloaded_rack():
    # One rack of three 8-GPU machines; two 12-GPU VGG11 jobs at 0 s, Dally with fixed timers
    # (12 h, 24 h: a 12-GPU job's machine timer is 0, its rack timer 24 h). Job 2's only rack
    # placement crosses machine 1's link, which job 1 uses: plain Dally takes it (both at half
    # rate); with +load it waits, and starts alone when job 1 is done (at 1000 / a).
    spec = ClusterSpec(1, 3, 8)
    assert _ends(TWO_JOBS, spec, FAIR, "dally-manual") == pytest.approx([1000 / H, 1000 / H + 1000 / A], rel=1e-12)
    assert _ends(TWO_JOBS, spec, FAIR, "dally-manual+load") == pytest.approx([1000 / A, 3000 / A], rel=1e-12)
    # Without contention +load is the policy itself.
    plain = EngineConfig()
    assert _ends(TWO_JOBS, spec, plain, "dally-manual+load") == _ends(TWO_JOBS, spec, plain, "dally-manual")


def test_load_aware_offers_are_for_dally_policies_only():
    assert make_policy("dally+load").name == "dally+load"
    with pytest.raises(ValueError, match=r"\+load applies to Dally's policies"):
        make_policy("tiresias+load")


def test_update_shares_brings_a_pass_s_starts_up_to_date():
    # An agent picks the jobs of the first pass in turn. After jobs 1 and 2 (12 GPUs each, the
    # second across machine 1's link that the first uses) have started, the pick of job 3
    # comes in the same pass: both still show their speed alone until update_shares.
    trace = _trace((0.0, 12, "vgg11", 1000), (0.0, 12, "vgg11", 2000), (0.0, 4, "vgg11", 500))
    spec = ClusterSpec(1, 4, 8)
    engine = Engine(trace, spec, make_policy("fifo"), LATENCY, FAIR, agent_picks=True, lease_picks="waiting")
    decision = engine.next_decision()
    while engine.n_running < 2:
        decision = engine.answer(decision, engine.policy.answer(decision, engine))
    assert decision is not None and engine.now_s == 0.0  # the same pass
    a = LATENCY.speed_factor("vgg11", ((8, 4),))
    assert engine.speed[:2].tolist() == [a, a]
    engine.update_shares()
    h = LATENCY.shared_speed_factor("vgg11", ((8, 4),), 0.5)
    assert engine.link_share[:2].tolist() == [0.5, 0.5]
    assert engine.speed[:2].tolist() == [h, h]


@pytest.mark.parametrize("restart_s", [0.0, 600.0])
def test_a_contended_run_keeps_its_time_accounting(restart_s):
    # Changing a job's speed never counts as restart overhead: with none configured there is
    # none; with some, each job has at most one overhead per placement it took after its first.
    config = EngineConfig(contention="fair-share", oversubscription=4.0, restart_overhead_s=restart_s)
    result = simulate("batch-500", ClusterSpec(2, 8, 8), policy="tiresias", config=config)
    jobs = result.jobs
    assert (jobs["comm_s"] >= -1e-6 * jobs["ideal_s"]).all()
    if restart_s == 0.0:
        assert (jobs["overhead_s"] == 0.0).all()
    else:
        assert (
            jobs["overhead_s"] <= restart_s * (jobs["preemptions"] + jobs["migrations"] + jobs["upgrades"]) + 1e-6
        ).all()


# --- the links' load in the environments -------------------------------------------------------


def test_the_queue_observation_shows_each_link_s_load():
    # One rack of four 8-GPU machines, three 12-GPU jobs at 0 s (36 GPUs asked of 32: the order
    # matters). Links: machines 0-3, then the rack's uplink. At the first pick nothing runs; once
    # job 1 runs on machine 0 and half of machine 1 it asks 200 GB/s of each of their 200 GB/s
    # links: load 1, shown as min(load, 2) / 2 = 0.5.
    import gymnasium as gym

    trace = _trace((0.0, 12, "vgg11", 1000), (0.0, 12, "vgg11", 2000), (0.0, 12, "vgg11", 500))
    env = gym.make(
        "DallyQueue-v0",
        racks=1,
        machines_per_rack=4,
        gpus_per_machine=8,
        trace=trace,
        offer_rule="fifo",
        max_candidates=4,
        contention="fair-share",
        link_load=True,
    )
    obs, _ = env.reset(seed=0)
    assert obs["links"].tolist() == [0.0] * 5
    obs, _, terminated, _, _ = env.step(0)
    assert not terminated
    assert obs["links"].tolist() == [0.5, 0.5, 0.0, 0.0, 0.0]
    assert env.unwrapped.engine.link_load().tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("env_id", ["DallySmall-v0", "DallyQueueSmall-v0"])
def test_both_environments_pass_the_checker_with_the_links_load(env_id):
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    env = gym.make(env_id, contention="fair-share", oversubscription=2.0, link_load=True)
    check_env(env.unwrapped, skip_render_check=True)
    from dallygym.envs.offer_obs import OBS_DIM

    links = 2 * 2 + 2  # the small ids: 2 racks of 2 machines, then the 2 racks' uplinks
    space = env.observation_space
    if env_id.startswith("DallyQueue"):
        assert space["links"].shape == (links,)
    else:
        assert space.shape == (OBS_DIM + links,)
    with pytest.raises(ValueError, match="link_load=True shows the links' load under a contention model"):
        gym.make(env_id, link_load=True)


# --- the "interleaved" reading ------------------------------------------------------------------


class _AcrossRacks(Policy):
    """Places job ``k`` on 4 GPUs of machine ``k`` in rack 0 and 4 of machine ``k`` in rack 1
    (2 racks of 2 machines), always at network tier."""

    name = "across-racks"

    def decide(self, offer, view):
        return Tier.NETWORK if Tier.NETWORK in offer.tiers else None

    def place(self, view, job, tier):
        k = int(view.job_id[job]) - 1
        return np.concatenate([np.arange(4) + 8 * k, np.arange(4) + 8 * (2 + k)])


@pytest.mark.parametrize(("mode", "x"), [("fair-share", 2.0), ("interleaved", 2.0), ("interleaved", 1.0)])
def test_two_jobs_on_a_two_to_one_uplink_under_each_reading(mode, x):
    # Each job asks 200 GB/s of both uplinks while it sends; each uplink carries 2 x 200 / X.
    # fair-share: both send at once, 400 asked of 200: share 1/2. interleaved: each asks 200 x d
    # on average (d: the share of its iteration spent sending): share 200 / (2 x 200 d) = 1 / (2 d)
    # if below 1; at 1:1 (400 GB/s) both fit whole.
    trace = _trace((0.0, 8, "vgg11", 1000), (0.0, 8, "vgg11", 1000))
    spec = ClusterSpec(2, 2, 8)
    config = EngineConfig(contention=mode, oversubscription=x)
    d = LATENCY.link_duty("vgg11", ((4,), (4,)))
    share = {"fair-share": 0.5, "interleaved": min(1.0, 2 * 200 / x / (2 * 200 * d))}[mode]
    speed = LATENCY.shared_speed_factor("vgg11", ((4,), (4,)), share)
    ends = simulate(trace, spec, policy=_AcrossRacks(), config=config).jobs["end_s"].tolist()
    assert ends == pytest.approx([1000 / speed] * 2, rel=1e-12)
    assert (0.5 < d < 1) and (share < 1) == (x == 2.0)


def test_link_duty_is_the_share_of_an_iteration_spent_sending():
    # 2 racks x 1 machine: 1 / 200 GB/s per byte of gradient; VGG11 sends its fp32 gradients
    # (bytes scale 1) during an iteration of compute / s.
    from dallygym.sim.models import shipped_profile

    grad_bytes = float(shipped_profile("vgg11").grad_bytes[shipped_profile("vgg11").weight_layers].sum())
    iteration_s = 3.63e-3 / LATENCY.speed_factor("vgg11", ((4,), (4,)))
    assert LATENCY.link_duty("vgg11", ((4,), (4,))) == pytest.approx(grad_bytes / 200e9 / iteration_s, rel=1e-12)
    assert LATENCY.link_duty("vgg11", ((8,),)) == 0.0
