"""Tasks from NQ/HotpotQA-style QA files: a question and its gold answers per row.

Search-R1's processed files (``nq``, ``hotpotqa``, …) have ``question`` and ``golden_answers`` (a list); the
original HotpotQA has ``answer`` (a string) and ``_id``. Either works: pass a ``FieldMap`` naming the columns.
Pair the tasks with the corpus they were written against (``corpus=``/``index=`` of the Search envs) or with a
retriever service (``retriever=URL``), since the answers are only findable there.
"""

from __future__ import annotations

from pathlib import Path

from toolgym.core.task import RowSource, Task
from toolgym.envs.task_files import (
    FieldMap,
    LazyFileSource,
    file_columns,
    is_verl_layout,
    read_task_file,
    verl_file_source,
)
from toolgym.rewards.qa import golden_answers

#: Search-R1's columns; other columns are not copied into the tasks (``FieldMap(data=None)`` keeps them all).
QA_FIELDS = FieldMap(prompt="question", answer="golden_answers", id="id", data=())


def qa_source(path: str | Path, fields: FieldMap = QA_FIELDS) -> RowSource:
    """QA tasks from a ``.jsonl``/``.parquet`` file or a dataset directory.

    Each task's ``answer`` is its first gold answer and ``data["golden_answers"]`` all of them (what
    ``QAVerifier`` checks). A row without gold answers is an error naming the row, not a silently unanswerable
    task.
    """

    def with_golds(task: Task) -> Task:
        golds = golden_answers(task)
        if not golds:
            raise ValueError(
                f"{path}: task {task.id!r} has no gold answers in column {fields.answer!r}; "
                "pass fields=FieldMap(prompt=..., answer=...) naming the answer column"
            )
        return task.model_copy(update={"answer": golds[0], "data": {**task.data, "golden_answers": golds}})

    path = Path(path)
    if path.is_file():
        columns = file_columns(path)
        if is_verl_layout(columns) and fields.prompt not in columns:  # verl rows without a question column

            def verl_golds(task: Task) -> Task:
                golds = task.answer if isinstance(task.answer, list) else [task.answer]
                golds = [str(g) for g in golds if str(g).strip()]
                return with_golds(task.model_copy(update={"data": {**task.data, "golden_answers": golds}}))

            return verl_file_source(path).map(verl_golds)
    return read_task_file(path, fields).map(with_golds)


def lazy_qa_source(path: str | Path, fields: FieldMap = QA_FIELDS) -> LazyFileSource:
    """``qa_source`` read on the first draw, once per process (``shared_file_source``): what Search-v0
    holds for ``tasks=PATH``."""
    path = Path(path)
    return LazyFileSource(path, "qa", lambda p: qa_source(p, fields), fields=fields.model_dump())
