"""Importers from public trace formats (SPEC §3).

The small files under tests/data/ have their canonical output worked out by hand below. A
one-model ``model_mix`` makes the drawn models known in advance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dallygym.cluster import ClusterSpec
from dallygym.trace import (
    ITER_TIME_S,
    TRACE_COLUMNS,
    TraceError,
    import_helios,
    import_philly,
    import_tiresias,
    import_trace,
    paper_model_mix,
)

DATA = Path(__file__).parent / "data"
TIRESIAS = DATA / "tiresias_small.csv"
PHILLY = DATA / "philly_small.csv"
HELIOS = DATA / "helios_cluster_log.csv"

TIRESIAS_HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
HELIOS_HEADER = ("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,"
                 "end_time,duration,queue")


def write(tmp_path: Path, header: str, *rows: str, name: str = "in.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def as_rows(frame: pd.DataFrame) -> list[tuple]:
    return [tuple(r) for r in frame[list(TRACE_COLUMNS)].itertuples(index=False)]


# ---------------------------------------------------------------- Tiresias


def test_tiresias_file_becomes_the_hand_worked_canonical_trace():
    # id 4: 500 s / 1000 it = 0.5; id 1: vgg16 mapped to vgg11, 1000 / 200 = 5.0;
    # id 2: "ResNet-18" is a spelling of resnet18, 5 / 10 = 0.5; id 3: "bert-large", 300/100.
    frame = import_tiresias(TIRESIAS, model_map={"vgg16": "vgg11"})
    assert as_rows(frame) == [
        (1, 0.0, 8, "vgg11", 200, 5.0),
        (2, 50.0, 1, "resnet18", 10, 0.5),
        (3, 50.5, 4, "bert_large", 100, 3.0),
        (4, 100.0, 2, "resnet50", 1000, 0.5),
    ]
    report = frame.attrs["import_report"]
    assert report["rows_read"] == report["rows_kept"] == 4
    assert report["models"] == {"as_is": 1, "aliased": 2, "mapped": 1, "drawn": 0}


def test_tiresias_unknown_model_is_drawn_with_the_seed_and_reported():
    frame = import_tiresias(TIRESIAS, seed=3, model_mix={"alexnet": 1.0})
    assert frame.loc[frame["job_id"] == 1, "model"].item() == "alexnet"
    report = frame.attrs["import_report"]
    assert report["models"]["drawn"] == 1
    assert report["models_drawn_for"] == {"vgg16": 1}


def test_tiresias_unknown_model_can_be_an_error_naming_line_and_column():
    with pytest.raises(TraceError) as info:
        import_tiresias(TIRESIAS, unknown_models="error")
    message = str(info.value)
    assert "tiresias_small.csv, line 3, column model_name: unknown model 'vgg16'" in message
    assert "known models" in message


def test_tiresias_model_map_must_point_at_known_models():
    with pytest.raises(TraceError, match="model_map maps to unknown model"):
        import_tiresias(TIRESIAS, model_map={"vgg16": "vgg16"})


def test_tiresias_missing_column_is_named(tmp_path):
    path = write(tmp_path, "job_id,num_gpu,submit_time,model_name,duration", "0,1,0,vgg11,5")
    with pytest.raises(TraceError, match=r"in\.csv, line 1: missing column\(s\) iterations"):
        import_tiresias(path)


@pytest.mark.parametrize(
    "row, words",
    [
        ("0,1,0,0,vgg11,5,0", "line 2, column iterations: must be at least 1, got 0"),
        ("0,1,0,10,vgg11,0,0", "line 2, column duration: must be > 0, got 0"),
        ("0,1.5,0,10,vgg11,5,0", "line 2, column num_gpu: expected a whole number, got 1.5"),
        ("0,1,soon,10,vgg11,5,0", "line 2, column submit_time: expected a number, got 'soon'"),
    ],
)
def test_tiresias_bad_values_are_named(tmp_path, row, words):
    with pytest.raises(TraceError, match=words):
        import_tiresias(write(tmp_path, TIRESIAS_HEADER, row))


def test_tiresias_duplicate_ids_name_both_lines(tmp_path):
    path = write(tmp_path, TIRESIAS_HEADER, "7,1,0,10,vgg11,5,0", "7,1,3,10,vgg11,5,0")
    with pytest.raises(TraceError, match="duplicate job_id 7 on line 2 and line 3"):
        import_tiresias(path)


# ---------------------------------------------------------------- Philly


def test_philly_file_becomes_the_hand_worked_canonical_trace():
    # Arrivals offset from the earliest timestamp (10:00:00, on line 3). ResNet-50 at 0.18 s
    # per iteration: 90 s -> 500 iterations, 3600 s -> 20,000, 45 s -> 250.
    frame = import_philly(PHILLY, model_mix={"resnet50": 1.0})
    assert as_rows(frame) == [
        (0, 0.0, 2, "resnet50", 500, 0.18),
        (1, 30.0, 1, "resnet50", 20000, 0.18),
        (2, 3600.0, 8, "resnet50", 250, 0.18),
    ]
    assert frame.attrs["source_line"] == (3, 2, 4)
    assert frame.attrs["import_report"]["models"] == {"drawn": 3}


def test_philly_numeric_timestamps_are_seconds(tmp_path):
    path = write(tmp_path, PHILLY_HEADER, "1000.5,100,1,100,1", "1000,100,4,400,1")
    frame = import_philly(path, model_mix={"vgg11": 1.0})
    assert frame["arrival_s"].tolist() == [0.0, 0.5]
    assert frame["num_gpus"].tolist() == [4, 1]


def test_philly_iterations_keep_the_recorded_duration_exactly(tmp_path):
    # AlexNet's table time 0.035 s does not divide 90 s: 2571 iterations of 90/2571 s.
    path = write(tmp_path, PHILLY_HEADER, "0,90,1,90,1")
    frame = import_philly(path, model_mix={"alexnet": 1.0})
    assert frame["total_iterations"].item() == round(90 / ITER_TIME_S["alexnet"]) == 2571
    assert frame["iter_time_s"].item() == pytest.approx(90 / 2571, rel=1e-15)


def test_philly_unparsable_timestamp_is_named(tmp_path):
    path = write(tmp_path, PHILLY_HEADER, "2017-10-03 10:00:00,5,1,5,1", "yesterday,5,1,5,1")
    with pytest.raises(TraceError,
                       match="line 3, column timestamp: expected seconds or a date-time"):
        import_philly(path)


def test_philly_zero_gpu_job_is_an_error_not_dropped(tmp_path):
    path = write(tmp_path, PHILLY_HEADER, "0,5,1,5,1", "1,5,0,0,1")
    with pytest.raises(TraceError, match="line 3, column num_gpus: must be at least 1"):
        import_philly(path)


def test_philly_missing_column_is_named(tmp_path):
    path = write(tmp_path, "timestamp,num_gpus", "0,1")
    with pytest.raises(TraceError, match=r"missing column\(s\) duration"):
        import_philly(path)


def test_philly_models_are_seeded_draws_from_the_paper_mix(tmp_path):
    rows = [f"{i},{60 + i},1,{60 + i},1" for i in range(6000)]
    path = write(tmp_path, PHILLY_HEADER, *rows)
    first = import_philly(path, seed=11)
    again = import_philly(path, seed=11)
    other = import_philly(path, seed=12)
    pd.testing.assert_frame_equal(first, again)
    assert not first["model"].equals(other["model"])
    shares = first["model"].value_counts(normalize=True)
    for model, p in paper_model_mix().items():
        assert abs(shares[model] - p) < 0.03


# ---------------------------------------------------------------- Helios


def test_helios_log_keeps_completed_gpu_jobs_as_worked_out_by_hand():
    # Kept: jA (8 GPUs, 3600 s, 00:10), jF (4 GPUs, 600 s, 00:02), jG (1 GPU, 45 s, 00:10).
    # Dropped: jB used no GPU, jC failed, jD was cancelled, jE ran 0 s. Arrivals count from
    # jF, the first kept job; jA and jG tie at 480 s and keep file order.
    frame = import_helios(HELIOS, model_mix={"resnet50": 1.0})
    assert as_rows(frame) == [
        (0, 0.0, 4, "resnet50", 3333, 600 / 3333),
        (1, 480.0, 8, "resnet50", 20000, 0.18),
        (2, 480.0, 1, "resnet50", 250, 0.18),
    ]
    assert frame.attrs["job_id_map"] == ("jF", "jA", "jG")
    report = frame.attrs["import_report"]
    assert report["rows_read"] == 7 and report["rows_kept"] == 3
    assert report["dropped"] == {"not_completed": 2, "no_gpu": 1, "zero_duration": 1}


def test_helios_submit_times_may_be_seconds(tmp_path):
    path = write(tmp_path, HELIOS_HEADER,
                 "7,u,v,2,1,1,COMPLETED,500,0,0,60,0",
                 "8,u,v,1,1,1,COMPLETED,200,0,0,60,0")
    frame = import_helios(path, model_mix={"vgg11": 1.0})
    assert frame["arrival_s"].tolist() == [0.0, 300.0]
    assert frame.attrs["job_id_map"] == ("8", "7")


def test_helios_bad_duration_of_a_kept_job_is_named(tmp_path):
    path = write(tmp_path, HELIOS_HEADER,
                 "a,u,v,2,1,1,COMPLETED,0,0,0,60,0",
                 "b,u,v,2,1,1,COMPLETED,0,0,0,long,0")
    with pytest.raises(TraceError, match="line 3, column duration: expected a number"):
        import_helios(path)


def test_helios_unparsable_gpu_count_is_named(tmp_path):
    path = write(tmp_path, HELIOS_HEADER, "a,u,v,many,1,1,COMPLETED,0,0,0,60,0")
    with pytest.raises(TraceError, match="line 2, column gpu_num: expected a number"):
        import_helios(path)


def test_helios_duplicate_ids_of_kept_jobs_are_named(tmp_path):
    path = write(tmp_path, HELIOS_HEADER,
                 "a,u,v,2,1,1,COMPLETED,0,0,0,60,0",
                 "b,u,v,2,1,1,FAILED,0,0,0,60,0",
                 "a,u,v,2,1,1,COMPLETED,9,0,0,60,0")
    with pytest.raises(TraceError, match="duplicate job_id 'a' on line 2 and line 4"):
        import_helios(path)


def test_helios_log_without_a_kept_job_is_an_error(tmp_path):
    path = write(tmp_path, HELIOS_HEADER, "a,u,v,0,1,1,COMPLETED,0,0,0,60,0")
    with pytest.raises(TraceError, match="no completed GPU job"):
        import_helios(path)


def test_helios_missing_column_is_named(tmp_path):
    path = write(tmp_path, "job_id,gpu_num,submit_time,duration", "a,1,0,60")
    with pytest.raises(TraceError, match=r"line 1: missing column\(s\) state"):
        import_helios(path)


# ---------------------------------------------------------------- common


def test_imported_job_larger_than_the_cluster_names_the_file_line():
    cluster = ClusterSpec(racks=1, machines_per_rack=1, gpus_per_machine=4)
    with pytest.raises(TraceError, match="helios_cluster_log.csv, line 2, column num_gpus: "
                                         "job 1 needs 8 GPUs"):
        import_helios(HELIOS, cluster=cluster)


def test_import_trace_dispatches_by_format():
    by_name = import_trace("tiresias", TIRESIAS, seed=5)
    direct = import_tiresias(TIRESIAS, seed=5)
    pd.testing.assert_frame_equal(by_name, direct)
    assert import_trace("helios", HELIOS).attrs["import_report"]["format"] == "helios"


def test_import_trace_rejects_an_unknown_format_listing_the_known_ones():
    with pytest.raises(TraceError,
                       match="unknown trace format 'alibaba'.*tiresias, philly, helios"):
        import_trace("alibaba", TIRESIAS)


def test_imported_traces_round_trip_through_the_loader(tmp_path):
    from dallygym.trace import load_trace, write_trace

    for frame in (import_tiresias(TIRESIAS), import_philly(PHILLY), import_helios(HELIOS)):
        path = write_trace(frame, tmp_path / "x.csv")
        pd.testing.assert_frame_equal(load_trace(path), frame, check_exact=True)
        assert np.all(frame["iter_time_s"] > 0)
