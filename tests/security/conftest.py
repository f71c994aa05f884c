"""Red-team fixtures: one shared sandbox, a fake host secret, and an after-every-test containment audit.

Every hostile program must (1) be contained, asserted by its own test, (2) leave the sandbox working: the
next run in the same sandbox succeeds, (3) leave nothing behind: no process of the sandbox and no file it
tried to plant on the host. (2) and (3) are checked here after every test, so no test can forget them.

Limits are small on purpose: a containment bug must not be able to hurt the machine running the tests.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from toolgym.sandbox import Limits, LocalSandbox
from toolgym.sandbox.local import wait_until

if not sys.platform.startswith("linux"):  # pragma: no cover
    pytest.skip("the local sandbox needs Linux", allow_module_level=True)

FAKE_SECRET = "sk-toolgym-redteam-" + uuid.uuid4().hex
RED_LIMITS = Limits(
    timeout_s=3,
    cpu_s=3,
    memory_bytes=512 * 1024**2,
    processes=32,
    open_files=128,
    file_size_bytes=8 * 1024**2,
    disk_bytes=32 * 1024**2,
    max_output_total_bytes=16 * 1024**2,
)
PROJECT = Path(__file__).resolve().parents[2]
# Where a planted file would show up if a write escaped the sandbox.
HOST_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/", "/root", "/etc", str(PROJECT), os.path.expanduser("~"))


@pytest.fixture(scope="session")
def sb():
    """The shared hostile-code sandbox, created while the host env holds a fake API key."""
    saved = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(OPENAI_API_KEY=FAKE_SECRET, HF_TOKEN=FAKE_SECRET, AWS_SECRET_ACCESS_KEY=FAKE_SECRET)
    try:
        with LocalSandbox(limits=RED_LIMITS, workers=2, max_sessions=4) as box:
            yield box
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def secret():
    """The fake API key planted in the host environment before the sandbox started."""
    return FAKE_SECRET


@pytest.fixture
def project():
    return PROJECT


@pytest.fixture
def red_limits():
    return RED_LIMITS


@pytest.fixture
def marker():
    """A unique file name hostile programs use for anything they try to plant on the host."""
    return "toolgym-escape-" + uuid.uuid4().hex[:12]


def planted(marker: str) -> list[str]:
    found = []
    for directory in HOST_DIRS:
        try:
            found += [os.path.join(directory, n) for n in os.listdir(directory) if marker in n]
        except OSError:
            continue
    return found


@pytest.fixture(autouse=True)
def audit(sb, marker):
    servers = set(sb.server_pids)
    yield
    assert set(sb.server_pids) == servers, "a fork server died or was replaced"
    nxt = sb.run("print('next run works')")
    assert nxt.status == "ok" and nxt.stdout == "next run works\n", nxt
    assert wait_until(lambda: not sb.stray_processes(), timeout=5), sb.stray_processes()
    assert not planted(marker), planted(marker)
