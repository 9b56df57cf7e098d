"""docs/policy-api.md lists exactly the public names of what a policy sees.

Each ``<!-- api:SECTION -->`` table's first column names attributes or methods; the test
compares them with the public names of the live objects, both ways, so the page cannot drift
from the code: a renamed or removed attribute, or a new public one left undocumented, fails
here with the name.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dallygym
from dallygym import ClusterSpec, EngineConfig, Policy, build_engine
from dallygym.sim.cluster import ClusterState
from dallygym.sim.engine import Engine, JobGpus, Offer, Pick

DOC = Path(__file__).resolve().parent.parent / "docs" / "policy-api.md"
README = Path(__file__).resolve().parent.parent / "README.md"


def documented(section: str) -> dict[str, list[str]]:
    """Rows of the table between ``<!-- api:section -->`` and ``<!-- /api -->``: the names of
    the first column (a cell may list several, comma-separated; ``f(x)`` is ``f``) mapped to
    the row's remaining cells."""
    text = DOC.read_text()
    match = re.search(rf"<!-- api:{re.escape(section)} -->\n(.*?)<!-- /api -->", text, re.S)
    assert match, f"docs/policy-api.md has no api:{section} table"
    rows = {}
    for line in match.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set(cells[0]) <= {"-"} or cells[0] == "name":
            continue
        for name in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)", cells[0]):
            assert name not in rows, f"api:{section} lists {name} twice"
            rows[name] = cells[1:]
    return rows


def public(obj) -> set[str]:
    """Public names of an object: its instance attributes and those of its class."""
    names = {n for n in dir(obj) if not n.startswith("_")}
    return names


def check(section: str, actual: set[str], also: set[str] = frozenset()) -> None:
    listed = set(documented(section)) | set(also)
    missing = sorted(actual - listed)
    stale = sorted(listed - actual)
    assert not missing, f"public names not documented in docs/policy-api.md (api:{section}): {missing}"
    assert not stale, f"docs/policy-api.md (api:{section}) documents names that no longer exist: {stale}"


@pytest.fixture(scope="module")
def engine() -> Engine:
    """An engine stopped at its first offer, on a hand-built three-job trace."""
    trace = pd.DataFrame(
        {
            "job_id": [0, 1, 2],
            "arrival_s": [0.0, 0.0, 10.0],
            "num_gpus": [4, 8, 2],
            "model": ["resnet18", "vgg11", "bert_large"],
            "total_iterations": [100, 200, 50],
            "iter_time_s": [1.0, 0.5, 2.0],
        }
    )
    e = build_engine(trace, ClusterSpec(1, 2, 4), "dally")
    next(e.decisions())
    return e


def test_every_policy_hook_is_documented_and_exists():
    check("Policy", public(Policy))


def test_every_offer_attribute_is_documented_and_exists():
    check("Offer", {n for n in dir(Offer) if not n.startswith("_")})


def test_every_pick_attribute_is_documented_and_exists():
    check("Pick", {n for n in dir(Pick) if not n.startswith("_")})


def test_every_engine_attribute_is_documented_and_exists(engine):
    listed = set(documented("Engine-jobs")) | set(documented("Engine-methods")) | set(documented("Engine-state"))
    actual = public(engine)
    missing = sorted(actual - listed)
    stale = sorted(listed - actual)
    assert not missing, f"public Engine names not documented in docs/policy-api.md: {missing}"
    assert not stale, f"docs/policy-api.md documents Engine names that no longer exist: {stale}"


def test_engine_methods_are_callable_and_attributes_are_not(engine):
    for name in documented("Engine-methods"):
        assert callable(getattr(engine, name)), name
    for name in list(documented("Engine-jobs")) + list(documented("Engine-state")):
        assert not callable(getattr(engine, name)) or name in ("policy", "latency"), name


@pytest.mark.parametrize("name", sorted(documented("Engine-jobs")))
def test_per_job_array_has_the_documented_type_and_shape(engine, name):
    kind = documented("Engine-jobs")[name][0].strip("`")
    value = getattr(engine, name)
    match = re.fullmatch(r"(\w+)\[n(?:,(\d+))?\]", kind)
    assert match, f"{name}: type {kind!r} is not of the form dtype[n] or dtype[n,k]"
    dtype, width = match.group(1), match.group(2)
    if dtype == "list":
        assert isinstance(value, list) and len(value) == engine.n, name
        return
    if dtype == "JobGpus":  # a read-only sequence over the engine's GPU store
        assert isinstance(value, JobGpus) and len(value) == engine.n, name
        assert all(g is None or (isinstance(g, np.ndarray) and g.dtype == np.int64) for g in value), name
        return
    assert isinstance(value, np.ndarray), f"{name} is a {type(value).__name__}, documented as an array"
    assert value.dtype == np.dtype(dtype), f"{name} is {value.dtype}, documented as {dtype}"
    assert value.shape == ((engine.n,) if width is None else (engine.n, int(width))), name


def test_engine_state_scalars_have_the_documented_python_type(engine):
    simple = {"`float`": float, "`int`": int, "`bool`": bool, "`str`": str}
    for name, cells in documented("Engine-state").items():
        if cells[0] in simple:
            assert isinstance(getattr(engine, name), simple[cells[0]]), name


def test_cluster_state_names_are_documented_and_exist(engine):
    assert isinstance(engine.cluster, ClusterState)
    check("ClusterState", public(engine.cluster))


def test_cluster_spec_names_are_documented_and_exist(engine):
    check("ClusterSpec", public(engine.spec))


def test_engine_config_fields_are_documented_and_exist(engine):
    assert isinstance(engine.config, EngineConfig)
    check("EngineConfig", public(engine.config))


def test_the_worked_example_runs():
    code = re.search(r"## A worked example.*?```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 -- our own documentation
    policy = namespace["ShortestRemainingFirst"]()
    result = dallygym.simulate("small", ClusterSpec(2, 2, 8), policy=policy)
    assert result.summary["jobs"] == 60


def test_the_readme_links_the_policy_api():
    assert "docs/policy-api.md" in README.read_text()
