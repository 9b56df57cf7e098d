"""Compiled kernels for the engine's hot paths (numba, SPEC §4).

Each kernel does, in one compiled call, what a method of :class:`dallygym.sim.cluster.ClusterState`
or :class:`dallygym.sim.engine.Engine` does with many small numpy calls; :func:`run_events` runs
the engine's whole event loop, calling the others, until an event or a turn needs Python
(the engine's run in Python, :mod:`dallygym.sim.engine.turns`, is its reference). The Python methods stay
the readable reference: every kernel gives the same answer bit for bit, and the tests hold it
to that (``ClusterState.compiled = False`` runs the reference, in the engine too).

The kernels take the cluster's arrays as they are (``owner``, ``mark``, free and idle counts
per machine and per rack) and the cluster's shape as three ints, so a call costs well under a
microsecond of dispatch; state they change is changed in place, and the Python side keeps its
scalar counters (``free_total``, ``version``) in step.

Compiled code is cached on disk (``cache=True``): the first run on a machine compiles the
kernels it uses (20-40 CPU-seconds for a whole episode), later processes load them in well
under a second. numba compiles a kernel at its first call, never at import, so a run compiles
only what it uses. The cache goes beside this file (``__pycache__``) when that is writable;
in a read-only install, unless ``NUMBA_CACHE_DIR`` says otherwise, it goes to a user cache
directory (:func:`user_cache_dir`), set before any kernel is defined (numba picks a function's
cache directory as it is decorated). A compile that the cache cannot spare is announced once
per process on stderr (``DALLYGYM_QUIET=1`` silences it). numba cannot cache a recursive
function, so none is (see :func:`pairwise_sum`). numba checks a cached kernel against its own
module's source only, yet a kernel holds the code of the kernels of other modules it calls: the
whole cache is dropped whenever any kernel module's source or numba's version changes
(:func:`drop_stale_cache`, at import, before any kernel runs).
"""

from __future__ import annotations

import glob
import hashlib
import os
import sys
import tempfile
import types

import numba
from numba.core import event as _numba_event


def user_cache_dir(environ=os.environ) -> str:
    """The per-user directory for the compiled kernels when the package's own is read-only:
    ``$XDG_CACHE_HOME/dallygym/numba``, by default ``~/.cache/dallygym/numba`` (on Windows
    under ``%LOCALAPPDATA%``)."""
    base = environ.get("XDG_CACHE_HOME")
    if not base and sys.platform == "win32":
        base = environ.get("LOCALAPPDATA")
    if not base:
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dallygym", "numba")


def _writable_dir(path: str) -> bool:
    """Whether files can be made in ``path`` (created if missing): numba's own test of a cache
    directory, made here first so that a read-only install is found before numba silently
    gives up on caching beside the module."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def choose_cache_dir(module_dir: str, environ=os.environ) -> str | None:
    """The directory numba should cache the kernels in, or None to leave numba's choice:
    the user's ``NUMBA_CACHE_DIR`` if set, else ``module_dir/__pycache__`` if writable, else
    :func:`user_cache_dir`, else (no writable home either) a directory in the temporary one --
    with none at all numba would refuse to define the kernels, failing the import."""
    if environ.get("NUMBA_CACHE_DIR") or numba.config.CACHE_DIR:
        return None
    if _writable_dir(os.path.join(module_dir, "__pycache__")):
        return None
    user = user_cache_dir(environ)
    if _writable_dir(user):
        return user
    return os.path.join(tempfile.gettempdir(), f"dallygym-numba-{getattr(os, 'getuid', lambda: 'user')()}")


_fallback = choose_cache_dir(os.path.dirname(os.path.abspath(__file__)))


if _fallback is not None:
    # numba reads NUMBA_CACHE_DIR once, when it is imported (already done by now); its
    # config attribute is what the cache locators read as each function below is decorated.
    numba.config.CACHE_DIR = _fallback


del _fallback


class _CompileNotice(_numba_event.Listener):
    """Prints one line on stderr before the first compile of a kernel of this module in this
    process. numba reports a compile only when the cache could not supply the code, so a
    process whose kernels are all cached never prints. With no kernel of this module cached
    at all (a first run, an upgrade, a new cache directory) the line says the full cost."""

    printed = False

    def on_start(self, event) -> None:
        if self.printed:
            return
        dispatcher = event.data.get("dispatcher") if isinstance(event.data, dict) else None
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
        if not module.startswith(__name__ + "."):
            return
        type(self).printed = True
        if os.environ.get("DALLYGYM_QUIET", "").strip() not in ("", "0"):
            return
        where = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None) or "numba's cache"
        cold = not any(glob.glob(os.path.join(glob.escape(where), f"{name}.*.nbi")) for name in _MODULES)
        if cold:
            what = "compiling the simulator's kernels once (about 20-40 CPU-seconds)"
        else:
            what = "compiling simulator kernels not yet in the cache (a few seconds)"
        print(f"dallygym: {what}; cached in {where} ...", file=sys.stderr, flush=True)

    def on_end(self, event) -> None:
        pass


_numba_event.register("numba:compile", _CompileNotice())


#: The kernels' modules, in the order each imports the ones before it.
_MODULES = ("layout", "placement", "offers", "features", "passes", "events", "observe", "links")

# Every name of the modules is a name of the package (``kernels.run_events``, the layout's
# ``kernels.LI_POS``), so callers need not know which module holds a kernel; imported after the
# cache directory is set, as numba fixes a kernel's cache when it is defined.
from . import events, features, layout, links, observe, offers, passes, placement  # noqa: E402

for _module in (layout, placement, offers, features, passes, events, observe, links):
    for _name, _value in vars(_module).items():
        if _name.startswith("__") or isinstance(_value, types.ModuleType):
            continue
        if getattr(_value, "__module__", _module.__name__) == _module.__name__:
            globals()[_name] = _value
del _module, _name, _value


#: The file beside the cached kernels naming the sources they were compiled from.
STAMP_FILE = "dallygym-kernels.stamp"


def sources_digest(module_dir: str = os.path.dirname(os.path.abspath(__file__))) -> str:
    """A digest of every kernel module's source and of numba's version."""
    digest = hashlib.sha256(numba.__version__.encode())
    for name in _MODULES:
        with open(os.path.join(module_dir, f"{name}.py"), "rb") as source:
            digest.update(source.read())
    return digest.hexdigest()


def drop_stale_cache(where: str, digest: str) -> bool:
    """Remove the cached kernels in ``where`` unless they were compiled from the sources of
    ``digest``; returns whether it removed them. numba checks a cached kernel against its own
    file alone, and a kernel keeps the code of the kernels of other modules it calls (the event
    loop calls the pass's, the placement's, ...): after one module changes, a kernel of another
    would run its old code. So the cached files of every module go whenever any source differs
    from the one they were made from (a stamp file records it)."""
    stamp = os.path.join(where, STAMP_FILE)
    try:
        with open(stamp, encoding="ascii") as file:
            if file.read() == digest:
                return False
    except OSError:
        pass
    for name in _MODULES:
        for path in glob.glob(os.path.join(glob.escape(where), f"{name}.*.nb[ic]")):
            try:
                os.remove(path)
            except OSError:  # (another process removed it first)
                pass
    try:
        os.makedirs(where, exist_ok=True)
        with open(stamp, "w", encoding="ascii") as file:
            file.write(digest)
    except OSError:  # a cache that cannot be written is never read stale either
        pass
    return True


# Before any kernel is called (numba reads its cache at the first call).
_where = getattr(getattr(events.run_events, "_cache", None), "_cache_path", None)
if _where:
    drop_stale_cache(_where, sources_digest())
del _where
