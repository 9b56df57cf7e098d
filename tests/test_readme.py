"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import load_script

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


def test_readme_python_examples_run_in_order(capsys):
    # One namespace, top to bottom, as a reader would paste them.
    namespace = {"__name__": "readme"}
    for code in python_blocks(README.read_text()):
        exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["result"].summary["jobs"] > 0
    assert namespace["summary"]["jobs"] == 500


def test_readme_result_tables_are_the_committed_benchmark_results():
    # The generated blocks of the README and of docs/ are copies of benchmarks/results and of the
    # registries (benchmarks/readme_sync.py); every block the script knows is shown somewhere.
    sync = load_script("benchmarks/readme_sync.py", "readme_sync")
    shown = set()
    for path in sync.files():
        text = path.read_text()
        shown |= {m["name"] for m in sync.BLOCK.finditer(text)}
        assert sync.synced(text) == text, f"{path.name}: run python benchmarks/readme_sync.py"
    readme = {m["name"] for m in sync.BLOCK.finditer(README.read_text())}
    assert {"environments", "policies"} <= readme
    unused = set(sync.BLOCKS) - shown
    assert not unused, f"generated blocks shown nowhere: {sorted(unused)}"
