"""Rank a student's policy or agent against every shipped policy on the held-out course traces.

    python -m examples.course.rank --policy examples/course/student_policy.py:StudentPolicy
    python -m examples.course.rank --agent runs/course-ppo/agent.pt
    python -m examples.course.rank --policy my.py:Mine --agent runs/a/agent.pt --seeds 2001 2002 \
        [--shipped dally tiresias ...] [--no-baselines] [--format table|markdown|csv] [--out FILE]

Every entry runs on the same held-out course traces (``small`` seeds 2001-2010, never used in
training; see ``examples/course/course.py``) on the course cluster (2 racks x 2 machines x 8
GPUs):

* each shipped policy and each ``--policy`` (a ``FILE.py:ClassName`` whose class is a
  ``dallygym.Policy``), natively: ``dallygym.sim.simulate``;
* each ``--agent`` (an ``agent.pt`` saved by ``examples/course/ppo_masked.py``) choosing the
  picks of the course environment, ``DallyQueueSmall-v0``, whose offers Dally answers:
  ``dallygym.evaluate``;
* the trivial baselines of that environment (unless ``--no-baselines``): ``random picks``
  (uniform among the valid actions, seeded per trace), ``constant 0`` (always slot 0, the
  offer rule's own order: exactly Dally) and ``always stop`` (stop every pass that may stop).
  A learned agent that does not beat random picks has not learned much; one that equals
  constant 0 has learned nothing.

Both paths end in the same engine and the same metrics (``dallygym.sim.metrics.summarize``). The
table has one row per entry, sorted by mean JCT: the means over the traces of mean JCT,
makespan and mean communication latency (hours), mean JCT and makespan relative to ``dally``
(ratio of the means, in %), and on how many traces the entry's mean JCT is below Dally's.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import dallygym
from dallygym import POLICIES, Policy
from examples.course import course


def load_policy_class(spec: str) -> type[Policy]:
    """``path/to/file.py:ClassName`` -> the class (the file is imported as a module)."""
    path, _, name = spec.rpartition(":")
    if not path or not name:
        raise SystemExit(f"rank: --policy takes FILE.py:ClassName, got {spec!r}")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if module_spec is None or not Path(path).is_file():
        raise SystemExit(f"rank: no such file {path!r}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise SystemExit(f"rank: {name!r} in {path} is not a dallygym.Policy subclass")
    return cls


def entries(
    policies: list[str], agents: list[str], shipped: list[str], baselines: bool
) -> list[tuple[str, str, object]]:
    """(label, kind, what) per row: kind "native" runs a policy (a name or a class), "env"
    runs an agent factory (trace index -> agent) in the course environment."""
    rows: list[tuple[str, str, object]] = [(name, "native", name) for name in shipped]
    for spec in policies:
        cls = load_policy_class(spec)
        rows.append((f"{cls.name} (yours)", "native", cls))
    if agents:
        from examples.course.ppo_masked import load_agent

        for path in agents:
            agent = load_agent(path)
            rows.append((f"{agent.name} (agent)", "env", lambda i, agent=agent: agent))
    if baselines:
        rows.append(("random picks", "env", lambda i: course.MaskedChoice("random", seed=i)))
        rows.append(("constant 0", "env", lambda i: course.MaskedChoice("first")))
        rows.append(("always stop", "env", lambda i: course.MaskedChoice("stop")))
    return rows


def run(label_kind_what, traces) -> pd.DataFrame:
    """One row per (entry, trace): the summary keys of ``dallygym simulate``."""
    records = []
    for label, kind, what in label_kind_what:
        for i, (trace_name, trace) in enumerate(traces):
            if kind == "native":
                policy = what() if isinstance(what, type) else what
                summary = dallygym.simulate(trace, course.CLUSTER, policy=policy).summary
            else:
                summary = dallygym.evaluate(course.make_env(trace), what(i), seed=0)
            records.append({"entry": label, "trace": trace_name, **summary})
    return pd.DataFrame(records)


def ranking(per_trace: pd.DataFrame) -> pd.DataFrame:
    """The ranking table from the per-trace rows (see the module docstring)."""
    hours = per_trace.assign(
        jct_h=per_trace["jct_mean_s"] / 3600,
        makespan_h=per_trace["makespan_s"] / 3600,
        comm_h=per_trace["comm_mean_s"] / 3600,
    )
    means = hours.groupby("entry", sort=False)[["jct_h", "makespan_h", "comm_h"]].mean()
    table = means.rename(columns={"jct_h": "mean JCT (h)", "makespan_h": "makespan (h)", "comm_h": "comm. latency (h)"})
    if "dally" in means.index:
        base = means.loc["dally"]
        table["JCT vs dally"] = (100 * (means["jct_h"] / base["jct_h"] - 1)).map(lambda v: f"{v:+.1f} %")
        table["makespan vs dally"] = (100 * (means["makespan_h"] / base["makespan_h"] - 1)).map(lambda v: f"{v:+.1f} %")
        dally_jct = hours[hours["entry"] == "dally"].set_index("trace")["jct_h"]
        wins = hours.assign(below=hours["jct_h"].to_numpy() < dally_jct.reindex(hours["trace"]).to_numpy() - 1e-9)
        n = hours["trace"].nunique()
        table["traces below dally"] = wins.groupby("entry", sort=False)["below"].sum().map(lambda k: f"{k}/{n}")
    table = table.sort_values("mean JCT (h)", kind="stable")
    table.insert(0, "rank", np.arange(1, len(table) + 1))
    return table.round(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--policy", action="append", default=[], metavar="FILE.py:Class", help="your Policy subclass (repeatable)"
    )
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="agent.pt",
        help="an agent saved by examples/course/ppo_masked.py (repeatable)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=list(course.HELDOUT_SEEDS),
        help="held-out small-trace seeds (default 2001-2010)",
    )
    parser.add_argument(
        "--shipped", nargs="*", default=list(POLICIES), help="shipped policies to rank against (default: all)"
    )
    parser.add_argument("--no-baselines", action="store_true", help="leave out random picks, constant 0, always stop")
    parser.add_argument("--format", choices=("table", "markdown", "csv"), default="table")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--per-trace", help="write every (entry, trace) row as CSV here")
    args = parser.parse_args(argv)
    unknown = [p for p in args.shipped if p not in POLICIES]
    if unknown:
        parser.error(f"unknown shipped policies {unknown}; known: {', '.join(POLICIES)}")
    rows = entries(args.policy, args.agent, args.shipped, not args.no_baselines)
    per_trace = run(rows, course.heldout_traces(args.seeds))
    table = ranking(per_trace)
    if args.format == "csv":
        text = table.to_csv()
    elif args.format == "markdown":
        text = _markdown(table)
    else:
        text = table.to_string()
    text = text if text.endswith("\n") else text + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    if args.per_trace:
        per_trace.to_csv(args.per_trace, index=False)
    return 0


def _markdown(table: pd.DataFrame) -> str:
    """A GitHub table without the optional ``tabulate`` dependency."""
    head = ["entry", *table.columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for entry, row in table.iterrows():
        cells = [str(entry), *(f"{v:g}" if isinstance(v, float) else str(v) for v in row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
