import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from toolgym.core.task import ListSource, ProceduralSource, Task
from toolgym.envs.task_files import FieldMap, hf_source, jsonl_source, load_tasks, parquet_source

ROWS = [
    {"question": "What is 2+3?", "gold": 5, "difficulty": "easy", "qid": "a"},
    {"question": "What is 7*6?", "gold": 42, "difficulty": "hard", "qid": "b"},
]
FIELDS = FieldMap(prompt="question", answer="gold", id="qid")


def _square_task(seed: int) -> Task:
    return Task(id="ignored", prompt=f"Square {seed}", answer=seed * seed)


def test_procedural_source_ids_rebuild_the_same_task():
    source = ProceduralSource("squares", _square_task)
    task = source.task_for_seed(12)
    assert task.id == "squares/12" and task.answer == 144 and task.source == "squares"
    assert source.get("squares/12") == task
    assert [t.answer for t in source.take(3, start=2)] == [4, 9, 16]


@pytest.mark.parametrize("bad", ["squares/x", "other/3", "12", "squares/-1"])
def test_procedural_source_rejects_foreign_ids(bad):
    with pytest.raises(KeyError, match="squares/<seed>"):
        ProceduralSource("squares", _square_task).get(bad)


def test_procedural_sampling_uses_only_the_given_rng():
    source = ProceduralSource("squares", _square_task)
    a = [source.sample(np.random.default_rng(7)).id for _ in range(3)]
    b = [source.sample(np.random.default_rng(7)).id for _ in range(3)]
    assert a == b
    rng = np.random.default_rng(1)
    drawn = {source.sample(rng).id for _ in range(20)}
    assert len(drawn) > 15
    with pytest.raises(TypeError):
        len(source)
    assert source.describe() == "squares (procedural)"


def test_list_source_lookup_and_errors():
    tasks = [Task(id="x", prompt="p"), Task(id="y", prompt="q")]
    source = ListSource(tasks, name="mine")
    assert len(source) == 2 and source.get("y").prompt == "q"
    assert source.describe() == "mine (2 tasks)"
    with pytest.raises(KeyError, match="no task with id 'z'"):
        source.get("z")
    with pytest.raises(ValueError, match="two tasks with id 'x'"):
        ListSource([tasks[0], tasks[0]])
    with pytest.raises(ValueError, match="empty"):
        ListSource([])


def test_task_is_frozen_and_strict():
    task = Task(id="t", prompt="p")
    with pytest.raises(ValidationError):
        task.prompt = "other"
    with pytest.raises(ValidationError):
        Task(id="t", prompt="p", unknown_field=1)


def _check_rows(source):
    assert [t.id for t in source] == ["a", "b"]
    first = source.get("a")
    assert first.prompt == "What is 2+3?" and first.answer == 5
    assert first.data == {"difficulty": "easy"}


def test_jsonl_source(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    _check_rows(jsonl_source(path, FIELDS))
    assert [t.id for t in load_tasks(path, FIELDS)] == ["a", "b"]


def test_jsonl_source_reports_the_bad_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    source = jsonl_source(path, FIELDS)  # rows are parsed when drawn: the first one at load
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        source.task_at(1)
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="expected a JSON object"):
        jsonl_source(path, FIELDS)


def test_missing_prompt_column_names_the_columns(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n")
    with pytest.raises(KeyError, match="no 'prompt' column"):
        jsonl_source(path)


def test_rows_without_ids_get_index_ids(tmp_path):
    path = tmp_path / "noid.jsonl"
    path.write_text(json.dumps({"prompt": "p1"}) + "\n" + json.dumps({"prompt": "p2"}) + "\n")
    assert [t.id for t in jsonl_source(path)] == ["noid/0", "noid/1"]


def test_parquet_source(tmp_path):
    path = tmp_path / "tasks.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    _check_rows(parquet_source(path, FIELDS))
    _check_rows(load_tasks(path, FIELDS))


def test_hf_sources_object_dict_and_disk(tmp_path):
    import datasets  # the 'datasets' extra: a core-only run skips this test alone

    ds = datasets.Dataset.from_list(ROWS)
    _check_rows(hf_source(ds, FIELDS))
    dd = datasets.DatasetDict({"test": ds})
    _check_rows(hf_source(dd, FIELDS, split="test"))
    with pytest.raises(KeyError, match="split 'train' not in dataset"):
        hf_source(dd, FIELDS)
    ds.save_to_disk(str(tmp_path / "saved"))
    _check_rows(hf_source(tmp_path / "saved", FIELDS))
    _check_rows(load_tasks(tmp_path / "saved", FIELDS))


def test_load_tasks_errors(tmp_path):
    missing = load_tasks(tmp_path / "missing.jsonl")  # lazy: nothing is read until a task is drawn
    with pytest.raises(FileNotFoundError, match="no task file or dataset at"):
        len(missing)
    with pytest.raises(FileNotFoundError):
        load_tasks(tmp_path / "missing")  # no suffix and no directory: not a task file at all
    odd = tmp_path / "tasks.txt"
    odd.write_text("x")
    with pytest.raises(ValueError, match="don't know how to read"):
        load_tasks(odd)


def test_eval_split_is_fixed_and_disjoint_from_training_draws():
    source = ProceduralSource("squares", _square_task)
    split = source.eval_tasks(5)
    assert split == source.eval_tasks(5) and len(source.eval_tasks()) == 100
    rng = np.random.default_rng(0)
    train_ids = {source.sample(rng).id for _ in range(1000)}
    assert not train_ids & {t.id for t in source.eval_tasks()}
    tasks = [Task(id=str(i), prompt="p") for i in range(4)]
    assert [t.id for t in ListSource(tasks).eval_tasks(2)] == ["0", "1"]
    assert len(ListSource(tasks).eval_tasks()) == 4
