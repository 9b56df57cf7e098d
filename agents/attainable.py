"""How near an order-only policy can come to the learned agents' target on a held-out cell, when it
is tuned on that very cell.

    python agents/attainable.py [--cell batch-500:2002:2 ...] [--searches NAME ...] [--iterations 120]
        [--population 16] [--workers 2] [--out benchmarks/results/attainable.md]
        [--csv benchmarks/results/attainable.csv]
    python agents/attainable.py --from-csv benchmarks/results/attainable.csv --run-command "..."

The learned priority agents (``agents/train_priority.py``) choose only the order in which jobs are
offered GPUs; their offers wait for the most consolidated tier (``dally-consolidated``). On some
held-out cells no makespan-safe row of the grid (``agents/queue_baselines.py``) comes within the
target (0.9 x the best safe heuristic's mean JCT). This script asks whether that is a limit of
training or of the action design: it searches policies of the same design **on the held-out cell
itself** -- an oracle no deployed scheduler has, so its rows say what the design can reach there,
never how an agent generalises. The default cells: those of the grid whose target is 0.9 x where
no makespan-safe row of the committed grid (``benchmarks/results/agents_heldout.csv``) reaches it.
Per cell, three searches (``--searches``):

* ``network, from start``: the priority network (:class:`~dallygym.sim.policies.tuned.NetPriorityPolicy`,
  the agents' queue inputs and hidden units), started from a committed agent's parameters
  (``--start``, default ``agents/runs/priority-long-s0``) with deviation ``--start-std``;
* ``network, random start``: the same network from a random initialisation (seed 0);
* ``network + per-job offsets, from start``: the network's key plus one offset per job
  (:class:`OffsetNetPolicy`), from the same start with offsets 0 (deviation ``--offset-std``): any
  fixed override of the network's order, which no feature could have told it.

Each is searched by separable NES (:func:`dallygym.learning.priority_search.snes`) for
``--iterations`` iterations of ``--population`` vectors, on the training objective
(:func:`~dallygym.learning.priority_search.objective_value`: log mean JCT against Dally's plus the
makespan penalty). Every vector the search plays is a deterministic run of the cell, so a row reports
the best makespan-safe one it met (makespan within +1 % of Dally's, the grid's rule): a schedule the
design reaches on that trace. Beside it: the best safe heuristic, the target, the lower bound
(:func:`dallygym.sim.bounds.lower_bound`) and the grid's closest safe row.

Then each ``network, from start`` result and the starting agent are played on every grid cell whose
target is 0.9 x (:func:`transfer_rows`): whether what was found on one trace holds on the others.
The searches' rows go to ``--csv``, the transfer rows to its ``_transfer.csv``, both tables to
``--out``; ``--from-csv`` renders the tables again from those files without searching.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "agents"))

from queue_baselines import (  # noqa: E402
    BOUND,
    MAKESPAN_TOLERANCE,
    ROUNDING,
    cell_trace,
    native_rows,
    parse_cell,
    target_factor,
    verdict_rows,
)

from dallygym import ClusterSpec, simulate  # noqa: E402
from dallygym.learning.priority_search import (  # noqa: E402
    NET_INPUTS,
    PriorityAgent,
    initial_parameters,
    objective_value,
    parameter_count,
    parameter_vector,
    policy_of,
    snes,
    unpack,
)
from dallygym.sim.policies.tuned import NetPriorityPolicy  # noqa: E402

GRID = ROOT / "benchmarks" / "results" / "agents_heldout.csv"
DEFAULT_START = ROOT / "agents" / "runs" / "priority-long-s0"
HIDDEN = 8
SEARCHES = ("network, from start", "network, random start", "network + per-job offsets, from start")


class OffsetNetPolicy(NetPriorityPolicy):
    """A priority network's key plus one fixed offset per job (lower first); offers as the
    network's. With offsets 0 it is the network; the offsets can move any job anywhere in its
    order, so the design holds every order the network would give and any fixed override of it."""

    name: ClassVar[str] = "net-priority+offsets"
    priority_keys: ClassVar[str | None] = None  # (priority() below, asked at each pass)

    def __init__(self, vector: np.ndarray, jobs: int) -> None:
        net = parameter_count(HIDDEN, NET_INPUTS)
        super().__init__(**unpack(vector[:net], HIDDEN, NET_INPUTS), inputs=NET_INPUTS)
        self.offsets = np.asarray(vector[net:], dtype=np.float64)
        if self.offsets.shape != (jobs,):
            raise ValueError(f"expected {jobs} offsets after the {net} network parameters, got {self.offsets.shape}")

    def priority(self, view, jobs: np.ndarray) -> np.ndarray:
        return super().priority(view, jobs) + self.offsets[jobs]


# --- one cell ---------------------------------------------------------------------------------

#: The cell a worker process plays (set before the workers fork): trace, spec, Dally's summary.
_CELL: dict = {}


def _play(task: tuple) -> tuple[float, float, float]:
    """(objective, mean JCT s, makespan s) of one vector of a search on the current cell."""
    search, vector = task
    trace, spec, dally = _CELL["trace"], _CELL["spec"], _CELL["dally"]
    if search == SEARCHES[2]:
        policy = OffsetNetPolicy(vector, len(trace))
    else:
        policy = policy_of(vector, HIDDEN, NET_INPUTS)
    run = simulate(trace, spec, policy=policy).summary
    return objective_value(run, dally), run["jct_mean_s"], run["makespan_s"]


def search_cell(search: str, start: np.ndarray, std0, iterations: int, population: int, workers: int, seed: int):
    """Search one design on the current cell; return the best safe run met (its mean JCT,
    makespan, iteration and parameter vector), the objective of the final mean and the count of
    vectors played."""
    from dallygym.experiments.sweep import run_ordered

    limit = (1 + MAKESPAN_TOLERANCE + ROUNDING) * _CELL["dally"]["makespan_s"]
    best = {"jct_mean_s": math.inf, "makespan_s": math.nan, "iteration": None}
    played = [0]

    def objective(candidates: np.ndarray, iteration: int) -> np.ndarray:
        results = run_ordered(_play, [(search, c) for c in candidates], workers=workers)
        played[0] += len(candidates)
        for vector, (_, jct, makespan) in zip(candidates, results):
            if makespan <= limit and jct < best["jct_mean_s"]:
                best.update(jct_mean_s=jct, makespan_s=makespan, iteration=iteration, vector=vector.copy())
        return np.array([r[0] for r in results])

    rng = np.random.default_rng(seed)
    _, history = snes(objective, start, std0, rng, iterations, population)
    return best, history[-1]["mean_objective"], played[0]


def grid_closest(name: str, racks: int) -> tuple[str, float]:
    """The committed grid's makespan-safe row of lowest mean JCT on the cell (row, JCT / best safe)."""
    if not GRID.exists():
        return "", math.nan
    grid = pd.read_csv(GRID)
    cell = grid[(grid["trace"] == name) & (grid["racks"] == racks) & (grid["makespan_ok"] == True)]  # noqa: E712
    cell = cell[cell["row_kind"] != "bound"]
    if cell.empty:
        return "", math.nan
    row = cell.loc[cell["jct_vs_best_safe"].idxmin()]
    return str(row["row"]), float(row["jct_vs_best_safe"])


def cell_info(cell, machines_per_rack: int = 8) -> dict:
    """A cell's trace, cluster, native runs, best safe heuristic and target (the grid's rules)."""
    kind, source, racks = cell
    spec = ClusterSpec(racks, machines_per_rack, 8)
    trace, name = (source, kind) if isinstance(source, pd.DataFrame) else cell_trace(source, spec)
    results, kinds = native_rows(trace, spec)
    verdict = verdict_rows(kind, name, racks, results, kinds)[0]
    best_safe = verdict["best_safe"]
    return {
        "trace": trace,
        "spec": spec,
        "name": name,
        "racks": racks,
        "dally": results["dally"],
        "best_safe": best_safe,
        "safe_jct": results[best_safe]["jct_mean_s"],
        "bound_jct": results[BOUND]["jct_mean_s"],
        "target": verdict["target"],
    }


def run_cell(info: dict, args, start_net: np.ndarray) -> tuple[list[dict], dict[str, np.ndarray]]:
    """One row per search of ``args.searches`` on the cell ``info`` (:func:`cell_info`), and the
    best safe vector each search met (by search; none when it met no safe run)."""
    trace, name, racks, dally = info["trace"], info["name"], info["racks"], info["dally"]
    closest, closest_ratio = grid_closest(name, racks)
    _CELL.update(trace=trace, spec=info["spec"], dally=dally)
    rng = np.random.default_rng(0)
    starts = {
        SEARCHES[0]: (start_net, args.start_std),
        SEARCHES[1]: (initial_parameters(HIDDEN, rng, NET_INPUTS), args.std),
        SEARCHES[2]: (
            np.concatenate([start_net, np.zeros(len(trace))]),
            np.concatenate([np.full(start_net.size, args.start_std), np.full(len(trace), args.offset_std)]),
        ),
    }
    rows, vectors = [], {}
    for search in args.searches:
        vector, std0 = starts[search]
        began = time.perf_counter()
        best, final, played = search_cell(search, vector, std0, args.iterations, args.population, args.workers, 0)
        if "vector" in best:
            vectors[search] = best["vector"]
        ratio = best["jct_mean_s"] / info["safe_jct"]
        rows.append(
            {
                "trace": name,
                "racks": racks,
                "target": info["target"],
                "best_safe": info["best_safe"],
                "best_safe_vs_bound": info["safe_jct"] / info["bound_jct"],
                "grid_closest": closest,
                "grid_closest_vs_best_safe": closest_ratio,
                "search": search,
                "vectors_played": played,
                "best_jct_vs_best_safe": ratio,
                "best_makespan_vs_dally": best["makespan_s"] / dally["makespan_s"],
                "best_iteration": best["iteration"],
                "final_mean_objective": final,
                "reaches_target": bool(ratio <= info["target"] * (1 + ROUNDING)),
                "seconds": round(time.perf_counter() - began, 1),
            }
        )
        print(
            f"{name} @ {racks}: {search}: {ratio:.3f} x {info['best_safe']} (target {info['target']}, "
            f"grid {closest_ratio:.3f}) [{rows[-1]['seconds']:.0f} s]",
            flush=True,
        )
    return rows, vectors


def transfer_rows(tuned: dict[str, np.ndarray], infos: list[dict], start_net: np.ndarray) -> list[dict]:
    """Each network tuned on one cell (``tuned``: its label -> vector), and the starting agent,
    played on every cell of ``infos``: its mean JCT against that cell's best safe heuristic and
    whether it keeps the makespan."""
    rows = []
    for label, vector in {"start agent": start_net, **tuned}.items():
        for info in infos:
            run = simulate(info["trace"], info["spec"], policy=policy_of(vector, HIDDEN, NET_INPUTS)).summary
            ratio = run["jct_mean_s"] / info["safe_jct"]
            safe = run["makespan_s"] <= (1 + MAKESPAN_TOLERANCE + ROUNDING) * info["dally"]["makespan_s"]
            rows.append(
                {
                    "tuned_on": label,
                    "trace": info["name"],
                    "racks": info["racks"],
                    "target": info["target"],
                    "jct_vs_best_safe": ratio,
                    "makespan_vs_dally": run["makespan_s"] / info["dally"]["makespan_s"],
                    "makespan_ok": bool(safe),
                    "goal_met": bool(safe and ratio <= info["target"] * (1 + ROUNDING)),
                }
            )
    return rows


def target_cells() -> list[tuple[str, str, int]]:
    """The held-out grid's cells whose target is 0.9 x."""
    from queue_baselines import default_cells as grid_cells

    return [c for c in grid_cells() if target_factor(c[0], c[2]) < 1.0]


def default_cells() -> list[tuple[str, str, int]]:
    """The cells of :func:`target_cells` where no makespan-safe row of the committed grid reaches
    the target (all of them when the grid is not there)."""
    cells = target_cells()
    if not GRID.exists():
        return cells
    grid = pd.read_csv(GRID)
    safe = grid[(grid["makespan_ok"] == True) & (grid["row_kind"] != "bound")]  # noqa: E712
    reached = safe[safe["jct_vs_best_safe"] <= safe["target"] * (1 + ROUNDING)]
    names = {(t, r) for t, r in zip(reached["trace"], reached["racks"])}
    spec = ClusterSpec(2, 8, 8)
    return [c for c in cells if (cell_trace(c[1], spec)[1], c[2]) not in names]


def short(name: str, racks: int) -> str:
    """A cell's column label: ``b2001@4`` for batch-500 seed 2001 at 4 racks."""
    seed = re.search(r"seed (\d+)", name)
    return f"{name[0]}{seed[1] if seed else name}@{racks}"


def markdown(frame: pd.DataFrame, transfer: pd.DataFrame, produced_by: str) -> str:
    lines = [
        "# What an order-only design reaches when tuned on the held-out cell itself",
        "",
        f"Produced by {produced_by}.",
        "",
        (
            "An oracle, not an agent: each search plays policies of the learned priority agents' design on the "
            "very trace and size it is judged on (see `agents/attainable.py`). Each entry is the lowest mean JCT "
            "among the makespan-safe runs the search met, against the best safe heuristic's; `grid closest`: the "
            "committed held-out grid's lowest safe row, of any kind (trained or tuned without this trace)."
        ),
        "",
    ]
    searches = [c for c in SEARCHES if c in set(frame["search"])]
    header = ["trace", "racks", "target", "best safe", "best safe / bound", "grid closest", *searches]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for _, rows in frame.groupby(["trace", "racks"], sort=False):
        r = rows.iloc[0]
        by_search = dict(zip(rows["search"], rows["best_jct_vs_best_safe"]))
        cells = [str(r["trace"]), str(r["racks"]), f"{r['target']:.2f}", str(r["best_safe"])]
        cells += [f"{r['best_safe_vs_bound']:.2f}", f"{r['grid_closest_vs_best_safe']:.3f}"]
        cells += [f"{by_search[c]:.3f}" if math.isfinite(by_search.get(c, math.nan)) else "none safe" for c in searches]
        lines.append("| " + " | ".join(cells) + " |")
    if not transfer.empty:
        labels = list(dict.fromkeys(short(t, r) for t, r in zip(transfer["trace"], transfer["racks"])))
        lines += [
            "",
            "## Does a cell's network carry to the other cells?",
            "",
            (
                "Each `network, from start` network above (row: the cell it was tuned on), and the starting agent, "
                "played on every held-out cell whose target is 0.9 x (columns: `b`atch or `p`oisson, seed, racks): "
                "mean JCT against the cell's best safe heuristic; `†` where the makespan exceeds Dally's by more "
                "than 1 %. `at target`: the cells where it is safe and within the target."
            ),
            "",
            "| tuned on | " + " | ".join(labels) + " | at target |",
            "|---|" + "---|" * (len(labels) + 1),
        ]
        for label, rows in transfer.groupby("tuned_on", sort=False):
            cells = [f"{r.jct_vs_best_safe:.3f}" + ("" if r.makespan_ok else " †") for r in rows.itertuples()]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {int(rows['goal_met'].sum())}/{len(rows)} |")
    return "\n".join(lines) + "\n"


def transfer_path(csv: Path) -> Path:
    """The transfer table's CSV beside the searches' ``csv``."""
    return csv.with_name(csv.stem + "_transfer.csv")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", action="append", type=parse_cell, metavar="TRACE:RACKS")
    parser.add_argument("--searches", nargs="+", choices=SEARCHES, default=list(SEARCHES))
    parser.add_argument("--start", type=Path, default=DEFAULT_START, help="the network search's starting agent")
    parser.add_argument("--iterations", type=int, default=120)
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--std", type=float, default=0.5, help="the random-start network search's deviation")
    parser.add_argument("--start-std", type=float, default=0.2, help="the network search's deviation from --start")
    parser.add_argument("--offset-std", type=float, default=0.05, help="the per-job offsets' starting deviation")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "attainable.md")
    parser.add_argument("--csv", type=Path, default=ROOT / "benchmarks" / "results" / "attainable.csv")
    parser.add_argument(
        "--from-csv",
        type=Path,
        metavar="CSV",
        help="render the Markdown again from an earlier run's CSV (and its _transfer.csv); no search runs",
    )
    parser.add_argument("--run-command", default="", help="with --from-csv: the command of the run that wrote it")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "agents/attainable.py", *(sys.argv[1:] if argv is None else argv)])
    if args.from_csv:
        frame = pd.read_csv(args.from_csv)
        transfer = pd.read_csv(transfer_path(args.from_csv))
        produced = f"`{args.run_command}` (tables rendered from its CSVs by `{command}`)"
        args.out.write_text(markdown(frame, transfer, produced), encoding="utf-8")
        print(f"wrote {args.out}")
        return 0
    agent = PriorityAgent(args.start)
    if agent.inputs != NET_INPUTS or agent.policy().hidden_bias.size != HIDDEN:
        parser.error(f"--start {args.start}: a network over the queue inputs with {HIDDEN} hidden units is needed")
    start_net = parameter_vector(agent.policy())
    infos = {}

    def info_of(cell) -> dict:
        if cell not in infos:
            infos[cell] = cell_info(cell)
        return infos[cell]

    rows, tuned = [], {}
    for cell in args.cell or default_cells():
        info = info_of(cell)
        cell_rows, vectors = run_cell(info, args, start_net)
        rows.extend(cell_rows)
        if SEARCHES[0] in vectors:
            tuned[f"{info['name']}, {info['racks']} racks"] = vectors[SEARCHES[0]]
    frame = pd.DataFrame(rows)
    transfer = pd.DataFrame(transfer_rows(tuned, [info_of(c) for c in target_cells()], start_net))
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.csv, index=False, float_format="%.6g")
    transfer.to_csv(transfer_path(args.csv), index=False, float_format="%.6g")
    args.out.write_text(markdown(frame, transfer, f"`{command}`"), encoding="utf-8")
    print(f"wrote {args.out}, {args.csv} and its _transfer.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
