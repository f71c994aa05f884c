"""Tasks from NQ/HotpotQA-style QA files: a question and its gold answers per row.

Search-R1's processed files (``nq``, ``hotpotqa``, …) have ``question`` and ``golden_answers`` (a list); the
original HotpotQA has ``answer`` (a string) and ``_id``. Either works: pass a ``FieldMap`` naming the columns.
Pair the tasks with the corpus they were written against (``corpus=``/``index=`` of the Search envs) or with a
retriever service (``retriever=URL``), since the answers are only findable there.
"""

from __future__ import annotations

from pathlib import Path

from toolgym.core.task import FieldMap, ListSource, load_tasks
from toolgym.rewards.qa import golden_answers

#: Search-R1's columns; other columns are not copied into the tasks (``FieldMap(data=None)`` keeps them all).
QA_FIELDS = FieldMap(prompt="question", answer="golden_answers", id="id", data=())


def qa_source(path: str | Path, fields: FieldMap = QA_FIELDS) -> ListSource:
    """QA tasks from a ``.jsonl``/``.parquet`` file or a dataset directory.

    Each task's ``answer`` is its first gold answer and ``data["golden_answers"]`` all of them (what
    ``QAVerifier`` checks). A row without gold answers is an error naming the row, not a silently unanswerable
    task.
    """
    loaded = load_tasks(path, fields)
    tasks = []
    for task in loaded:
        golds = golden_answers(task)
        if not golds:
            raise ValueError(
                f"{path}: task {task.id!r} has no gold answers in column {fields.answer!r}; "
                "pass fields=FieldMap(prompt=..., answer=...) naming the answer column"
            )
        tasks.append(
            task.model_copy(update={"answer": golds[0], "data": {**task.data, "golden_answers": golds}})
        )
    return ListSource(tasks, name=loaded.name)
