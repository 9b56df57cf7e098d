"""``Dally-v0``: delay scheduling as a Gymnasium environment, one resource offer per step.

A thin adapter over the engine's decision points (:meth:`dallygym.engine.Engine.decisions`):
there is no second simulator here.
"""

from __future__ import annotations

import copy
import itertools
import math
import numbers
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
from gymnasium import spaces

from . import kernels
from .cluster import ClusterSpec, Tier
from .engine import Engine, EngineConfig, Offer, TraceArrays, run_policy
from .latency import LatencyModel, get_latency_model
from .metrics import summarize
from .policies import Policy, make_policy
from .trace import check_trace_fits, generate_trace, load_trace

#: Action ids: 0 waits (always valid); 1, 2, 3 accept at the machine, rack, network tier.
WAIT = 0
ACTION_TIERS = (Tier.MACHINE, Tier.RACK, Tier.NETWORK)
#: The reward relative to a reference run of the same trace (see ReferenceRun).
RELATIVE_JCT = "relative-jct"
REWARDS = ("jct", "makespan", "comm", RELATIVE_JCT)
#: Default weight of the makespan excess in the "relative-jct" reward: a makespan 1 % longer
#: than the reference's costs as much as a total JCT 3 % longer. Steeper than an even trade,
#: so exceeding the reference's makespan does not pay for itself, while the returns of
#: ordinary policies stay within about +-100 (a makespan 30 % over costs 90).
MAKESPAN_PENALTY = 3.0
SENSITIVITY_MODES = ("hidden", "observed", "oracle")

#: Names of the observation features, in order (see the DallyEnv docstring for each).
OBS_FEATURES: tuple[str, ...] = (
    "job_gpus",
    "job_best_machine",
    "job_best_rack",
    "job_best_network",
    "job_starvation",
    "job_nw_sens",
    "job_work_done",
    "job_attained_service",
    "job_preemptions",
    "job_remaining_ideal",
    "offer_machine",
    "offer_rack",
    "offer_network",
    "speed_machine",
    "speed_rack",
    "speed_network",
    "timer_machine",
    "timer_rack",
    "past_timer_machine",
    "past_timer_rack",
    "free_gpus",
    "machines_that_fit",
    "racks_that_fit",
    "max_free_machine",
    "max_free_rack",
    "queue_jobs",
    "queue_gpu_demand",
    "running_jobs",
    "jobs_remaining",
    "time_elapsed",
    "time_in_round",
    "job_current_tier",
)
OBS_DIM = len(OBS_FEATURES)

#: Times are shown as log1p(t / lease) / log1p(LONG_LEASES): 0 at 0, 1 at 10,000 leases.
LONG_LEASES = 10_000.0
_LOG_LONG = math.log1p(LONG_LEASES)
_LOG_1000 = math.log1p(1000)
_NO_SPEEDS = (0.0, 0.0, 0.0)
_NO_TIMERS = (0.0, 0.0)

#: Features 10-12 (which tiers are offered) by offered tiers.
_OFFERED = {
    tiers: (Tier.MACHINE in tiers, Tier.RACK in tiers, Tier.NETWORK in tiers)
    for tiers in [(), *((t,) for t in Tier), *itertools.combinations(Tier, 2), tuple(Tier)]
}
#: Action masks by offered tiers (wait is always valid), copied out on each use.
_MASKS = {tiers: np.array((True, *offered)) for tiers, offered in _OFFERED.items()}
#: The offered tiers as kernels.offer_observation takes them: bit t for tier t.
_OFFERED_BITS = {tiers: sum(1 << int(t) for t in tiers) for tiers in _OFFERED}

TraceSource = str | Path | pd.DataFrame | Callable[[np.random.Generator], pd.DataFrame] | Sequence


class ResetNeeded(gym.error.ResetNeeded, RuntimeError):
    """``step`` or ``render`` with no episode under way (before ``reset``, or after the episode
    ended): both Gymnasium's error for it and a ``RuntimeError``."""


class InvalidActionWarning(UserWarning):
    """An action the action mask ruled out was taken as the environment's fallback (``Dally-v0``:
    wait; ``DallyQueue-v0``: action 0), as documented. Issued once per environment instance;
    filter it with ``warnings.filterwarnings("ignore", category=InvalidActionWarning)``."""


def warn_invalid_action(env: gym.Env, action, fallback: str, stacklevel: int) -> None:
    """Warn, once for ``env``, that ``action`` was invalid and became ``fallback``.

    Agents that ignore the mask (plain PPO, a random policy) send many invalid actions; the
    step goes on as documented, but silently it looks like learning that does nothing."""
    env._warned_invalid = True
    name = env.spec.id if env.spec is not None else type(env).__name__
    valid = np.flatnonzero(env.action_masks()).tolist()
    warnings.warn(
        f"{name}: action {action!r} is invalid under the action mask (valid now: {valid}) and was taken as "
        f"{fallback}; info['invalid_action'] flags each such step. Masked agents avoid them: sb3-contrib's "
        f"MaskablePPO, or sampling from env.action_masks(); strict=True raises instead. "
        f"(Warned once per environment.)",
        InvalidActionWarning,
        stacklevel=stacklevel + 1,
    )


def _check_penalty(penalty) -> None:
    """Raise unless ``penalty`` is a finite non-negative number (a ``makespan_penalty``)."""
    _check_number("makespan_penalty", penalty)
    if not (penalty >= 0 and math.isfinite(penalty)):
        raise ValueError(f"makespan_penalty must be a non-negative number, got {penalty!r}")


def _check_number(name: str, value, *, allow_none: bool = False) -> None:
    """Raise a TypeError unless ``value`` is a real number (not a bool), or None if allowed."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a number{' or None' if allow_none else ''}, got {type(value).__name__} {value!r}"
        )


#: Keys ``reset(options=...)`` understands (none yet: an empty dict or None).
RESET_OPTIONS: tuple[str, ...] = ()


def check_reset_options(options) -> None:
    """Raise unless ``options`` is None or a dict of known keys (:data:`RESET_OPTIONS`)."""
    if options is not None:
        if not isinstance(options, Mapping):
            raise TypeError(f"reset(options=...) takes a dict or None, got {type(options).__name__} {options!r}")
        unknown = sorted(map(repr, set(options) - set(RESET_OPTIONS)))
        if unknown:
            known = ", ".join(RESET_OPTIONS) or "none"
            raise ValueError(f"reset(options=...): unknown option(s) {', '.join(unknown)}; known: {known}")


def action_index(action) -> int | None:
    """``action`` as a Python int if it is an integer action, else None.

    Integers are Python ``int``, numpy integer scalars and 0-d numpy integer arrays (what
    stable-baselines3 passes). Not integers, and never converted: ``bool``, floats (even
    ``1.0``), strings, bytes, ``None``, lists and arrays with any dimension.
    """
    if type(action) is int:  # the common case first
        return action
    if isinstance(action, np.ndarray):
        if action.ndim != 0:
            return None
        action = action[()]
    if isinstance(action, (bool, np.bool_)):
        return None
    if isinstance(action, (int, np.integer)):
        return int(action)
    return None


class ReferenceRun:
    """A native run of a trace under a reference policy, as the ``"relative-jct"`` reward
    needs it: its job-seconds-in-system curve, total and makespan.

    The curve is exact: with arrival times ``a_j`` and completion times ``f_j``, the
    job-seconds in the system up to time ``t`` are sum_j max(0, min(t, f_j) - a_j), which
    :meth:`area_until` evaluates from sorted arrivals and completions and their prefix sums.
    """

    __slots__ = ("area_s", "makespan_s", "first_arrival_s", "n", "_arrivals", "_arrival_sums", "_ends", "_end_sums")

    def __init__(self, engine: Engine) -> None:
        """From an engine that has run to the end."""
        arrivals = np.sort(engine.arrival_s)
        ends = np.sort(engine.end_s)
        self.n = int(engine.n)
        #: Job-seconds in the system over the whole run (the sum of JCTs), as the engine accrued it.
        self.area_s = float(engine.in_system_area_s)
        self.first_arrival_s = float(engine.first_arrival_s)
        #: Last completion - first arrival.
        self.makespan_s = float(ends[-1]) - self.first_arrival_s
        self._arrivals = arrivals
        self._arrival_sums = np.concatenate(([0.0], np.cumsum(arrivals)))
        self._ends = ends
        self._end_sums = np.concatenate(([0.0], np.cumsum(ends)))

    @classmethod
    def of(
        cls, trace, spec: ClusterSpec, policy: str | Policy, latency: LatencyModel, config: EngineConfig
    ) -> ReferenceRun:
        """Run ``trace`` natively under ``policy`` (a name, or an instance, which is copied so
        that the caller's is left alone) and record it."""
        policy = make_policy(policy) if isinstance(policy, str) else copy.deepcopy(policy)
        return cls(run_policy(Engine(trace, spec, policy, latency, config)))

    def area_until(self, t: float) -> float:
        """Job-seconds spent in the system up to time ``t``; the whole run's from its end on."""
        arrived = int(np.searchsorted(self._arrivals, t, side="right"))
        ended = int(np.searchsorted(self._ends, t, side="right"))
        if ended == self.n:
            return self.area_s
        return (arrived * t - float(self._arrival_sums[arrived])) - (ended * t - float(self._end_sums[ended]))


class GeneratedTraces:
    """A named generator as an environment's trace source (``trace="gen:NAME"``): each reset
    draws a trace with a seed taken from the environment's random generator.

    Generated traces are valid by construction (the generator checks what a draw can break),
    so a reset does not validate them again. The last few are kept: an evaluation that replays
    the same reset seeds gets the same traces without drawing them again.
    """

    keep = 16  #: traces kept, the most recently used

    def __init__(self, name: str) -> None:
        generate_trace(name, seed=0)  # fail now on an unknown generator
        self.name = name
        self._recent: OrderedDict[int, pd.DataFrame] = OrderedDict()

    def __call__(self, rng: np.random.Generator) -> pd.DataFrame:
        seed = int(rng.integers(2**31 - 1))
        frame = self._recent.get(seed)
        if frame is None:
            frame = self._recent[seed] = generate_trace(self.name, seed=seed)
            if len(self._recent) > self.keep:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(seed)
        return frame

    def __deepcopy__(self, memo) -> GeneratedTraces:
        return self  # a pure function of the seed: copies may share what it keeps

    def __getstate__(self) -> dict:
        return {"name": self.name}  # (what it keeps is drawn again on demand)

    def __setstate__(self, state: dict) -> None:
        self.name = state["name"]
        self._recent = OrderedDict()


class DallyEnv(gym.Env):
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
    makespan_reference=None)``

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
      gives it back unchanged.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

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
    ) -> None:
        options = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        if not hasattr(self, "_init_kwargs"):  # a subclass may have recorded its own
            self._init_kwargs = options
        self._check_options(**options)
        self.spec_cluster = ClusterSpec(racks, machines_per_rack, gpus_per_machine)
        from .profiles import make_profile_policy, profile_renewal

        renewal = profile_renewal(profile, renewal)  # an explicit renewal wins over the profile's
        self.config = EngineConfig(lease_s=lease_s, restart_overhead_s=restart_overhead_s, renewal=renewal)
        self.latency = get_latency_model(latency) if isinstance(latency, str) else latency
        self._priority = priority
        if isinstance(priority, str):
            make_policy(priority)  # fail now on an unknown name, not at reset
        if profile is not None:  # the profile's readings (docs/profiles.md); a Policy instance stands
            self._priority = make_profile_policy(priority, profile)
        self.reward_kind = reward
        self.reward_scale_s = reward_scale_s
        self.makespan_penalty = float(makespan_penalty)
        self._next_makespan_penalty: tuple[float, float] | None = None  # see set_makespan_penalty
        #: What the ``"relative-jct"`` return is divided by: 1, or 1 + ``makespan_penalty`` after
        #: ``set_makespan_penalty(p, normalise=True)``.
        self.relative_divisor = 1.0
        self.makespan_reference = makespan_reference
        #: The reference run of the current episode's trace (reward "relative-jct"), else None.
        self.reference_run: ReferenceRun | None = None
        #: The makespan the "relative-jct" reward charges beyond (the reference run's, or that of
        #: ``makespan_reference``'s native run of the same trace), in seconds.
        self.makespan_limit_s: float | None = None
        self._reference_cache: OrderedDict = OrderedDict()  # see _reference_for
        self.sensitivity = sensitivity
        self.strict = bool(strict)
        self.render_mode = render_mode
        self._warned_invalid = False  # see warn_invalid_action
        self._traces = self._trace_source(trace)
        self._cycle = 0
        self._static_of: TraceArrays | None = None  # the fixed trace whose _job_static is built

        self.action_space = spaces.Discrete(4)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(OBS_DIM,), dtype=np.float32)

        self.engine: Engine | None = None
        self.policy: Policy | None = None
        self.offer: Offer | None = None
        self._done = False
        self._terminal_pending = False
        self._obs = np.zeros(OBS_DIM, dtype=np.float32)
        self._reported = 0.0
        self.steps = 0

    @classmethod
    def _check_options(
        cls,
        *,
        reward,
        sensitivity,
        render_mode,
        reward_scale_s,
        makespan_penalty,
        strict,
        makespan_reference,
        priority,
        latency,
        **unchecked,
    ) -> None:
        """The constructor's keyword arguments, those not checked where they are used checked
        before anything is built (an error naming the option)."""
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; choose one of {', '.join(REWARDS)}")
        if sensitivity not in SENSITIVITY_MODES:
            raise ValueError(f"unknown sensitivity {sensitivity!r}; choose one of {', '.join(SENSITIVITY_MODES)}")
        if render_mode is not None and render_mode not in cls.metadata["render_modes"]:
            raise ValueError(f"unknown render_mode {render_mode!r}; choose one of {cls.metadata['render_modes']}")
        _check_number("reward_scale_s", reward_scale_s, allow_none=True)
        if reward_scale_s is not None and not (reward_scale_s > 0 and math.isfinite(reward_scale_s)):
            raise ValueError(f"reward_scale_s must be a positive number of seconds, got {reward_scale_s!r}")
        _check_penalty(makespan_penalty)
        if not isinstance(strict, (bool, np.bool_)):
            raise TypeError(f"strict must be True or False, got {type(strict).__name__} {strict!r}")
        if makespan_reference is not None:
            if not isinstance(makespan_reference, str):
                raise TypeError(
                    f"makespan_reference must be a policy name or None, "
                    f"got {type(makespan_reference).__name__} {makespan_reference!r}"
                )
            make_policy(makespan_reference)  # fail now on an unknown name, not at reset
        if not isinstance(priority, (str, Policy)):
            raise TypeError(f"priority must be a policy name or a Policy, got {type(priority).__name__} {priority!r}")
        if not isinstance(latency, (str, LatencyModel)):
            raise TypeError(
                f"latency must be a latency model name or a LatencyModel, got {type(latency).__name__} {latency!r}"
            )

    # --- traces --------------------------------------------------------------------------

    def _trace_source(self, trace: TraceSource) -> list:
        """Normalise the trace argument to a list of sources (validated now where possible)."""
        if isinstance(trace, (list, tuple)):
            if not trace:
                raise ValueError("the list of traces is empty")
            return [self._one_source(t) for t in trace]
        return [self._one_source(trace)]

    def _one_source(self, trace):
        if isinstance(trace, str) and trace.startswith("gen:"):
            return GeneratedTraces(trace[4:])
        if callable(trace):
            return trace
        # A fixed trace: validated, and its columns read out for the engine, once for all resets.
        return TraceArrays(load_trace(trace, cluster=self.spec_cluster))

    def _next_trace(self) -> pd.DataFrame | TraceArrays:
        source = self._traces[self._cycle % len(self._traces)]
        self._cycle += 1
        if isinstance(source, GeneratedTraces):
            frame = source(self.np_random)
            check_trace_fits(frame, self.spec_cluster)  # the one check a generated trace can fail here
            return frame
        if callable(source):
            return load_trace(source(self.np_random), cluster=self.spec_cluster)
        return source

    # --- Gymnasium API ---------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        check_reset_options(options)
        super().reset(seed=seed)
        if self._next_makespan_penalty is not None:  # set_makespan_penalty: from this episode on
            self.makespan_penalty, self.relative_divisor = self._next_makespan_penalty
            self._init_kwargs = {**self._init_kwargs, "makespan_penalty": self.makespan_penalty}
            self._next_makespan_penalty = None
        return self._start_episode()

    # --- snapshots: copy.deepcopy and pickle -------------------------------------------------

    #: What a deep copy shares with the original instead of copying: read-only data (the trace
    #: sources, the cluster, the run parameters, the latency model) and caches of values that
    #: depend only on their key (the reference runs).
    _SHARED_ON_COPY = ("_traces", "spec_cluster", "config", "latency", "_reference_cache", "reference_run")

    def __getstate__(self) -> dict:
        """A snapshot: the environment's state as it stands, the engine's run included (plain
        data, :mod:`dallygym.engine.turns`), so a copy continues exactly as the original would, bit for
        bit. Its cost is that of the state (the jobs' tables), whatever the steps taken. Pickled,
        it leaves out the reference runs of past episodes (a cache, made again on demand)."""
        state = self.__dict__.copy()
        state["_reference_cache"] = OrderedDict()
        return state

    def __setstate__(self, state: dict) -> None:
        if not (isinstance(state, Mapping) and isinstance(state.get("_init_kwargs"), Mapping) and "engine" in state):
            raise ValueError(
                f"not a snapshot of {type(self).__name__} (the dict of an environment's state, "
                f"as __getstate__ makes), got {type(state).__name__}"
            )
        self.__dict__.update(state)
        if state.get("_obs_head") is not None:  # (views of the engine's arrays: of the copy's own)
            self._obs_head = self._observation_head()

    def __deepcopy__(self, memo: dict) -> DallyEnv:
        for name in self._SHARED_ON_COPY:
            value = self.__dict__.get(name)
            if value is not None:
                memo[id(value)] = value
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__dict__.copy(), memo))
        return new

    def _start_episode(self):
        """Start the episode whose trace and engine seed the generator draws next; return the
        first observation and info."""
        trace = self._next_trace()
        self.policy = make_policy(self._priority) if isinstance(self._priority, str) else self._priority
        config = EngineConfig(
            lease_s=self.config.lease_s,
            restart_overhead_s=self.config.restart_overhead_s,
            seed=int(self.np_random.integers(2**31 - 1)),
            renewal=self.config.renewal,
        )
        self.engine = Engine(trace, self.spec_cluster, self.policy, self.latency, config)
        n = self.engine.n
        self._scale = self.reward_scale_s or self.config.lease_s * n
        self._start_reference(trace, config)
        self._lease_s = float(self.config.lease_s)
        self._long_s = LONG_LEASES * self._lease_s  # a time this long or longer shows as 1
        self._num_gpus = float(self.spec_cluster.num_gpus)
        # Features 0-3 of each job (its size and best possible tier) never change (nor, for a
        # fixed trace, from one episode to the next).
        if self._static_of is not trace:
            self._job_static = self._static_features()
            self._static_of = trace if isinstance(trace, TraceArrays) else None
        spec = self.spec_cluster
        # kernels.offer_observation's constants (kernels.OC_*), in its order.
        self._obs_consts = np.array(
            [
                self._lease_s,
                self._long_s,
                _LOG_LONG,
                _LOG_1000,
                spec.num_gpus,
                n,
                self.engine.first_arrival_s,
                spec.num_machines,
                spec.racks,
                spec.gpus_per_machine,
                spec.gpus_per_rack,
            ]
        )
        # kernels.offer_observation's arrays, the same objects all episode long.
        c = self.engine.cluster
        self._obs_head = self._observation_head() if c.compiled else None
        self._timers = getattr(self.policy, "timers", None)
        self._done = False
        self._reported = 0.0
        self.steps = 0
        self._advance(None, first=True)
        self._reported = 0.0  # the first step's reward covers the time before the first decision too
        self._terminal_pending = self._done
        return self._obs.copy(), self._info(invalid=False)

    def step(self, action):
        offer = self.offer
        if offer is None:  # no offer is open: before reset, or the episode has ended
            return self._step_without_offer()
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
            return self._obs.copy(), float(reward), True, False, info
        # (_info's dict for an open offer, built here: this is the return of nearly every step)
        return (
            self._obs.copy(),
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

    def _step_without_offer(self):
        """A step with no offer open: an error before reset or after the episode's end, but
        for the first step of an episode that ended inside reset (every offer of it was at
        its best tier), which reports the end and the episode's reward; its action is moot."""
        if self.engine is None:
            raise ResetNeeded("call reset() before step()")
        if not self._terminal_pending:
            raise ResetNeeded("the episode has ended; call reset()")
        self._terminal_pending = False
        self.steps += 1
        info = self._end_info(self._info(invalid=False))
        return self._obs.copy(), float(self._reward()), True, False, info

    def action_masks(self) -> np.ndarray:
        """Valid actions now: wait always; accept at each tier the current offer has."""
        tiers = () if self._done or self.offer is None else self.offer.tiers
        return _MASKS[tiers].copy()

    def render(self):
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode")
            return None
        from .render import render_ansi, render_rgb

        if self.engine is None:
            raise ResetNeeded("call reset() before render()")
        if self.render_mode == "ansi":
            return render_ansi(self.engine, self.offer)
        return render_rgb(self.engine, self.offer)

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
            self._obs[:] = 0.0
        else:
            self.offer = offer
            self._observe(offer)
        return self._reward()

    # --- the "relative-jct" reward ---------------------------------------------------------

    def _start_reference(self, trace, config: EngineConfig) -> None:
        """At reset: the reference run of this episode's trace and the reward's two scales
        (job-seconds per unit of return, makespan seconds per unit), for ``"relative-jct"``."""
        if self.reward_kind != RELATIVE_JCT:
            self.reference_run = None
            return
        ref = self.reference_run = self._reference_for(trace, config, self._priority)
        self.makespan_limit_s = ref.makespan_s
        if self.makespan_reference is not None:
            self.makespan_limit_s = self._reference_for(trace, config, self.makespan_reference).makespan_s
        if self.reward_scale_s is None:  # percent of the reference's total JCT and of the makespan limit
            self._jct_unit = ref.area_s / 100.0
            self._span_unit = self.makespan_limit_s / 100.0
        else:  # mean-JCT seconds and makespan seconds, per reward_scale_s
            self._jct_unit = ref.n * self.reward_scale_s
            self._span_unit = self.reward_scale_s

    def _reference_for(self, trace, config: EngineConfig, policy: str | Policy) -> ReferenceRun:
        """The native run of ``trace`` under ``policy`` (the environment's ``priority``, the
        offer rule in ``DallyQueue-v0``, or ``makespan_reference``) with ``config`` -- the
        engine seed of the episode, so a policy that draws random numbers draws the same ones.
        Kept for the last few traces and policies (by identity: a fixed trace, or a generated
        one drawn again for the same seed); the seed is part of the key unless the policy is
        one of Dally's, which draws none."""
        from .policies.dally import DallyPolicy

        deterministic = isinstance(make_policy(policy) if isinstance(policy, str) else policy, DallyPolicy)
        key = (id(trace), id(policy) if not isinstance(policy, str) else policy, None if deterministic else config.seed)
        cache = self._reference_cache
        hit = cache.get(key)
        if hit is not None and hit[0] is trace:
            cache.move_to_end(key)
            return hit[1]
        ref = ReferenceRun.of(trace, self.spec_cluster, policy, self.latency, config)
        cache[key] = (trace, ref)  # (holding the trace keeps its id from being reused)
        if len(cache) > 2 * GeneratedTraces.keep:
            cache.popitem(last=False)
        return ref

    def set_makespan_penalty(self, penalty: float, normalise: bool = False) -> None:
        """Set ``makespan_penalty`` from the next :meth:`reset` on: an episode under way keeps the
        penalty it started with, so its return is priced by one penalty throughout (a training
        loop that adapts the penalty as a Lagrange multiplier calls this through
        ``VecEnv.env_method``). With ``normalise`` the ``"relative-jct"`` return is also divided
        by 1 + penalty (:attr:`relative_divisor`): −(JCT part + penalty x makespan part) / (1 +
        penalty), a weighted mean of the two parts whose scale stays that of a percent however
        large the penalty grows (a value target of thousands would swamp a shared network).
        Snapshots taken after that reset carry the new values."""
        _check_penalty(penalty)
        self._next_makespan_penalty = (float(penalty), 1.0 + float(penalty) if normalise else 1.0)

    def _end_info(self, info: dict) -> dict:
        """``info`` of the step that ends an episode, with the run's ``summary`` and, under
        ``"relative-jct"``, ``makespan_limit_s`` (the makespan the reward charges beyond) and
        ``makespan_excess_pct`` (100 x (makespan − limit) / limit; negative when shorter)."""
        info["summary"] = summary = summarize(self.engine)
        if self.reward_kind == RELATIVE_JCT and self.makespan_limit_s > 0:
            info["makespan_limit_s"] = self.makespan_limit_s
            limit = self.makespan_limit_s
            info["makespan_excess_pct"] = 100.0 * (summary["makespan_s"] - limit) / limit
        return info

    def _relative_total(self) -> float:
        """The ``"relative-jct"`` return accrued so far, before its sign: the agent's
        job-seconds in the system minus the reference run's up to the same time, plus
        ``makespan_penalty`` x the time elapsed beyond the reference's makespan, each in its
        unit. Once every job has finished, the agent's and the reference's totals and the
        agent's makespan: the whole return."""
        e = self.engine
        ref = self.reference_run
        if self._done:
            excess_jct = e.in_system_area_s - ref.area_s
            span = float(np.max(e.end_s)) - e.first_arrival_s
        else:
            excess_jct = e.in_system_area_s - ref.area_until(e.now_s)
            span = self._makespan_so_far_s()
        excess_span = span - self.makespan_limit_s
        total = excess_jct / self._jct_unit
        if excess_span > 0:
            total += self.makespan_penalty * excess_span / self._span_unit
        return total / self.relative_divisor

    def _makespan_so_far_s(self) -> float:
        """The makespan the ``"relative-jct"`` reward has charged up to now (before the end):
        the time elapsed since the first arrival. At the end it is the makespan, whatever this
        returns on the way, so the return does not depend on it; only when the excess is paid."""
        return self.engine.now_s - self.engine.first_arrival_s

    def _relative_reward(self) -> float:
        total = self._relative_total()
        delta = total - self._reported
        self._reported = total
        return -delta

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

    def _static_features(self) -> np.ndarray:
        """Features 0-3 of every job of the engine's trace (n x 4): log2(1 + GPUs) / log2(1 +
        cluster GPUs), and its best possible tier one-hot."""
        engine = self.engine
        log_cluster = math.log2(1 + self.spec_cluster.num_gpus)
        demands, index = np.unique(engine.num_gpus, return_inverse=True)
        static = np.empty((engine.n, 4))
        static[:, 0] = np.array([math.log2(1 + g) / log_cluster for g in demands.tolist()])[index]
        static[:, 1:] = engine.best_possible_tier[:, None] == np.arange(3)
        return static

    def _observation_head(self) -> tuple:
        """The arrays :func:`dallygym.kernels.offer_observation` reads and writes: the
        observation buffer and its constants, and the engine's tables and free-GPU counts (views
        of its cluster's buffer: made again for a copy, whose cluster has its own)."""
        c = self.engine.cluster
        return (
            self._obs,
            self._obs_consts,
            self._job_static,
            self.engine._jobf,
            self.engine._jobi,
            c.free_per_machine,
            c.free_per_rack,
        )

    def _observe(self, offer: Offer) -> None:
        """Write the observation of ``offer`` into the environment's buffer: in one compiled
        call (:func:`dallygym.kernels.offer_observation`), or with the kernels off by
        :meth:`_observe_reference`, the readable definition it matches bit for bit."""
        head = self._obs_head  # (None with the kernels off)
        if head is None:
            self._observe_reference(offer)
            return
        e = self.engine
        timers = self._timers
        current = offer.current_tier
        kernels.offer_observation(
            *head,
            offer.job,
            offer.now_s,
            offer.starvation_s,
            *(timers(offer.num_gpus, offer.now_s) if timers is not None else _NO_TIMERS),
            _OFFERED_BITS[offer.tiers],
            -1 if current is None else int(current),
            *(_NO_SPEEDS if self.sensitivity == "hidden" else self._speeds(offer)),
            e.n_waiting,
            e.waiting_gpus,
            e.n_running,
            e.finished,
            e.cluster.free_total,
        )

    def _observe_reference(self, offer: Offer) -> None:
        """The observation of ``offer``, feature by feature: the definition that
        :func:`dallygym.kernels.offer_observation` follows (run with the kernels off)."""
        e = self.engine
        spec = self.spec_cluster
        c = e.cluster
        lease = self._lease_s

        def shown(t: float) -> float:  # a time: log1p(t / lease) / log1p(LONG_LEASES), in [0, 1]
            if t > 0:
                return 1.0 if t >= self._long_s else math.log1p(t / lease) / _LOG_LONG
            return 0.0

        j = offer.job
        g = offer.num_gpus
        now = offer.now_s
        run_s = e.run_s.item(j)
        done = e.done_iters.item(j)
        total = e._total_iterations_list[j]
        iter_time = e._iter_time_list[j]
        nw = done * iter_time / run_s if run_s > 0 else 0.0
        t_mc, t_rk = self._timers(g, now) if self._timers is not None else _NO_TIMERS
        starv = offer.starvation_s
        elapsed = now - e.first_arrival_s
        free_m, free_r = c.free_per_machine, c.free_per_rack
        current = offer.current_tier
        self._obs[:] = (
            *self._job_static[j].tolist(),
            shown(starv),
            nw if nw < 1.0 else 1.0,
            done / total,
            shown(g * run_s / self._num_gpus),
            min(e.preemptions.item(j), 20) / 20.0,
            shown((total - done) * iter_time),
            *_OFFERED[offer.tiers],
            *(_NO_SPEEDS if self.sensitivity == "hidden" else self._speeds(offer)),
            shown(t_mc),
            shown(t_rk),
            starv >= t_mc,
            starv >= t_rk,
            c.free_total / spec.num_gpus,
            np.count_nonzero(free_m >= g) / spec.num_machines,
            np.count_nonzero(free_r >= g) / spec.racks,
            free_m.max() / spec.gpus_per_machine,
            free_r.max() / spec.gpus_per_rack,
            math.log1p(e.n_waiting) / _LOG_1000,
            min(e.waiting_gpus / self._num_gpus, 10.0) / 10.0,
            math.log1p(e.n_running) / _LOG_1000,
            (e.n - e.finished) / e.n,
            shown(elapsed),
            (elapsed % lease) / lease,
            0.0 if current is None else (int(current) + 1) / 3.0,
        )

    def _speeds(self, offer: Offer) -> tuple[float, float, float]:
        if self.sensitivity == "hidden":
            return (0.0, 0.0, 0.0)
        e = self.engine
        j = offer.job
        if self.sensitivity == "observed":
            seen = e.speed_seen[j]
            return (float(seen[0]), float(seen[1]), float(seen[2]))
        out = [0.0, 0.0, 0.0]
        for tier in offer.tiers:
            gpus = e.cluster.place(offer.num_gpus, tier)
            out[int(tier)] = e._speed_factor(j, e.spec.shape_of(gpus))
        return tuple(out)
