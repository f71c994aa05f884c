"""E2B backend: the same Sandbox protocol over the hosted ``e2b-code-interpreter`` microVMs.

Use it where local namespaces are not an option (no root, no user namespaces) or when code must run off the
training machine. The package is optional and imported lazily; constructing the backend without it, or
without an API key (``E2B_API_KEY`` or ``api_key=``), raises SandboxUnavailable saying what is missing.

``run`` writes the program (and ``files``/``stdin``) into the microVM and runs ``python3 -I`` on it, so every
run is a fresh process, like the local backend. Sessions are e2b code contexts (one Jupyter kernel each).
Isolation is the microVM's; limits other than the wall timeout are best effort (``ulimit`` in the shell).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import time
import uuid
from typing import Any

from toolgym.sandbox.base import Sandbox, SandboxUnavailable, check_files
from toolgym.sandbox.limits import Limits
from toolgym.sandbox.protocol import CappedStream
from toolgym.sandbox.result import ExecResult, IsolationReport

_WORKDIR = "/home/user/toolgym"


def _import_e2b() -> Any:
    try:
        import e2b_code_interpreter
    except ImportError as exc:
        raise SandboxUnavailable(
            "the e2b backend needs the 'e2b-code-interpreter' package: pip install 'toolgym[e2b]'"
        ) from exc
    return e2b_code_interpreter


def _capped(text: str, limits: Limits) -> tuple[str, bool]:
    stream = CappedStream(limits.max_output_bytes)
    stream.feed(text.encode("utf-8", "replace"))
    return stream.text(), stream.truncated


class E2BSession:
    """A stateful e2b code context."""

    def __init__(self, owner: E2BSandbox, limits: Limits) -> None:
        self._owner = owner
        self.limits = limits
        self._context = owner._sandbox.create_code_context(cwd=_WORKDIR)

    def run(self, code: str, *, stdin: str | None = None, timeout: float | None = None) -> ExecResult:
        wall = timeout or self.limits.timeout_s
        t0 = time.monotonic()
        try:
            execution = self._owner._sandbox.run_code(code, context=self._context, timeout=wall)
        except self._owner._e2b.TimeoutException as exc:
            return self._owner._result("timeout", "", "", t0, detail=f"wall-clock limit of {wall:g} s: {exc}")
        except Exception as exc:
            return self._owner._result("sandbox_error", "", "", t0, detail=f"e2b call failed: {exc}")
        stdout = "".join(execution.logs.stdout or [])
        stderr = "".join(execution.logs.stderr or [])
        error = execution.error
        if error is not None:
            stderr += error.traceback or f"{error.name}: {error.value}"
            status = "memory" if error.name == "MemoryError" else "error"
            return self._owner._result(status, stdout, stderr, t0, exit_code=1)
        return self._owner._result("ok", stdout, stderr, t0, exit_code=0)

    async def arun(self, code: str, *, stdin: str | None = None, timeout: float | None = None) -> ExecResult:
        return await asyncio.to_thread(self.run, code, stdin=stdin, timeout=timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the microVM may already be gone: nothing to release then
            self._owner._sandbox.remove_code_context(self._context)


class E2BSandbox(Sandbox):
    """Runs code in one e2b microVM (created on construction, killed on ``close``)."""

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        api_key: str | None = None,
        template: str | None = None,
        workers: int = 4,
        sandbox_timeout_s: int = 3600,
        allow_internet_access: bool = False,
    ) -> None:
        module = _import_e2b()
        key = api_key or os.environ.get("E2B_API_KEY")
        if not key:
            raise SandboxUnavailable("the e2b backend needs an API key: set E2B_API_KEY or pass api_key=")
        self._e2b = module
        super().__init__(limits, workers)
        kwargs: dict[str, Any] = {"api_key": key, "timeout": sandbox_timeout_s}
        if template:
            kwargs["template"] = template
        kwargs["allow_internet_access"] = allow_internet_access
        self._sandbox = module.Sandbox.create(**kwargs)
        self._sandbox.commands.run(f"mkdir -p {_WORKDIR}")
        self._report = IsolationReport(
            backend="e2b",
            active=("microvm", "wall_timeout", "output_caps")
            + (() if allow_internet_access else ("no_internet",)),
            details={"sandbox_id": str(getattr(self._sandbox, "sandbox_id", ""))},
        )

    @property
    def isolation(self) -> IsolationReport:
        return self._report

    def _result(
        self, status: str, stdout: str, stderr: str, t0: float, exit_code: int | None = None, detail: str = ""
    ) -> ExecResult:
        out, out_cut = _capped(stdout, self.limits)
        err, err_cut = _capped(stderr, self.limits)
        return ExecResult(
            status=status,
            exit_code=exit_code,
            stdout=out,
            stderr=err,
            stdout_truncated=out_cut,
            stderr_truncated=err_cut,
            wall_s=time.monotonic() - t0,
            detail=detail,
            isolation=self._report,
        )

    def run(
        self,
        code: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        files: dict[str, str | bytes] | None = None,
    ) -> ExecResult:
        lim = limits or self.limits
        wall = timeout or lim.timeout_s
        run_dir = f"{_WORKDIR}/{uuid.uuid4().hex}"
        t0 = time.monotonic()
        try:
            for name, data in (check_files(files) or {}).items():
                self._sandbox.files.write(f"{run_dir}/{name}", data)
            self._sandbox.files.write(f"{run_dir}/.main.py", code)
            self._sandbox.files.write(f"{run_dir}/.stdin", stdin or "")
        except Exception as exc:
            return self._result("sandbox_error", "", "", t0, detail=f"e2b upload failed: {exc}")
        ulimits = (
            f"ulimit -v {lim.memory_bytes // 1024} -t {int(lim.cpu_s) + 1} "
            f"-f {max(1, lim.file_size_bytes // 1024)} -n {lim.open_files}"
        )
        command = (
            f"cd {shlex.quote(run_dir)} && {ulimits} && "
            f"env -i PATH=/usr/local/bin:/usr/bin:/bin HOME={shlex.quote(run_dir)} "
            f"timeout -s KILL {wall:g} python3 -I .main.py < .stdin; code=$?; "
            f"cd / && rm -rf {shlex.quote(run_dir)}; exit $code"
        )
        try:
            handle = self._sandbox.commands.run(f"bash -c {shlex.quote(command)}", timeout=wall + 30)
            stdout, stderr, exit_code = handle.stdout, handle.stderr, handle.exit_code
        except self._e2b.CommandExitException as exc:
            stdout, stderr, exit_code = exc.stdout or "", exc.stderr or "", exc.exit_code
        except self._e2b.TimeoutException as exc:
            return self._result("timeout", "", "", t0, detail=f"e2b command timed out: {exc}")
        except Exception as exc:
            return self._result("sandbox_error", "", "", t0, detail=f"e2b call failed: {exc}")
        if exit_code == 137 and time.monotonic() - t0 >= wall:
            return self._result("timeout", stdout, stderr, t0, exit_code=exit_code, detail="wall-clock limit")
        last_line = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        if exit_code == 0:
            status = "ok"
        elif last_line.startswith("MemoryError"):
            status = "memory"
        elif exit_code > 128:
            status = "killed"
        else:
            status = "error"
        return self._result(status, stdout, stderr, t0, exit_code=exit_code)

    def session(
        self,
        *,
        limits: Limits | None = None,
        files: dict[str, str | bytes] | None = None,
        transient: bool = False,
    ) -> E2BSession:
        for name, data in (check_files(files) or {}).items():
            self._sandbox.files.write(f"{_WORKDIR}/{name}", data)
        return E2BSession(self, limits or self.limits)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already gone (timeout on e2b's side): nothing to release
            self._sandbox.kill()
