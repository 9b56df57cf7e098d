"""A planning baseline for ``DallyQueue-v0``: try the base order's first few picks on copies
of the environment, play each forward with the base order, take the best.

:class:`LookaheadAgent` is search, not a heuristic: at each contested pick it simulates the
future on snapshots of the environment (``copy.deepcopy``), which a scheduler acting in a real
cluster cannot do. It is measured beside the heuristics and the learned agents as its own kind
of row (``agents/queue_baselines.py --lookahead``), never as the yardstick the learned agents
are held to. ``search_agent("lookahead:3:10", env)`` builds one from a short spec.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..sim.policies import POLICIES, make_policy
from .heuristics import QueueHeuristicAgent
from .queue import JOB_FEATURES, PROTECT_SHARE, DallyQueueEnv, protected_share_action

#: The registered search agents (``search_agent`` names).
SEARCH_AGENTS = ("lookahead",)
#: Bases other than a shipped policy's name: the slots' own order (the offer rule's priority,
#: action 0 at every step) and the protected-remaining order read from the observation
#: (:func:`dallygym.envs.queue.protected_share_action`, the ``teacher`` row of the baselines).
OFFER_RULE = "offer-rule"
TEACHER = "teacher"
#: How rollouts are compared: the makespan limit first, then the return; or the return alone.
OBJECTIVES = ("within-limit", "return")
#: A candidate replaces the base's choice only if its return is larger by more than this
#: (units of the reward): rollouts that differ only by floating-point noise tie.
TIE_TOLERANCE = 1e-9
#: A makespan counts as beyond the limit only above limit x (1 + this), for the same reason.
LIMIT_TOLERANCE = 1e-9
#: Defaults of :class:`LookaheadAgent`.
TOP_K = 3
HORIZON = 10


def teacher_order(obs: dict, share: float = PROTECT_SHARE) -> np.ndarray:
    """The filled slots of a ``DallyQueue`` observation in the protected-remaining order of
    :func:`~dallygym.envs.queue.protected_share_action` (its answer first): the candidates whose
    ``estimate_share`` is at least ``share``, longest remaining estimate first, then the others,
    shortest first; ties by slot."""
    k = int(obs["job_mask"].sum())
    jobs = obs["jobs"][:k]
    estimate = jobs[:, JOB_FEATURES.index("remaining_estimate")]
    protected = jobs[:, JOB_FEATURES.index("estimate_share")] >= share
    return np.argsort(np.where(protected, -estimate, estimate), kind="stable")


class ModelOrder:
    """A learned policy as a lookahead's base: the open pick's candidates in the order of the
    policy's probabilities, most likely first (ties by slot), and its answer the most likely
    candidate. ``model`` is a ``MaskablePPO`` model of a ``DallyQueue`` environment (or anything
    with its ``policy``). The stop action is never tried or played: a search over this base
    keeps every pass going, as the other bases do.
    """

    def __init__(self, model) -> None:
        self.model = model

    def slots(self, obs: dict, env: DallyQueueEnv) -> np.ndarray:
        import torch as th

        mask = env.action_masks()
        policy = self.model.policy
        obs_t, _ = policy.obs_to_tensor(obs)
        with th.no_grad():
            probs = policy.get_distribution(obs_t, action_masks=mask[None]).distribution.probs[0].numpy()
        valid = np.flatnonzero(mask[: env.max_candidates])
        return valid[np.argsort(-probs[valid], kind="stable")]

    def first(self, obs: dict, env: DallyQueueEnv) -> int:
        return int(self.slots(obs, env)[0])


class _BaseOrder:
    """The base policy's order of the open pick's slots, for one environment (the live one or
    a copy): a policy keeps its own state per environment."""

    def __init__(self, base: str | ModelOrder, env: DallyQueueEnv) -> None:
        self.base = base
        self.env = env
        learned = isinstance(base, ModelOrder)
        self._agent = QueueHeuristicAgent(base, env) if not learned and base not in (OFFER_RULE, TEACHER) else None

    def slots(self, obs: dict) -> np.ndarray:
        if isinstance(self.base, ModelOrder):
            return self.base.slots(obs, self.env)
        if self.base == TEACHER:
            return teacher_order(obs)
        if self._agent is not None:
            return self._agent.slot_order()
        return np.flatnonzero(self.env.action_masks()[: self.env.max_candidates])

    def first(self, obs: dict) -> int:
        """The base's answer (the first of :meth:`slots`), as the base itself gives it."""
        if isinstance(self.base, ModelOrder):
            return self.base.first(obs, self.env)
        if self.base == OFFER_RULE:
            return 0
        if self.base == TEACHER:
            return protected_share_action(obs)
        return int(self._agent.predict(obs)[0])


@dataclass
class LookaheadCost:
    """What a :class:`LookaheadAgent`'s decisions cost, summed since it was made (or since
    :meth:`LookaheadAgent.reset_cost`). The counts are deterministic; the times are wall-clock."""

    #: Picks answered (calls of ``predict`` with a pick open).
    decisions: int = 0
    #: Of those, the contested ones (at least two candidates shown): where a search may run.
    contested: int = 0
    #: Contested picks answered by another candidate than the base's first.
    changed: int = 0
    #: Environment copies made (one per candidate tried).
    copies: int = 0
    #: Steps played on copies: each candidate's own step and the base's steps after it.
    rollout_steps: int = 0
    #: Seconds spent making copies, and playing them.
    copy_s: float = 0.0
    rollout_s: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


class LookaheadAgent:
    """One-step lookahead with base-policy rollouts on ``DallyQueue`` environments.

    At each pick with at least two candidates (a *contested* decision; the stop action is never
    tried, since no base stops), the agent lists the shown candidates in the ``base`` order and
    tries the first ``top_k`` (all if fewer): for each, a copy of the environment
    (``copy.deepcopy`` of ``env.unwrapped``) plays that candidate's pick, then the base's picks
    for the next ``horizon - 1`` steps, or until the episode ends (``horizon=None``). The live
    environment is never stepped by the search: each copy is independent of it.

    A rollout's *return* is the sum of the rewards of its steps. Under the default
    ``"relative-jct"`` reward that is the change, over the rollout, of the job-seconds the run
    has saved against the reference run (the offer rule's native run) up to the current time,
    in percent of the reference's total JCT, minus ``makespan_penalty`` x the growth of the
    makespan excess over the limit (with ``makespan_credit="bound"``, charged as soon as a pick
    delays the job that sets the makespan). A rollout that ends the episode has summed the rest
    of the episode's return exactly. Rollouts of a finite horizon end at different times; their
    returns compare the savings up to those times, a heuristic measure that a deeper horizon
    makes exact. The other rewards work too (their sums are compared as they are).

    Which rollout wins (``objective``):

    * ``"within-limit"`` (default): under ``"relative-jct"``, a rollout whose makespan exceeds
      the limit (the environment's ``makespan_limit_s``, above a relative 1e-9) loses to any
      that does not, whatever the returns; among rollouts on the same side of the limit the
      larger return wins. The makespan of a rollout that ended the episode is the run's; of
      one that did not, the environment's makespan bound (:meth:`DallyQueueEnv.makespan_bound_s`,
      where the run would end if nothing changed) since the first arrival. Under the other
      rewards (no limit) it is ``"return"``.
    * ``"return"``: the larger return wins.

    A candidate replaces the base's choice only by winning by more than 1e-9: ties go to the
    earlier candidate in the base order, so with ``top_k=1`` or ``horizon=0`` no copy is made
    and the agent is exactly the base policy.

    Its options:

    * ``env``: a ``DallyQueue`` environment (``DallyQueue-v0``, ``DallyQueueSmall-v0`` or a
      :class:`~dallygym.envs.queue.DallyQueueEnv`), wrapped or not; the agent answers its picks.
    * ``base``: the order tried and rolled out: a :class:`ModelOrder` (a learned policy's own
      order: the search that trains it, ``TrainConfig.search_rounds``), ``"offer-rule"`` (default: the slots' order,
      the offer rule's priority, so the base run is the offer rule's native run), ``"teacher"``
      (the protected-remaining order read from the observation,
      :func:`~dallygym.envs.queue.protected_share_action`), or a shipped policy's name (its
      priority order over the candidates, :class:`~dallygym.envs.heuristics.QueueHeuristicAgent`; a
      copy's rollout uses an instance of that policy made for the copy).
    * ``top_k``: the number of candidates tried (a positive integer).
    * ``horizon``: the steps played on each copy, the candidate's own included (a non-negative
      integer), or None to play each copy to the episode's end.
    * ``objective``: ``"within-limit"`` or ``"return"``, see above.

    Cost: at most ``top_k`` copies and ``top_k x horizon`` steps per contested pick, counted in
    :attr:`cost` (:class:`LookaheadCost`). A copy costs what its snapshot costs to restore.

    Deterministic: the environment is, and so is every choice here, so the same seed gives the
    same picks.
    """

    name = "lookahead"

    def __init__(
        self,
        env,
        base: str = OFFER_RULE,
        top_k: int = TOP_K,
        horizon: int | None = HORIZON,
        objective: str = "within-limit",
    ) -> None:
        unwrapped = getattr(env, "unwrapped", env)
        if not isinstance(unwrapped, DallyQueueEnv):
            spec = getattr(env, "spec", None)
            what = f"{spec.id} ({type(unwrapped).__name__})" if spec is not None else type(unwrapped).__name__
            raise TypeError(
                f"LookaheadAgent answers DallyQueue picks: env must be a DallyQueue environment "
                f"(DallyQueue-v0, DallyQueueSmall-v0 or a DallyQueueEnv), got {what}"
            )
        check_lookahead_options(base, top_k, horizon, objective)
        self.env = env
        self._env: DallyQueueEnv = unwrapped
        self.base = base
        self.top_k = int(top_k)
        self.horizon = None if horizon is None else int(horizon)
        self.objective = objective
        self._order = _BaseOrder(base, unwrapped)
        #: What the decisions cost so far (:class:`LookaheadCost`).
        self.cost = LookaheadCost()

    def reset_cost(self) -> None:
        """Start counting the cost afresh (e.g. at each episode)."""
        self.cost = LookaheadCost()

    def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
        """The stable-baselines3 signature: the action for the environment's open pick (read
        from the environment itself, which ``observation`` must be the latest observation of)."""
        env = self._env
        if env.pick is None:  # no pick open: before reset, or the episode has ended
            return np.int64(0), state
        cost = self.cost
        cost.decisions += 1
        order = self._order.slots(observation)
        if order.size < 2:
            return np.int64(int(order[0]) if order.size else 0), state
        cost.contested += 1
        tried = order[: self.top_k]
        if tried.size < 2 or self.horizon == 0:
            return np.int64(int(tried[0])), state
        best, best_key = int(tried[0]), self._rollout(int(tried[0]))
        for slot in tried[1:].tolist():
            key = self._rollout(slot)
            if _better(key, best_key):
                best, best_key = slot, key
        if best != int(tried[0]):
            cost.changed += 1
        return np.int64(best), state

    def _rollout(self, slot: int) -> tuple[bool, float]:
        """Play ``slot`` then the base on a copy; (beyond the makespan limit, return)."""
        cost = self.cost
        start = time.perf_counter()
        twin: DallyQueueEnv = copy.deepcopy(self._env)
        played = time.perf_counter()
        cost.copies += 1
        cost.copy_s += played - start
        order = _BaseOrder(self.base, twin)
        obs, total, done, _, _ = twin.step(slot)
        steps = 1
        while not done and (self.horizon is None or steps < self.horizon):
            obs, reward, done, _, _ = twin.step(order.first(obs))
            total += reward
            steps += 1
        cost.rollout_steps += steps
        cost.rollout_s += time.perf_counter() - played
        return self._beyond_limit(twin, done), float(total)

    def _beyond_limit(self, twin: DallyQueueEnv, done: bool) -> bool:
        """Whether a rollout's makespan exceeds the limit (``"within-limit"`` objective)."""
        limit = getattr(twin, "makespan_limit_s", None)
        if self.objective != "within-limit" or limit is None or twin.reference_run is None:
            return False
        engine = twin.engine
        if done:
            span = float(np.max(engine.end_s)) - engine.first_arrival_s
        else:
            span = twin.makespan_bound_s() - engine.first_arrival_s
        return span > limit * (1.0 + LIMIT_TOLERANCE)


def _better(key: tuple[bool, float], than: tuple[bool, float]) -> bool:
    """Whether rollout ``key`` beats ``than``: within the limit beats beyond it; then a return
    larger by more than :data:`TIE_TOLERANCE`."""
    if key[0] != than[0]:
        return not key[0]
    return key[1] > than[1] + TIE_TOLERANCE


def check_lookahead_options(base: str, top_k: int, horizon: int | None, objective: str) -> None:
    """:class:`LookaheadAgent`'s options, checked (a ValueError naming the option)."""
    if isinstance(top_k, (bool, np.bool_)) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer (the candidates tried), got {top_k!r}")
    if horizon is not None and (
        isinstance(horizon, (bool, np.bool_)) or not isinstance(horizon, (int, np.integer)) or horizon < 0
    ):
        raise ValueError(
            f"horizon must be a non-negative integer (steps played on each copy) or None (to the end), got {horizon!r}"
        )
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if isinstance(base, ModelOrder):
        return
    if not isinstance(base, str) or (base not in (OFFER_RULE, TEACHER) and base not in POLICIES):
        raise ValueError(
            f"unknown base {base!r}; choose {OFFER_RULE!r}, {TEACHER!r} or a shipped policy: {', '.join(POLICIES)}"
        )
    if base in POLICIES:
        make_policy(base)


def parse_lookahead(text: str) -> dict:
    """``TOPK:HORIZON[:BASE]`` (HORIZON an integer or ``end``) as :class:`LookaheadAgent`'s
    keyword arguments, checked: ``"3:10"``, ``"2:end:teacher"``."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"a lookahead is TOPK:HORIZON[:BASE] (HORIZON an integer or 'end'), got {text!r}")
    top_k, horizon = parts[0], parts[1]
    try:
        options = {
            "top_k": int(top_k),
            "horizon": None if horizon == "end" else int(horizon),
        }
    except ValueError:
        raise ValueError(
            f"a lookahead is TOPK:HORIZON[:BASE] with TOPK an integer and HORIZON an integer or 'end', got {text!r}"
        ) from None
    if len(parts) == 3:
        options["base"] = parts[2]
    check_lookahead_options(options.get("base", OFFER_RULE), options["top_k"], options["horizon"], "within-limit")
    return options


def search_agent(spec: str, env) -> LookaheadAgent:
    """A search agent by name: ``"lookahead"`` (the defaults: top 3, horizon 10, the offer
    rule's order) or ``"lookahead:TOPK:HORIZON[:BASE]"`` (see :func:`parse_lookahead`)."""
    name, _, rest = spec.partition(":")
    if name not in SEARCH_AGENTS:
        raise ValueError(f"unknown search agent {name!r}; choose one of {', '.join(SEARCH_AGENTS)}")
    return LookaheadAgent(env, **(parse_lookahead(rest) if rest else {}))


def spec_label(top_k: int, horizon: int | None, base: str = OFFER_RULE) -> str:
    """A lookahead's short name, ``lookahead 3:10`` (with ``:BASE`` unless the offer rule's)."""
    label = f"lookahead {top_k}:{'end' if horizon is None else horizon}"
    return label if base == OFFER_RULE else f"{label}:{base}"


__all__ = [
    "HORIZON",
    "OBJECTIVES",
    "SEARCH_AGENTS",
    "TOP_K",
    "LookaheadAgent",
    "LookaheadCost",
    "ModelOrder",
    "check_lookahead_options",
    "parse_lookahead",
    "search_agent",
    "spec_label",
    "teacher_order",
]
