"""The repository passes `ruff check` (the rules in pyproject.toml) and `ruff format --check`."""

from __future__ import annotations

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
