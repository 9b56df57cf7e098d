"""The shipped real traces (traces/README.md): each is what its documented command makes.

Regeneration needs the public source files (../shared/traces/ next to the repository, or the
directory named by DALLYGYM_PUBLIC_TRACES); without them those tests are skipped and the
committed files are only checked against their recorded checksums.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dallygym.experiments.cli import main
from dallygym.sim.latency import get_latency_model
from dallygym.sim.trace import best_speed_factors, load_trace, sha256_of, shipped_traces
from dallygym.sim.trace.importers import DEFAULT_IMPORT_CLUSTER
from dallygym.sim.trace.real import IMPORTED_MANIFEST, REAL_TRACES, regenerate_real

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "traces"
PUBLIC = Path(os.environ.get("DALLYGYM_PUBLIC_TRACES", REPO.parent / "shared" / "traces"))
needs_public = pytest.mark.skipif(
    not (PUBLIC / "philly" / "philly.csv").is_file(), reason=f"public traces not found in {PUBLIC}"
)


@pytest.fixture(scope="module")
def manifest():
    return json.loads((TRACES / IMPORTED_MANIFEST).read_text())


@pytest.mark.parametrize("trace", REAL_TRACES, ids=lambda t: t.name)
def test_every_real_trace_is_shipped_and_recorded(trace, manifest):
    assert trace.name in shipped_traces()
    entry = manifest["traces"][trace.name]
    assert sha256_of(TRACES / entry["file"]) == entry["sha256"]
    assert entry["durations"] == "wall"
    assert entry["command"] == trace.command()
    assert entry["rows_kept"] == len(load_trace(trace.name)) == entry["stats"]["jobs"]


def test_shipped_real_traces_are_small(manifest):
    total = sum((TRACES / e["file"]).stat().st_size for e in manifest["traces"].values())
    assert total < 2_000_000


@needs_public
def test_the_documented_commands_give_the_committed_files(tmp_path, manifest):
    fresh = regenerate_real(PUBLIC, tmp_path)
    assert json.loads(json.dumps(fresh)) == manifest
    assert (tmp_path / IMPORTED_MANIFEST).read_bytes() == (TRACES / IMPORTED_MANIFEST).read_bytes()
    for entry in manifest["traces"].values():
        assert sha256_of(tmp_path / entry["file"]) == entry["sha256"]


@needs_public
def test_tiresias_60_jobs_alone_take_their_recorded_durations():
    # Each job's ideal run time over its speed factor at the best placement is the recorded
    # duration (the wall reading), for all 60 jobs of the shipped file.
    source = pd.read_csv(PUBLIC / "tiresias" / "60_job.csv").set_index("job_id")
    frame = load_trace("tiresias-60")
    speed, _ = best_speed_factors(
        frame["model"].to_numpy(),
        frame["num_gpus"].to_numpy(),
        DEFAULT_IMPORT_CLUSTER,
        get_latency_model("dally-paper"),
    )
    alone = frame["total_iterations"] * frame["iter_time_s"] / speed
    recorded = source.loc[frame["job_id"], "duration"].to_numpy(dtype=float)
    np.testing.assert_allclose(alone.to_numpy(), recorded, rtol=1e-12)
    assert (speed < 1).sum() > 0  # multi-GPU jobs: the reading matters


def test_trace_list_shows_the_real_traces_with_their_source(capsys):
    assert main(["trace", "list"]) == 0
    out = capsys.readouterr().out
    for trace in REAL_TRACES:
        line = next(line for line in out.splitlines() if line.split()[0] == trace.name)
        assert trace.note in line
    assert "generated: batch-500 v1, seed 0" in out
