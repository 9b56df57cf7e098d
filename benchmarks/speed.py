"""Speed benchmark: native simulation wall time, against gymnasium's CartPole-v1 step time.

    python benchmarks/speed.py [--repeats 5] [--env-repeats 3] [--out benchmarks/results]

Measures, in one process and one run (machines are noisy; the ratio to CartPole is the stable
figure):

* ``simulate(trace, racks, policy)`` wall time (trace loading, engine run and metrics) for each
  policy x trace x racks in {2, 4, 8, 16}: the median of ``--repeats`` runs;
* the end-to-end CLI time of ``dallygym simulate --policy fifo --racks 8 --trace batch-500``
  (a fresh Python process, imports included): the median of 3;
* CartPole-v1's raw step time through ``gym.make`` with random actions;
* ``DallyQueue-v0`` and ``DallyQueueSmall-v0`` steps per second with the Dally order and with
  random masked picks, and their ratio to CartPole's (``--queue-only`` measures just these);
* ``Dally-v0`` and ``DallySmall-v0`` steps per second with the Dally heuristic agent and with
  random masked actions (the median of ``--env-repeats`` measurements), and their ratio to
  CartPole's; and the split of a Dally-v0 step between engine, environment and agent.

Writes ``speed.csv`` and ``speed.md`` to ``--out``. Speed is a benchmark, never a test.

``--episode-cost`` measures instead the cost of one ``batch-500`` episode at 8 racks in
CartPole steps, for every shipped heuristic as the agent of ``Dally-v0`` and of
``DallyQueue-v0``, in ``--cost-processes`` fresh processes (``episode_cost.csv`` and ``.md``).

``--priority-cost`` measures instead what a learned priority agent's episode costs a search: a
native run of the committed ``agents/runs/priority-s0`` on one draw of each default training
cell (``batch-500`` and ``poisson-411``, seed 10, at 2, 4, 8 and 16 racks), with the engine
computing the network's keys itself (``kernels.net_keys``) and with ``priority()`` asked at
each pass (``compiled_keys`` giving none, as an input only Python computes would), beside
``dally-consolidated`` (the same offers, a fixed order) and ``dally``; the median of
``--repeats`` (``priority_cost.csv`` and ``.md``).

``--scaling`` measures instead how a native run grows with the trace: ``dallygym simulate`` on
philly-like traces of 10,000, 30,000 and 100,000 jobs (``dallygym trace generate philly-like
--jobs N``) at 16 and 64 racks under Dally, Tiresias and Gandiva, each run in its own process
(wall time, CPU time and that process's peak RSS from ``os.wait4``); writes ``scaling.csv`` and
``scaling.md``. The 100,000-job runs take minutes each.

``--train`` measures early training instead: ``dallygym train`` from a fresh network for
``--train-steps`` steps on ``Dally-v0`` and ``DallyQueue-v0``, steps/s and the ratio to CartPole
(``train_speed.csv`` and ``.md``). ``--whole-trace PHILLY_CSV`` runs every shipped policy on
the whole public Philly trace at ``--whole-racks`` (``whole_trace.csv`` and ``.md``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd

import dallygym
from dallygym import EngineConfig, simulate

RACKS = (2, 4, 8, 16)


def cartpole_step_s(steps: int = 200_000, seed: int = 0, chunks: int = 5) -> float:
    """Wall time of one ``CartPole-v1`` step through ``gym.make`` (random actions): the least
    mean over ``chunks`` runs of ``steps / chunks`` steps each, so that a moment of load on a
    shared machine (which would make every ratio to it look better) counts once at most."""
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    actions = np.random.default_rng(seed).integers(0, 2, size=steps)
    best = math.inf
    for chunk in np.array_split(actions, chunks):
        start = time.perf_counter()
        for a in chunk:
            _, _, terminated, truncated, _ = env.step(int(a))
            if terminated or truncated:
                env.reset()
        best = min(best, (time.perf_counter() - start) / len(chunk))
    env.close()
    return best


class _Idle(gym.Env):
    """An environment that does nothing: the observation and action spaces of ``Dally-v0``,
    a constant observation and info, episodes of ``length`` steps."""

    def __init__(self, length: int = 2868) -> None:
        from dallygym.envs.offer import OBS_DIM

        self.observation_space = gym.spaces.Box(0.0, 1.0, (OBS_DIM,), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self._obs = np.zeros(OBS_DIM, dtype=np.float32)
        self._mask = np.ones(4, dtype=bool)
        self._length = length
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return self._obs.copy(), {"action_mask": self._mask.copy()}

    def step(self, action):
        self._steps += 1
        return self._obs.copy(), 0.0, self._steps >= self._length, False, {"action_mask": self._mask.copy()}


def idle_step_s(steps: int = 2868, rounds: int = 20) -> float:
    """Wall time of one step of :class:`_Idle` made by ``gym.make`` as the package's ids are
    (without gymnasium's pass-through wrappers) with a constant agent answering through an
    SB3-style ``predict``: what any decision costs before the environment, the agent or the
    simulation does anything (the least of ``rounds`` episodes of ``steps`` steps)."""
    if "DallyBenchIdle-v0" not in gym.registry:
        gym.register("DallyBenchIdle-v0", entry_point=_Idle, order_enforce=False, disable_env_checker=True)
    env = gym.make("DallyBenchIdle-v0", length=steps)

    def predict(obs):
        return np.int64(0), None

    best = math.inf
    for _ in range(rounds):
        obs, _ = env.reset(seed=0)
        start = time.perf_counter()
        done = False
        while not done:
            obs, _, terminated, truncated, _ = env.step(int(predict(obs)[0]))
            done = terminated or truncated
        best = min(best, (time.perf_counter() - start) / steps)
    env.close()
    return best


def time_simulate(trace: str, racks: int, policy: str, repeats: int) -> tuple[float, dict]:
    times = []
    summary = {}
    for _ in range(repeats):
        start = time.perf_counter()
        result = simulate(trace, racks, policy=policy, config=EngineConfig())
        times.append(time.perf_counter() - start)
        summary = result.summary
    return statistics.median(times), summary


def env_steps_per_s(env_id: str, agent: str, min_steps: int = 20_000, seed: int = 0, **kwargs) -> dict:
    """Steps per second of ``env_id`` through ``gym.make``, over whole episodes until at least
    ``min_steps`` steps; ``agent`` is ``"dally"`` (the heuristic agent) or ``"random"``
    (uniform over the masked actions). Returns the rate with resets included, the rate of the
    steps alone (a reset runs the simulation up to the first real choice), the steps, and per
    episode the steps and the wall time. ``kwargs`` go to ``gym.make`` (e.g. a fixed trace)."""
    env = gym.make(env_id, **kwargs)
    rng = np.random.default_rng(seed)
    heuristic = dallygym.heuristic_agent("dally", env) if agent == "dally" else None
    steps = 0
    episode = 0
    in_steps_s = 0.0
    start = time.perf_counter()
    while steps < min_steps:
        obs, info = env.reset(seed=seed + episode)
        episode += 1
        done = env.unwrapped._done
        episode_start = time.perf_counter()
        while not done:
            if heuristic is not None:
                action, _ = heuristic.predict(obs)
            else:  # (the same picks as rng.choice(np.flatnonzero(mask)), at a fifth of its cost)
                valid = info["action_mask"].nonzero()[0]
                action = valid[rng.integers(valid.size)]
            obs, _, terminated, truncated, info = env.step(int(action))
            steps += 1
            done = terminated or truncated
        in_steps_s += time.perf_counter() - episode_start
    elapsed = time.perf_counter() - start
    return {
        "steps": steps,
        "steps_per_s": round(steps / elapsed),
        "steps_per_s_without_resets": round(steps / in_steps_s),
        "steps_per_episode": round(steps / episode),
        "ms_per_episode": round(1e3 * elapsed / episode, 1),
    }


class _TimedDecisions:
    """Wraps the engine's decision generator and adds up the time spent inside it."""

    def __init__(self, gen) -> None:
        self.gen = gen
        self.seconds = 0.0

    def send(self, value):
        start = time.perf_counter()
        try:
            return self.gen.send(value)
        finally:
            self.seconds += time.perf_counter() - start

    def __next__(self):
        return self.send(None)


def env_step_split(env_id: str = "Dally-v0", episodes: int = 7) -> dict:
    """Where a step of ``env_id`` with the Dally agent goes, in µs per step: the engine (inside
    its decision generator), the agent's ``predict``, and the environment around them
    (observation, mask, info, the step itself); and the mean reset in ms. Episodes use seeds
    0..episodes-1; the timers themselves add well under a microsecond per step."""
    from dallygym.sim.engine import Engine

    timed: list[_TimedDecisions] = []
    decisions = Engine.decisions

    def timed_decisions(engine, **kwargs):
        timed.append(_TimedDecisions(decisions(engine, **kwargs)))
        return timed[-1]

    Engine.decisions = timed_decisions
    try:
        env = gym.make(env_id, trace="batch-500" if env_id == "Dally-v0" else "small")
        agent = dallygym.heuristic_agent("dally", env)
        steps, reset_s, agent_s, step_s = 0, 0.0, 0.0, 0.0
        for episode in range(episodes):
            start = time.perf_counter()
            obs, _ = env.reset(seed=episode)
            reset_s += time.perf_counter() - start
            in_reset = timed[-1].seconds
            done = env.unwrapped._done
            while not done:
                start = time.perf_counter()
                action, _ = agent.predict(obs)
                middle = time.perf_counter()
                obs, _, terminated, truncated, _ = env.step(int(action))
                end = time.perf_counter()
                agent_s += middle - start
                step_s += end - middle
                steps += 1
                done = terminated or truncated
            timed[-1].seconds -= in_reset  # the reset's share is in reset_s
        engine_s = sum(t.seconds for t in timed)
    finally:
        Engine.decisions = decisions
    return {
        "engine_us": round(1e6 * engine_s / steps, 1),
        "environment_us": round(1e6 * (step_s - engine_s) / steps, 1),
        "agent_us": round(1e6 * agent_s / steps, 1),
        "reset_ms": round(1e3 * reset_s / episodes, 1),
    }


#: DallyQueue ids measured, on the fixed shipped traces (the registered ids draw a new trace
#: per reset, whose episode length varies).
QUEUE_ENVS = {"DallyQueueSmall-v0": "small", "DallyQueue-v0": "batch-500"}
#: The hardest realistic case for a step: random masked picks on a long real trace at a size
#: where it contends (philly-48h at 2 racks), under the default offer rule and under the
#: headline agents' (``offer_rule``, ``makespan_reference``).
QUEUE_HARD = (
    ("DallyQueue-v0", "philly-48h", 2, {}),
    ("DallyQueue-v0", "philly-48h", 2, {"offer_rule": "protected-remaining", "makespan_reference": "dally"}),
)


def queue_env_rows(step_s: float, repeats: int) -> pd.DataFrame:
    """``DallyQueue`` steps per second with the Dally order (slot 0) and random masked picks,
    and their ratio to CartPole's step rate ``1 / step_s``."""
    rows = []
    load_before = os.getloadavg()[0]
    for env_id, trace in QUEUE_ENVS.items():
        for lease_picks, agent in itertools.product(("waiting", "all"), ("dally", "random")):
            runs = sorted(
                (env_steps_per_s(env_id, agent, trace=trace, lease_picks=lease_picks) for _ in range(repeats)),
                key=lambda r: r["steps_per_s"],
            )
            row = {"env": env_id, "trace": trace, "racks": "", "offer_rule": "dally", "lease_picks": lease_picks}
            row.update(agent=agent, **runs[len(runs) // 2])
            row["cartpole_ratio"] = round(row["steps_per_s"] * step_s, 3)
            rows.append(row)
            print(f"{env_id:18s} {agent:7s} {row['steps_per_s']:9,} steps/s", flush=True)
    for env_id, trace, racks, options in QUEUE_HARD:
        runs = sorted(
            (env_steps_per_s(env_id, "random", trace=trace, racks=racks, **options) for _ in range(repeats)),
            key=lambda r: r["steps_per_s"],
        )
        rule = options.get("offer_rule", "dally")
        row = {"env": env_id, "trace": trace, "racks": racks, "offer_rule": rule, "lease_picks": "waiting"}
        row.update(agent="random", **runs[len(runs) // 2])
        row["cartpole_ratio"] = round(row["steps_per_s"] * step_s, 3)
        rows.append(row)
        print(f"{env_id:18s} {trace} {racks} racks {rule}: {row['steps_per_s']:9,} steps/s", flush=True)
    frame = pd.DataFrame(rows)
    # The machine may be shared: its load says how much the rates (and CartPole's) are worth.
    frame.attrs["load"] = (load_before, os.getloadavg()[0], os.cpu_count())
    return frame


def queue_lines(queue_frame: pd.DataFrame, repeats: int) -> list[str]:
    return [
        f"`DallyQueue` steps per second through `gym.make` on the fixed traces (whole episodes, at least "
        f"20,000 steps per measurement, the median of {repeats}), with the Dally order (the heuristic agent: "
        "always slot 0) and with random masked picks, under both `lease_picks` modes (`waiting`, the default: "
        "a boundary offers only waiting jobs; `all`: every lease-expired job too); columns as above "
        "(`steps_per_episode` = picks per episode). The last rows are the hardest realistic case: random "
        "picks on the long real trace philly-48h at 2 racks, where it contends, under the default offer "
        "rule and under the headline agents' settings (`offer_rule=protected-remaining`, "
        "`makespan_reference=dally`; `racks` empty: the environment's own size):",
        "",
        "```\n" + queue_frame.to_string(index=False) + "\n```",
        "",
        *(
            [
                f"1-minute load average {load[0]:.1f} at the start of these measurements and {load[1]:.1f} at "
                f"their end ({load[2]} CPUs): on a shared machine the rates and CartPole's drop together, "
                "the ratios less.",
                "",
            ]
            if (load := queue_frame.attrs.get("load"))
            else []
        ),
    ]


def episode_cost_rows(
    step_s: float,
    episodes: int = 2,
    trace: str = "batch-500",
    envs: tuple[str, ...] = ("Dally-v0", "DallyQueue-v0"),
    rounds: int = 3,
) -> pd.DataFrame:
    """Wall time of one episode on ``trace`` (8 racks) for every shipped heuristic as the agent
    of ``Dally-v0`` and ``DallyQueue-v0`` (seeds 0..episodes-1, resets included; the mean), in
    ms and in CartPole steps (wall / CartPole step time). Each agent is measured in ``rounds``
    rounds, the agents taking turns within a round, and its least round counts: a moment of
    load on a shared machine then slows one round of one agent, not the figure."""
    from dallygym.sim.policies import POLICIES

    rows = []
    for env_id in envs:
        env = gym.make(env_id, trace=trace)
        agents = {name: dallygym.heuristic_agent(name, env) for name in POLICIES}
        best = dict.fromkeys(agents, math.inf)
        steps = {}
        for _ in range(rounds):
            for name, agent in agents.items():
                steps[name] = 0
                start = time.perf_counter()
                for episode in range(episodes):
                    obs, _ = env.reset(seed=episode)
                    done = env.unwrapped._done
                    while not done:
                        obs, _, terminated, truncated, _ = env.step(int(agent.predict(obs)[0]))
                        steps[name] += 1
                        done = terminated or truncated
                best[name] = min(best[name], (time.perf_counter() - start) / episodes)
        for name, wall in best.items():
            rows.append(
                {
                    "env": env_id,
                    "agent": name,
                    "steps_per_episode": round(steps[name] / episodes),
                    "ms_per_episode": round(1e3 * wall, 1),
                    "cartpole_steps": round(wall / step_s),
                }
            )
            print(f"{env_id:14s} {name:20s} {1e3 * wall:8.1f} ms/episode", flush=True)
        env.close()
    return pd.DataFrame(rows)


def episode_cost_processes(processes: int, episodes: int, envs: tuple[str, ...]) -> tuple[pd.DataFrame, list[int]]:
    """:func:`episode_cost_rows` in ``processes`` fresh Python processes, one after the other,
    each with its own CartPole measurement: per agent the median and the range over the
    processes. (Two processes of the same code can differ by several percent -- memory layout,
    what the machine does meanwhile -- more than the rounds within one process do.) Returns
    the table and CartPole's steps/s in each process."""
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(processes):
            out = Path(tmp) / f"cost{k}.csv"
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--episode-cost-process",
                    str(out),
                    "--episodes",
                    str(episodes),
                    "--cost-envs",
                    *envs,
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            frames.append(pd.read_csv(out).assign(process=k))
    rates = [int(frame["cartpole_per_s"].iloc[0]) for frame in frames]
    every = pd.concat(frames)
    rows = []
    for (env_id, agent), runs in every.groupby(["env", "agent"], sort=False):
        cost = runs["cartpole_steps"]
        rows.append(
            {
                "env": env_id,
                "agent": agent,
                "steps_per_episode": runs["steps_per_episode"].iloc[0],
                "ms_per_episode": round(runs["ms_per_episode"].median(), 1),
                "cartpole_steps": round(cost.median()),
                "least": cost.min(),
                "most": cost.max(),
            }
        )
    return pd.DataFrame(rows), rates


def cost_lines(cost_frame: pd.DataFrame, episodes: int, processes: int) -> list[str]:
    return [
        f"Cost of one `batch-500` episode at 8 racks with each shipped heuristic as the agent (the fixed trace, "
        f"seeds 0..{episodes - 1}, resets included, the mean; in each of {processes} fresh processes, one after "
        "the other, the least of 3 rounds, the agents taking turns, against CartPole measured in that process): "
        "decisions, wall time and `cartpole_steps` = wall time / CartPole step time, the median over the "
        "processes, with the least and the most:",
        "",
        "```\n" + cost_frame.to_string(index=False) + "\n```",
        "",
    ]


#: The scaling table: trace lengths, cluster sizes and policies.
SCALING_JOBS = (10_000, 30_000, 100_000)
SCALING_RACKS = (16, 64)
SCALING_POLICIES = ("dally", "tiresias", "gandiva")


def run_measured(args: list[str], limit_s: float | None = None) -> dict:
    """Run ``python -m dallygym.experiments.cli *args`` in its own process: wall s, CPU s and the
    process's peak resident set (MB), from ``os.wait4`` (that child's own rusage). With
    ``limit_s``, a run still going then is killed and returned with ``summary`` None."""
    import threading

    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dallygym.experiments.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = threading.Event()

    def stop() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(limit_s, stop) if limit_s else None
    if timer:
        timer.start()
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if timer:
        timer.cancel()
    stopped = killed.is_set()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode and not stopped:
        raise RuntimeError(f"dallygym {' '.join(args)} failed ({proc.returncode}): {err[-2000:]}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "max_rss_mb": round(usage.ru_maxrss / 1024),
        "summary": None if stopped else json.loads(out),
    }


def whole_trace_rows(
    step_s: float, source: str, racks: int = 8, limit_s: float = 600.0, workers: int = 2
) -> pd.DataFrame:
    """Every shipped policy on a whole imported Philly trace (``dallygym trace import philly
    SOURCE --seed 0``), one ``dallygym simulate`` process each, ``workers`` at a time; a run
    still going after ``limit_s`` is stopped and reported so."""
    from concurrent.futures import ThreadPoolExecutor

    from dallygym.sim.policies import POLICIES

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "philly-whole.csv"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dallygym.experiments.cli",
                "trace",
                "import",
                "philly",
                source,
                "--seed",
                "0",
                "--out",
                str(path),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        jobs = sum(1 for _ in path.open()) - 1

        def one(policy: str) -> dict:
            run = run_measured(
                [
                    "simulate",
                    "--policy",
                    policy,
                    "--racks",
                    str(racks),
                    "--trace",
                    str(path),
                    "--format",
                    "json",
                    "--no-progress",
                ],
                limit_s=limit_s,
            )
            done = run["summary"] is not None
            print(f"whole trace {policy:20s} {run['wall_s']:8.1f} s {'' if done else '(stopped)'}", flush=True)
            return {
                "policy": policy,
                "jobs": jobs,
                "racks": racks,
                "wall_s": run["wall_s"],
                "cpu_s": run["cpu_s"],
                "max_rss_mb": run["max_rss_mb"],
                "cartpole_steps_m": round(run["wall_s"] / step_s / 1e6, 2),
                "status": "ok" if done else f"stopped after {limit_s:.0f} s",
                "makespan_h": round(run["summary"]["makespan_s"] / 3600, 1) if done else None,
            }

        with ThreadPoolExecutor(workers) as pool:
            return pd.DataFrame(list(pool.map(one, list(POLICIES))))


def scaling_rows(
    step_s: float, jobs=SCALING_JOBS, racks=SCALING_RACKS, policies=SCALING_POLICIES, seed: int = 0
) -> pd.DataFrame:
    """The scaling table: one ``dallygym simulate`` process per (jobs, racks, policy)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in jobs:
            path = Path(tmp) / f"philly-like-{n}.csv"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "dallygym.experiments.cli",
                    "trace",
                    "generate",
                    "philly-like",
                    "--jobs",
                    str(n),
                    "--seed",
                    str(seed),
                    "--out",
                    str(path),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            for r in racks:
                for policy in policies:
                    run = run_measured(
                        [
                            "simulate",
                            "--policy",
                            policy,
                            "--racks",
                            str(r),
                            "--trace",
                            str(path),
                            "--format",
                            "json",
                            "--no-progress",
                        ]
                    )
                    rows.append(
                        {
                            "jobs": n,
                            "racks": r,
                            "policy": policy,
                            "wall_s": run["wall_s"],
                            "cpu_s": run["cpu_s"],
                            "max_rss_mb": run["max_rss_mb"],
                            "cartpole_steps_m": round(run["wall_s"] / step_s / 1e6, 2),
                            "makespan_h": round(run["summary"]["makespan_s"] / 3600, 1),
                        }
                    )
                    print(
                        f"{n:7,} jobs {r:3d} racks {policy:9s} {run['wall_s']:8.2f} s {run['max_rss_mb']:6,} MB",
                        flush=True,
                    )
    return with_growth(pd.DataFrame(rows))


def with_growth(frame: pd.DataFrame) -> pd.DataFrame:
    """Add ``x_first``: each run's CPU time over the same policy and cluster's at the fewest jobs
    (CPU time, not wall time: it depends least on what else the machine runs)."""
    first = frame[frame["jobs"] == frame["jobs"].min()].set_index(["racks", "policy"])["cpu_s"]
    frame["x_first"] = [round(c / first[(r, p)], 1) for c, r, p in zip(frame["cpu_s"], frame["racks"], frame["policy"])]
    return frame


def scaling_main(out: Path, step_s: float, jobs=SCALING_JOBS) -> int:
    frame = scaling_rows(step_s, jobs=jobs)
    how = (
        f"Produced by `python benchmarks/speed.py --scaling` (dallygym {dallygym.__version__}, Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores); CartPole-v1 in the same "
        f"run: {1 / step_s:,.0f} steps/s."
    )
    return write_scaling(out, frame, how)


def write_scaling(out: Path, frame: pd.DataFrame, how: str) -> int:
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "scaling.csv", index=False)
    lines = [
        "# Scaling with the trace length",
        "",
        how,
        "",
        "`dallygym simulate --policy P --racks R --trace philly-like-N.csv --format json --no-progress`, one "
        "process per row (Python start-up, trace loading and metrics included), on traces from `dallygym trace "
        "generate philly-like --jobs N --seed 0` (the philly-like mixes and arrival rate, so a longer trace "
        "spans longer). `wall_s`/`cpu_s`: the process's wall and CPU time; `max_rss_mb`: its peak resident "
        "set; `cartpole_steps_m`: wall time in millions of CartPole steps; `x_first`: CPU time over the "
        f"same policy and cluster at {frame['jobs'].min():,} jobs.",
        "",
        "```\n" + frame.to_string(index=False) + "\n```",
        "",
    ]
    (out / "scaling.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def time_cli(args: list[str], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dallygym.experiments.cli", *args], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


#: ``--train``: (environment, training environments, steps per environment per rollout) of the
#: early-training measurement: ``dallygym train``'s defaults for Dally-v0, the committed
#: agents' recipe for DallyQueue-v0 (without the warm start).
TRAIN_SETUPS = (("Dally-v0", 8, 512), ("DallyQueue-v0", 4, 256))


def train_rows(step_s: float, steps: int = 8192) -> pd.DataFrame:
    """Early training: ``dallygym train``'s procedure (``dallygym.learning.trainer.train``) for ``steps``
    steps from a fresh network, no evaluations or checkpoints, timed whole (environment
    construction, rollouts, PPO updates, saving), and its steps/s as a ratio to CartPole's."""
    from dallygym.learning.trainer import TrainConfig, train

    rows = []
    for env_id, n_envs, n_steps in TRAIN_SETUPS:
        with tempfile.TemporaryDirectory() as tmp:
            config = TrainConfig(
                env_id=env_id,
                total_timesteps=steps,
                n_envs=n_envs,
                n_steps=n_steps,
                eval_freq_steps=10**9,
                checkpoint_freq_steps=10**9,
                time_limit_min=None,
                progress_bar=False,
                out_dir=tmp,
            )
            start = time.perf_counter()
            train(config)
            wall = time.perf_counter() - start
        rate = steps / wall
        rows.append(
            {
                "env": env_id,
                "n_envs": n_envs,
                "steps": steps,
                "wall_s": round(wall, 1),
                "steps_per_s": round(rate, 1),
                "cartpole_ratio": round(rate * step_s, 4),
            }
        )
        print(f"train {env_id:14s} {rate:8.1f} steps/s", flush=True)
    return pd.DataFrame(rows)


def train_lines(frame: pd.DataFrame, steps: int) -> list[str]:
    return [
        f"`dallygym train` from a fresh network (`dallygym.learning.trainer.train`, MaskablePPO, one torch thread, "
        f"no evaluations), {steps:,} steps each, timed whole; `cartpole_ratio` = training steps/s / "
        "CartPole steps/s:",
        "",
        "```\n" + frame.to_string(index=False) + "\n```",
        "",
    ]


#: The draws of ``--priority-cost``: the default training cells of the priority search, seed 10.
PRIORITY_COST_CELLS = tuple((gen, racks) for gen in ("batch-500", "poisson-411") for racks in RACKS)
#: The agent runs ``--priority-cost`` times: each agent's keys compiled and asked of ``priority()``.
PRIORITY_COST_AGENT_RUNS = ("net_compiled", "net_python", "limit_compiled", "limit_python")


def priority_cost_rows(step_s: float, repeats: int) -> pd.DataFrame:
    """Wall time of one native episode per draw of :data:`PRIORITY_COST_CELLS`: ``dally``,
    ``dally-consolidated``, and the committed ``priority-s0`` agent (queue features) and
    ``priority-limit-s0`` agent (queue features and the makespan limit's inputs, against
    Dally's makespan on the draw) each with compiled keys and with ``priority()`` asked; the
    median of ``repeats``, the runs taking turns."""
    from dallygym.learning.priority_search import PriorityAgent
    from dallygym.sim.cluster import ClusterSpec
    from dallygym.sim.policies.tuned import NetPriorityPolicy
    from dallygym.sim.trace import generate_trace

    runs_dir = Path(__file__).resolve().parent.parent / "agents" / "runs"
    agent, limit_agent = PriorityAgent(runs_dir / "priority-s0"), PriorityAgent(runs_dir / "priority-limit-s0")
    own = NetPriorityPolicy.compiled_keys

    def timed(trace, racks: int, policy, compiled: bool = True) -> tuple[float, dict]:
        NetPriorityPolicy.compiled_keys = own if compiled else (lambda self, view: None)
        try:
            start = time.perf_counter()
            summary = simulate(trace, ClusterSpec(racks, 8, 8), policy=policy).summary
            return time.perf_counter() - start, summary
        finally:
            NetPriorityPolicy.compiled_keys = own

    rows = []
    for gen, racks in PRIORITY_COST_CELLS:
        trace = generate_trace(gen, seed=10)
        runs = {name: [] for name in ("dally", "dally-consolidated", *PRIORITY_COST_AGENT_RUNS)}
        same = True
        for _ in range(repeats):
            wall, dally = timed(trace, racks, "dally")
            runs["dally"].append(wall)
            runs["dally-consolidated"].append(timed(trace, racks, "dally-consolidated")[0])
            for prefix, policy in (("net", agent.policy), ("limit", limit_agent.policy)):
                wall_c, ours = timed(trace, racks, policy(dally["makespan_s"]))
                wall_p, theirs = timed(trace, racks, policy(dally["makespan_s"]), compiled=False)
                runs[f"{prefix}_compiled"].append(wall_c)
                runs[f"{prefix}_python"].append(wall_p)
                same = same and ours == theirs
        row = {"trace": gen, "racks": racks}
        row.update({f"{name}_ms": round(1e3 * statistics.median(times), 1) for name, times in runs.items()})
        for prefix in ("net", "limit"):
            row[f"{prefix}_speedup"] = round(row[f"{prefix}_python_ms"] / row[f"{prefix}_compiled_ms"], 2)
        row["net_cartpole_steps"] = round(statistics.median(runs["net_compiled"]) / step_s)
        row["same_result"] = same
        rows.append(row)
    return pd.DataFrame(rows)


def priority_cost_lines(frame: pd.DataFrame, repeats: int) -> list[str]:
    """The ``--priority-cost`` table and what it means for a search iteration."""
    # An iteration of the default search: the mean and 14 mirrored samples, on one draw of each of the
    # 12 default cells (the 2- and 4-rack cells twice): the episodes of this table, weighted.
    weight = frame["racks"].map({2: 2, 4: 2, 8: 1, 16: 1})
    per_iteration = {name: 15 * float((frame[f"{name}_ms"] * weight).sum()) / 1e3 for name in PRIORITY_COST_AGENT_RUNS}
    return [
        "Wall time of one native run of a learned priority agent on one draw of each default training cell of "
        "the priority search (seed 10): the committed `agents/runs/priority-s0` (8 hidden units over the queue "
        "features, `net_*`) and `agents/runs/priority-limit-s0` (the same and the makespan limit's four inputs, "
        "against Dally's makespan on the draw, `limit_*`), each with the engine computing the network's keys "
        "itself (`*_compiled`) and with `priority()` asked at each pass (`*_python`, as for a priority a policy "
        "computes in Python), beside `dally` and `dally-consolidated` (the agents' offers with a fixed order); the "
        f"median of {repeats}, the runs taking turns; `same_result`: each agent's two runs end with the same "
        "summary:",
        "",
        "```",
        frame.to_string(index=False),
        "```",
        "",
        f"- One iteration of the default search (the mean and 14 mirrored samples on the 12 default cells, the 2- and "
        f"4-rack ones twice) plays these episodes: {per_iteration['net_compiled']:.0f} CPU-seconds with the "
        f"compiled keys, {per_iteration['net_python']:.0f} with `priority()` asked (on a draw of seed 10; the "
        f"seeds drawn vary); with the limit inputs {per_iteration['limit_compiled']:.0f} and "
        f"{per_iteration['limit_python']:.0f}.",
    ]


def write_part(
    out: Path, stem: str, title: str, options: str, frame: pd.DataFrame, body: list[str], rates: list[float]
) -> int:
    """Write one partial measurement (``stem``.csv and .md, the command and CartPole's steps/s
    in the header: ``rates``, one for the same run, or one per process that measured) and
    print it."""
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / f"{stem}.csv", index=False)
    where = "in the same run" if len(rates) == 1 else "in the processes"
    lines = [
        f"# {title}",
        "",
        f"Produced by `python benchmarks/speed.py {options}` (dallygym {dallygym.__version__}, Python "
        f"{platform.python_version()}, {platform.machine()}); CartPole-v1 {where}: "
        + ", ".join(f"{rate:,.0f}" for rate in rates)
        + " steps/s.",
        "",
        *body,
    ]
    (out / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--env-repeats", type=int, default=3, help="measurements of each environment rate; the median one is reported"
    )
    parser.add_argument("--policies", nargs="+", default=["fifo", "dally"])
    parser.add_argument("--traces", nargs="+", default=["batch-500", "poisson-411"])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument(
        "--queue-only",
        action="store_true",
        help="measure only the DallyQueue environments (writes queue_speed.csv/.md)",
    )
    parser.add_argument(
        "--scaling", action="store_true", help="measure only the scaling table (writes scaling.csv/.md; takes long)"
    )
    parser.add_argument(
        "--scaling-jobs", nargs="+", type=int, default=list(SCALING_JOBS), help="trace lengths of --scaling"
    )
    parser.add_argument(
        "--episode-cost",
        action="store_true",
        help="measure only the episode cost per heuristic (writes episode_cost.csv/.md)",
    )
    parser.add_argument("--episodes", type=int, default=2, help="episodes per heuristic of the episode cost")
    parser.add_argument(
        "--cost-processes",
        type=int,
        default=3,
        help="fresh processes of the episode cost, one after the other (default 3)",
    )
    parser.add_argument("--episode-cost-process", metavar="CSV", help=argparse.SUPPRESS)
    parser.add_argument(
        "--cost-envs", nargs="+", default=["Dally-v0", "DallyQueue-v0"], help="environments of the episode cost"
    )
    parser.add_argument(
        "--whole-trace",
        metavar="PHILLY_CSV",
        help="measure only every shipped policy on this whole Philly trace (the Pollux "
        "artifact's philly.csv), imported with seed 0 (writes whole_trace.csv/.md)",
    )
    parser.add_argument("--whole-racks", type=int, default=8, help="racks of --whole-trace (default 8)")
    parser.add_argument(
        "--whole-limit-s",
        type=float,
        default=600.0,
        help="stop a --whole-trace run after this many seconds (default 600)",
    )
    parser.add_argument(
        "--train", action="store_true", help="measure only early training steps/s (writes train_speed.csv/.md)"
    )
    parser.add_argument("--train-steps", type=int, default=8192, help="steps of each --train run")
    parser.add_argument(
        "--priority-cost",
        action="store_true",
        help="measure only a learned priority agent's native episode (writes priority_cost.csv/.md)",
    )
    args = parser.parse_args(argv)

    if args.episode_cost_process:  # one process of --episode-cost (see episode_cost_processes)
        step_s = cartpole_step_s()
        frame = episode_cost_rows(step_s, episodes=args.episodes, envs=tuple(args.cost_envs))
        frame.assign(cartpole_per_s=round(1 / step_s)).to_csv(args.episode_cost_process, index=False)
        return 0
    if args.episode_cost:
        cost_frame, rates = episode_cost_processes(args.cost_processes, args.episodes, tuple(args.cost_envs))
        return write_part(
            Path(args.out),
            "episode_cost",
            "Episode cost per heuristic",
            f"--episode-cost --episodes {args.episodes} --cost-processes {args.cost_processes} "
            f"--cost-envs {' '.join(args.cost_envs)}",
            cost_frame,
            cost_lines(cost_frame, args.episodes, args.cost_processes),
            rates,
        )
    step_s = cartpole_step_s()
    if args.priority_cost:
        frame = priority_cost_rows(step_s, args.repeats)
        return write_part(
            Path(args.out),
            "priority_cost",
            "Priority agent episode cost",
            f"--priority-cost --repeats {args.repeats}",
            frame,
            priority_cost_lines(frame, args.repeats),
            [1 / step_s],
        )
    if args.whole_trace:
        whole = whole_trace_rows(step_s, args.whole_trace, args.whole_racks, args.whole_limit_s)
        body = [
            f"Every shipped policy on the whole trace ({whole['jobs'].iloc[0]:,} jobs, `dallygym trace import "
            f"philly {args.whole_trace} --seed 0`) at {args.whole_racks} racks: `dallygym simulate --policy P "
            f"--racks {args.whole_racks} --trace FILE --format json --no-progress`, one process per policy, two "
            "at a time on the 2 cores (wall and CPU time and peak RSS of that process, from `os.wait4`; "
            "`cartpole_steps_m` = wall time in millions of CartPole steps):",
            "",
            "```\n" + whole.drop(columns=["jobs", "racks"]).to_string(index=False) + "\n```",
            "",
        ]
        return write_part(
            Path(args.out),
            "whole_trace",
            "The whole public Philly trace under every policy",
            f"--whole-trace {args.whole_trace} --whole-racks {args.whole_racks} --whole-limit-s {args.whole_limit_s:g}",
            whole,
            body,
            [1 / step_s],
        )
    if args.train:
        train_frame = train_rows(step_s, args.train_steps)
        return write_part(
            Path(args.out),
            "train_speed",
            "Training speed",
            f"--train --train-steps {args.train_steps}",
            train_frame,
            train_lines(train_frame, args.train_steps),
            [1 / step_s],
        )
    if args.scaling:
        return scaling_main(Path(args.out), step_s, jobs=args.scaling_jobs)
    if args.queue_only:
        queue_frame = queue_env_rows(step_s, args.env_repeats)
        return write_part(
            Path(args.out),
            "queue_speed",
            "DallyQueue speed",
            f"--queue-only --env-repeats {args.env_repeats}",
            queue_frame,
            queue_lines(queue_frame, args.env_repeats),
            [1 / step_s],
        )
    rows = []
    for policy in args.policies:
        for trace in args.traces:
            for racks in RACKS:
                wall, summary = time_simulate(trace, racks, policy, args.repeats)
                rows.append(
                    {
                        "policy": policy,
                        "trace": trace,
                        "racks": racks,
                        "wall_s": round(wall, 4),
                        "cartpole_steps_equivalent": round(wall / step_s),
                        "makespan_h": round(summary["makespan_s"] / 3600, 1),
                        "placements": (
                            summary["placements_machine"] + summary["placements_rack"] + summary["placements_network"]
                        ),
                    }
                )
                print(f"{policy:8s} {trace:12s} {racks:3d} racks  {wall:7.3f} s", flush=True)
    cli_s = time_cli(["simulate", "--policy", "fifo", "--racks", "8", "--trace", "batch-500"])
    frame = pd.DataFrame(rows)
    env_rows = []
    for env_id, trace in (("Dally-v0", "batch-500"), ("DallySmall-v0", "small")):
        for agent in ("dally", "random"):
            runs = sorted(
                (env_steps_per_s(env_id, agent, trace=trace) for _ in range(args.env_repeats)),
                key=lambda r: r["steps_per_s"],
            )
            row = {"env": env_id, "agent": agent, **runs[len(runs) // 2]}
            row["cartpole_ratio"] = round(row["steps_per_s"] * step_s, 3)
            env_rows.append(row)
            print(
                f"{env_id:14s} {agent:7s} {row['steps_per_s']:9,} steps/s "
                f"({row['steps_per_s_without_resets']:,} without resets)",
                flush=True,
            )
    env_frame = pd.DataFrame(env_rows)
    queue_frame = queue_env_rows(step_s, args.env_repeats)
    split = env_step_split()
    idle_s = idle_step_s()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "speed.csv", index=False)
    env_frame.to_csv(out / "env_speed.csv", index=False)
    lines = [
        "# Speed benchmark",
        "",
        f"Produced by `python benchmarks/speed.py --repeats {args.repeats} --env-repeats {args.env_repeats}` "
        f"(dallygym {dallygym.__version__}, "
        f"Python {platform.python_version()}, {platform.machine()}).",
        "",
        f"- CartPole-v1 raw step (gym.make, random actions): {step_s * 1e6:.2f} µs "
        f"({1 / step_s:,.0f} steps/s), measured in the same run (the fastest of five runs of 40,000 steps).",
        f"- `dallygym simulate --policy fifo --racks 8 --trace batch-500`, whole CLI process "
        f"(Python start-up and imports included): {cli_s:.2f} s (median of 3).",
        "",
        "In-process `simulate()` (trace load + run + metrics), median of the repeats; "
        "`cartpole_steps_equivalent` = wall time / CartPole step time.",
        "",
        "```\n" + frame.to_string(index=False) + "\n```",
        "",
        f"Environment steps per second through `gym.make` (whole episodes, at least 20,000 steps per measurement; "
        f"the median of {args.env_repeats} measurements), with "
        "resets included and without them (a reset runs the simulation up to the first real choice); "
        "`steps_per_episode` = decisions per episode (offers where waiting is a real choice), "
        "`ms_per_episode` = wall time per episode, reset included; "
        "`cartpole_ratio` = env steps/s (resets included) / CartPole steps/s (1.0 = as fast as CartPole):",
        "",
        "```\n" + env_frame.to_string(index=False) + "\n```",
        "",
        f"- A `Dally-v0` step with the Dally agent, split: {split['engine_us']} µs in the engine (the simulation "
        f"between two decisions), {split['environment_us']} µs in the environment (observation, mask, info, "
        f"the step's own code), {split['agent_us']} µs in the agent; a reset takes {split['reset_ms']} ms "
        "(7 episodes, timers "
        "around the engine's decision generator).",
        f"- A step of an environment that does nothing (`Dally-v0`'s spaces, a constant observation and info) "
        f"through `gym.make`, registered as `Dally-v0` is (no pass-through wrappers), with a constant agent: "
        f"{idle_s * 1e6:.2f} µs, {idle_s / step_s:.2f} CartPole steps "
        "(the least of 20 episodes of 2,868 steps): what any decision costs before the environment, the agent or "
        "the simulation does anything.",
        "",
    ]
    lines += queue_lines(queue_frame, args.env_repeats)
    lines += ["The cost of an episode per heuristic is its own part: `--episode-cost` (`episode_cost.md`).", ""]
    queue_frame.to_csv(out / "queue_speed.csv", index=False)
    (out / "speed.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
