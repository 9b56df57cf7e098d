"""`dallygym report`: one self-contained HTML page of runs, comparisons and trained agents."""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402

import dallygym  # noqa: E402
from dallygym.experiments import report  # noqa: E402
from dallygym.experiments.cli import main  # noqa: E402
from dallygym.sim.cluster import ClusterSpec  # noqa: E402
from dallygym.sim.metrics import SUMMARY_KEYS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AGENT = ROOT / "agents" / "runs" / "ppo-hidden"
MAX_REPORT_BYTES = 2 * 1024 * 1024


class _Page(HTMLParser):
    """The parts of a report page the tests read: sections, cells, images, scripts, links."""

    def __init__(self):
        super().__init__()
        self.sections: list[dict] = []
        self.images: list[str] = []
        self.scripts: list[dict] = []
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self._table: str | None = None
        self._row: list | None = None
        self._cell: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if key in a:
                self.links.append((tag, key, a[key]))
        if tag == "section":
            self.sections.append({"kind": a.get("data-kind"), "tables": {}, "images": []})
        elif tag == "img":
            self.images.append(a["src"])
            if self.sections:
                self.sections[-1]["images"].append(a["src"])
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "table":
            self._table = a.get("data-table") or f"table{len(self.sections[-1]['tables'])}"
            self.sections[-1]["tables"][self._table] = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = {"column": a.get("data-column"), "value": a.get("data-value"), "text": ""}

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.sections[-1]["tables"][self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def _png(src: str) -> np.ndarray:
    """A data: URI's PNG, decoded (raises if it is not one)."""
    prefix = "data:image/png;base64,"
    assert src.startswith(prefix)
    data = base64.b64decode(src[len(prefix) :], validate=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return mpimg.imread(io.BytesIO(data), format="png")


def _pairs(rows) -> dict[str, str]:
    return {row[0]["text"]: row[1]["text"] for row in rows}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "sim"
    assert (
        main(
            [
                "simulate",
                "--policy",
                "dally",
                "--racks",
                "1",
                "--trace",
                "small",
                "--out",
                str(out),
                "--no-progress",
                "--format",
                "csv",
            ]
        )
        == 0
    )
    return out


@pytest.fixture(scope="module")
def cmp_dir(tmp_path_factory) -> Path:
    """The comparison of the issue's example: three policies on batch-500 at 8 racks."""
    out = tmp_path_factory.mktemp("cmp") / "cmp"
    assert (
        main(
            [
                "compare",
                "--policies",
                "dally",
                "tiresias",
                "gandiva",
                "--racks",
                "8",
                "--trace",
                "batch-500",
                "--out",
                str(out),
                "--quiet",
                "--format",
                "csv",
            ]
        )
        == 0
    )
    return out


@pytest.fixture(scope="module")
def agent_dir(tmp_path_factory) -> Path:
    """A committed training run's config, meta, monitor logs and evaluations, plus an evaluation CSV."""
    out = tmp_path_factory.mktemp("agent") / "ppo-hidden"
    out.mkdir()
    for name in ("config.json", "meta.json"):
        shutil.copy(AGENT / name, out / name)
    for name in ("monitor", "eval"):
        shutil.copytree(AGENT / name, out / name)
    rows = [
        {
            "agent": str(out),
            "trace": f"batch-500-seed{s}",
            **{k: float(i + 1) * 1000 + s for i, k in enumerate(SUMMARY_KEYS)},
        }
        for s in (1, 2)
    ]
    pd.DataFrame(rows).to_csv(out / "evaluation.csv", index=False)
    return out


def _report(capsys, tmp_path, *dirs, name="r.html") -> tuple[str, _Page]:
    out = tmp_path / name
    assert main(["report", *map(str, dirs), "--html", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    text = out.read_text(encoding="utf-8")
    return text, _parse(text)


def test_run_report_holds_the_summary_numbers_and_the_figures(run_dir, tmp_path, capsys):
    text, page = _report(capsys, tmp_path, run_dir)
    (section,) = page.sections
    assert section["kind"] == "run"
    summary = pd.read_csv(run_dir / "summary.csv").iloc[0]
    cells = {row[1]["column"]: row[1] for row in section["tables"]["summary"]}
    assert set(cells) == set(SUMMARY_KEYS)
    for key in SUMMARY_KEYS:
        assert float(cells[key]["value"]) == float(summary[key]), key
    # Seconds read in hours, shares in percent.
    assert cells["makespan_s"]["text"] == f"{summary['makespan_s'] / 3600:,.2f} h"
    assert cells["utilization"]["text"] == f"{100 * summary['utilization']:.1f} %"
    # The four figures simulate drew, embedded byte for byte and decodable.
    assert len(section["images"]) == 4
    for src, stem in zip(section["images"], report.RUN_FIGURE_CAPTIONS):
        assert base64.b64decode(src.split(",", 1)[1]) == (run_dir / f"{stem}.png").read_bytes()
        image = _png(src)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    # Settings: as simulate --out recorded them (settings.json).
    settings = _pairs(section["tables"]["settings"])
    assert set(settings) >= {"trace", "cluster", "policy", "profile"}
    assert settings["cluster"] == "1 racks × 8 machines × 8 GPUs (64 GPUs)"
    assert settings["trace"] == "small" and settings["profile"] == "default"
    # Without settings.json, what the tables tell, said as such.
    bare_dir = tmp_path / "bare"
    shutil.copytree(run_dir, bare_dir)
    (bare_dir / "settings.json").unlink()
    _, bare = _report(capsys, tmp_path, bare_dir, name="bare.html")
    settings = _pairs(bare.sections[0]["tables"]["settings"])
    assert settings["cluster"].startswith("64 GPUs")
    assert "60 jobs" in settings["trace"] and report.NOT_RECORDED in settings["profile"]
    assert f"dallygym {dallygym.__version__}" in text


def test_comparison_report_has_the_table_and_figure_and_stays_small(cmp_dir, tmp_path, capsys):
    text, page = _report(capsys, tmp_path, cmp_dir)
    assert len(text.encode()) <= MAX_REPORT_BYTES
    (section,) = page.sections
    assert section["kind"] == "comparison"
    frame = pd.read_csv(cmp_dir / "comparison.csv")
    (table,) = [rows for name, rows in section["tables"].items() if name not in ("settings",)]
    header, *rows = table
    assert [h["text"] for h in header][:2] == ["policy", "makespan (h)"]
    assert [r[0]["text"] for r in rows] == ["dally", "tiresias", "gandiva"]
    for row, (_, expected) in zip(rows, frame.iterrows()):
        for cell in row[1:]:
            assert float(cell["value"]) == float(expected[cell["column"]]), cell["column"]
    (src,) = section["images"]
    assert base64.b64decode(src.split(",", 1)[1]) == (cmp_dir / "comparison.png").read_bytes()
    assert _png(src).shape[1] > 500
    assert _pairs(section["tables"]["settings"])["policy"] == "dally, tiresias, gandiva"


def test_agent_report_has_the_curve_config_and_evaluations(agent_dir, tmp_path, capsys):
    _, page = _report(capsys, tmp_path, agent_dir)
    (section,) = page.sections
    assert section["kind"] == "agent"
    tables = section["tables"]
    config = _pairs(tables["config"])
    assert config["env_id"] == "Dally-v0" and config["trace"] == "gen:batch-500" and config["racks"] == "8"
    settings = _pairs(tables["settings"])
    assert settings["trace"] == "gen:batch-500"
    assert settings["cluster"] == "8 racks × 8 machines × 8 GPUs (512 GPUs)"
    assert settings["policy"].startswith("learned (Dally-v0, observation hidden")
    assert settings["meta: timesteps"] == "1,003,520"
    # The learning curve is drawn from monitor/ and eval/ (not the committed curve.png, absent here).
    (src,) = section["images"]
    assert _png(src).shape[0] > 200
    # Validation returns: the mean over the evaluation episodes of evaluations.npz, exactly.
    data = np.load(agent_dir / "eval" / "evaluations.npz")
    header, *rows = next(t for t in tables.values() if t and t[0][0]["text"] == "timesteps")
    assert [h["text"] for h in header] == ["timesteps", "mean_return"]
    assert [int(r[0]["value"]) for r in rows] == data["timesteps"].tolist()
    np.testing.assert_array_equal([float(r[1]["value"]) for r in rows], data["results"].mean(axis=1))
    # The evaluation CSV's rows.
    evaluation = pd.read_csv(agent_dir / "evaluation.csv")
    header, *rows = next(t for t in tables.values() if t and t[0][0]["text"] == "agent")
    assert len(rows) == len(evaluation) == 2
    for row, (_, expected) in zip(rows, evaluation.iterrows()):
        values = {c["column"]: c for c in row}
        assert values["trace"]["text"] == expected["trace"]
        for key in SUMMARY_KEYS:
            assert float(values[key]["value"]) == float(expected[key])


def test_several_directories_one_page_self_contained(run_dir, cmp_dir, agent_dir, tmp_path, capsys):
    text, page = _report(capsys, tmp_path, cmp_dir, run_dir, agent_dir)
    assert [s["kind"] for s in page.sections] == ["comparison", "run", "agent"]
    assert len(page.images) == 1 + 4 + 1
    for src in page.images:
        _png(src)
    # Nothing fetched: every src is a data: URI, every href an anchor of the page, no stylesheet
    # or script file, no CSS url().
    assert page.links and all(v.startswith("data:") if k == "src" else v.startswith("#") for _, k, v in page.links)
    assert all("src" not in s for s in page.scripts) and len(page.scripts) <= 1
    assert "<link" not in text and "url(" not in text and "@import" not in text
    assert not re.search(r"https?://(?!www\.w3\.org/)", text)  # SVG namespaces only, if any
    # The same directories give the same bytes (no date in the page).
    again = tmp_path / "again.html"
    report.write_report([cmp_dir, run_dir, agent_dir], again)
    assert again.read_text(encoding="utf-8") == text


def test_recorded_settings_are_shown(run_dir, tmp_path, capsys):
    copy = tmp_path / "sim"
    shutil.copytree(run_dir, copy)
    report.write_settings(
        copy, trace="small", cluster=ClusterSpec(racks=1), policy="dally", profile="paper", lease_s=3600.0
    )
    _, page = _report(capsys, tmp_path, copy)
    settings = _pairs(page.sections[0]["tables"]["settings"])
    assert settings == {
        "trace": "small",
        "cluster": "1 racks × 8 machines × 8 GPUs (64 GPUs)",
        "policy": "dally",
        "profile": "paper",
        "lease_s": "3600.0",
    }


def test_missing_figures_are_drawn_from_the_csvs(run_dir, tmp_path, capsys):
    copy = tmp_path / "sim"
    shutil.copytree(run_dir, copy)
    for path in copy.glob("*.png"):
        path.unlink()
    text, page = _report(capsys, tmp_path, copy)
    # Three figures come back from jobs.csv and timeline.csv; the occupancy chart needs the
    # placements, which simulate --out does not write, and the page says so.
    assert len(page.images) == 3
    for src in page.images:
        assert _png(src).shape[0] > 100
    assert "occupancy: no occupancy.png and no placements.csv" in text


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: d, "not a run, comparison or agent directory"),
        (lambda d: d / "missing", "no such directory"),
        (lambda d: (d / "file.txt").write_text("x") and d / "file.txt", "not a directory"),
        (lambda d: (d / "summary.csv").write_text("makespan_s\n") and d, "not a run, comparison or agent directory"),
    ],
    ids=["empty", "missing", "file", "half-a-run"],
)
def test_a_directory_of_no_known_kind_is_named(make, words, run_dir, tmp_path, capsys):
    bad_root = tmp_path / "bad"
    bad_root.mkdir()
    bad = make(bad_root)
    out = tmp_path / "r.html"
    assert main(["report", str(run_dir), str(bad), "--html", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dallygym: error: ") and str(bad) in err and words in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_an_unreadable_summary_is_named(run_dir, tmp_path, capsys):
    copy = tmp_path / "sim"
    shutil.copytree(run_dir, copy)
    (copy / "summary.csv").write_text("")
    assert main(["report", str(copy), "--html", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert str(copy) in err and "summary.csv" in err


# --- a real browser --------------------------------------------------------------------------

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
)


def _chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        if os.environ.get("DALLYGYM_REQUIRE_BROWSER") == "1":
            pytest.fail("DALLYGYM_REQUIRE_BROWSER=1 but no chromium on PATH (apt-get install chromium)")
        pytest.skip("chromium not installed (set DALLYGYM_REQUIRE_BROWSER=1 to make this a failure)")
    return path


def _browse(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    profile.mkdir()
    return subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_report_in_headless_chromium(run_dir, cmp_dir, agent_dir, tmp_path):
    chromium = _chromium()
    page = report.write_report([cmp_dir, run_dir, agent_dir], tmp_path / "report.html")
    url = page.resolve().as_uri()
    n_images = len(_parse(page.read_text(encoding="utf-8")).images)

    # The DOM after load: the page's inline script marks how many images the browser decoded.
    dom = _browse(chromium, tmp_path / "profile-dom", "--virtual-time-budget=10000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    marks = re.search(r'<html[^>]*data-images-decoded="(\d+)"[^>]*data-images-total="(\d+)"', dom.stdout)
    assert marks, dom.stdout[:500]
    assert int(marks.group(1)) == int(marks.group(2)) == n_images == 6
    # Console messages (console.error, uncaught exceptions) are logged as "CONSOLE" lines; the
    # page writes none.
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console

    shot = tmp_path / "shot.png"
    run = _browse(chromium, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1200,2000", url)
    assert run.returncode == 0, run.stderr[-2000:]
    assert not [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    pixels = mpimg.imread(shot)[..., :3]
    assert pixels.shape[:2] == (2000, 1200)
    non_white = float((pixels < 0.94).any(axis=2).mean())
    assert non_white > 0.05, non_white  # text, tables and the comparison figure, not a blank page
    # The first figure (the comparison) is on screen: pixels of its series colours are there.
    blue = np.array([0x00, 0x72, 0xB2]) / 255
    assert (np.abs(pixels - blue).max(axis=2) < 0.05).sum() > 500
