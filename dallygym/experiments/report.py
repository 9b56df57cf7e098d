"""One self-contained HTML page of runs: ``dallygym report DIR [DIR ...] --html OUT.html``.

Each ``DIR`` is one of

* a run, as ``dallygym simulate --out`` writes it (``summary.csv``, ``jobs.csv``,
  ``timeline.csv`` and the figures of :mod:`dallygym.experiments.plots`): its settings, its summary table
  and its figures;
* a comparison, as ``dallygym compare --out`` writes it (``comparison.csv``, and
  ``comparison.png`` / ``.svg`` with the plots extra): the table, one row per policy, and the
  side-by-side figure;
* a trained agent, as ``dallygym train --out`` writes it (``config.json`` with ``policy.pth``,
  ``model.zip``, ``meta.json``, ``monitor/`` or ``eval/``): its configuration, its learning
  curve (training episodes from ``monitor/*.monitor.csv``, validation returns from
  ``eval/evaluations.npz``) and, when the directory holds an evaluation CSV (such as
  ``dallygym evaluate --out DIR/evaluation.csv`` writes: an ``agent`` column and the summary
  keys), that table.

The page holds everything itself: figures as base64 PNG ``data:`` URIs (the PNGs the commands
drew; figures missing from a directory are drawn from its CSVs when matplotlib is installed),
styles inline, no external fetch. It needs no JavaScript; one short inline script only marks
on the ``<html>`` element how many images the browser decoded (``data-images-decoded`` of
``data-images-total``), which the tests read. The same directories give the same bytes: no
date is written.

A directory's settings (trace, cluster, policy, profile) come from its ``settings.json`` when
there is one (:func:`write_settings`), else from an agent's ``config.json``, else from what its
files show (the GPUs in use from ``timeline.csv``, the policies of a comparison); what was not
recorded is said so.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..sim.metrics import SUMMARY_KEYS, naming

#: The optional file of a run's or comparison's settings (:func:`write_settings`).
SETTINGS_FILE = "settings.json"
#: What each kind of directory must hold.
RUN_FILES = ("summary.csv", "jobs.csv", "timeline.csv")
COMPARISON_FILE = "comparison.csv"
AGENT_MARKERS = ("policy.pth", "model.zip", "meta.json", "monitor", "eval")
#: Figures of a run, in page order, with their captions.
RUN_FIGURE_CAPTIONS: dict[str, str] = {
    "occupancy": "GPU occupancy: which job held which GPU when, coloured by placement tier",
    "utilisation_queue": "GPU utilisation and queue length against time",
    "jct_cdf": "Distribution of job completion times",
    "tiers_comm": "Placement tier mix and communication share per model",
}
HOUR = 3600.0


class ReportError(ValueError):
    """A directory the report cannot read; the message names it."""


@dataclass
class Section:
    """One directory's part of the page."""

    title: str
    kind: str
    directory: Path
    settings: list[tuple[str, str]] = field(default_factory=list)
    tables: list[tuple[str, str]] = field(default_factory=list)  # (caption, table HTML)
    figures: list[tuple[str, str]] = field(default_factory=list)  # (caption, <img> or <svg> HTML)
    appendix: list[tuple[str, str]] = field(default_factory=list)  # long tables, after the figures
    notes: list[str] = field(default_factory=list)


# --- settings ------------------------------------------------------------------------------


def write_settings(
    directory: str | Path, *, trace: str, cluster, policy: str | Sequence[str], profile: str | None = None, **more
) -> Path:
    """Write ``settings.json`` (trace, cluster shape, policy or policies, profile and any other
    keyword, e.g. ``lease_s``) into ``directory`` for the report to show. ``cluster``: a
    :class:`~dallygym.sim.cluster.ClusterSpec` or a mapping of its fields."""
    if not isinstance(cluster, Mapping):
        cluster = {
            "racks": cluster.racks,
            "machines_per_rack": cluster.machines_per_rack,
            "gpus_per_machine": cluster.gpus_per_machine,
        }
    record = {
        "trace": str(trace),
        "cluster": dict(cluster),
        "policy": policy if isinstance(policy, str) else list(policy),
        "profile": profile or "default",
        **more,
    }
    path = Path(directory) / SETTINGS_FILE
    with naming(path):
        path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def _read_json(path: Path, directory: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{directory}: cannot read {path.name}: {exc}") from exc
    if not isinstance(value, dict):
        raise ReportError(f"{directory}: {path.name} is not a JSON object")
    return value


def _cluster_text(cluster: Mapping) -> str:
    r, m, g = (cluster.get(k) for k in ("racks", "machines_per_rack", "gpus_per_machine"))
    if None in (r, m, g):
        return ", ".join(f"{k} {v}" for k, v in cluster.items())
    return f"{r} racks × {m} machines × {g} GPUs ({int(r) * int(m) * int(g):,} GPUs)"


def _recorded_settings(directory: Path) -> list[tuple[str, str]] | None:
    path = directory / SETTINGS_FILE
    if not path.is_file():
        return None
    record = _read_json(path, directory)
    rows = []
    for key, value in record.items():
        if key == "cluster" and isinstance(value, Mapping):
            value = _cluster_text(value)
        elif isinstance(value, (list, tuple)):
            value = ", ".join(map(str, value))
        rows.append((key, str(value)))
    return rows


NOT_RECORDED = "not recorded in this directory"


def _timeline_gpus(timeline: pd.DataFrame) -> int | None:
    busy = timeline[timeline["utilization"] > 0]
    if busy.empty:
        return None
    return round(float(busy["gpus_used"].iloc[0] / busy["utilization"].iloc[0]))


# --- formatting ----------------------------------------------------------------------------


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _number(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return "–"
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(value)


def _cell(column: str, value) -> str:
    """A table cell; numbers carry their exact value in ``data-value``, seconds read in hours."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        exact = repr(float(value)) if isinstance(value, (float, np.floating)) else str(int(value))
        if column.endswith("_s") and not math.isnan(float(value)):
            shown = f"{float(value) / HOUR:,.2f} h"
        elif column in ("utilization", "makespan_job_share") and not math.isnan(float(value)):
            shown = f"{100 * float(value):.1f} %"
        else:
            shown = _number(value)
        return f'<td class="num" data-column="{_esc(column)}" data-value="{_esc(exact)}">{_esc(shown)}</td>'
    return f'<td data-column="{_esc(column)}">{_esc(value)}</td>'


def _heading(column: str) -> str:
    if column.endswith("_s"):
        return f"{column[:-2]} (h)"
    if column in ("utilization", "makespan_job_share"):
        return f"{column} (%)"
    return column


def frame_table(frame: pd.DataFrame, table_class: str = "wide") -> str:
    """A data frame as an HTML table; seconds shown in hours, exact values in ``data-value``."""
    head = "".join(f'<th scope="col" title="{_esc(c)}">{_esc(_heading(c))}</th>' for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False, name=None):
        body.append("<tr>" + "".join(_cell(c, v) for c, v in zip(frame.columns, row)) + "</tr>")
    return f'<table class="{table_class}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def summary_table(summary: Mapping) -> str:
    """One run's summary (``summary.csv``) as a two-column table: metric and value."""
    rows = []
    for key in [k for k in SUMMARY_KEYS if k in summary] + [k for k in summary if k not in SUMMARY_KEYS]:
        rows.append(f'<tr><th scope="row">{_esc(_heading(key))}</th>{_cell(key, summary[key])}</tr>')
    return f'<table class="summary" data-table="summary"><tbody>{"".join(rows)}</tbody></table>'


def _pairs_table(pairs: Iterable[tuple[str, str]], name: str) -> str:
    rows = "".join(f'<tr><th scope="row">{_esc(k)}</th><td>{_esc(v)}</td></tr>' for k, v in pairs)
    return f'<table class="settings" data-table="{_esc(name)}"><tbody>{rows}</tbody></table>'


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{data}">'


def _figure_png(fig, dpi: int = 100) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def _svg_inline(path: Path) -> str:
    """An SVG file for inline use: without its XML prolog and DOCTYPE."""
    text = path.read_text(encoding="utf-8")
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


# --- directories ---------------------------------------------------------------------------


def classify(directory: str | Path) -> str:
    """``"run"``, ``"comparison"`` or ``"agent"``; a :class:`ReportError` naming ``directory``
    when it is none of them."""
    d = Path(directory)
    if not d.exists():
        raise ReportError(f"{d}: no such directory")
    if not d.is_dir():
        raise ReportError(f"{d}: not a directory")
    if (d / COMPARISON_FILE).is_file():
        return "comparison"
    if all((d / name).is_file() for name in RUN_FILES):
        return "run"
    if (d / "config.json").is_file() and any((d / name).exists() for name in AGENT_MARKERS):
        return "agent"
    present = sorted(p.name for p in d.iterdir())[:5]
    raise ReportError(
        f"{d}: not a run, comparison or agent directory (expected summary.csv, jobs.csv and timeline.csv "
        f"from 'dallygym simulate --out', comparison.csv from 'dallygym compare --out', or config.json with "
        f"policy.pth/monitor/ from 'dallygym train --out'; found "
        f"{', '.join(present) if present else 'nothing'})"
    )


def _read_csv(path: Path, directory: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ReportError(
            f"{directory}: cannot read {path.name}: {str(exc).splitlines()[0] if str(exc) else exc}"
        ) from exc


def _plots_available() -> bool:
    from . import plots

    return plots.available()


def run_section(directory: Path) -> Section:
    """A ``simulate --out`` directory: settings, summary, figures."""
    from . import plots

    summary_frame = _read_csv(directory / "summary.csv", directory)
    if summary_frame.empty:
        raise ReportError(f"{directory}: summary.csv has no rows")
    summary = summary_frame.iloc[0].to_dict()
    jobs = _read_csv(directory / "jobs.csv", directory)
    timeline = _read_csv(directory / "timeline.csv", directory)
    section = Section(title=f"Run: {directory.name}", kind="run", directory=directory)
    settings = _recorded_settings(directory)
    if settings is None:
        gpus = _timeline_gpus(timeline) if {"utilization", "gpus_used"} <= set(timeline.columns) else None
        settings = [
            ("trace", f"{NOT_RECORDED} ({len(jobs):,} jobs)"),
            ("cluster", f"{gpus:,} GPUs (from timeline.csv; shape {NOT_RECORDED})" if gpus else NOT_RECORDED),
            ("policy", str(summary.get("policy", NOT_RECORDED))),
            ("profile", NOT_RECORDED),
        ]
        section.notes.append(f"{directory.name} has no {SETTINGS_FILE}: the settings shown are what its tables tell.")
    section.settings = settings
    section.tables.append(("Summary (summary.csv)", summary_table(summary)))
    result = None
    for stem, caption in RUN_FIGURE_CAPTIONS.items():
        png = directory / f"{stem}.png"
        if png.is_file():
            section.figures.append((caption, _img(png.read_bytes(), caption)))
            continue
        if not _plots_available():
            section.notes.append(
                f"{stem}: no {stem}.png in the directory, and matplotlib (the plots extra) is not installed to draw it"
            )
            continue
        if result is None:
            result = plots.load_run(directory)
        if stem == "occupancy" and result.placements is None:
            section.notes.append("occupancy: no occupancy.png and no placements.csv in the directory to draw it from")
            continue
        fig = getattr(plots, stem)(result)
        section.figures.append((caption, _img(_figure_png(fig), caption)))
    return section


def comparison_section(directory: Path) -> Section:
    """A ``compare --out`` directory: settings, the table, the side-by-side figure."""
    frame = _read_csv(directory / COMPARISON_FILE, directory)
    section = Section(title=f"Comparison: {directory.name}", kind="comparison", directory=directory)
    settings = _recorded_settings(directory)
    if settings is None:
        policies = ", ".join(map(str, frame["policy"])) if "policy" in frame.columns else NOT_RECORDED
        jobs = sorted(set(frame["jobs"].astype(int))) if "jobs" in frame.columns else []
        settings = [
            ("trace", NOT_RECORDED + (f" ({', '.join(f'{j:,}' for j in jobs)} jobs)" if jobs else "")),
            ("cluster", NOT_RECORDED),
            ("policy", policies),
            ("profile", NOT_RECORDED),
        ]
        section.notes.append(f"{directory.name} has no {SETTINGS_FILE}: the settings shown are what its table tells.")
    section.settings = settings
    section.tables.append(("Policies side by side (comparison.csv)", frame_table(frame)))
    caption = "Policies side by side: JCT CDFs, makespan / mean JCT / mean communication, utilisation"
    if (directory / "comparison.png").is_file():
        section.figures.append((caption, _img((directory / "comparison.png").read_bytes(), caption)))
    elif (directory / "comparison.svg").is_file():
        section.figures.append((caption, _svg_inline(directory / "comparison.svg")))
    else:
        section.notes.append(
            "no comparison.png or comparison.svg in the directory (compare --out draws them when "
            "the plots extra is installed)"
        )
    return section


def _evaluation_csvs(directory: Path) -> list[Path]:
    """Top-level CSVs of an agent directory that hold evaluation rows (summary keys)."""
    found = []
    for path in sorted(directory.glob("*.csv")):
        try:
            columns = set(pd.read_csv(path, nrows=0).columns)
        except (OSError, ValueError):
            continue
        if {"makespan_s", "jct_mean_s"} <= columns:
            found.append(path)
    return found


def _learning_curve_png(directory: Path) -> tuple[bytes | None, pd.DataFrame]:
    """The learning curve (training episodes, validation returns) as PNG, and the validation
    table; (None, validation) without matplotlib or without any data."""
    from ..learning.trainer import _return_label, training_curve
    from .plots import PALETTE, _figure

    episodes, evals = training_curve(directory)
    if (episodes.empty and evals.empty) or not _plots_available():
        return None, evals
    fig = _figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    if not episodes.empty:
        ax.plot(
            episodes["timesteps"],
            episodes["r"],
            linestyle="none",
            marker=".",
            markersize=3,
            alpha=0.35,
            color=PALETTE["sky blue"],
            label="training episodes",
        )
        window = max(1, len(episodes) // 20)
        ax.plot(
            episodes["timesteps"],
            episodes["r"].rolling(window, min_periods=1).mean(),
            color=PALETTE["blue"],
            label=f"training, rolling mean of {window}",
        )
    if not evals.empty:
        ax.plot(
            evals["timesteps"],
            evals["mean_return"],
            marker="o",
            linestyle="--",
            color=PALETTE["vermillion"],
            label="validation traces (mean)",
        )
    ax.set_xlabel("timesteps (decisions)")
    ax.set_ylabel(_return_label(directory))
    ax.set_title(f"Learning curve: {directory.name}")
    ax.legend(loc="lower right")
    return _figure_png(fig), evals


def agent_section(directory: Path) -> Section:
    """A ``train --out`` directory: settings, configuration, learning curve, evaluations."""
    config = _read_json(directory / "config.json", directory)
    meta = _read_json(directory / "meta.json", directory) if (directory / "meta.json").is_file() else {}
    section = Section(title=f"Agent: {directory.name}", kind="agent", directory=directory)
    cluster = {k: config[k] for k in ("racks", "machines_per_rack", "gpus_per_machine") if k in config}
    policy = f"learned ({config.get('env_id', 'Dally-v0')}"
    policy += f", observation {config['sensitivity']}" if "sensitivity" in config else ""
    policy += f", offers in {config['priority']} order" if "priority" in config else ""
    policy += ")"
    section.settings = [
        ("trace", str(config.get("trace", NOT_RECORDED))),
        ("cluster", _cluster_text(cluster) if cluster else NOT_RECORDED),
        ("policy", policy),
        ("profile", str(config.get("profile") or "default")),
    ]
    if config.get("train_racks"):
        section.settings.append(("training cluster sizes", ", ".join(map(str, config["train_racks"])) + " racks"))
    for key in ("command", "timesteps", "wall_s", "stopped_by_time_limit", "note"):
        if key in meta:
            section.settings.append((f"meta: {key}", _number(meta[key]) if key != "command" else str(meta[key])))
    png, evals = _learning_curve_png(directory)
    caption = "Learning curve: training episode returns and validation returns against timesteps"
    if png is not None:
        section.figures.append((caption, _img(png, caption)))
    elif (directory / "curve.png").is_file():
        section.figures.append((caption + " (curve.png)", _img((directory / "curve.png").read_bytes(), caption)))
    else:
        section.notes.append(
            "no learning curve: no monitor/ or eval/evaluations.npz data (or no matplotlib) and no curve.png"
        )
    if not evals.empty:
        section.tables.append(("Validation returns (eval/evaluations.npz)", frame_table(evals)))
    for path in _evaluation_csvs(directory):
        section.tables.append((f"Evaluation ({path.name})", frame_table(_read_csv(path, directory))))
    shown = {k: v for k, v in config.items() if k != "policy_sha256"}
    section.appendix.append(
        (
            "Training configuration (config.json)",
            _pairs_table(
                ((k, json.dumps(v) if isinstance(v, (list, dict)) else str(v)) for k, v in shown.items()), "config"
            ),
        )
    )
    return section


SECTIONS = {"run": run_section, "comparison": comparison_section, "agent": agent_section}


# --- the page ------------------------------------------------------------------------------

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: #1a1a1a; background: #ffffff; margin: 2em auto; max-width: 1150px; padding: 0 1em; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.3em; border-bottom: 3px solid #0072B2; padding-bottom: 0.2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.4em; }
p.meta, p.note { color: #444; font-size: 0.9em; }
p.note { border-left: 4px solid #E69F00; padding-left: 0.6em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.4em 0 1em; }
th, td { border: 1px solid #d0d0d6; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
thead th { background: #eef3f8; }
tbody th { background: #f6f6f8; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
div.scroll { overflow-x: auto; }
figure { margin: 1em 0 1.6em; }
figure img, figure svg { max-width: 100%; height: auto; border: 1px solid #e4e4e8; }
figcaption { font-size: 0.9em; color: #333; margin-top: 0.3em; }
ul.toc { font-size: 0.95em; }
span.swatch { display: inline-block; width: 1.1em; height: 0.9em; border: 1px solid #999; vertical-align: middle;
              margin: 0 0.3em 0 0.8em; }
"""

#: Marks how many of the page's images the browser decoded; the page reads the same without it.
SCRIPT = """
window.addEventListener("load", function () {
  var images = document.images, decoded = 0;
  for (var i = 0; i < images.length; i++) {
    if (images[i].complete && images[i].naturalWidth > 0) { decoded++; }
  }
  document.documentElement.setAttribute("data-images-decoded", String(decoded));
  document.documentElement.setAttribute("data-images-total", String(images.length));
});
"""


def _palette_legend() -> str:
    from .plots import TIER_COLOURS

    swatches = "".join(
        f'<span class="swatch" style="background:{c}"></span>{_esc(t)} tier' for t, c in TIER_COLOURS.items()
    )
    return (
        f'<p class="meta">Placement tiers, in every figure and in the environments\' frames: {swatches}. '
        f"Colours: Okabe &amp; Ito's colour-blind-safe palette; heat maps use cividis.</p>"
    )


def _section_html(index: int, section: Section) -> str:
    parts = [
        f'<section id="s{index}" data-kind="{section.kind}">',
        f"<h2>{_esc(section.title)}</h2>",
        f'<p class="meta">Directory: <code>{_esc(section.directory)}</code> ({section.kind})</p>',
        "<h3>Settings</h3>",
        _pairs_table(section.settings, "settings"),
    ]
    for note in section.notes:
        parts.append(f'<p class="note">{_esc(note)}</p>')
    for caption, table in section.tables:
        parts += [f"<h3>{_esc(caption)}</h3>", f'<div class="scroll">{table}</div>']
    for caption, image in section.figures:
        parts.append(f"<figure>{image}<figcaption>{_esc(caption)}</figcaption></figure>")
    for caption, table in section.appendix:
        parts += [f"<h3>{_esc(caption)}</h3>", f'<div class="scroll">{table}</div>']
    parts.append("</section>")
    return "\n".join(parts)


def build_report(directories: Sequence[str | Path], title: str | None = None) -> str:
    """The HTML page of ``directories`` (each a run, comparison or agent directory, see the
    module's docstring); a :class:`ReportError` naming the first that is none of them."""
    import dallygym

    if not directories:
        raise ReportError("report needs at least one directory")
    dirs = [Path(d) for d in directories]
    kinds = [classify(d) for d in dirs]  # every directory checked before any work
    sections = [SECTIONS[kind](d) for kind, d in zip(kinds, dirs)]
    title = title or "dallygym report: " + ", ".join(d.name or str(d) for d in dirs)
    versions = f"dallygym {dallygym.__version__}, Python {platform.python_version()}, pandas {pd.__version__}"
    try:
        import matplotlib

        versions += f", matplotlib {matplotlib.__version__}"
    except ImportError:
        pass
    toc = "".join(f'<li><a href="#s{i}">{_esc(s.title)}</a></li>' for i, s in enumerate(sections))
    body = "\n".join(_section_html(i, s) for i, s in enumerate(sections))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="dallygym {_esc(dallygym.__version__)}">\n'
        f"<title>{_esc(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{_esc(title)}</h1>\n"
        f'<p class="meta" id="version">Made by <code>dallygym report</code> ({_esc(versions)}).</p>\n'
        f'{_palette_legend()}\n<ul class="toc">{toc}</ul>\n{body}\n'
        f"<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )


def write_report(directories: Sequence[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Write :func:`build_report` to ``out`` (its parent directory created if needed)."""
    page = build_report(directories, title)
    path = Path(out)
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    return path
