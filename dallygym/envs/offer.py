"""``Dally-v0``: delay scheduling as a Gymnasium environment, one resource offer per step.

A thin adapter over the engine's decision points (:meth:`dallygym.sim.engine.Engine.next_decision`):
there is no second simulator here. What it shares with ``DallyQueue-v0`` is in
:class:`~dallygym.envs.base.EnvBase`; its observation is built by
:class:`~dallygym.envs.offer_obs.OfferObservation`.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from ..sim.cluster import Tier
from ..sim.engine import Engine, Offer
from ..sim.latency import LatencyModel
from ..sim.policies import Policy, make_policy
from .base import (  # noqa: F401  (the shared names are dallygym.envs.offer's too)
    LONG_LEASES,
    MAKESPAN_PENALTY,
    RELATIVE_JCT,
    RESET_OPTIONS,
    SENSITIVITY_MODES,
    EnvBase,
    GeneratedTraces,
    InvalidActionWarning,
    ReferenceRun,
    ResetNeeded,
    TraceSource,
    action_index,
    check_reset_options,
    warn_invalid_action,
)
from .offer_obs import _OFFERED, OBS_DIM, OBS_FEATURES, OfferObservation  # noqa: F401  (dallygym.envs.offer's too)

#: Action ids: 0 waits (always valid); 1, 2, 3 accept at the machine, rack, network tier.
WAIT = 0
ACTION_TIERS = (Tier.MACHINE, Tier.RACK, Tier.NETWORK)
REWARDS = ("jct", "makespan", "comm", RELATIVE_JCT)
#: Action masks by offered tiers (wait is always valid), copied out on each use.
_MASKS = {tiers: np.array((True, *offered)) for tiers, offered in _OFFERED.items()}


class DallyEnv(EnvBase):
    """Delay scheduling of distributed deep-learning jobs on a hierarchical GPU cluster.

    ## Description

    A trace of training jobs (each a gang of GPUs, a model, iterations) is replayed on a
    cluster of racks x machines x GPUs by the dallygym engine. Waiting jobs are offered free
    GPUs in the priority order of Dally's Nw_sens rule (paper §IV-B1); an offer says at which
    network tiers the job's gang fits right now. Offers at the best tier the job could ever
    get are accepted automatically, exactly as the paper's Algorithm 1 does; every other offer
    -- where waiting for a better tier is a real choice -- is one step of this environment. The
    agent decides: accept at an offered tier, or wait. This is the decision Dally's delay
    timers make (Algorithm 1, lines 10 and 18).

    At a round boundary a running job whose lease expired may get an offer too (the engine's
    ``renewal`` mode, SPEC §4): under ``"upgrade"`` (default) a job below its best tier is
    offered the strictly better tiers free for it (idle GPUs and its own); accepting moves it
    (restart overhead), waiting keeps its GPUs. Feature 31 tells such offers apart; one at the
    job's best possible tier is accepted automatically, like any other. Under ``"rebid"`` every
    lease-expired job bids again and waiting gives its GPUs up.

    ## Action Space

    ``Discrete(4)``: 0 = wait (reject the offer; always valid), 1 = accept on one machine,
    2 = accept on one rack, 3 = accept anywhere on the network. An action is an integer: a
    Python ``int``, a numpy integer scalar or a 0-d numpy integer array. Nothing else is
    converted: ``bool``, floats (even ``1.0``), strings, bytes, ``None``, lists and 1-d arrays
    are not actions.

    :meth:`action_masks` (and ``info["action_mask"]``) gives the valid ones. Through wrappers
    (``gym.make``'s own, ``NormalizeObservation``, ``Monitor``, ...) reach it the Gymnasium 1.x
    way, ``env.get_wrapper_attr("action_masks")()``, which is what sb3-contrib's MaskablePPO
    and ``get_action_masks`` call (also through ``DummyVecEnv`` and ``SubprocVecEnv``);
    ``gymnasium.vector`` environments give all masks with ``envs.call("action_masks")``.

    An invalid action -- not an integer, outside 0..3, or a tier not offered -- is treated
    as wait and flagged in ``info["invalid_action"]``, and the first one of each environment
    instance issues an :class:`InvalidActionWarning` (a ``UserWarning``; filter it by that
    category); with ``strict=True`` it raises a ``ValueError`` naming the action instead.
    Observations, rewards and infos are the same as for wait.

    ## Observation Space

    ``Box(0, 1, (32,), float32)`` (values stay in [0, 1]). Times ``t`` are shown as
    ``log1p(t / lease_s) / log1p(10000)``. In order:

    | # | feature | meaning |
    |---|---|---|
    | 0 | job_gpus | log2(1 + GPUs) / log2(1 + cluster GPUs) |
    | 1–3 | job_best_machine, job_best_rack, job_best_network | one-hot: the best tier this job can ever have |
    | 4 | job_starvation | time since arrival or since it last lost its GPUs |
    | 5 | job_nw_sens | Nw_sens = ideal time of completed work / time run (0 if never ran) |
    | 6 | job_work_done | completed iterations / total iterations |
    | 7 | job_attained_service | GPUs x time run (GPU-seconds, shown as a time / cluster GPUs) |
    | 8 | job_preemptions | min(preemptions, 20) / 20 |
    | 9 | job_remaining_ideal | remaining ideal run time (iterations left x iter_time_s) |
    | 10–12 | offer_machine, offer_rack, offer_network | 1 if the gang fits at that tier now |
    | 13–15 | speed_machine, speed_rack, speed_network | speed factor at that tier; see ``sensitivity`` |
    | 16–17 | timer_machine, timer_rack | the priority policy's delay timers T_Mc, T_Rk for this GPU demand |
    | 18–19 | past_timer_machine, past_timer_rack | 1 if starvation >= T_Mc (resp. T_Rk) |
    | 20 | free_gpus | free GPUs / cluster GPUs |
    | 21 | machines_that_fit | machines with room for the gang / machines |
    | 22 | racks_that_fit | racks with room for the gang / racks |
    | 23 | max_free_machine | most free GPUs on one machine / GPUs per machine |
    | 24 | max_free_rack | most free GPUs in one rack / GPUs per rack |
    | 25 | queue_jobs | log1p(waiting jobs) / log1p(1000) |
    | 26 | queue_gpu_demand | min(waiting GPU demand / cluster GPUs, 10) / 10 |
    | 27 | running_jobs | log1p(running jobs) / log1p(1000) |
    | 28 | jobs_remaining | unfinished jobs / jobs in the trace |
    | 29 | time_elapsed | time since the first arrival |
    | 30 | time_in_round | position in the current lease, in [0, 1) |
    | 31 | job_current_tier | 0 for a waiting job; for a renewal offer, the tier it holds |

    The timers of features 16–17 are Dally's auto-tuned ones by default; 0 if the policy has
    none; an infinite timer shows as 1. A renewal offer (feature 31) is an offer to a running
    job whose lease expired; the tier it holds shows as 1/3 machine, 2/3 rack, 1 network.

    Network sensitivity (``sensitivity``) decides features 13–15. ``"hidden"`` (default; the
    paper's constraint that the scheduler does not know the model): all 0. ``"observed"``: the
    speed factor this job experienced the last time it ran at that tier (0 if it never did).
    ``"oracle"``: the latency model's speed factor of the placement the engine would make at
    each offered tier (0 where not offered).

    ## Rewards

    ``"relative-jct"`` (default): the episode's improvement over a reference run of the same
    trace. At reset the trace is run natively under the ``priority`` policy (auto-tuned Dally
    by default), with the episode's engine seed; the run is kept for the last few traces, so a
    fixed trace is run once. Each step pays

        −[(A(t) − A(t')) − (R(t) − R(t'))] / U_jct − penalty x [X(t) − X(t')] / U_span,

    where t' and t are the previous and the current decision, A(t) and R(t) the job-seconds
    spent in the system up to t by the agent's run and by the reference run,
    X(t) = max(0, t − first arrival − reference makespan), and ``penalty`` is
    ``makespan_penalty`` (default 3). The units are percent of the reference: U_jct = the
    reference's total JCT / 100, U_span = its makespan / 100. The **return is
    −100 x (agent's total JCT − reference's) / reference's total JCT − makespan_penalty x 100 x
    max(0, makespan − reference makespan) / reference makespan**: +30 means a mean JCT 30 %
    below the reference's, within its makespan; the makespan is a constraint (a longer one is
    charged, a shorter one earns nothing). Answering every offer as the reference policy does
    gets 0 at every step. The episode ends at the last decision: the rest of the run is then
    determined and is simulated to the end within that step, which pays the remaining
    difference (and the makespan excess) -- a part fixed by the earlier actions, not a sum every
    policy pays. ``makespan_reference`` (a policy name, default None) moves the makespan limit:
    the limit and U_span are then that policy's native run's makespan of the same trace (one
    native run more per reset), and the return's makespan term reads max(0, makespan − that
    makespan) / that makespan. Measured on ``gen:batch-500`` draws at 2 and 8 racks: "always wait" (action
    0) scores about +10 on average (0 to +35 by draw), random answers about −25 to −30 (down
    to −250 where they stretch the makespan). With ``reward_scale_s`` given, the units are
    seconds instead: U_jct = jobs x ``reward_scale_s`` (so the JCT part is the mean-JCT
    excess / ``reward_scale_s``) and U_span = ``reward_scale_s``. The reference run is :attr:`reference_run` (a
    :class:`ReferenceRun`; None for the other rewards). A reset costs one native run more
    (tenths of a second at 8 racks on batch-500).

    ``"jct"``: minus the job-seconds spent in the system (arrived, unfinished) since the
    previous decision, divided by ``reward_scale_s``; the episode return is −(sum of all JCTs)
    / ``reward_scale_s`` (Decima's reward). ``"makespan"``: minus the time elapsed since the
    previous decision / ``reward_scale_s``; the return is −makespan / ``reward_scale_s``.
    ``"comm"``: minus the exposed communication time (sum over running jobs of (1 − speed
    factor) x time) since the previous decision / ``reward_scale_s``; the return is −(total
    exposed communication time) / ``reward_scale_s``. For these three the default scale is
    ``lease_s`` x (jobs in the trace), so the ``"jct"`` return is −(mean JCT in leases). Most
    of their return is set by the trace alone (the jobs' own run times), which no answer
    changes, so compare them on the same trace.

    ## Starting State

    :meth:`reset` picks a trace (the fixed one, a fresh draw from a generator, or the next of a
    list), starts the engine and runs it to the first offer that is a real choice. If no offer
    of the whole episode is a real choice, the episode ends inside ``reset``: the observation
    is all zeros, only "wait" is valid, and the first ``step`` returns ``terminated=True`` with
    the episode's reward. ``options`` takes no keys yet: ``None`` or ``{}``; anything else
    raises (a ``TypeError`` for a non-dict, a ``ValueError`` naming unknown keys).

    ## Episode End

    ``terminated`` when every job has finished; the final ``info["summary"]`` holds the run's
    summary metrics (the keys of ``dallygym simulate --format json``). ``truncated`` only
    through ``max_episode_steps`` (a ``TimeLimit`` wrapper from ``gym.make``). Under
    ``"relative-jct"`` the final ``info`` also gives ``makespan_limit_s`` (the makespan the
    reward charges beyond) and ``makespan_excess_pct`` (100 x (makespan − limit) / limit).
    :meth:`set_makespan_penalty` changes the penalty from the next episode on (for a training
    loop that learns it as a Lagrange multiplier: ``dallygym train --makespan-dual``).

    ## Arguments

    ``gym.make("Dally-v0", racks=8, machines_per_rack=8, gpus_per_machine=8,
    trace="batch-500", priority="dally", latency="dally-paper", lease_s=3600.0,
    restart_overhead_s=0.0, renewal="upgrade", reward="relative-jct", reward_scale_s=None,
    makespan_penalty=3.0, sensitivity="hidden", strict=False, render_mode=None, profile=None,
    makespan_reference=None, contention="none", oversubscription=1.0, link_load=False)``

    * ``trace``: a shipped trace name or CSV path; a DataFrame; a generator name prefixed with
      ``"gen:"`` (e.g. ``"gen:batch-500"``), or any callable ``rng -> DataFrame``, to draw a
      fresh seeded trace at each reset (training); or a list of those, cycled in order at each
      reset (held-out evaluation).
      The registered ids draw a fresh trace per reset (``Dally-v0``: ``"gen:batch-500"``,
      ``DallySmall-v0``: ``"gen:small"``), so ``reset(seed=s)`` differs with ``s``;
      ``trace="batch-500"`` replays the paper's fixed trace.
    * ``priority``: the policy whose priority order (and hooks) the engine uses; default
      ``"dally"`` (Nw_sens, and the auto-tuner whose timers are observed). Its native run is
      the ``"relative-jct"`` reward's reference.
    * ``reward``, ``reward_scale_s``, ``makespan_penalty``, ``makespan_reference``: see Rewards.
    * ``contention``, ``oversubscription``: jobs sharing machine links and rack uplinks
      (:mod:`dallygym.sim.contention`; ``"none"`` by default), as ``dallygym simulate
      --contention``. ``link_load=True`` (needs a contention model) appends to the observation
      each shared link's load: what the running jobs ask of it over its capacity, shown as
      min(load, 2) / 2 (0.5: asked exactly its capacity), machine links first, then the racks'
      uplinks; the observation then has ``32 + machines + racks`` features, so its size follows
      the cluster.
    * The rest as in ``dallygym simulate``.

    The baseline to beat is the constant policy "always wait" (action 0): it equals
    ``dally-consolidated`` and does better than auto-tuned Dally on mean JCT. What to expect
    from learning here: PPO with the default reward, from scratch over 2-16 racks for 40
    minutes (``agents/runs/ppo-relative-s0``), reaches a mean JCT of 0.97 x Dally's on the
    held-out grid (geometric mean over 31 cells; its initial policy 1.13 x), short of always
    wait's 0.87 x: the offer answers move mean JCT by about a tenth. The order in which jobs get
    GPUs, which decides JCT far more (the best safe heuristics reach 0.3 x), is the agent's
    question in ``DallyQueue-v0``.

    ## Version History

    * v0: initial version. Before the engine's lease-renewal offers (SPEC §4) it had 31
      features and running jobs never got offers; agents saved then need retraining. The
      default reward was ``"jct"`` before ``"relative-jct"`` was added; ``reward="jct"``
      gives it back unchanged. ``contention``, ``oversubscription`` and ``link_load`` (defaults:
      no contention, the observation unchanged) added with the contention model.
    """

    def __init__(
        self,
        racks: int = 8,
        machines_per_rack: int = 8,
        gpus_per_machine: int = 8,
        trace: TraceSource = "batch-500",
        priority: str | Policy = "dally",
        latency: str | LatencyModel = "dally-paper",
        lease_s: float = 3600.0,
        restart_overhead_s: float = 0.0,
        renewal: str | None = None,
        reward: str = RELATIVE_JCT,
        reward_scale_s: float | None = None,
        makespan_penalty: float = MAKESPAN_PENALTY,
        sensitivity: str = "hidden",
        strict: bool = False,
        render_mode: str | None = None,
        profile: str | None = None,
        makespan_reference: str | None = None,
        contention: str = "none",
        oversubscription: float = 1.0,
        link_load: bool = False,
    ) -> None:
        self._init_kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self.check_options(**self._init_kwargs)
        super().__init__(**{name: value for name, value in self._init_kwargs.items() if name in EnvBase.OPTIONS})
        self.reward_kind = reward
        self.action_space = spaces.Discrete(4)
        self._observer = OfferObservation(self.spec_cluster, sensitivity, link_load)
        self.observation_space = self._observer.space

    @classmethod
    def _check_own_options(cls, options: dict[str, object]) -> None:
        reward, priority = options["reward"], options["priority"]
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; choose one of {', '.join(REWARDS)}")
        if not isinstance(priority, (str, Policy)):
            raise TypeError(f"priority must be a policy name or a Policy, got {type(priority).__name__} {priority!r}")
        if isinstance(priority, str):
            make_policy(priority)  # fail now on an unknown name, not at reset

    # --- Gymnasium API ---------------------------------------------------------------------

    def _start_episode(self):
        """Start the episode whose trace and engine seed the generator draws next; return the
        first observation and info."""
        trace, config = self._episode_trace_and_config()
        self.engine = Engine(trace, self.spec_cluster, self.policy, self.latency, config)
        self._scale = self.reward_scale_s or self.config.lease_s * self.engine.n
        self._start_reference(trace, config)
        self._observer.start(self.engine, trace, getattr(self.policy, "timers", None))
        self._run_to_first_decision()
        self._terminal_pending = self._done
        return self._observation(), self._info(invalid=False)

    def _restore_views(self) -> None:
        observer = self._observer
        if observer.head is not None:  # (views of the engine's arrays: of the copy's own)
            observer.head = observer.views()

    def _observation(self) -> np.ndarray:
        return self._observer.obs.copy()

    def step(self, action):
        offer = self.offer
        if offer is None:  # no offer is open: before reset, or the episode has ended
            return self._step_without_decision()
        index = action if action.__class__ is int else action_index(action)  # (a call less, most steps)
        if index == WAIT:
            answer = None
            invalid = False
        else:
            answer, invalid = self._answer(action, index, offer)
        self.steps += 1
        reward = self._advance(answer)
        offer = self.offer
        if offer is None:  # the episode ended with this step
            info = self._end_info(self._info(invalid))
            return self._observer.obs.copy(), float(reward), True, False, info
        # (_info's dict for an open offer, built here: this is the return of nearly every step)
        return (
            self._observer.obs.copy(),
            float(reward),
            False,
            False,
            {
                "action_mask": _MASKS[offer.tiers].copy(),
                "invalid_action": invalid,
                "time_s": float(self.engine.now_s),
                "job_id": offer.job_id,
                "num_gpus": offer.num_gpus,
            },
        )

    def _answer(self, action, index: int | None, offer: Offer) -> tuple[Tier | None, bool]:
        """The engine's answer to ``offer`` for ``action`` (``index``: :func:`action_index`
        of it, not WAIT), and whether the action was invalid (then the answer is to wait;
        with ``strict``, an error instead)."""
        if index is None or not 0 < index < 4:
            if self.strict:
                what = "not an integer" if index is None else "outside 0..3"
                raise ValueError(
                    f"action {action!r} ({type(action).__name__}) is {what}: "
                    f"Discrete(4) takes the integers 0 (wait) to 3"
                )
            if not self._warned_invalid:
                warn_invalid_action(self, action, "0 (wait)", stacklevel=3)  # (the caller of step)
            return None, True
        tier = ACTION_TIERS[index - 1]
        if tier in offer.tiers:
            return tier, False
        if self.strict:
            raise ValueError(f"action {index} ({tier.label}) is not offered: valid {self.action_masks().tolist()}")
        if not self._warned_invalid:
            warn_invalid_action(self, action, "0 (wait)", stacklevel=3)  # (the caller of step)
        return None, True

    def action_masks(self) -> np.ndarray:
        """Valid actions now: wait always; accept at each tier the current offer has."""
        tiers = () if self._done or self.offer is None else self.offer.tiers
        return _MASKS[tiers].copy()

    # --- the adapter -----------------------------------------------------------------------

    def _advance(self, answer, first: bool = False) -> float:
        """Send the answer (unless first) and run to the next real choice; return the reward."""
        e = self.engine
        # (best-possible: the engine accepts itself the offers the loop below accepts anyway)
        offer = e.next_decision("best-possible") if first else e.answer(self.offer, answer)
        while offer is not None and offer.best_tier == offer.best_possible_tier:  # not a choice (Offer.is_choice)
            offer = e.answer(offer, offer.best_tier)  # the best tier it can ever have: accept (Alg. 1)
        if offer is None:
            self._done = True
            self.offer = None
            self._observer.clear()
        else:
            self.offer = offer
            self._observer.observe(offer)
        return self._reward()

    def _reward(self) -> float:
        engine = self.engine
        if self.reward_kind == RELATIVE_JCT:
            return self._relative_reward()
        if self.reward_kind == "jct":
            total = engine.in_system_area_s
        elif self.reward_kind == "makespan":
            total = engine.now_s - engine.first_arrival_s
        else:
            total = engine.comm_area_s
        delta = total - self._reported
        self._reported = total
        return -delta / self._scale

    def _info(self, invalid: bool) -> dict:
        offer = self.offer
        if offer is None:
            return {"action_mask": self.action_masks(), "invalid_action": invalid, "time_s": float(self.engine.now_s)}
        return {
            "action_mask": _MASKS[offer.tiers].copy(),
            "invalid_action": invalid,
            "time_s": float(self.engine.now_s),
            "job_id": offer.job_id,
            "num_gpus": offer.num_gpus,
        }
