"""Runs under faults: a killed sweep's workers go with it, a killed ``--out`` write leaves the
old output or the new one (and its leftovers are cleaned up by the next run), and a failed
write of a result file names the file."""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from dallygym.experiments.cli import main
from dallygym.sim import metrics
from dallygym.sim.metrics import OutputError, RunResult, remove_stale_staging

SMALL = ["--trace", "small", "--racks", "2", "--machines-per-rack", "2"]
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, uses Linux calls")


def _cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _checksums(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def two_runs():
    """Two results whose files differ (made up: the write does not care where they came from)."""
    return _made_up(1), _made_up(2)


def _made_up(k: int) -> RunResult:
    jobs = pd.DataFrame({"job_id": [0, 1], "jct_s": [10.0 * k, 20.0 * k]})
    timeline = pd.DataFrame({"time_s": [0.0, 5.0 * k], "gpus_used": [k, 0]})
    return RunResult(jobs=jobs, timeline=timeline, summary={"makespan_s": 5.0 * k, "jobs": 2})


def _written(result, tmp_path: Path, name: str) -> dict[str, str]:
    """The checksums of ``result``'s files as written on their own."""
    result.to_csv(tmp_path / name)
    return _checksums(tmp_path / name)


def _wait_until(condition, bound_s: float) -> bool:
    """Poll ``condition`` until true or ``bound_s`` seconds have passed (a generous bound for
    something that should happen almost at once, not a timing claim)."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# --- sweep workers die with their parent ------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone: it holds no memory)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


@linux_only
def test_the_workers_of_a_killed_sweep_die_with_it(tmp_path):
    # Cells that never finish: without their parent the workers would wait for good.
    (tmp_path / "endless_cells.py").write_text(
        textwrap.dedent("""
        import time

        def forever(cell):
            while True:
                time.sleep(60)
    """)
    )
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import endless_cells
        from dallygym.experiments.sweep import Cell, LocalBackend, sweep
        cells = [Cell("fifo", "small", 2, seed=s) for s in range(4)]
        sweep(cells, {str(tmp_path / "out")!r}, LocalBackend(2), progress=False, run=endless_cells.forever)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    workers: list[int] = []
    try:
        assert _wait_until(lambda: len(_children(proc.pid)) >= 2, 120), "the sweep did not start its workers"
        workers = _children(proc.pid)
        assert proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert _wait_until(lambda: not any(_alive(w) for w in workers), 30), [w for w in workers if _alive(w)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in workers:  # never leave a test's processes behind, whatever happened
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def test_a_worker_ends_itself_when_the_sweep_process_is_gone():
    # Run in a process of its own: the call arranges for its caller's death.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    script = textwrap.dedent(f"""
        from dallygym.experiments.sweep import _die_with_parent
        _die_with_parent({int(dead.stdout)})
        print("survived")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "survived" not in proc.stdout, (proc.returncode, proc.stdout, proc.stderr)


# --- simulate --out: the swap of the output directory -------------------------------------


def test_the_output_directory_is_old_or_new_at_every_step(tmp_path, two_runs, monkeypatch):
    old_run, new_run = two_runs
    old, new = _written(old_run, tmp_path, "a"), _written(new_run, tmp_path, "b")
    out = tmp_path / "run"
    seen = []

    def check(step: str) -> None:
        state = _checksums(out) if out.exists() else None
        assert state in (old, new), f"at {step}: {state}"
        seen.append((step, "old" if state == old else "new"))

    def spy(name, real):
        def call(*args, **kwargs):
            check(f"before {name}")
            value = real(*args, **kwargs)
            check(f"after {name}")
            return value

        return call

    old_run.to_csv(out)
    monkeypatch.setattr(metrics, "_exchange", spy("exchange", metrics._exchange))
    monkeypatch.setattr(metrics.os, "replace", spy("replace", os.replace))
    monkeypatch.setattr(metrics.shutil, "rmtree", spy("rmtree", metrics.shutil.rmtree))
    monkeypatch.setattr(pd.DataFrame, "to_csv", spy("to_csv", pd.DataFrame.to_csv))
    new_run.to_csv(out)
    assert _checksums(out) == new
    assert ("after exchange", "new") in seen  # one step swapped them
    assert not [s for s in seen if s[0] == "before replace"]  # no two-rename fallback here
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "run"]


@pytest.mark.parametrize("step", ["to_csv", "exchange", "after exchange", "rmtree"])
def test_a_write_interrupted_at_any_step_leaves_a_whole_output(tmp_path, two_runs, monkeypatch, step):
    old_run, new_run = two_runs
    old, new = _written(old_run, tmp_path, "a"), _written(new_run, tmp_path, "b")
    out = tmp_path / "run"
    old_run.to_csv(out)

    class Killed(BaseException):
        pass

    def interrupt(*args, **kwargs):
        raise Killed

    real_exchange = metrics._exchange
    if step == "to_csv":
        monkeypatch.setattr(pd.DataFrame, "to_csv", interrupt)
    elif step == "exchange":
        monkeypatch.setattr(metrics, "_exchange", interrupt)
    elif step == "after exchange":

        def exchange_then_interrupt(a, b):
            assert real_exchange(a, b)
            raise Killed

        monkeypatch.setattr(metrics, "_exchange", exchange_then_interrupt)
    else:
        monkeypatch.setattr(metrics.shutil, "rmtree", interrupt)
    with pytest.raises(Killed):
        new_run.to_csv(out)
    assert _checksums(out) in (old, new)
    monkeypatch.undo()
    # The next write goes through whatever the interrupted one left behind.
    new_run.to_csv(out)
    assert _checksums(out) == new


@linux_only
def test_a_run_killed_after_the_swap_leaves_the_new_output_and_the_next_run_cleans_up(tmp_path, two_runs):
    old_run, new_run = two_runs
    old, new = _written(old_run, tmp_path / "ref", "a"), _written(new_run, tmp_path / "ref", "b")
    out = tmp_path / "work" / "run"
    old_run.to_csv(out)
    # A real kill (no clean-up at all) right after the exchange, before the old output is deleted.
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from dallygym.sim import metrics
        from test_faults import _made_up
        real = metrics._exchange
        def exchange_then_die(a, b):
            real(a, b)
            os.kill(os.getpid(), signal.SIGKILL)
        metrics._exchange = exchange_then_die
        _made_up(2).to_csv({str(out)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, stderr
    assert _checksums(out) == new
    left = [p for p in out.parent.iterdir() if p.name != "run"]
    # The previous output, under the staging name that carries the dead run's pid.
    assert len(left) == 1 and left[0].name.startswith(".run.new-") and f"-{proc.pid}-" in left[0].name
    assert _checksums(left[0]) == old
    assert remove_stale_staging(out.parent) == left
    old_run.to_csv(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["run"] and _checksums(out) == old


def test_stale_staging_of_dead_runs_is_removed_by_the_next_write_beside_it(tmp_path, two_runs):
    old_run, _ = two_runs
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    host = metrics._host()
    stale = [tmp_path / f".run.new-{host}-{dead_pid}-abc_12x", tmp_path / f".other.new-{host}-{dead_pid}-zz9"]
    kept = [
        tmp_path / f".run.new-{host}-1-abc_12x",  # pid 1 is alive
        tmp_path / f".run.new-{host}-{os.getpid()}-q1",  # this very process
        tmp_path / f".run.new-elsewhere-{dead_pid}-q2",  # another machine's run
        tmp_path / ".run.old-q3",  # the previous output aside: never removed unasked
        tmp_path / "notes",
    ]
    for path in stale + kept:
        path.mkdir()
        (path / "jobs.csv").write_text("x\n")
    old_run.to_csv(tmp_path / "run")
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {"run", *(p.name for p in kept)}


def test_without_the_exchange_two_renames_still_keep_the_old_output_on_failure(tmp_path, two_runs, monkeypatch):
    old_run, new_run = two_runs
    old, new = _written(old_run, tmp_path, "a"), _written(new_run, tmp_path, "b")
    out = tmp_path / "run"
    old_run.to_csv(out)
    monkeypatch.setattr(metrics, "_exchange", lambda a, b: False)  # a system without renameat2
    real_replace = os.replace
    calls = []

    def second_rename_fails(src, dst):
        calls.append(Path(dst).name)
        if len(calls) == 2:
            raise OSError(errno.EXDEV, "simulated failure")
        return real_replace(src, dst)

    monkeypatch.setattr(metrics.os, "replace", second_rename_fails)
    with pytest.raises(OutputError, match="cannot write .*run"):
        new_run.to_csv(out)
    assert _checksums(out) == old
    monkeypatch.setattr(metrics.os, "replace", real_replace)
    new_run.to_csv(out)
    assert _checksums(out) == new
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "run"]


@linux_only
def test_the_exchange_swaps_two_directories(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "from_a").write_text("a")
    (b / "from_b").write_text("b")
    if not metrics._exchange(a, b):
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available on this system or file system")
    assert [p.name for p in a.iterdir()] == ["from_b"] and [p.name for p in b.iterdir()] == ["from_a"]


# --- a full disk names the file ---------------------------------------------------------------


def _one_error_line(err: str, path: Path) -> None:
    assert err == f"dallygym: error: cannot write {path}: {os.strerror(errno.ENOSPC)}\n", err


@pytest.mark.parametrize("name", ["jobs.csv", "timeline.csv", "summary.csv"])
def test_a_full_disk_during_simulate_out_names_the_file(capsys, tmp_path, monkeypatch, name):
    real = pd.DataFrame.to_csv

    def full(self, path=None, *args, **kwargs):
        if path is not None and Path(path).name == name:
            raise ENOSPC
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    out = tmp_path / "run"
    code, _, err = _cli(capsys, "simulate", *SMALL, "--policy", "fifo", "--out", str(out))
    assert code == 2
    _one_error_line(err, out / name)
    assert list(tmp_path.iterdir()) == []  # no staging directory left behind


def test_a_full_disk_when_a_sweep_starts_names_results_csv(capsys, tmp_path, monkeypatch):
    def full(self, *args, **kwargs):
        raise ENOSPC

    monkeypatch.setattr(Path, "write_text", full)
    out = tmp_path / "sweep"
    code, _, err = _cli(
        capsys,
        "sweep",
        "--policies",
        "fifo",
        "--traces",
        "small",
        "--racks",
        "2",
        "--machines-per-rack",
        "1",
        "--workers",
        "1",
        "--no-progress",
        "--out",
        str(out),
    )
    assert code == 2
    _one_error_line(err, out / "results.csv")
    assert sorted(p.name for p in out.iterdir()) == []  # no temporary file left


def test_a_full_disk_while_a_sweep_appends_a_row_names_results_csv(capsys, tmp_path, monkeypatch):
    real = os.write

    def full(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("results.csv"):
            raise ENOSPC
        return real(fd, data)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to tell the file written")
    monkeypatch.setattr(os, "write", full)
    out = tmp_path / "sweep"
    code, _, err = _cli(
        capsys,
        "sweep",
        "--policies",
        "fifo",
        "--traces",
        "small",
        "--racks",
        "2",
        "--machines-per-rack",
        "1",
        "--workers",
        "1",
        "--no-progress",
        "--out",
        str(out),
    )
    assert code == 2
    _one_error_line(err, out / "results.csv")


def test_a_full_disk_writing_errors_csv_names_it(capsys, tmp_path, monkeypatch):
    real = pd.DataFrame.to_csv

    def full(self, path=None, *args, **kwargs):
        if path is not None and Path(path).name.startswith("errors.csv"):
            raise ENOSPC
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    out = tmp_path / "sweep"
    # One rack of one 8-GPU machine: the trace's 16-GPU jobs make the cell fail, so errors.csv is written.
    code, _, err = _cli(
        capsys,
        "sweep",
        "--policies",
        "fifo",
        "--traces",
        "small",
        "--racks",
        "1",
        "--machines-per-rack",
        "1",
        "--workers",
        "1",
        "--no-progress",
        "--out",
        str(out),
    )
    assert code == 2
    assert err.splitlines()[-1] == f"dallygym: error: cannot write {out / 'errors.csv'}: {os.strerror(errno.ENOSPC)}"
    assert "errors.csv.tmp" not in {p.name for p in out.iterdir()}
