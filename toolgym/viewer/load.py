"""Reading what ``toolgym view`` opens: rollout JSONL, eval reports and training runs' episode dumps.

The three formats are told apart by their content, not their names (a user renames files): a JSON object
with ``pass_at_1`` is an eval report (``EvalReport``), a JSONL line with ``kind`` set to ``DUMP_KIND`` is an
episode dump (``DumpedEpisode``), any other JSONL line must be a ``Trajectory`` (what ``toolgym rollout`` and
``toolgym eval --trajectories`` append). A directory is read file by file (a run's dump directory holds one
file per writing process). Anything else is a ``ValueError`` that says what the file should have been.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from toolgym.core.types import Trajectory
from toolgym.rollout.dump import DUMP_KIND, DumpedEpisode
from toolgym.rollout.evaluate import EvalReport

FORMATS = "rollout JSONL (toolgym rollout --out), an eval report (toolgym eval --out) or an episode dump"


@dataclass
class Episode:
    """One trajectory and where it came from: the training step and whether the loss used it (dumps)."""

    trajectory: Trajectory
    source: str
    step: int | None = None
    trained: bool | None = None


@dataclass
class Loaded:
    """Everything the viewer shows: the episodes, and the eval report when the file was one."""

    path: Path
    kind: str  # rollout | eval | dump
    episodes: list[Episode] = field(default_factory=list)
    report: EvalReport | None = None
    notes: list[str] = field(default_factory=list)


def load(path: str | Path) -> Loaded:
    """Read ``path`` (a file or a directory of dump / rollout files) into ``Loaded``; errors say why."""
    path = Path(path)
    if path.is_dir():
        return _load_dir(path)
    if not path.exists():
        raise FileNotFoundError(f"no file at {path}")
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ValueError(f"{path} is empty; expected {FORMATS}")
    report = _as_report(text)
    if report is not None:
        return _load_report(path, report)
    episodes = _read_jsonl(path, text)
    kind = "dump" if any(e.step is not None for e in episodes) else "rollout"
    return Loaded(path=path, kind=kind, episodes=episodes)


def _load_dir(path: Path) -> Loaded:
    files = sorted(path.glob("*.jsonl"))
    if not files:
        raise ValueError(
            f"{path} is a directory without .jsonl files; expected a run's episode dump directory"
        )
    episodes = [e for f in files if f.stat().st_size for e in _read_jsonl(f, f.read_text(encoding="utf-8"))]
    if not episodes:
        raise ValueError(f"the .jsonl files in {path} are empty")
    kind = "dump" if any(e.step is not None for e in episodes) else "rollout"
    return Loaded(path=path, kind=kind, episodes=episodes)


def _as_report(text: str) -> EvalReport | None:
    """The eval report in ``text``, or None when ``text`` is not a single JSON object with ``pass_at_1``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or "pass_at_1" not in data:
        return None
    try:
        return EvalReport.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"this looks like an eval report but is not a valid one: {exc}") from None


def _load_report(path: Path, report: EvalReport) -> Loaded:
    loaded = Loaded(path=path, kind="eval", report=report)
    if report.trajectories is None:
        loaded.notes.append(
            "the report names no trajectories file: run toolgym eval with --trajectories FILE to see episodes"
        )
        return loaded
    named = Path(report.trajectories)
    beside = path.parent / named.name  # the report and its episodes moved together
    found = next((p for p in (named, beside) if p.is_file()), None)
    if found is None:
        loaded.notes.append(f"the report's trajectories file {named} is not there (nor next to the report)")
        return loaded
    loaded.episodes = _read_jsonl(found, found.read_text(encoding="utf-8"))
    return loaded


def _read_jsonl(path: Path, text: str) -> list[Episode]:
    episodes = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON ({exc.msg}); expected {FORMATS}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{where} is a JSON {type(data).__name__}, not an object; expected {FORMATS}")
        episodes.append(_episode(data, where))
    return episodes


def _episode(data: dict, where: str) -> Episode:
    try:
        if data.get("kind") == DUMP_KIND:
            dumped = DumpedEpisode.model_validate(data)
            return Episode(dumped.trajectory, where, step=dumped.step, trained=dumped.trained)
        if "task_id" not in data:
            raise ValueError(f"{where} is neither a trajectory nor a dumped episode; expected {FORMATS}")
        return Episode(Trajectory.model_validate(data), where)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{where}: not a valid trajectory ({at}: {first['msg']})") from None


__all__ = ["FORMATS", "Episode", "Loaded", "load"]
