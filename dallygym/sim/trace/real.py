"""The real traces shipped in ``traces/``: where each comes from and the command that made it.

Each shipped real trace is the output of one ``dallygym trace import`` command run on a public
file (kept unchanged in the project's ``../shared/traces/``; see ``traces/README.md`` for
attribution and licenses). :data:`REAL_TRACES` lists them with that command;
:func:`regenerate_real` runs every command again and writes ``traces/imported.json`` (the
command, the source file's and the output's sha256, the import report's counts and the
statistics), so a test can check that the committed files are exactly what the commands give.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from dallygym.sim.trace.schema import load_trace, sha256_of, shipped_trace_dir, trace_stats

#: File (in a shipped-trace directory) recording the imported traces.
IMPORTED_MANIFEST = "imported.json"

_PHILLY_LICENSE = (
    "Apache-2.0 (Pollux OSDI'21 artifact, petuum/adaptdl); data derived from "
    "Microsoft's Philly traces, CC-BY-4.0 (msr-fiddle/philly-traces)"
)
_GAVEL_LICENSE = "MIT (stanford-futuredata/gavel)"


@dataclass(frozen=True)
class RealTrace:
    """One shipped real trace.

    Attributes:
        name: the shipped name (``traces/<name>.csv``).
        source: the public file, relative to the public-traces directory.
        args: the ``dallygym trace import`` arguments after ``import`` (``{src}`` = the
            public-traces directory, ``{out}`` = the output directory).
        note: one line for ``dallygym trace list``.
        license: license and attribution of the source.
        origin: repository, commit and path the source was copied from.
    """

    name: str
    source: str
    args: tuple[str, ...]
    note: str
    license: str
    origin: str

    def command(self, src: str = "../shared/traces", out: str = "traces") -> str:
        """The command line, as documented (run from the repository root)."""
        words = [w.format(src=src, out=out) for w in self.args]
        return "dallygym trace import " + " ".join(shlex.quote(w) for w in words)


def _gavel(vc: str) -> RealTrace:
    return RealTrace(
        name=f"gavel-{vc}",
        source=f"gavel/{vc}.trace",
        args=(
            "gavel",
            f"{{src}}/gavel/{vc}.trace",
            "--throughputs",
            "{src}/gavel/simulation_throughputs.json",
            "--worker-type",
            "v100",
            "--seed",
            "0",
            "--out",
            f"{{out}}/gavel-{vc}.csv",
        ),
        note=f"real: Gavel Philly-derived VC {vc}, v100 rates (MIT)",
        license=_GAVEL_LICENSE,
        origin=f"stanford-futuredata/gavel @ c4fa4009, scheduler/traces/msr/seed=0/{vc}.trace "
        f"and scheduler/simulation_throughputs.json",
    )


#: The shipped real traces, in the order ``traces/README.md`` lists them.
REAL_TRACES: tuple[RealTrace, ...] = (
    RealTrace(
        name="tiresias-60",
        source="tiresias/60_job.csv",
        args=("tiresias", "{src}/tiresias/60_job.csv", "--seed", "0", "--out", "{out}/tiresias-60.csv"),
        note="real: Tiresias 60_job.csv (Apache-2.0)",
        license="Apache-2.0 (SymbioticLab/Tiresias)",
        origin="SymbioticLab/Tiresias @ 959f9b08, simulator/60_job.csv",
    ),
    _gavel("0e4a51"),
    _gavel("23dbec"),
    _gavel("51b7ef"),
    RealTrace(
        name="philly-ee9e8c-14d",
        source="philly/philly.csv",
        args=(
            "philly",
            "{src}/philly/philly.csv",
            "--cluster",
            "ee9e8c",
            "--start",
            "2017-10-24",
            "--end",
            "2017-11-07",
            "--seed",
            "0",
            "--out",
            "{out}/philly-ee9e8c-14d.csv",
        ),
        note="real: Philly VC ee9e8c, 2017-10-24..11-07 (CC-BY-4.0)",
        license=_PHILLY_LICENSE,
        origin="petuum/adaptdl branch osdi21-artifact @ c793c708, simulator/traces/philly.csv",
    ),
    RealTrace(
        name="philly-48h",
        source="philly/philly.csv",
        args=(
            "philly",
            "{src}/philly/philly.csv",
            "--start",
            "2017-10-05",
            "--end",
            "2017-10-07",
            "--seed",
            "0",
            "--out",
            "{out}/philly-48h.csv",
        ),
        note="real: Philly all VCs, 2017-10-05..07 (CC-BY-4.0)",
        license=_PHILLY_LICENSE,
        origin="petuum/adaptdl branch osdi21-artifact @ c793c708, simulator/traces/philly.csv",
    ),
)


def _rounded(stats: dict) -> dict:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in stats.items()}


def regenerate_real(src_dir: str | Path, out_dir: str | Path) -> dict:
    """Run every :data:`REAL_TRACES` command on the public files in ``src_dir``, writing
    ``<out_dir>/<name>.csv`` and ``<out_dir>/imported.json``; returns that manifest.

    The manifest records, per trace: the documented command, the source (path, origin,
    license, sha256), the output's sha256, the duration reading and cluster used, the import
    report's counts (rows read and kept, dropped by reason, oversize rows, models, Gavel
    throughput fallbacks) and the trace's statistics (:func:`trace_stats`).
    """
    from dallygym.experiments.cli import main  # the documented command is what runs

    src_dir, out_dir = Path(src_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"traces": {}}
    for trace in REAL_TRACES:
        report_path = out_dir / f".{trace.name}.report.json"
        argv = [
            "trace",
            "import",
            *(w.format(src=src_dir, out=out_dir) for w in trace.args),
            "--report",
            str(report_path),
        ]
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = main(argv)
        if status != 0:
            raise RuntimeError(f"importing {trace.name} failed: {err.getvalue().strip()}")
        report = json.loads(report_path.read_text())
        report_path.unlink()
        path = out_dir / f"{trace.name}.csv"
        entry = {
            "file": path.name,
            "sha256": sha256_of(path),
            "command": trace.command(),
            "source": trace.source,
            "source_sha256": sha256_of(src_dir / trace.source),
            "origin": trace.origin,
            "license": trace.license,
            "note": trace.note,
            "durations": report["durations"],
            "cluster": report.get("cluster"),
            "latency": report.get("latency"),
            "seed": report["seed"],
            "rows_read": report["rows_read"],
            "rows_kept": report["rows_kept"],
            "dropped": report["dropped"],
            "oversize_rows": len(report["oversize"]["rows"]),
            "models": report["models"],
            "best_tier": report.get("best_tier"),
            "stats": _rounded(trace_stats(load_trace(path))),
        }
        if "throughputs" in report:
            entry["throughputs"] = {k: v for k, v in report["throughputs"].items() if k != "table"}
        manifest["traces"][trace.name] = entry
    text = json.dumps(manifest, indent=2) + "\n"
    (out_dir / IMPORTED_MANIFEST).write_bytes(text.encode("utf-8"))
    return manifest


def shipped_trace_notes() -> dict[str, str]:
    """A one-line note on where each shipped trace comes from, by name (for ``trace list``)."""
    directory = shipped_trace_dir()
    notes: dict[str, str] = {}
    if directory is None:
        return notes
    generated = directory / "manifest.json"
    if generated.is_file():
        for name, entry in json.loads(generated.read_text()).get("traces", {}).items():
            notes[name] = f"generated: {entry['generator']} v{entry['generator_version']}, seed {entry['seed']}"
    imported = directory / IMPORTED_MANIFEST
    if imported.is_file():
        for name, entry in json.loads(imported.read_text()).get("traces", {}).items():
            notes[name] = entry["note"]
    return notes


__all__ = ["IMPORTED_MANIFEST", "REAL_TRACES", "RealTrace", "regenerate_real", "shipped_trace_notes"]
