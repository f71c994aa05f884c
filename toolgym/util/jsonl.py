"""Reading JSON-lines files: lazily, one object a line, a bad line's error naming the file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, lazily; blank lines are skipped and a bad line's error names
    the file and line number."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                yield json_object(line.encode(), path, lineno)


def json_object(line: bytes, path: Path, lineno: int) -> dict[str, Any]:
    """One line's JSON object; an error naming ``path`` and ``lineno`` when it is not valid JSON or not an
    object."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
    return row
