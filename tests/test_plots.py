"""The figures of dallygym.experiments.plots, and the files `simulate --out` / `compare --out` write."""

from __future__ import annotations

import builtins

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")
import matplotlib  # noqa: E402

matplotlib.use("Agg")

from dallygym.experiments import plots  # noqa: E402
from dallygym.experiments.cli import PLOTS_NOTE, main  # noqa: E402
from dallygym.sim.cluster import ClusterSpec  # noqa: E402
from dallygym.sim.metrics import PLOT_FILES, RunResult  # noqa: E402
from dallygym.sim.simulate import simulate  # noqa: E402

HOUR = 3600.0
TINY = ClusterSpec(racks=1, machines_per_rack=2, gpus_per_machine=4)


def _tiny_trace() -> pd.DataFrame:
    """Three jobs on 1 rack x 2 machines x 4 GPUs: two one-machine jobs at once (4 and 2
    GPUs), then an 8-GPU job that needs both machines (rack tier) and so waits for both."""
    return pd.DataFrame(
        {
            "job_id": [0, 1, 2],
            "arrival_s": [0.0, 0.0, 10.0],
            "num_gpus": [4, 2, 8],
            "model": ["resnet50", "resnet50", "bert_large"],
            "total_iterations": [1000, 2000, 500],
            "iter_time_s": [1.0, 1.0, 1.0],
        }
    )


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
            bars.add((tier, int(round(v[:, 1].mean())), round(float(v[:, 0].min()), 9), round(float(v[:, 0].max()), 9)))
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
            start, end = jobs.loc[j, "first_start_s"], jobs.loc[j, "end_s"]
            expected.add((tier, g, round(start / HOUR, 9), round(end / HOUR, 9)))
    assert _bars(fig) == expected
    assert not ax.images  # one bar per GPU, not the heat map
    assert [t.get_text() for t in ax.get_yticklabels()] == ["r0 m0", "r0 m1"]


def test_occupancy_marks_placements_after_the_first(tiny):
    # The same run with job 1 preempted at 1000 s and restarted on GPUs 6-7 at 1500 s.
    p = tiny.placements.copy()
    moved = pd.DataFrame(
        {
            "job_id": [1, 1],
            "gpu": [6, 7],
            "tier": [0, 0],
            "start_s": [1500.0, 1500.0],
            "end_s": [2220.0, 2220.0],
            "segments": [2, 2],
        }
    )
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
        [small.summary["makespan_s"] / HOUR, fifo.summary["makespan_s"] / HOUR]
    )
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
    assert names == {"jobs.csv", "timeline.csv", "summary.csv"} | PLOT_FILES | {"settings.json"}
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
    assert {p.name for p in out.iterdir()} == {"jobs.csv", "timeline.csv", "summary.csv", "settings.json"}


def test_compare_out_writes_the_table_and_figure(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--trace", "small", "--racks", "1", "--policies", "fifo", "dally", "--quiet", "--format", "csv"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert main([*args, "--out", str(out)]) == 0
    assert capsys.readouterr().out == printed  # the same table as without --out
    assert {p.name for p in out.iterdir()} == {"comparison.csv", "comparison.png", "comparison.svg", "settings.json"}
    assert (out / "comparison.csv").read_text() == printed


def test_compare_out_without_matplotlib(tmp_path, capsys, monkeypatch):
    _without_matplotlib(monkeypatch)
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "compare",
                "--trace",
                "small",
                "--racks",
                "1",
                "--policies",
                "fifo",
                "--quiet",
                "--format",
                "csv",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr().err.splitlines() == [PLOTS_NOTE]
    assert {p.name for p in out.iterdir()} == {"comparison.csv", "settings.json"}


# --- large runs aggregate; frames share the palette; videos ----------------------------------


def _synthetic_run(n_rows: int, n_gpus: int) -> RunResult:
    """A run of ``n_rows`` one-GPU placements spread over ``n_gpus`` GPUs, an hour each."""
    job = np.arange(n_rows)
    start = (job // n_gpus) * HOUR
    jobs = pd.DataFrame({"job_id": job, "arrival_s": np.zeros(n_rows)})
    timeline = pd.DataFrame(
        {
            "time_s": [0.0],
            "gpus_used": [min(n_rows, n_gpus)],
            "utilization": [min(n_rows, n_gpus) / n_gpus],
            "running": [0],
            "waiting": [0],
        }
    )
    placements = pd.DataFrame(
        {
            "job_id": job,
            "gpu": job % n_gpus,
            "tier": np.zeros(n_rows, dtype=int),
            "start_s": start,
            "end_s": start + HOUR,
            "segments": np.ones(n_rows, dtype=int),
        }
    )
    return RunResult(jobs=jobs, timeline=timeline, summary={}, placements=placements)


def test_occupancy_aggregates_at_the_default_thresholds():
    # At the thresholds, one bar per placement; one more placement (or GPU) and it is the heat map.
    spec = ClusterSpec(racks=1)
    at = _synthetic_run(plots.MAX_BARS, spec.num_gpus)
    assert not plots.occupancy(at, spec).axes[0].images
    over = _synthetic_run(plots.MAX_BARS + 1, spec.num_gpus)
    (image,) = plots.occupancy(over, spec).axes[0].images
    assert image.get_array().shape == (spec.racks * spec.machines_per_rack, 200)  # machines x time bins
    wide = ClusterSpec(racks=plots.MAX_GPUS // 64 + 1)
    assert plots.occupancy(_synthetic_run(10, wide.num_gpus), wide).axes[0].images
    # Above 1,024 machines the rows are racks: the figure's memory is racks x bins, whatever the jobs.
    huge = ClusterSpec(racks=130)
    run = _synthetic_run(5000, huge.num_gpus)
    ax = plots.occupancy(run, huge, bins=50).axes[0]
    share = ax.images[0].get_array()
    assert share.shape == (130, 50) and ax.get_ylabel() == "rack"
    # Each rack's busy share integrates its placements: 5,000 GPU-hours over 130 racks of 64 GPUs.
    span = float(run.placements.end_s.max()) / HOUR
    busy_gpu_hours = share.sum(axis=1) * (span / 50) * 64
    held = run.placements.groupby(run.placements.gpu // 64).size().reindex(range(130), fill_value=0)
    np.testing.assert_allclose(busy_gpu_hours, held.to_numpy(float), rtol=1e-9)


def test_frames_paint_the_charts_tier_colours():
    import gymnasium as gym

    from dallygym.envs import render
    from dallygym.envs.render import gpu_tiers

    # One palette: the frame's colours are the chart's, imported from dallygym.experiments.plots.
    assert render.TIER_RGB is plots.TIER_RGB and render.FREE_RGB is plots.FREE_RGB
    assert [plots.hex_rgb(plots.TIER_COLOURS[t]) for t in plots.TIER_NAMES] == list(plots.TIER_RGB)
    assert plots.TIER_RGB == ((0x56, 0xB4, 0xE9), (0xD5, 0x5E, 0x00), (0x00, 0x00, 0x00))
    env = gym.make("Dally-v0", render_mode="rgb_array")
    env.reset(seed=0)
    for _ in range(40):  # take the first tier offered (not waiting), so that several tiers are in use
        valid = np.flatnonzero(env.unwrapped.action_masks())
        env.step(int(valid[1]) if len(valid) > 1 else 0)
    frame = env.render()
    tiers = gpu_tiers(env.unwrapped.engine)
    colours, counts = np.unique(frame.reshape(-1, 3), axis=0, return_counts=True)
    count = {tuple(int(v) for v in c): int(n) for c, n in zip(colours, counts)}
    # Every GPU is one square of its tier's colour (free: FREE_RGB), and each colour has one more
    # block: its legend swatch. So (pixels - swatch) / GPUs is the same square area for all.
    swatch = (7 * render.TEXT_SCALE - 4) * (render.CHAR_W * 2 - 4)
    areas = set()
    for k, rgb in [(-1, plots.FREE_RGB), *enumerate(plots.TIER_RGB)]:
        n = int((tiers == k).sum())
        assert count.get(rgb, 0) >= swatch, rgb
        if n:
            pixels = count[rgb] - swatch
            assert pixels % n == 0
            areas.add(pixels // n)
    assert len(areas) == 1 and int(np.sqrt(areas.pop())) ** 2 > 0
    assert (tiers == 0).sum() > 0 and (tiers == 1).sum() > 0  # at least two tiers seen
    env.close()


def test_record_video_of_dally_v0(tmp_path):
    pytest.importorskip("moviepy", reason="RecordVideo needs moviepy (the plots extra)")
    import gymnasium as gym
    import imageio_ffmpeg

    folder = tmp_path / "videos"
    env = gym.wrappers.RecordVideo(
        gym.make("Dally-v0", render_mode="rgb_array"),
        str(folder),
        episode_trigger=lambda episode: True,
        video_length=6,
        disable_logger=True,
    )
    env.reset(seed=0)
    for _ in range(8):
        env.step(0)  # wait: valid at every offer
    env.close()
    (video,) = folder.glob("*.mp4")
    reader = imageio_ffmpeg.read_frames(str(video))
    meta = next(reader)
    frames = [np.frombuffer(f, dtype=np.uint8).reshape(meta["size"][1], meta["size"][0], 3) for f in reader]
    assert meta["size"][0] == 960 and len(frames) == 6 + 1  # the reset's frame, then video_length steps'
    # The decoded frames show the palette's machine-tier sky blue (within the codec's error).
    sky = np.array(plots.TIER_RGB[0])
    assert (np.abs(frames[0].astype(int) - sky).max(axis=2) < 24).sum() > 1000


def test_long_lines_are_thinned_without_losing_extremes():
    rng = np.random.default_rng(0)
    n = 50 * plots.MAX_LINE_POINTS
    t = np.cumsum(rng.exponential(1.0, n))
    y = rng.integers(0, 1000, n).astype(float)
    y[12345] = 5000.0  # one spike, narrower than a pixel
    x2, y2 = plots.thin_steps(t, y)
    assert x2.size <= plots.MAX_LINE_POINTS and np.all(np.diff(x2) >= 0)
    assert y2.max() == 5000.0 and y2.min() == y.min() and y2[0] == y[0] and y2[-1] == y[-1]
    assert x2[0] == t[0] and x2[-1] <= t[-1]
    # Each drawn point's value is one the series takes within a bin's width of that time.
    width = (t[-1] - t[0]) / (plots.MAX_LINE_POINTS // 4)
    for i in rng.integers(0, x2.size, 200):
        near = (t >= x2[i]) & (t < x2[i] + width + 1e-9)
        assert y2[i] in set(y[near])
    short = np.arange(10.0)
    assert plots.thin_steps(short, short)[0] is not None and plots.thin_steps(short, short)[0].size == 10
    # The CDF keeps evenly spaced order statistics, the first and last included.
    values = rng.exponential(5.0, n)
    x, p = plots._cdf(values)
    assert x.size == plots.MAX_LINE_POINTS and x[0] == values.min() and x[-1] == values.max() and p[-1] == 1.0
    ranks = np.searchsorted(np.sort(values), x, side="right")
    np.testing.assert_allclose(p, ranks / n)
    assert np.diff(p).max() < 1.1 / plots.MAX_LINE_POINTS  # the curve moves by under 1/8000 of the jobs
