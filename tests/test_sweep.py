"""Sweeps: the same cells give byte-identical result files on every backend; a re-run resumes;
a failing cell is reported with its keys and does not stop the others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import dallygym
from dallygym.experiments.cli import main
from dallygym.experiments.sweep import (
    CELL_KEYS,
    RESULT_COLUMNS,
    BackendError,
    Cell,
    CellFailed,
    LocalBackend,
    grid,
    make_backend,
    read_results,
    run_cell,
    run_ordered,
    sweep,
)

ROOT = Path(__file__).resolve().parents[1]

# small (60 jobs, up to 16 GPUs) on 1 and 2 racks of one 8-GPU machine: every 1-rack cell fails
# (a job larger than the cluster), every 2-rack cell runs.
GRID = dict(
    policies=["dally", "random", "gandiva"],
    traces=["small"],
    racks=[1, 2],
    seeds=[0, 1],
    machines_per_rack=1,
    gpus_per_machine=8,
)
CLI_GRID = [
    "--policies",
    "dally",
    "random",
    "gandiva",
    "--traces",
    "small",
    "--racks",
    "1",
    "2",
    "--seeds",
    "0",
    "1",
    "--machines-per-rack",
    "1",
    "--no-progress",
]


def _files(out: Path) -> tuple[bytes, bytes]:
    return (out / "results.csv").read_bytes(), (out / "errors.csv").read_bytes()


def test_grid_is_every_combination_in_a_fixed_order_with_every_engine_option_in_the_keys():
    cells = grid(["dally", "fifo"], ["small"], [2, 4], seeds=[0, 1], lease_s=[3600, 7200], renewal=["upgrade", "keep"])
    assert len(cells) == 2 * 2 * 2 * 2 * 2
    assert cells[0] == Cell("dally", "small", 2, 8, 8, 0, 3600.0, 0.0, "upgrade", "dally-paper")
    assert cells[1].renewal == "keep" and cells[2].lease_s == 7200.0 and cells[-1].policy == "fifo"
    assert set(CELL_KEYS) >= {"policy", "trace", "racks", "seed", "lease_s", "restart_overhead_s", "renewal"}
    assert len(grid(["dally", "dally"], ["small"], [2, 2])) == 1  # repeated values are one cell


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(policies=["no-such"]), "unknown policy 'no-such'"),
        (dict(racks=[0]), "racks"),
        (dict(lease_s=[-1.0]), "lease_s"),
        (dict(traces=["no/such.csv"]), "no/such.csv"),
        (dict(seeds=[]), "no seeds"),
        (dict(lease_s=[3600.0, 1e-9]), "lease_s must be a number of seconds from 1"),
        (dict(restart_overhead_s=[float("nan")]), "restart_overhead_s"),
        (dict(racks=[2, 10**7]), "racks must be at most 4,096"),
        (dict(gpus_per_machine=10**9), "gpus_per_machine must be at most 1,024"),
        (dict(seeds=[2**63]), "seed"),
    ],
)
def test_bad_grid_values_are_refused_before_anything_runs(bad, message):
    args = dict(policies=["dally"], traces=["small"], racks=[2], seeds=[0])
    with pytest.raises((ValueError, OSError), match=message):
        grid(**{**args, **bad})


def test_a_cell_row_is_its_keys_and_the_simulate_summary_exactly():
    cell = Cell("gandiva", "small", 2, 2, 8, seed=3, lease_s=1800.0, renewal="rebid")
    row = run_cell(cell)
    summary = dallygym.simulate(
        "small",
        dallygym.ClusterSpec(2, 2, 8),
        policy="gandiva",
        config=dallygym.EngineConfig(lease_s=1800.0, seed=3, renewal="rebid"),
    ).summary
    assert tuple(row) == RESULT_COLUMNS
    assert {k: row[k] for k in dallygym.SUMMARY_KEYS} == summary


def test_one_process_and_two_processes_write_identical_files_and_failures_do_not_stop_the_others(tmp_path):
    cells = grid(**GRID)
    one = sweep(cells, tmp_path / "one", LocalBackend(1), progress=False)
    two = sweep(cells, tmp_path / "two", LocalBackend(2), progress=False)
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    assert (two.ran, two.failed) == (one.ran, one.failed)
    pd.testing.assert_frame_equal(two.results.reset_index(drop=True), one.results.reset_index(drop=True))
    pd.testing.assert_frame_equal(two.errors.reset_index(drop=True), one.errors.reset_index(drop=True))
    # Every 2-rack cell ran; every 1-rack cell failed, reported with its keys and error.
    assert one.ran == 12 and one.failed == 6 and len(one.results) == 6
    assert set(one.results["racks"]) == {2} and set(one.errors["racks"]) == {1}
    assert one.errors[["policy", "seed"]].drop_duplicates().shape[0] == 6
    assert one.errors["error"].str.contains("more than the cluster's 8").all()
    # The file holds the rows in grid order, read back exactly as computed.
    written = read_results(tmp_path / "one" / "results.csv")
    assert list(written.columns) == list(RESULT_COLUMNS)
    assert written.equals(one.results)
    direct = pd.DataFrame([run_cell(c) for c in cells if c.racks == 2])
    assert written.equals(direct)
    assert written["policy"].tolist() == ["dally", "dally", "random", "random", "gandiva", "gandiva"]
    # random and gandiva draw from the seed: different seeds, different runs.
    rnd = written[written["policy"] == "random"]
    assert rnd["jct_mean_s"].nunique() == 2


def test_a_rerun_skips_finished_cells_and_a_resumed_sweep_equals_a_fresh_one(tmp_path):
    calls = []

    def counting(cell):
        calls.append(cell)
        return run_cell(cell)

    first = sweep(grid(**{**GRID, "seeds": [0]}), tmp_path / "resumed", progress=False, run=counting)
    assert first.ran == 6 and len(calls) == 6
    calls.clear()
    full = grid(**GRID)
    second = sweep(full, tmp_path / "resumed", progress=False, run=counting)
    # The 3 finished seed-0 cells are skipped; the failed ones (not in results.csv) run again.
    assert second.skipped == 3 and second.ran == 9 and len(calls) == 9
    assert all(not (c.seed == 0 and c.racks == 2) for c in calls)
    fresh = sweep(full, tmp_path / "fresh", progress=False)
    assert _files(tmp_path / "resumed") == _files(tmp_path / "fresh")
    calls.clear()
    sweep(grid(**{**GRID, "racks": [2]}), tmp_path / "resumed", progress=False, run=counting)
    assert calls == [] and not (tmp_path / "resumed" / "errors.csv").exists()
    assert fresh.failed == 6


def test_a_torn_last_line_of_a_killed_run_is_dropped_and_that_cell_rerun(tmp_path):
    cells = grid(**{**GRID, "racks": [2]})
    out = tmp_path / "out"
    sweep(cells, out, progress=False)
    whole = (out / "results.csv").read_bytes()
    lines = whole.splitlines(keepends=True)
    (out / "results.csv").write_bytes(b"".join(lines[:-1]) + lines[-1][:25])  # killed mid-write
    again = sweep(cells, out, progress=False)
    assert again.ran == 1 and again.skipped == len(cells) - 1
    assert (out / "results.csv").read_bytes() == whole


def test_results_of_another_layout_are_refused(tmp_path):
    (tmp_path / "results.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="columns"):
        sweep(grid(["dally"], ["small"], [2]), tmp_path, progress=False)


def test_parquet_holds_the_same_table_when_pyarrow_is_installed(tmp_path):
    pytest.importorskip("pyarrow")
    sweep(grid(["dally", "fifo"], ["small"], [2], machines_per_rack=2), tmp_path, progress=False)
    csv = read_results(tmp_path / "results.csv")
    parquet = pd.read_parquet(tmp_path / "results.parquet")
    assert parquet.astype(object).equals(csv.astype(object))


def test_run_ordered_keeps_the_items_order_and_names_a_failing_item():
    cells = grid(["fifo", "dally"], ["small"], [2, 1], machines_per_rack=1)
    with pytest.raises(CellFailed, match="racks=1"):
        run_ordered(run_cell, cells, 2)
    ok = [c for c in cells if c.racks == 2]
    rows = run_ordered(run_cell, ok, 2)
    assert [(r["policy"], r["racks"]) for r in rows] == [(c.policy, c.racks) for c in ok]


def test_sweep_command_exits_1_when_a_cell_failed_naming_its_keys(tmp_path, capsys):
    assert main(["sweep", *CLI_GRID, "--workers", "2", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "cell failed: policy=dally trace=small racks=1 machines_per_rack=1 gpus_per_machine=8 seed=0" in captured.err
    assert "6 cells run" in captured.out or "12 cells run" in captured.out
    errors = pd.read_csv(tmp_path / "errors.csv")
    assert list(errors.columns) == [*CELL_KEYS, "error"] and len(errors) == 6
    # Only the cells that can run: exit 0, nothing to redo.
    assert main(["sweep", *CLI_GRID[:7], "2", *CLI_GRID[9:], "--out", str(tmp_path)]) == 0
    assert "0 cells run, 6 already done, 0 failed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policies", "nope", "--traces", "small", "--racks", "2"], "unknown policy 'nope'"),
        (["--traces", "small", "--racks", "2", "--address", "auto"], "--address applies to --backend ray only"),
        (["--traces", "small", "--racks", "2", "--workers", "0"], "workers must be a positive integer"),
        (["--traces", "missing.csv", "--racks", "2"], "missing.csv"),
    ],
)
def test_sweep_command_bad_input_exits_2_with_one_line(tmp_path, capsys, args, message):
    assert main(["sweep", *args, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("dallygym: error:") and err.count("\n") == 1
    assert not (tmp_path / "out" / "results.csv").exists()


def test_ray_backend_without_ray_installed_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(BackendError, match=r"pip install 'dallygym\[ray\]'"):
        make_backend("ray")
    assert main(["sweep", "--traces", "small", "--backend", "ray", "--out", "unused"]) == 2
    assert "needs Ray" in capsys.readouterr().err


def test_the_core_and_the_local_backend_do_not_import_ray(tmp_path):
    code = (
        "import sys\n"
        "from dallygym.experiments.cli import main\n"
        f"rc = main(['sweep', '--policies', 'fifo', '--traces', 'small', '--racks', '2', '--machines-per-rack', '2',"
        f" '--workers', '2', '--no-progress', '--out', {str(tmp_path)!r}])\n"
        "assert rc == 0, rc\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=300)


def test_ray_backend_gives_the_local_files_bit_for_bit_and_reports_failed_cells(tmp_path, capsys):
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'dallygym[ray]')")
    cells = grid(**GRID)
    local = sweep(cells, tmp_path / "local", LocalBackend(1), progress=False)
    assert not ray.is_initialized()
    backend = make_backend("ray", workers=2)  # a local Ray instance with 2 CPUs
    try:
        assert ray.is_initialized() and backend.cpus() == 2
        on_ray = sweep(cells, tmp_path / "ray", backend, progress=False)
        assert _files(tmp_path / "ray") == _files(tmp_path / "local")
        assert on_ray.failed == local.failed == 6
        # The command line on Ray (it joins the instance this process already runs).
        assert main(["sweep", *CLI_GRID, "--backend", "ray", "--out", str(tmp_path / "cli")]) == 1
        assert _files(tmp_path / "cli") == _files(tmp_path / "local")
        assert "cell failed: policy=gandiva trace=small racks=1" in capsys.readouterr().err
        # The ordered helper the benchmark scripts use.
        ok = [c for c in cells if c.racks == 2]
        assert run_ordered(run_cell, ok, backend) == run_ordered(run_cell, ok, 1)
    finally:
        backend.close()
    assert not ray.is_initialized()


def _dies_on_one_rack(cell):
    if cell.racks == 1:
        import os

        os._exit(3)  # the worker process dies, as if killed or out of memory
    return run_cell(cell)


def test_a_worker_process_that_dies_fails_its_cells_instead_of_the_sweep(tmp_path):
    cells = grid(**{**GRID, "seeds": [0]})
    result = sweep(cells, tmp_path, LocalBackend(2), progress=False, run=_dies_on_one_rack)
    assert result.failed >= 1 and result.failed + len(result.results) == len(cells)
    assert result.errors["error"].str.contains("BrokenProcessPool").all()
    assert set(result.errors["racks"]) >= {1}


def _torch_threads_and_a_product(_):
    import torch

    x = torch.ones(256, 256)
    return torch.get_num_threads(), float((x @ x).sum())


def test_worker_processes_of_a_parent_that_ran_torch_use_one_torch_thread():
    # A parent that ran a multi-threaded torch operation (loading and running a learned agent
    # does) used to leave forked workers hanging on their first one: report.py --workers 2 hung.
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x = torch.ones(256, 256)
        assert float((x @ x).sum()) == 256.0**3
        outcomes = run_ordered(_torch_threads_and_a_product, [0, 1, 2], 2)
    finally:
        torch.set_num_threads(threads)  # the other tests see this process as it was
    assert outcomes == [(1, 256.0**3)] * 3
