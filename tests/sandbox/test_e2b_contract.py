"""The e2b backend honours the same contract as the local one (needs E2B_API_KEY and network)."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.skipif(
    not os.environ.get("E2B_API_KEY"), reason="no E2B_API_KEY: e2b contract not run"
)


@pytest.fixture(scope="module")
def e2b():
    pytest.importorskip("e2b_code_interpreter")
    from toolgym.sandbox import Limits, get_sandbox

    box = get_sandbox("e2b", limits=Limits(timeout_s=20))
    yield box
    box.close()


def test_run_ok_error_stdin_files(e2b):
    assert e2b.run("print(1)").stdout == "1\n"
    err = e2b.run("raise ValueError('x')")
    assert err.status == "error" and "ValueError" in err.stderr
    assert e2b.run("print(input()[::-1])", stdin="abc").stdout == "cba\n"
    assert e2b.run("print(open('f.txt').read())", files={"f.txt": "hi"}).stdout == "hi\n"
    assert e2b.run("import sys; sys.exit(3)").exit_code == 3


def test_timeout(e2b):
    res = e2b.run("import time; time.sleep(60)", timeout=2)
    assert res.status == "timeout"


def test_session_state(e2b):
    sess = e2b.session()
    try:
        sess.run("x = 41")
        assert sess.run("print(x + 1)").stdout == "42\n"
    finally:
        sess.close()


def test_isolation_report(e2b):
    assert e2b.isolation.backend == "e2b" and "microvm" in e2b.isolation.active
