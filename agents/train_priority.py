"""Train a learned priority agent: a small network's job priority found by an evolution strategy
on training draws, from a random initialisation (no teacher, no guard).

    python agents/train_priority.py --seed S [--method snes|cem] [--hidden 8] [--iterations 30]
        [--population 16] [--elite 4] [--std 0.5] [--select-last 0] [--inputs queue|queue+drain|queue+limit]
        [--time-limit-min 55] [--start RUN_DIR]
        [--workers 1] --out agents/runs/priority-sS

The search, its objective and the run directory it writes are
:mod:`dallygym.learning.priority_search`'s (``priority.json``, ``initial/priority.json``).
The same seed and iteration count give the same agent, bit for bit. ``dallygym evaluate
--agent RUN_DIR`` and ``agents/queue_baselines.py --agent RUN_DIR`` run it natively.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dallygym.learning.agent_files import AgentLoadError  # noqa: E402
from dallygym.learning.priority_search import INPUT_SETS, METHODS, PriorityAgent, search, write_run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=8, help="hidden units of the network")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--population", type=int, default=16, help="parameter vectors per iteration, the mean included")
    parser.add_argument(
        "--method", choices=sorted(METHODS), default="snes", help="separable NES or the cross-entropy method"
    )
    parser.add_argument("--elite", type=int, default=4, help="the cross-entropy method's elite")
    parser.add_argument(
        "--inputs",
        choices=sorted(INPUT_SETS),
        default="queue",
        help="the network's inputs: the queue features alone, with drain_share, or with the makespan limit's four "
        "(the limit being Dally's makespan on the same draw)",
    )
    parser.add_argument("--std", type=float, default=0.5, help="the search's starting deviation per parameter")
    parser.add_argument(
        "--select-last",
        type=int,
        default=0,
        metavar="K",
        help="keep the best of the last K means on fixed training draws (0: the final mean)",
    )
    parser.add_argument("--cell", action="append", metavar="GENERATOR:RACKS", help="a training cell (repeatable)")
    parser.add_argument(
        "--time-limit-min", type=float, default=None, help="end early, before an iteration that would pass it"
    )
    parser.add_argument(
        "--start",
        type=Path,
        metavar="RUN_DIR",
        help="start from this priority agent (its weights; 0 for the inputs it does not read) instead of a random "
        "initialisation",
    )
    parser.add_argument("--workers", type=int, default=1, help="local processes playing the episodes (same result)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    cells = None
    if args.cell:
        cells = []
        for text in args.cell:
            gen, sep, racks = text.rpartition(":")
            if not sep or not racks.isdigit() or not gen:
                parser.error(f"--cell {text!r}: expected GENERATOR:RACKS, e.g. batch-500:4")
            cells.append((gen, int(racks)))
    start = None
    if args.start is not None:
        try:
            start = PriorityAgent(args.start)
        except AgentLoadError as exc:
            parser.error(f"--start: {exc}")
    started = time.perf_counter()
    result = search(
        seed=args.seed,
        hidden=args.hidden,
        iterations=args.iterations,
        population=args.population,
        elite=args.elite,
        std0=args.std,
        cells=cells,
        time_limit_s=None if args.time_limit_min is None else 60.0 * args.time_limit_min,
        log=lambda line: print(line, flush=True),
        workers=args.workers,
        method=args.method,
        select_last=args.select_last,
        inputs=args.inputs,
        start=start,
    )
    result["settings"]["command"] = shlex.join(["python", "agents/train_priority.py", *(argv or sys.argv[1:])])
    write_run(args.out, result)
    print(f"wrote {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
