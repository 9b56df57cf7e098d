"""Reference policies as agents of the environment, and one-episode evaluation.

``heuristic_agent(name, env)`` wraps a shipped policy's offer decision in the
stable-baselines3 ``predict`` signature, so scripts can evaluate heuristics and learned agents
the same way. ``evaluate(env, agent)`` runs one episode and returns the run's summary (the
keys of ``dallygym simulate --format json``).
"""

from __future__ import annotations

import numpy as np

from ..sim.metrics import summarize
from ..sim.policies import make_policy
from .base import EnvBase
from .offer import WAIT

#: The actions as the numpy integers predict returns (immutable, so shared).
_ACTIONS = tuple(np.int64(a) for a in range(4))


class HeuristicAgent:
    """A policy's ``decide`` acting through :class:`~dallygym.envs.offer.DallyEnv` offers.

    The agent reads the environment's current offer (the observation is not enough for a
    heuristic: it needs the engine's view). If the environment's own priority policy is of the
    same kind (e.g. both ``dally``), the agent decides with that very object, so a stateful
    policy (Dally's auto-tuner) sees every placement exactly as in a native run.

    The environment accepts every offer at the job's best possible tier itself (Algorithm 1
    does). A policy that always does the same -- the Dally family, ``fifo`` -- therefore gives,
    through the environment with ``priority`` set to its own name, exactly its native run.
    ``tiresias`` (a high-skew gang waiting for its fewest machines), ``gandiva`` (random
    placement at any tier) and ``random`` sometimes decline or go below such offers, so through
    the environment they act only on the offers where waiting is a real choice.
    """

    def __init__(self, name: str, env) -> None:
        self.name = name
        self.env = env
        self._base: EnvBase = env.unwrapped  # (DallyQueueEnv for QueueHeuristicAgent)
        make_policy(name)  # unknown names fail here
        self._policy = None
        self._engine = None

    def _decider(self, base: EnvBase):
        if self._engine is not base.engine:  # a new episode
            self._engine = base.engine
            if type(base.policy).name == self.name:
                self._policy = base.policy
            else:
                self._policy = make_policy(self.name)
                self._policy.reset(base.engine, np.random.default_rng(base.engine.config.seed))
        return self._policy

    def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
        base = self._base
        offer = base.offer
        if offer is None:
            return _ACTIONS[WAIT], state
        engine = base.engine
        policy = self._policy if self._engine is engine else self._decider(base)
        tier = policy.decide(offer, engine)
        return _ACTIONS[WAIT if tier is None else 1 + int(tier)], state  # actions 1, 2, 3 = tiers 0, 1, 2


class QueueHeuristicAgent(HeuristicAgent):
    """A policy's priority order acting through :class:`~dallygym.envs.queue.DallyQueueEnv`
    picks: each step it serves the candidate that ``name``'s priority keys put first (ties by
    arrival, then job index, the engine's rule), among the candidates in the window.

    With the environment's offer rule of the same name, that is always slot 0, and the episode
    is exactly the policy's native run (the environment answers offers with that policy). With
    another offer rule, the policy's order is applied to the candidates of each pick: its keys
    are computed over the candidates only (a native pass also ranks the waiting jobs that do
    not fit), which matters for orders that depend on the set (``protected-remaining``).
    """

    def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
        base = self._base
        pick = getattr(base, "pick", None)
        if pick is None:
            return np.int64(0), state
        policy = self._decider(base)
        if policy is base.policy:
            return np.int64(0), state  # the slots are in this very policy's order
        shown = np.asarray(pick.candidates[: base.max_candidates], dtype=np.int64)
        jobs = np.sort(shown)  # policies get increasing job indices, as from the engine
        keys = np.asarray(policy.priority(base.engine, jobs), dtype=np.float64)
        # Job indices follow (arrival, id): the smallest (key, index) is the engine's first.
        first = jobs[np.lexsort((jobs, keys))[0]]
        return np.int64(int(np.flatnonzero(shown == first)[0])), state

    def slot_order(self) -> np.ndarray:
        """Every shown slot of the current pick, in this policy's order (the first is
        :meth:`predict`'s answer); empty when no pick is open. A search that tries the policy's
        first few choices (:class:`~dallygym.envs.lookahead.LookaheadAgent`) reads it."""
        base = self._base
        pick = getattr(base, "pick", None)
        if pick is None:
            return np.zeros(0, dtype=np.int64)
        shown = np.asarray(pick.candidates[: base.max_candidates], dtype=np.int64)
        policy = self._decider(base)
        if policy is base.policy:
            return np.arange(shown.size, dtype=np.int64)
        by_job = np.argsort(shown, kind="stable")  # slot of each job in increasing job index
        keys = np.asarray(policy.priority(base.engine, shown[by_job]), dtype=np.float64)
        return by_job[np.lexsort((shown[by_job], keys))]


def heuristic_agent(name: str, env) -> HeuristicAgent:
    """An agent that answers ``env``'s decisions with the shipped policy ``name``: offers on
    ``Dally-v0``, picks (by the policy's priority order) on ``DallyQueue-v0``."""
    from .queue import DallyQueueEnv

    if isinstance(env.unwrapped, DallyQueueEnv):
        return QueueHeuristicAgent(name, env)
    return HeuristicAgent(name, env)


def evaluate(env, agent, seed: int = 0) -> dict:
    """Run one episode of ``env`` with ``agent`` (anything with the SB3 ``predict`` signature;
    action masks are passed when it accepts them) and return the run's summary metrics."""
    obs, info = env.reset(seed=seed)
    terminated = truncated = False
    base: EnvBase = env.unwrapped
    if base._done:  # no decision at all in this episode
        return summarize(base.engine)
    while not (terminated or truncated):
        action, _ = agent.predict(obs, deterministic=True, action_masks=info["action_mask"])
        obs, _, terminated, truncated, info = env.step(int(action))
    if truncated:
        raise RuntimeError("the episode was truncated before every job finished; raise max_episode_steps")
    return info["summary"]
