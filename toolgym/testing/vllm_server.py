"""vLLM's OpenAI-compatible server in a subprocess, for tests and examples that need a real one.

``python -m vllm.entrypoints.openai.api_server`` is what users run in front of a trainer or an evaluation;
starting exactly that (not an in-process engine) is what proves the HTTP client and ``--server`` against
it. It takes tens of seconds to start on a CPU, so tests share one (a session fixture in the test suite).
The defaults suit the tiny model on a CPU: float32, eager mode, a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from toolgym.testing.servers import free_port

#: server arguments for the tiny model on a CPU (a real model on a GPU wants its own). ``uni``: the model runs
#: in the engine-core process, not in a worker process of its own (one process fewer to spawn, each ~30 s of
#: imports on two cores; see ``toolgym.rollout.clients.vllm_inproc._one_process_executor``)
TINY_CPU_ARGS = (
    "--dtype", "float32", "--max-model-len", "4096", "--enforce-eager",
    "--gpu-memory-utilization", "0.05", "--seed", "0", "--distributed-executor-backend", "uni",
)  # fmt: skip


class VLLMServer:
    """Start vLLM's OpenAI server for ``model`` on a free loopback port and wait until ``/health`` answers.

    ``base_url`` is the server root (``http://127.0.0.1:PORT``). The server's output goes to ``log_path``
    (a temporary file by default); a server that exits or is not ready within ``startup_timeout`` seconds
    raises ``RuntimeError`` with the end of that log. ``stop()`` (or leaving a ``with`` block) ends its
    whole process group: vLLM runs its engine in child processes.
    """

    def __init__(
        self,
        model: str | Path,
        *,
        args: Sequence[str] = TINY_CPU_ARGS,
        log_path: str | Path | None = None,
        startup_timeout: float = 300.0,
    ):
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        if log_path is None:
            log_path = Path(tempfile.mkdtemp(prefix="toolgym-vllm-")) / "server.log"
        self.log_path = Path(log_path)
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--host", "127.0.0.1", "--port", str(port), *args,
        ]  # fmt: skip
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
        if "uni" in args:  # vLLM-CPU keeps the uni executor only with this at 0 (the engine core is its own
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # process either way)
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        started = time.monotonic()
        try:
            self._wait_ready(startup_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the vLLM server was not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()

    def __enter__(self) -> VLLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
