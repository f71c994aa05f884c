"""The non-root paths, exercised from a root test run by re-running a probe script as uid 65534.

Two machines are simulated: an ordinary user on a kernel that allows user namespaces (every layer must
still be active, through a user namespace), and one where user namespaces are refused (as under Docker's
default seccomp profile): the sandbox must still run, with the missing layers listed, a warning logged, and
``strict=True`` refusing to start. When the suite itself runs as a normal user these paths are covered by
the other tests directly, so this module is for root runs only.

The probe runs in a private mount namespace where any 0700 ancestor of the interpreter or the project
(``/root`` for a pyenv Python) is replaced by an empty tmpfs with just those paths bound back, so that
uid 65534 can start the same interpreter; nothing changes on the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")

PROJECT = Path(__file__).resolve().parents[2]
NOBODY = 65534

# Runs as root in a fresh process: private mount namespace, re-expose what uid 65534 needs, drop to it,
# exec the probe with the same interpreter.
HELPER = textwrap.dedent(
    """
    import json, os, stat, sys, types
    root, probe, needed, mode = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    for name in ("toolgym", "toolgym.sandbox"):
        module = types.ModuleType(name)
        module.__path__ = [root + "/" + name.replace(".", "/")]
        sys.modules[name] = module
    from toolgym.sandbox import _linux as lx
    lx.unshare(lx.CLONE_NEWNS)
    lx.mount(None, "/", None, lx.MS_REC | lx.MS_PRIVATE)

    def closed_ancestor(path):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            a = "/" + "/".join(parts[:i])
            if not os.stat(a).st_mode & stat.S_IXOTH:
                return a
        return None

    hidden = {}
    for path in needed:
        a = closed_ancestor(path)
        if a:
            hidden.setdefault(a, []).append(path)
    for a, paths in hidden.items():
        fds = {p: os.open(p, os.O_PATH) for p in paths}
        lx.mount("tmpfs", a, "tmpfs", 0, "mode=0755")
        for p, fd in fds.items():
            os.makedirs(p, exist_ok=True)
            lx.mount(f"/proc/self/fd/{fd}", p, None, lx.MS_BIND | lx.MS_REC)
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "OPENAI_API_KEY": "sk-unprivileged-test"}
    os.execve(sys.executable, [sys.executable, "-c", probe, mode], env)
    """
)

PROBE = textwrap.dedent(
    """
    import json, logging, os, sys
    block_userns = sys.argv[1] == "block"
    if block_userns:  # what Docker's default seccomp profile does to unshare(CLONE_NEWUSER)
        import errno, pyseccomp as sc
        flt = sc.SyscallFilter(sc.ALLOW)
        for call in ("unshare", "clone"):
            flt.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(0, sc.MASKED_EQ, 0x10000000, 0x10000000))
        flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        flt.load()
    records = []
    logging.getLogger("toolgym.sandbox").addHandler(logging.Handler())
    logging.getLogger("toolgym.sandbox").handlers[-1].emit = lambda r: records.append(r.getMessage())
    from toolgym.sandbox import Limits, LocalSandbox, SandboxUnavailable
    out = {"uid": os.getuid()}
    with LocalSandbox(workers=1, limits=Limits(timeout_s=3)) as sb:
        out["mode"] = sb.isolation.details["mode"]
        out["active"] = list(sb.isolation.active)
        out["missing"] = sb.isolation.missing
        out["warnings"] = records
        ok = sb.run("import os; print(os.getuid(), os.getpid(), os.environ.get('OPENAI_API_KEY'))")
        out["ok"] = [ok.status, ok.stdout]
        loop = sb.run("while True: pass", timeout=0.5)
        out["timeout"] = [loop.status, loop.wall_s]
        out["tmp"] = sb.run("import os; print(os.getcwd())").stdout.strip()
        sess = sb.session()
        sess.run("x = 41")
        out["session"] = sess.run("print(x + 1)").stdout
        sess.close()
        out["net"] = sb.run("import socket\\ntry:\\n    socket.create_connection(('127.0.0.1', 9), 1)\\n"
                            "except OSError as e:\\n    print(type(e).__name__)").stdout.strip()
    out["tmp_left"] = os.path.exists(out["tmp"]) if out["tmp"] != "/tmp" else False
    try:
        LocalSandbox(workers=1, strict=True).close()
        out["strict"] = "started"
    except SandboxUnavailable as exc:
        out["strict"] = "refused: " + str(exc)[:80]
    print("RESULT " + json.dumps(out))
    """
)


def probe(mode: str) -> dict:
    needed = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, str(PROJECT))})
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            HELPER,
            str(PROJECT),
            PROBE,
            json.dumps(needed),
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, f"probe failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(line[len("RESULT ") :])


def test_normal_user_with_user_namespaces_gets_every_layer():
    out = probe("allow")
    assert out["uid"] == NOBODY and out["mode"] == "userns"
    assert out["missing"] == {} and out["warnings"] == []
    assert out["ok"] == ["ok", "65534 1 None\n"]  # uid 65534 inside its own user namespace, pid 1, no secret
    assert out["timeout"][0] == "timeout" and out["timeout"][1] < 1.5
    assert out["tmp"] == "/tmp" and out["session"] == "42\n"
    assert out["net"] == "PermissionError"
    assert out["strict"] == "started"


def test_normal_user_without_user_namespaces_degrades_loudly():
    out = probe("block")
    assert out["uid"] == NOBODY and out["mode"] == "plain"
    lost = {
        "fs_view",
        "pid_namespace",
        "net_namespace",
        "ipc_namespace",
        "uts_namespace",
        "unprivileged_user",
    }
    assert set(out["missing"]) == lost
    assert all("user namespaces are unavailable" in why for why in out["missing"].values())
    assert {"no_new_privs", "seccomp", "rlimits", "clean_env", "wall_timeout"} <= set(out["active"])
    assert len(out["warnings"]) == 1 and "WITHOUT these isolation layers" in out["warnings"][0]
    assert out["ok"][0] == "ok" and out["ok"][1].endswith(" None\n")  # still no inherited secrets
    assert out["timeout"][0] == "timeout"
    assert out["tmp"].startswith("/tmp/toolgym-sandbox-") and not out["tmp_left"]  # per-run dir, removed
    assert out["session"] == "42\n"
    assert out["net"] == "PermissionError"  # seccomp still refuses sockets
    assert out["strict"].startswith("refused")
