"""NQ/HotpotQA-style QA files become tasks with their gold answers."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from toolgym.envs.qa_tasks import qa_source
from toolgym.envs.task_files import FieldMap


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_search_r1_files(tmp_path):
    rows = [
        {"id": "train_0", "question": "who wrote it?", "golden_answers": ["Ann Lee", "A. Lee"], "extra": 1},
        {"id": "train_1", "question": "when?", "golden_answers": ["1843"]},
    ]
    source = qa_source(_write_jsonl(tmp_path / "nq.jsonl", rows))
    task = source.get("train_0")
    assert (task.prompt, task.answer, task.source) == ("who wrote it?", "Ann Lee", "nq")
    assert task.data == {"golden_answers": ["Ann Lee", "A. Lee"]}  # other columns are not copied
    assert len(source) == 2


def test_hotpotqa_files_with_a_field_map(tmp_path):
    rows = [{"_id": "5a8b", "question": "Which city?", "answer": "Velmorath", "level": "hard"}]
    fields = FieldMap(prompt="question", answer="answer", id="_id", data=["level"])
    task = qa_source(_write_jsonl(tmp_path / "hotpot.jsonl", rows), fields).get("5a8b")
    assert task.answer == "Velmorath" and task.data == {"level": "hard", "golden_answers": ["Velmorath"]}


def test_parquet_files_and_rows_without_ids(tmp_path):
    table = pa.table({"question": ["q one", "q two"], "golden_answers": [["a"], ["b", "c"]]})
    pq.write_table(table, tmp_path / "test.parquet")
    source = qa_source(tmp_path / "test.parquet")
    assert source.get("test/1").data["golden_answers"] == ["b", "c"]


def test_rows_without_gold_answers_are_an_error(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [{"id": "x", "question": "q", "answer": "a"}])
    with pytest.raises(ValueError, match="task 'x' has no gold answers in column 'golden_answers'"):
        qa_source(path)
