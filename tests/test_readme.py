"""The README's examples run as written."""

from __future__ import annotations

from conftest import load_script
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_readme_custom_policy_is_short_and_runs(capsys):
    blocks = [b for b in python_blocks(README.read_text()) if "class " in b and "(Policy)" in b]
    assert len(blocks) == 1
    code = blocks[0]
    assert len(code.strip().splitlines()) < 30
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert float(capsys.readouterr().out.strip()) > 0


def test_readme_commands_are_marked_for_ci():
    text = README.read_text()
    assert "<!-- ci:install -->" in text and "<!-- ci:test -->" in text


def test_readme_result_tables_are_the_committed_benchmark_results():
    # The README's result blocks are copies of benchmarks/results (benchmarks/readme_sync.py).
    sync = load_script("benchmarks/readme_sync.py", "readme_sync")
    text = README.read_text()
    assert {m["name"] for m in sync.BLOCK.finditer(text)} == set(sync.BLOCKS)
    assert sync.synced(text) == text, "run python benchmarks/readme_sync.py"
