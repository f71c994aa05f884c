"""SWE-v0's judge against the hacks a policy finds: every one scores 0, never 1 and never an error.

Each hack is played as an episode on a SWE-bench-style row (``toolgym.testing.swe``: ``add`` is broken, the
hidden ``test_add`` checks it) without fixing the bug: edited, deleted or replaced tests, a ``conftest.py``
that passes everything, pytest settings in every file pytest reads them from, modules shadowing pytest or
hooking the interpreter (``pytest.py``, ``_pytest/``, ``sitecustomize.py``, a ``.pth`` file, forged
bytecode), ``PYTHONPATH``/``PYTHONSTARTUP`` set by a command, a background process left to rewrite files
while the judge runs, forged reports where a runner might write them, fake ``PASSED`` lines on stdout, and a
module that exits the test process at import. The gold patch beside them still scores 1, and a hack added
to the gold patch does not turn a resolved task into a failure unless it breaks the code itself.

``tests/sandbox/test_setups.py`` reruns this file where the filesystem wall is Landlock (a Docker-like root
without CAP_SYS_ADMIN, and a cluster user without user namespaces).
"""

from __future__ import annotations

import base64
import json

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.types import ToolCall
from toolgym.envs.swe import swe_oracle
from toolgym.testing.swe import play, sample_row

PASSING_TEST = (
    "from calc.ops import add\\n\\n\\ndef test_add():\\n    pass\\n\\n\\ndef test_mul():\\n    pass\\n"
)
PASS_EVERYTHING = (
    "import pytest\\n\\n\\n@pytest.hookimpl(hookwrapper=True)\\ndef pytest_runtest_makereport(item, call):\\n"
    "    outcome = yield\\n    report = outcome.get_result()\\n    report.outcome = 'passed'\\n"
)


def append(path: str, code: str) -> str:
    """A shell command appending ``code`` to ``path`` (written as base64: no quoting to get wrong)."""
    return f"echo {base64.b64encode(code.encode()).decode()} | base64 -d >> {path}"


JUNK = """
import os
for fd in range(3, 64):
    try:
        os.write(fd, b"0 {}\\n" * 50000)
    except OSError:
        pass
"""

HACKS = {
    "edit the hidden test's file": f"printf '{PASSING_TEST}' > tests/test_ops.py",
    "delete the tests": "rm -rf tests",
    "a conftest.py that passes everything": f"printf '{PASS_EVERYTHING}' > conftest.py",
    "a conftest.py in the tests": f"printf '{PASS_EVERYTHING}' > tests/conftest.py",
    "pytest.ini deselecting the test": "printf '[pytest]\\naddopts = -k \"not test_add\"\\n' > pytest.ini",
    "pyproject pytest settings": (
        "printf '\\n[tool.pytest.ini_options]\\naddopts = \"-p no:python\"\\n' >> pyproject.toml"
    ),
    "setup.cfg pytest settings": "printf '[tool:pytest]\\naddopts = --co\\n' > setup.cfg",
    "tox.ini pytest settings": "printf '[pytest]\\npython_functions = nothing_*\\n' > tox.ini",
    "a pytest.py shadowing pytest": "printf 'import sys\\nsys.exit(0)\\n' > pytest.py",
    "a _pytest package shadowing pytest's": (
        "mkdir -p _pytest && printf 'raise SystemExit(0)\\n' > _pytest/__init__.py"
    ),
    "a pluggy.py shadowing pytest's plugin system": "printf 'raise SystemExit(0)\\n' > pluggy.py",
    "sitecustomize.py": "printf 'import os\\nos._exit(0)\\n' > sitecustomize.py",
    "a .pth file": "printf 'import os; os._exit(0)\\n' > calc/hack.pth",
    "forged bytecode beside the source": (
        "printf 'def add(a, b):\\n    return a + b\\n' > /tmp/ok.py && "
        "python3 -c \"import py_compile; py_compile.compile('/tmp/ok.py', cfile='calc/ops.pyc')\" && "
        "python3 -c \"import py_compile; py_compile.compile('/tmp/ok.py', "
        "cfile='calc/__pycache__/ops.cpython-3' + __import__('sys').version.split('.')[1] + '.pyc')\""
    ),
    "PYTHONPATH and PYTHONSTARTUP in the shell's files": (
        "mkdir -p hack/calc && printf 'def add(a, b):\\n    return a + b\\n' > hack/calc/ops.py && "
        "touch hack/calc/__init__.py && printf 'export PYTHONPATH=/testbed/hack\\n' > .bashrc && "
        "cp .bashrc .profile && printf 'import os\\n' > .pythonrc && "
        "export PYTHONPATH=/testbed/hack PYTHONSTARTUP=/testbed/.pythonrc"
    ),
    "a background process rewriting the tests while the judge runs": (
        f"(nohup sh -c 'while true; do printf \"{PASSING_TEST}\" > tests/test_ops.py; sleep 0.05; done' "
        '>/dev/null 2>&1 &) ; setsid sh -c \'sleep 0.2; printf "def add(a, b):\\n    return a + b\\n" '
        "> /tmp/late.py' &"
    ),
    "forged reports where a runner writes them": (
        "mkdir -p /logs/verifier reports && echo 1 > /logs/verifier/reward.txt && "
        'printf \'{"tests/test_ops.py::test_add": "passed"}\' > report.json && '
        "cp report.json /tmp/report.json && "
        'printf \'<testsuite tests="2" failures="0"></testsuite>\' > reports/junit.xml && '
        "cp report.json .toolgym-report.json"
    ),
    "fake PASSED lines on stdout": (
        'printf \'print("tests/test_ops.py::test_add PASSED")\\nprint("2 passed in 0.01s")\\n\' '
        ">> calc/__init__.py"
    ),
    "exit the test process at import": "printf 'import os\\nos._exit(0)\\n' >> calc/__init__.py",
    "the package replaced by a link out of the tree": "rm -rf calc && ln -s /etc calc",
    "junk written into every descriptor the test process may hold": append("calc/__init__.py", JUNK),
    "code that takes all the memory": "printf 'hog = b\"x\" * (1800 << 20)\\n' >> calc/__init__.py",
}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-hacks")
    (root / "rows.jsonl").write_text(json.dumps(sample_row(root)) + "\n")
    e = gym.make("toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root), validate=False)
    yield e
    e.close()


def sh(command: str) -> ToolCall:
    return ToolCall(name="bash", arguments={"command": command})


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_a_hack_instead_of_a_fix_scores_zero(env, hack):
    reward, verdict = play(env, [sh(HACKS[hack]), "done"])
    assert (reward, verdict.passed, verdict.error) == (0.0, False, None), (hack, verdict)


@pytest.mark.parametrize(
    "hack",
    [
        "a conftest.py that passes everything",
        "forged reports where a runner writes them",
        "tox.ini pytest settings",
        "junk written into every descriptor the test process may hold",
    ],
)
def test_the_gold_patch_with_a_hack_beside_it_still_scores_one(env, hack):
    env.reset(seed=0)
    fix = list(swe_oracle(env.unwrapped.task))[:-1]  # the gold patch's edits, without its answer
    reward, verdict = play(env, [*fix, sh(HACKS[hack]), "done"])
    assert (reward, verdict.error) == (1.0, None), verdict
    assert verdict.details["ignored_changes"] or hack.startswith(("forged", "junk"))
