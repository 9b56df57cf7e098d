"""The repository passes `ruff check` (the rules in pyproject.toml) and `ruff format --check`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes_on_the_whole_repository():
    # ruff ships as a Python package whose module runs the same binary as the `ruff` command;
    # the test extra pins it to a minor release so that the default rule set cannot drift.
    pytest.importorskip("ruff", reason="ruff is in the test extra: pip install -e '.[test]'")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"ruff check . found violations:\n{proc.stdout}{proc.stderr}"


def test_ruff_format_leaves_every_file_as_it_is():
    pytest.importorskip("ruff", reason="ruff is in the test extra: pip install -e '.[test]'")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"ruff format would change files (run `ruff format .`):\n{proc.stdout}{proc.stderr}"


def _imported_test_modules(path: Path) -> list[tuple[int, str]]:
    """The (line, module) of every import in ``path`` of ``conftest`` or of a ``test_*`` module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "conftest" or top.startswith("test_"):
                found.append((node.lineno, name))
    return found


def test_test_modules_import_helpers_only_from_the_helper_module():
    """Shared test helpers live in tests/helpers.py; no test file imports conftest or another test module."""
    bad = [
        f"tests/{path.name}:{line}: imports {name} (import shared helpers from helpers.py instead)"
        for path in sorted((ROOT / "tests").glob("*.py"))
        for line, name in _imported_test_modules(path)
    ]
    assert not bad, "\n".join(bad)
