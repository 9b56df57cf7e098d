"""The figures of dallygym.plots, and the files `simulate --out` / `compare --out` write."""

from __future__ import annotations

import builtins

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")
import matplotlib  # noqa: E402

matplotlib.use("Agg")

from dallygym import plots  # noqa: E402
from dallygym.cli import PLOTS_NOTE, main  # noqa: E402
from dallygym.cluster import ClusterSpec  # noqa: E402
from dallygym.metrics import PLOT_FILES, RunResult  # noqa: E402
from dallygym.simulate import simulate  # noqa: E402

HOUR = 3600.0
TINY = ClusterSpec(racks=1, machines_per_rack=2, gpus_per_machine=4)


def _tiny_trace() -> pd.DataFrame:
    """Three jobs on 1 rack x 2 machines x 4 GPUs: two one-machine jobs at once (4 and 2
    GPUs), then an 8-GPU job that needs both machines (rack tier) and so waits for both."""
    return pd.DataFrame({"job_id": [0, 1, 2], "arrival_s": [0.0, 0.0, 10.0], "num_gpus": [4, 2, 8],
                         "model": ["resnet50", "resnet50", "bert_large"],
                         "total_iterations": [1000, 2000, 500], "iter_time_s": [1.0, 1.0, 1.0]})


@pytest.fixture(scope="module")
def tiny() -> RunResult:
    return simulate(_tiny_trace(), TINY, policy="fifo")


@pytest.fixture(scope="module")
def small() -> RunResult:
    return simulate("small", ClusterSpec(racks=1), policy="dally")


def _bars(fig) -> set[tuple[int, int, float, float]]:
    """(tier, GPU, start h, end h) of every bar of an occupancy figure."""
    ax = fig.axes[0]
    bars = set()
    for coll in ax.collections:
        tier = plots.TIER_NAMES.index(coll.get_label().split()[0])
        for path in coll.get_paths():
            v = path.vertices
            bars.add((tier, int(round(v[:, 1].mean())), round(float(v[:, 0].min()), 9),
                      round(float(v[:, 0].max()), 9)))
    return bars


def test_placements_of_a_known_run(tiny):
    jobs = tiny.jobs.set_index("job_id")
    p = tiny.placements.sort_values(["job_id", "gpu"])
    assert p[p.job_id == 0].gpu.tolist() == [0, 1, 2, 3] and set(p[p.job_id == 0].tier) == {0}
    assert p[p.job_id == 1].gpu.tolist() == [4, 5] and set(p[p.job_id == 1].tier) == {0}
    assert p[p.job_id == 2].gpu.tolist() == list(range(8)) and set(p[p.job_id == 2].tier) == {1}
    assert (p.segments == 1).all()
    # Job 2 starts when the later of jobs 0 and 1 ends, and each row spans its job's run.
    assert jobs.loc[2, "first_start_s"] == jobs.loc[[0, 1], "end_s"].max()
    for j, rows in p.groupby("job_id"):
        assert (rows.start_s == jobs.loc[j, "first_start_s"]).all() and (rows.end_s == jobs.loc[j, "end_s"]).all()


def test_occupancy_bars_equal_the_placements(tiny):
    fig = plots.occupancy(tiny, TINY)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time since first arrival (hours)"
    assert ax.get_ylabel().startswith("GPU")
    assert ax.get_legend() is not None
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:3] == ["machine tier", "rack tier", "network tier"]
    jobs = tiny.jobs.set_index("job_id")
    expected = set()
    for j, gpus, tier in ((0, range(4), 0), (1, range(4, 6), 0), (2, range(8), 1)):
        for g in gpus:
            expected.add((tier, g, round(jobs.loc[j, "first_start_s"] / HOUR, 9), round(jobs.loc[j, "end_s"] / HOUR, 9)))
    assert _bars(fig) == expected
    assert not ax.images  # one bar per GPU, not the heat map
    assert [t.get_text() for t in ax.get_yticklabels()] == ["r0 m0", "r0 m1"]


def test_occupancy_marks_placements_after_the_first(tiny):
    # The same run with job 1 preempted at 1000 s and restarted on GPUs 6-7 at 1500 s.
    p = tiny.placements.copy()
    moved = pd.DataFrame({"job_id": [1, 1], "gpu": [6, 7], "tier": [0, 0], "start_s": [1500.0, 1500.0],
                          "end_s": [2220.0, 2220.0], "segments": [2, 2]})
    p.loc[p.job_id == 1, "end_s"] = 1000.0
    p.loc[p.job_id == 1, "segments"] = 2
    run = RunResult(tiny.jobs, tiny.timeline, tiny.summary, placements=pd.concat([p, moved], ignore_index=True))
    fig = plots.occupancy(run, TINY)
    ax = fig.axes[0]
    (marks,) = [line for line in ax.get_lines() if line.get_label().startswith("re-placed")]
    assert sorted(zip(marks.get_xdata().tolist(), marks.get_ydata().tolist())) == [(1500 / HOUR, 6), (1500 / HOUR, 7)]
    assert (0, 6, round(1500 / HOUR, 9), round(2220 / HOUR, 9)) in _bars(fig)
    assert "re-placed (preempted / moved)" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_occupancy_aggregates_above_the_threshold(small):
    fig = plots.occupancy(small, ClusterSpec(racks=1), max_bars=10, bins=50)
    ax = fig.axes[0]
    assert len(ax.images) == 1 and not ax.collections
    share = ax.images[0].get_array()
    assert share.shape == (8, 50) and 0.0 <= share.min() and share.max() <= 1.0
    assert ax.get_xlabel() == "time since first arrival (hours)" and ax.get_ylabel().startswith("machine")
    assert ax.get_legend() is not None
    assert fig.axes[1].get_ylabel().startswith("busy GPUs")  # the colour bar
    # More GPUs than max_gpus aggregates too.
    assert plots.occupancy(small, ClusterSpec(racks=1), max_gpus=32).axes[0].images


def test_busy_per_machine_integrates_the_placements_exactly(tiny):
    p = tiny.placements
    t0, t1 = 0.0, float(p.end_s.max())
    for bins in (1, 7, 100):
        share = plots.busy_per_machine(p, t0, t1, 2, 4, bins)
        width = (t1 - t0) / bins
        per_machine = share.sum(axis=1) * width * 4
        held = (p.end_s - p.start_s).groupby(p.gpu // 4).sum().to_numpy()
        np.testing.assert_allclose(per_machine, held, rtol=1e-9)


def test_utilisation_queue(small):
    fig = plots.utilisation_queue(small)
    top, bottom = fig.axes
    assert top.get_ylabel() == "GPU utilisation (%)" and bottom.get_ylabel() == "jobs"
    assert bottom.get_xlabel() == "time since first arrival (hours)"
    assert top.get_legend() is not None and bottom.get_legend() is not None
    y = top.get_lines()[0].get_ydata()
    np.testing.assert_allclose(y, 100 * small.timeline["utilization"].to_numpy())


def test_jct_cdf_marks_mean_median_p95(small):
    fig = plots.jct_cdf(small)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "job completion time (hours)" and ax.get_ylabel() == "fraction of jobs"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [label.split()[0] for label in labels] == ["JCT", "mean", "median", "p95"]
    jct = small.jobs["jct_s"] / HOUR
    marks = {line.get_label().split()[0]: line.get_xdata()[0] for line in ax.get_lines()[1:]}
    assert marks["mean"] == pytest.approx(jct.mean())
    assert marks["median"] == pytest.approx(jct.median())
    assert marks["p95"] == pytest.approx(np.percentile(jct, 95))
    cdf = ax.get_lines()[0]
    assert len(cdf.get_xdata()) == len(jct) and cdf.get_ydata()[-1] == 1.0


def test_tiers_comm(small):
    fig = plots.tiers_comm(small)
    left, right = fig.axes
    assert left.get_xlabel() == "model" and left.get_ylabel() == "share of GPU time at tier (%)"
    assert right.get_xlabel() == "model" and right.get_ylabel() == "exposed communication (% of run time)"
    assert left.get_legend() is not None and right.get_legend() is not None
    models = sorted(small.jobs["model"].unique())
    assert [t.get_text() for t in left.get_xticklabels()] == models
    # Each model's stacked tier shares add up to 100 %.
    heights = np.zeros(len(models))
    for patch in left.patches:
        heights[int(round(patch.get_x() + patch.get_width() / 2))] += patch.get_height()
    np.testing.assert_allclose(heights, 100.0)


def test_compare_figures(small, tiny):
    fifo = simulate("small", ClusterSpec(racks=1), policy="fifo")
    fig = plots.compare_figures({"dally": small, "fifo": fifo})
    cdf, makespan, jct, comm, util = fig.axes
    assert cdf.get_xlabel() == "job completion time (hours)" and len(cdf.get_lines()) == 2
    assert [t.get_text() for t in cdf.get_legend().get_texts()] == ["dally", "fifo"]
    assert makespan.get_ylabel() == "makespan (hours)" and jct.get_ylabel() == "mean JCT (hours)"
    assert comm.get_ylabel() == "mean comm. latency (s)"
    assert [p.get_height() for p in makespan.patches] == pytest.approx(
        [small.summary["makespan_s"] / HOUR, fifo.summary["makespan_s"] / HOUR])
    assert util.get_ylabel() == "GPU utilisation (%)" and util.get_xlabel() == "time since first arrival (hours)"
    assert all(ax.get_legend() is not None for ax in fig.axes)


def test_figures_of_a_run_directory(tmp_path, small):
    small.to_csv(tmp_path / "run")
    loaded = plots.load_run(tmp_path / "run")
    assert set(plots.run_figures(loaded)) == {"utilisation_queue", "jct_cdf", "tiers_comm"}  # no placements
    with pytest.raises(ValueError, match="placements"):
        plots.occupancy(loaded)
    small.placements.to_csv(tmp_path / "run" / "placements.csv", index=False)
    assert plots.occupancy(tmp_path / "run", ClusterSpec(racks=1)).axes[0].collections


def test_plot_file_names_match():
    assert PLOT_FILES == {f"{stem}.{ext}" for stem in plots.RUN_FIGURES for ext in ("png", "svg")}


SMALL = ["--trace", "small", "--racks", "1", "--no-progress", "--format", "csv"]


def test_simulate_out_writes_the_figures(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["simulate", *SMALL, "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert names == {"jobs.csv", "timeline.csv", "summary.csv"} | PLOT_FILES
    for name in PLOT_FILES:
        assert (out / name).stat().st_size > 1000
    assert (out / "occupancy.svg").read_text().lstrip().startswith("<?xml")
    assert (out / "occupancy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert PLOTS_NOTE not in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # written in the staging directory, swapped in


def _without_matplotlib(monkeypatch):
    real = builtins.__import__

    def fail(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fail)


def test_simulate_out_without_matplotlib_notes_it_and_writes_the_csvs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert main(["simulate", *SMALL, "--out", str(out)]) == 0  # first with the figures
    capsys.readouterr()
    _without_matplotlib(monkeypatch)
    assert main(["simulate", *SMALL, "--out", str(out)]) == 0  # replaces a directory holding figures
    err = capsys.readouterr().err
    assert err.splitlines() == [PLOTS_NOTE]
    assert {p.name for p in out.iterdir()} == {"jobs.csv", "timeline.csv", "summary.csv"}


def test_compare_out_writes_the_table_and_figure(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--trace", "small", "--racks", "1", "--policies", "fifo", "dally", "--quiet",
            "--format", "csv"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert main([*args, "--out", str(out)]) == 0
    assert capsys.readouterr().out == printed  # the same table as without --out
    assert {p.name for p in out.iterdir()} == {"comparison.csv", "comparison.png", "comparison.svg"}
    assert (out / "comparison.csv").read_text() == printed


def test_compare_out_without_matplotlib(tmp_path, capsys, monkeypatch):
    _without_matplotlib(monkeypatch)
    out = tmp_path / "cmp"
    assert main(["compare", "--trace", "small", "--racks", "1", "--policies", "fifo", "--quiet",
                 "--format", "csv", "--out", str(out)]) == 0
    assert capsys.readouterr().err.splitlines() == [PLOTS_NOTE]
    assert {p.name for p in out.iterdir()} == {"comparison.csv"}
