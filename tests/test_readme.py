"""The README's examples run as written."""

from __future__ import annotations

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
