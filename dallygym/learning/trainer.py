"""Learned agents: MaskablePPO training on ``Dally-v0`` or ``DallyQueue-v0``, loading, and
evaluation on held-out traces.

One implementation behind ``dallygym train`` / ``dallygym evaluate`` and the scripts in
``agents/``. Training needs the ``agents`` extra (torch, stable-baselines3, sb3-contrib).

Read :func:`train` top to bottom: build vectorised environments that draw a fresh seeded trace
at every reset, a MaskablePPO model, callbacks (periodic evaluation with action masks on fixed
validation traces, checkpoints, a wall-clock limit), learn, then save the model, the settings
that produced it and its training curve.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..envs.config import EnvConfig
from ..envs.offer import RELATIVE_JCT
from ..sim.cluster import ClusterSpec
from ..sim.contention import Contention
from ..sim.engine import EngineConfig
from ..sim.metrics import SUMMARY_KEYS
from ..sim.policies import POLICIES
from ..sim.simulate import simulate
from ..sim.trace import generate_trace, load_trace
from .agent_files import (  # noqa: F401 - re-exported: dallygym.learning.trainer is where users found them
    CONFIG_FILE,
    POLICY_FILE,
    AgentLoadError,
    commit_agent,
    convert_agent,
    policy_limit,
    read_config,
    read_policy,
    write_atomic,
)
from .priority_search import PRIORITY_FILE, PriorityAgent, is_priority_agent

#: The settings of a training in progress (``config.json`` is written beside the parameters
#: when it ends).
TRAINING_FILE = "training.json"
#: The run directory's subdirectory holding the initial policy (before any update) as an agent.
INITIAL_DIR = "initial"

#: Seeds of the validation traces used during training (never the held-out test seeds).
VALIDATION_SEEDS = (100, 101)


@dataclass
class TrainConfig:
    """Settings of one training run (all saved next to the model in ``config.json``).

    The defaults are for ``Dally-v0`` at the paper's 8 racks: a fresh ``batch-500`` draw per
    reset, the environment's reward (``"relative-jct"``: the episode's improvement over a native
    Dally run of the same trace, makespan beyond Dally's penalised by ``makespan_penalty``), the
    paper's constraint that the model is hidden. PPO settings:
    long episodes (about 3,000 decisions) and a dense reward, so a high discount (0.999) and
    a small entropy bonus. Eight environments stepped in one process (``vec_env="dummy"``):
    the policy's forward pass is batched over them, and on 2 cores that beats one process per
    environment. One torch thread: the 64 x 64 network's tensors are tiny, and more threads
    only contend (measured: 1,852 against 511 steps/s with two runs sharing 2 cores).
    ``total_timesteps`` fixes the run (same seed, same model) and is trained exactly: ``n_steps``
    becomes the nearest rollout size that divides it (:func:`rollout_steps`; 500 for the
    default million steps); ``time_limit_min`` is a guard (``meta.json`` says if it stopped a run).

    For a ``DallyQueue`` id (:func:`is_queue_env`) the environment takes ``offer_rule`` instead
    of ``priority`` and the
    network is the one ``queue_net`` names (``net_arch`` is not used): ``"set"``
    (:class:`dallygym.learning.nets.JobSetPolicy`, the default: only the slots holding a candidate go
    through the network, and the value is estimated from the pooled set) or ``"pointer"``
    (:class:`dallygym.learning.nets.JobPointerPolicy`, the first version, which encodes every slot; a
    config saved without the field names it).

    ``imitate_episodes`` > 0 (``DallyQueue`` ids only) warm-starts the network before PPO by
    behaviour cloning: :func:`imitation_warm_start` plays that many training episodes with
    :func:`dallygym.envs.queue.protected_share_action` and fits the policy to its choices and
    the value head to its discounted returns for ``imitate_epochs`` epochs. ``search_rounds``
    > 0 (``DallyQueue`` ids only) runs expert iteration without a teacher before PPO
    (:func:`self_search`): each round plays ``search_episodes`` training episodes in which every
    contested pick is the best of the policy's ``search_top_k`` most likely candidates, each
    tried on a copy of the environment and rolled out ``search_horizon`` steps by the policy
    itself, and fits the policy to those picks for ``search_epochs`` epochs (Adam step
    ``imitate_learning_rate``). Its wall time counts against ``time_limit_min``. ``keep`` chooses
    the parameters saved in ``policy.pth``: ``"last"`` (the end of training) or ``"best"``
    (the best validation return seen, the warm start's included; needs evaluations).

    ``train_racks`` trains on several cluster sizes at once: training environment ``i`` has
    ``train_racks[i % len(train_racks)]`` racks (e.g. ``[4, 8, 8, 16]`` over four
    environments), the warm start's teacher episodes cycle through them in that order, and
    validation plays every validation trace at each distinct size (one evaluation environment
    per size), so "best" is the best return summed over the sizes. ``racks`` stays the size the
    agent is evaluated at by default. None (the default) trains at ``racks`` only.

    ``makespan_dual_lr`` (None: off) makes the ``"relative-jct"`` reward's makespan penalty a
    Lagrange multiplier learned with the policy: it starts at ``makespan_penalty`` (the
    environment's default if None) and after every rollout takes a step of dual ascent,
    penalty <- max(0, penalty + ``makespan_dual_lr`` x (mean over the training episodes that
    ended in the rollout of max(0, makespan excess in %) − ``makespan_budget_pct``)), applied
    from each environment's next episode (:class:`MakespanMultiplier`; a rollout in which no
    episode ended leaves it). The training reward is divided by 1 + penalty
    (``set_makespan_penalty(p, normalise=True)``): −(JCT part + penalty x makespan part) / (1 +
    penalty), so its scale stays that of a percent as the multiplier grows (unnormalised, returns
    of −10⁴ made the value loss dominate the clipped gradient of the shared network). The
    makespan is then a constraint the training enforces, not a price the agent may choose to
    pay. ``validation_makespan_penalty`` (None: the training
    penalty) prices the makespan in validation, and so in ``keep="best"``: with a learned
    multiplier, a fixed high value (e.g. 100: 1 % of excess outweighs any JCT gain) keeps
    the validation returns comparable across the run and ranks makespan-safe parameters first.

    ``guard_leases`` is the ``DallyQueue`` option of that name (None: off), part of the
    environment the agent is trained and evaluated in, as is ``guard_waiting`` (True: the guard
    serves every protected candidate, not only leases; needs ``guard_leases``). ``teacher_share``: the
    ``estimate_share`` from which the warm start's teacher protects a job (``share`` of
    :func:`~dallygym.envs.queue.protected_share_action`; ½ by default). ``limit_features``
    (True: the observation shows the makespan limit of the ``"relative-jct"`` reward) is the
    ``DallyQueue`` option of that name too.
    """

    env_id: str = "Dally-v0"
    racks: int = 8
    train_racks: list[int] | None = None
    machines_per_rack: int = 8
    gpus_per_machine: int = 8
    trace: str = "gen:batch-500"
    priority: str = "dally"
    sensitivity: str = "hidden"
    reward: str | None = None
    offer_rule: str = "dally"
    makespan_weight: float | None = None
    makespan_penalty: float | None = None
    makespan_reference: str | None = None
    makespan_dual_lr: float | None = None
    makespan_budget_pct: float = 0.5
    validation_makespan_penalty: float | None = None
    max_candidates: int | None = None
    lease_picks: str | None = None
    makespan_credit: str | None = None
    guard_leases: float | None = None
    guard_waiting: bool = False
    limit_features: bool = False
    teacher_share: float = 0.5
    total_timesteps: int = 1_000_000
    time_limit_min: float | None = 60.0
    n_envs: int = 8
    vec_env: str = "dummy"
    seed: int = 0
    n_steps: int = 512
    batch_size: int = 256
    n_epochs: int = 5
    learning_rate: float = 3e-4
    gamma: float = 0.999
    gae_lambda: float = 0.95
    ent_coef: float = 0.01
    net_arch: list[int] = field(default_factory=lambda: [64, 64])
    queue_net: str = "set"
    eval_freq_steps: int = 100_000
    checkpoint_freq_steps: int = 250_000
    imitate_episodes: int = 0
    imitate_epochs: int = 10
    imitate_learning_rate: float = 1e-3
    search_rounds: int = 0
    search_episodes: int = 4
    search_top_k: int = 3
    search_horizon: int = 10
    search_epochs: int = 2
    keep: str = "last"
    torch_threads: int = 1
    out_dir: str = "agents/runs/ppo"
    tensorboard: bool = False
    progress_bar: bool = True

    def env_kwargs(self, racks: int | None = None) -> dict:
        """Keyword arguments of the training environments (the evaluation uses the same
        cluster shape and observation mode), at ``racks`` racks if given (one of
        :meth:`training_sizes`), else at ``self.racks``. Options left None take the
        environment's default."""
        kwargs = {
            "racks": self.racks if racks is None else racks,
            "machines_per_rack": self.machines_per_rack,
            "gpus_per_machine": self.gpus_per_machine,
            "trace": self.trace,
            "sensitivity": self.sensitivity,
            "reward": self.reward,
            "makespan_penalty": self.makespan_penalty,
            "makespan_reference": self.makespan_reference,
        }
        if is_queue_env(self.env_id):
            kwargs["offer_rule"] = self.offer_rule
        else:
            kwargs["priority"] = self.priority
        # The DallyQueue options go in whenever they are set, whatever the id, so that
        # EnvConfig.check refuses them by name for an id that has none.
        kwargs.update(
            makespan_weight=self.makespan_weight,
            max_candidates=self.max_candidates,
            lease_picks=self.lease_picks,
            makespan_credit=self.makespan_credit,
            guard_leases=self.guard_leases,
        )
        if self.guard_waiting:  # omitted when off: configs saved before the option still load as they were
            kwargs["guard_waiting"] = True
        if self.limit_features:  # (likewise)
            kwargs["limit_features"] = True
        return {k: v for k, v in kwargs.items() if v is not None}

    def env_config(self, racks: int | None = None) -> EnvConfig:
        """The training environment at ``racks`` (:meth:`env_kwargs`) as an
        :class:`~dallygym.envs.config.EnvConfig`, which :func:`check_train_config` checks with the
        environment's own checks."""
        return EnvConfig(self.env_id, self.env_kwargs(racks))

    def validation_env_config(self, racks: int, traces: list) -> EnvConfig:
        """The validation environment at ``racks``: the training one over the fixed validation
        ``traces``, the makespan priced by ``validation_makespan_penalty`` if set."""
        config = self.env_config(racks).replace(trace=traces)
        if self.validation_makespan_penalty is not None:
            config = config.replace(makespan_penalty=self.validation_makespan_penalty)
        return config

    def rank_racks(self, rank: int) -> int:
        """Racks of training environment ``rank`` (and of teacher episode ``rank``)."""
        return self.racks if not self.train_racks else self.train_racks[rank % len(self.train_racks)]

    def training_sizes(self) -> list[int]:
        """The distinct cluster sizes (racks) trained and validated on, in ascending order."""
        return sorted(set(self.train_racks)) if self.train_racks else [self.racks]

    def check_train_racks(self) -> None:
        """Reject a ``train_racks`` that is empty or holds a non-positive or non-integer size."""
        if self.train_racks is None:
            return
        sizes = list(self.train_racks)
        if not sizes or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in sizes):
            raise ValueError(f"train_racks must be a non-empty list of positive integers, got {self.train_racks!r}")
        if len(sizes) > self.n_envs:
            raise ValueError(
                f"train_racks lists {len(sizes)} sizes but there are only {self.n_envs} training "
                f"environments (--n-envs): sizes {sizes[self.n_envs :]} would never be trained on"
            )


def is_queue_env(env_id: str) -> bool:
    """Whether a registered id is a ``DallyQueueEnv`` (the agent picks jobs, not tiers)."""
    import gymnasium as gym

    import dallygym  # noqa: F401 - registers the ids

    entry = gym.spec(env_id.split(":")[-1]).entry_point
    return isinstance(entry, str) and entry.endswith(":DallyQueueEnv")


def rollout_steps(total_timesteps: int, n_envs: int, n_steps: int) -> int:
    """Steps per environment per rollout such that training runs exactly ``total_timesteps``.

    PPO collects whole rollouts of ``n_steps x n_envs`` steps until it has at least the
    total, so 2,048 steps in rollouts of 8 x 512 train 4,096. This picks the divisor of
    ``total_timesteps / n_envs`` nearest to ``n_steps`` (by ratio; the larger on a tie), so the
    rollouts add up to the total exactly. The total must be a multiple of ``n_envs``: every
    environment steps once per vectorised step.
    """
    if total_timesteps < 1 or n_envs < 1 or n_steps < 1:
        raise ValueError(
            f"total_timesteps, n_envs and n_steps must be positive, got {total_timesteps}, {n_envs}, {n_steps}"
        )
    if total_timesteps % n_envs:
        raise ValueError(
            f"total_timesteps ({total_timesteps}) must be a multiple of n_envs ({n_envs}): every "
            f"environment takes one step per vectorised step"
        )
    per_env = total_timesteps // n_envs
    divisors = [d for i in range(1, math.isqrt(per_env) + 1) if per_env % i == 0 for d in (i, per_env // i)]
    return min(divisors, key=lambda d: (abs(math.log(d / n_steps)), -d))


KEEP = ("last", "best")
#: The ``DallyQueue`` networks (``TrainConfig.queue_net``), by the classes of :mod:`dallygym.learning.nets`.
QUEUE_NETS = ("set", "pointer")
#: The network of a saved ``DallyQueue`` config without ``queue_net`` (it predates the choice).
SAVED_QUEUE_NET = "pointer"
#: Seeds of the warm start's teacher episodes: IMITATION_SEED_BASE x (seed + 1) + episode, far
#: from the validation (100, 101) and held-out (2001-2010) seeds of the generators.
IMITATION_SEED_BASE = 100_000
#: Seeds of the self-search episodes (:func:`self_search`), apart from the warm start's and
#: the validation's: SEARCH_SEED_BASE + 100,000 x seed + round x episodes + episode.
SEARCH_SEED_BASE = 1_000_000_000


def imitation_warm_start(model, config: "TrainConfig", env_id: str) -> dict:
    """Behaviour cloning of :func:`~dallygym.envs.queue.protected_share_action` into ``model``'s
    policy (see :class:`TrainConfig`); returns what it did (for ``meta.json``).

    The teacher plays ``config.imitate_episodes`` episodes of the training distribution
    (traces drawn with seeds ``IMITATION_SEED_BASE x (seed + 1) + episode``). Every step is a
    sample: the candidates' rows (stored without the empty slots), the cluster features,
    whether stopping was valid, the teacher's action and the discounted return from that step
    (``config.gamma``). Then ``imitate_epochs`` epochs of minibatches (:func:`_fit_policy`).
    """
    samples = _teacher_samples(config, env_id)
    fit = _fit_policy(model, config, samples[:5], config.imitate_epochs, config.imitate_learning_rate)
    return {
        "teacher": "protected_share_action",
        "teacher_share": config.teacher_share,
        "episodes": config.imitate_episodes,
        "samples": len(samples[3]),
        "steps_per_episode": samples[5],
        "epochs": config.imitate_epochs,
        "learning_rate": config.imitate_learning_rate,
        **fit,
    }


def _fit_policy(model, config: "TrainConfig", samples: tuple, epochs: int, learning_rate: float) -> dict:
    """Supervised steps on ``model``'s policy: ``samples`` = (rows, clusters, may_stop, actions,
    returns), as :func:`_teacher_samples` gives them. ``epochs`` epochs of minibatches
    (``config.batch_size``, shuffled by the model's seed; Adam step ``learning_rate``) minimise
    −log π(action) + ``vf_coef`` x (V − return)² / Var(returns) with the model's optimiser,
    masks applied as in PPO. Returns the mean loss of the first and the last epoch and the
    returns' standard deviation."""
    import torch as th

    rows, clusters, may_stop, actions, returns = samples
    policy = model.policy
    slots, features = policy.observation_space["jobs"].shape
    n = len(actions)
    actions_t = th.as_tensor(actions)
    returns_t = th.as_tensor(returns, dtype=th.float32)
    clusters_t = th.as_tensor(np.stack(clusters))
    # The value error in units of the returns' variance, so that neither part swamps the other
    # (the returns' scale depends on the reward options; the choice log-loss does not).
    return_var = max(float(np.var(returns)), 1e-6)
    rng = np.random.default_rng(config.seed)
    policy.set_training_mode(True)
    for group in policy.optimizer.param_groups:  # PPO sets its own rate again at every update
        group["lr"] = learning_rate
    losses = []
    sizes = np.array([len(r) for r in rows])
    size = config.batch_size
    for _ in range(epochs):
        # Shuffled batches of similar candidate counts (sorted within chunks of 16 batches),
        # each cut to its largest count: the empty tail is the same for every sample.
        order = rng.permutation(n)
        chunks = [order[i : i + 16 * size] for i in range(0, n, 16 * size)]
        order = np.concatenate([c[np.argsort(sizes[c], kind="stable")] for c in chunks])
        batches = [order[i : i + size] for i in range(0, n, size)]
        for index in rng.permutation(len(batches)):
            batch = batches[index]
            b = len(batch)
            shown = int(sizes[batch].max())
            jobs = np.zeros((b, shown, features), dtype=np.float32)
            job_mask = np.zeros((b, shown), dtype=np.float32)
            masks = np.zeros((b, slots + 1), dtype=bool)
            for row, i in enumerate(batch.tolist()):
                k = len(rows[i])
                jobs[row, :k] = rows[i]
                job_mask[row, :k] = 1.0
                masks[row, :k] = True
                masks[row, slots] = may_stop[i]
            obs_t = {"jobs": th.as_tensor(jobs), "job_mask": th.as_tensor(job_mask), "cluster": clusters_t[batch]}
            values, log_prob, _ = policy.evaluate_actions(obs_t, actions_t[batch], action_masks=masks)
            imitation = -log_prob.mean()
            value = th.nn.functional.mse_loss(values.flatten(), returns_t[batch]) / return_var
            loss = imitation + model.vf_coef * value
            policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), model.max_grad_norm)
            policy.optimizer.step()
            losses.append(loss.item())
    policy.set_training_mode(False)
    per_epoch = max(1, -(-n // config.batch_size))
    return {
        "loss_first_epoch": round(float(np.mean(losses[:per_epoch])), 4),
        "loss_last_epoch": round(float(np.mean(losses[-per_epoch:])), 4),
        "return_std": round(float(np.sqrt(return_var)), 4),
    }


def self_search(model, config: "TrainConfig", env_id: str) -> dict:
    """Expert iteration without a teacher (``config.search_rounds`` > 0): ``model``'s policy
    is improved by search over itself, then learns the improvement, round after round.

    Each round plays ``search_episodes`` episodes of the training distribution (traces drawn
    with seeds ``SEARCH_SEED_BASE + 100,000 x seed + round x search_episodes + episode``; the
    episodes go through the training mix's sizes in order, round after round). At every
    contested pick a :class:`~dallygym.envs.lookahead.LookaheadAgent` whose base is the policy itself
    (:class:`~dallygym.envs.lookahead.ModelOrder`: its most likely candidates, rolled out by its own
    most likely picks) tries the policy's ``search_top_k`` most likely candidates on copies of
    the environment for ``search_horizon`` steps and keeps the best (the makespan limit first,
    then the return); that pick is played and is the sample's target. Then
    ``search_epochs`` epochs of :func:`_fit_policy` on the round's samples. No hand-written rule
    enters: the targets are the policy's own choices, improved by trying them.
    """
    from ..envs.lookahead import LookaheadAgent, ModelOrder

    base = ModelOrder(model)
    rounds = []
    for r in range(config.search_rounds):
        agents: dict[int, LookaheadAgent] = {}  # one per environment (a size of the training mix)

        def teach(env, obs, mask, agents=agents):
            agent = agents.get(id(env))
            if agent is None:
                agent = agents[id(env)] = LookaheadAgent(
                    env, base=base, top_k=config.search_top_k, horizon=config.search_horizon
                )
            return int(agent.predict(obs)[0])

        start = time.perf_counter()
        first = SEARCH_SEED_BASE + 100_000 * config.seed + r * config.search_episodes
        samples = _teacher_samples(config, env_id, teach, config.search_episodes, first, r * config.search_episodes)
        searched = time.perf_counter()
        fit = _fit_policy(model, config, samples[:5], config.search_epochs, config.imitate_learning_rate)
        costs = [agent.cost for agent in agents.values()]
        rounds.append(
            {
                "samples": len(samples[3]),
                "contested": sum(c.contested for c in costs),
                "changed": sum(c.changed for c in costs),
                "copies": sum(c.copies for c in costs),
                "rollout_steps": sum(c.rollout_steps for c in costs),
                "search_s": round(searched - start, 1),
                "fit_s": round(time.perf_counter() - searched, 1),
                **fit,
            }
        )
    return {
        "rounds": rounds,
        "episodes_per_round": config.search_episodes,
        "top_k": config.search_top_k,
        "horizon": config.search_horizon,
        "epochs": config.search_epochs,
        "learning_rate": config.imitate_learning_rate,
    }


def _teacher_samples(
    config: "TrainConfig",
    env_id: str,
    teach=None,
    episodes: int | None = None,
    first_seed: int | None = None,
    first_episode: int = 0,
) -> tuple[list, list, list, list, list, list]:
    """A teacher's episodes: per step the candidates' rows (without the empty slots), the
    cluster features, whether stopping was valid, the teacher's action and the discounted
    return from that step; and the steps of each episode. ``teach(env, obs, mask)`` gives the
    action played (by default :func:`~dallygym.envs.queue.protected_share_action`, the warm
    start's, for ``config.imitate_episodes`` episodes from seed
    ``IMITATION_SEED_BASE x (seed + 1)``). Episode ``k`` is played at the training mix's size
    ``config.rank_racks(first_episode + k)``."""

    from ..envs.queue import protected_share_action

    if teach is None:

        def teach(env, obs, mask):
            return protected_share_action(obs, mask, share=config.teacher_share)

        episodes = config.imitate_episodes
        first_seed = IMITATION_SEED_BASE * (config.seed + 1)
    envs = {racks: config.env_config(racks).make() for racks in config.training_sizes()}
    rows, clusters, may_stop, actions, returns = [], [], [], [], []
    steps_per_episode = []
    for episode in range(episodes):
        env = envs[config.rank_racks(first_episode + episode)]
        obs, info = env.reset(seed=first_seed + episode)
        rewards = []
        done = env.unwrapped._done
        while not done:
            mask = info["action_mask"]
            action = teach(env, obs, mask)
            k = int(obs["job_mask"].sum())
            rows.append(obs["jobs"][:k].copy())
            clusters.append(obs["cluster"].copy())
            may_stop.append(bool(mask[-1]))
            actions.append(action)
            obs, reward, terminated, truncated, info = env.step(action)
            rewards.append(reward)
            done = terminated or truncated
        running = 0.0
        episode_returns = np.empty(len(rewards))
        for i in range(len(rewards) - 1, -1, -1):
            running = rewards[i] + config.gamma * running
            episode_returns[i] = running
        returns.extend(episode_returns.tolist())
        steps_per_episode.append(len(rewards))
    for env in envs.values():
        env.close()
    return rows, clusters, may_stop, actions, returns, steps_per_episode


def _validation_traces(config: TrainConfig) -> list[pd.DataFrame]:
    name = config.trace[4:] if config.trace.startswith("gen:") else "batch-500"
    return [generate_trace(name, seed=s) for s in VALIDATION_SEEDS]


def train(config: TrainConfig) -> Path:
    """Train MaskablePPO as configured; return the path of the saved model (``model.zip``)."""
    import torch

    torch.set_num_threads(config.torch_threads)
    check_train_config(config)
    # Rollouts that add up to exactly the requested steps (config.json records the size used),
    # and the reward named: config.json says what the return is even if a default changes.
    config = replace(
        config,
        n_steps=rollout_steps(config.total_timesteps, config.n_envs, config.n_steps),
        reward=config.reward or RELATIVE_JCT,
    )
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # The settings go to config.json only with the parameters, at the end (commit_agent): a
    # training killed on the way leaves an agent already in ``out`` whole, never its parameters
    # beside the new settings. Until then they are in training.json.
    (out / TRAINING_FILE).write_text(json.dumps(asdict(config), indent=2) + "\n")

    env_id = config.env_id if ":" in config.env_id else f"dallygym:{config.env_id}"
    venv = _training_envs(config, env_id, out)
    eval_env, n_eval_episodes = _validation_envs(config, env_id)
    model = _new_model(config, venv, out)
    # The initial policy, as an agent of its own (RUN/initial): what the training contributed is
    # measured against it.
    commit_agent(out / INITIAL_DIR, model.policy.state_dict(), asdict(config))

    # Optional warm start by behaviour cloning, before any PPO update.
    start = time.perf_counter()
    warm = imitation_warm_start(model, config, env_id) if config.imitate_episodes else None
    if warm is not None:
        warm["wall_s"] = round(time.perf_counter() - start, 1)

    searched = None
    if config.search_rounds:
        began = time.perf_counter()
        searched = self_search(model, config, env_id)
        searched["wall_s"] = round(time.perf_counter() - began, 1)
    # The time limit covers the warm start and the search too: PPO gets what is left of it.
    left = config.time_limit_min
    if left is not None and (warm is not None or searched is not None):
        left = max(0.0, left - (time.perf_counter() - start) / 60.0)
    callbacks, dual = _callbacks(replace(config, time_limit_min=left), venv, eval_env, n_eval_episodes, out)
    evaluation = callbacks[0]
    if warm is not None or searched is not None:
        _score_warm_start(model, eval_env, n_eval_episodes, evaluation, searched or warm, out)

    # Learn, then save the model, what produced it, and the curve.
    model.learn(total_timesteps=config.total_timesteps, callback=callbacks, progress_bar=config.progress_bar)
    wall_s = time.perf_counter() - start
    return _save_run(config, model, venv, out, wall_s, evaluation, warm, dual, searched)


def check_train_config(config: TrainConfig) -> None:
    """What :func:`train` refuses, checked before anything is built or written: a ValueError
    naming the option."""
    config.check_train_racks()
    if config.keep not in KEEP:
        raise ValueError(f"keep must be one of {', '.join(KEEP)}, got {config.keep!r}")
    if config.imitate_episodes < 0 or config.imitate_epochs < 1:
        raise ValueError(
            f"imitate_episodes must be >= 0 and imitate_epochs >= 1, got "
            f"{config.imitate_episodes} and {config.imitate_epochs}"
        )
    if config.imitate_episodes and not is_queue_env(config.env_id):
        raise ValueError(f"imitate_episodes needs a DallyQueue id (the teacher picks jobs), got {config.env_id!r}")
    if config.search_rounds < 0 or config.search_episodes < 1 or config.search_epochs < 1:
        raise ValueError(
            f"search_rounds must be >= 0, search_episodes and search_epochs >= 1, got {config.search_rounds}, "
            f"{config.search_episodes} and {config.search_epochs}"
        )
    if config.search_top_k < 2 or config.search_horizon < 1:
        raise ValueError(
            f"search_top_k must be >= 2 (candidates tried) and search_horizon >= 1 (steps rolled out), got "
            f"{config.search_top_k} and {config.search_horizon}"
        )
    if config.search_rounds and not is_queue_env(config.env_id):
        raise ValueError(f"search_rounds needs a DallyQueue id (the search tries picks), got {config.env_id!r}")
    if not 0.0 < config.teacher_share <= 1.0:
        raise ValueError(f"teacher_share must be a share in (0, 1], got {config.teacher_share!r}")
    for racks in config.training_sizes():  # the environment's own checks, at every size trained on
        config.env_config(racks).check()
    if config.makespan_dual_lr is not None:
        if not (math.isfinite(config.makespan_dual_lr) and config.makespan_dual_lr > 0):
            raise ValueError(f"makespan_dual_lr must be a positive number or None, got {config.makespan_dual_lr!r}")
        if not (math.isfinite(config.makespan_budget_pct) and config.makespan_budget_pct >= 0):
            raise ValueError(f"makespan_budget_pct must be a non-negative number, got {config.makespan_budget_pct!r}")
        if (config.reward or RELATIVE_JCT) != RELATIVE_JCT:
            raise ValueError(
                f"makespan_dual_lr learns the makespan penalty of the {RELATIVE_JCT!r} reward, "
                f"got reward {config.reward!r}"
            )
    if config.validation_makespan_penalty is not None and not (
        math.isfinite(config.validation_makespan_penalty) and config.validation_makespan_penalty >= 0
    ):
        raise ValueError(
            f"validation_makespan_penalty must be a non-negative number or None, "
            f"got {config.validation_makespan_penalty!r}"
        )
    if config.queue_net not in QUEUE_NETS:
        raise ValueError(f"queue_net must be one of {', '.join(QUEUE_NETS)}, got {config.queue_net!r}")


def _training_envs(config: TrainConfig, env_id: str, out: Path):
    """The training environments (a vector of ``config.n_envs``), each with its Monitor file."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    # Each draws a fresh seeded trace at every reset; environment i has config.rank_racks(i)
    # racks. Built as SB3's make_vec_env builds them (action space seeded with seed + rank, a
    # Monitor file per rank, the vector seeded at the first reset), with per-rank keyword
    # arguments, which make_vec_env cannot give.
    monitor_dir = out / "monitor"
    monitor_dir.mkdir(exist_ok=True)

    def training_env(rank: int):
        def build():
            env = config.env_config(config.rank_racks(rank)).make(render_mode="rgb_array")
            env.action_space.seed(config.seed + rank)
            return Monitor(env, filename=str(monitor_dir / str(rank)))

        return build

    venv = (SubprocVecEnv if config.vec_env == "subproc" else DummyVecEnv)(
        [training_env(rank) for rank in range(config.n_envs)]
    )
    venv.seed(config.seed)
    return venv


def _validation_envs(config: TrainConfig, env_id: str):
    """The validation environments and the number of episodes an evaluation plays."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    # One environment per training size, each cycling the fixed validation traces; every
    # evaluation plays each trace once at each size, masks used.
    validation = _validation_traces(config)
    eval_env = DummyVecEnv(
        [
            (lambda racks=racks: Monitor(config.validation_env_config(racks, validation).make()))
            for racks in config.training_sizes()
        ]
    )
    n_eval_episodes = len(VALIDATION_SEEDS) * len(config.training_sizes())
    return eval_env, n_eval_episodes


def _new_model(config: TrainConfig, venv, out: Path):
    """The MaskablePPO model (its network freshly initialised from ``config.seed``)."""
    from sb3_contrib import MaskablePPO

    if is_queue_env(config.env_id):
        from .nets import QUEUE_POLICIES

        policy, policy_kwargs = QUEUE_POLICIES[config.queue_net], {}
    else:
        policy, policy_kwargs = "MlpPolicy", {"net_arch": list(config.net_arch)}
    # The set network's minibatches leave out the slots empty throughout them.
    buffer_class = None
    if is_queue_env(config.env_id) and config.queue_net == "set":
        from .nets import LiveRolloutBuffer as buffer_class
    return MaskablePPO(
        policy,
        venv,
        n_steps=config.n_steps,
        batch_size=config.batch_size,
        n_epochs=config.n_epochs,
        learning_rate=config.learning_rate,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        ent_coef=config.ent_coef,
        policy_kwargs=policy_kwargs,
        seed=config.seed,
        rollout_buffer_class=buffer_class,
        tensorboard_log=str(out / "tensorboard") if config.tensorboard else None,
        device="cpu",
        verbose=0,
    )


def _callbacks(config: TrainConfig, venv, eval_env, n_eval_episodes: int, out: Path):
    """The training's callbacks (the evaluation first) and its makespan multiplier (or None)."""
    from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
    from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback

    class WallClockLimit(BaseCallback):
        def __init__(self, minutes: float | None) -> None:
            super().__init__()
            self.deadline = None if minutes is None else time.monotonic() + 60.0 * minutes

        def _on_step(self) -> bool:
            return self.deadline is None or time.monotonic() < self.deadline

    per_env = lambda steps: max(1, steps // config.n_envs)  # noqa: E731 - SB3 counts calls per env
    callbacks = [
        MaskableEvalCallback(
            eval_env,
            n_eval_episodes=n_eval_episodes,
            eval_freq=per_env(config.eval_freq_steps),
            log_path=str(out / "eval"),
            best_model_save_path=str(out / "best"),
            deterministic=True,
            verbose=0,
        ),
        CheckpointCallback(
            save_freq=per_env(config.checkpoint_freq_steps), save_path=str(out / "checkpoints"), name_prefix="ppo"
        ),
        WallClockLimit(config.time_limit_min),
    ]
    dual = None
    if config.makespan_dual_lr is not None:
        start_penalty = venv.get_attr("makespan_penalty")[0]
        dual = MakespanMultiplier(start_penalty, config.makespan_dual_lr, config.makespan_budget_pct)

        # The reward as a weighted mean from the first episode on (applied at the first reset).
        venv.env_method("set_makespan_penalty", start_penalty, normalise=True)

        class DualAscent(BaseCallback):
            def _on_step(self) -> bool:
                dual.observe(self.locals["infos"], self.locals["dones"])
                return True

            def _on_rollout_end(self) -> None:
                penalty = dual.update(self.num_timesteps)
                if penalty is not None:
                    self.training_env.env_method("set_makespan_penalty", penalty, normalise=True)
                    self.logger.record("train/makespan_penalty", penalty)

        callbacks.append(DualAscent())
    return callbacks, dual


def _score_warm_start(model, eval_env, n_eval_episodes: int, evaluation, warm: dict, out: Path) -> None:
    """The warm start is the first candidate for "best": its validation return, saved as such."""
    from sb3_contrib.common.maskable.evaluation import evaluate_policy

    returns, _ = evaluate_policy(
        model, eval_env, n_eval_episodes=n_eval_episodes, deterministic=True, return_episode_rewards=True
    )
    warm["validation_return"] = round(float(np.mean(returns)), 4)
    evaluation.best_mean_reward = float(np.mean(returns))
    (out / "best").mkdir(exist_ok=True)
    model.save(out / "best" / "best_model")


def _save_run(
    config: TrainConfig, model, venv, out: Path, wall_s: float, evaluation, warm, dual, searched: dict | None = None
) -> Path:
    """Save the kept parameters, what produced them and the curve; the path of ``model.zip``."""
    from sb3_contrib import MaskablePPO

    trained = int(model.num_timesteps)
    path = out / "model.zip"
    best_zip = out / "best" / "best_model.zip"
    if config.keep == "best" and best_zip.exists():
        # model.zip and policy.pth hold the kept parameters; the last ones go with the checkpoints.
        model.save(out / "checkpoints" / "ppo_last.zip")
        model = MaskablePPO.load(best_zip, device="cpu")
    model.save(path)
    commit_agent(out, model.policy.state_dict(), asdict(config))  # what `dallygym evaluate` loads
    (out / TRAINING_FILE).unlink(missing_ok=True)
    venv.close()
    meta = {
        "command": _command_line(),
        "timesteps": trained,
        "wall_s": round(wall_s, 1),
        "stopped_by_time_limit": trained < config.total_timesteps,
        "env_kwargs": config.env_kwargs(),
        "kept": config.keep,
        "best_validation_return": (
            None if not np.isfinite(evaluation.best_mean_reward) else round(float(evaluation.best_mean_reward), 4)
        ),
    }
    if warm is not None:
        meta["imitation_warm_start"] = warm
    if searched is not None:
        meta["self_search"] = searched
    if dual is not None:
        meta["makespan_multiplier"] = {"final": round(dual.penalty, 4), "updates": len(dual.history)}
        history = pd.DataFrame(dual.history, columns=MakespanMultiplier.COLUMNS)
        history.to_csv(out / MakespanMultiplier.FILE, index=False)
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    plot_training_curve(out)
    return path


class MakespanMultiplier:
    """The ``"relative-jct"`` reward's makespan penalty as a Lagrange multiplier (see
    :class:`TrainConfig`, ``makespan_dual_lr``). :meth:`observe` collects the makespan excess
    of the training episodes that end (``info["makespan_excess_pct"]``); :meth:`update`, at a
    rollout's end, takes one step of projected dual ascent on the penalty,

        penalty <- max(0, penalty + lr x (mean of max(0, excess %) − budget %)),

    and returns the new penalty (None if no episode ended, which leaves it). During training a
    callback sends it to every environment with ``set_makespan_penalty`` (it applies from each
    one's next episode). :attr:`history` keeps one row per update (:attr:`COLUMNS`), written
    to ``RUN/makespan_multiplier.csv`` at the end of training."""

    FILE = "makespan_multiplier.csv"
    COLUMNS = ("timesteps", "episodes", "mean_excess_pct", "violations", "penalty")

    def __init__(self, penalty: float, lr: float, budget_pct: float) -> None:
        self.penalty = float(penalty)
        self.lr = float(lr)
        self.budget_pct = float(budget_pct)
        self.history: list[tuple] = []
        self._excess: list[float] = []

    def observe(self, infos, dones) -> None:
        for info, done in zip(infos, dones):
            if done and "makespan_excess_pct" in info:
                self._excess.append(float(info["makespan_excess_pct"]))

    def update(self, timesteps: int) -> float | None:
        if not self._excess:
            return None
        excess = np.asarray(self._excess)
        cost = float(np.mean(np.maximum(excess, 0.0)))
        self.penalty = max(0.0, self.penalty + self.lr * (cost - self.budget_pct))
        violations = int(np.sum(excess > self.budget_pct))
        self.history.append((int(timesteps), len(excess), cost, violations, self.penalty))
        self._excess = []
        return self.penalty


def _command_line() -> str:
    """The command that is running, as typed (the program's name without its directory;
    ``python -m dallygym`` for the package's ``__main__``)."""
    if not sys.argv or not sys.argv[0]:
        return ""
    program = Path(sys.argv[0])
    head = ["python", "-m", program.parent.name] if program.name == "__main__.py" else [program.name]
    return shlex.join([*head, *sys.argv[1:]])


def training_curve(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Episode returns from the Monitor logs and the periodic evaluations of a run."""
    run_dir = Path(run_dir)
    frames = []
    for path in sorted((run_dir / "monitor").glob("*.monitor.csv")):
        frame = pd.read_csv(path, skiprows=1)
        frames.append(frame)
    episodes = pd.concat(frames).sort_values("t").reset_index(drop=True) if frames else pd.DataFrame()
    if not episodes.empty:
        episodes["timesteps"] = episodes["l"].cumsum()
    evals = pd.DataFrame()
    npz = run_dir / "eval" / "evaluations.npz"
    if npz.exists():
        data = np.load(npz)
        evals = pd.DataFrame({"timesteps": data["timesteps"], "mean_return": data["results"].mean(axis=1)})
    return episodes, evals


def _return_label(run_dir: Path) -> str:
    """What a run's episode return is, from its ``config.json`` (the environment's default
    reward when the run left it unset; each reward's return is defined in its docstring)."""
    try:
        config = json.loads((run_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return "episode return"
    queue = str(config.get("env_id", "")).startswith("DallyQueue")
    # A config without a reward predates the relative reward: it trained on the defaults of then.
    reward = config.get("reward") or ("jct-makespan" if queue else "jct")
    if reward == "relative-jct":
        penalty = config.get("makespan_penalty")
        return (
            f"episode return = −(% JCT over Dally) − {penalty if penalty is not None else 3:g}·(% makespan over Dally)"
        )
    weight = config.get("makespan_weight")
    if queue:  # every DallyQueue reward is a total over 100 leases (see DallyQueueEnv)
        total = {"jct-makespan": f"mean JCT + {weight if weight is not None else 1:g}·makespan", "jct": "mean JCT"}.get(
            reward, reward
        )
        return f"episode return = −({total}) / (100 leases)"
    return "episode return = −mean JCT (leases)" if reward == "jct" else f"episode return ({reward} reward)"


def plot_training_curve(run_dir: str | Path) -> Path | None:
    """Write ``curve.png`` (training and validation returns against timesteps)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    run_dir = Path(run_dir)
    episodes, evals = training_curve(run_dir)
    fig, ax = plt.subplots(figsize=(7, 4))
    if not episodes.empty:
        ax.plot(episodes["timesteps"], episodes["r"], ".", alpha=0.3, label="training episodes")
        window = max(1, len(episodes) // 20)
        ax.plot(
            episodes["timesteps"], episodes["r"].rolling(window, min_periods=1).mean(), label="training (rolling mean)"
        )
    if not evals.empty:
        ax.plot(evals["timesteps"], evals["mean_return"], "o-", label="validation traces")
    ax.set_xlabel("timesteps (decisions)")
    ax.set_ylabel(_return_label(run_dir))
    ax.set_title(run_dir.name)
    ax.legend()
    fig.tight_layout()
    path = run_dir / "curve.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


#: The saved form of a learned agent that ``dallygym evaluate`` loads: the policy network's
#: parameters (a state dict of tensors) and, next to it, ``config.json`` (the settings it was
#: trained with and the parameters' hash). Read and written by :mod:`dallygym.learning.agent_files`.


def _queue_policy_network(config: dict, where: str):
    """The network of a ``DallyQueue`` agent (not loaded): the class its config's ``queue_net``
    names (:data:`SAVED_QUEUE_NET` if it has none); its spaces are those of the environment its
    config names."""
    import gymnasium as gym

    from ..envs.queue import observation_dims
    from .nets import QUEUE_POLICIES

    env_id = config.get("env_id", "DallyQueue-v0")
    job_dim, cluster_dim = observation_dims(bool(config.get("limit_features", False)))
    # Bounded by agent_files.check_config, which every config read from a file has passed.
    slots = config.get("max_candidates") or gym.spec(env_id.split(":")[-1]).kwargs.get("max_candidates", 512)
    obs_space = gym.spaces.Dict(
        {
            "jobs": gym.spaces.Box(0.0, 1.0, shape=(slots, job_dim), dtype=np.float32),
            "job_mask": gym.spaces.Box(0.0, 1.0, shape=(slots,), dtype=np.float32),
            "cluster": gym.spaces.Box(0.0, 1.0, shape=(cluster_dim,), dtype=np.float32),
        }
    )
    # No orthogonal initialisation: every parameter is overwritten by the load, and the QR
    # decompositions it takes grow with the slots (minutes at a few thousand).
    name = config.get("queue_net", SAVED_QUEUE_NET)
    if name not in QUEUE_POLICIES:
        raise AgentLoadError(f"{where}: queue_net must be one of {', '.join(QUEUE_NETS)}, got {str(name)[:60]}")
    return QUEUE_POLICIES[name](obs_space, gym.spaces.Discrete(slots + 1), lr_schedule=lambda _: 0.0, ortho_init=False)


def _empty_policy_network(config: dict, where: str):
    """The MaskablePPO policy network of ``config``'s architecture, its parameters not loaded.
    ``config`` has passed :func:`dallygym.learning.agent_files.check_config`, which bounds the network's
    size before anything is built (the architecture is the file's author's to choose)."""
    from gymnasium import spaces
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    from ..envs.offer import OBS_DIM

    if is_queue_env(str(config.get("env_id", "Dally-v0"))):
        return _queue_policy_network(config, where)
    net_arch = config.get("net_arch", TrainConfig().net_arch)
    return MaskableActorCriticPolicy(
        spaces.Box(0.0, 1.0, shape=(OBS_DIM,), dtype=np.float32),
        spaces.Discrete(4),
        lr_schedule=lambda _: 0.0,
        net_arch=list(net_arch),
        ortho_init=False,
    )


def _load_into(policy, state: dict, config: dict, where: str):
    """``policy`` with ``state`` loaded strictly (every name and shape), in evaluation mode; a
    network trained on another number of features is named as such."""
    from ..envs.offer import OBS_DIM
    from ..envs.queue import observation_dims

    env_id = config.get("env_id", "Dally-v0")
    first, features = (
        ("features_extractor.phi.0.weight", "job features")
        if is_queue_env(str(env_id))
        else ("mlp_extractor.policy_net.0.weight", "observation features")
    )
    expected = observation_dims(bool(config.get("limit_features", False)))[0] if is_queue_env(str(env_id)) else OBS_DIM
    trained = state.get(first)
    if trained is not None and trained.ndim == 2 and trained.shape[1] != expected:
        raise AgentLoadError(
            f"{where}: the agent was trained on {trained.shape[1]} {features}; this version of {env_id} has {expected}"
        )
    try:
        policy.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())
        arch = "" if is_queue_env(str(env_id)) else f" net_arch {config.get('net_arch', TrainConfig().net_arch)}"
        raise AgentLoadError(f"{where}: parameters do not fit the {env_id} network{arch} ({detail[:200]})") from None
    policy.set_training_mode(False)
    return policy


def _policy_network(state: dict, config: dict, where: str):
    """The MaskablePPO policy network of ``config``'s architecture, with ``state`` loaded."""
    return _load_into(_empty_policy_network(config, where), state, config, where)


class LearnedAgent:
    """A learned agent loaded from parameters and JSON only: nothing in its files is executed.

    ``path`` is a run directory, or a ``policy.pth`` inside one. What is read, and how, is
    :mod:`dallygym.learning.agent_files`'s to say: ``config.json`` parsed by ``json`` and checked against
    :class:`TrainConfig`'s fields (its ``env_id`` one of dallygym's ids, never a module path;
    sizes bounded), then the network rebuilt from it, then ``policy.pth`` (a regular file, never
    a link, no larger than that network, with the hash the config records) through torch's
    tensors-only loader, loaded into the network strictly (every name and shape must match). A
    stable-baselines3 ``model.zip`` is never loaded: its ``data`` entry is a set of cloudpickle
    blobs that can run any code when unpickled. :func:`convert_agent` (``dallygym agent
    convert``) writes an agent from a zip without unpickling it.
    """

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self.path = path / POLICY_FILE if path.is_dir() else path
        if self.path.suffix == ".zip":
            raise AgentLoadError(
                f"{self.path}: a stable-baselines3 archive is not loaded (unpickling its 'data' entry can run "
                f"any code); write an agent from it with: dallygym agent convert {self.path}"
            )
        if not (self.path.exists() or self.path.is_symlink()):
            hint = f"; if it holds a model.zip you trust, run: dallygym agent convert {path}" if path.is_dir() else ""
            raise AgentLoadError(f"{self.path}: no such file (a learned agent is {POLICY_FILE} + {CONFIG_FILE}){hint}")
        config = read_config(self.path.parent)
        # The network first (its size bounded by the checked config), then only as many bytes
        # of parameters as it can hold.
        network = _empty_policy_network(config, str(self.path))
        state = read_policy(self.path, config, policy_limit(network))
        #: The settings it was trained with (TrainConfig defaults for keys it lacks, but the
        #: network a config without ``queue_net`` was trained with).
        known = {k: v for k, v in config.items() if k in TrainConfig.__dataclass_fields__}
        self.config = TrainConfig(**{"queue_net": SAVED_QUEUE_NET, **known})
        self.policy = _load_into(network, state, config, str(self.path))
        self.env_id = self.config.env_id
        self.sensitivity = self.config.sensitivity
        self.reward = self.config.reward
        self.priority = self.config.priority
        self.offer_rule = self.config.offer_rule
        self.name = self.path.parent.name

    def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
        return self.policy.predict(
            observation,
            state=state,
            episode_start=episode_start,
            deterministic=deterministic,
            action_masks=action_masks,
        )


def load_agent(name_or_path: str) -> str | LearnedAgent | PriorityAgent:
    """A shipped policy name (returned as is) or a saved agent loaded without executing
    anything from its files: a network agent (run directory or its ``policy.pth``:
    :class:`LearnedAgent`) or a priority agent (run directory or its ``priority.json``:
    :class:`~dallygym.learning.priority_search.PriorityAgent`)."""
    if name_or_path in POLICIES:
        return name_or_path
    path = Path(name_or_path)
    if not path.exists():
        raise ValueError(
            f"agent {name_or_path!r} is neither a policy name ({', '.join(POLICIES)}) "
            f"nor a saved agent (a run directory, its {POLICY_FILE} or its {PRIORITY_FILE})"
        )
    if is_priority_agent(path):
        return PriorityAgent(path)
    return LearnedAgent(path)


def run_agent(
    agent: str | LearnedAgent | PriorityAgent,
    trace,
    cluster: ClusterSpec,
    seed: int = 0,
    contention: Contention | None = None,
):
    """Full results (:class:`~dallygym.sim.metrics.RunResult`) of one agent on one trace.

    A heuristic name and a priority agent run natively (their own priority and decisions:
    exactly ``simulate``); a network agent acts in the environment it was trained in (its saved config: ``Dally-v0``
    offers under its priority rule, or ``DallyQueue-v0`` picks under its offer rule), with its
    observation settings, on this trace and cluster. ``contention`` (None: none) runs either
    with jobs sharing links (:mod:`dallygym.sim.contention`).
    """

    from ..envs.heuristics import evaluate
    from ..sim.metrics import collect

    shared = (
        {} if contention is None else {"contention": contention.mode, "oversubscription": contention.oversubscription}
    )
    if isinstance(agent, str | PriorityAgent):
        config = EngineConfig(**shared) if shared else None
        policy = agent
        if isinstance(agent, PriorityAgent):  # its makespan limit, if it reads one: Dally's, as in training
            limit = (
                simulate(trace, cluster, policy="dally", config=config).summary["makespan_s"]
                if agent.needs_limit
                else None
            )
            policy = agent.policy(limit)
        return simulate(trace, cluster, policy=policy, config=config)
    config = getattr(agent, "config", None)
    if config is None:  # a hand-written Dally-v0 agent (e.g. a probe): its attributes say how it observes
        settings = {
            "priority": getattr(agent, "priority", "dally"),
            "sensitivity": getattr(agent, "sensitivity", "hidden"),
            "reward": getattr(agent, "reward", "jct"),
        }
        env_id = "Dally-v0"
    else:
        settings, env_id = config.env_kwargs(), agent.env_id
    kwargs = {
        **settings,
        "racks": cluster.racks,
        "machines_per_rack": cluster.machines_per_rack,
        "gpus_per_machine": cluster.gpus_per_machine,
        "trace": trace,
        **shared,
    }
    env = EnvConfig(env_id, kwargs).make().unwrapped
    with one_torch_thread():
        evaluate(env, agent, seed=seed)
    return collect(env.engine)


@contextlib.contextmanager
def one_torch_thread():
    """Run the block with one torch thread (restored after), if torch is loaded.

    A learned agent's forward pass is one observation through a small network: its matrix
    products are far too small to split, and with a second thread they wait on each other
    (measured, ``queue-ppo-s1`` on a held-out batch-500 draw at 8 racks on a busy 2-core
    machine: 39 s with torch's default threads, 12 s with one; the actions are the same).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_name(sensitivity: str, priority: str, seed: int) -> str:
    """The directory name of one run of a training sweep: ``ppo-hidden-seed0``, and
    ``ppo-hidden-tiresias-order-seed0`` for offers in another priority order."""
    order = "" if priority == "dally" else f"-{priority}-order"
    return f"ppo-{sensitivity}{order}-seed{seed}"


def default_eval_traces() -> list[str]:
    """The held-out batch-500 traces (seeds 2001-2003) shipped with the package, if any."""
    from ..sim.trace.schema import shipped_trace_dir

    directory = shipped_trace_dir()
    if directory is None:
        return []
    return [
        str(p) for p in (directory / "heldout" / f"batch-500-seed{s}.csv" for s in (2001, 2002, 2003)) if p.is_file()
    ]


#: The files of a run that a training sweep brings back from the worker that trained it.
_RUN_FILES = (POLICY_FILE, CONFIG_FILE, "meta.json")


def _train_task(job: tuple[TrainConfig, list[str]]) -> dict:
    """One run of a training sweep, on whatever worker gets it: train, read the curves,
    evaluate the agent on the evaluation traces; return all of it and the run's small files."""
    config, eval_traces = job
    train(config)
    out = Path(config.out_dir)
    episodes, evals = training_curve(out)
    agent = LearnedAgent(out)
    cluster = ClusterSpec(config.racks, config.machines_per_rack, config.gpus_per_machine)
    evaluation = []
    for trace in eval_traces:
        summary = run_agent(agent, load_trace(trace, cluster=cluster), cluster).summary
        evaluation.append({"trace": Path(trace).stem, **{k: summary[k] for k in SUMMARY_KEYS}})
    return {
        "meta": json.loads((out / "meta.json").read_text()),
        "validation": evals.to_dict("records"),
        "training": episodes[["timesteps", "r"]].to_dict("records") if not episodes.empty else [],
        "evaluation": evaluation,
        "files": {name: (out / name).read_bytes() for name in _RUN_FILES},
    }


def train_sweep(
    configs: list[TrainConfig], eval_traces: list[str], backend=None, out: str | Path | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Independent training runs as tasks of a :mod:`dallygym.experiments.sweep` backend (one CPU each).

    Each run trains into its ``config.out_dir``; on a cluster that directory is on the node that
    trained it, so the run's ``policy.pth``, ``config.json`` and ``meta.json`` come back with
    its results and are written here too. Returns ``(runs, curves, failed)``: ``runs`` has one
    row per run and evaluation trace (the run, its seed, mode, steps, wall time, last and best
    validation return, and the summary keys of ``simulate``), ``curves`` the validation and
    training returns against timesteps, ``failed`` the runs that raised (each also on stderr).
    With ``out``, both tables are written there as ``runs.csv`` and ``curves.csv``.
    """
    from ..experiments.sweep import LocalBackend

    backend = backend or LocalBackend(1)
    for trace in eval_traces:
        load_trace(trace)  # a bad evaluation trace fails here, before hours of training
    runs, curves, failed = [], [], []
    for index, ok, value in backend.imap_unordered(_train_task, [(c, list(eval_traces)) for c in configs]):
        config = configs[index]
        name = Path(config.out_dir).name
        if not ok:
            failed.append(name)
            print(
                f"dallygym: run failed: {name} (seed {config.seed}, {config.sensitivity}): {value.error}",
                file=sys.stderr,
                flush=True,
            )
            continue
        here = Path(config.out_dir)
        here.mkdir(parents=True, exist_ok=True)
        for file_name, data in value["files"].items():  # parameters first, the config that binds them last
            if not (here / file_name).is_file() or (here / file_name).read_bytes() != data:
                write_atomic(here / file_name, data)
        meta = value["meta"]
        run_rows, run_curves = _sweep_rows(name, config, value)
        runs += run_rows
        curves += run_curves
        print(
            f"dallygym: run done: {name} ({meta['timesteps']} steps, {meta['wall_s']} s)", file=sys.stderr, flush=True
        )
    order = {Path(c.out_dir).name: i for i, c in enumerate(configs)}
    runs_frame = pd.DataFrame(sorted(runs, key=lambda r: order[r["run"]]))  # stable: trace order kept
    curves_frame = pd.DataFrame(
        sorted(curves, key=lambda r: order[r["run"]]), columns=["run", "seed", "kind", "timesteps", "return"]
    )
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        runs_frame.to_csv(Path(out) / "runs.csv", index=False)
        curves_frame.to_csv(Path(out) / "curves.csv", index=False)
    return runs_frame, curves_frame, failed


def _sweep_rows(name: str, config: TrainConfig, value: dict) -> tuple[list[dict], list[dict]]:
    """One finished sweep run's rows of :func:`train_sweep`'s two tables: its facts with each
    evaluation row, and its validation and training returns."""
    meta, validation = value["meta"], value["validation"]
    returns = [v["mean_return"] for v in validation]
    facts = {
        "run": name,
        "seed": config.seed,
        "sensitivity": config.sensitivity,
        "priority": config.priority,
        "timesteps": meta["timesteps"],
        "wall_s": meta["wall_s"],
        "stopped_by_time_limit": meta["stopped_by_time_limit"],
        "final_validation_return": returns[-1] if returns else math.nan,
        "best_validation_return": max(returns) if returns else math.nan,
    }
    rows = [{**facts, **row} for row in value["evaluation"]] or [facts]
    curves = [
        {
            "run": name,
            "seed": config.seed,
            "kind": "validation",
            "timesteps": int(v["timesteps"]),
            "return": float(v["mean_return"]),
        }
        for v in validation
    ]
    curves += [
        {
            "run": name,
            "seed": config.seed,
            "kind": "training",
            "timesteps": int(e["timesteps"]),
            "return": float(e["r"]),
        }
        for e in value["training"]
    ]
    return rows, curves


def evaluate_agents(
    agents: list[str], traces: list[str], cluster: ClusterSpec, seed: int = 0, contention: Contention | None = None
) -> pd.DataFrame:
    """One row per (agent, trace): ``agent, trace`` and the summary keys of ``simulate``
    (``contention``: as :func:`run_agent`'s)."""
    loaded = [load_agent(a) for a in agents]
    frames = {t: load_trace(t, cluster=cluster) for t in traces}
    rows = []
    for agent, given in zip(loaded, agents):
        for trace_name, frame in frames.items():
            summary = run_agent(agent, frame, cluster, seed=seed, contention=contention).summary
            rows.append({"agent": given, "trace": trace_name, **{k: summary[k] for k in SUMMARY_KEYS}})
    return pd.DataFrame(rows)
