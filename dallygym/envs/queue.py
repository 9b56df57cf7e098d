"""``DallyQueue-v0``: the agent chooses which job is placed next (SPEC §7b).

A thin adapter over the same engine as ``Dally-v0``: the engine is built with
``agent_picks=True``, so every scheduling pass in which the order matters yields a
:class:`~dallygym.sim.engine.Pick`; the agent answers it, and offers (which tier) are answered by
the configured offer rule. What it shares with ``Dally-v0`` is in
:class:`~dallygym.envs.base.EnvBase`; its observation is built by
:class:`~dallygym.envs.queue_obs.QueueObservation`.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
from gymnasium import spaces

from ..sim import kernels
from ..sim.engine import LEASE_PICKS, Engine, Pick
from ..sim.latency import LatencyModel
from ..sim.policies import Policy, make_policy
from ..sim.policies.base import auto_accept_of
from ..sim.policies.dally import DallyPolicy
from ..sim.policies.protected import ProtectedRemainingPolicy
from .base import MAKESPAN_PENALTY, RELATIVE_JCT, EnvBase, TraceSource, action_index, warn_invalid_action
from .queue_obs import (  # noqa: F401  (the observation's names are dallygym.envs.queue's too)
    CLUSTER_DIM,
    CLUSTER_FEATURES,
    JOB_DIM,
    JOB_FEATURES,
    LIMIT_CLUSTER_FEATURES,
    LIMIT_JOB_FEATURES,
    QueueObservation,
    observation_dims,
)

QUEUE_REWARDS = (RELATIVE_JCT, "jct-makespan", "jct", "makespan")
#: How the makespan part of a reward is credited over the steps (the return is the same):
#: as the makespan bound moves, or as time elapses.
MAKESPAN_CREDITS = ("bound", "elapsed")
#: Default reward scale in leases: returns of a few tens at 8 racks (a makespan of thousands of
#: hours would otherwise give value targets in the thousands, which swamp a shared network).
REWARD_SCALE_LEASES = 100.0
#: Short names of the Dally variants as offer rules (any shipped policy name works too).
OFFER_RULES = {
    "dally": "dally",
    "consolidated": "dally-consolidated",
    "nowait": "dally-nowait",
    "manual": "dally-manual",
}


def check_queue_options(
    guard_leases: float | None,
    guard_waiting: bool,
    limit_features: bool,
    reward: str = RELATIVE_JCT,
    makespan_weight: float = 1.0,
    max_candidates: int = 512,
    makespan_credit: str = "bound",
    lease_picks: str = "waiting",
) -> None:
    """``DallyQueueEnv``'s own options, checked (a ValueError naming the option): among them
    ``guard_leases`` None or a share in (0, 1], ``guard_waiting`` only with it,
    ``limit_features`` only with the ``"relative-jct"`` reward. Part of
    :meth:`DallyQueueEnv.check_options`, which the constructor and
    :class:`~dallygym.envs.config.EnvConfig` call."""
    if reward not in QUEUE_REWARDS:
        raise ValueError(f"unknown reward {reward!r}; choose one of {', '.join(QUEUE_REWARDS)}")
    if isinstance(makespan_weight, bool) or not (
        isinstance(makespan_weight, (int, float)) and math.isfinite(makespan_weight) and makespan_weight >= 0
    ):
        raise ValueError(f"makespan_weight must be a non-negative number, got {makespan_weight!r}")
    if (
        isinstance(max_candidates, (bool, np.bool_))
        or not isinstance(max_candidates, (int, np.integer))
        or max_candidates < 1
    ):
        raise ValueError(f"max_candidates must be a positive integer, got {max_candidates!r}")
    if makespan_credit not in MAKESPAN_CREDITS:
        raise ValueError(f"unknown makespan_credit {makespan_credit!r}; choose one of {', '.join(MAKESPAN_CREDITS)}")
    if lease_picks not in LEASE_PICKS:
        raise ValueError(f"unknown lease_picks {lease_picks!r}; choose one of {', '.join(LEASE_PICKS)}")
    if guard_leases is not None and (
        isinstance(guard_leases, bool) or not isinstance(guard_leases, (int, float)) or not 0.0 < guard_leases <= 1.0
    ):
        raise ValueError(f"guard_leases must be None or a share in (0, 1], got {guard_leases!r}")
    if not isinstance(guard_waiting, bool):
        raise ValueError(f"guard_waiting must be True or False, got {guard_waiting!r}")
    if guard_waiting and guard_leases is None:
        raise ValueError("guard_waiting=True needs guard_leases (the share from which a job is protected)")
    if not isinstance(limit_features, bool):
        raise ValueError(f"limit_features must be True or False, got {limit_features!r}")
    if limit_features and reward != RELATIVE_JCT:
        raise ValueError(
            f"limit_features=True shows the makespan limit of reward={RELATIVE_JCT!r}; reward={reward!r} has none"
        )


def resolve_offer_rule(offer_rule: str | Policy) -> str | Policy:
    """A policy name (or instance) from an offer rule: the short names of :data:`OFFER_RULES`
    or any shipped policy name."""
    if isinstance(offer_rule, Policy):
        return offer_rule
    if not isinstance(offer_rule, str):
        raise TypeError(f"offer_rule must be a policy name or a Policy, got {type(offer_rule).__name__} {offer_rule!r}")
    name = OFFER_RULES.get(offer_rule, offer_rule)
    make_policy(name)  # unknown names fail here, naming the known ones
    return name


#: Jobs whose estimate_share is at least this are protected by :func:`protected_share_action`
#: (the protected-remaining heuristic's ½).
PROTECT_SHARE = 0.5


def protected_share_action(obs: dict, action_mask: np.ndarray | None = None, share: float = PROTECT_SHARE) -> int:
    """The protected-remaining order read from a ``DallyQueue`` observation: serve the
    candidate whose ``estimate_share`` is at least ``share`` (½ by default) with
    the longest remaining estimate, or, if none is protected, the one with the shortest; ties
    go to the earlier slot. Never stops.

    It differs from the ``protected-remaining`` policy in one respect: "the largest estimate"
    is over every unfinished job, running ones included, not over the jobs being ordered (with
    ``lease_picks="waiting"`` those are the waiting jobs only, and protecting the longest
    waiting job when a longer one already runs costs mean JCT for nothing). It is the
    teacher of the imitation warm start (``dallygym train --imitate-episodes``) and a
    baseline in ``agents/queue_baselines.py``. ``action_mask`` is accepted for the
    ``choose(obs, mask)`` signature and not needed: the filled slots are the valid ones.
    """
    k = int(obs["job_mask"].sum())
    if k == 0:
        return 0
    jobs = obs["jobs"][:k]
    estimate = jobs[:, JOB_FEATURES.index("remaining_estimate")]
    protected = jobs[:, JOB_FEATURES.index("estimate_share")] >= share
    return int(np.argmin(np.where(protected, -estimate, estimate)))


class DallyQueueEnv(EnvBase):
    """Job ordering on a hierarchical GPU cluster: each step, which job is served next.

    ## Description

    The engine of ``Dally-v0`` replays a trace of gang-scheduled training jobs. A scheduling
    pass runs at every arrival, completion and round boundary; in it, waiting jobs -- and at a
    round boundary every running job, whose lease has expired -- take turns at the free GPUs.
    Whenever the order of those turns matters, this environment asks the agent for it: the
    free GPUs (at a boundary counting the GPUs of lease-expired jobs not served yet, which
    anyone may claim) cannot serve every candidate that fits (their summed GPU demand is
    larger) and there are at least two candidates. Each step the agent picks the candidate
    that takes its turn now. Who the candidates are at a round boundary is ``lease_picks``:

    * ``"waiting"`` (default): the waiting jobs only. Serving one first serves, in the offer
      rule's priority order, every lease-expired job ranked ahead of it, so it may claim only
      idle GPUs and those of lease-expired jobs ranked after it -- exactly what it could claim
      at its turn in a native pass. The agent chooses which jobs start and when to stop; the
      offer rule's order decides whose lease is renewed first. An episode at 8 racks is about
      2,000-4,000 steps.
    * ``"all"``: every lease-expired job is a candidate too; picking one renews it before anyone
      else can claim its GPUs, so the agent also chooses whom to protect. About 13,000-17,000
      steps per episode at 8 racks (most of them renewals).

    ``guard_leases`` (a share in (0, 1], default None: off) guards the leases of the jobs that
    may set the makespan: at a round boundary, before any pick, every lease-expired job whose
    remaining estimate (job feature 9) is at least that share of the largest of any unfinished
    job (so its ``estimate_share`` is at least the share) takes its turn -- renewed, or offered
    an upgrade -- so no picked job can claim its GPUs. It is part of the scheduler the agent
    acts in, like the offer rule: a guarded job is never preempted by a pick, which is what
    keeps the makespan when the agent orders the rest for mean JCT. ``guard_waiting=True``
    (with ``guard_leases``) extends the guard to every candidate: before each pick, a
    candidate whose ``estimate_share`` is at least the share is served without asking the
    agent, the longest remaining estimate first (ties: the earlier slot), exactly as if it had
    been picked -- the protected-remaining rule for the jobs that may set the makespan. The
    agent is asked only when no candidate is protected, so it orders the rest, the jobs that
    decide the mean JCT.

    What a served candidate does:

    * a waiting job gets a resource offer, answered by the offer rule (``offer_rule``: Dally's
      Algorithm 1 with the auto-tuner by default). The rule may decline (delay scheduling: the
      job waits for a better tier); the job is then out of this pass.
    * a lease-expired job renews its lease on its GPUs if no job served before it claimed any
      (under the default ``renewal="upgrade"`` it may be offered a better tier, answered by the
      offer rule); if some were claimed it is preempted and gets an offer like a waiting job.
      A waiting job served before it takes idle GPUs first, then the GPUs of the lease-expired
      job last in the offer rule's priority order.

    Once the order no longer matters the pass finishes by itself in the offer rule's priority
    order, as does a pass in which it never mattered, so every step is a real choice. The
    "stop" action ends the pass: the remaining waiting jobs wait for the next event, and the
    remaining lease-expired jobs keep their GPUs (preempted if some were claimed); it lets the
    agent keep GPUs free for a job that needs many. It is valid only while some job would keep
    running (so the run cannot stall). A pass with a single candidate and stop not valid is no
    decision. Answering every step with action 0 (the candidate the offer rule's priority puts
    first) is exactly the offer rule's native run.

    ## Action Space

    ``Discrete(max_candidates + 1)``: action ``k < max_candidates`` serves the candidate in slot
    ``k``; action ``max_candidates`` stops the pass. :meth:`action_masks` (and
    ``info["action_mask"]``) gives the valid ones. An invalid action is replaced by action 0
    and flagged in ``info["invalid_action"]``, the first one of each instance with an
    :class:`~dallygym.envs.offer.InvalidActionWarning` (``strict=True`` raises instead).

    Candidates fill the slots in the offer rule's priority order (slot 0 is the native choice).
    With more candidates than slots, the ones beyond the window are not shown until enough
    earlier ones have been served or have declined; ``info["beyond_window"]`` counts them. The
    registered ids have a window as large as their traces (500 jobs, 512 slots; 60 jobs, 64
    slots), so there every candidate is reachable.

    ## Observation Space

    ``Dict`` of ``"jobs"``: ``Box(0, 1, (max_candidates, 20), float32)``, one row per slot (zeros
    in empty slots); ``"job_mask"``: ``Box(0, 1, (max_candidates,), float32)``, 1 where a slot
    holds a candidate; ``"cluster"``: ``Box(0, 1, (15,), float32)``. Times ``t`` are shown as
    ``log1p(t / lease_s) / log1p(10000)`` (1 from 10,000 leases on).

    | # | job feature | meaning |
    |---|---|---|
    | 0 | gpus | log2(1 + GPU demand) / log2(1 + cluster GPUs) |
    | 1–3 | best_machine, best_rack, best_network | one-hot: the best tier this job can ever have |
    | 4 | best_tier_free | 1 if that best tier is free for it now (lease-expired jobs' GPUs counted) |
    | 5 | starvation | time since arrival or since it last lost its GPUs (see below) |
    | 6 | nw_sens | Nw_sens = ideal time of completed work / time run (0 if never ran) |
    | 7 | progress | completed iterations / total iterations |
    | 8 | remaining_ideal | remaining ideal run time (iterations left x iter_time_s) |
    | 9 | remaining_estimate | remaining ideal time / Nw_sens, the protected-remaining estimate (see below) |
    | 10 | attained_service | GPUs x time run, as a time per cluster GPU |
    | 11 | preemptions | min(preemptions, 20) / 20 |
    | 12 | holds_lease | 1 for a lease-expired running job, 0 for a waiting job |
    | 13 | current_tier | tier it holds: 1/3 machine, 2/3 rack, 1 network; 0 if waiting |
    | 14–16 | speed_machine, speed_rack, speed_network | speed factors, see ``sensitivity`` |
    | 17–18 | past_timer_machine, past_timer_rack | 1 if starvation >= the offer rule's T_Mc (resp. T_Rk) |
    | 19 | estimate_share | remaining estimate / the largest of any unfinished job (see below) |

    Starvation (5) runs from arrival, or from the last time the job lost its GPUs; a running
    job's clock runs from its last start. The remaining estimate (9) divides by Nw_sens; a
    never-run job's by 1 if it fits a machine, else by 0.1. ``holds_lease`` (12) is always 0
    with ``lease_picks="waiting"``. The timer flags (17–18) compare with the offer rule's
    timers for the job's demand, and are 0 if the rule has none. ``estimate_share`` (19) divides
    the remaining estimate (in seconds) by the largest remaining estimate of any unfinished job,
    running ones included: the jobs near 1 are the ones that decide the makespan.

    | # | cluster feature | meaning |
    |---|---|---|
    | 0 | free_gpus | free GPUs (lease-expired jobs' GPUs counted) / cluster GPUs |
    | 1 | idle_gpus | GPUs nobody holds / cluster GPUs |
    | 2 | max_free_machine | most free GPUs on one machine / GPUs per machine |
    | 3 | max_free_rack | most free GPUs in one rack / GPUs per rack |
    | 4 | candidates | log1p(candidates) / log1p(1000) |
    | 5 | candidate_demand | min(candidates' GPU demand / free GPUs, 10) / 10 |
    | 6 | waiting_jobs | log1p(waiting jobs) / log1p(1000) |
    | 7 | waiting_demand | min(waiting GPU demand / cluster GPUs, 10) / 10 |
    | 8 | running_jobs | log1p(running jobs) / log1p(1000) |
    | 9 | jobs_remaining | unfinished jobs / jobs in the trace |
    | 10 | time_elapsed | time since the first arrival |
    | 11 | time_in_round | position in the current lease, in [0, 1) |
    | 12 | boundary | 1 at a round boundary (lease-expired jobs are candidates) |
    | 13 | may_stop | 1 if the stop action is valid |
    | 14 | beyond_window | min(candidates not shown / max_candidates, 1) |

    ``limit_features=True`` (``"relative-jct"`` only) appends what the agent needs to keep the
    makespan within the limit the reward holds it to (see Rewards; the limit is the reference
    run's makespan, computed at reset from the whole trace): job feature 20 ``limit_finish``,
    (time since the first arrival + the job's remaining estimate) / the limit, the share of the
    limit at which the job would end if it ran from now at its estimated speed; cluster
    features 15 ``limit_elapsed``, time since the first arrival / the limit, 16
    ``limit_estimate``, (that time + the largest remaining estimate of any unfinished job) /
    the limit, and 17 ``limit_work``, (that time + the unfinished jobs' GPU demand x remaining
    estimate summed over the cluster's GPUs) / the limit: when the longest job and when all the
    work left would end, the latter were the cluster perfectly packed. Each is shown as
    min(share, 2) / 2, so 0.5 is the limit itself. The jobs are then ``Box(0, 1,
    (max_candidates, 21))`` and the cluster ``Box(0, 1, (18,))``; the first 20 and 15 features
    are as above.

    ``sensitivity`` decides job features 14–16: ``"hidden"`` (default, the paper's
    constraint): 0. ``"observed"``: the speed factor the job had the last time it ran at that
    tier (0 if never). ``"oracle"``: the latency model's factor for a representative placement
    at each tier the job can fit (its GPUs over the fewest machines, evenly; at the network
    tier over two racks); 0 where it cannot.

    ## Rewards

    ``"relative-jct"`` (default) measures what the picks change: the improvement over a
    reference run of the same trace, the offer rule's native run (what answering every step
    with action 0 gives, but for the guards; auto-tuned Dally by default), run at reset with
    the episode's engine seed and kept for the last few traces (a fixed trace is run once).
    Each step pays

        −[(A(t) − A(t')) − (R(t) − R(t'))] / U_jct − ``makespan_penalty`` x [X(t) − X(t')] / U_span,

    t' and t being the previous and the current pick, A and R the job-seconds spent in the
    system up to a time by the agent's run and the reference run, X(t) = max(0, M(t) − limit)
    with M(t) the makespan so far and the limit the reference's makespan (or that of
    ``makespan_reference``'s native run, a policy name: e.g. ``"dally"`` to hold the makespan
    to Dally's while the offer rule is another); U_jct = the reference's total JCT / 100 and
    U_span = the limit / 100. ``makespan_credit`` says what M(t) is: ``"bound"`` (default) the
    makespan bound (:meth:`makespan_bound_s`) minus the first arrival, so a pick that delays
    the job that will set the makespan is charged at that pick; ``"elapsed"`` the time since
    the first arrival, so the excess is paid only as the clock runs past the limit. Both end at
    the makespan. The **return is −100 x (agent's total JCT − reference's) / reference's
    total JCT − makespan_penalty x 100 x max(0, makespan − limit) / limit**: the mean-JCT
    improvement over the offer rule's own order in percent, minus ``makespan_penalty``
    (default 3) points per percent of makespan beyond the limit.
    The makespan is a constraint: only an excess is charged, a shorter one earns nothing.
    Action 0 at every step (no guard) gets 0 at every step. The episode ends at the last pick:
    the rest of the run is then determined and is simulated to the end within that step,
    which pays the remaining difference and the makespan excess -- fixed by the earlier
    picks, with no part every policy pays alike. Measured on ``gen:batch-500`` draws at 2, 4
    and 8 racks: random picks score about +40 (their mean JCT is about half the reference's;
    −35 to +74 by draw), the protected-remaining order (:func:`protected_share_action`) about
    +55 to +80 (−26 to +93 by draw); in percent, returns compare across cluster sizes. With
    ``reward_scale_s`` given the units are seconds: U_jct = jobs x ``reward_scale_s``, U_span
    = ``reward_scale_s``. The reference run is :attr:`reference_run`. A reset costs one
    native run more (tenths of a second at 8 racks on batch-500).

    The other rewards are minus a quantity accrued since the previous step, divided by
    ``reward_scale_s`` (default 100 x ``lease_s``), so the episode return is minus its total
    over that scale. Most of each return is set by the trace alone (the jobs' own run
    times), which no pick changes, so compare them on the same trace:

    * ``"jct-makespan"``: −(job-seconds in the system / jobs + ``makespan_weight`` x
      makespan so far) / ``reward_scale_s``. Return = −(mean JCT + ``makespan_weight`` x
      makespan) / ``reward_scale_s``. Mean JCT alone is won by starving the longest jobs, which
      stretches the makespan; the second term keeps the makespan part of the objective.
    * ``"jct"``: return = −mean JCT / ``reward_scale_s`` (Decima's reward, per job).
    * ``"makespan"``: return = −makespan / ``reward_scale_s``.

    (Makespan = last completion − first arrival; the time before the first step is in the
    first step's reward.) For these, ``makespan_credit`` decides how the makespan part is paid:

    * ``"bound"`` (default): "makespan so far" is the makespan bound
      (:meth:`makespan_bound_s`: the latest finish of a running job at its current speed, and
      now + remaining ideal time / best-tier speed for a waiting one) minus its value when the
      agent first observes (``initial_makespan_bound_s``, relative to the first arrival). A
      step that delays, preempts or spreads the job that sets the makespan is charged at once,
      and the part of the makespan no decision can change (the trace's longest job) is not in
      the return: the makespan terms above become ``makespan − initial_makespan_bound_s``.
    * ``"elapsed"``: "makespan so far" is the time elapsed since the first arrival, which every
      action pays alike until the last job ends; the return is as written above.

    ## Starting State

    :meth:`reset` draws or picks the trace (see ``trace``), starts the engine with a seed from
    the environment's generator and runs it to the first pick that is a real choice. If the
    whole episode has none, it ends inside ``reset``: the observation is all zeros, action 0
    is the only valid one, and the first ``step`` returns ``terminated=True`` with the whole
    episode's reward.

    ## Episode End

    ``terminated`` when every job has finished; the final ``info["summary"]`` holds the run's
    summary metrics (the keys of ``dallygym simulate --format json``). ``truncated`` only via a
    ``TimeLimit`` wrapper. Under ``"relative-jct"`` it also gives ``makespan_limit_s`` (the makespan the
    reward charges beyond) and ``makespan_excess_pct`` (100 x (makespan − limit) / limit).
    :meth:`set_makespan_penalty` changes the penalty from the next episode on (a training loop that
    learns it as a Lagrange multiplier: ``dallygym train --makespan-dual``).

    ## Arguments

    ``gym.make("DallyQueue-v0", racks=8, machines_per_rack=8, gpus_per_machine=8,
    trace="gen:batch-500", offer_rule="dally", latency="dally-paper", lease_s=3600.0,
    restart_overhead_s=0.0, renewal="upgrade", reward="relative-jct", makespan_weight=1.0,
    reward_scale_s=None, makespan_penalty=3.0, max_candidates=512, sensitivity="hidden",
    lease_picks="waiting", makespan_credit="bound", guard_leases=None, guard_waiting=False,
    strict=False, render_mode=None, profile=None, makespan_reference=None, limit_features=False,
    contention="none", oversubscription=1.0, link_load=False)``

    * ``trace``: as for ``Dally-v0``; the registered ids draw a fresh seeded trace at each
      reset (``"gen:batch-500"``, ``"gen:small"``), so ``reset(seed=s)`` differs with ``s``
      and is reproducible. ``trace="batch-500"`` replays the paper's fixed trace.
    * ``offer_rule``: which tier a served job takes: ``"dally"`` (Algorithm 1, auto-tuned
      timers), ``"consolidated"`` (wait for the best tier), ``"nowait"`` (take the best free
      tier), ``"manual"``, or any shipped policy name or :class:`~dallygym.sim.policies.Policy`
      (its ``decide``, placement and hooks are used, and its priority orders the slots).
    * ``max_candidates``: the number of slots.
    * ``lease_picks``: ``"waiting"`` or ``"all"``, see Description.
    * ``reward``, ``reward_scale_s``, ``makespan_penalty`` (``"relative-jct"``),
      ``makespan_weight`` (``"jct-makespan"``): see Rewards.
    * ``makespan_credit``: ``"bound"`` or ``"elapsed"``, see Rewards.
    * ``makespan_reference``: None or a policy name, the ``"relative-jct"`` makespan limit (see
      Rewards).
    * ``guard_leases``: None or a share in (0, 1], see Description.
    * ``guard_waiting``: False, or True to guard every protected candidate (needs
      ``guard_leases``), see Description.
    * ``limit_features``: False, or True to show the makespan limit (``"relative-jct"`` only),
      see Observation Space.
    * ``contention``, ``oversubscription``, ``link_load``: jobs sharing links, as for ``Dally-v0``;
      ``link_load=True`` adds the observation key ``links`` (the shipped networks ignore it).

    ## Version History

    * v0: initial version; ``lease_picks`` (default ``"waiting"``) and ``makespan_credit``
      (default ``"bound"``) added before the first committed three-seed agents; job feature 19
      (``estimate_share``) added with the imitation warm start (agents trained on 19 features
      are refused at load with a message saying so). ``guard_leases`` (default None: off, so
      every earlier result stands) added with the guarded agents; ``guard_waiting`` (default
      False) with the fully guarded ones. The default reward was ``"jct-makespan"`` before
      ``"relative-jct"`` was added; ``reward="jct-makespan"`` gives it back unchanged.
      ``limit_features`` (default False: the observation is unchanged) added with the agents
      that see the makespan limit; ``contention``, ``oversubscription``, ``link_load`` (off) with
      the contention model.
    """

    def __init__(
        self,
        racks: int = 8,
        machines_per_rack: int = 8,
        gpus_per_machine: int = 8,
        trace: TraceSource = "gen:batch-500",
        offer_rule: str | Policy = "dally",
        latency: str | LatencyModel = "dally-paper",
        lease_s: float = 3600.0,
        restart_overhead_s: float = 0.0,
        renewal: str | None = None,
        reward: str = RELATIVE_JCT,
        makespan_weight: float = 1.0,
        reward_scale_s: float | None = None,
        makespan_penalty: float = MAKESPAN_PENALTY,
        max_candidates: int = 512,
        sensitivity: str = "hidden",
        lease_picks: str = "waiting",
        makespan_credit: str = "bound",
        guard_leases: float | None = None,
        guard_waiting: bool = False,
        strict: bool = False,
        render_mode: str | None = None,
        profile: str | None = None,
        makespan_reference: str | None = None,
        limit_features: bool = False,
        contention: str = "none",
        oversubscription: float = 1.0,
        link_load: bool = False,
    ) -> None:
        self._init_kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.check_options(**self._init_kwargs)
        max_candidates = int(max_candidates)  # (a numpy integer too: the spaces and slots want an int)
        # (the offer rule is the engine's priority policy: its order fills the slots)
        options = {name: value for name, value in self._init_kwargs.items() if name in EnvBase.OPTIONS}
        super().__init__(priority=resolve_offer_rule(offer_rule), **options)
        self.reward_kind = reward
        self.makespan_weight = float(makespan_weight)
        self.makespan_credit = makespan_credit
        self.max_candidates = max_candidates
        self.lease_picks = lease_picks
        self.guard_leases = None if guard_leases is None else float(guard_leases)
        self.guard_waiting = guard_waiting
        self.limit_features = limit_features
        self.stop_action = max_candidates
        #: The pick open to the agent, None before the first and after the last.
        self.pick: Pick | None = None
        self._mask = np.zeros(max_candidates + 1, dtype=bool)  # the valid actions at the open pick
        self._observer = QueueObservation(self.spec_cluster, max_candidates, sensitivity, limit_features, link_load)
        self.action_space = spaces.Discrete(max_candidates + 1)
        self.observation_space = self._observer.space

    @classmethod
    def _check_own_options(cls, options: dict[str, object]) -> None:
        check_queue_options(**{name: options[name] for name in inspect.signature(check_queue_options).parameters})
        resolve_offer_rule(options["offer_rule"])

    # --- Gymnasium API ---------------------------------------------------------------------

    def _start_episode(self):
        trace, config = self._episode_trace_and_config()
        engine = self.engine = Engine(
            trace, self.spec_cluster, self.policy, self.latency, config, agent_picks=True, lease_picks=self.lease_picks
        )
        if self.guard_leases is not None:
            engine.lease_guard = self._guarded
        if self.guard_waiting:
            engine.pick_guard = self._guarded_pick
        self._reward_scale_s = self.reward_scale_s or REWARD_SCALE_LEASES * float(self.config.lease_s)
        self._start_reference(trace, config)
        timers = self.policy.timers if isinstance(self.policy, DallyPolicy) else None
        self._observer.start(engine, timers, self.makespan_limit_s)
        self._best_speed = self._observer.best_tier_speeds()  # (the makespan bound's, see makespan_bound_s)
        self._span0 = 0.0
        self._run_to_first_decision()
        #: The makespan bound when the agent first observes (``makespan_credit="bound"``): the
        #: makespan part of the return is the makespan in excess of it. 0 otherwise.
        self.initial_makespan_bound_s = 0.0
        if self.makespan_credit == "bound":
            self.initial_makespan_bound_s = self._span0 = self.makespan_bound_s() - engine.first_arrival_s
        self._terminal_pending = self._done
        return self._observation(), self._info(invalid=False)

    def step(self, action):
        if self.engine is None or self._done:
            return self._step_without_decision()  # the errors, or the end of an episode without a pick
        index = action_index(action)
        invalid = index is None or not (0 <= index <= self.max_candidates and self._mask[index])
        if invalid:
            if self.strict:
                what = "not an integer" if index is None else "not valid here"
                raise ValueError(
                    f"action {action!r} ({type(action).__name__}) is {what}: valid actions "
                    f"{np.flatnonzero(self._mask).tolist()} of Discrete({self.max_candidates + 1})"
                )
            if not self._warned_invalid:
                warn_invalid_action(self, action, "action 0 (the offer rule's first candidate)", stacklevel=2)
            index = 0
        answer = None if index == self.stop_action else self.pick.candidates[index]
        self.steps += 1
        reward = self._advance(answer)
        info = self._info(invalid=invalid)
        if self._done:
            self._end_info(info)
        return self._observation(), float(reward), bool(self._done), False, info

    def action_masks(self) -> np.ndarray:
        """Valid actions now: the filled slots, and stop when the pass may stop."""
        if self._done:
            mask = np.zeros(self.max_candidates + 1, dtype=bool)
            mask[0] = True
            return mask
        return self._mask.copy()

    # --- the adapter -----------------------------------------------------------------------

    def _advance(self, answer, first: bool = False) -> float:
        """Send the answer (unless first), answer offers with the offer rule (the engine
        accepts those it is known to accept, ``auto_accept_of``, itself, as in a native run),
        and run to the next pick that is a real choice; return the reward."""
        engine = self.engine
        answer_by_rule = self.policy.answer
        rule = self.policy
        decision = engine.next_decision(auto_accept_of(rule)) if first else engine.answer(self.pick, answer)
        while decision is not None:
            if decision.kind != "pick":  # an offer (or any other kind): the offer rule answers it
                decision = engine.answer(decision, answer_by_rule(decision, engine))
            elif len(decision.candidates) == 1 and not decision.may_stop:
                decision = engine.answer(decision, decision.candidates[0])  # one candidate, must serve: no choice
            else:
                break
        if decision is None:
            self._done = True
            self.pick = None
            self._observer.clear()
            self._mask[:] = False
        else:
            self.pick = decision
            k = self._observer.observe(decision)
            mask = self._mask
            mask[:] = False
            mask[:k] = True
            mask[self.stop_action] = decision.may_stop
        return self._reward()

    def _reward(self) -> float:
        if self.reward_kind == RELATIVE_JCT:
            return self._relative_reward()
        engine = self.engine
        n = engine.n
        if self.reward_kind == "jct":
            total = engine.in_system_area_s / n
        else:
            if self.makespan_credit == "bound":
                span = self.makespan_bound_s() - engine.first_arrival_s - self._span0
            else:
                span = engine.now_s - engine.first_arrival_s
            if self.reward_kind == "makespan":
                total = span
            else:
                total = engine.in_system_area_s / n + self.makespan_weight * span
        delta = total - self._reported
        self._reported = total
        return -delta / self._reward_scale_s

    def _makespan_so_far_s(self) -> float:
        """The ``"relative-jct"`` reward's makespan so far: with ``makespan_credit="bound"``
        the makespan bound (:meth:`makespan_bound_s`) since the first arrival, so a pick that
        delays the job that will set the makespan is charged when it does so; with
        ``"elapsed"`` the time since the first arrival."""
        if self.makespan_credit == "bound":
            return self.makespan_bound_s() - self.engine.first_arrival_s
        return super()._makespan_so_far_s()

    def makespan_bound_s(self) -> float:
        """The time the last job known now would finish if nothing changed: the latest end of
        a running job at its current speed, and for each waiting job now + its remaining ideal
        time / the speed of its best tier (the latency model's factor for its most
        consolidated placement, see ``sensitivity="oracle"``). When every job has finished it
        is the last completion time, so crediting the makespan as this bound moves sums to the
        makespan; unlike elapsed time, it moves when a decision delays, preempts or spreads
        the job that sets the makespan. (It uses speeds the agent may not observe: it is part
        of the reward, not of the observation.)"""
        e = self.engine
        now = e.now_s
        if e.cluster.compiled:
            return float(kernels.makespan_bound(now, e.running_jobs(), e.waiting_jobs(), e._jobf, self._best_speed))
        bound = now
        if e.n_running:
            bound = max(bound, float(np.max(e.finish_s[e.running_jobs()])))
        if e.n_waiting:
            w = e.waiting_jobs()
            rest = (e.total_iterations[w] - e.done_iters[w]) * e.iter_time_s[w] / self._best_speed[w]
            bound = max(bound, now + float(np.max(rest)))
        return bound

    def _info(self, invalid: bool) -> dict:
        info = {
            "action_mask": self.action_masks(),
            "invalid_action": invalid,
            "time_s": float(self.engine.now_s),
            "beyond_window": self._observer.beyond,
        }
        if self.pick is not None:
            info["candidates"] = len(self.pick.candidates)
        return info

    def _observation(self) -> dict:
        return {key: value.copy() for key, value in self._observer.obs.items()}

    # --- the guards (guard_leases, guard_waiting) ------------------------------------------

    def _guarded(self, engine: Engine, jobs: np.ndarray) -> np.ndarray:
        """``guard_leases``: the lease-expired ``jobs`` whose remaining estimate (job feature 9)
        is at least that share of the largest of any unfinished job (``estimate_share``)."""
        estimate = ProtectedRemainingPolicy.remaining_estimate_s(engine, jobs)
        return estimate >= self.guard_leases * self.largest_estimate_s()

    def _guarded_pick(self, engine: Engine, candidates: list[int]) -> int | None:
        """``guard_waiting``: of the candidates whose remaining estimate is at least
        ``guard_leases`` of the largest (``estimate_share``), the one with the longest (ties: the
        first in the offer order); None when no candidate is protected."""
        estimate = ProtectedRemainingPolicy.remaining_estimate_s(engine, np.fromiter(candidates, dtype=np.int64))
        at = int(np.argmax(estimate))
        if estimate[at] < self.guard_leases * self.largest_estimate_s():
            return None
        return candidates[at]

    def largest_estimate_s(self) -> float:
        """The largest remaining estimate (job feature 9, in seconds) of any unfinished job,
        running or waiting; 0 when none is left (:meth:`QueueObservation.largest_estimate_s
        <dallygym.envs.queue_obs.QueueObservation.largest_estimate_s>`, computed once per engine
        state)."""
        return self._observer.largest_estimate_s()
