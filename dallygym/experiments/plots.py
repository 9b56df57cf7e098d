"""Figures of a run and of a comparison of runs (needs the ``plots`` extra: matplotlib).

Every function takes a :class:`~dallygym.sim.metrics.RunResult` (or, through :func:`load_run`, the
CSVs of a ``dallygym simulate --out`` directory) and returns a :class:`matplotlib.figure.Figure`
with labelled axes, units and a legend. Figures are built without ``pyplot``: nothing is
shown, no global figure state is kept, and any backend (or none) works; save them with
``fig.savefig`` or :func:`save_figures`.

* :func:`occupancy` -- GPUs (grouped by rack and machine) against time: each job's placement
  as a bar coloured by tier; above a size threshold, a heat map of busy GPUs per machine.
* :func:`utilisation_queue` -- GPU utilisation and queue length against time.
* :func:`jct_cdf` -- the CDF of job completion times, mean / median / p95 marked.
* :func:`tiers_comm` -- per model, the tier mix of its GPU time and its communication share.
* :func:`compare_figures` -- several runs: JCT CDFs, makespan / mean JCT / mean communication
  bars, utilisation timelines.

Colours
-------
One palette, Okabe & Ito's colour-blind-safe set (:data:`PALETTE`). The placement tiers have
fixed colours chosen so that they also differ in lightness, and so stay apart in greyscale
(:data:`TIER_COLOURS`): machine sky blue (light), rack vermillion (mid), network black
(dark); bars of the tiers also carry different hatching. The environments' ``rgb_array``
frames (:mod:`dallygym.envs.render`) paint GPUs with the same colours (:data:`TIER_RGB`; a free GPU
light grey, :data:`FREE_RGB`) under the same legend labels. Runs in a comparison take the
palette in order (:data:`SERIES_COLOURS`) and, for greyscale, different line styles. Heat maps
use ``cividis``, a colour map whose lightness rises monotonically and which reads the same to
the common colour-vision deficiencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from ..sim.cluster import ClusterSpec
    from ..sim.metrics import RunResult

#: Okabe & Ito's palette (name: hex), colour-blind safe.
PALETTE: dict[str, str] = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
}

#: The tiers' fixed colours (tier index 0, 1, 2), light to dark so that greyscale keeps them apart.
TIER_NAMES: tuple[str, ...] = ("machine", "rack", "network")
TIER_COLOURS: dict[str, str] = {
    "machine": PALETTE["sky blue"],
    "rack": PALETTE["vermillion"],
    "network": PALETTE["black"],
}
TIER_HATCHES: dict[str, str] = {"machine": "", "rack": "//", "network": "xx"}


def hex_rgb(colour: str) -> tuple[int, int, int]:
    """``"#RRGGBB"`` as an (r, g, b) tuple of 0-255 ints."""
    value = colour.lstrip("#")
    return int(value[0:2], 16), int(value[2:4], 16), int(value[4:6], 16)


#: The same tier colours as 0-255 RGB, in tier order: what :mod:`dallygym.envs.render` paints the
#: GPUs of the environments' ``rgb_array`` frames with, so frames and charts read alike.
TIER_RGB: tuple[tuple[int, int, int], ...] = tuple(hex_rgb(TIER_COLOURS[t]) for t in TIER_NAMES)
#: A free GPU in those frames (the charts leave free GPU time blank): a light grey, lighter than
#: every tier colour so that greyscale keeps it apart too.
FREE_COLOUR = "#E4E4E8"
FREE_RGB: tuple[int, int, int] = hex_rgb(FREE_COLOUR)

#: Colours of the runs of a comparison, in order; line styles for greyscale.
SERIES_COLOURS: tuple[str, ...] = tuple(
    PALETTE[k]
    for k in ("blue", "orange", "bluish green", "vermillion", "reddish purple", "sky blue", "black", "yellow")
)
SERIES_STYLES: tuple[str, ...] = ("-", "--", "-.", ":")

#: Colour map of the heat maps (monotone lightness, colour-vision-deficiency safe).
HEATMAP_CMAP = "cividis"

#: Above either, :func:`occupancy` draws the aggregated heat map instead of one bar per GPU.
MAX_BARS = 2000
MAX_GPUS = 512

#: The figures of one run, by file stem (:func:`run_figures`).
RUN_FIGURES: tuple[str, ...] = ("occupancy", "utilisation_queue", "jct_cdf", "tiers_comm")

#: Above this many points a line is thinned to about this many (:func:`thin_steps`, :func:`_cdf`):
#: more than a figure's pixels across, so it looks the same and saves in a fraction of the time.
MAX_LINE_POINTS = 8000

HOUR = 3600.0


def available() -> bool:
    """Whether matplotlib can be imported (the ``plots`` extra is installed)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(**kwargs) -> Figure:
    from matplotlib.figure import Figure

    return Figure(layout="constrained", **kwargs)


def load_run(directory: str | Path) -> RunResult:
    """The :class:`RunResult` of a ``simulate --out`` directory (``jobs.csv``, ``timeline.csv``,
    ``summary.csv``; ``placements.csv`` too if there is one). Per-GPU placements are not part
    of those CSVs, so :func:`occupancy` of a loaded run needs ``placements.csv``."""
    from ..sim.metrics import RunResult

    d = Path(directory)
    jobs = pd.read_csv(d / "jobs.csv")
    timeline = pd.read_csv(d / "timeline.csv")
    summary = pd.read_csv(d / "summary.csv").iloc[0].to_dict()
    placements = pd.read_csv(d / "placements.csv") if (d / "placements.csv").exists() else None
    return RunResult(jobs=jobs, timeline=timeline, summary=summary, placements=placements)


def _as_result(result) -> RunResult:
    return load_run(result) if isinstance(result, (str, Path)) else result


def _origin(result: RunResult) -> float:
    return float(result.jobs["arrival_s"].min()) if len(result.jobs) else 0.0


def _total_gpus(result: RunResult) -> int | None:
    tl = result.timeline
    busy = tl[tl["utilization"] > 0]
    if busy.empty:
        return None
    return int(round(float(busy["gpus_used"].iloc[0] / busy["utilization"].iloc[0])))


def _geometry(result: RunResult, cluster: ClusterSpec | None, placements: pd.DataFrame) -> tuple[int, int, int]:
    """(racks, machines per rack, GPUs per machine) of the run."""
    if cluster is not None:
        return cluster.racks, cluster.machines_per_rack, cluster.gpus_per_machine
    mpr, gpm = 8, 8  # the default cluster shape
    total = _total_gpus(result) or (int(placements["gpu"].max()) + 1 if len(placements) else gpm * mpr)
    return max(1, -(-total // (mpr * gpm))), mpr, gpm


def _tier_patches(tiers=TIER_NAMES):
    from matplotlib.patches import Patch

    return [
        Patch(facecolor=TIER_COLOURS[t], hatch=TIER_HATCHES[t], edgecolor="white", label=f"{t} tier") for t in tiers
    ]


def occupancy(
    result: RunResult | str | Path,
    cluster: ClusterSpec | None = None,
    *,
    max_bars: int = MAX_BARS,
    max_gpus: int = MAX_GPUS,
    bins: int = 200,
) -> Figure:
    """GPUs against time: which job held which GPU when, coloured by placement tier.

    y: GPU ids, grouped by rack and machine (thin lines between machines, thick between
    racks); x: hours since the first arrival. Each row of ``result.placements`` (job, GPU,
    tier, start, end) is one horizontal bar. A job's placement after its first (a preemption
    and restart, a move or an upgrade) shows as a marker at its start; a job whose earlier
    placements were not recorded (``segments > 1`` with a single row per GPU, as the engine
    keeps only the last GPUs) as a cross at its bar's start.

    With more than ``max_bars`` bars or ``max_gpus`` GPUs, one bar each would be unreadable
    and slow: the figure is then a heat map of busy GPUs per machine (per rack above 1,024
    machines) in ``bins`` time bins, coloured by utilisation (the share of the machine's GPU
    time in use), in memory proportional to machines x bins. ``cluster``: the run's shape
    (default: 8 machines per rack, 8 GPUs per machine, as many racks as the run used).
    """
    result = _as_result(result)
    placements = result.placements
    if placements is None:
        raise ValueError(
            "occupancy needs the run's placements (RunResult.placements); a run loaded from CSVs needs a placements.csv"
        )
    racks, mpr, gpm = _geometry(result, cluster, placements)
    n_gpus = racks * mpr * gpm
    if len(placements) > max_bars or n_gpus > max_gpus:
        return _occupancy_heatmap(result, placements, racks, mpr, gpm, bins)
    return _occupancy_bars(result, placements, racks, mpr, gpm)


def _occupancy_bars(result: RunResult, placements: pd.DataFrame, racks: int, mpr: int, gpm: int) -> Figure:
    from matplotlib.collections import PolyCollection

    t0 = _origin(result)
    n_gpus = racks * mpr * gpm
    fig = _figure(figsize=(10, max(3.0, min(12.0, 1.5 + 0.12 * n_gpus))))
    ax = fig.add_subplot()
    p = placements
    start = (p["start_s"].to_numpy(float) - t0) / HOUR
    end = (p["end_s"].to_numpy(float) - t0) / HOUR
    gpu = p["gpu"].to_numpy(np.int64)
    tier = p["tier"].to_numpy(np.int64)
    height = 0.8
    for k, name in enumerate(TIER_NAMES):
        sel = tier == k
        if not sel.any():
            continue
        s, e, g = start[sel], end[sel], gpu[sel]
        lo, hi = g - height / 2, g + height / 2
        verts = np.stack(
            [np.stack([s, lo], 1), np.stack([s, hi], 1), np.stack([e, hi], 1), np.stack([e, lo], 1)], axis=1
        )
        coll = PolyCollection(
            verts,
            facecolors=TIER_COLOURS[name],
            edgecolors="white",
            linewidths=0.5,
            hatch=TIER_HATCHES[name] or None,
            label=f"{name} tier",
        )
        ax.add_collection(coll)
    # Placements after a job's first: their rows start later than the job's earliest row.
    first = p.groupby("job_id")["start_s"].transform("min").to_numpy(float)
    later = p["start_s"].to_numpy(float) > first
    handles = _tier_patches()
    if later.any():
        handles.append(
            ax.plot(
                start[later],
                gpu[later],
                linestyle="none",
                marker="o",
                markersize=5,
                markerfacecolor="white",
                markeredgecolor=PALETTE["black"],
                label="re-placed (preempted / moved)",
            )[0]
        )
    if "segments" in p.columns:
        starts_per_job = p.groupby("job_id")["start_s"].transform("nunique").to_numpy()
        unrecorded = (p["segments"].to_numpy() > 1) & (starts_per_job == 1)
        if unrecorded.any():
            handles.append(
                ax.plot(
                    start[unrecorded],
                    gpu[unrecorded],
                    linestyle="none",
                    marker="x",
                    markersize=5,
                    color=PALETTE["orange"],
                    label="placed more than once (last GPUs shown)",
                )[0]
            )
    # Machine and rack boundaries, machine labels.
    for m in range(1, racks * mpr):
        ax.axhline(m * gpm - 0.5, color="0.6" if m % mpr else "0.2", linewidth=0.5 if m % mpr else 1.2)
    centres = np.arange(racks * mpr) * gpm + (gpm - 1) / 2
    ax.set_yticks(centres, [f"r{m // mpr} m{m % mpr}" for m in range(racks * mpr)])
    ax.set_ylim(n_gpus - 0.5, -0.5)
    t_end = float(np.max(end)) if len(end) else 1.0
    ax.set_xlim(0, t_end * 1.02 if t_end > 0 else 1.0)
    ax.set_xlabel("time since first arrival (hours)")
    ax.set_ylabel(f"GPU (rack r, machine m; {gpm} GPUs each)")
    ax.set_title(f"GPU occupancy: {p['job_id'].nunique():,} jobs on {n_gpus:,} GPUs")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="placement")
    return fig


def busy_per_machine(
    placements: pd.DataFrame, t0: float, t1: float, n_rows: int, gpus_per_row: int, bins: int
) -> np.ndarray:
    """Busy GPU-seconds per row (machine or rack: ``gpu // gpus_per_row``) per time bin of
    ``[t0, t1]``, as a share of the row's GPU time in the bin: an ``(n_rows, bins)`` array
    in [0, 1]. Each placement adds its exact overlap with each bin; linear in placements."""
    width = (t1 - t0) / bins if t1 > t0 else 1.0
    s = np.clip(placements["start_s"].to_numpy(float), t0, t1)
    e = np.clip(placements["end_s"].to_numpy(float), t0, t1)
    row = placements["gpu"].to_numpy(np.int64) // gpus_per_row
    bs = np.minimum(((s - t0) // width).astype(np.int64), bins - 1)
    be = np.minimum(((e - t0) // width).astype(np.int64), bins - 1)
    busy = np.zeros((n_rows, bins + 1))
    same = bs == be
    np.add.at(busy, (row[same], bs[same]), e[same] - s[same])
    d = ~same
    rd, bsd, bed = row[d], bs[d], be[d]
    np.add.at(busy, (rd, bsd), t0 + (bsd + 1) * width - s[d])  # head of the first bin
    np.add.at(busy, (rd, bed), e[d] - (t0 + bed * width))  # tail of the last bin
    full = np.zeros((n_rows, bins + 1))  # whole bins in between, as a difference array
    np.add.at(full, (rd, bsd + 1), width)
    np.add.at(full, (rd, bed), -width)
    busy += np.cumsum(full, axis=1)
    return np.clip(busy[:, :bins] / (width * gpus_per_row), 0.0, 1.0)


def _occupancy_heatmap(
    result: RunResult, placements: pd.DataFrame, racks: int, mpr: int, gpm: int, bins: int
) -> Figure:
    t0 = _origin(result)
    t1 = float(placements["end_s"].max()) if len(placements) else t0 + 1.0
    machines = racks * mpr
    per_rack = machines > 1024
    n_rows, per_row = (racks, mpr * gpm) if per_rack else (machines, gpm)
    share = busy_per_machine(placements, t0, t1, n_rows, per_row, bins)
    fig = _figure(figsize=(10, 6))
    ax = fig.add_subplot()
    image = ax.imshow(
        share,
        aspect="auto",
        interpolation="nearest",
        cmap=HEATMAP_CMAP,
        vmin=0.0,
        vmax=1.0,
        origin="upper",
        extent=(0.0, (t1 - t0) / HOUR, n_rows - 0.5, -0.5),
    )
    if not per_rack and racks <= 16:  # rack boundaries, while they stay apart
        for r in range(1, racks):
            ax.axhline(r * mpr - 0.5, color="white", linewidth=0.3)
    unit = "rack" if per_rack else "machine"
    ax.set_xlabel("time since first arrival (hours)")
    ax.set_ylabel(f"{unit} (rack-major index)" if not per_rack else "rack")
    ax.set_title(
        f"GPU occupancy per {unit}: {placements['job_id'].nunique():,} jobs on "
        f"{racks * mpr * gpm:,} GPUs (aggregated, {bins} time bins)"
    )
    bar = fig.colorbar(image, ax=ax, label=f"busy GPUs (share of the {unit}'s GPUs)")
    bar.ax.yaxis.set_major_formatter(_percent_formatter())
    # A legend for the figure's one encoding, so that every figure carries one.
    from matplotlib import colormaps
    from matplotlib.patches import Patch

    cmap = colormaps[HEATMAP_CMAP]
    ax.legend(
        handles=[Patch(facecolor=cmap(0.0), label="idle"), Patch(facecolor=cmap(1.0), label="all GPUs busy")],
        loc="upper left",
        bbox_to_anchor=(0.0, -0.08),
        ncols=2,
        frameon=False,
    )
    return fig


def _percent_formatter():
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0)


def utilisation_queue(result: RunResult | str | Path) -> Figure:
    """GPU utilisation (%, top) and queue length (jobs waiting, with jobs running for
    reference, bottom) against hours since the first arrival, on a shared x axis; step
    plots, since both hold between events."""
    result = _as_result(result)
    tl = result.timeline
    t = (tl["time_s"].to_numpy(float) - _origin(result)) / HOUR
    fig = _figure(figsize=(10, 5.5))
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.step(
        *thin_steps(t, 100 * tl["utilization"].to_numpy(float)),
        where="post",
        color=SERIES_COLOURS[0],
        label="GPU utilisation",
    )
    top.set_ylabel("GPU utilisation (%)")
    top.set_ylim(0, 105)
    top.legend(loc="upper right")
    bottom.step(
        *thin_steps(t, tl["waiting"].to_numpy(float)),
        where="post",
        color=PALETTE["vermillion"],
        label="waiting (queue)",
    )
    bottom.step(
        *thin_steps(t, tl["running"].to_numpy(float)),
        where="post",
        color=PALETTE["blue"],
        linestyle="--",
        label="running",
    )
    bottom.set_ylabel("jobs")
    from matplotlib.ticker import MaxNLocator

    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("time since first arrival (hours)")
    bottom.legend(loc="upper right")
    fig.suptitle("Utilisation and queue length")
    return fig


def thin_steps(x: np.ndarray, y: np.ndarray, max_points: int = MAX_LINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """A step series (``where="post"``, ``x`` ascending) of at most about ``max_points`` points
    that draws the same picture: ``x``'s range in ``max_points // 4`` equal bins, each drawn at its
    first point as its first value, its maximum, its minimum and its last value (a vertical
    stroke over the bin's range, then its last value held). Every extreme stays; shifts are
    under one bin's width. Series of at most ``max_points`` points are returned as they are."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size <= max_points:
        return x, y
    bins = max(1, max_points // 4)
    edges = np.linspace(x[0], x[-1], bins + 1)[:-1]
    starts = np.unique(np.searchsorted(x, edges, side="left"))
    starts = starts[starts < x.size]
    ends = np.r_[starts[1:], x.size] - 1
    values = np.stack([y[starts], np.maximum.reduceat(y, starts), np.minimum.reduceat(y, starts), y[ends]], axis=1)
    return np.repeat(x[starts], 4), values.reshape(-1)


def _cdf(values: np.ndarray, max_points: int = MAX_LINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF's steps; above ``max_points`` values, only the order statistics at
    ``max_points`` evenly spaced ranks (the first and last included), which moves the curve by
    less than ``1 / max_points`` of the jobs."""
    x = np.sort(values)
    y = np.arange(1, x.size + 1) / max(1, x.size)
    if x.size > max_points:
        keep = np.unique(np.linspace(0, x.size - 1, max_points).round().astype(np.int64))
        x, y = x[keep], y[keep]
    return x, y


def jct_cdf(result: RunResult | str | Path) -> Figure:
    """The empirical CDF of job completion time (hours; log x when JCTs span more than two
    decades), with vertical lines at the mean, the median and the 95th percentile."""
    result = _as_result(result)
    jct = result.jobs["jct_s"].to_numpy(float) / HOUR
    fig = _figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    x, y = _cdf(jct)
    ax.step(x, y, where="post", color=SERIES_COLOURS[0], label=f"JCT CDF ({jct.size:,} jobs)")
    marks = (
        ("mean", float(np.mean(jct)), "--", PALETTE["vermillion"]),
        ("median", float(np.median(jct)), ":", PALETTE["bluish green"]),
        ("p95", float(np.percentile(jct, 95)), "-.", PALETTE["black"]),
    )
    for name, value, style, colour in marks:
        ax.axvline(value, linestyle=style, color=colour, label=f"{name} {value:,.2f} h")
    if jct.size and jct.min() > 0 and jct.max() / jct.min() > 100:
        ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right")
    ax.set_title("Job completion time")
    return fig


def tiers_comm(result: RunResult | str | Path) -> Figure:
    """Per model: left, the share of its jobs' GPU-holding time spent at each placement
    tier (stacked bars, %); right, its communication share: exposed communication time /
    run time, summed over its jobs (%)."""
    result = _as_result(result)
    jobs = result.jobs
    by = jobs.groupby("model")[["machine_s", "rack_s", "network_s", "comm_s", "run_s"]].sum().sort_index()
    models = by.index.astype(str).tolist()
    x = np.arange(len(models))
    fig = _figure(figsize=(max(8.0, 1.2 * len(models) + 4), 4.5))
    left, right = fig.subplots(1, 2)
    held = by[["machine_s", "rack_s", "network_s"]].sum(axis=1).replace(0, np.nan)
    bottom = np.zeros(len(models))
    for name in TIER_NAMES:
        share = (100 * by[f"{name}_s"] / held).fillna(0.0).to_numpy()
        left.bar(
            x,
            share,
            bottom=bottom,
            color=TIER_COLOURS[name],
            hatch=TIER_HATCHES[name] or None,
            edgecolor="white",
            label=f"{name} tier",
        )
        bottom += share
    left.set_xticks(x, models, rotation=30, ha="right")
    left.set_xlabel("model")
    left.set_ylabel("share of GPU time at tier (%)")
    left.set_ylim(0, 118)  # room for the legend above the bars
    left.set_yticks(range(0, 101, 20))
    left.set_title("Placement tier mix")
    left.legend(loc="upper center", ncols=3, fontsize="small")
    comm = (100 * by["comm_s"] / by["run_s"].replace(0, np.nan)).fillna(0.0).to_numpy()
    right.bar(x, comm, color=PALETTE["blue"], edgecolor="white", label="communication / run time")
    right.set_xticks(x, models, rotation=30, ha="right")
    right.set_xlabel("model")
    right.set_ylabel("exposed communication (% of run time)")
    right.set_title("Communication share")
    right.legend(loc="upper right", fontsize="small")
    return fig


def compare_figures(results: Mapping[str, RunResult | str | Path]) -> Figure:
    """Several runs (by label) in one figure: top, their JCT CDFs on one axis; middle, bars
    of makespan (hours), mean JCT (hours) and mean communication latency (seconds); bottom,
    their GPU utilisation against time."""
    runs = {label: _as_result(r) for label, r in results.items()}
    if not runs:
        raise ValueError("compare_figures needs at least one run")
    labels = list(runs)
    fig = _figure(figsize=(11, 10))
    grid = fig.add_gridspec(3, 3, height_ratios=(1.2, 1.0, 1.0))
    cdf_ax = fig.add_subplot(grid[0, :])
    bar_axes = [fig.add_subplot(grid[1, k]) for k in range(3)]
    util_ax = fig.add_subplot(grid[2, :])
    log = False
    for i, label in enumerate(labels):
        r = runs[label]
        colour, style = SERIES_COLOURS[i % len(SERIES_COLOURS)], SERIES_STYLES[i % len(SERIES_STYLES)]
        jct = r.jobs["jct_s"].to_numpy(float) / HOUR
        x, y = _cdf(jct)
        cdf_ax.step(x, y, where="post", color=colour, linestyle=style, label=label)
        log = log or bool(jct.size and jct.min() > 0 and jct.max() / jct.min() > 100)
        tl = r.timeline
        util_ax.step(
            *thin_steps((tl["time_s"].to_numpy(float) - _origin(r)) / HOUR, 100 * tl["utilization"].to_numpy(float)),
            where="post",
            color=colour,
            linestyle=style,
            label=label,
        )
    if log:
        cdf_ax.set_xscale("log")
    cdf_ax.set_xlabel("job completion time (hours)")
    cdf_ax.set_ylabel("fraction of jobs")
    cdf_ax.set_ylim(0, 1.02)
    cdf_ax.set_title("JCT CDF")
    cdf_ax.legend(loc="lower right", title="run")
    metrics = (
        ("makespan_s", HOUR, "makespan (hours)"),
        ("jct_mean_s", HOUR, "mean JCT (hours)"),
        ("comm_mean_s", 1.0, "mean comm. latency (s)"),
    )
    x = np.arange(len(labels))
    colours = [SERIES_COLOURS[i % len(SERIES_COLOURS)] for i in range(len(labels))]
    hatches = [("", "//", "..", "xx")[i % 4] for i in range(len(labels))]
    for ax, (key, scale, ylabel) in zip(bar_axes, metrics):
        values = [float(runs[label].summary[key]) / scale for label in labels]
        bars = ax.bar(x, values, color=colours, edgecolor="white")
        for b, h, label in zip(bars, hatches, labels):
            b.set_hatch(h or None)
            b.set_label(label)
        ax.set_xticks(x, labels, rotation=30, ha="right")
        ax.set_xlabel("run")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize="x-small", loc="lower right")
    util_ax.set_xlabel("time since first arrival (hours)")
    util_ax.set_ylabel("GPU utilisation (%)")
    util_ax.set_ylim(0, 105)
    util_ax.set_title("Utilisation")
    util_ax.legend(loc="upper right", title="run")
    return fig


def run_figures(result: RunResult | str | Path, cluster: ClusterSpec | None = None) -> dict[str, Figure]:
    """The figures of one run by file stem (:data:`RUN_FIGURES`); ``occupancy`` only when the
    run has its placements."""
    result = _as_result(result)
    figures = {}
    if result.placements is not None:
        figures["occupancy"] = occupancy(result, cluster)
    figures["utilisation_queue"] = utilisation_queue(result)
    figures["jct_cdf"] = jct_cdf(result)
    figures["tiers_comm"] = tiers_comm(result)
    return figures


def save_figures(
    figures: Mapping[str, Figure], directory: str | Path, formats: tuple[str, ...] = ("png", "svg"), dpi: int = 120
) -> list[Path]:
    """Write each figure as ``<stem>.<format>`` into ``directory``; return the paths. The
    files carry no date and SVG ids are salted with a constant, so the same run gives the
    same bytes."""
    import matplotlib

    out = Path(directory)
    paths = []
    with matplotlib.rc_context({"svg.hashsalt": "dallygym"}):
        for stem, fig in figures.items():
            for fmt in formats:
                path = out / f"{stem}.{fmt}"
                metadata = {"Date": None} if fmt in ("svg", "pdf") else None
                fig.savefig(path, format=fmt, dpi=dpi, metadata=metadata)
                paths.append(path)
    return paths
