"""What both environments share: trace sources, seeding, snapshots, rendering and the reward's
bookkeeping (the ``"relative-jct"`` reference runs), in :class:`EnvBase`.

``Dally-v0`` (:class:`dallygym.envs.offer.DallyEnv`, one offer per step) and ``DallyQueue-v0``
(:class:`dallygym.envs.queue.DallyQueueEnv`, one pick per step) are its two subclasses; each
builds its observation with a component of its own (:mod:`dallygym.envs.offer_obs`,
:mod:`dallygym.envs.queue_obs`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import numbers
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd

from ..sim.cluster import ClusterSpec
from ..sim.contention import Contention
from ..sim.engine import Engine, EngineConfig, Offer, TraceArrays, run_policy
from ..sim.latency import LatencyModel, get_latency_model
from ..sim.metrics import summarize
from ..sim.policies import Policy, make_policy
from ..sim.trace import check_trace_fits, generate_trace, load_trace

#: The reward relative to a reference run of the same trace (see ReferenceRun).
RELATIVE_JCT = "relative-jct"
#: Default weight of the makespan excess in the "relative-jct" reward: a makespan 1 % longer
#: than the reference's costs as much as a total JCT 3 % longer. Steeper than an even trade,
#: so exceeding the reference's makespan does not pay for itself, while the returns of
#: ordinary policies stay within about +-100 (a makespan 30 % over costs 90).
MAKESPAN_PENALTY = 3.0
SENSITIVITY_MODES = ("hidden", "observed", "oracle")

#: Times are shown as log1p(t / lease) / log1p(LONG_LEASES): 0 at 0, 1 at 10,000 leases.
LONG_LEASES = 10_000.0
_LOG_LONG = math.log1p(LONG_LEASES)
_LOG_1000 = math.log1p(1000)

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

    __slots__ = (
        "area_s",
        "makespan_s",
        "first_arrival_s",
        "n",
        "_arrivals",
        "_arrival_sums",
        "_ends",
        "_end_sums",
        "_last_area",
    )

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
        self._last_area = (None, 0.0)  # (t, area_until(t)) of the last call: a pass asks at one time

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
        last = self._last_area
        if last[0] == t:
            return last[1]
        arrived = int(np.searchsorted(self._arrivals, t, side="right"))
        ended = int(np.searchsorted(self._ends, t, side="right"))
        if ended == self.n:
            area = self.area_s
        else:
            area = (arrived * t - float(self._arrival_sums[arrived])) - (ended * t - float(self._end_sums[ended]))
        self._last_area = (t, area)
        return area


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


class EnvBase(gym.Env):
    """The part of ``Dally-v0`` and ``DallyQueue-v0`` that does not depend on the decision the
    agent answers: the cluster, latency model and run parameters, the trace sources (one per
    reset, seeded from :attr:`np_random`), :meth:`reset`, snapshots (``copy.deepcopy`` and
    ``pickle``), :meth:`render`, and the ``"relative-jct"`` reward's reference runs and
    bookkeeping.

    A subclass's constructor first calls :meth:`check_options` with its arguments (its own
    options checked by its ``_check_own_options``), then sets ``_init_kwargs`` (its
    constructor's arguments), ``reward_kind``,
    ``action_space`` and ``observation_space``, and provides ``_start_episode`` (start the
    engine and run it to the first decision), ``_advance`` (answer, run to the next decision,
    return the reward), ``_reward``, ``_info``, ``_observation`` and ``action_masks``.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    #: The constructor's options (both environments take them, and pass them on unchanged).
    OPTIONS = (
        "racks",
        "machines_per_rack",
        "gpus_per_machine",
        "trace",
        "priority",
        "latency",
        "lease_s",
        "restart_overhead_s",
        "renewal",
        "reward_scale_s",
        "makespan_penalty",
        "sensitivity",
        "strict",
        "render_mode",
        "profile",
        "makespan_reference",
        "contention",
        "oversubscription",
        "link_load",
    )

    def __init__(
        self,
        *,
        racks: int,
        machines_per_rack: int,
        gpus_per_machine: int,
        trace: TraceSource,
        priority: str | Policy,
        latency: str | LatencyModel,
        lease_s: float,
        restart_overhead_s: float,
        renewal: str | None,
        reward_scale_s: float | None,
        makespan_penalty: float,
        sensitivity: str,
        strict: bool,
        render_mode: str | None,
        profile: str | None,
        makespan_reference: str | None,
        contention: str,
        oversubscription: float,
        link_load: bool,
    ) -> None:
        self.spec_cluster = ClusterSpec(racks, machines_per_rack, gpus_per_machine)
        from ..sim.profiles import make_profile_policy, profile_renewal

        renewal = profile_renewal(profile, renewal)  # an explicit renewal wins over the profile's
        self.config = EngineConfig(
            lease_s=lease_s,
            restart_overhead_s=restart_overhead_s,
            renewal=renewal,
            contention=contention,
            oversubscription=oversubscription,
        )
        self.latency = get_latency_model(latency) if isinstance(latency, str) else latency
        self._priority = priority
        if profile is not None:  # the profile's readings (docs/profiles.md); a Policy instance stands
            self._priority = make_profile_policy(priority, profile)
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

        self.engine: Engine | None = None
        self.policy: Policy | None = None
        #: The offer open to the agent (``Dally-v0``); always None in ``DallyQueue-v0``, whose
        #: offers the offer rule answers.
        self.offer: Offer | None = None
        self._done = False
        self._terminal_pending = False
        self._reported = 0.0
        self.steps = 0

    @classmethod
    def option_defaults(cls) -> dict[str, object]:
        """The constructor's options, each with its default (read from its signature)."""
        cached = cls.__dict__.get("_option_defaults")
        if cached is None:
            parameters = inspect.signature(cls.__init__).parameters
            cached = {name: p.default for name, p in parameters.items() if name != "self"}
            cls._option_defaults = cached
        return dict(cached)

    @classmethod
    def check_options(cls, **options) -> dict[str, object]:
        """The constructor's checks, run on ``options`` before anything is built; the full set of
        options (the defaults filled in) if they pass, else a ValueError or TypeError naming the
        option. Each environment's constructor calls it first, and
        :meth:`dallygym.envs.config.EnvConfig.check` calls the same method, so a configuration
        that passes builds. What can only be checked by building (a trace file's rows, a custom
        trace generator's output) is checked when the environment is built or reset."""
        defaults = cls.option_defaults()
        unknown = [name for name in options if name not in defaults]
        if unknown:
            raise ValueError(
                f"{cls.__name__} has no option {', '.join(map(repr, unknown))}; its options are {', '.join(defaults)}"
            )
        merged = {**defaults, **options}
        shared = inspect.signature(cls._check_shared_options).parameters
        cls._check_shared_options(**{name: merged[name] for name in shared})
        ClusterSpec(merged["racks"], merged["machines_per_rack"], merged["gpus_per_machine"])
        cls._check_own_options(merged)
        return merged

    @classmethod
    def _check_own_options(cls, options: dict[str, object]) -> None:
        """The options of one environment only (``options`` is the full set): a subclass's hook."""

    @classmethod
    def _check_shared_options(
        cls,
        *,
        sensitivity,
        render_mode,
        reward_scale_s,
        makespan_penalty,
        strict,
        makespan_reference,
        latency,
        contention,
        oversubscription,
        link_load,
    ) -> None:
        """The options both environments take, those not checked where they are used."""
        Contention(contention, oversubscription)
        if not isinstance(link_load, bool):
            raise TypeError(f"link_load must be True or False, got {type(link_load).__name__} {link_load!r}")
        if link_load and contention == "none":
            raise ValueError(
                "link_load=True shows the links' load under a contention model; contention='none' has none"
            )
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
        data, :mod:`dallygym.sim.engine.turns`), so a copy continues exactly as the original would, bit for
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
        self._restore_views()

    def _restore_views(self) -> None:
        """After a snapshot is restored: remake what holds views of the engine's arrays (a copy's
        engine has arrays of its own). Nothing here; an environment whose observation keeps such
        views overrides it."""

    def __deepcopy__(self, memo: dict) -> EnvBase:
        for name in self._SHARED_ON_COPY:
            value = self.__dict__.get(name)
            if value is not None:
                memo[id(value)] = value
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__dict__.copy(), memo))
        return new

    # --- episodes --------------------------------------------------------------------------

    def _episode_trace_and_config(self) -> tuple[pd.DataFrame | TraceArrays, EngineConfig]:
        """At reset: the episode's trace, a fresh priority policy (:attr:`policy`) and the
        engine's configuration, with a seed drawn from :attr:`np_random` after the trace."""
        trace = self._next_trace()
        self.policy = make_policy(self._priority) if isinstance(self._priority, str) else self._priority
        config = dataclasses.replace(self.config, seed=int(self.np_random.integers(2**31 - 1)))
        return trace, config

    def _run_to_first_decision(self) -> None:
        """At reset, once the engine is built: run it to the first decision that is a real
        choice (the episode may end there)."""
        self._done = False
        self._reported = 0.0
        self.steps = 0
        self._advance(None, first=True)
        self._reported = 0.0  # the first step's reward covers the time before the first decision too

    def _step_without_decision(self):
        """A step with no decision open: an error before reset or after the episode's end, but
        for the first step of an episode that ended inside reset (no decision of it was a real
        choice), which reports the end and the episode's reward; its action is moot."""
        if self.engine is None:
            raise ResetNeeded("call reset() before step()")
        if not self._terminal_pending:
            raise ResetNeeded("the episode has ended; call reset()")
        self._terminal_pending = False
        self.steps += 1
        info = self._end_info(self._info(invalid=False))
        return self._observation(), float(self._reward()), True, False, info

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
        from ..sim.policies.dally import DallyPolicy

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
