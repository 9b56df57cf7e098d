"""The ``dallygym`` command line.

    dallygym simulate --policy dally --racks 8 --trace batch-500 [--format table|json|csv]
    dallygym compare --racks 8 --trace batch-500 [--policies ...] [--format table|csv|json]
    dallygym sweep --policies ... --traces ... --racks ... [--seeds ...] --backend local|ray --out DIR
    dallygym train [--env-id Dally-v0|DallyQueue-v0] [--sensitivity hidden|observed|oracle]
                   [--time-limit-min 60] [--out DIR]
    dallygym train-sweep --seeds 0 1 2 [--sensitivity ...] --backend local|ray --out DIR
    dallygym evaluate --agent NAME_OR_PATH [--agent ...] --racks 8 --trace NAME_OR_PATH [--format ...]
    dallygym agent convert MODEL_ZIP [--out DIR] [--env-id ID] [--racks R ...]
    dallygym latency [--format table|csv]
    dallygym trace list | generate NAME --seed S [--jobs N] --out PATH | import FORMAT PATH --out PATH [filters]

Bad input (a malformed trace, an unknown model or policy, a job larger than the cluster, an
impossible cluster size) prints one line ``dallygym: error: ...`` naming what is wrong and
exits with status 2, without a traceback. A sweep whose cells all ran but some failed exits 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence

import pandas as pd

from ..sim.cluster import ClusterError, ClusterSpec
from ..sim.engine import RENEWAL_MODES, EngineConfig, EngineError
from ..sim.models import UnknownModelError

EXIT_BAD_INPUT = 2
EXIT_CELLS_FAILED = 1
FORMATS = ("table", "json", "csv")


class _Parser(argparse.ArgumentParser):
    """argparse's own usage errors exit 2 too; keep them to one line like ours."""

    def error(self, message: str) -> None:  # pragma: no cover - exercised through main()
        self.exit(EXIT_BAD_INPUT, f"dallygym: error: {message} (see '{self.prog} --help')\n")


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--racks", type=int, default=8, help="number of racks (default 8)")
    p.add_argument("--machines-per-rack", type=int, default=8, help="machines per rack (default 8)")
    p.add_argument("--gpus-per-machine", type=int, default=8, help="GPUs per machine (default 8)")


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lease-s", type=float, default=3600.0, help="round length / lease in seconds (default 3600)")
    p.add_argument(
        "--restart-overhead-s",
        type=float,
        default=0.0,
        help="cost of restarting a preempted job on other GPUs, seconds (default 0)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the run's random generator (default 0)")
    p.add_argument(
        "--renewal",
        choices=RENEWAL_MODES,
        default=None,
        help="lease renewal at round boundaries: upgrade (a job below its best tier is offered "
        "better tiers), keep (never moved unless displaced), rebid (the Dally reference "
        "simulator: every lease-expired job bids again); default: the profile's (upgrade)",
    )
    _profile_arg(p)
    p.add_argument("--latency", default="dally-paper", help="latency model preset (default dally-paper)")
    _contention_args(p)


def _contention_args(p: argparse.ArgumentParser, many: bool = False) -> None:
    from ..sim.contention import CONTENTION_MODES

    p.add_argument(
        "--contention",
        choices=CONTENTION_MODES,
        default="none",
        help="jobs sharing links: none (each placement priced alone; default), fair-share (jobs "
        "crossing the same machine link or rack uplink get max-min fair shares of it, all "
        "communicating at once) or interleaved (the same on their average demands: communication "
        "phases interleave)",
    )
    p.add_argument(
        "--oversubscription",
        type=float,
        nargs="+" if many else None,
        default=[1.0] if many else 1.0,
        metavar="X",
        help="rack uplinks carry their machines' link bandwidth / X under a contention model (default 1)"
        + ("; several values: one cell each" if many else ""),
    )


def _profile_arg(p: argparse.ArgumentParser) -> None:
    from ..sim.profiles import PROFILES

    p.add_argument(
        "--profile",
        choices=list(PROFILES),
        default=None,
        help="readings of the papers' open points (docs/profiles.md): default (the simulator's own), "
        "paper, reference (the Dally reference simulator); an option given explicitly, such "
        "as --renewal, wins over the profile's",
    )


def _backend_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="local: processes on this machine; ray: a local Ray instance, or the cluster at "
        "--address (needs the ray extra). Default local",
    )
    p.add_argument(
        "--address",
        default=None,
        metavar="auto|HOST:PORT",
        help="ray: join this running cluster (auto: the one started on this machine with "
        "'ray start --head') instead of starting a local instance",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local: processes (default: every core); ray without --address: CPUs of the local "
        "instance (default: every core); ray with --address: most tasks in flight",
    )


SENSITIVITIES = ("hidden", "observed", "oracle")


def _train_args(p: argparse.ArgumentParser) -> None:
    """The settings of a training run that ``train`` and ``train-sweep`` share."""
    from ..learning.trainer import TrainConfig

    defaults = TrainConfig()
    _train_env_args(p, defaults)
    _train_constraint_args(p, defaults)
    _train_run_args(p, defaults)
    _train_network_args(p, defaults)


def _train_env_args(p: argparse.ArgumentParser, defaults) -> None:
    """The environment trained in: its id, cluster, traces, offer rule and reward."""
    p.add_argument(
        "--env-id",
        default=defaults.env_id,
        help="Dally-v0 (tier offers; default), DallyQueue-v0 (job order) or their Small variants",
    )
    p.add_argument("--racks", type=int, default=defaults.racks)
    p.add_argument(
        "--train-racks",
        type=int,
        nargs="+",
        default=defaults.train_racks,
        metavar="RACKS",
        help="train on several cluster sizes: environment i gets the i-th size, cycled (e.g. "
        "4 8 8 16 over 4 environments); validation sums over the distinct sizes "
        "(default: --racks only)",
    )
    p.add_argument("--machines-per-rack", type=int, default=defaults.machines_per_rack)
    p.add_argument("--gpus-per-machine", type=int, default=defaults.gpus_per_machine)
    p.add_argument(
        "--trace", default=defaults.trace, help="training traces (default: a fresh batch-500 draw per reset)"
    )
    p.add_argument(
        "--priority",
        default=defaults.priority,
        help="the engine's priority rule the agent's offers come in (default dally: Nw_sens)",
    )
    p.add_argument(
        "--offer-rule",
        default=defaults.offer_rule,
        help="DallyQueue: the rule that answers offers (dally, consolidated, nowait, manual or a policy name)",
    )
    p.add_argument(
        "--reward",
        choices=("relative-jct", "jct", "makespan", "comm", "jct-makespan"),
        default=defaults.reward,
        help="default: the environment's, relative-jct (the improvement over a native Dally run of the "
        "same trace, in %%; makespan beyond Dally's penalised)",
    )
    p.add_argument(
        "--makespan-penalty",
        type=float,
        default=defaults.makespan_penalty,
        help="relative-jct reward: weight of each %% of makespan beyond Dally's (default: the environment's, 3)",
    )
    p.add_argument(
        "--makespan-reference",
        metavar="POLICY",
        default=defaults.makespan_reference,
        help="relative-jct reward: charge makespan beyond this policy's native run of the same trace "
        "(default: beyond the reference run's, the offer rule's or priority's)",
    )


def _train_constraint_args(p: argparse.ArgumentParser, defaults) -> None:
    """The makespan constraint and the ``DallyQueue`` options."""
    p.add_argument(
        "--makespan-dual",
        type=float,
        metavar="LR",
        default=defaults.makespan_dual_lr,
        help="relative-jct reward: learn the makespan penalty as a Lagrange multiplier, starting at "
        "--makespan-penalty; after each rollout it moves by LR x (mean %% makespan excess of the "
        "episodes that ended - --makespan-budget) (default: off, the penalty is fixed)",
    )
    p.add_argument(
        "--makespan-budget",
        type=float,
        metavar="PCT",
        default=defaults.makespan_budget_pct,
        help="with --makespan-dual: the mean %% makespan excess the multiplier holds training to (default 0.5)",
    )
    p.add_argument(
        "--validation-makespan-penalty",
        type=float,
        metavar="WEIGHT",
        default=defaults.validation_makespan_penalty,
        help="relative-jct reward: the makespan penalty of the validation runs (and so of --keep best) "
        "(default: the training penalty)",
    )
    p.add_argument(
        "--makespan-weight",
        type=float,
        default=defaults.makespan_weight,
        help="DallyQueue jct-makespan reward: weight of the makespan (default: the environment's, 1)",
    )
    p.add_argument(
        "--max-candidates",
        type=int,
        default=defaults.max_candidates,
        help="DallyQueue: candidate slots (default: the registered id's)",
    )
    p.add_argument(
        "--lease-picks",
        choices=("all", "waiting"),
        default=defaults.lease_picks,
        help="DallyQueue: at a round boundary, may the agent pick lease-expired jobs too (all) or "
        "only waiting ones (waiting; the environment's default)",
    )
    p.add_argument(
        "--makespan-credit",
        choices=("bound", "elapsed"),
        default=defaults.makespan_credit,
        help="DallyQueue: charge the reward's makespan part as its bound moves (bound; the "
        "environment's default) or as time elapses",
    )
    p.add_argument(
        "--guard-leases",
        type=float,
        default=defaults.guard_leases,
        metavar="SHARE",
        help="DallyQueue: at a round boundary, renew before any pick the leases of jobs whose "
        "estimate_share is at least SHARE (default: off)",
    )
    p.add_argument(
        "--guard-waiting",
        action="store_true",
        default=defaults.guard_waiting,
        help="DallyQueue, with --guard-leases: before each pick, serve without asking the candidate "
        "whose estimate_share is at least SHARE with the longest estimate (default: off)",
    )
    p.add_argument(
        "--limit-features",
        action="store_true",
        default=defaults.limit_features,
        help="DallyQueue, relative-jct reward: show the makespan limit in the observation (each "
        "candidate's and the cluster's estimated finish as a share of it; default: off)",
    )


def _train_run_args(p: argparse.ArgumentParser, defaults) -> None:
    """The run's length, its vector of environments and PPO's settings."""
    p.add_argument(
        "--teacher-share",
        type=float,
        default=defaults.teacher_share,
        metavar="SHARE",
        help=f"the warm start's teacher protects jobs whose estimate_share is at least SHARE "
        f"(default {defaults.teacher_share:g})",
    )
    p.add_argument(
        "--total-timesteps",
        type=int,
        default=defaults.total_timesteps,
        help="environment steps to train, exactly: a multiple of --n-envs; the rollout size "
        "(--n-steps per environment) is adjusted to divide it (default 1000000)",
    )
    p.add_argument(
        "--n-steps",
        type=int,
        default=defaults.n_steps,
        help="preferred steps per environment per rollout (default 512)",
    )
    p.add_argument(
        "--time-limit-min",
        type=float,
        default=defaults.time_limit_min,
        help="stop after this many minutes of training (default 60)",
    )
    p.add_argument("--n-envs", type=int, default=defaults.n_envs)
    p.add_argument(
        "--vec-env",
        choices=("dummy", "subproc"),
        default=defaults.vec_env,
        help="step the environments in this process (dummy) or one process each (subproc)",
    )
    p.add_argument(
        "--torch-threads",
        type=int,
        default=defaults.torch_threads,
        help="torch CPU threads (default 1: the network is tiny, more threads contend)",
    )
    p.add_argument("--eval-freq-steps", type=int, default=defaults.eval_freq_steps)
    p.add_argument("--checkpoint-freq-steps", type=int, default=defaults.checkpoint_freq_steps)
    p.add_argument(
        "--learning-rate",
        type=float,
        default=defaults.learning_rate,
        help=f"PPO's (and the warm start's) Adam step size (default {defaults.learning_rate:g})",
    )
    p.add_argument(
        "--n-epochs", type=int, default=defaults.n_epochs, help=f"PPO epochs per rollout (default {defaults.n_epochs})"
    )
    p.add_argument("--gamma", type=float, default=defaults.gamma, help=f"discount (default {defaults.gamma})")
    p.add_argument(
        "--batch-size",
        type=int,
        default=defaults.batch_size,
        help=f"minibatch size of PPO and of the warm start (default {defaults.batch_size})",
    )
    p.add_argument(
        "--ent-coef", type=float, default=defaults.ent_coef, help=f"PPO's entropy bonus (default {defaults.ent_coef:g})"
    )


def _train_network_args(p: argparse.ArgumentParser, defaults) -> None:
    """The warm start, the network and which parameters are kept."""
    p.add_argument(
        "--imitate-episodes",
        type=int,
        default=defaults.imitate_episodes,
        help="DallyQueue: warm-start the network by behaviour cloning of the protected-share "
        "order over this many teacher episodes before PPO (default 0: none)",
    )
    p.add_argument(
        "--imitate-epochs",
        type=int,
        default=defaults.imitate_epochs,
        help=f"epochs over the teacher's samples (default {defaults.imitate_epochs})",
    )
    p.add_argument(
        "--imitate-learning-rate",
        type=float,
        default=defaults.imitate_learning_rate,
        help=f"the warm start's Adam step size (default {defaults.imitate_learning_rate:g})",
    )
    p.add_argument(
        "--search-rounds",
        type=int,
        default=defaults.search_rounds,
        help="DallyQueue: rounds of expert iteration without a teacher before PPO: the policy's "
        "picks improved by trying its most likely candidates on copies of the environment, "
        "then learnt (default 0: none)",
    )
    p.add_argument(
        "--search-episodes",
        type=int,
        default=defaults.search_episodes,
        help=f"training episodes per search round (default {defaults.search_episodes})",
    )
    p.add_argument(
        "--search-top-k",
        type=int,
        default=defaults.search_top_k,
        help=f"candidates tried per contested pick (default {defaults.search_top_k})",
    )
    p.add_argument(
        "--search-horizon",
        type=int,
        default=defaults.search_horizon,
        help=f"steps each try is rolled out by the policy (default {defaults.search_horizon})",
    )
    p.add_argument(
        "--search-epochs",
        type=int,
        default=defaults.search_epochs,
        help=f"epochs over each round's samples (default {defaults.search_epochs})",
    )
    p.add_argument(
        "--queue-net",
        choices=("set", "pointer"),
        default=defaults.queue_net,
        help="DallyQueue network: set (only the live candidates are encoded, the value read from "
        "the pooled set; the default) or pointer (every slot encoded, the first version)",
    )
    p.add_argument(
        "--keep",
        choices=("last", "best"),
        default=defaults.keep,
        help="parameters saved in policy.pth: the end of training (last, the default) or the best "
        "validation return seen, the warm start included (best)",
    )


def _train_config(args: argparse.Namespace, **given):
    from ..learning.trainer import TrainConfig

    settings = dict(
        env_id=args.env_id,
        racks=args.racks,
        train_racks=args.train_racks,
        machines_per_rack=args.machines_per_rack,
        gpus_per_machine=args.gpus_per_machine,
        trace=args.trace,
        priority=args.priority,
        offer_rule=args.offer_rule,
        makespan_weight=args.makespan_weight,
        max_candidates=args.max_candidates,
        lease_picks=args.lease_picks,
        makespan_credit=args.makespan_credit,
        guard_leases=args.guard_leases,
        guard_waiting=args.guard_waiting,
        limit_features=args.limit_features,
        teacher_share=args.teacher_share,
        reward=args.reward,
        makespan_penalty=args.makespan_penalty,
        makespan_reference=args.makespan_reference,
        makespan_dual_lr=args.makespan_dual,
        makespan_budget_pct=args.makespan_budget,
        validation_makespan_penalty=args.validation_makespan_penalty,
        total_timesteps=args.total_timesteps,
        time_limit_min=args.time_limit_min,
        n_envs=args.n_envs,
        n_steps=args.n_steps,
        vec_env=args.vec_env,
        torch_threads=args.torch_threads,
        eval_freq_steps=args.eval_freq_steps,
        checkpoint_freq_steps=args.checkpoint_freq_steps,
        learning_rate=args.learning_rate,
        batch_size=args.batch_size,
        ent_coef=args.ent_coef,
        n_epochs=args.n_epochs,
        gamma=args.gamma,
        imitate_episodes=args.imitate_episodes,
        imitate_epochs=args.imitate_epochs,
        imitate_learning_rate=args.imitate_learning_rate,
        search_rounds=args.search_rounds,
        search_episodes=args.search_episodes,
        search_top_k=args.search_top_k,
        search_horizon=args.search_horizon,
        search_epochs=args.search_epochs,
        keep=args.keep,
        queue_net=args.queue_net,
    )
    return TrainConfig(**{**settings, **given})


def _run_args(p: argparse.ArgumentParser) -> None:
    """What a simulation needs: trace, cluster, engine settings, output format."""
    p.add_argument("--trace", default="batch-500", help="shipped trace name or CSV path (default batch-500)")
    _cluster_args(p)
    _engine_args(p)
    p.add_argument("--format", choices=FORMATS, default="table", help="output format (default table)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dallygym", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_run_commands(sub)
    _add_learning_commands(sub)
    _add_data_commands(sub)
    return parser


def _add_run_commands(sub) -> None:
    """``simulate``, ``compare`` and ``sweep``."""
    sim = sub.add_parser("simulate", help="replay a trace on a cluster under one policy and print its metrics")
    sim.add_argument("--policy", default="dally", help="scheduling policy (default dally)")
    _run_args(sim)
    sim.add_argument(
        "--out",
        metavar="DIR",
        help="also write jobs.csv, timeline.csv and summary.csv to DIR, "
        "and the run's figures as PNG and SVG when matplotlib is installed (the plots extra)",
    )
    sim.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress line on stderr (shown only on a terminal, and not when CI is set)",
    )

    cmp_ = sub.add_parser("compare", help="run several policies on one trace and cluster, one row each")
    cmp_.add_argument(
        "--policies", nargs="+", default=None, metavar="POLICY", help="policies to run (default: every shipped policy)"
    )
    _run_args(cmp_)
    cmp_.add_argument(
        "--out",
        metavar="DIR",
        help="also write the table (comparison.csv) and the comparison "
        "figure (comparison.png, .svg; needs the plots extra) to DIR",
    )
    cmp_.add_argument(
        "--quiet",
        "--no-progress",
        dest="quiet",
        action="store_true",
        help="no progress on stderr (per-policy lines, and a progress line during each run on a terminal)",
    )

    sw = sub.add_parser(
        "sweep",
        help="run every policy x trace x cluster x seed x engine option, one task each, on this "
        "machine or on Ray; results stream to OUT/results.csv and a re-run resumes",
        description="Run every combination of the given policies, traces, cluster sizes, seeds and engine "
        "options as independent tasks. Each finished cell is appended to OUT/results.csv (its keys "
        "and the summary keys of 'dallygym simulate'; also results.parquet when pyarrow is "
        "installed); cells already there are skipped. A failing cell is reported on stderr and in "
        "OUT/errors.csv and the others still run; the exit status is then 1. The same cells give "
        "the same results, bit for bit, on every backend.",
    )
    sw.add_argument(
        "--policies", nargs="+", default=None, metavar="POLICY", help="policies (default: every shipped policy)"
    )
    sw.add_argument(
        "--traces",
        nargs="+",
        default=["batch-500"],
        metavar="TRACE",
        help="shipped trace names or CSV paths (default batch-500)",
    )
    sw.add_argument("--racks", type=int, nargs="+", default=[8], help="cluster sizes in racks (default 8)")
    sw.add_argument("--machines-per-rack", type=int, default=8, help="machines per rack (default 8)")
    sw.add_argument("--gpus-per-machine", type=int, default=8, help="GPUs per machine (default 8)")
    sw.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds of the runs' generators (default 0)")
    sw.add_argument("--lease-s", type=float, nargs="+", default=[3600.0], help="leases in seconds (default 3600)")
    sw.add_argument(
        "--renewal",
        nargs="+",
        choices=RENEWAL_MODES,
        default=None,
        help="lease renewal modes (default: the profile's, upgrade)",
    )
    _profile_arg(sw)
    sw.add_argument(
        "--restart-overhead-s", type=float, nargs="+", default=[0.0], help="restart overheads in seconds (default 0)"
    )
    sw.add_argument("--latency", default="dally-paper", help="latency model preset (default dally-paper)")
    _contention_args(sw, many=True)
    _backend_args(sw)
    sw.add_argument("--out", required=True, metavar="DIR", help="directory of results.csv (created if missing)")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar or lines on stderr")


def _add_learning_commands(sub) -> None:
    """``train``, ``train-sweep``, ``evaluate`` and ``agent`` (:func:`_add_agent_command`)."""
    tr_ = sub.add_parser(
        "train", help="train a MaskablePPO agent on Dally-v0 or DallyQueue-v0 (needs the agents extra)"
    )
    _train_args(tr_)
    tr_.add_argument("--sensitivity", choices=SENSITIVITIES, default="hidden")
    tr_.add_argument("--seed", type=int, default=0)
    tr_.add_argument("--out", default="agents/runs/ppo", help="run directory (model.zip, config, curve)")
    tr_.add_argument(
        "--tensorboard", action="store_true", help="also write tensorboard logs (needs: pip install tensorboard)"
    )
    tr_.add_argument("--no-progress", action="store_true", help="no progress bar")

    ts = sub.add_parser(
        "train-sweep",
        help="independent training runs over seeds and observation modes, one task each, on this "
        "machine or on Ray; their curves and evaluations in one table",
        description="Train one MaskablePPO agent per (observation mode, seed), each run one task with one CPU "
        "(torch threads pinned by --torch-threads), on local processes or on Ray; then evaluate each "
        "trained agent on the --eval-trace traces. Writes OUT/RUN/ for each run (policy.pth, "
        "config.json, meta.json, ...), OUT/runs.csv (one row per run and evaluation trace: the run's "
        "facts and the summary keys of 'dallygym simulate') and OUT/curves.csv (validation and "
        "training returns against timesteps). A failing run is reported and the others go on; the "
        "exit status is then 1.",
    )
    _train_args(ts)
    ts.add_argument(
        "--sensitivity", nargs="+", choices=SENSITIVITIES, default=["hidden"], help="observation modes (default hidden)"
    )
    ts.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (default 0 1 2)")
    ts.add_argument(
        "--eval-trace",
        action="append",
        default=None,
        metavar="NAME_OR_PATH",
        help="evaluate every trained agent on this trace (repeat for several; default: the held-out "
        "batch-500 traces, seeds 2001-2003)",
    )
    _backend_args(ts)
    ts.add_argument("--out", required=True, metavar="DIR", help="directory of the runs and the tables")

    ev = sub.add_parser(
        "evaluate",
        help="evaluate heuristic and learned agents on traces, one row per agent",
        description="Evaluate heuristic and learned agents on traces, one row per agent. What it trusts: a "
        "learned agent is read from policy.pth (tensors only, through torch.load(weights_only=True)) "
        "and config.json (strict JSON checked against the training settings; its env_id must be "
        "one of dallygym's ids); nothing in them is executed, no link is followed and sizes are "
        "bounded before anything is allocated. A stable-baselines3 model.zip is refused, since "
        "unpickling it can run any code: write an agent from it with 'dallygym agent convert', "
        "which reads only its tensors. A learned priority agent (agents/train_priority.py) is read "
        "from priority.json (strict JSON, its shapes checked) and runs natively.",
    )
    ev.add_argument(
        "--agent",
        action="append",
        required=True,
        metavar="NAME_OR_PATH",
        help="a policy name, or a learned agent: a run directory, its policy.pth "
        "(with config.json beside it) or its priority.json; repeat for several",
    )
    ev.add_argument(
        "--trace",
        action="append",
        required=True,
        metavar="NAME_OR_PATH",
        help="a shipped trace name or CSV path; repeat for several",
    )
    _cluster_args(ev)
    ev.add_argument("--seed", type=int, default=0)
    _profile_arg(ev)
    _contention_args(ev)
    ev.add_argument("--format", choices=FORMATS, default="table")
    ev.add_argument("--out", metavar="CSV", help="also save the table as CSV")
    _add_agent_command(sub)


def _add_agent_command(sub) -> None:
    """``agent`` and its subcommands."""
    ag = sub.add_parser("agent", help="manage saved learned agents")
    ags = ag.add_subparsers(dest="agent_command", required=True, parser_class=_Parser)
    conv = ags.add_parser(
        "convert",
        help="write an agent (policy.pth + config.json) from a stable-baselines3 model.zip, without unpickling it",
        description="Write a learned agent that 'dallygym evaluate' loads -- policy.pth (the policy's parameters) "
        "and config.json (its settings) -- from a stable-baselines3 model.zip, e.g. one saved by "
        "MaskablePPO(JobPointerPolicy, ...).save(). Only the archive's policy.pth entry is read, "
        "through the tensors-only loader; its pickled 'data' entry is never read. The settings come "
        "from a config.json beside the zip ('dallygym train' writes one); without it, give --env-id "
        "(and the cluster the agent was trained on).",
    )
    conv.add_argument("path", help="model.zip, or a run directory holding one")
    conv.add_argument("--out", metavar="DIR", help="directory to write the agent to (default: beside the zip)")
    conv.add_argument(
        "--env-id",
        default=None,
        help="the environment the agent was trained on (Dally-v0, DallySmall-v0, DallyQueue-v0, "
        "DallyQueueSmall-v0); required when no config.json lies beside the zip",
    )
    conv.add_argument("--racks", type=int, default=None, help="racks of the training cluster (default 8)")
    conv.add_argument("--machines-per-rack", type=int, default=None, help="machines per rack (default 8)")
    conv.add_argument("--gpus-per-machine", type=int, default=None, help="GPUs per machine (default 8)")


def _add_data_commands(sub) -> None:
    """``latency``, ``trace`` and ``report``."""
    lat = sub.add_parser("latency", help="exposed communication per model at the Table I placements, vs the paper")
    lat.add_argument("--latency", default="dally-paper", help="latency model preset (default dally-paper)")
    lat.add_argument("--format", choices=("table", "csv"), default="table")

    tr = sub.add_parser("trace", help="list, generate or import traces")
    trs = tr.add_subparsers(dest="trace_command", required=True, parser_class=_Parser)
    trs.add_parser("list", help="shipped traces and their statistics")
    gen = trs.add_parser("generate", help="generate a synthetic trace into a canonical CSV")
    gen.add_argument("name", help="generator name (batch-500, poisson-411, small, ...)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="draw N jobs with the workload's mixes and arrival rate (default: its own count)",
    )
    gen.add_argument("--out", required=True, help="output CSV path")
    imp = trs.add_parser("import", help="convert a public-format trace into a canonical CSV")
    imp.add_argument("format", choices=("tiresias", "philly", "helios", "gavel"))
    imp.add_argument("path", help="input file")
    imp.add_argument("--seed", type=int, default=0, help="seed for fields the format lacks (model draw)")
    imp.add_argument("--out", required=True, help="output CSV path")
    imp.add_argument("--report", metavar="JSON", help="also write the full import report as JSON")
    imp.add_argument(
        "--durations",
        choices=("wall", "compute"),
        default="wall",
        help="recorded durations are wall time at the best placement (default) or compute-only time",
    )
    _cluster_args(imp)
    imp.add_argument("--latency", default="dally-paper", help="latency model preset for --durations wall")
    imp.add_argument("--throughputs", metavar="JSON", help="gavel: simulation_throughputs.json")
    imp.add_argument("--worker-type", default="v100", help="gavel: worker type of the throughputs (default v100)")
    imp.add_argument(
        "--missing-throughput",
        choices=("scale", "error"),
        default="scale",
        help="gavel: a (job type, scale factor) missing from the table uses the "
        "1-GPU rate x scale factor (default) or is an error",
    )
    imp.add_argument(
        "--start-h", type=float, help="keep jobs arriving at or after this many hours after the earliest arrival"
    )
    imp.add_argument("--end-h", type=float, help="keep jobs arriving before this many hours after the earliest arrival")
    imp.add_argument("--start", metavar="DATE", help="philly/helios: keep jobs arriving at or after this date-time")
    imp.add_argument("--end", metavar="DATE", help="philly/helios: keep jobs arriving before this date-time")
    imp.add_argument(
        "--cluster", action="append", metavar="VC", help="philly/helios: keep this virtual cluster (repeat for several)"
    )
    imp.add_argument("--max-jobs", type=int, help="keep the first N jobs (arrival order) left after the other filters")
    imp.add_argument(
        "--oversize",
        choices=("error", "drop", "clamp"),
        default="error",
        help="jobs larger than the cluster: error (default), drop, or clamp to the cluster",
    )
    imp.add_argument(
        "--model-map",
        action="append",
        metavar="NAME=MODEL",
        default=[],
        help="map a model name of the file to a known model (repeat for several)",
    )

    rep = sub.add_parser(
        "report",
        help="one self-contained HTML page of runs, comparisons and trained agents",
        description="Write one HTML file (figures embedded as PNG, tables, each directory's settings, the "
        "package version; no external files or fetches) of the given directories: 'simulate --out' "
        "runs, 'compare --out' comparisons and 'train --out' agent runs.",
    )
    rep.add_argument("dirs", nargs="+", metavar="DIR", help="a simulate --out, compare --out or train --out directory")
    rep.add_argument("--html", required=True, metavar="OUT.html", help="the HTML file to write")
    rep.add_argument("--title", default=None, help="the page's title (default: the directories' names)")


def _model_map(pairs: list[str]) -> dict[str, str]:
    """``NAME=MODEL`` pairs as a dict; the name may contain '=' only before the last one."""
    mapping = {}
    for pair in pairs:
        name, sep, model = pair.rpartition("=")
        if not sep or not name.strip() or not model.strip():
            raise ValueError(f"--model-map expects NAME=MODEL, got {pair!r}")
        mapping[name.strip()] = model.strip()
    return mapping


def _print_frame(frame: pd.DataFrame, fmt: str) -> None:
    if fmt == "csv":
        sys.stdout.write(frame.to_csv(index=False))
    elif fmt == "json":
        sys.stdout.write(frame.to_json(orient="records", indent=2) + "\n")
    else:
        with pd.option_context("display.width", 200, "display.max_columns", 50, "display.max_rows", 500):
            print(frame.to_string(index=False))


def _summary_table(summary: dict) -> pd.DataFrame:
    rows = []
    for key, value in summary.items():
        if key.endswith("_s"):
            rows.append((key, f"{value:,.0f}", f"{value / 3600:,.2f} h"))
        elif key in ("utilization", "makespan_job_share"):
            rows.append((key, f"{value:.4f}", f"{100 * value:.1f} %"))
        else:
            rows.append((key, f"{value}", ""))
    return pd.DataFrame(rows, columns=["metric", "value", ""])


def _engine_config(args: argparse.Namespace) -> EngineConfig:
    from ..sim.profiles import profile_renewal

    args.renewal = profile_renewal(args.profile, args.renewal)  # an explicit --renewal wins over the profile
    return EngineConfig(
        lease_s=args.lease_s,
        restart_overhead_s=args.restart_overhead_s,
        seed=args.seed,
        renewal=args.renewal,
        contention=args.contention,
        oversubscription=args.oversubscription,
    )


def _cmd_simulate(args: argparse.Namespace) -> int:
    from ..sim.simulate import simulate

    spec = ClusterSpec(args.racks, args.machines_per_rack, args.gpus_per_machine)
    config = _engine_config(args)
    policy = args.policy
    if args.profile is not None:
        from ..sim.profiles import make_profile_policy

        policy = make_profile_policy(policy, args.profile)
    result = simulate(
        args.trace, spec, policy=policy, latency=args.latency, config=config, progress=not args.no_progress
    )
    if args.out:
        result.to_csv(args.out, extra=_run_output_writer(result, spec, args))
    if args.format == "json":
        print(json.dumps(result.summary, indent=2))
    elif args.format == "csv":
        sys.stdout.write(pd.DataFrame([result.summary]).to_csv(index=False))
    else:
        print(
            f"policy {args.policy} on trace {args.trace}, {spec.racks} racks x {spec.machines_per_rack} "
            f"machines x {spec.gpus_per_machine} GPUs ({spec.num_gpus} GPUs), lease {args.lease_s:g} s, "
            f"renewal {args.renewal}"
            + (f", profile {args.profile}" if args.profile else "")
            + (f", contention {args.contention} at {args.oversubscription:g}:1" if args.contention != "none" else "")
        )
        print(_summary_table(result.summary).to_string(index=False))
    return 0


PLOTS_NOTE = "dallygym: note: install the plots extra to draw the run (pip install 'dallygym[plots]')"


def _settings(args: argparse.Namespace, spec: ClusterSpec, policy) -> dict:
    """The settings ``dallygym report`` shows for a ``simulate`` or ``compare`` output."""
    return {
        "trace": args.trace,
        "cluster": spec,
        "policy": policy,
        "profile": args.profile,
        "latency": args.latency,
        "lease_s": args.lease_s,
        "renewal": args.renewal,
        "restart_overhead_s": args.restart_overhead_s,
        "seed": args.seed,
        "contention": args.contention,
        "oversubscription": args.oversubscription,
    }


def _run_output_writer(result, spec: ClusterSpec, args: argparse.Namespace):
    """What ``simulate --out`` adds to the run's staging directory: ``settings.json``, and its
    figures as PNG and SVG (without matplotlib, a note on stderr instead)."""
    from . import plots
    from .report import write_settings

    draw = plots.available()
    if not draw:
        print(PLOTS_NOTE, file=sys.stderr, flush=True)

    def write(staging) -> None:
        write_settings(staging, **_settings(args, spec, args.policy))
        if draw:
            plots.save_figures(plots.run_figures(result, spec), staging)

    return write


def _cmd_compare(args: argparse.Namespace) -> int:
    from ..sim.policies import POLICIES
    from .compare import compare, contention_note, hours_table, stderr_progress

    spec = ClusterSpec(args.racks, args.machines_per_rack, args.gpus_per_machine)
    config = _engine_config(args)
    policies = args.policies or list(POLICIES)
    if args.profile is not None:
        from ..sim.profiles import make_profile_policy

        policies = [make_profile_policy(p, args.profile) for p in policies]
    results: dict | None = {} if args.out else None  # each policy's run, for the figures
    frame = compare(
        args.trace,
        spec,
        policies,
        latency=args.latency,
        config=config,
        progress=None if args.quiet else stderr_progress,
        results=results,
    )
    frame = frame.drop(columns="wall_s")  # wall time varies run to run; benchmarks keep it
    if args.out:
        _write_comparison(args.out, frame, results, _settings(args, spec, [str(p) for p in args.policies or POLICIES]))
    _print_frame(hours_table(frame) if args.format == "table" else frame, args.format)
    note = contention_note(frame, spec)
    if note:  # on stderr even with --quiet: it is not progress, and stdout stays the table
        print(note, file=sys.stderr, flush=True)
    return 0


def _write_comparison(directory: str, frame: pd.DataFrame, results: dict, settings: dict) -> None:
    """``compare --out``: comparison.csv, settings.json, and comparison.png / .svg when
    matplotlib is installed (else a note on stderr). The directory is created if needed; other
    files in it are kept."""
    from pathlib import Path

    from ..sim.metrics import naming
    from . import plots
    from .report import write_settings

    out = Path(directory)
    with naming(out):
        out.mkdir(parents=True, exist_ok=True)
    with naming(out / "comparison.csv"):
        frame.to_csv(out / "comparison.csv", index=False)
    write_settings(out, **settings)
    if not plots.available():
        print(PLOTS_NOTE, file=sys.stderr, flush=True)
        return
    with naming(out / "comparison.png"):
        plots.save_figures({"comparison": plots.compare_figures(results)}, out)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from ..sim.policies import POLICIES
    from .sweep import grid, make_backend, sweep

    cells = grid(
        args.policies or list(POLICIES),
        args.traces,
        args.racks,
        seeds=args.seeds,
        lease_s=args.lease_s,
        renewal=args.renewal,
        restart_overhead_s=args.restart_overhead_s,
        machines_per_rack=args.machines_per_rack,
        gpus_per_machine=args.gpus_per_machine,
        latency=args.latency,
        profile=args.profile or "default",
        contention=args.contention,
        oversubscription=args.oversubscription,
    )
    with make_backend(args.backend, args.workers, args.address) as backend:
        if not args.no_progress:
            print(f"dallygym sweep: {len(cells)} cells on {backend.describe()}", file=sys.stderr, flush=True)
        result = sweep(cells, args.out, backend, progress=not args.no_progress)
    print(
        f"{os.path.join(args.out, 'results.csv')}: {len(result.results)} rows; this run: {result.ran} cells run, "
        f"{result.skipped} already done, {result.failed} failed"
        + (f" (listed in {os.path.join(args.out, 'errors.csv')})" if result.failed else "")
    )
    return EXIT_CELLS_FAILED if result.failed else 0


def _cmd_train(args: argparse.Namespace) -> int:
    from ..learning.trainer import train

    config = _train_config(
        args,
        sensitivity=args.sensitivity,
        seed=args.seed,
        out_dir=args.out,
        tensorboard=args.tensorboard,
        progress_bar=not args.no_progress,
    )
    print(f"saved {train(config)}")
    return 0


def _cmd_train_sweep(args: argparse.Namespace) -> int:
    from ..learning.trainer import default_eval_traces, run_name, train_sweep
    from .sweep import make_backend

    configs = [
        _train_config(
            args,
            sensitivity=mode,
            seed=seed,
            progress_bar=False,
            out_dir=os.path.join(args.out, run_name(mode, args.priority, seed)),
        )
        for mode in dict.fromkeys(args.sensitivity)
        for seed in dict.fromkeys(args.seeds)
    ]
    eval_traces = args.eval_trace if args.eval_trace is not None else default_eval_traces()
    with make_backend(args.backend, args.workers, args.address) as backend:
        print(f"dallygym train-sweep: {len(configs)} runs on {backend.describe()}", file=sys.stderr, flush=True)
        runs, curves, failed = train_sweep(configs, eval_traces, backend, args.out)
    print(
        f"wrote {os.path.join(args.out, 'runs.csv')} ({runs['run'].nunique() if len(runs) else 0} runs) and "
        f"{os.path.join(args.out, 'curves.csv')}" + (f"; {len(failed)} runs failed" if failed else "")
    )
    return EXIT_CELLS_FAILED if failed else 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from ..learning.trainer import evaluate_agents
    from .compare import hours_table

    spec = ClusterSpec(args.racks, args.machines_per_rack, args.gpus_per_machine)
    from ..sim.contention import Contention

    contention = Contention(args.contention, args.oversubscription)
    if args.profile is None:
        frame = evaluate_agents(args.agent, args.trace, spec, seed=args.seed, contention=contention)
    else:
        frame = _evaluate_under_profile(args.agent, args.trace, spec, args.profile, contention)
    if len(args.trace) == 1:
        frame = frame.drop(columns="trace")
    if args.out:
        frame.to_csv(args.out, index=False)
    # The table in hours like simulate's and compare's; csv and json keep exact seconds (*_s).
    _print_frame(hours_table(frame) if args.format == "table" else frame, args.format)
    return 0


def _evaluate_under_profile(
    agents: list[str], traces: list[str], spec: ClusterSpec, profile: str, contention
) -> pd.DataFrame:
    """``evaluate_agents`` for heuristic agents run under ``profile``'s readings. A learned agent
    acts in the environment saved with it, which a profile does not change: it is refused."""
    from ..learning.trainer import load_agent
    from ..sim.metrics import SUMMARY_KEYS
    from ..sim.profiles import make_profile_policy, profile_config
    from ..sim.simulate import simulate
    from ..sim.trace import load_trace

    loaded = [load_agent(a) for a in agents]
    for agent, given in zip(loaded, agents):
        if not isinstance(agent, str):
            raise ValueError(
                f"--profile applies to heuristic agents; {given} is a learned agent, which runs in "
                f"the environment saved with it"
            )
    frames = {t: load_trace(t, cluster=spec) for t in traces}
    rows = []
    for agent, given in zip(loaded, agents):
        for trace_name, frame in frames.items():
            config = dataclasses.replace(
                profile_config(None, profile), contention=contention.mode, oversubscription=contention.oversubscription
            )
            summary = simulate(frame, spec, policy=make_profile_policy(agent, profile), config=config).summary
            rows.append({"agent": given, "trace": trace_name, **{k: summary[k] for k in SUMMARY_KEYS}})
    return pd.DataFrame(rows)


def _cmd_agent(args: argparse.Namespace) -> int:
    from ..learning.trainer import convert_agent

    sizes = (args.racks, args.machines_per_rack, args.gpus_per_machine)
    cluster = None if all(v is None for v in sizes) else ClusterSpec(*(8 if v is None else v for v in sizes))
    path = convert_agent(args.path, args.out, env_id=args.env_id, cluster=cluster)
    print(f"wrote {path} and {path.parent / 'config.json'}; evaluate it with: dallygym evaluate --agent {path.parent}")
    return 0


def _cmd_latency(args: argparse.Namespace) -> int:
    from ..sim.latency import get_latency_model, table_i_frame

    _print_frame(table_i_frame(get_latency_model(args.latency)), args.format)
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from ..sim import trace as tr

    if args.trace_command == "list":
        from ..sim.trace.real import shipped_trace_notes

        notes = shipped_trace_notes()
        rows = []
        for name in tr.shipped_traces():
            frame = tr.load_trace(name)
            duration = frame["total_iterations"] * frame["iter_time_s"]
            rows.append(
                {
                    "trace": name,
                    "jobs": len(frame),
                    "gpus_max": int(frame["num_gpus"].max()),
                    "span_h": round(float(frame["arrival_s"].max() - frame["arrival_s"].min()) / 3600, 1),
                    "duration_p50_s": round(float(duration.median())),
                    "gpu_hours": round(float((frame["num_gpus"] * duration).sum()) / 3600),
                    "source": notes.get(name, ""),
                }
            )
        frame = pd.DataFrame(rows)
        # Padded to one width, the notes read left-aligned in pandas' right-aligned table.
        frame["source"] = frame["source"].str.ljust(int(frame["source"].str.len().max()))
        _print_frame(frame, "table")
    elif args.trace_command == "generate":
        frame = tr.generate_trace(args.name, seed=args.seed, jobs=args.jobs)
        tr.write_trace(frame, args.out)
        print(f"wrote {len(frame)} jobs to {args.out}")
    else:
        from ..sim.trace.filters import describe_change
        from ..sim.trace.importers import report_lines

        options = dict(
            seed=args.seed,
            durations=args.durations,
            latency=args.latency,
            cluster=ClusterSpec(args.racks, args.machines_per_rack, args.gpus_per_machine),
            start_h=args.start_h,
            end_h=args.end_h,
            start=args.start,
            end=args.end,
            vc=args.cluster,
            max_jobs=args.max_jobs,
            oversize=args.oversize,
            model_map=_model_map(args.model_map),
        )
        if args.format == "gavel":
            options.update(
                throughputs=args.throughputs, worker_type=args.worker_type, missing_throughput=args.missing_throughput
            )
        elif args.throughputs is not None:
            raise ValueError("--throughputs applies to gavel files only")
        frame = tr.import_trace(args.format, args.path, **options)
        tr.write_trace(frame, args.out)
        report = frame.attrs["import_report"]
        # Every dropped or clamped row, one line each on stderr (never silent).
        for change in report["oversize"]["rows"]:
            print(f"dallygym: note: {describe_change(report['source'], change)}", file=sys.stderr)
        if args.report:
            with open(args.report, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(report, indent=2) + "\n")
        print(f"wrote {len(frame)} jobs to {args.out}")
        for line in report_lines(report):
            print(f"  {line}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .report import write_report

    path = write_report(args.dirs, args.html, title=args.title)
    print(f"wrote {path} ({path.stat().st_size / 1024:,.0f} kB)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from ..sim.trace import TraceError

    args = build_parser().parse_args(argv)
    handlers = {
        "simulate": _cmd_simulate,
        "compare": _cmd_compare,
        "sweep": _cmd_sweep,
        "train": _cmd_train,
        "train-sweep": _cmd_train_sweep,
        "evaluate": _cmd_evaluate,
        "agent": _cmd_agent,
        "latency": _cmd_latency,
        "trace": _cmd_trace,
        "report": _cmd_report,
    }
    try:
        return handlers[args.command](args)
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error of ours. Silence the final flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (TraceError, UnknownModelError, ClusterError, EngineError, ValueError, OSError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"dallygym: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
