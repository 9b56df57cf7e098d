"""Copy the benchmark results and the registries the README and the docs quote into them, so
their tables cannot drift from them.

    python benchmarks/readme_sync.py           # rewrite the generated blocks of README.md and docs/
    python benchmarks/readme_sync.py --check   # exit 1 if a block differs from its source
    python benchmarks/readme_sync.py --tables  # print the environments and policies tables

A generated block in ``README.md`` or a page of ``docs/`` sits between ``<!-- results:NAME -->``
and ``<!-- /results -->``; its content is rebuilt from the registries or from the committed
outputs of ``benchmarks/speed.py``, ``benchmarks/compare.py`` and ``benchmarks/report.py``:

* ``environments``: the Gymnasium registry's entries whose id starts with ``Dally`` (id, class,
  cluster, trace drawn at each reset, candidate slots);
* ``policies``: ``dallygym.sim.policies.POLICIES`` (name, class, the first sentence of its docstring);
* ``speed``: the measured lines and the tables of ``results/speed.md`` (simulate, environments,
  DallyQueue), the table of ``results/episode_cost.md`` (episode cost per heuristic) and that
  of ``results/scaling.md``;
* ``makespan``: the batch-500 makespan table of ``results/compare.md``;
* ``claims``: the paper's-claims table of ``results/compare.md``;
* ``section-vi``: the summary line of the paper's qualitative §VI claims and their table's rows
  for the default renewal mode, from ``results/compare.md``;
* ``jct-gap``: the computed sentences on the JCT gap to Tiresias in ``results/compare.md``;
* ``real-traces``: the overall count, the table of the paper's directions per real trace and
  the computed headline sentences of ``results/real_traces.md`` (``compare.py --real-traces``);
* ``real-agents``: the computed sentences on the learned agents in ``results/real_traces.md``;
* ``agents``: the learned agents and the main heuristics from the table of
  ``results/report/report.md``'s section "The question: does a learned agent beat auto-tuned Dally?";
* ``agents-heldout``: the learned ``DallyQueue-v0`` agents on the held-out grid beside their initial
  policies and the baselines (``results/agents_heldout.csv``, ``agents/queue_baselines.py``);
  ``agents-heldout-headline``: the same with only the headline learned agents.

The results pages of the site also include the committed ``benchmarks/results/*.md`` whole (the
``pymdownx.snippets`` extension); these blocks are their summaries. The tests run the check, so a rerun of a
benchmark or a new policy or environment without a sync fails CI.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"
BLOCK = re.compile(r"(<!-- results:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.DOTALL)

#: Rows of the report's main table that the README shows, in its order.
AGENT_ROWS = (
    "ppo-hidden",
    "ppo-observed",
    "ppo-oracle",
    "ppo-hidden-tiresias-order",
    "queue-ppo-s0",
    "queue-ppo-s1",
    "queue-ppo-s2",
    "queue-ppo-sizes-s0",
    "queue-ppo-sizes-s1",
    "queue-ppo-sizes-s2",
    "queue-ppo-guard-s0",
    "queue-ppo-guard-s1",
    "queue-ppo-guard-s2",
    "queue-ppo-fullguard-s0",
    "queue-ppo-fullguard-s1",
    "queue-ppo-fullguard-s2",
    "dally",
    "dally-consolidated",
    "tiresias",
    "tiresias-las",
    "protected-remaining",
    "gandiva",
)


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
    queue_lines = (
        [
            "",
            "`DallyQueue` steps per second through `gym.make` on the fixed traces, with the Dally order "
            "and with random masked picks:",
            "",
            "```text\n" + more[0] + "```",
        ]
        if more
        else []
    )
    cost = RESULTS / "episode_cost.md"
    cost_lines = (
        [
            "",
            "One `batch-500` episode at 8 racks with each shipped heuristic as the agent, in CartPole steps "
            "(`python benchmarks/speed.py --episode-cost`, the median of three fresh processes, with the least "
            "and the most; `benchmarks/results/episode_cost.md`):",
            "",
            "```text\n" + code_blocks(cost.read_text())[0] + "```",
        ]
        if cost.exists()
        else []
    )
    scaling = RESULTS / "scaling.md"
    scaling_lines = (
        [
            "",
            "`dallygym simulate` on philly-like traces of 10,000 to 100,000 jobs, one process per run "
            "(`python benchmarks/speed.py --scaling`, "
            "`benchmarks/results/scaling.md`):",
            "",
            "```text\n" + code_blocks(scaling.read_text())[0] + "```",
        ]
        if scaling.exists()
        else []
    )
    return (
        "\n".join(
            [
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
            ]
        )
        + "\n"
    )


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


def agents_block(names: tuple[str, ...] = AGENT_ROWS) -> str:
    text = section((RESULTS / "report" / "report.md").read_text(), "## The question: does a learned agent beat")
    rows = {}
    for line in first_table(text)[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    out = ["| agent | mean JCT (h) | vs Dally | makespan (h) | vs Dally |", "|---|---|---|---|---|"]
    for name in names:
        _, jct, jct_vs, makespan, makespan_vs, *_ = rows[name]
        out.append(
            f"| {name} | {float(jct):,.1f} | {float(jct_vs):+.1f} % | {float(makespan):,.0f} | "
            f"{float(makespan_vs):+.1f} % |"
        )
    return "\n".join(out) + "\n"


#: The held-out grid of ``agents/queue_baselines.py`` (``benchmarks/results/agents_heldout.csv``).
HELDOUT_GRID = RESULTS / "agents_heldout.csv"
#: Its rows shown beside the learned ones (the agents come first, as the CSV has them).
HELDOUT_BASELINES = (
    "constant-0 (protected-remaining offers)",
    "random picks (protected-remaining offers)",
    "teacher",
    "teacher (protected-remaining offers)",
    "protected-remaining",
    "tuned-priority",
    "dally-consolidated",
    "dally",
    "lower bound",
)


#: The headline learned agents, the README's rows of the held-out grid (with their initial rows).
HELDOUT_HEADLINE = ("priority-s0", "priority-s1", "priority-s2")


def heldout_block(headline_only: bool = False) -> str:
    """The learned ``DallyQueue-v0`` agents on the held-out grid, beside their initial policies,
    the trivial picks, the teacher, the heuristics and the search rows: geometric means over the cells
    (``agents/queue_baselines.py``'s own summary of its CSV). ``headline_only``: of the learned
    agents, only :data:`HELDOUT_HEADLINE`'s."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("queue_baselines", ROOT / "agents" / "queue_baselines.py")
    grid = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grid)
    frame = grid.read_grid(HELDOUT_GRID)
    summary = grid.summary_table(frame).set_index("row")
    learned = list(summary.index[summary["kind"].isin(["agent", "initial"])])
    if headline_only:
        learned = [name for name in learned if name.removesuffix(" (initial)") in HELDOUT_HEADLINE]
    out = [
        "| row | mean JCT / best safe heuristic | mean JCT / lower bound | worst makespan / Dally "
        "| makespan within +1 % | goal met |",
        "|---|---|---|---|---|---|",
    ]
    search = list(summary.index[summary["kind"] == "search"])  # (its own rows: not a yardstick)
    for name in [*learned, *(b for b in HELDOUT_BASELINES if b in summary.index), *search]:
        r = summary.loc[name]
        out.append(
            f"| {name} | {r['JCT / best safe']:.2f} | {r['JCT / bound']:.2f} | {r['worst makespan / Dally']:.3f} "
            f"| {r['makespan within +1 %']} | {r['goal met']} |"
        )
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def _first_sentence(doc: str) -> str:
    paragraph = " ".join(doc.split("\n\n")[0].split())
    match = re.search(r"(?<=[a-z0-9)\]`])\. ", paragraph)
    return paragraph[: match.start() + 1] if match else paragraph


def environments_table() -> str:
    """The registered ``Dally*`` Gymnasium environments as a Markdown table."""
    import inspect

    import gymnasium as gym

    import dallygym  # noqa: F401  (registers the environments)

    out = [
        "| id | class | cluster (racks × machines × GPUs) | trace at each reset | candidate slots |",
        "|---|---|---|---|---|",
    ]
    for env_id, spec in gym.registry.items():
        if not env_id.startswith("Dally"):
            continue
        module, _, name = str(spec.entry_point).partition(":")
        cls = getattr(__import__(module, fromlist=[name]), name)
        defaults = {
            k: p.default
            for k, p in inspect.signature(cls).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        kw = {**defaults, **spec.kwargs}
        cluster = f"{kw['racks']} × {kw['machines_per_rack']} × {kw['gpus_per_machine']}"
        slots = str(kw["max_candidates"]) if "max_candidates" in kw else "—"
        out.append(f"| `{env_id}` | `{module}.{name}` | {cluster} | `{kw['trace']}` | {slots} |")
    return "\n".join(out) + "\n"


def policies_table() -> str:
    """The shipped policies (``dallygym.sim.policies.POLICIES``) as a Markdown table."""
    import inspect

    from dallygym.sim.policies import POLICIES

    out = ["| name | class | what it does |", "|---|---|---|"]
    for name, cls in POLICIES.items():
        out.append(f"| `{name}` | `{cls.__name__}` | {_cell(_first_sentence(inspect.getdoc(cls) or ''))} |")
    return "\n".join(out) + "\n"


BLOCKS = {
    "environments": environments_table,
    "policies": policies_table,
    "speed": speed_block,
    "makespan": makespan_block,
    "claims": claims_block,
    "section-vi": section_vi_block,
    "jct-gap": jct_gap_block,
    "real-traces": real_traces_block,
    "real-agents": real_agents_block,
    "agents": agents_block,
    "agents-heldout": heldout_block,
    "agents-heldout-headline": lambda: heldout_block(headline_only=True),
}


def synced(readme: str) -> str:
    """The README text with every result block rebuilt; unknown block names are an error."""

    def fill(match: re.Match) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise ValueError(f"README block <!-- results:{name} --> is not one of {', '.join(BLOCKS)}")
        return match[1] + BLOCKS[name]() + match[4]

    return BLOCK.sub(fill, readme)


def files() -> list[Path]:
    """The files whose generated blocks are kept in step: README.md and every page of docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report whether the files are in step")
    parser.add_argument("--tables", action="store_true", help="print the environments and policies tables")
    args = parser.parse_args(argv)
    if args.tables:
        print(environments_table())
        print(policies_table(), end="")
        return 0
    stale_files = []
    for path in files():
        text = path.read_text()
        if not BLOCK.search(text):
            continue
        new = synced(text)
        rel = path.relative_to(ROOT)
        if args.check:
            stale = [m["name"] for m, n in zip(BLOCK.finditer(text), BLOCK.finditer(new)) if m["body"] != n["body"]]
            if stale:
                stale_files.append(f"{rel} ({', '.join(stale)})")
        elif new != text:
            path.write_text(new)
            print(f"{rel}: {len(BLOCK.findall(new))} generated blocks, rewritten")
    if stale_files:
        print(
            f"generated blocks out of step with their sources: {'; '.join(stale_files)}; "
            "run python benchmarks/readme_sync.py"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
