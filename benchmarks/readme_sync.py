"""Copy the benchmark results the README quotes into it, so its tables cannot drift from them.

    python benchmarks/readme_sync.py          # rewrite the README's result blocks
    python benchmarks/readme_sync.py --check  # exit 1 if a block differs from the results

A result block in ``README.md`` sits between ``<!-- results:NAME -->`` and
``<!-- /results -->``; its content is rebuilt from the committed outputs of
``benchmarks/speed.py``, ``benchmarks/compare.py`` and ``benchmarks/report.py``:

* ``speed``: the measured lines and the tables of ``results/speed.md`` (simulate, environments,
  DallyQueue), the table of ``results/episode_cost.md`` (episode cost per heuristic) and that
  of ``results/scaling.md``;
* ``makespan``: the batch-500 makespan table of ``results/compare.md``;
* ``claims``: the paper's-claims table of ``results/compare.md``;
* ``section-vi``: the summary line of the paper's qualitative §VI claims and their table's rows
  for the default renewal mode, from ``results/compare.md``;
* ``jct-gap``: the computed sentences on the JCT gap to Tiresias in ``results/compare.md``;
* ``agents``: the learned agents and the main heuristics from the table of
  ``results/report/report.md``'s section "The question: does a learned agent beat auto-tuned Dally?";
* ``real-traces``: the overall count, the table of the paper's directions per real trace and
  the computed headline sentences of ``results/real_traces.md`` (``compare.py --real-traces``);
* ``real-agents``: the computed sentences on the learned agents in ``results/real_traces.md``.

The tests run the check, so a rerun of a benchmark without a sync fails CI.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
BLOCK = re.compile(r"(<!-- results:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.DOTALL)

#: Rows of the report's main table that the README shows, in its order.
AGENT_ROWS = ("ppo-hidden", "ppo-observed", "ppo-oracle", "ppo-hidden-tiresias-order", "queue-ppo-s0",
              "queue-ppo-s1", "queue-ppo-s2", "queue-ppo-sizes-s0", "queue-ppo-sizes-s1", "queue-ppo-sizes-s2",
              "queue-ppo-guard-s0", "queue-ppo-guard-s1", "queue-ppo-guard-s2", "queue-ppo-fullguard-s0",
              "queue-ppo-fullguard-s1", "queue-ppo-fullguard-s2", "dally",
              "dally-consolidated", "tiresias", "tiresias-las", "protected-remaining", "gandiva")


def section(text: str, heading: str) -> str:
    """The body of the Markdown section whose heading line starts with ``heading``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    level = len(heading) - len(heading.lstrip("#"))
    body = []
    for line in lines[start + 1 :]:
        if line.startswith("#") and len(line) - len(line.lstrip("#")) <= level:
            break
        body.append(line)
    return "\n".join(body)


def first_table(text: str) -> list[str]:
    """The lines of the first Markdown table in ``text``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return lines[start:end]


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```\n(.*?)```", text, flags=re.DOTALL)


def speed_block() -> str:
    text = (RESULTS / "speed.md").read_text()
    measured = [line for line in text.splitlines() if line.startswith("- ")]
    simulate, env, *more = code_blocks(text)
    queue_lines = ["", "`DallyQueue` steps per second through `gym.make` on the fixed traces, with the Dally order and with "
                   "random masked picks:", "", "```text\n" + more[0] + "```"] if more else []
    cost = RESULTS / "episode_cost.md"
    cost_lines = ["", "One `batch-500` episode at 8 racks with each shipped heuristic as the agent, in CartPole steps "
                  "(`python benchmarks/speed.py --episode-cost`, the median of three fresh processes, with the least "
                  "and the most; [benchmarks/results/episode_cost.md](benchmarks/results/episode_cost.md)):",
                  "", "```text\n" + code_blocks(cost.read_text())[0] + "```"] if cost.exists() else []
    scaling = RESULTS / "scaling.md"
    scaling_lines = ["", "`dallygym simulate` on philly-like traces of 10,000 to 100,000 jobs, one process per run "
                     "(`python benchmarks/speed.py --scaling`, "
                     "[benchmarks/results/scaling.md](benchmarks/results/scaling.md)):", "",
                     "```text\n" + code_blocks(scaling.read_text())[0] + "```"] if scaling.exists() else []
    return "\n".join([
        *measured,
        "",
        "In-process `simulate()` time (trace load, run, metrics), median of the repeats:",
        "",
        "```text\n" + simulate + "```",
        "",
        "Environment steps per second through `gym.make` (whole episodes, at least 20,000 steps per "
        "measurement, the median of the measurements), with resets included and without them; decisions and "
        "wall time per episode:",
        "",
        "```text\n" + env + "```",
        *queue_lines,
        *cost_lines,
        *scaling_lines,
    ]) + "\n"


def makespan_block() -> str:
    text = (RESULTS / "compare.md").read_text()
    return "\n".join(first_table(section(text, "### batch-500"))) + "\n"


def claims_block() -> str:
    text = (RESULTS / "compare.md").read_text()
    return "\n".join(first_table(section(text, "## The paper's claims beside ours"))) + "\n"


def section_vi_block() -> str:
    body = section((RESULTS / "compare.md").read_text(), "## The paper's qualitative claims")
    summary = next(line for line in body.splitlines() if line.startswith("batch-500."))
    table = first_table(body)
    default = table[2].split("|")[2].strip()  # the renewal column of the first row
    rows = [line for line in table[2:] if line.split("|")[2].strip() == default]
    head = [table[0].replace("| renewal ", ""), table[1].replace("---|", "", 1)]
    rows = ["|" + "|".join(cell for i, cell in enumerate(line.split("|")[1:]) if i != 1) for line in rows]
    return "\n".join([summary, "", f"Under `{default}`:", "", *head, *rows]) + "\n"


def jct_gap_block() -> str:
    body = section((RESULTS / "compare.md").read_text(), "## Headline numbers against the paper")
    lines = [line for line in body.splitlines() if line.startswith(("- *Why Tiresias", "- *JCT against Tiresias"))]
    return "\n".join(lines) + "\n"


def agents_block() -> str:
    text = section((RESULTS / "report" / "report.md").read_text(), "## The question: does a learned agent beat")
    rows = {}
    for line in first_table(text)[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    out = ["| agent | mean JCT (h) | vs Dally | makespan (h) | vs Dally |", "|---|---|---|---|---|"]
    for name in AGENT_ROWS:
        _, jct, jct_vs, makespan, makespan_vs, *_ = rows[name]
        out.append(f"| {name} | {float(jct):,.1f} | {float(jct_vs):+.1f} % | {float(makespan):,.0f} | "
                   f"{float(makespan_vs):+.1f} % |")
    return "\n".join(out) + "\n"


def _bullets(body: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith("- **")]


def real_traces_block() -> str:
    text = (RESULTS / "real_traces.md").read_text()
    body = section(text, "## The paper's directions on each real trace")
    overall = next(line for line in body.splitlines() if line.startswith("Over all real traces:"))
    headline = _bullets(section(text, "## Headline numbers per trace"))
    return "\n".join([overall, "", *first_table(body), "", *headline]) + "\n"


def real_agents_block() -> str:
    text = (RESULTS / "real_traces.md").read_text()
    return "\n".join(_bullets(section(text, "## Learned agents on the real traces"))) + "\n"


BLOCKS = {"speed": speed_block, "makespan": makespan_block, "claims": claims_block, "agents": agents_block,
          "section-vi": section_vi_block, "jct-gap": jct_gap_block, "real-traces": real_traces_block,
          "real-agents": real_agents_block}


def synced(readme: str) -> str:
    """The README text with every result block rebuilt; unknown block names are an error."""
    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise ValueError(f"README block <!-- results:{name} --> is not one of {', '.join(BLOCKS)}")
        return match[1] + BLOCKS[name]() + match[4]

    return BLOCK.sub(fill, readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report whether the README is in step")
    args = parser.parse_args(argv)
    text = README.read_text()
    new = synced(text)
    if args.check:
        stale = [m["name"] for m, n in zip(BLOCK.finditer(text), BLOCK.finditer(new)) if m["body"] != n["body"]]
        if stale:
            print(f"README result blocks out of step with benchmarks/results: {', '.join(stale)}; "
                  "run python benchmarks/readme_sync.py")
            return 1
        return 0
    README.write_text(new)
    print(f"README: {len(BLOCK.findall(new))} result blocks written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
