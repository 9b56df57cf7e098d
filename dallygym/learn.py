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

import json
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .cluster import ClusterSpec
from .metrics import SUMMARY_KEYS
from .policies import POLICIES
from .simulate import simulate
from .trace import generate_trace, load_trace

#: Seeds of the validation traces used during training (never the held-out test seeds).
VALIDATION_SEEDS = (100, 101)


@dataclass
class TrainConfig:
    """Settings of one training run (all saved next to the model in ``config.json``).

    The defaults are for ``Dally-v0`` at the paper's 8 racks: a fresh ``batch-500`` draw per
    reset, Decima's JCT reward, the paper's constraint that the model is hidden. PPO settings:
    long episodes (about 3,000 decisions) and a dense reward, so a high discount (0.999) and
    a small entropy bonus. Eight environments stepped in one process (``vec_env="dummy"``):
    the policy's forward pass is batched over them, and on 2 cores that beats one process per
    environment. One torch thread: the 64 x 64 network's tensors are tiny, and more threads
    only contend (measured: 1,852 against 511 steps/s with two runs sharing 2 cores).
    ``total_timesteps`` fixes the run (same seed, same model); ``time_limit_min`` is a guard.

    For a ``DallyQueue`` id (:func:`is_queue_env`) the environment takes ``offer_rule`` instead
    of ``priority``, the reward defaults to the environment's (``"jct-makespan"``) and the
    network is :class:`dallygym.nets.JobPointerPolicy` (``net_arch`` is not used).
    """

    env_id: str = "Dally-v0"
    racks: int = 8
    machines_per_rack: int = 8
    gpus_per_machine: int = 8
    trace: str = "gen:batch-500"
    priority: str = "dally"
    sensitivity: str = "hidden"
    reward: str | None = None
    offer_rule: str = "dally"
    makespan_weight: float | None = None
    max_candidates: int | None = None
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
    eval_freq_steps: int = 100_000
    checkpoint_freq_steps: int = 250_000
    torch_threads: int = 1
    out_dir: str = "agents/runs/ppo"
    tensorboard: bool = False
    progress_bar: bool = True

    def env_kwargs(self) -> dict:
        """Keyword arguments of the training environments (the evaluation uses the same
        cluster shape and observation mode). Options left None take the environment's default."""
        kwargs = {
            "racks": self.racks, "machines_per_rack": self.machines_per_rack,
            "gpus_per_machine": self.gpus_per_machine, "trace": self.trace,
            "sensitivity": self.sensitivity, "reward": self.reward,
        }
        if is_queue_env(self.env_id):
            kwargs.update(offer_rule=self.offer_rule, makespan_weight=self.makespan_weight,
                          max_candidates=self.max_candidates)
        else:
            kwargs["priority"] = self.priority
        return {k: v for k, v in kwargs.items() if v is not None}


def is_queue_env(env_id: str) -> bool:
    """Whether a registered id is a ``DallyQueueEnv`` (the agent picks jobs, not tiers)."""
    import gymnasium as gym

    import dallygym  # noqa: F401 - registers the ids

    entry = gym.spec(env_id.split(":")[-1]).entry_point
    return isinstance(entry, str) and entry.endswith(":DallyQueueEnv")


def _validation_traces(config: TrainConfig) -> list[pd.DataFrame]:
    name = config.trace[4:] if config.trace.startswith("gen:") else "batch-500"
    return [generate_trace(name, seed=s) for s in VALIDATION_SEEDS]


def train(config: TrainConfig) -> Path:
    """Train MaskablePPO as configured; return the path of the saved model (``model.zip``)."""
    import gymnasium as gym
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
    from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    import torch

    torch.set_num_threads(config.torch_threads)
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(asdict(config), indent=2) + "\n")

    # 1. Training environments: each draws a fresh seeded trace at every reset.
    env_id = config.env_id if ":" in config.env_id else f"dallygym:{config.env_id}"
    venv = make_vec_env(
        env_id, n_envs=config.n_envs, seed=config.seed, env_kwargs=config.env_kwargs(),
        monitor_dir=str(out / "monitor"),
        vec_env_cls=SubprocVecEnv if config.vec_env == "subproc" else DummyVecEnv,
    )
    # 2. Evaluation environment: fixed validation traces, cycled, masks used.
    eval_kwargs = {**config.env_kwargs(), "trace": _validation_traces(config)}
    eval_env = Monitor(gym.make(env_id, **eval_kwargs))

    # 3. The model.
    if is_queue_env(config.env_id):
        from .nets import JobPointerPolicy

        policy, policy_kwargs = JobPointerPolicy, {}
    else:
        policy, policy_kwargs = "MlpPolicy", {"net_arch": list(config.net_arch)}
    model = MaskablePPO(
        policy, venv, n_steps=config.n_steps, batch_size=config.batch_size, n_epochs=config.n_epochs,
        learning_rate=config.learning_rate, gamma=config.gamma, gae_lambda=config.gae_lambda,
        ent_coef=config.ent_coef, policy_kwargs=policy_kwargs, seed=config.seed,
        tensorboard_log=str(out / "tensorboard") if config.tensorboard else None, device="cpu", verbose=0,
    )

    # 4. Callbacks: evaluation, checkpoints, wall-clock limit.
    class WallClockLimit(BaseCallback):
        def __init__(self, minutes: float | None) -> None:
            super().__init__()
            self.deadline = None if minutes is None else time.monotonic() + 60.0 * minutes

        def _on_step(self) -> bool:
            return self.deadline is None or time.monotonic() < self.deadline

    per_env = lambda steps: max(1, steps // config.n_envs)  # noqa: E731 - SB3 counts calls per env
    callbacks = [
        MaskableEvalCallback(eval_env, n_eval_episodes=len(VALIDATION_SEEDS), eval_freq=per_env(config.eval_freq_steps),
                             log_path=str(out / "eval"), best_model_save_path=str(out / "best"),
                             deterministic=True, verbose=0),
        CheckpointCallback(save_freq=per_env(config.checkpoint_freq_steps), save_path=str(out / "checkpoints"),
                           name_prefix="ppo"),
        WallClockLimit(config.time_limit_min),
    ]

    # 5. Learn, then save the model, what produced it, and the curve.
    start = time.perf_counter()
    model.learn(total_timesteps=config.total_timesteps, callback=callbacks, progress_bar=config.progress_bar)
    wall_s = time.perf_counter() - start
    path = out / "model.zip"
    model.save(path)
    venv.close()
    meta = {"command": _command_line(), "timesteps": int(model.num_timesteps), "wall_s": round(wall_s, 1),
            "env_kwargs": config.env_kwargs()}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    plot_training_curve(out)
    return path


def _command_line() -> str:
    """The command that is running, as typed (the program's name without its directory)."""
    argv = [Path(sys.argv[0]).name, *sys.argv[1:]] if sys.argv and sys.argv[0] else []
    return shlex.join(argv)


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
        ax.plot(episodes["timesteps"], episodes["r"].rolling(window, min_periods=1).mean(), label="training (rolling mean)")
    if not evals.empty:
        ax.plot(evals["timesteps"], evals["mean_return"], "o-", label="validation traces")
    ax.set_xlabel("timesteps (decisions)")
    ax.set_ylabel("episode return = −mean JCT (leases)")
    ax.set_title(run_dir.name)
    ax.legend()
    fig.tight_layout()
    path = run_dir / "curve.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


class LearnedAgent:
    """A saved MaskablePPO model with the environment settings it was trained with."""

    def __init__(self, path: str | Path) -> None:
        from sb3_contrib import MaskablePPO

        self.path = Path(path)
        self.model = MaskablePPO.load(self.path, device="cpu")
        config_path = self.path.parent / "config.json"
        config = json.loads(config_path.read_text()) if config_path.exists() else {}
        known = {k: v for k, v in config.items() if k in TrainConfig.__dataclass_fields__}
        #: The settings it was trained with (defaults for a model saved without them).
        self.config = TrainConfig(**known)
        self.env_id = self.config.env_id
        self.sensitivity = self.config.sensitivity
        self.reward = self.config.reward
        self.priority = self.config.priority
        self.name = self.path.parent.name if self.path.name == "model.zip" else self.path.stem

    def predict(self, observation, state=None, episode_start=None, deterministic=True, action_masks=None):
        return self.model.predict(observation, state=state, episode_start=episode_start,
                                  deterministic=deterministic, action_masks=action_masks)


def load_agent(name_or_path: str) -> str | LearnedAgent:
    """A shipped policy name (returned as is) or a saved model (``.zip``) loaded."""
    if name_or_path in POLICIES:
        return name_or_path
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "model.zip"
    if not path.exists():
        raise ValueError(f"agent {name_or_path!r} is neither a policy name ({', '.join(POLICIES)}) "
                         f"nor a saved model file")
    return LearnedAgent(path)


def run_agent(agent: str | LearnedAgent, trace, cluster: ClusterSpec, seed: int = 0):
    """Full results (:class:`~dallygym.metrics.RunResult`) of one agent on one trace.

    A heuristic name runs natively (its own priority and decisions: exactly ``simulate``); a
    learned agent acts in the environment it was trained in (its saved config: ``Dally-v0``
    offers under its priority rule, or ``DallyQueue-v0`` picks under its offer rule), with its
    observation settings, on this trace and cluster.
    """
    import gymnasium as gym

    from .heuristics import evaluate
    from .metrics import collect

    if isinstance(agent, str):
        return simulate(trace, cluster, policy=agent)
    kwargs = {**agent.config.env_kwargs(), "racks": cluster.racks, "machines_per_rack": cluster.machines_per_rack,
              "gpus_per_machine": cluster.gpus_per_machine, "trace": trace}
    env_id = agent.env_id if ":" in agent.env_id else f"dallygym:{agent.env_id}"
    env = gym.make(env_id, **kwargs).unwrapped
    evaluate(env, agent, seed=seed)
    return collect(env.engine)


def evaluate_agents(agents: list[str], traces: list[str], cluster: ClusterSpec, seed: int = 0) -> pd.DataFrame:
    """One row per (agent, trace): ``agent, trace`` and the summary keys of ``simulate``."""
    loaded = [load_agent(a) for a in agents]
    frames = {t: load_trace(t, cluster=cluster) for t in traces}
    rows = []
    for agent, given in zip(loaded, agents):
        for trace_name, frame in frames.items():
            summary = run_agent(agent, frame, cluster, seed=seed).summary
            rows.append({"agent": given, "trace": trace_name, **{k: summary[k] for k in SUMMARY_KEYS}})
    return pd.DataFrame(rows)
