"""Resource limits for one sandboxed run.

Every limit is enforced by the kernel or by the fork server, never by the sandboxed program itself, so a
program cannot opt out of them. The defaults suit "run a model's snippet": ten seconds, 1 GiB of address
space, 64 KiB of output kept per stream.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


class Limits(BaseModel):
    """Resource limits (immutable; use ``limits.model_copy(update={...})`` to derive variants).

    ``timeout_s`` is wall-clock time, enforced by the fork server with SIGKILL of the whole process tree.
    It is the program's own time: it starts when the program starts, after the child's setup (fork,
    isolation layers), which has a bound of its own (``child_setup.SETUP_TIMEOUT_S``, a ``sandbox_error``
    past it), so a slow or loaded machine does not eat into a short limit. For a session: each call's.
    ``cpu_s`` is ``RLIMIT_CPU`` (per process; for a session it is the budget of the whole session, since the
    interpreter is one long-lived process). ``memory_bytes`` bounds each process (``RLIMIT_AS``: the
    interpreter and preloaded modules count, about 30 MB, 100 MB with numpy, so stay above ~256 MiB) and the
    whole run: the fork server kills a run whose processes together hold more (checked every 0.1 s).
    ``max_output_bytes`` is what is kept of each of stdout and stderr (half from the head, half from the
    tail, with a marker in between); ``max_output_total_bytes`` is how much a stream may produce before the
    program is killed with status ``output_limit``. ``disk_bytes`` bounds the private tmpfs (``/tmp``, the
    working directory) and ``file_size_bytes`` each single file (``RLIMIT_FSIZE``).

    ``clock="program"`` makes ``timeout_s`` the program's own time instead (``toolgym.util.program_clock``):
    the wall time less what its first process waited for a CPU, or its process group's CPU time where that
    is larger, so a busy machine does not time out a fast program (the code verifier's stdin tests). A run
    that has not had its time by ``STARVED_FACTOR`` (10) times ``timeout_s`` on the wall clock is ended as a
    ``sandbox_error`` ("the machine is too busy"), never a time-out. ``LocalSandbox.run`` only: a session's
    calls keep the wall clock (the code verifier's harness, run in a session, times its tests itself).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(10.0, gt=0, le=24 * 3600)
    cpu_s: float = Field(10.0, gt=0)
    memory_bytes: int = Field(1 * GiB, ge=64 * MiB)
    max_output_bytes: int = Field(64 * KiB, ge=64)
    max_output_total_bytes: int = Field(16 * MiB, ge=64)
    file_size_bytes: int = Field(32 * MiB, ge=0)
    disk_bytes: int = Field(128 * MiB, ge=1 * MiB)
    open_files: int = Field(256, ge=16, le=65536)
    processes: int = Field(64, ge=1, le=4096)
    clock: Literal["wall", "program"] = "wall"

    @model_validator(mode="after")
    def _total_covers_kept(self) -> Limits:
        if self.max_output_total_bytes < self.max_output_bytes:
            raise ValueError("max_output_total_bytes must be >= max_output_bytes")
        return self
