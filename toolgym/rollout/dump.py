"""Episode dumps: what a training run writes so that ``toolgym view`` can show what the model saw.

A trainer's logs say the mean reward went down; they do not say that the loss mask covered an observation or
that a template re-rendered a turn. Every ``every`` training steps, ``EpisodeDump`` writes a sample of that
step's episodes (the whole token-level ``Trajectory``: prompt and response ids, mask, logprobs, reward,
verdict, turns) as JSONL ``DumpedEpisode`` lines, with the step and whether the loss used the episode.

Each process writes its own file (``episodes-<host>-<pid>.jsonl`` in ``directory``): trainer workers run in
several processes, often on several nodes, and one file per writer needs no locking. ``toolgym view DIR``
reads every file of the directory. The verl and TRL adapters call ``offer`` once per episode they return.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from toolgym.core.types import Trajectory

#: the ``kind`` of a dump line: how a reader tells a dump from a rollout JSONL (bare Trajectory lines)
DUMP_KIND = "toolgym.episode_dump"


class DumpedEpisode(BaseModel):
    """One line of an episode dump."""

    model_config = ConfigDict(extra="forbid")

    kind: str = DUMP_KIND
    #: the trainer's step (the weights that generated the episode)
    step: int
    #: which trainer wrote it (``verl``, ``trl``)
    trainer: str
    #: False when the trainer's loss left the episode out (all-zero mask: failed, verifier error, or an
    #: infrastructure error with ``exclude_infra_errors``)
    trained: bool
    trajectory: Trajectory


class DumpSettings(BaseModel):
    """Where and how often a trainer dumps episodes (``dump_every`` steps, ``dump_episodes`` per step)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    directory: str
    every: int = Field(10, ge=1)
    #: episodes per dumped step, per writing process (the first ones that finish)
    episodes: int = Field(8, ge=1)


class EpisodeDump:
    """Writes up to ``settings.episodes`` episodes of every ``settings.every``-th step (step 0 is not
    skipped; a step of ``None``, from a trainer that could not say, counts as 0). Thread-safe: trainer
    adapters call ``offer`` from their event loop and from worker threads alike."""

    def __init__(self, settings: DumpSettings, trainer: str):
        self.settings = settings
        self.trainer = trainer
        self.path = Path(settings.directory) / f"episodes-{socket.gethostname()}-{os.getpid()}.jsonl"
        self._written: dict[int, int] = defaultdict(int)
        self._lock = threading.Lock()

    def wants(self, step: int | None) -> bool:
        """Whether an episode of ``step`` would be written (lets a caller skip building it)."""
        step = step or 0
        return step % self.settings.every == 0 and self._written[step] < self.settings.episodes

    def offer(self, step: int | None, trajectory: Trajectory, trained: bool) -> bool:
        """Write ``trajectory`` if its step is dumped and the step's sample is not full; True if written."""
        step = int(step or 0)
        with self._lock:
            if not self.wants(step):
                return False
            self._written[step] += 1
            line = DumpedEpisode(step=step, trainer=self.trainer, trained=trained, trajectory=trajectory)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line.model_dump_json() + "\n")
        return True


__all__ = ["DUMP_KIND", "DumpSettings", "DumpedEpisode", "EpisodeDump"]
