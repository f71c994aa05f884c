"""Hostile programs against the local sandbox.

Each test asserts containment; ``conftest.audit`` then asserts, after every test, that the next run in the
same sandbox works, that no process of the sandbox is left and that nothing was planted on the host.

What the read-only view exposes (decided here, asserted below): the system directories (/usr, /etc, /lib*,
/bin, /sbin), the interpreter's prefixes and sys.path entries, a few device nodes and
/sys/devices/system/cpu - all read-only, with normal permissions on top (the sandbox uid owns none of it).
The project's own files, home directories, the host's /tmp and /dev/shm are not there at all, unless they
are on sys.path (a venv inside the project is: it is exposed read-only, the rest of the project is not).
"""

from __future__ import annotations

import ast
import os
import platform
import resource
import secrets
import socket
import textwrap

import pytest

from toolgym.sandbox import LocalSandbox
from toolgym.sandbox.fsview import exposed_paths, under_tmp
from toolgym.sandbox.local import wait_until


def need(sb, *layers):
    """Skip unless these layers are in effect (a degraded machine is tested for what it still has)."""
    missing = [layer for layer in layers if layer not in sb.isolation.active]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")


X86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="raw syscall numbers are for x86_64")


def run(sb, code: str, **kw):
    return sb.run(textwrap.dedent(code), **kw)


# ------------------------------------------------------------------ processes and resources


def test_fork_bomb(sb):
    res = run(
        sb,
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """,
        timeout=2,
    )
    assert res.status in ("timeout", "error", "killed"), res.detail
    if res.status == "timeout":  # ended by this call's limit (the sandbox's own is 3 s); the audit: all gone
        assert res.detail.startswith("wall-clock limit of 2 s exceeded")


def test_shell_fork_bomb(sb):
    res = run(sb, "import os; os.system(':(){ :|:& };:')", timeout=2)
    assert res.status in ("timeout", "ok", "error"), res.detail
    if res.status == "timeout":
        assert res.detail.startswith("wall-clock limit of 2 s exceeded")


def test_process_limit_is_per_run(sb, red_limits):
    res = run(
        sb,
        """
        import os, time
        pids = []
        try:
            while True:
                pid = os.fork()
                if pid == 0:
                    time.sleep(30)
                pids.append(pid)
        except OSError as e:
            print(len(pids), e.errno)
        """,
    )
    count, errno_ = map(int, res.stdout.split())
    assert errno_ == 11 and count < red_limits.processes  # EAGAIN at RLIMIT_NPROC


def test_thread_bomb(sb, red_limits):
    res = run(
        sb,
        """
        import threading, time
        n = 0
        try:
            while True:
                threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
                n += 1
        except RuntimeError:
            print(n)
        """,
    )
    assert res.status == "ok" and int(res.stdout) < red_limits.processes


def test_memory_balloon(sb):
    """A balloon ends at the memory limit, whatever the machine's load: its wall limit is wide (30 s).

    It needs about 0.4 s of CPU (the kernel zeroing 450 MB of pages); under the sandbox's 3-s default, a CI
    run with the machine's two cores shared by a dozen processes saw it end as "timeout" before it reached
    the limit. The CPU limit (3 s) still bounds it, and time is not what this test is about.
    """
    res = run(sb, "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 1024 * 1024))", timeout=30)
    assert res.status == "memory", (res.status, res.detail, res.wall_s, res.cpu_s, res.peak_memory_bytes)


def test_memory_spread_over_many_processes(sb, red_limits):
    """Each process stays under RLIMIT_AS; together they exceed memory_bytes: the watchdog kills the run."""
    res = run(
        sb,
        """
        import os, time
        for _ in range(8):
            if os.fork() == 0:
                block = bytearray(200 * 1024 * 1024)  # touched: zero-filled by bytearray
                time.sleep(30)
        time.sleep(30)
        """,
        timeout=10,
    )
    # the memory watchdog ended it: the 10 s wall clock would say "timeout"
    assert res.status == "memory" and "together" in res.detail


def test_mmap_balloon(sb):
    res = run(sb, "import mmap\nm = mmap.mmap(-1, 8 * 1024 ** 3)\nm[-1] = 1")
    assert res.status in ("memory", "error")
    assert "MemoryError" in res.stderr or "Cannot allocate" in res.stderr


def test_infinite_loop(sb):
    res = run(sb, "while True:\n    pass", timeout=1)
    assert res.status == "timeout" and res.detail == "wall-clock limit of 1 s exceeded; process tree killed"
    assert res.wall_s >= 1  # not before the limit


def test_ignoring_sigterm_and_sigint(sb):
    res = run(
        sb,
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            time.sleep(1)
        """,
        timeout=1,
    )
    # SIGKILL, which it cannot ignore, at this call's limit; the audit checks that no process is left
    assert res.status == "timeout" and res.detail == "wall-clock limit of 1 s exceeded; process tree killed"


def test_sleeping_children_do_not_outlive_the_run(sb):
    res = run(
        sb,
        """
        import subprocess
        for _ in range(5):
            subprocess.Popen(['sleep', '300'])
        print('bye')
        """,
    )
    # "ok", not "timeout" after the sandbox's 3 s: the run did not wait for its children, which died with
    # the namespace (the audit checks that none is left)
    assert res.status == "ok" and res.stdout == "bye\n"


def test_double_fork_daemon(sb, marker):
    res = run(
        sb,
        f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                for _ in range(300):
                    open('/tmp/{marker}', 'w').write('daemon alive')
                    time.sleep(0.1)
            os._exit(0)
        time.sleep(0.2)
        print('parent done')
        """,
    )
    assert res.status == "ok" and res.stdout == "parent done\n"


def test_setsid_escape_with_timeout(sb):
    res = run(
        sb,
        """
        import subprocess
        subprocess.Popen(['sleep', '300'], start_new_session=True)
        subprocess.Popen(['setsid', 'sh', '-c', 'sleep 300 &'])
        while True:
            pass
        """,
        timeout=1,
    )
    assert res.status == "timeout"


def test_disk_filling_single_file(sb):
    res = run(sb, "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 1024 * 1024)")
    assert res.status == "error" and "File too large" in res.stderr


def test_disk_filling_many_files(sb, red_limits):
    res = run(
        sb,
        """
        i = 0
        try:
            while True:
                open(f'f{i}', 'wb').write(b'x' * 4 * 1024 * 1024)
                i += 1
        except OSError as e:
            print(i, e.errno)
        """,
    )
    if "fs_view" in sb.isolation.active:
        count, errno_ = map(int, res.stdout.split())
        assert errno_ == 28 and count * 4 <= red_limits.disk_bytes // 1024**2  # ENOSPC at the tmpfs size
    else:  # the run's dir is on the host's disk: the fork server's watch kills it past disk_bytes
        assert res.status == "killed" and "disk_bytes" in res.detail, res


def test_stdout_flood_100mb_is_streamed(sb, red_limits):
    """100 MB through the pipes: head and tail kept, the parent's memory does not grow with it."""
    limits = red_limits.model_copy(update={"max_output_total_bytes": 200 * 1024**2})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = run(
        sb,
        """
        import sys
        chunk = 'x' * (1 << 20)
        for _ in range(100):
            sys.stdout.write(chunk)
        print('END')
        """,
        limits=limits,
        timeout=20,
    )
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert res.status == "ok" and res.stdout_truncated
    assert res.stdout.endswith("END\n") and "104857604 bytes total" in res.stdout
    assert len(res.stdout) < 2 * red_limits.max_output_bytes
    assert grown_kib < 30 * 1024


def test_stdout_flood_is_killed_at_the_hard_limit(sb):
    res = run(sb, "import os\nwhile True:\n    os.write(1, b'y' * 65536)")
    assert res.status == "output_limit" and res.stdout_truncated


def test_stderr_flood(sb):
    res = run(sb, "import os\nwhile True:\n    os.write(2, b'e' * 65536)")
    assert res.status == "output_limit" and res.stderr_truncated


def test_infinite_recursion(sb):
    res = run(sb, "def f():\n    return f()\nf()")
    assert res.status == "error" and "RecursionError" in res.stderr


def test_c_stack_overflow(sb):
    res = run(
        sb,
        """
        import sys
        sys.setrecursionlimit(10 ** 6)
        nested = []
        for _ in range(10 ** 6):
            nested = [nested]
        repr(nested)
        """,
        # building the list takes ~1.4 s of CPU here: the suite's 3 s limits could end it on a loaded machine
        # before it crashes, and this test is about the crash
        limits=sb.limits.model_copy(update={"timeout_s": 60, "cpu_s": 60}),
    )
    assert res.status in ("killed", "error")  # the program's crash, never sandbox_error
    assert res.signal in (11, None)


def test_raising_rlimits_back_fails(sb):
    res = run(
        sb,
        """
        import resource
        for r in (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU,
                  resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE):
            soft, hard = resource.getrlimit(r)
            try:
                resource.setrlimit(r, (hard * 2 + 10, hard * 2 + 10))
                print('RAISED', r)
            except (ValueError, OSError):
                print('refused')
        """,
    )
    assert res.stdout.split() == ["refused"] * 5


def test_file_descriptor_exhaustion(sb, red_limits):
    res = run(
        sb,
        """
        fs = []
        try:
            while True:
                fs.append(open('/dev/null'))
        except OSError as e:
            print(len(fs), e.errno)
        """,
    )
    count, errno_ = map(int, res.stdout.split())
    assert errno_ == 24 and count < red_limits.open_files  # EMFILE


def test_huge_argv_and_env(sb):
    res = run(
        sb,
        """
        import subprocess
        for args, env in ((['true'] + ['a' * 1000] * 5000, None), (['true'], {'X': 'b' * 10 ** 7})):
            try:
                print(subprocess.run(args, env=env).returncode)
            except OSError as e:
                print('refused', e.errno)
        """,
    )
    assert res.status == "ok" and "refused" in res.stdout


# ------------------------------------------------------------------ the host's secrets and files


def test_read_etc_shadow(sb):
    need(sb, "unprivileged_user")
    res = run(sb, "print(open('/etc/shadow').read())")
    assert res.status == "error" and "PermissionError" in res.stderr


def test_host_env_secrets_are_absent(sb, secret):
    res = run(
        sb,
        """
        import os, glob
        seen = dict(os.environ)
        for path in glob.glob('/proc/*/environ'):
            try:
                seen[path] = open(path, 'rb').read().decode('latin-1')
            except OSError:
                pass
        print(os.popen('env; cat /proc/1/environ').read())
        print(seen)
        """,
    )
    assert res.status == "ok"
    assert secret not in res.stdout and "OPENAI_API_KEY" not in res.stdout


def test_proc_1_environ_is_the_sandbox_itself(sb, secret):
    res = run(sb, "print(open('/proc/1/environ', 'rb').read())")
    # pid 1 is the sandboxed program itself: either unreadable (not dumpable after the uid drop) or clean
    assert res.status == "ok" or "PermissionError" in res.stderr
    assert secret not in res.stdout + res.stderr and "OPENAI" not in res.stdout


def test_parent_proc_environ(sb, secret):
    res = run(sb, f"print(open('/proc/{os.getpid()}/environ', 'rb').read())")
    assert res.status == "error" and secret not in res.stdout + res.stderr
    assert "FileNotFoundError" in res.stderr or "PermissionError" in res.stderr


def test_project_files_are_not_visible(sb, project):
    need(sb, "fs_view")
    res = run(
        sb,
        f"""
        import os
        print(os.path.exists({str(project / "pyproject.toml")!r}))
        print(os.path.exists({str(project / "toolgym")!r}))
        open({str(project / "pyproject.toml")!r}, 'a')
        """,
    )
    assert res.stdout.splitlines() == ["False", "False"] and res.status == "error"


def test_interpreter_and_venv_are_read_only(sb, marker):
    import sys as host_sys

    res = run(
        sb,
        f"""
        import os, sys
        for d in (sys.prefix, sys.base_prefix, os.path.dirname(os.__file__)):
            try:
                open(os.path.join(d, {marker!r}), 'w')
                print('WROTE', d)
            except OSError as e:
                print(e.errno)
        """,
    )
    assert "WROTE" not in res.stdout and set(res.stdout.split()) <= {"30", "13"}  # EROFS / EACCES
    assert not os.path.exists(os.path.join(host_sys.prefix, marker))


def test_writing_outside_the_tmp_dir(sb, marker, project):
    targets = ["/", "/etc", "/usr", "/usr/lib", "/root", "/var/tmp", "/dev", "/proc", "/sys", str(project)]
    res = run(
        sb,
        f"""
        import os
        for d in {targets!r}:
            try:
                open(os.path.join(d, {marker!r}), 'w').write('x')
                print('WROTE', d)
            except OSError:
                pass
        open({marker!r}, 'w').write('inside is fine')
        print('ok')
        """,
    )
    assert res.stdout == "ok\n"


def test_proc_and_sys_are_not_writable(sb):
    res = run(
        sb,
        """
        for path in ('/proc/sys/kernel/hostname', '/proc/sysrq-trigger', '/proc/sys/vm/drop_caches',
                     '/sys/devices/system/cpu/cpu0/online'):
            try:
                open(path, 'w').write('1')
                print('WROTE', path)
            except OSError:
                pass
        print('ok')
        """,
    )
    assert res.stdout == "ok\n"


def test_dev_shm_is_private(sb, marker):
    if "fs_view" not in sb.isolation.active:  # no private /dev/shm to give: the host's is out of reach
        res = run(sb, f"open('/dev/shm/{marker}', 'w').write('x')")
        assert res.status == "error" and "PermissionError" in res.stderr
        assert not os.path.exists(f"/dev/shm/{marker}")
        return
    res = run(sb, f"import os\nopen('/dev/shm/{marker}', 'w').write('x')\nprint(os.listdir('/dev/shm'))")
    assert res.status == "ok" and res.stdout == f"[{marker!r}]\n"  # writable, but private and empty
    assert not os.path.exists(f"/dev/shm/{marker}")


def test_tmp_is_private_and_gone_after_the_run(sb, marker):
    if "fs_view" not in sb.isolation.active:  # the run's own dir is on the host: /tmp around it is closed
        res = run(
            sb,
            f"""
            import os
            for attempt in (lambda: os.listdir('/tmp'), lambda: os.listdir('..'),
                            lambda: open('/tmp/{marker}', 'w')):
                try:
                    attempt()
                    print('ALLOWED')
                except PermissionError:
                    print('refused')
            open('{marker}', 'w').write('inside is fine')
            print(os.getcwd())
            """,
        )
        lines = res.stdout.splitlines()
        assert res.status == "ok" and lines[:3] == ["refused"] * 3, res
        assert not os.path.exists(lines[3]) and not os.path.exists(f"/tmp/{marker}")
        return
    host_tmp = set(os.listdir("/tmp"))
    python_dirs = sorted({p.split("/")[2] for p in under_tmp(exposed_paths())})  # a venv under /tmp only
    res = run(sb, f"import os\nprint(sorted(os.listdir('/tmp')))\nopen('/tmp/{marker}', 'w').write('x')")
    assert res.stdout == f"{python_dirs}\n"  # the host's /tmp is not visible
    assert not os.path.exists(f"/tmp/{marker}")
    assert run(sb, "import os; print(sorted(os.listdir('/tmp')))").stdout == f"{python_dirs}\n"
    # nothing the run wrote reached the host's /tmp (other test processes may create toolgym-* entries there
    # meanwhile, so the new entries are searched for what this run wrote rather than required to be none)
    new = [os.path.join("/tmp", n) for n in set(os.listdir("/tmp")) - host_tmp if n.startswith("toolgym")]
    assert not [d for d in new if os.path.isdir(d) and any(marker in files for _, _, files in os.walk(d))]


def test_symlink_tricks(sb, project):
    res = run(
        sb,
        f"""
        import os
        os.symlink('/etc/shadow', 's')
        os.symlink('/', 'rootlink')
        os.symlink('/proc/1/root', 'pid1root')
        for p in ('s', 'rootlink{project}/pyproject.toml', 'pid1root/etc/shadow',
                  '/proc/self/root{project}/pyproject.toml', '/proc/1/cwd/../../etc/shadow'):
            try:
                open(p).read()
                print('READ', p)
            except OSError as e:
                print(e.errno)
        try:
            os.link('/etc/passwd', 'hard')
            print('LINKED')
        except OSError as e:
            print(e.errno)
        """,
    )
    assert res.status == "ok" and "READ" not in res.stdout and "LINKED" not in res.stdout


def test_cannot_import_the_sandbox_itself(sb):
    res = run(sb, "import toolgym.sandbox.forkserver")
    # absent from the view, or (outside it) unreadable: Landlock keeps the project's source out of reach
    assert res.status == "error" and ("ModuleNotFoundError" in res.stderr or "PermissionError" in res.stderr)


# ------------------------------------------------------------------ network


def _listener(family=socket.AF_INET, addr=("127.0.0.1", 0)):
    s = socket.socket(family)
    s.bind(addr)
    s.listen()
    s.settimeout(0.3)
    return s


def test_inet_connect_to_host_listener(sb):
    listener = _listener()
    port = listener.getsockname()[1]
    try:
        res = run(
            sb,
            f"""
            import socket
            for fam, addr in ((socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_INET6, ('::1', {port}))):
                try:
                    s = socket.socket(fam)
                    s.settimeout(1)
                    s.connect(addr)
                    print('CONNECTED')
                except OSError as e:
                    print(type(e).__name__)
            """,
        )
        assert res.status == "ok" and "CONNECTED" not in res.stdout
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


def test_dns_and_outbound_fail(sb):
    res = run(
        sb,
        """
        import socket, urllib.request
        for f in (lambda: socket.getaddrinfo('example.com', 80),
                  lambda: urllib.request.urlopen('http://1.1.1.1', timeout=1)):
            try:
                f()
                print('REACHED')
            except Exception as e:
                print(type(e).__name__)
        """,
    )
    assert res.status == "ok" and "REACHED" not in res.stdout


def test_unix_socket_connect_to_host_listener(sb):
    path = f"/tmp/toolgym-redteam-{secrets.token_hex(6)}.sock"
    abstract = f"\0toolgym-redteam-{secrets.token_hex(6)}"
    listeners = [_listener(socket.AF_UNIX, path), _listener(socket.AF_UNIX, abstract)]
    try:
        res = run(
            sb,
            f"""
            import socket
            for addr in ({path!r}, {abstract!r}):
                try:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(addr)
                    print('CONNECTED')
                except OSError as e:
                    print(type(e).__name__)
            """,
        )
        assert res.status == "ok" and "CONNECTED" not in res.stdout
        for s in listeners:
            with pytest.raises(TimeoutError):
                s.accept()
    finally:
        for s in listeners:
            s.close()
        os.unlink(path)


@pytest.mark.parametrize("without", ["seccomp", "net_namespace"])
def test_network_stays_closed_with_one_layer_off(sb, without, red_limits):
    """Defense in depth: the network namespace alone, or seccomp alone, keeps the network closed."""
    need(sb, "seccomp", "net_namespace")
    listener = _listener()
    port = listener.getsockname()[1]
    try:
        with LocalSandbox(limits=red_limits, workers=1, disable=(without,)) as box:
            res = run(
                box,
                f"""
                import socket
                try:
                    socket.create_connection(('127.0.0.1', {port}), timeout=1)
                    print('CONNECTED')
                except OSError as e:
                    print(type(e).__name__)
                """,
            )
            assert res.status == "ok" and "CONNECTED" not in res.stdout
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


# ------------------------------------------------------------------ the fork server and the kernel


def test_killing_the_parent_and_everything(sb):
    targets = ", ".join(map(str, [os.getpid(), *sb.server_pids]))
    res = run(
        sb,
        f"""
        import os, signal
        for pid in ({targets}, os.getppid(), -1, 0):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError as e:
                print(e.errno)
        os.system('kill -9 -1; kill -9 0')
        print('survived')
        """,
    )
    assert res.status != "sandbox_error"
    assert all(os.path.exists(f"/proc/{pid}") for pid in sb.server_pids)


def test_ptrace_the_server(sb):
    server = sb.server_pids[0]
    res = run(
        sb,
        f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.ptrace(16, {server}, 0, 0), ctypes.get_errno())  # PTRACE_ATTACH
        print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())
        try:
            open('/proc/{server}/mem', 'rb')
            print('OPENED')
        except OSError as e:
            print(e.errno)
        """,
    )
    lines = res.stdout.splitlines()
    assert lines[0].startswith("-1 ") and lines[1].startswith("-1 ") and "OPENED" not in res.stdout


@X86_64
def test_ctypes_namespace_and_mount_calls(sb):
    res = run(
        sb,
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        out = [
            libc.unshare(0x10000000),  # CLONE_NEWUSER: would grant capabilities in a new namespace
            libc.unshare(0x20000000 | 0x40000000 | 0x00020000),
            libc.setns(os.open('/proc/self/ns/net', os.O_RDONLY), 0),
            libc.mount(b'none', b'/tmp', b'tmpfs', 0, None),
            libc.mount(None, b'/', None, 32, None),  # MS_REMOUNT read-write
            libc.umount2(b'/proc', 2),
            libc.chroot(b'/tmp'),
            libc.syscall(155, b'/tmp', b'/tmp'),  # pivot_root
            libc.setuid(0),
            libc.setgid(0),
        ]
        print(out)
        """,
    )
    assert ast.literal_eval(res.stdout) == [-1] * 10


@X86_64
def test_kernel_attack_surface_syscalls(sb):
    res = run(
        sb,
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        calls = {'bpf': (321, 0, 0, 0), 'keyctl': (250, 0, 0), 'io_uring_setup': (425, 1, 0),
                 'perf_event_open': (298, 0, 0, -1, -1, 0), 'userfaultfd': (323, 0),
                 'add_key': (248, 0, 0, 0, 0, 0), 'init_module': (175, 0, 0, 0),
                 'kexec_load': (246, 0, 0, 0, 0)}
        print({name: (libc.syscall(*args), ctypes.get_errno()) for name, args in calls.items()})
        """,
    )
    results = ast.literal_eval(res.stdout)
    assert len(results) == 8 and all(ret == -1 and err in (1, 13, 38) for ret, err in results.values()), (
        results
    )


def test_import_tricks_change_nothing(sb):
    res = run(
        sb,
        """
        import importlib
        b = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
        libc = b['__import__']('ctypes').CDLL(None, use_errno=True)
        print(libc.unshare(0x10000000))
        try:
            importlib.import_module('_socket').socket(2, 1)
            print('SOCKET')
        except OSError as e:
            print(e.errno)
        print(importlib.import_module('posix').system('cat /etc/shadow > /dev/null 2>&1'))
        """,
    )
    lines = res.stdout.splitlines()
    assert lines[0] == "-1" and lines[1] == "13" and (lines[2] != "0" or os.geteuid() != 0)


def test_shell_tries_everything(sb, marker, secret):
    script = (
        "cat /etc/shadow; cat /proc/*/environ | tr '\\0' '\\n' | grep -i key; "
        f"echo x > /{marker}; echo x > /var/tmp/{marker}; "
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 22), 1)'; "
        "mount -t tmpfs none /mnt; unshare -r true; ps aux | wc -l; id -u; echo done; kill -9 -1"
    )
    res = run(sb, f"import subprocess\nsubprocess.run(['sh', '-c', {script!r}])\nprint('survived')")
    assert "done" in res.stdout and secret not in res.stdout + res.stderr
    assert "root:" not in res.stdout + res.stderr
    if "pid_namespace" in sb.isolation.active:  # pid 1 of its namespace: kill -1 spares the program
        assert res.status == "ok" and "survived" in res.stdout
    else:  # it shares its uid with nothing but itself: kill -1 only ends the run
        assert res.status == "killed"


def test_forged_status_messages_only_affect_the_program_itself(sb):
    res = run(
        sb,
        """
        import os, json, struct
        for msg in ({'setup_error': 'fake'}, {'ready': False}, {'exc': 'MemoryError'}):
            data = json.dumps(msg).encode()
            os.write(3, struct.pack('>I', len(data)) + data)
        os.write(3, b'\\xff' * 1000)
        print('forged')
        """,
    )
    assert res.status == "ok" and res.stdout == "forged\n"  # not sandbox_error, not memory


def test_a_forged_ready_frame_does_not_move_the_programs_clock(sb):
    # the wall clock starts at the sandbox's own "ready" frame (written before any line of the program);
    # a program that claims a later start, then idles (no CPU limit can end it), still ends at its limit
    res = run(
        sb,
        """
        import os, json, struct, time
        data = json.dumps({'ready': True, 't': time.monotonic() + 1000}).encode()
        os.write(3, struct.pack('>I', len(data)) + data)
        while True:
            time.sleep(0.05)
        """,
        timeout=1,
    )
    assert res.status == "timeout" and res.detail.startswith("wall-clock limit of 1 s exceeded"), res


def test_no_channel_to_the_fork_server(sb):
    res = run(sb, "import os\nprint(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))")
    assert res.stdout in ("[0, 1, 2, 3]\n", "[0, 1, 2, 3, 4]\n")  # 4: the listdir fd itself


def test_no_residue_of_earlier_runs_in_memory(sb):
    """A run cannot dig an earlier run's code, files, stdin or output out of its (forked) memory."""
    secret = "HIDDEN" + secrets.token_hex(12)
    sb.run(
        f"x = {secret!r}\nprint({secret!r})",
        files={"hidden_tests.py": f"assert solve() == {secret!r}\n" * 50},
        stdin=secret * 20,
    )
    scan = textwrap.dedent(
        """
        import ctypes
        needle = bytes(b ^ 1 for b in {enc!r})
        hits = 0
        for line in open('/proc/self/maps'):
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split('-'))
            if perms.startswith('rw') and hi - lo < 1 << 30:
                hits += ctypes.string_at(lo, hi - lo).count(needle)
        print(hits)
        """
    )

    def hits(token):
        return int(sb.run(scan.format(enc=bytes(b ^ 1 for b in token.encode()))).stdout)

    fresh = "HIDDEN" + secrets.token_hex(12)
    assert hits(secret) == hits(fresh) >= 1  # only the scanner's own needle, nothing of the earlier run


# ------------------------------------------------------------------ sessions under attack


def test_session_background_process_dies_with_session(sb):
    sess = sb.session()
    sess.run("import subprocess\np = subprocess.Popen(['sleep', '300'], start_new_session=True)")
    assert len(sb.session_pids()) == 1
    sess.close()


def test_session_interfering_with_its_channel(sb):
    with sb.session() as sess:
        res = sess.run("import os, struct, time\nos.write(3, struct.pack('>I', 10 ** 9))\ntime.sleep(0.2)")
        assert res.status in ("error", "ok")
        assert sess.run("print('fine')").ok


def test_session_busy_thread_between_calls_is_bounded(sb, red_limits):
    limits = red_limits.model_copy(update={"cpu_s": 0.2})  # session budget: 0.2 s x session_cpu_factor
    with sb.session(limits=limits) as sess:
        started = sess.run(
            textwrap.dedent(
                """
                import threading
                def burn():
                    while True:
                        pass
                threading.Thread(target=burn).start()
                """
            )
        )
        assert started.ok, started
        (pid,) = sb.session_pids()
        # the thread burns CPU while no call is running, until the session's CPU budget (2 s) kills it
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"), timeout=15)
        res = sess.run("print('after')")
        assert res.session_reset and res.ok  # the CPU budget killed the session; the next call says so


def test_the_interpreter_and_its_packages_are_read_only(sb):
    """Wherever Python lives (also a venv under /tmp, which runs re-bind over their private /tmp), a program
    cannot modify it: the next run, or another episode's run, would import what it planted."""
    res = run(
        sb,
        """
        import os, sys, sysconfig
        for d in (sys.prefix, os.path.dirname(sys.executable), sysconfig.get_paths()["purelib"]):
            try:
                open(os.path.join(d, "planted.py"), "w").write("x = 1")
                print("WROTE", d)
            except OSError:
                pass
        print("ok")
        """,
    )
    assert res.stdout == "ok\n"
