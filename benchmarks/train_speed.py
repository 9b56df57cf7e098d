"""Training throughput on ``DallyQueue-v0`` against CartPole-v1's raw step rate.

    python benchmarks/train_speed.py [--steps 16384] [--profile-steps 8192] \
        [--variant LABEL[@GITREF][:key=value,...]] ... [--out benchmarks/results]

In one process and one run (the machine is shared and noisy; the ratio to CartPole is the more
stable figure):

1. CartPole-v1's raw steps/s: ``gym.make("CartPole-v1")``, random actions, ``--cartpole-s``
   seconds, resets included.
2. For every variant and every case -- by default ``train racks 2 4 8 16`` (``TrainConfig.train_racks``
   ``[2, 4, 8, 16]``; validation at 8 racks) and ``8 racks`` alone; ``--cases`` adds ``train racks
   2 2 4 4 8 16`` (the sizes of the headline agents) and 2, 4 or 16 racks alone -- the real
   training procedure, :func:`dallygym.learning.trainer.train`, with a config like the
   one ``dallygym train --env-id DallyQueue-v0`` builds (a fresh ``batch-500`` draw per reset, the
   CLI's defaults unless the variant overrides them), for exactly ``--steps`` timesteps with no
   evaluation, checkpoint or progress bar during the run. steps/s = timesteps / the run's
   ``wall_s`` (``meta.json``: the whole of ``model.learn`` -- resets, rollouts, updates), and its
   ratio to CartPole (the one at the start, and the mean of 1-s CartPole measurements just
   before and after the run); the 1-minute load average before and after. An untimed 64-step run comes
   first (imports, the simulator's compiled kernels); within a case the variants run one after
   another, so that they see about the same load.
3. With ``--profile-steps`` > 0, each variant (or only those ``--profile-variants`` names) and
   case once more under ``cProfile``: the share of ``MaskablePPO.learn`` spent in the network
   (the policy's forward in the rollouts, the updates' ``evaluate_actions``, backward passes,
   optimiser steps, gradient clipping), in the
   environments (``DummyVecEnv.step_wait``/``reset``) and in the rollout buffer (``add``,
   ``get`` with its minibatches, returns and advantages, observation conversion). cProfile slows
   the Python-heavy parts (the environments) more than the torch kernels, so the split is
   indicative; steps/s comes from the unprofiled runs only.

A variant is ``LABEL`` (the code as it is, the CLI's defaults), ``LABEL:n_epochs=2,n_envs=16``
(``TrainConfig`` fields overridden; lists as ``2/4/8/16``), or ``LABEL@REF`` (the networks and
rollout buffer of ``dallygym/learning/nets.py`` at git revision ``REF``, read with ``git show``, in place
of the current ones: the code before a change). Default variants: ``current``.

Writes ``train_speed_queue.csv`` and ``train_speed_queue.md`` to ``--out``. Speed is a benchmark,
never a test.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import os
import platform
import pstats
import shlex
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd

import dallygym.learning.nets
from dallygym.learning.trainer import TrainConfig, train

ROOT = Path(__file__).resolve().parents[1]

#: (name, TrainConfig overrides) of the cases measured.
CASES = (
    ("train racks 2 4 8 16", {"racks": 8, "train_racks": [2, 4, 8, 16]}),
    ("train racks 2 2 4 4 8 16", {"racks": 8, "train_racks": [2, 2, 4, 4, 8, 16]}),
    ("2 racks", {"racks": 2, "train_racks": None}),
    ("4 racks", {"racks": 4, "train_racks": None}),
    ("8 racks", {"racks": 8, "train_racks": None}),
    ("16 racks", {"racks": 16, "train_racks": None}),
)
#: The cases run when ``--cases`` is not given.
DEFAULT_CASES = ("train racks 2 4 8 16", "8 racks")


def cartpole_steps_per_s(seconds: float) -> float:
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.action_space.seed(0)
    steps, start = 0, time.perf_counter()
    while True:
        for _ in range(1000):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        steps += 1000
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed


def parse_variant(text: str) -> tuple[str, str | None, dict]:
    head, _, body = text.partition(":")
    label, _, ref = head.partition("@")
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    overrides = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"unknown TrainConfig field {key!r} in variant {text!r}")
        kind = str(fields[key].type)  # (a string: "int", "float | None", "list[int] | None", ...)
        if kind.startswith("list"):
            overrides[key] = [int(v) for v in value.split("/")]
        elif kind.startswith("bool"):
            overrides[key] = value.lower() in ("1", "true", "yes")
        elif kind.startswith("int"):
            overrides[key] = int(value)
        elif kind.startswith("float"):
            overrides[key] = float(value)
        else:
            overrides[key] = value
    return label, ref or None, overrides


class nets_at:
    """Within the block, ``train`` builds the networks and buffer of ``dallygym/learning/nets.py`` at git
    revision ``ref`` (None: the current ones)."""

    def __init__(self, ref: str | None) -> None:
        self.ref = ref

    def __enter__(self):
        self.saved = (dict(dallygym.learning.nets.QUEUE_POLICIES), dallygym.learning.nets.LiveRolloutBuffer)
        if self.ref is not None:
            source = subprocess.run(
                ["git", "show", f"{self.ref}:dallygym/learning/nets.py"],
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            name = f"dallygym_nets_at_{self.ref.replace('~', '_').replace('^', '_')}"
            module = types.ModuleType(name)
            sys.modules[name] = module
            exec(compile(source, f"{self.ref}:dallygym/learning/nets.py", "exec"), module.__dict__)
            dallygym.learning.nets.QUEUE_POLICIES.update(module.QUEUE_POLICIES)
            dallygym.learning.nets.LiveRolloutBuffer = module.LiveRolloutBuffer
        return self

    def __exit__(self, *exc):
        dallygym.learning.nets.QUEUE_POLICIES.clear()
        dallygym.learning.nets.QUEUE_POLICIES.update(self.saved[0])
        dallygym.learning.nets.LiveRolloutBuffer = self.saved[1]


def config_for(case: dict, overrides: dict, steps: int, out_dir: str) -> TrainConfig:
    """What ``dallygym train --env-id DallyQueue-v0 --total-timesteps STEPS --eval-freq-steps
    HUGE --checkpoint-freq-steps HUGE --time-limit-min none --no-progress`` builds."""
    config = TrainConfig(
        env_id="DallyQueue-v0",
        total_timesteps=steps,
        time_limit_min=None,
        eval_freq_steps=10**12,
        checkpoint_freq_steps=10**12,
        progress_bar=False,
        out_dir=out_dir,
        **case,
    )
    return dataclasses.replace(config, **overrides)


def profile_split(stats: pstats.Stats) -> dict:
    """Seconds of ``MaskablePPO.learn`` in the network, the environments and the rollout buffer."""

    def cum(path_end: str, name: str) -> float:
        return sum(
            v[3]
            for (path, _, func), v in stats.stats.items()
            if func == name and path.replace(os.sep, "/").endswith(path_end)
        )

    learn = cum("sb3_contrib/ppo_mask/ppo_mask.py", "learn")
    network = {
        "rollout_forward": cum("sb3_contrib/common/maskable/policies.py", "forward"),
        "update_forward": cum("sb3_contrib/common/maskable/policies.py", "evaluate_actions"),
        "backward": cum("torch/_tensor.py", "backward"),
        "optimiser": cum("torch/optim/adam.py", "step")
        + cum("torch/nn/utils/clip_grad.py", "clip_grad_norm_")
        + cum("torch/optim/optimizer.py", "zero_grad"),
    }
    environments = cum("vec_env/dummy_vec_env.py", "step_wait") + cum("vec_env/dummy_vec_env.py", "reset")
    buffer = (
        cum("sb3_contrib/common/maskable/buffers.py", "add")
        + cum("sb3_contrib/common/maskable/buffers.py", "get")
        + cum("stable_baselines3/common/buffers.py", "compute_returns_and_advantage")
        + cum("stable_baselines3/common/utils.py", "obs_as_tensor")
    )
    net = sum(network.values())
    return {
        "learn_s": learn,
        "network_s": net,
        **{f"{k}_s": v for k, v in network.items()},
        "environments_s": environments,
        "buffer_s": buffer,
        "other_s": learn - net - environments - buffer,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=16384, help="timesteps per timed run (default 16384)")
    parser.add_argument("--profile-steps", type=int, default=8192, help="timesteps per profiled run (0: none)")
    parser.add_argument("--variant", action="append", default=None, help="LABEL[@GITREF][:key=value,...]")
    parser.add_argument(
        "--profile-variants",
        nargs="+",
        default=None,
        metavar="LABEL",
        help="profile only these variants (default: all)",
    )
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), choices=[n for n, _ in CASES])
    parser.add_argument("--cartpole-s", type=float, default=3.0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    variants = [parse_variant(v) for v in (args.variant or ["current"])]
    cases = [(name, case) for name, case in CASES if name in args.cases]

    import torch

    cartpole = cartpole_steps_per_s(args.cartpole_s)
    print(f"CartPole-v1 raw: {cartpole:,.0f} steps/s", flush=True)
    rows, splits = [], []
    with tempfile.TemporaryDirectory() as tmp:
        # Untimed: the first run of a process imports and loads the simulator's compiled kernels.
        train(config_for(cases[0][1], {"n_envs": 8}, 64, f"{tmp}/warm-up"))
        # Variants side by side within a case: the load of the machine drifts less between them.
        for case_name, case in cases:
            for label, ref, overrides in variants:
                config = config_for(case, overrides, args.steps, f"{tmp}/{label}-{len(rows)}")
                # CartPole again around the run: the machine's load drifts, the ratio to the
                # CartPole rate of the same minutes follows it better than to the one at the start.
                around = [cartpole_steps_per_s(1.0)]
                load_before = os.getloadavg()[0]
                with nets_at(ref):
                    train(config)
                load_after = os.getloadavg()[0]
                around.append(cartpole_steps_per_s(1.0))
                local = float(np.mean(around))
                meta = json.loads((Path(config.out_dir) / "meta.json").read_text())
                rate = meta["timesteps"] / meta["wall_s"]
                used = json.loads((Path(config.out_dir) / "config.json").read_text())
                rows.append(
                    {
                        "variant": label,
                        "nets": ref or "current",
                        "case": case_name,
                        "n_envs": config.n_envs,
                        "n_steps": used["n_steps"],
                        "batch_size": config.batch_size,
                        "n_epochs": config.n_epochs,
                        "steps": meta["timesteps"],
                        "wall_s": meta["wall_s"],
                        "steps_per_s": round(rate, 1),
                        "cartpole_ratio": round(rate / cartpole, 5),
                        "cartpole_around": round(local),
                        "ratio_around": round(rate / local, 5),
                        "load_before": round(load_before, 2),
                        "load_after": round(load_after, 2),
                    }
                )
                print(pd.DataFrame(rows[-1:]).to_string(index=False), flush=True)
                if args.profile_steps and (args.profile_variants is None or label in args.profile_variants):
                    config = config_for(case, overrides, args.profile_steps, f"{tmp}/{label}-{len(rows)}-profile")
                    profiler = cProfile.Profile()
                    with nets_at(ref):
                        profiler.runcall(train, config)
                    split = profile_split(pstats.Stats(profiler))
                    learn = split["learn_s"]
                    splits.append(
                        {
                            "variant": label,
                            "case": case_name,
                            "steps": args.profile_steps,
                            "learn_s": round(learn, 1),
                            **{k[:-2] + "_pct": round(100 * v / learn, 1) for k, v in split.items() if k != "learn_s"},
                        }
                    )
                    print(pd.DataFrame(splits[-1:]).to_string(index=False), flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(rows)
    frame.assign(cartpole_steps_per_s=round(cartpole)).to_csv(out / "train_speed_queue.csv", index=False)
    command = "python benchmarks/train_speed.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    lines = [
        "# Training speed on DallyQueue-v0 against CartPole-v1",
        "",
        f"Produced by `{command.strip()}` (Python {platform.python_version()}, torch {torch.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} cores shared with other work; one torch thread). "
        f"CartPole-v1 raw in the same run (random actions, `gym.make`): **{cartpole:,.0f} steps/s**.",
        "",
        f"`dallygym.learning.trainer.train` on `DallyQueue-v0` (a fresh `batch-500` draw per reset, no evaluations or "
        f"checkpoints during the run), {args.steps:,} timesteps per run; steps/s = timesteps / `wall_s` of "
        f"`meta.json` (the whole learn: resets, rollouts, updates); `cartpole_ratio` = steps/s / CartPole's; "
        f"`cartpole_around`: CartPole's raw steps/s measured for 1 s just before and just after the run "
        f"(mean), `ratio_around` = steps/s / that (the load drifts during a benchmark: this ratio follows it); "
        f"load = 1-minute load average before and after. `nets` is the revision of `dallygym/learning/nets.py` used "
        f"(`current`: the working tree).",
        "",
        "```",
        frame.to_string(index=False),
        "```",
    ]
    if splits:
        split_frame = pd.DataFrame(splits)
        lines += [
            "",
            "## Where the time goes (cProfile)",
            "",
            f"Profiled once more under `cProfile` ({args.profile_steps:,} timesteps): share of "
            "`MaskablePPO.learn` in the network (`rollout_forward`: the policy's forward in the rollouts; "
            "`update_forward`: `evaluate_actions` in the updates; `backward`; `optimiser`: Adam steps, "
            "zero_grad and gradient clipping), the environments (`DummyVecEnv.step_wait` and `reset`), the "
            "rollout buffer (`add`, `get` with its minibatches, returns and advantages, `obs_as_tensor`) "
            "and the rest (callbacks, logging, SB3's loop). cProfile slows the Python-heavy environments "
            "more than the torch kernels: indicative only.",
            "",
            "```",
            split_frame.to_string(index=False),
            "```",
        ]
    (out / "train_speed_queue.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'train_speed_queue.md'}")


if __name__ == "__main__":
    main()
