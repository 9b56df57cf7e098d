"""The package's former flat module paths, kept importable.

The modules are grouped by role (``sim``, ``envs``, ``learning``, ``experiments``). Objects
pickled under the old paths (environment snapshots, stable-baselines3 ``model.zip`` files whose
policy class is stored by module path) and code written against them still load: importing
``dallygym.queue_env`` gives the module ``dallygym.envs.queue`` itself, not a copy, with a
``DeprecationWarning`` naming the new path. The public names of ``dallygym`` itself never moved.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: Former module (below ``dallygym``) -> its module now. A former package's submodules follow it.
MOVED = {
    "cluster": "sim.cluster",
    "latency": "sim.latency",
    "models": "sim.models",
    "metrics": "sim.metrics",
    "bounds": "sim.bounds",
    "profiles": "sim.profiles",
    "simulate": "sim.simulate",
    "engine": "sim.engine",
    "kernels": "sim.kernels",
    "policies": "sim.policies",
    "trace": "sim.trace",
    "env_base": "envs.base",
    "env": "envs.offer",
    "queue_env": "envs.queue",
    "offer_obs": "envs.offer_obs",
    "queue_obs": "envs.queue_obs",
    "render": "envs.render",
    "heuristics": "envs.heuristics",
    "lookahead": "envs.lookahead",
    "learn": "learning.trainer",
    "nets": "learning.nets",
    "agent_files": "learning.agent_files",
    "cli": "experiments.cli",
    "compare": "experiments.compare",
    "sweep": "experiments.sweep",
    "report": "experiments.report",
    "plots": "experiments.plots",
}


def new_name(fullname: str) -> str | None:
    """The module a former path names now (``dallygym.engine.core`` -> ``dallygym.sim.engine.core``),
    or None if ``fullname`` is not a former path."""
    top, _, rest = fullname.partition(".")
    if top != "dallygym" or not rest:
        return None
    first, _, below = rest.partition(".")
    if first not in MOVED:
        return None
    return ".".join(filter(None, ("dallygym", MOVED[first], below)))


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an import of a former path with the module at its new path (first on ``sys.meta_path``,
    so that a former package's submodules are never loaded a second time under the old name)."""

    def find_spec(self, fullname, path=None, target=None):
        if new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module) -> None:
        new = new_name(module.__name__)
        warnings.warn(f"{module.__name__} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        # The import system reads sys.modules back after exec_module, so the name resolves to
        # the module itself (its attributes, __spec__ and identity untouched).
        sys.modules[module.__name__] = importlib.import_module(new)


def install(package) -> None:
    """Put the finder first on ``sys.meta_path`` (once).

    A former module named like one of ``package``'s public names (``dallygym.simulate``, the
    module, and ``dallygym.simulate``, the function) is entered in ``sys.modules`` now, without
    a warning: importing it through the finder would make the import system bind the module over
    the public name."""
    for old, new in MOVED.items():
        if hasattr(package, old):
            sys.modules.setdefault(f"{package.__name__}.{old}", importlib.import_module(f"{package.__name__}.{new}"))
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
