"""The documentation a user reads: the README front page and the MkDocs site under docs/.

* the README stays a front page (at most 300 lines) whose CI commands are the documented ones;
* its environments and policies tables are what the registries give, so a new policy or
  environment cannot go missing (``benchmarks/readme_sync.py`` writes them);
* every ``dallygym`` command shown in the README or the docs uses flags its ``--help`` lists, and
  the README's synopsis shows every subcommand ``dallygym --help`` lists;
* no tracker or session citations in what a user reads (README, docs, package, examples, agents
  README);
* ``mkdocs build --strict`` passes (when the ``docs`` extra is installed).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

INSTALL = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && "
    "dallygym simulate --policy dally --racks 8 --trace batch-500"
)
TEST = '. .venv/bin/activate && pip install -e ".[agents,plots,test,ray,docs]" && python -m pytest -q -n auto'


def _marked_command(text: str, marker: str) -> str:
    """First line of the first code block after ``<!-- marker -->`` (what .ci/run reads)."""
    after = text.split(f"<!-- {marker} -->", 1)[1]
    block = re.search(r"```[a-z]*\n(.*?)```", after, flags=re.DOTALL)
    return next(line for line in block[1].splitlines() if line.strip())


def test_readme_is_a_front_page_with_the_ci_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 300, "README.md is a front page: at most 300 lines (move detail to docs/)"
    assert _marked_command(text, "ci:install") == INSTALL
    assert _marked_command(text, "ci:test") == TEST
    assert "DallyQueue-v0" in text.split("## ", 1)[0], "the introduction names both environments"


# --- generated tables -------------------------------------------------------------------------


def _block(text: str, name: str) -> str:
    match = re.search(rf"<!-- results:{name} -->\n(.*?)<!-- /results -->", text, flags=re.DOTALL)
    assert match, f"no <!-- results:{name} --> block"
    return match[1]


def test_readme_tables_are_the_registries():
    sync = load_script("benchmarks/readme_sync.py", "readme_sync")
    text = README.read_text()
    assert _block(text, "environments") == sync.environments_table(), "run python benchmarks/readme_sync.py"
    assert _block(text, "policies") == sync.policies_table(), "run python benchmarks/readme_sync.py"


def test_generated_tables_list_every_registered_name():
    import gymnasium as gym

    import dallygym

    sync = load_script("benchmarks/readme_sync.py", "readme_sync")
    envs, policies = sync.environments_table(), sync.policies_table()
    for env_id in (k for k in gym.registry if k.startswith("Dally")):
        assert f"| `{env_id}` |" in envs
    for name in dallygym.POLICIES:
        assert f"| `{name}` |" in policies
    assert "protected-remaining" in policies and "gandiva-timeslice" in policies


def test_every_generated_block_is_in_step():
    sync = load_script("benchmarks/readme_sync.py", "readme_sync")
    stale = [str(path.relative_to(ROOT)) for path in sync.files() if sync.synced(path.read_text()) != path.read_text()]
    assert not stale, f"generated blocks out of step in {stale}: run python benchmarks/readme_sync.py"


# --- the command line as documented -------------------------------------------------------------


def _help(argv: list[str]) -> str:
    from dallygym.experiments.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main([*argv, "--help"])
    return out.getvalue()


def _subcommands(help_text: str) -> list[str]:
    """The choices of the first ``{a,b,...}`` group of a --help text."""
    match = re.search(r"\{([a-z0-9,-]+)\}", help_text)
    return match[1].split(",") if match else []


def _commands(text: str) -> list[tuple[str, str]]:
    """Every ``dallygym ...`` command in the code blocks of a Markdown text, continuation lines
    (a trailing backslash, or indented option lines in a synopsis) joined, comments dropped."""
    found = []
    for block in re.findall(r"```(?:text|bash|console|)\n(.*?)```", text, flags=re.DOTALL):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i].strip().removeprefix("$ ")
            if not line.startswith("dallygym "):
                i += 1
                continue
            parts = [line]
            while i + 1 < len(lines) and (parts[-1].endswith("\\") or re.match(r"\s+[\[-]", lines[i + 1])):
                i += 1
                parts.append(lines[i].strip())
            command = " ".join(p.rstrip("\\").strip() for p in parts)
            found.append((lines[i], re.sub(r"\s+#\s.*$", "", command)))
            i += 1
    return found


def _documented_commands() -> list[tuple[str, str]]:
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    return [
        (f"{page.relative_to(ROOT)}: {line}", command)
        for page in pages
        for line, command in _commands(page.read_text())
    ]


def test_documented_flags_exist_in_the_live_help():
    top = _subcommands(_help([]))
    helps: dict[tuple[str, ...], str] = {}
    problems = []
    checked = 0
    for where, command in _documented_commands():
        words = command.split()[1:]
        path: list[str] = []
        choices = top
        for word in words:
            if word.startswith("-") or word not in choices:
                break
            path.append(word)
            key = tuple(path)
            if key not in helps:
                helps[key] = _help(path)
            choices = _subcommands(helps[key]) if word in ("agent", "trace") else []
        if not path:
            # a subcommand the live CLI does not have (yet): nothing to check against
            continue
        text = helps[tuple(path)]
        for flag in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command))):
            checked += 1
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
                problems.append(f"{where}: `dallygym {' '.join(path)}` has no {flag}")
    assert checked > 20
    assert not problems, "\n".join(problems)


def test_readme_synopsis_shows_every_subcommand():
    text = README.read_text()
    synopsis = re.search(r"<!-- cli:synopsis -->\n```text\n(.*?)```", text, flags=re.DOTALL)
    assert synopsis, "README has no <!-- cli:synopsis --> block"
    shown = {line.split()[1] for line in synopsis[1].splitlines() if line.startswith("dallygym ")}
    live = set(_subcommands(_help([])))
    assert not live - shown, f"subcommands missing from the README synopsis: {sorted(live - shown)}"
    page = (DOCS / "command-line.md").read_text()
    missing = [name for name in live if f"dallygym {name}" not in page]
    assert not missing, f"subcommands missing from docs/command-line.md: {missing}"


# --- no development history in what a user reads ------------------------------------------------

#: Tracker and session citations: "issue 12", "issue #12", "#12" (not a colour, a shebang or a
#: heading), "session 17".
CITATION = re.compile(r"\bissues?\s+#?\d+|\bsessions?\s+\d+|(?<![\w&#/])#\d{2,}(?![\w-])", re.IGNORECASE)
#: Colours, removed before matching: strings ("#000000", '#0072B2') and CSS values
#: ("color: #444;", "1px solid #999").
COLOUR = re.compile(r"""["'`]#[0-9a-fA-F]{3,8}["'`]|(?:[:=]\s*|solid\s+)#[0-9a-fA-F]{3,8}\b""")


def _user_facing_files() -> list[Path]:
    files = [README, ROOT / "agents" / "README.md"]
    files += sorted(p for p in DOCS.rglob("*") if p.suffix in (".md", ".ipynb"))
    files += sorted((ROOT / "dallygym").rglob("*.py"))
    files += sorted(p for p in (ROOT / "examples").rglob("*") if p.suffix in (".py", ".md", ".ipynb"))
    # The scripts and tests a contributor reads, and the results files they write (this file's
    # own examples of citations excepted).
    for folder in ("agents", "benchmarks", "tests"):
        files += sorted((ROOT / folder).glob("*.py"))
    files += sorted((ROOT / "benchmarks" / "results").rglob("*.md"))
    files += sorted((ROOT / "agents" / "runs").rglob("*.md"))
    return [p for p in files if p.is_file() and "__pycache__" not in p.parts and p != Path(__file__).resolve()]


def citations(paths: list[Path]) -> list[str]:
    hits = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in CITATION.finditer(COLOUR.sub("", line)):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {match[0]!r}")
    return hits


def test_the_citation_pattern():
    bad = ["see issue 11", "Issue #4 says", "fixed in #123.", "(#42)", "in session 17's run"]
    good = [
        "color='#000000'",
        "network tier black `#000000`",
        "#!/usr/bin/env bash",
        "## 12 racks",
        "a 2-GPU job",
        "'#0072B2'",
        "x#12y",
        "&#12345;",
        "issued 3 times",
        "sessions are reproducible",
        "p { color: #444; }",
        "border: 1px solid #999;",
    ]
    assert all(CITATION.search(COLOUR.sub("", text)) for text in bad)
    assert not [text for text in good if CITATION.search(COLOUR.sub("", text))]


def test_no_tracker_or_session_citations_in_what_a_user_reads():
    hits = citations(_user_facing_files())
    assert not hits, "tracker or session citations (history goes to CHANGELOG.md):\n" + "\n".join(hits)


# --- the site ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_mkdocs_site_builds_strict_and_offline(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None or (
            "." in module and importlib.util.find_spec(module) is None
        ):
            pytest.skip(f"{module} is not installed (the docs extra: pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    for page in (
        "index.html",
        "getting-started/index.html",
        "environments/dally-queue/index.html",
        "results/paper-grid/index.html",
        "reference/environments/index.html",
    ):
        assert page in pages
    html = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "site").rglob("*.html"))
    assert "fonts.googleapis" not in html and "fonts.gstatic" not in html
    # the committed results are included as they are, and the API reference is rendered
    grid = (tmp_path / "site" / "results" / "paper-grid" / "index.html").read_text(encoding="utf-8")
    assert "Makespan normalised to Dally" in grid
    api = (tmp_path / "site" / "reference" / "environments" / "index.html").read_text(encoding="utf-8")
    assert "DallyQueueEnv" in api
