"""Learned priority agents: a small network scores each job, an evolution strategy finds it.

A *priority agent* is :class:`~dallygym.sim.policies.tuned.NetPriorityPolicy` with parameters
learned here: at every scheduling pass the engine orders the jobs by ``v . tanh(W f + b)`` (lower
first) over each job's ``DallyQueue-v0`` features ``f``, and offers wait for the most
consolidated tier (the offer rule of the headline ``DallyQueue-v0`` agents). It answers the
queue environment's question -- which job next -- once per pass for all jobs rather than once
per step, and it learns from whole episodes: the objective below is computed from the run's
mean JCT and makespan, with no reward shaping, teacher or guard.

Inputs (``inputs``, :data:`INPUT_SETS`): by default the queue features (``"queue"``);
``"queue+drain"`` adds ``drain_share`` (:func:`~dallygym.sim.policies.tuned.drain_share`: a
job's remaining estimate against the time the cluster needs for all the unfinished work it
knows of, which says whether serving small jobs first still leaves a long job room to finish
within the makespan; the queue features show each job alone). ``"queue+limit"`` adds the
makespan limit's four inputs (:func:`~dallygym.sim.policies.tuned.limit_inputs`, the queue
environment's ``limit_features``): when the job, the longest job and all the known work would
end against the limit, which is the makespan of auto-tuned Dally's run of the same draw (the
objective's reference, known before the run as in ``DallyQueue-v0`` with
``makespan_reference="dally"``; for a trace whose jobs arrive over time it holds knowledge of
the arrivals to come). A run file names its inputs.

Search (:func:`search`): a diagonal-Gaussian evolution strategy over the flattened parameters,
from a random initialisation (``W`` and ``v`` drawn N(0, 1/fan-in), ``b`` = 0; the run's seed
draws it and everything after). Each iteration draws parameter vectors around the current mean,
evaluates them and the mean on the same training draws (common random numbers), and moves the
mean and the per-parameter deviation by the ranks of their values: by separable natural
evolution strategies with mirrored samples (:func:`snes`, ``method="snes"``), every sample
weighted by its rank; or by the cross-entropy method (:func:`cem`, ``method="cem"``), to the
``elite`` best, whose deviation collapses to its floor within a few iterations.

Objective of a parameter vector on one draw (lower is better), against auto-tuned Dally's native
run of the same draw::

    ln(mean JCT / Dally's mean JCT) + penalty x max(0, makespan excess over Dally's in % - margin)

and its value in an iteration is the mean over that iteration's draws: one draw per
(generator, size) entry of the training cells, its seed drawn from the training seeds 10-19
(disjoint from the validation seeds 100-101 and the held-out seeds >= 2000). The default cells
are ``batch-500`` and ``poisson-411`` at 2, 2, 4, 4, 8 and 16 racks of 8 x 8 GPUs: every size of
the held-out grid, the small ones (where makespan breaks) twice.

Which mean becomes the agent: by default the final one. With ``select_last`` = K
(:func:`select_best`), the means after the last K updates are each evaluated on the same fixed
draws -- every training seed of every distinct training cell -- and the lowest is kept. Only
training draws take part; the held-out grid never chooses.

A run directory holds ``priority.json`` (the chosen mean's parameters, the settings, the history
of objectives, means and deviations)
and ``initial/priority.json`` (the random initialisation: what the search itself contributed).
A search may instead start from an earlier priority agent (``start``, :func:`embedded`), for
example one searched without the inputs this one adds: then ``initial`` is that agent, and the
settings name it and its command (the time of both searches is the agent's training time).
:class:`PriorityAgent` loads either through the same checks as any agent file: a regular file,
bounded in size, strict JSON, the inputs and shapes the policy expects; nothing in it is run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..sim.cluster import ClusterSpec
from ..sim.policies.tuned import (
    DRAIN_SHARE,
    LIMIT_INPUTS,
    MAX_HIDDEN,
    NetPriorityPolicy,
    known_net_inputs,
    needs_limit,
    net_inputs,
)
from ..sim.simulate import simulate
from ..sim.trace import generate_trace
from .agent_files import AgentLoadError, parse_json, read_regular_file, write_atomic

#: The inputs the network reads by default (:func:`~dallygym.sim.policies.tuned.net_inputs`).
NET_INPUTS = net_inputs()
#: The input sets a search can give the network, by name: the queue features alone (the
#: default), or with ``drain_share``.
INPUT_SETS = {
    "queue": NET_INPUTS,
    "queue+drain": (*NET_INPUTS, DRAIN_SHARE),
    "queue+limit": (*NET_INPUTS, *LIMIT_INPUTS),
}
#: The agent file of a run directory (and of its ``initial/``).
PRIORITY_FILE = "priority.json"
#: The ``format`` entry of an agent file.
FORMAT = "dallygym-priority-agent/1"
#: The largest agent file read (a network of MAX_HIDDEN units is about 100 KB of JSON numbers;
#: the history of a long search adds a few hundred KB).
MAX_FILE_BYTES = 8 * 1024 * 1024
#: Training cells: (generator, racks) entries, one draw of each per iteration.
TRAIN_GENERATORS = ("batch-500", "poisson-411")
TRAIN_RACKS = (2, 2, 4, 4, 8, 16)
TRAIN_SEEDS = tuple(range(10, 20))
#: Objective per percentage point of makespan beyond Dally's + ``MARGIN_PP`` %.
PENALTY = 1.0
#: The makespan excess (percentage points) the objective forgives: half of the goal's 1 %.
MARGIN_PP = 0.5
SMOOTHING = 0.7
STD_FLOOR = 0.05
#: The search methods, by name, as a run's settings describe them.
METHODS = {
    "snes": "separable natural evolution strategies, mirrored samples, over the flattened parameters",
    "cem": "cross-entropy method, diagonal Gaussian over the flattened parameters",
}


def _history_row(
    it: int, values: np.ndarray, mean_value, best_value, elite_values: np.ndarray, mean: np.ndarray, std: np.ndarray
) -> dict:
    """One iteration of a search, as its history records it (the mean and std after the update)."""
    return {
        "iteration": it,
        "mean_objective": float(mean_value),
        "best_objective": float(best_value),
        "elite_objective": float(elite_values.mean()),
        "population_objective": float(values.mean()),
        "mean": mean.round(8).tolist(),
        "std": std.round(6).tolist(),
    }


def cem(
    objective,
    mean0: np.ndarray,
    std0: np.ndarray | float,
    rng: np.random.Generator,
    iterations: int,
    population: int,
    elite: int,
    smoothing: float = SMOOTHING,
    std_floor: float = STD_FLOOR,
    normalise: bool = True,
    log=None,
    stop: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, list[dict]]:
    """Minimise ``objective(candidates, iteration) -> values`` (a (k, d) array to k values) by
    the cross-entropy method; return the final mean and the history (one dict per iteration:
    the mean's value, the best value, the elite mean value, the mean and std after the update).

    Each iteration evaluates the current mean and ``population - 1`` Gaussian draws around it
    (scaled to unit length if ``normalise``). ``stop()`` (if given) is asked before each
    iteration after the first; true ends the search there."""
    mean = np.asarray(mean0, dtype=np.float64).copy()
    std = np.broadcast_to(np.asarray(std0, dtype=np.float64), mean.shape).copy()
    if normalise:
        mean /= np.linalg.norm(mean)
    history = []
    for it in range(iterations):
        if it and stop is not None and stop():
            break
        draws = mean + std * rng.standard_normal((population - 1, mean.size))
        if normalise:
            draws /= np.linalg.norm(draws, axis=1, keepdims=True)
        candidates = np.vstack([mean, draws])
        values = np.asarray(objective(candidates, it), dtype=np.float64)
        order = np.argsort(values, kind="stable")
        best = candidates[order[:elite]]
        mean_value = float(values[0])
        mean = smoothing * best.mean(axis=0) + (1 - smoothing) * mean
        if normalise:
            mean /= np.linalg.norm(mean)
        std = np.maximum(smoothing * best.std(axis=0) + (1 - smoothing) * std, std_floor)
        row = _history_row(it, values, mean_value, values[order[0]], values[order[:elite]], mean, std)
        history.append(row)
        if log is not None:
            log(row)
    return mean, history


def snes_rates(dimension: int, population: int) -> tuple[float, float, np.ndarray]:
    """Separable NES's step sizes and rank utilities (Schaul, Glasmachers and Schmidhuber 2011):
    the mean's rate 1, the deviation's (3 + ln d) / (5 sqrt d), and the utility of the k-th best
    of ``population`` samples max(0, ln(n/2 + 1) - ln k) normalised to sum 1, less 1/n."""
    ranks = np.arange(1, population + 1)
    raw = np.maximum(0.0, math.log(population / 2 + 1) - np.log(ranks))
    return 1.0, (3 + math.log(dimension)) / (5 * math.sqrt(dimension)), raw / raw.sum() - 1.0 / population


def snes(
    objective,
    mean0: np.ndarray,
    std0: np.ndarray | float,
    rng: np.random.Generator,
    iterations: int,
    population: int,
    log=None,
    stop: Callable[[], bool] | None = None,
) -> tuple[np.ndarray, list[dict]]:
    """Minimise ``objective(candidates, iteration) -> values`` by separable natural evolution
    strategies (:func:`snes_rates`), with mirrored samples; same interface and history as
    :func:`cem` (the elite value is the better half's).

    Each iteration evaluates the current mean and ``population - 1`` samples rounded down to an
    even count, ``mean +- std * z``. Every sample moves the mean and the per-parameter deviation
    by its rank's utility: ``mean += std * sum(u z)``, ``std *= exp(eta / 2 * sum(u (z^2 - 1)))``,
    so the deviation shrinks only in the parameters where the better samples stay near the mean
    (the cross-entropy method's elite deviation collapses to its floor in a few iterations)."""
    mean = np.asarray(mean0, dtype=np.float64).copy()
    std = np.broadcast_to(np.asarray(std0, dtype=np.float64), mean.shape).copy()
    half = (population - 1) // 2
    if half < 1:
        raise ValueError(f"snes needs a population of at least 3 (the mean and a mirrored pair), got {population}")
    eta_mean, eta_std, utility = snes_rates(mean.size, 2 * half)
    history = []
    for it in range(iterations):
        if it and stop is not None and stop():
            break
        z = rng.standard_normal((half, mean.size))
        z = np.vstack([z, -z])
        candidates = np.vstack([mean, mean + std * z])
        values = np.asarray(objective(candidates, it), dtype=np.float64)
        order = np.argsort(values[1:], kind="stable")
        u = utility[np.argsort(order, kind="stable")]  # each sample's rank utility
        mean = mean + eta_mean * std * (u @ z)
        std = std * np.exp(0.5 * eta_std * (u @ (z * z - 1.0)))
        row = _history_row(it, values, values[0], values[1:][order[0]], values[1:][order[:half]], mean, std)
        history.append(row)
        if log is not None:
            log(row)
    return mean, history


# --- the network's parameters as one vector ---------------------------------------------------


def parameter_count(hidden: int, inputs: tuple[str, ...] = NET_INPUTS) -> int:
    """Entries of the flattened parameters of a network with ``hidden`` units over ``inputs``."""
    return hidden * (len(inputs) + 2)


def unpack(vector: np.ndarray, hidden: int, inputs: tuple[str, ...] = NET_INPUTS) -> dict[str, np.ndarray]:
    """``hidden_weights`` (hidden x inputs), ``hidden_bias`` and ``output_weights`` from the
    flattened parameters (that order, row-major)."""
    vector = np.asarray(vector, dtype=np.float64)
    count = parameter_count(hidden, inputs)
    if vector.shape != (count,):
        raise ValueError(f"expected {count} parameters for {hidden} hidden units, got {vector.shape}")
    inputs = len(inputs)
    w = vector[: hidden * inputs].reshape(hidden, inputs)
    b = vector[hidden * inputs : hidden * (inputs + 1)]
    v = vector[hidden * (inputs + 1) :]
    return {"hidden_weights": w, "hidden_bias": b, "output_weights": v}


def parameter_vector(policy: NetPriorityPolicy) -> np.ndarray:
    """The flattened parameters of ``policy`` (:func:`unpack`'s inverse)."""
    return _flat(policy.hidden_weights, policy.hidden_bias, policy.output_weights)


def _flat(w: np.ndarray, b: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``W``, ``b`` and ``v`` in :func:`unpack`'s layout."""
    return np.concatenate([w.ravel(), b, v])


def initial_parameters(hidden: int, rng: np.random.Generator, inputs: tuple[str, ...] = NET_INPUTS) -> np.ndarray:
    """A random initialisation: ``W`` ~ N(0, 1/inputs), ``b`` = 0, ``v`` ~ N(0, 1/hidden)."""
    inputs = len(inputs)
    w = rng.normal(0.0, 1.0 / math.sqrt(inputs), (hidden, inputs))
    v = rng.normal(0.0, 1.0 / math.sqrt(hidden), hidden)
    return _flat(w, np.zeros(hidden), v)


def policy_of(
    vector: np.ndarray, hidden: int, inputs: tuple[str, ...] = NET_INPUTS, makespan_limit_s: float | None = None
) -> NetPriorityPolicy:
    """The policy of a flattened parameter vector; ``makespan_limit_s`` for inputs that read the
    limit (the policy ignores it otherwise)."""
    return NetPriorityPolicy(**unpack(vector, hidden, inputs), inputs=inputs, makespan_limit_s=makespan_limit_s)


# --- the objective ----------------------------------------------------------------------------


class TrainingDraws:
    """Generated training traces and auto-tuned Dally's runs of them on ``racks`` x 8 x 8 GPUs,
    each made once (what a search's objective compares a candidate with)."""

    def __init__(self) -> None:
        self._traces: dict = {}
        self._dally: dict = {}

    def trace(self, gen: str, seed: int):
        key = (gen, seed)
        if key not in self._traces:
            self._traces[key] = generate_trace(gen, seed=seed)
        return self._traces[key]

    def dally(self, gen: str, seed: int, racks: int) -> dict:
        key = (gen, seed, racks)
        if key not in self._dally:
            self._dally[key] = simulate(self.trace(gen, seed), ClusterSpec(racks, 8, 8), policy="dally").summary
        return self._dally[key]


#: This process's training traces and Dally runs, shared by the searches it runs (a worker
#: process started by fork inherits what the parent made before the iteration).
_DRAWS = TrainingDraws()


def draw_value(
    vector: np.ndarray,
    hidden: int,
    gen: str,
    seed: int,
    racks: int,
    penalty: float,
    margin_pp: float,
    inputs: tuple[str, ...] = NET_INPUTS,
) -> float:
    """The objective of one parameter vector on one draw (the module docstring's formula)."""
    ref = _DRAWS.dally(gen, seed, racks)
    policy = policy_of(vector, hidden, inputs, ref["makespan_s"])
    run = simulate(_DRAWS.trace(gen, seed), ClusterSpec(racks, 8, 8), policy=policy).summary
    return objective_value(run, ref, penalty, margin_pp)


def objective_value(run: dict, ref: dict, penalty: float = PENALTY, margin_pp: float = MARGIN_PP) -> float:
    """The objective of a run's summary ``run`` against the reference run's ``ref`` (both with
    ``jct_mean_s`` and ``makespan_s``): the module docstring's formula."""
    excess_pp = 100.0 * (run["makespan_s"] / ref["makespan_s"] - 1.0)
    return math.log(run["jct_mean_s"] / ref["jct_mean_s"]) + penalty * max(0.0, excess_pp - margin_pp)


def _draw_value(task: tuple) -> float:
    return draw_value(*task)


class DrawObjective:
    """The search's objective (module docstring).

    ``cells``: (generator, racks) entries, one draw of each per iteration; ``seeds``: the seeds
    a draw's is taken from (by ``rng``, the search's). ``workers`` > 1 plays an iteration's
    episodes in that many local processes; the values are the same as in one."""

    def __init__(
        self,
        rng: np.random.Generator,
        hidden: int,
        cells: list[tuple[str, int]],
        seeds: tuple[int, ...] = TRAIN_SEEDS,
        penalty: float = PENALTY,
        margin_pp: float = MARGIN_PP,
        workers: int = 1,
        inputs: tuple[str, ...] = NET_INPUTS,
    ) -> None:
        self.rng = rng
        self.hidden = hidden
        self.inputs = inputs
        self.cells = cells
        self.seeds = seeds
        self.penalty = penalty
        self.margin_pp = margin_pp
        self.workers = workers
        #: Each iteration's draws, (generator, seed, racks).
        self.draws: list[list[tuple[str, int, int]]] = []

    def on_draw(self, vector: np.ndarray, gen: str, seed: int, racks: int) -> float:
        return draw_value(vector, self.hidden, gen, seed, racks, self.penalty, self.margin_pp, self.inputs)

    def __call__(self, candidates: np.ndarray, iteration: int) -> np.ndarray:
        draws = [(gen, int(self.rng.choice(self.seeds)), racks) for gen, racks in self.cells]
        self.draws.append(draws)
        return self.values(candidates, draws)

    def values(self, candidates: np.ndarray, draws: list[tuple[str, int, int]]) -> np.ndarray:
        """Each candidate's objective: its mean value over ``draws``. A draw that ``draws``
        holds more than once (two entries of a cell can draw the same seed) is played once per
        candidate and counted as often as it appears: episodes are deterministic, so the values
        are those of playing every entry."""
        distinct = list(dict.fromkeys(draws))
        where = [distinct.index(d) for d in draws]
        if self.workers == 1:
            played = [[self.on_draw(c, *d) for d in distinct] for c in candidates]
        else:
            from ..experiments.sweep import run_ordered

            for d in distinct:  # made here once, before the workers start
                _DRAWS.dally(*d)
            tasks = [
                (c, self.hidden, *d, self.penalty, self.margin_pp, self.inputs) for c in candidates for d in distinct
            ]
            flat = run_ordered(_draw_value, tasks, workers=self.workers)
            played = [flat[i * len(distinct) : (i + 1) * len(distinct)] for i in range(len(candidates))]
        return np.array([np.mean([row[i] for i in where]) for row in played])


def selection_draws(cells: list[tuple[str, int]], seeds: tuple[int, ...] = TRAIN_SEEDS) -> list[tuple[str, int, int]]:
    """The fixed draws a keep-the-best selection compares the last means on: every training
    seed of every distinct (generator, racks) training cell (training data only)."""
    distinct = list(dict.fromkeys(cells))
    return [(gen, seed, racks) for gen, racks in distinct for seed in seeds]


def embedded(agent: "PriorityAgent", hidden: int, inputs: tuple[str, ...]) -> np.ndarray:
    """``agent``'s parameters as a vector over ``inputs`` (:func:`unpack`'s layout): each of its
    inputs' weights in that input's column, 0 in the columns of the inputs it does not read, so
    the network orders every job as ``agent`` does (:func:`known_net_inputs`' extra inputs
    weighted 0 change no key). ``agent`` must have ``hidden`` units and read a subset of
    ``inputs``."""
    policy = agent.policy(1.0 if agent.needs_limit else None)
    missing = [name for name in agent.inputs if name not in inputs]
    if missing or policy.hidden_bias.size != hidden:
        raise ValueError(
            f"{agent.path}: a start needs {hidden} hidden units and inputs among {list(inputs)}; it has "
            f"{policy.hidden_bias.size} and {list(agent.inputs)}"
        )
    w = np.zeros((hidden, len(inputs)))
    w[:, [inputs.index(name) for name in agent.inputs]] = policy.hidden_weights
    return _flat(w, policy.hidden_bias, policy.output_weights)


def select_best(result: dict, last: int, workers: int = 1) -> dict:
    """Keep the best of the last ``last`` means, not the last one: ``result`` (what
    :func:`search` returns, its history holding each iteration's mean after the update) with
    its parameters replaced by the mean whose objective over :func:`selection_draws` is lowest
    (the later one on a tie), and the comparison recorded in ``settings["selection"]``.

    The search's mean wanders with its wide deviations, and a mean is itself evaluated only on
    its iteration's dozen draws, so the last one can be a poor one. Deterministic: the same
    ``result`` gives the same choice whatever ``workers``."""
    history = result["history"]
    if not 1 <= last <= len(history):
        raise ValueError(f"select the best of the last 1-{len(history)} means (the iterations done), got {last}")
    settings = result["settings"]
    hidden = result["hidden"]
    cells = [(g, int(r)) for g, _, r in (c.rpartition(":") for c in settings["training"]["cells"])]
    draws = selection_draws(cells)
    rows = history[-last:]
    vectors = np.array([row["mean"] for row in rows], dtype=np.float64)
    started = time.perf_counter()
    inputs = tuple(result["inputs"])
    objective = DrawObjective(np.random.default_rng(0), hidden, cells, workers=workers, inputs=inputs)
    values = objective.values(vectors, draws)
    chosen = len(rows) - 1 - int(np.argmin(values[::-1]))  # the lowest, the latest on a tie
    selection = {
        "rule": f"the lowest objective among the means after the last {last} iterations",
        "draws": [f"{g}/seed{s}/{r}racks" for g, s, r in draws],
        "objectives": {str(row["iteration"]): round(float(v), 6) for row, v in zip(rows, values)},
        "chosen_iteration": rows[chosen]["iteration"],
        "seconds": round(time.perf_counter() - started, 1),
    }
    content = agent_content(
        vectors[chosen], hidden, {**settings, "selection": selection}, history, result["wall_s"], inputs
    )
    return {**content, **({"initial": result["initial"]} if "initial" in result else {})}


def _check_search(
    method: str, hidden: int, population: int, elite: int, iterations: int, select_last: int, inputs: str
) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    if inputs not in INPUT_SETS:
        raise ValueError(f"inputs must be one of {sorted(INPUT_SETS)}, got {inputs!r}")
    if not 1 <= hidden <= MAX_HIDDEN:
        raise ValueError(f"hidden must be 1-{MAX_HIDDEN}, got {hidden}")
    if method == "cem" and not 1 <= elite < population:
        raise ValueError(f"elite must be at least 1 and below population ({population}), got {elite}")
    if not 0 <= select_last <= iterations:
        raise ValueError(f"select_last must be 0 (keep the final mean) to iterations ({iterations}), got {select_last}")


def _first_mean(start, hidden: int, names: tuple[str, ...], rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """A search's first mean (``start`` embedded, or a random initialisation drawn from ``rng``)
    and what its settings record of the start (nothing for a random one)."""
    if start is None:
        return initial_parameters(hidden, rng, names), {}
    record = {
        "agent": start.name,
        "inputs": list(start.inputs),
        "command": start.settings.get("command"),
        "iterations_done": start.settings.get("iterations_done"),
    }
    return embedded(start, hidden, names), record


def search(
    seed: int = 0,
    hidden: int = 8,
    iterations: int = 30,
    population: int = 16,
    elite: int = 4,
    std0: float = 0.5,
    cells: list[tuple[str, int]] | None = None,
    time_limit_s: float | None = None,
    log: Callable[[str], None] | None = None,
    workers: int = 1,
    method: str = "snes",
    select_last: int = 0,
    inputs: str = "queue",
    start: "PriorityAgent | None" = None,
) -> dict:
    """Search a priority network (module docstring); return the agent file's content for the
    final mean, or with ``select_last`` > 0 for the best of the last ``select_last`` means
    (:func:`select_best`); ``"initial"``: the random initialisation's. Deterministic for a seed and
    ``iterations``; ``time_limit_s`` (None: none) ends the search early, before an iteration
    that would not finish in time by the last one's length, and the count done is recorded.
    ``workers``: local processes playing each iteration's episodes (the result is the same).
    ``method``: ``"snes"`` (:func:`snes`) or ``"cem"`` (:func:`cem`; ``elite`` is its alone).
    ``inputs``: the network's input set, a name of :data:`INPUT_SETS`. ``start``: a priority
    agent to start from instead of a random initialisation (:func:`embedded`: its weights, 0 for
    the inputs it does not read), recorded in the settings; its own search's time counts too."""
    _check_search(method, hidden, population, elite, iterations, select_last, inputs)
    names = INPUT_SETS[inputs]
    cells = list(cells) if cells is not None else [(g, r) for g in TRAIN_GENERATORS for r in TRAIN_RACKS]
    rng = np.random.default_rng(seed)
    mean0, started_from = _first_mean(start, hidden, names, rng)
    objective = DrawObjective(rng, hidden, cells, workers=workers, inputs=names)
    started = time.perf_counter()
    marks = [started]  # the end of each iteration so far, after the start
    lengths: list[float] = []

    def stop() -> bool:
        return time_limit_s is not None and marks[-1] - started + max(lengths) > time_limit_s

    def on_iteration(row: dict) -> None:
        marks.append(time.perf_counter())
        lengths.append(marks[-1] - marks[-2])
        row["seconds"] = round(lengths[-1], 1)
        if log is not None:
            log(
                f"iteration {row['iteration']}: mean {row['mean_objective']:.4f}, best {row['best_objective']:.4f}, "
                f"elite {row['elite_objective']:.4f}, population {row['population_objective']:.4f} "
                f"({time.perf_counter() - started:.0f} s)"
            )

    if method == "snes":
        mean, history = snes(objective, mean0, std0, rng, iterations, population, log=on_iteration, stop=stop)
    else:
        mean, history = cem(
            objective, mean0, std0, rng, iterations, population, elite, normalise=False, log=on_iteration, stop=stop
        )
    for row, draws in zip(history, objective.draws):
        row["draws"] = [f"{g}/seed{s}/{r}racks" for g, s, r in draws]
    settings = _settings(
        method,
        elite,
        cells,
        seed=seed,
        hidden=hidden,
        inputs=inputs,
        iterations_asked=iterations,
        iterations_done=len(history),
        population=population,
        start_std=std0,
        time_limit_s=time_limit_s,
        workers=workers,
        **({"start": started_from} if started_from else {}),
    )
    result = {
        **agent_content(mean, hidden, settings, history, round(time.perf_counter() - started, 1), names),
        "initial": agent_content(mean0, hidden, {**settings, "initial": True}, [], 0.0, names),
    }
    return select_best(result, min(select_last, len(history)), workers) if select_last else result


def _settings(method: str, elite: int, cells: list[tuple[str, int]], **run) -> dict:
    """A search's settings as its run file records them: ``run``'s entries, the method's, the
    training draws, the objective and the offers."""
    return {
        "method": METHODS[method],
        **run,
        **({"elite": elite, "smoothing": SMOOTHING, "std_floor": STD_FLOOR} if method == "cem" else {}),
        "training": {
            "cells": [f"{g}:{r}" for g, r in cells],
            "seeds": list(TRAIN_SEEDS),
            "cluster": "racks x 8 machines x 8 GPUs, latency dally-paper, lease 3600 s",
            "draws_per_iteration": "one per cell, its seed drawn from the seeds",
        },
        "objective": (
            f"mean over the iteration's draws of ln(mean JCT / Dally's) + {PENALTY} x max(0, makespan excess "
            f"over Dally's in percentage points - {MARGIN_PP})"
        ),
        "offers": "dally-consolidated (wait for the most consolidated tier)",
    }


def agent_content(
    vector: np.ndarray, hidden: int, settings: dict, history: list, wall_s: float, inputs: tuple[str, ...] = NET_INPUTS
) -> dict:
    """An agent file's content for ``vector`` over ``inputs``."""
    params = unpack(vector, hidden, inputs)
    return {
        "format": FORMAT,
        "inputs": list(inputs),
        "hidden": hidden,
        **{k: np.round(v, 8).tolist() for k, v in params.items()},
        "settings": settings,
        "wall_s": wall_s,
        "history": history,
    }


def write_run(run_dir: Path, result: dict) -> None:
    """``priority.json`` (the result) and ``initial/priority.json`` in ``run_dir``."""
    run_dir = Path(run_dir)
    final = {k: v for k, v in result.items() if k != "initial"}
    (run_dir / "initial").mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / PRIORITY_FILE, (json.dumps(final, indent=1) + "\n").encode())
    write_atomic(run_dir / "initial" / PRIORITY_FILE, (json.dumps(result["initial"], indent=1) + "\n").encode())


def is_priority_agent(path: str | Path) -> bool:
    """Whether ``path`` names a priority agent: its file, or a directory holding one."""
    path = Path(path)
    return path.name == PRIORITY_FILE or (path.is_dir() and (path / PRIORITY_FILE).exists())


class PriorityAgent:
    """A learned priority agent read from its ``priority.json`` (a run directory or the file):
    a regular file of at most :data:`MAX_FILE_BYTES`, strict JSON, its ``format``, inputs and
    shapes checked; nothing in it is executed. :meth:`policy` builds a fresh policy per run."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self.path = path / PRIORITY_FILE if path.name != PRIORITY_FILE else path
        where = str(self.path)
        content = parse_json(read_regular_file(self.path, MAX_FILE_BYTES, "a priority agent"), where)
        if not isinstance(content, dict) or content.get("format") != FORMAT:
            raise AgentLoadError(f"{where}: not a priority agent (its 'format' must be {FORMAT!r})")
        inputs = content.get("inputs")
        if not isinstance(inputs, list) or not all(isinstance(name, str) for name in inputs):
            known = list(known_net_inputs())
            raise AgentLoadError(f"{where}: its 'inputs' must be a list of input names (from {known})")
        self.inputs = tuple(inputs)
        try:
            self._params = {
                k: np.asarray(content[k], dtype=np.float64) for k in ("hidden_weights", "hidden_bias", "output_weights")
            }
            self.policy(1.0 if self.needs_limit else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise AgentLoadError(f"{where}: not a valid network ({str(exc)[:200]})") from None
        self.settings = content.get("settings", {})
        self.name = (
            self.path.parent.name if self.path.parent.name != "initial" else f"{self.path.parent.parent.name}/initial"
        )
        #: The question it answers, and the queue environment's offer rule its offers equal.
        self.env_id = "DallyQueue-v0"
        self.offer_rule = "protected-remaining"

    @property
    def needs_limit(self) -> bool:
        """Whether the network reads the makespan limit: then :meth:`policy` needs it (the
        makespan of auto-tuned Dally's run of the same trace on the same cluster, as in training)."""
        return needs_limit(self.inputs)

    def policy(self, makespan_limit_s: float | None = None) -> NetPriorityPolicy:
        """A fresh policy; ``makespan_limit_s`` (seconds) when :attr:`needs_limit`, else ignored."""
        return NetPriorityPolicy(**self._params, inputs=self.inputs, makespan_limit_s=makespan_limit_s)
