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


def _compiled(node: ast.FunctionDef) -> bool:
    """Whether a function is a numba kernel (decorated with ``njit``/``jit``, called or not)."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("njit", "jit"):
            return True
    return False


def test_no_class_over_500_lines_and_no_python_function_over_80():
    """The package's size limits: a class is read whole, a function on one screen; the numba
    kernels (whose loops cannot call back into Python cheaply) are exempt from the second."""
    too_long = []
    for path in sorted((ROOT / "dallygym").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ClassDef) and lines > 500:
                too_long.append(f"{where}: class {node.name} has {lines} lines (at most 500)")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and lines > 80 and not _compiled(node):
                too_long.append(f"{where}: function {node.name} has {lines} lines (at most 80)")
    assert not too_long, "\n".join(too_long)
