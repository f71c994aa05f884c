"""A SWE-bench-style repository and row made on the spot, for SWE-v0's tests, benchmarks and docs.

``sample_row(store)`` writes a git clone ``acme__calc`` under ``store`` whose history has a buggy base
commit and, after it, the fix with its test (the "future" a leak would show: ``git log --all`` must not),
plus an unrelated branch, a tag and a stash, and returns the SWE-bench row for the bug. Nothing is
downloaded. ``scale`` pads the repository with that many more modules (a realistic tree for timings).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = "from calc.ops import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
#: (test_add sees its own function as request.function, as pytest's pytester does, whatever the judge wraps)
TESTS_AFTER = TESTS + (
    "\n\ndef test_add(request):\n    assert request.function.__name__ == 'test_add'\n"
    "    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n"
)
TESTS_AFTER = TESTS_AFTER.replace("import mul", "import add, mul")
#: the same tests as a unittest.TestCase (``sample_row(style="unittest")``), as Django and older suites do
UNITTEST_TESTS = (
    "import unittest\n\nfrom calc.ops import mul\n\n\nclass OpsTest(unittest.TestCase):\n"
    "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n"
)
UNITTEST_TESTS_AFTER = (
    UNITTEST_TESTS.replace("import mul", "import add, mul")
    + "\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)

#: Django's layout (``style="django"``): the tests under ``tests/<app>/``, run by ``tests/runtests.py`` (a
#: script of the same shape as Django's: the labels are modules, its verbose runner names a test with a
#: docstring by the docstring's first line)
DJANGO_TESTS = (
    "import io\nimport unittest\n\nfrom calc.ops import mul\n\n\nclass OpsTests(unittest.TestCase):\n"
    "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n\n"
    "    def test_a_suite_inside(self):\n"  # (a test running cases of its own, as Django's test_utils do)
    "        class Inner(unittest.TestCase):\n            def test_inner(self):\n                pass\n\n"
    "        result = unittest.TextTestRunner(stream=io.StringIO()).run(Inner('test_inner'))\n"
    "        self.assertEqual((result.testsRun, result.wasSuccessful()), (1, True))\n"
)
DJANGO_TESTS_AFTER = DJANGO_TESTS.replace("import mul", "import add, mul") + (
    '\n    def test_add(self):\n        """Adding two numbers gives their sum.\n\n        (And more.)"""\n'
    "        self.assertEqual(add(2, 3), 5)\n\n    def test_add_negative(self):\n"
    "        for a in (-1, -2):\n            with self.subTest(a=a):\n"
    "                self.assertEqual(add(a, -a), 0)\n"
)
DJANGO_RUNTESTS = """#!/usr/bin/env python
import argparse
import os
import sys
import unittest

# the package under test importable, as Django's own is installed in its environment
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

parser = argparse.ArgumentParser()
parser.add_argument("labels", nargs="*")
parser.add_argument("--verbosity", type=int, default=1)
parser.add_argument("--settings")
parser.add_argument("--parallel", type=int, default=1)
options = parser.parse_args()
suite = unittest.defaultTestLoader.loadTestsFromNames(options.labels)
result = unittest.TextTestRunner(verbosity=options.verbosity).run(suite)
sys.exit(bool(result.failures or result.errors))
"""
#: SymPy's layout (``style="sympy"``): the tests in the package (``calc/tests/``), run by ``bin/test``,
#: XFAIL and slow from the package's own testing module, as ``sympy.testing.pytest`` has them
SYMPY_TESTING = """import functools


class Skipped(Exception):
    pass


class XFail(Exception):
    pass


class XPass(Exception):
    pass


def XFAIL(func):
    def wrapper():
        try:
            func()
        except Exception:
            raise XFail(func.__name__)
        raise XPass(func.__name__)

    return functools.update_wrapper(wrapper, func)


def slow(func):
    func._slow = True
    return func
"""
SYMPY_TESTS = (
    "from calc.ops import mul\nfrom calc.testing import XFAIL, slow\n\n\ndef test_mul():\n"
    "    assert mul(2, 3) == 6\n"
)
SYMPY_TESTS_AFTER = SYMPY_TESTS.replace("import mul", "import add, mul") + (
    "\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n@XFAIL\ndef test_add_strings():\n"
    "    assert add('a', 1) == 'a1'\n\n\n@slow\ndef test_add_many():\n    assert sum(range(10)) == 45\n"
)
#: tests written for a machine with a network (``sample_row(network=True)``): one serves ``add``'s answer on
#: 127.0.0.1 and fetches it, as Django's live-server tests do, one expects a connect beyond the machine to
#: time out, as requests' ``TestTimeout`` does, one whose parameter holds "::" (an IPv6 address, as requests'
#: ``test_errors[http://fe80::5054:ff:fe5a:fc0-InvalidURL]``), two whose ids another pytest wrote otherwise
NETWORK_TESTS = """

import pytest


@pytest.mark.parametrize("url", ["http://fe80::5054:ff:fe5a:fc0"])
def test_an_ipv6_url(url):
    assert url.count("::") == 1

@pytest.mark.parametrize("code, text", [("1234", "1234"), ("1234", "1234")])
def test_duplicate_ids(code, text):
    assert code == text

def test_unroutable_times_out():
    import socket

    try:
        socket.create_connection(("10.255.255.1", 80), timeout=0.5)
    except socket.timeout:
        return
    raise AssertionError("the connect did not time out")
"""
NETWORK_TESTS_AFTER = """

def test_add_served():
    import http.server
    import threading
    import urllib.request

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = str(add(2, 3)).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/", timeout=5).read() == b"5"
    finally:
        server.shutdown()
"""
#: a listed test that fetches from the internet (``sample_row(network="online")``): nothing answers here
ONLINE_TEST = """

def test_add_online():
    import urllib.request

    assert urllib.request.urlopen("http://httpbin.org/get", timeout=5).status == 200
    assert add(2, 3) == 5
"""
SYMPY_BIN_TEST = "#!/usr/bin/env python\nimport sys\n\nsys.exit('the judge plays this runner itself')\n"


def files_tar(files: Mapping[str, bytes]) -> bytes:
    """A workspace archive of these files (path -> bytes), no git: what the judge's tests run on."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "dev",
        "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "dev",
        "GIT_COMMITTER_EMAIL": "dev@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    proc = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env)
    return proc.stdout.strip()


def sample_row(
    store: str | Path,
    scale: int = 0,
    requires: str | None = None,
    style: str = "pytest",
    network: bool | str = False,
) -> dict[str, Any]:
    """Write the ``acme/calc`` clone under ``store`` (see the module docstring) and return its row.
    ``requires``: a module the package imports (a dependency the interpreter must have); ``style``:
    ``"pytest"`` (test functions), ``"unittest"`` (a ``unittest.TestCase``, run by pytest), ``"django"``
    (Django's layout and runner, its ids unittest's or a docstring's first line) or ``"sympy"`` (SymPy's
    layout and ``bin/test``, its ids bare function names); the last two carry the test command in an
    ``eval_script`` as SWE-bench 5.x rows do. ``network``: the pytest style with ``NETWORK_TESTS`` besides
    (a listed test that serves on 127.0.0.1, one that expects a connect beyond the machine to time out);
    ``"online"``: and a listed test that fetches from ``httpbin.org`` (``ONLINE_TEST``), which only a real
    network passes."""
    styles = {
        "pytest": (TESTS, TESTS_AFTER, "tests/test_ops.py"),
        "unittest": (UNITTEST_TESTS, UNITTEST_TESTS_AFTER, "tests/test_ops.py"),
        "django": (DJANGO_TESTS, DJANGO_TESTS_AFTER, "tests/ops_tests/tests.py"),
        "sympy": (SYMPY_TESTS, SYMPY_TESTS_AFTER, "calc/tests/test_ops.py"),
    }
    if style not in styles:
        raise ValueError(f"style must be one of {sorted(styles)}, not {style!r}")
    tests, tests_after, test_file = styles[style]
    if network:
        if style != "pytest":
            raise ValueError("network=True goes with the pytest style")
        tests, tests_after = tests + NETWORK_TESTS, tests_after + NETWORK_TESTS + NETWORK_TESTS_AFTER
        if network == "online":
            tests_after += ONLINE_TEST
    repo = Path(store) / "acme__calc"
    (repo / "calc").mkdir(parents=True, exist_ok=True)
    (repo / test_file).parent.mkdir(parents=True, exist_ok=True)
    if style == "django":
        (repo / "tests" / "ops_tests" / "__init__.py").write_text("")
        (repo / "tests" / "runtests.py").write_text(DJANGO_RUNTESTS)
        (repo / "tests" / "runtests.py").chmod(0o755)
    elif style == "sympy":
        (repo / "calc" / "tests" / "__init__.py").write_text("")
        (repo / "calc" / "testing.py").write_text(SYMPY_TESTING)
        (repo / "bin").mkdir(exist_ok=True)
        (repo / "bin" / "test").write_text(SYMPY_BIN_TEST)
        (repo / "bin" / "test").chmod(0o755)
    _git(repo, "init", "-q")
    _git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    (repo / "calc" / "__init__.py").write_text(
        '"""A tiny calculator."""\n' + (f"import {requires}\n" if requires else "")
    )
    (repo / "calc" / "ops.py").write_text(BUGGY)
    (repo / test_file).write_text(tests)
    (repo / "pyproject.toml").write_text('[project]\nname = "calc"\nversion = "0.1"\n')
    for i in range(scale):
        sub = repo / "calc" / f"part{i // 100}"
        sub.mkdir(exist_ok=True)
        (sub / "__init__.py").write_text("")
        (sub / f"mod{i}.py").write_text(f'"""Module {i}."""\n\n\ndef value_{i}():\n    return {i}\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc: first version")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "calc" / "ops.py").write_text(FIXED)
    (repo / test_file).write_text(tests_after)
    patch = _git(repo, "diff", "--", "calc/ops.py") + "\n"
    test_patch = _git(repo, "diff", "--", test_file) + "\n"
    _git(repo, "commit", "-qam", "fix add (the answer: must not leak)")
    _git(repo, "tag", "v0.2")
    _git(repo, "checkout", "-qb", "feature")
    (repo / "NOTES.md").write_text("future work\n")
    _git(repo, "add", "NOTES.md")
    _git(repo, "commit", "-qm", "a later branch")
    (repo / "NOTES.md").write_text("stashed\n")
    _git(repo, "stash", "-q")
    _git(repo, "checkout", "-q", "main")
    prefix = "" if style == "pytest" else "OpsTest::"
    f2p, p2p = [f"tests/test_ops.py::{prefix}test_add"], [f"tests/test_ops.py::{prefix}test_mul"]
    more: dict[str, Any] = {}
    if network:
        f2p.append("tests/test_ops.py::test_add_served")
        if network == "online":
            f2p.append("tests/test_ops.py::test_add_online")
        p2p += [
            "tests/test_ops.py::test_unroutable_times_out",
            "tests/test_ops.py::test_an_ipv6_url[http://fe80::5054:ff:fe5a:fc0]",
            # duplicate ids as an older pytest wrote them (this one writes test_duplicate_ids[1234-1234_0])
            "tests/test_ops.py::test_duplicate_ids[1234-12340]",
            "tests/test_ops.py::test_duplicate_ids[1234-12341]",
        ]
    if style == "django":
        f2p = ["Adding two numbers gives their sum.", "test_add_negative (ops_tests.tests.OpsTests)"]
        p2p = ["test_mul (ops_tests.tests.OpsTests)", "test_a_suite_inside (ops_tests.tests.OpsTests)"]
        command = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 ops_tests.tests"
        more = {"eval_script": eval_script(command), "log_parser": "parse_log_django"}
    elif style == "sympy":
        f2p, p2p = ["test_add"], ["test_mul"]
        command = (
            f"PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose {test_file}"
        )
        more = {"eval_script": eval_script(command), "log_parser": "parse_log_sympy"}
    return {
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "`calc.ops.add(2, 3)` returns -1; I expected 5.",
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "version": "0.1",
        "environment_setup_commit": base,
        **more,
    }


def eval_script(command: str) -> str:
    """An ``eval_script`` of SWE-bench 5.x's shape around a test command (its output markers)."""
    return (
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n"
        "git apply -v - <<'EOF_114329324912'\n...\nEOF_114329324912\n"
        f": '>>>>> Start Test Output'\n{command}\n: '>>>>> End Test Output'\ngit checkout HEAD -- .\n"
    )


def future_commits(store: str | Path) -> list[str]:
    """Every commit of the sample clone after its base (what no workspace may hold)."""
    repo = Path(store) / "acme__calc"
    return _git(repo, "rev-list", "--all", "--not", _git(repo, "rev-list", "--max-parents=0", "HEAD")).split()


def play(env: Any, steps: Any) -> tuple[float, Any]:
    """Play scripted steps on a SWE-v0 env (tool calls, then the answer as a string) from ``reset(seed=0)``:
    (the reward, the verdict). Raises when the steps end before the episode does."""
    env.reset(seed=0)
    parser = env.unwrapped.parser
    for step in steps:
        text = parser.format_answer(step) if isinstance(step, str) else parser.format_call(step)
        _, reward, terminated, truncated, info = env.step(text)
        if terminated or truncated:
            return reward, info["verdict"]
    raise AssertionError("the episode did not end")
