"""TREC run and qrels files: exact round trips, and errors that name the file and the line."""

from __future__ import annotations

import pytest

from dualview_core.data.sources import SourceError
from dualview_core.data.trec import TrecFormatError, read_qrels, read_run, write_qrels, write_run


def write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_run_round_trips_exactly_in_trec_eval_order(tmp_path):
    run = {"q2": {"d1": 0.1}, "q1": {"a": 0.5, "b": 0.5, "c": 0.7071067690849304, "d": -1e-9}}
    path = str(tmp_path / "run.trec")
    write_run(path, run, tag="sys")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert lines[:4] == ["q1 Q0 c 1 0.7071067690849304 sys", "q1 Q0 b 2 0.5 sys", "q1 Q0 a 3 0.5 sys", "q1 Q0 d 4 -1e-09 sys"]
    assert read_run(path) == run  # floats come back bit for bit


def test_qrels_round_trip_and_beir_tsv(tmp_path):
    qrels = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
    path = str(tmp_path / "qrels.txt")
    write_qrels(path, qrels)
    assert read_qrels(path) == qrels
    beir = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0.0\n")
    assert read_qrels(beir) == {"q1": {"d1": 1, "d2": 0}}


@pytest.mark.parametrize(
    "text, message",
    [
        ("q1 Q0 d1 1 0.5 run\nq1 Q0 d2 2 0.4\n", ":2: expected 6 columns"),
        ("q1 Q0 d1 1 0.5 run\n\nq1 Q0 d2 2 high run\n", ":3: score 'high' is not a number"),
        ("q1 Q0 d1 1 nan run\n", ":1: score 'nan' is not finite"),
        ("q1 Q0 d1 first 0.5 run\n", ":1: rank 'first' is not an integer"),
        ("q1 Q0 d1 1 0.5 run\nq1 Q0 d1 2 0.4 run\n", ":2: document 'd1' repeats for query 'q1'"),
        ("q1 Q0 d1 1 0.5 run\nq9 Q0 d1 1 0.5 run\n", ":2: unknown query id 'q9' (not in qrels.txt)"),
        ("\n\n", ": empty run"),
    ],
)
def test_malformed_runs_name_file_and_line(tmp_path, text, message):
    path = write(tmp_path / "run.trec", text)
    with pytest.raises(TrecFormatError) as err:
        read_run(path, known_queries={"q1"}, known_label="qrels.txt")
    assert str(err.value).startswith(path) and message in str(err.value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("q1 0 d1 1\nq1 0 d2\n", ":2: expected 4 columns"),
        ("q1 0 d1 1\nq1 0 d2 yes\n", ":2: relevance 'yes' is not a number"),
        ("q1 0 d1 0.5\n", ":1: relevance '0.5' is not an integer"),
        ("q1 0 d1 1\nq1 0 d1 0\n", ":2: document 'd1' judged twice for query 'q1'"),
        ("q1 0 d1 1 extra columns\n", ":1: expected 4 columns"),
    ],
)
def test_malformed_qrels_name_file_and_line(tmp_path, text, message):
    path = write(tmp_path / "qrels.txt", text)
    with pytest.raises(TrecFormatError) as err:
        read_qrels(path)
    assert str(err.value).startswith(path) and message in str(err.value)


def test_unreadable_files_are_source_errors(tmp_path):
    with pytest.raises(SourceError, match="no such file"):
        read_run(str(tmp_path / "missing.trec"))
    (tmp_path / "bin.trec").write_bytes(b"\xff\xfe q1")
    with pytest.raises(SourceError, match="not UTF-8"):
        read_qrels(str(tmp_path / "bin.trec"))


def test_write_refuses_ids_that_would_break_columns(tmp_path):
    with pytest.raises(ValueError, match="whitespace"):
        write_run(str(tmp_path / "r"), {"q 1": {"d": 1.0}})
    with pytest.raises(ValueError, match="whitespace"):
        write_run(str(tmp_path / "r"), {"q1": {"d\t2": 1.0}})
