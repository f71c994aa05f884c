"""Fixtures for the sandbox API tests: one shared sandbox per module, fresh ones for destructive tests.

Limits are deliberately conservative (few processes, short timeouts): these tests run real code on the
real machine, and a containment bug must not be able to take the host down with it.
"""

from __future__ import annotations

import sys

import pytest

from toolgym.sandbox import Limits, LocalSandbox
from toolgym.sandbox.local import wait_until

if not sys.platform.startswith("linux"):  # pragma: no cover
    pytest.skip("the local sandbox needs Linux", allow_module_level=True)

TEST_LIMITS = Limits(timeout_s=5, cpu_s=5, processes=32, memory_bytes=512 * 1024**2)


@pytest.fixture(scope="module")
def sb():
    with LocalSandbox(limits=TEST_LIMITS, workers=2, max_sessions=8) as box:
        yield box
        assert wait_until(lambda: not box.stray_processes()), box.stray_processes()


@pytest.fixture
def fresh_sb():
    """A private sandbox for tests that kill servers or exhaust sessions."""
    with LocalSandbox(limits=TEST_LIMITS, workers=2, max_sessions=3) as box:
        yield box


@pytest.fixture
def make_sandbox():
    """``make_sandbox(**kwargs)``: a private sandbox with the test limits, closed after the test."""
    boxes = []

    def make(**kwargs):
        boxes.append(LocalSandbox(limits=TEST_LIMITS, **kwargs))
        return boxes[-1]

    yield make
    for box in boxes:
        box.close()


@pytest.fixture
def no_strays(sb):
    """After the test, nothing the sandbox started may still be running."""
    yield
    assert wait_until(lambda: not sb.stray_processes()), sb.stray_processes()
