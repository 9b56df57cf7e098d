"""The package's role layout: former flat module paths still import (the same module, with a
DeprecationWarning), pickles made under them load, and nothing in the repository names them."""

from __future__ import annotations

import importlib
import pickle
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import dallygym
from dallygym import _moved
from dallygym.sim.engine.config import EngineConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("old", sorted(set(_moved.MOVED) - set(dir(dallygym))))
def test_a_former_path_is_the_module_at_its_new_path(old):
    new = importlib.import_module(f"dallygym.{_moved.MOVED[old]}")
    sys.modules.pop(f"dallygym.{old}", None)
    with pytest.warns(DeprecationWarning, match=rf"dallygym\.{old} moved to dallygym\.{re.escape(_moved.MOVED[old])}"):
        former = importlib.import_module(f"dallygym.{old}")
    assert former is new
    assert new.__name__ == f"dallygym.{_moved.MOVED[old]}"  # the module itself is untouched


def test_a_former_module_named_like_a_public_name_leaves_the_name_alone():
    from dallygym.sim import simulate as module

    former = importlib.import_module("dallygym.simulate")

    assert former is module
    assert dallygym.simulate is module.simulate  # the function, not the module
    assert callable(dallygym.simulate)


def test_a_former_package_s_submodule_is_not_loaded_twice():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from dallygym.engine.core import Engine as former
    from dallygym.sim.engine.core import Engine

    assert former is Engine
    assert sys.modules["dallygym.engine.core"] is sys.modules["dallygym.sim.engine.core"]


def test_new_name_maps_only_former_paths():
    assert _moved.new_name("dallygym.queue_env") == "dallygym.envs.queue"
    assert _moved.new_name("dallygym.trace.schema") == "dallygym.sim.trace.schema"
    assert _moved.new_name("dallygym.learn") == "dallygym.learning.trainer"
    assert _moved.new_name("dallygym.sim.cluster") is None
    assert _moved.new_name("dallygym") is None
    assert _moved.new_name("dallygymnastics.queue_env") is None
    assert _moved.new_name("numpy.env") is None


def test_an_object_pickled_under_a_former_path_loads():
    config = EngineConfig(lease_s=1800.0)
    text = pickle.dumps(config, protocol=0)  # protocol 0 names the module as a line of text
    assert b"dallygym.sim.engine.config" in text
    former = text.replace(b"dallygym.sim.engine.config", b"dallygym.engine.config")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        loaded = pickle.loads(former)
    assert type(loaded) is EngineConfig
    assert loaded == config


def test_the_package_imports_without_touching_a_former_path():
    # A fresh interpreter: importing every module of the package must not go through the finder.
    code = (
        "import warnings, pkgutil, importlib, dallygym\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "for m in pkgutil.walk_packages(dallygym.__path__, 'dallygym.'):\n"
        "    if m.name != 'dallygym.__main__': importlib.import_module(m.name)\n"
        "import sys\n"
        "from dallygym._moved import new_name\n"
        "bad = [n for n in sys.modules if new_name(n) and not hasattr(dallygym, n.split('.')[1])]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_no_file_in_the_repository_names_a_former_module_path():
    names = "|".join(sorted((re.escape(n) for n in _moved.MOVED if n not in dallygym.__all__), key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w.])dallygym[./]({names})(?![\w])")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    # (the history, the alias table, this test, and the page that says the former paths import)
    skip = {"CHANGELOG.md", "dallygym/_moved.py", "tests/test_layout.py", "docs/reference/index.md"}
    found = []
    for name in filter(None, files.split("\0")):
        path = ROOT / name
        if name in skip or name.startswith("agents/runs/") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}: {m.group(0)}" for m in pattern.finditer(text)]
    assert not found, "former module paths named:\n" + "\n".join(found[:40])
