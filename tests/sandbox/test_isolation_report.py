"""The isolation report: every layer accounted for, switches honoured, degradation loud, doctor output."""

from __future__ import annotations

import logging
import os

import pytest

from toolgym.sandbox import ALWAYS_ON, LAYERS, LocalSandbox, SandboxUnavailable, doctor_report
from toolgym.sandbox.e2b import E2BSandbox


def test_report_accounts_for_every_layer(sb):
    report = sb.isolation
    assert report.backend == "local"
    for layer in LAYERS:
        assert (layer in report.active) != (layer in report.missing), layer
    assert set(ALWAYS_ON) <= set(report.active)
    assert report.details["mode"] in ("root", "userns", "plain")
    for why in report.missing.values():
        assert why  # a missing layer always says why


@pytest.mark.skipif(os.geteuid() != 0, reason="as root every layer must be available")
def test_as_root_everything_is_active(sb):
    assert sb.isolation.missing == {}, sb.isolation.missing
    assert sb.isolation.complete
    assert sb.isolation.details["mode"] == "root"


def test_every_result_carries_the_report(sb):
    res = sb.run("pass")
    assert res.isolation == sb.isolation


def test_disabling_layers_is_reported_and_takes_effect():
    with LocalSandbox(workers=1, disable=("seccomp", "net_namespace")) as box:
        report = box.isolation
        assert set(report.disabled) == {"seccomp", "net_namespace"}
        assert "seccomp" not in report.active and "seccomp" not in report.missing
        assert not report.complete
        res = box.run("print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])")
        assert res.stdout == "0\n"
    with LocalSandbox(workers=1) as box:
        if "seccomp" in box.isolation.active:
            res = box.run("print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])")
            assert res.stdout == "2\n"


def test_unknown_layer_name_is_rejected():
    with pytest.raises(ValueError, match="unknown isolation layers"):
        LocalSandbox(workers=1, disable=("firewall",))


def test_layers_in_effect_inside_the_child(sb):
    if sb.isolation.missing:
        pytest.skip("checks the fully isolated configuration")
    res = sb.run(
        "import os, socket\n"
        "print(os.getpid(), os.getppid(), socket.gethostname(), os.getcwd(), os.environ['HOME'])\n"
        "print(sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net') else 'no-sysfs')\n"
        "print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])\n"
        "print(sorted(p for p in os.listdir('/proc') if p.isdigit()))"
    )
    lines = res.stdout.splitlines()
    assert lines[0] == "1 0 sandbox /tmp /tmp"  # pid 1 of its own namespace, private tmp as cwd and HOME
    assert lines[2] == "1"  # no_new_privs
    assert lines[3] == "0000000000000000"  # no capabilities
    assert lines[4] == "['1']"  # the only process it can see is itself


def test_strict_mode_and_warning_when_layers_are_missing(monkeypatch, caplog):
    """Simulate a machine that lacks a layer by having the server report it missing."""
    from toolgym.sandbox import client

    original = client.ServerHandle.await_hello

    def fake_hello(self, timeout):
        hello = original(self, timeout)
        hello["active"] = [a for a in hello["active"] if a != "seccomp"]
        hello["missing"] = {**hello["missing"], "seccomp": "pretend libseccomp is absent"}
        return hello

    monkeypatch.setattr(client.ServerHandle, "await_hello", fake_hello)
    monkeypatch.setattr("toolgym.sandbox.local._warned", set())
    with caplog.at_level(logging.WARNING, logger="toolgym.sandbox"), LocalSandbox(workers=1) as box:
        assert box.isolation.missing["seccomp"] == "pretend libseccomp is absent"
        assert box.run("print(1)").isolation.missing["seccomp"]
    assert "WITHOUT these isolation layers" in caplog.text and "seccomp" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="toolgym.sandbox"), LocalSandbox(workers=1):
        pass
    assert "WITHOUT" not in caplog.text  # warned once per process, not per sandbox
    with pytest.raises(SandboxUnavailable, match="seccomp"):
        LocalSandbox(workers=1, strict=True)


def test_doctor_report():
    rows = doctor_report()
    names = [name for name, _, _ in rows]
    assert {*LAYERS, "loopback_network"} <= set(names) and "platform" in names  # (the judge's network too)
    assert all(isinstance(ok, bool) and isinstance(detail, str) for _, ok, detail in rows)
    if os.geteuid() == 0:
        assert all(ok for name, ok, _ in rows if name in {*LAYERS, "loopback_network"}), rows


def test_e2b_backend_explains_what_is_missing(monkeypatch):
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(SandboxUnavailable, match=r"e2b-code-interpreter|E2B_API_KEY"):
        E2BSandbox()


def test_extra_paths_are_exposed_read_only():
    import shutil
    import tempfile

    data = tempfile.mkdtemp(dir="/var/tmp", prefix="toolgym-test-")
    try:
        with open(os.path.join(data, "table.csv"), "w") as fh:
            fh.write("a,b\n")
        os.chmod(data, 0o755)
        os.chmod(os.path.join(data, "table.csv"), 0o644)
        code = (
            f"print(open({data + '/table.csv'!r}).read(), end='')\n"
            f"try:\n    open({data + '/new'!r}, 'w')\nexcept OSError as e:\n    print(e.errno)"
        )
        with LocalSandbox(workers=1, extra_paths=(data,)) as box:
            if "fs_view" not in box.isolation.active:
                pytest.skip("needs fs_view")
            assert box.run(code).stdout in ("a,b\n30\n", "a,b\n13\n")  # readable, not writable
        with LocalSandbox(workers=1) as box:
            assert "FileNotFoundError" in box.run(code).stderr  # not exposed by default
    finally:
        shutil.rmtree(data)


def test_without_fs_view_host_tmp_dirs_never_outlive_runs_or_servers():
    """Each server's host directory (``/tmp/toolgym-sandbox-*``) and each run's inside it are removed. Only
    this sandbox's directories are checked: other test processes may be running sandboxes of their own."""
    import signal

    from toolgym.sandbox.local import wait_until

    def server_dir(path: str) -> str:
        return "/".join(path.split("/")[:3])  # /tmp/toolgym-sandbox-XXXX/... -> the server's own directory

    with LocalSandbox(workers=1, disable=("fs_view",)) as box:
        assert "fs_view" in box.isolation.disabled
        cwd = box.run(
            "import os; open('x', 'w').write('1'); os.mkdir('d'); os.chmod('d', 0); print(os.getcwd())"
        )
        cwd = cwd.stdout.strip()
        assert cwd.startswith("/tmp/toolgym-sandbox-") and not os.path.exists(cwd)  # removed after the run
        sess = box.session()
        home = sess.run("import os; print(os.getcwd())").stdout.strip()
        assert home.startswith("/tmp/toolgym-sandbox-") and os.path.isdir(home)
        sess.close()
        assert wait_until(lambda: not os.path.exists(home))  # removed when the session process is reaped
        first = server_dir(cwd)
        servers = box.server_pids  # with a user namespace: the launcher and the server
        for pid in servers:
            os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: all(_zombie(pid) for pid in servers))
        restarted = box.run("import os; print(os.getcwd())")
        assert restarted.status == "ok"
        second = server_dir(restarted.stdout.strip())
        assert second != first and wait_until(lambda: not os.path.exists(first))  # the dead server's dir
    assert not os.path.exists(second)  # and the live one's when the sandbox closed


def _zombie(pid):
    """Dead: gone, or exited and waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
