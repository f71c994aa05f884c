"""LocalSandbox.run: statuses, exit codes, signals, output capture, stdin, files, limits."""

from __future__ import annotations

import signal
import time
import types

import pytest
from pydantic import ValidationError

from toolgym.sandbox import STATUSES, ExecResult, Limits, get_sandbox, local
from toolgym.sandbox.fsview import exposed_paths, under_tmp
from toolgym.sandbox.run_status import classify_run


def python_dirs_in_tmp() -> list[str]:
    """A run's private /tmp is empty but for where Python itself lives when it is installed under /tmp (a CI
    checkout there): the view re-binds those paths, read-only, so the interpreter keeps working."""
    return sorted({p.split("/")[2] for p in under_tmp(exposed_paths())})


pytestmark = pytest.mark.usefixtures("no_strays")


def test_ok_with_stdout_and_stderr(sb):
    t0 = time.monotonic()
    res = sb.run("import sys\nprint('hello')\nprint('warn', file=sys.stderr)")
    around = time.monotonic() - t0
    assert res.status == "ok" and res.ok
    assert res.exit_code == 0 and res.signal is None
    assert res.stdout == "hello\n" and res.stderr == "warn\n"
    assert not res.stdout_truncated and not res.stderr_truncated
    assert 0 < res.wall_s <= around and res.cpu_s >= 0  # seconds, and within the call
    assert res.peak_memory_bytes and res.peak_memory_bytes > 1_000_000
    assert res.isolation is sb.isolation


def test_uncaught_exception_is_error_with_readable_traceback(sb):
    res = sb.run("def f():\n    raise ValueError('boom')\nf()")
    assert res.status == "error" and res.exit_code == 1
    assert "ValueError: boom" in res.stderr
    assert 'File "<string>", line 2, in f' in res.stderr
    assert "raise ValueError('boom')" in res.stderr  # source lines are shown to the model
    assert "toolgym" not in res.stderr  # no sandbox frames in the traceback


@pytest.mark.parametrize(
    ("code", "exit_code", "status"),
    [
        ("import sys; sys.exit(0)", 0, "ok"),
        ("import sys; sys.exit()", 0, "ok"),
        ("import sys; sys.exit(3)", 3, "error"),
        ("raise SystemExit(256 + 7)", 7, "error"),
        ("import os; os._exit(42)", 42, "error"),
        ("import sys; sys.exit('bad input')", 1, "error"),
    ],
)
def test_exit_codes(sb, code, exit_code, status):
    res = sb.run(code)
    assert (res.status, res.exit_code) == (status, exit_code)


def test_sys_exit_message_goes_to_stderr(sb):
    assert sb.run("import sys; sys.exit('bad input')").stderr == "bad input\n"


def test_death_by_signal_is_killed_not_sandbox_error(sb):
    res = sb.run("import ctypes; ctypes.string_at(0)")
    assert res.status == "killed" and res.signal == signal.SIGSEGV and res.exit_code is None


def test_syntax_error(sb):
    res = sb.run("def (:")
    assert res.status == "error" and "SyntaxError" in res.stderr


def test_keyboard_interrupt_exit_code(sb):
    res = sb.run("raise KeyboardInterrupt")
    assert res.status == "error" and res.exit_code == 130


def test_stdin(sb):
    res = sb.run("import sys\nprint(sys.stdin.read().upper(), end='')", stdin="abc\ndef\n")
    assert res.stdout == "ABC\nDEF\n"
    assert sb.run("print(input())", stdin="x y").stdout == "x y\n"


def test_no_stdin_reads_eof(sb):
    res = sb.run("import sys; print(repr(sys.stdin.read()))")
    assert res.stdout == "''\n"


def test_files_are_written_to_the_working_directory(sb):
    res = sb.run(
        "import os\nfrom pathlib import Path\n"
        "print(open('data.txt').read(), Path('pkg/mod.py').read_text(), open('b.bin','rb').read())\n"
        "print(os.getcwd() == os.path.expanduser('~'))",
        files={"data.txt": "hello", "pkg/mod.py": "X = 1", "b.bin": b"\x00\xff"},
    )
    assert res.status == "ok", res.stderr
    assert res.stdout == "hello X = 1 b'\\x00\\xff'\nTrue\n"


def test_files_do_not_persist_between_runs(sb):
    sb.run("open('left.txt', 'w').write('x')", files={"given.txt": "y"})
    res = sb.run("import os; print(sorted(os.listdir('.')))")
    assert res.stdout == f"{python_dirs_in_tmp()}\n"


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../x", "", "a//b", "dir/"])
def test_bad_file_names_are_rejected(sb, name):
    with pytest.raises(ValueError):
        sb.run("pass", files={name: "x"})


def test_wall_timeout_is_enforced_and_passed_down(sb):
    res = sb.run("import time\nprint('started', flush=True)\ntime.sleep(30)", timeout=0.5)
    # enforced: the program asked for 30 s and was killed (an unenforced limit would end "ok"), by the limit
    # passed to this call (the sandbox's own is 5 s), and not before that limit
    assert res.status == "timeout"
    assert res.detail == "wall-clock limit of 0.5 s exceeded; process tree killed"
    assert res.wall_s >= 0.5
    assert res.stdout == "started\n"  # output produced before the kill is kept


def test_timeout_from_limits(sb):
    res = sb.run("while True: pass", limits=sb.limits.model_copy(update={"timeout_s": 0.3}))
    assert res.status == "timeout" and res.detail.startswith("wall-clock limit of 0.3 s exceeded")
    assert res.wall_s >= 0.3


def test_the_wall_clock_starts_when_the_program_starts(make_sandbox, monkeypatch):
    # every child of this sandbox takes 1 s to set up (a loaded machine), twice the runs' limit
    monkeypatch.setattr(local, "_SETUP_DELAY_S", 1.0)
    slow = make_sandbox(workers=1)
    fast = slow.run("print('hi')", timeout=0.5)
    assert fast.status == "ok" and fast.stdout == "hi\n", fast  # the setup is not the program's time
    assert fast.wall_s >= 1.0  # (but it did take place, within this run)
    loop = slow.run("while True: pass", timeout=0.5)
    assert loop.status == "timeout" and loop.detail.startswith("wall-clock limit of 0.5 s exceeded")


def test_cpu_limit_is_reported_as_timeout(sb):
    # a generous wall clock, so that only the CPU limit can fire even on a loaded machine
    res = sb.run("while True: pass", limits=sb.limits.model_copy(update={"cpu_s": 1, "timeout_s": 30}))
    seen = (res.status, res.detail, res.signal, res.cpu_s, res.wall_s)
    assert res.status == "timeout" and res.detail == "CPU time limit of 1 s exceeded", seen
    assert res.cpu_s >= 0.8  # it spent its CPU budget, the one passed to this call (the sandbox's is 5 s)


@pytest.mark.parametrize(
    ("cpu_s", "status"),
    [(0.874, "timeout"), (0.4, "killed")],
    ids=["the-kernels-clock-ran-ahead", "killed-early"],
)
def test_a_sigkill_counts_as_the_cpu_limit_by_the_cpu_the_run_used(cpu_s, status):
    """The kernel kills at RLIMIT_CPU on its tick-sampled clock, ahead of wait4's precise time under load (a
    1-s limit killed a spin at 0.874 s in CI): that is the CPU limit. A SIGKILL well before it is not."""
    usage = types.SimpleNamespace(ru_utime=cpu_s - 0.004, ru_stime=0.004, ru_maxrss=10_000)
    limits = {"cpu_s": 1, "memory_bytes": 512 * 1024**2}
    result = classify_run(signal.SIGKILL, usage, 1.9, None, limits, 30.0, [b'{"ready": true}'])
    assert result["status"] == status and result["signal"] == signal.SIGKILL
    expected = "CPU time limit of 1 s exceeded" if status == "timeout" else "killed by signal SIGKILL"
    assert result["detail"] == expected


def test_memory_limit(sb):
    res = sb.run("x = bytearray(800 * 1024 * 1024)")
    assert res.status == "memory" and "MemoryError" in res.stderr


def test_memory_limit_gradual(sb):
    res = sb.run("x = []\nwhile True: x.append(bytearray(10 ** 6))")
    assert res.status == "memory"
    assert res.peak_memory_bytes is not None and res.peak_memory_bytes > 200 * 1024**2


def test_caught_memory_error_is_ok(sb):
    res = sb.run("try:\n    x = bytearray(800 * 1024 * 1024)\nexcept MemoryError:\n    print('handled')")
    assert res.status == "ok" and res.stdout == "handled\n"


def test_output_truncation_keeps_head_and_tail(sb):
    limits = sb.limits.model_copy(update={"max_output_bytes": 1000})
    res = sb.run("print('HEAD' + 'x' * 100000 + 'TAIL')", limits=limits)
    assert res.status == "ok" and res.stdout_truncated and not res.stderr_truncated
    assert res.stdout.startswith("HEAD") and res.stdout.endswith("TAIL\n")
    assert "bytes truncated (100009 bytes total)" in res.stdout
    assert len(res.stdout) < 1200


def test_stderr_truncation(sb):
    limits = sb.limits.model_copy(update={"max_output_bytes": 200})
    res = sb.run("import sys\nfor i in range(1000): print(i, file=sys.stderr)", limits=limits)
    assert res.stderr_truncated and res.stderr.startswith("0\n1\n") and res.stderr.endswith("998\n999\n")


def test_output_just_under_cap_is_not_truncated(sb):
    limits = sb.limits.model_copy(update={"max_output_bytes": 1000})
    res = sb.run("print('y' * 999, end='')", limits=limits)
    assert not res.stdout_truncated and res.stdout == "y" * 999


def test_output_flood_is_killed(sb):
    limits = sb.limits.model_copy(update={"max_output_total_bytes": 1024 * 1024})
    res = sb.run("import sys\nwhile True: sys.stdout.write('z' * 4096)", limits=limits)
    assert res.status == "output_limit" and res.stdout_truncated
    assert len(res.stdout) <= limits.max_output_bytes + 200


def test_unicode_and_invalid_bytes(sb):
    res = sb.run("import sys\nprint('héllo ✓')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\n')")
    assert res.stdout == "héllo ✓\n\ufffd\n"


def test_fresh_interpreter_state(sb):
    sb.run("import json; json.dumps = None; globals()['leak'] = 1")
    res = sb.run("import json, sys\nprint(json.dumps([1]), 'leak' in globals(), sys.argv, __name__)")
    assert res.stdout == "[1] False ['-c'] __main__\n"


def test_random_state_differs_between_runs(sb):
    code = "import random; print(random.random())"
    assert sb.run(code).stdout != sb.run(code).stdout


def test_threads_and_atexit_run_before_exit(sb):
    res = sb.run(
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.1), print('thread'))).start()"
    )
    assert res.stdout == "thread\natexit\n"


def test_multiprocessing_and_asyncio_work(sb):
    res = sb.run(
        "import asyncio, multiprocessing as mp\n"
        "async def main(): return 5\n"
        "if __name__ == '__main__':\n"
        "    with mp.Pool(2) as pool: print(pool.map(abs, [-1, -2]))\n"
        "    print(asyncio.run(main()))"
    )
    assert res.status == "ok", res.stderr
    assert res.stdout == "[1, 2]\n5\n"


def test_subprocess_works_inside(sb):
    res = sb.run(
        "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(7)'],"
        " capture_output=True, text=True).stdout, end='')"
    )
    assert res.status == "ok" and res.stdout == "7\n"


def test_preloaded_modules_are_importable(sb):
    assert "json" in sb.preloaded and "math" in sb.preloaded
    res = sb.run("import sys; print('json' in sys.modules)")
    assert res.stdout == "True\n"


def test_limits_validation():
    with pytest.raises(ValidationError):
        Limits(timeout_s=0)
    with pytest.raises(ValidationError):
        Limits(max_output_bytes=1000, max_output_total_bytes=10)
    with pytest.raises(ValidationError):
        Limits(unknown=1)
    limits = Limits()
    with pytest.raises(ValidationError):
        limits.timeout_s = 3  # frozen


def test_result_model():
    res = ExecResult(status="ok")
    assert res.ok and set(STATUSES) >= {"ok", "sandbox_error"}
    with pytest.raises(ValidationError):
        ExecResult(status="weird")
    with pytest.raises(ValidationError):
        res.status = "error"  # frozen


def test_negative_timeout_rejected(sb):
    with pytest.raises(ValueError):
        sb.run("pass", timeout=-1)


def test_get_sandbox_backends():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_sandbox("docker")
    with get_sandbox("local", workers=1) as box:
        assert box.run("print(2 + 2)").stdout == "4\n"


def test_oversized_files_are_rejected(sb):
    limits = sb.limits.model_copy(update={"file_size_bytes": 100, "disk_bytes": 1024 * 1024})
    with pytest.raises(ValueError, match="file_size_bytes"):
        sb.run("pass", files={"a": "x" * 101}, limits=limits)
    with pytest.raises(ValueError, match="disk_bytes"):
        sb.run("pass", files={f"f{i}": "x" * 100 for i in range(6000)}, limits=limits)


def test_a_forked_copy_cannot_use_or_kill_the_sandbox(sb):
    import os

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked copy
        code = 0
        try:
            sb.run("print(1)")
            code = 1  # must have raised
        except RuntimeError:
            sb.close()  # must not touch the parent's servers
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sb.run("print('parent still fine')").stdout == "parent still fine\n"
