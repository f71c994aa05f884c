"""SWE-v0's judge: the task's tests run on the agent's changes in a fresh sandbox child, out of its reach.

What the agent did reaches the judge only as **data**: the files its commands changed in the workspace
(``BashTool.changes``: read back after every process the episode left running is killed, ``.git`` aside).
The judge then builds the tree to test from scratch, in a fresh sandbox child that shares nothing with the
episode's session (its own private ``/tmp``, its own uid, its own process tree):

1. the base commit's archive is unpacked at ``/testbed`` (or the child's own directory without the view);
2. the agent's changes are applied, **except** changes to what decides how tests run or what they say
   (``protected``): any test file (``test_*.py``, ``*_test.py``, anything under a ``tests``/``test``
   directory, any file the task's ``test_patch`` touches), every ``conftest.py``, the pytest configuration
   files (``pytest.ini``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``), what would shadow pytest or hook
   the interpreter from the repository's root (``pytest.py``, ``_pytest/``, ``py.py``, ``sitecustomize.py``,
   ``usercustomize.py``), ``*.pth`` files and compiled bytecode (``*.pyc``, which Python loads instead of
   source). These stay as the base commit has them and are listed in the verdict (``ignored``). A change
   that cannot be made in the judged tree (a file behind a link out of it) is left out and listed too
   (``unapplied``): what the agent's tree does is never a failure of the judge;
3. the task's test files are put back as ``test_patch`` leaves them (the hidden tests arrive only now);
4. pytest runs the listed tests (``FAIL_TO_PASS`` + ``PASS_TO_PASS``) in a subprocess started with
   ``python -I`` (no ``PYTHON*`` variable, no user site) and a clean environment; pytest and its plugins are
   imported **before** the repository goes on ``sys.path``, so no file of the repository stands in for
   them; each test has a time limit (a hung test fails, the rest still count), and the test process an
   address-space limit below the run's (code that takes all memory fails its tests, not the run).
5. Outcomes reach the judge over a pipe only it reads, each record signed with a fresh key per run. Text
   the code under test prints, files it writes (a forged ``report.json`` or junit XML) and unsigned lines
   count for nothing; only the test process's own records count, and only while it runs (a process it
   leaves behind is not read); the judge keeps the per-test time limit itself too (a test still running
   past it has the test process killed), so undoing the runner's own watchdog from inside gains nothing.

**Inside the test process** (the package under test is imported there: what the agent writes into it runs
beside pytest). What holds by construction:

- *The key is out of the package's reach.* It lives only in the defaults of an audit hook (``_tg_seal`` in
  ``toolgym.sandbox.judge_driver``) added before any code of the repository can run; the runner's frames and
  objects do not refer to it (it is deleted from them), an audit hook cannot be removed or listed from
  Python, and the ways up to its function object, gc's ``get_objects`` and ``get_referrers``, leave it and
  its state out of what they return (called around the judge's filter, they are tampering;
  ``get_referents`` walks down from what its caller holds, and nothing there refers to the hook). The
  runner reports through ``sys.audit``; the hook signs and writes. A forked child's records are dropped.
  While the hook runs, its frame holds the key, so it calls no Python code that the repository can reach:
  it encodes its records itself and signs them with HMAC from ``hashlib.sha256`` bound before the
  repository ran (``json.dumps`` looks up ``json._default_encoder`` and ``hmac.new`` looks up
  ``hmac.HMAC``: each replaced, they climbed to the signing frame), compares only values of exact builtin
  types (a ``str`` subclass's ``__eq__`` would run), holds off gc (no finalizer or gc callback runs in it),
  and lets no exception out (its traceback would carry the frame). Code that runs anyway while it signs
  (a signal handler, a finalizer) and looks up a frame is tampering.
- *A pass needs evidence, never a report.* pytest's reports (``"P"`` records) can only take a pass away:
  any failed phase in any record wins. A listed test passed only when the hook wrote an ``"E"`` record that
  its own function returned: the runner wraps the test function for its call (inside a decorator's
  closure too), and the hook writes that record only when the event comes from that wrapper's code object,
  around a function whose code object is the one the test file's bytes compile to (compiled, as an import
  and as pytest's assertion rewriter make it, before the repository could run; any other code run under
  the test file's name is tampering). A test a listed file's class inherits from another file counts as
  that file's code, read the same way: the files its classes' bases are imported from, where such a file
  defines the base with test methods of its own and the change left it unchanged (a base the change
  rewrote: ``unverified``). So rewriting pytest's reports
  (``TestReport``, ``CallInfo``, ``call_and_report``, ``runtestprotocol``), pluggy's hook calls, or the
  judge's own plugin, skipping the call, exiting with 0 or forging records yields no pass. A FAIL_TO_PASS
  test that fails as expected (``xfail``) has not been fixed (a PASS_TO_PASS one still counts, as in
  SWE-bench).

What is a check (fail closed: the run stops, the verdict is 0 with ``details["tampering"]`` naming it):
pytest's, pluggy's and unittest's reporting classes and functions compared against their state before the
repository could run, at every test's evidence (``unittest.TestCase.assertEqual`` made a no-op, a result
class that swallows failures); and the means of reaching the runner's memory, seen by the hook: gc's own
``get_objects`` and ``get_referrers`` (not the judge's), other threads' frames and exceptions, trace and
profile functions, ctypes on Python's C API or raw memory called from the repository's code (an installed
package's own call, such as numba's compiler reading LLVM's buffers, runs), functions or code objects made
from the test's or the runner's code, and new audit hooks (refused).

What no in-process judge closes, and this one does not either: code that walks the interpreter's frames to
the runner's wrapper during a call, or that rebinds the names a test's own code looks up (the test
module's globals), or returns objects equal to everything, can still make a test pass. A Python signal
handler is handed the frame it interrupted, with no audit event: one that fires while the hook runs is
given the hook's frame (a package that sets a fast timer and keeps the hook busy can aim for that window).
Nor does it close reads and writes of the process's memory that raise no audit event (ctypes' pointer
objects and ``memmove``, numpy's ``__array_interface__`` over a raw address, a C extension): they can take the
key or rewrite a test's code in place.
Python before 3.8 has no audit hooks: there the outcomes are pytest's reports and the verdict says so
(``details["sealed"]``).
``tests/security/test_swe_in_process.py`` is the red team of all of the above.

Reward 1 when every listed test passes (SWE-bench's *resolved*), else 0; ``reward="fraction"`` gives the
share passed. A judge that cannot run (the sandbox failed, no pytest in the interpreter, the whole run past
its time limit) is a ``Verdict.error`` with the reason, never a 0. A listed test that is not collected,
errors in setup or teardown, is skipped, or passed without evidence (``unverified``) has not passed.
"""

from __future__ import annotations

import base64
import fnmatch
import json
import posixpath
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.base import Verifier
from toolgym.rewards.swe_memo import MEMO, sandbox_token, verdict_key
from toolgym.sandbox import Limits, Sandbox
from toolgym.sandbox.driver import PROCESS_DRIVER, last_json
from toolgym.sandbox.judge_driver import JUDGE_DRIVER, RUNNER
from toolgym.sandbox.limits import GiB, MiB

#: seconds for the whole judging run (unpack, apply, every test); past it the verdict is an error
DEFAULT_TIMEOUT = 900.0
#: seconds per test; past it that test fails and the run goes on without it
DEFAULT_TEST_TIMEOUT = 120.0
JUDGE_LIMITS = Limits(
    timeout_s=DEFAULT_TIMEOUT,
    cpu_s=DEFAULT_TIMEOUT,
    memory_bytes=2 * GiB,
    processes=128,
    open_files=1024,
    file_size_bytes=256 * MiB,
    disk_bytes=2 * GiB,
    # the judge's stdout is its own one reply (the test process's output reaches it through a pipe it cuts
    # to 8,000 characters): room for the records of a few thousand tests (a SymPy row lists 1,000)
    max_output_bytes=32 * MiB,
    max_output_total_bytes=64 * MiB,
)

#: pytest's configuration and plugins, wherever they are
_PROTECTED_NAMES = {"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"}
#: what would stand in for pytest or hook the interpreter from the repository's root (on sys.path)
_PROTECTED_AT_ROOT = {"pytest.py", "py.py", "sitecustomize.py", "usercustomize.py", "_pytest"}
_PROTECTED_PATTERNS = ("test_*.py", "*_test.py", "*.pth", "*.pyc")
_PROTECTED_DIRS = {"tests", "test", "__pycache__"}


def protected(path: str, test_paths: Iterable[str] = ()) -> bool:
    """Whether a change to ``path`` is left out of the judged tree (see the module docstring)."""
    parts = posixpath.normpath(path).split("/")
    name = parts[-1]
    return (
        path in set(test_paths)
        or name in _PROTECTED_NAMES
        or parts[0] in _PROTECTED_AT_ROOT
        or any(fnmatch.fnmatch(name, pattern) for pattern in _PROTECTED_PATTERNS)
        or bool(_PROTECTED_DIRS.intersection(parts[:-1]))
    )


class Changes(Protocol):
    """What a workspace's commands changed (``toolgym.tools.bash.Workspace`` from ``BashTool.changes``)."""

    files: dict[str, bytes]
    modes: dict[str, int]
    links: dict[str, str]
    deleted: set[str]


@dataclass
class FileChanges:
    """Changes given as data (the gold patch's post-image, a mined fix): path -> bytes, ``None`` deleted."""

    files: dict[str, bytes] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, post_image: Mapping[str, bytes | str | None]) -> FileChanges:
        out = cls()
        for rel, data in post_image.items():
            if data is None:
                out.deleted.add(rel)
            else:
                out.files[rel] = data if isinstance(data, bytes) else data.encode()
                out.modes[rel] = 0o644
        return out


@dataclass(frozen=True)
class TestRun:
    """The outcome of one judging run: per listed test ``passed``/``failed``/``skipped``/``not collected``/
    ``timed out``, or ``error`` set when the run itself could not be made. ``messages``: a failed test's
    error line; ``covered``: per test, the repository's functions it called (``trace=True``)."""

    outcomes: dict[str, str]
    output: str = ""
    ignored: tuple[str, ...] = ()
    error: str | None = None
    exit_code: int | None = None
    messages: dict[str, str] = field(default_factory=dict)
    covered: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    unapplied: tuple[str, ...] = ()  # changes that could not be made in the judged tree, and why
    matched: dict[str, list[str]] = field(default_factory=dict)  # listed id -> the collected tests it named
    tampering: tuple[str, ...] = ()  # what the seal caught the code under test doing (the run stopped there)
    sealed: bool = True  # False: the interpreter has no audit hooks, the outcomes are pytest's reports
    looked_up: tuple[str, ...] = ()  # host names the tests looked up beyond the machine (no answer here)


#: a compiled part's sources: a change to one makes the judge rebuild before the tests (``rebuild=``)
COMPILED_SOURCES = (".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".pyx", ".pxd", ".pxi", ".f", ".f90")
#: how a dataset wrote its test ids: ``exact`` (pytest node ids), ``pytest`` (SWE-bench's log parsers: an id
#: cut at its first space, as ``-rA``'s summary line splits it), ``pytest_options`` (cut, and a path
#: parameter shortened to its last part, SWE-bench's parser for requests, pydicom and pylint), ``forms``
#: (the runner names the forms of each test it ran: Django's ``name (module.Class)`` or its docstring's
#: first line, SymPy's bare function name; ``toolgym.swe.runners``)
ID_RULES = ("exact", "pytest", "pytest_options", "forms")
_WORST = ("failed", "timed out", "unverified", "no result", "skipped", "passed")
#: the test runners the judge plays (``toolgym.sandbox.judge_driver``): pytest, a script running unittest
#: cases (Django's ``tests/runtests.py``), SymPy's ``bin/test``
RUNNER_KINDS = ("pytest", "unittest", "sympy")


def listed_forms(nodeid: str, rule: str) -> set[str]:
    """The ids a dataset following ``rule`` may list the collected test ``nodeid`` under (the runner in
    ``judge_driver`` keeps the same rule)."""
    forms = {nodeid}
    if rule == "exact":
        return forms
    cut = nodeid.split()[0] if nodeid.split() else nodeid
    forms.add(cut)
    if "[" in cut and cut.endswith("]"):
        main, option = cut[:-1].split("[", 1)
        # a duplicate parametrization id's index, as another pytest wrote it: `1234-12340` (older pytest) or
        # `1234-1234_0` (newer, where the id ends in a digit): a row lists its ids as SWE-bench's pytest
        # wrote them, and the environment may resolve the other (sphinx's test_unparse[1234-1234_0])
        digits = re.search(r"(?<!_)\d{1,2}$", option[1:])
        if digits:
            for n in range(1, len(digits.group()) + 1):
                forms.add(f"{main}[{option[:-n]}_{option[-n:]}]")
        dedup = re.fullmatch(r"(.+)_(\d{1,2})", option)
        if dedup:
            forms.add(f"{main}[{dedup.group(1)}{dedup.group(2)}]")
        if (
            rule == "pytest_options"
            and option.startswith("/")
            and not option.startswith("//")
            and "*" not in option
        ):
            forms.add(f"{main}[/{option.split('/')[-1]}]")
    return forms


def _outcomes(
    ids: list[str] | None,
    records: list[dict],
    rule: str = "exact",
    evidence: list[dict] | None = None,
    xfail_counts: Iterable[str] | None = None,
) -> tuple[dict[str, str], bool, bool, str | None]:
    """Per listed test (every collected one when ``ids`` is None) its outcome; whether the runner got ready
    and finished; the test that was running when the runner stopped (its time limit), if any. A listed id
    that names no collected test exactly stands for the collected tests it is a ``listed_forms`` of (all
    of them must pass).

    ``records`` are the runner's reports: they can only take a pass away (any failed phase in any record
    wins). With ``evidence`` (the seal's records), a test passed only if the last call of its own function
    returned (``{"ran": id, "returned": true}``) and its call was reported passed; without it (an
    interpreter with no audit hooks) the reports decide alone. An expected failure (``xfail``) counts as
    passed only for the tests in ``xfail_counts`` (default: all; the judge gives its PASS_TO_PASS ones).
    An id standing for several tests passes when none failed and one passed (the skipped stand aside)."""
    ready = any("ready" in r for r in records)
    finished = any("finished" in r for r in records)
    collected: set[str] = set()
    aliases = _aliases(records)
    phases: dict[str, list[dict]] = {}
    running = None
    for r in records:
        if "collected" in r:
            collected.update(r["collected"])
        elif "start" in r:
            running = r["start"]
        elif "id" in r:
            phases.setdefault(r["id"], []).append(r)
            if r["when"] == "teardown" and r["id"] == running:
                running = None
    ran: dict[str, dict] = {}
    for e in evidence or ():
        if "ran" in e:
            ran[e["ran"]] = e  # the last call counts (a retrying decorator, hypothesis' examples)
    xfail_ok = None if xfail_counts is None else set(xfail_counts)

    def outcome(test: str) -> str:
        seen = phases.get(test, [])
        if test == running:
            return "timed out"
        if any(p["outcome"] == "failed" for p in seen):
            return "failed"
        if any(p["xfail"] for p in seen) and (xfail_ok is None or test in xfail_ok):
            return "passed"
        if any(p["when"] == "call" and p["outcome"] == "passed" for p in seen):
            if evidence is None:
                return "passed"
            proof = ran.get(test, {})
            if proof.get("returned") is True:
                return "passed"
            return "unverified" if "unverified" in proof or not proof else "failed"
        if any(p["outcome"] == "skipped" for p in seen):
            return "skipped"
        return "no result"

    out: dict[str, str] = {}
    for test in sorted(collected) if ids is None else ids:
        if test in collected:
            out[test] = outcome(test)
            continue
        matched = _named_by(test, collected, aliases, rule)
        # an id naming several tests: each that ran must pass; those skipped here stand aside when another
        # passed (a docstring shared by a base class's test in every backend's class, the memcached ones
        # skipped without a server: SWE-bench's log keeps the name's last line, a skip blocks nothing there)
        found = [outcome(c) for c in matched]
        counted = [o for o in found if o != "skipped"] if "passed" in found else found
        out[test] = min(counted, key=_WORST.index) if counted else "not collected"
    return out, ready, finished, running


def _aliases(records: list[dict]) -> dict[str, set[str]]:
    """The forms the runner named each test it ran under (``forms`` records: Django's and SymPy's runners)."""
    out: dict[str, set[str]] = {}
    for r in records:
        for test, forms in (r.get("forms") or {}).items():
            out.setdefault(test, set()).update(f for f in forms if isinstance(f, str))
    return out


def _named_by(test: str, collected: Iterable[str], aliases: Mapping[str, set[str]], rule: str) -> list[str]:
    if rule == "exact":
        return []
    if rule == "forms":
        return [c for c in collected if test in aliases.get(c, ())]
    return [c for c in collected if test in listed_forms(c, rule)]


def matched_ids(ids: Iterable[str], records: list[dict], rule: str) -> dict[str, list[str]]:
    """Which tests the runner ran each listed id that is not itself one stood for (a verdict's detail)."""
    collected = {c for r in records if "collected" in r for c in r["collected"]}
    aliases = _aliases(records)
    return {test: sorted(_named_by(test, collected, aliases, rule)) for test in ids if test not in collected}


def test_files_of(ids: Iterable[str]) -> list[str]:
    """The files of pytest node ids, in order (what pytest is pointed at; the plugin picks the tests)."""
    out: list[str] = []
    for test in ids:
        path = test.split("::", 1)[0]
        if path not in out:
            out.append(path)
    return out


def _entries(changes: Changes) -> list[list[Any]]:
    out: list[list[Any]] = [[rel, "deleted", 0, ""] for rel in sorted(changes.deleted)]
    for rel, data in sorted(changes.files.items()):
        out.append([rel, "file", changes.modes.get(rel, 0o644), base64.b64encode(data).decode()])
    out.extend([rel, "link", 0o777, target] for rel, target in sorted(changes.links.items()))
    return out


def run_tests(
    sandbox: Sandbox,
    archive: bytes,
    changes: Changes,
    tests: list[str] | None,
    *,
    files: list[str] | None = None,
    trace: bool = False,
    test_files: Mapping[str, bytes | None] | None = None,
    paths: tuple[str, str] = ("/tmp/testbed", "/testbed"),
    python: str = sys.executable,
    timeout: float = DEFAULT_TIMEOUT,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
    id_rule: str = "exact",
    rebuild: Sequence[str] | None = None,
    xfail_counts: Iterable[str] | None = None,
    runner: Mapping[str, Any] | None = None,
    plugin_autoload: bool = True,
) -> TestRun:
    """Run ``tests`` (pytest node ids) on ``archive`` + ``changes`` + ``test_files`` in a fresh sandbox
    child (see the module docstring). ``paths``: where the tree is in the child and the path it is run at.
    ``tests=None`` runs every test pytest collects from ``files`` (default: the repository's own
    configuration decides), judged by pytest's reports alone (no test file is known before collection to
    compile its evidence from: the miner's runs on a repository's own history); ``trace`` records which
    functions each test calls (the miner's coverage).
    ``id_rule``: how ``tests`` are written (``ID_RULES``); ``rebuild``: the command that rebuilds the
    compiled parts (``python`` is the run's interpreter), run first when a change touches a compiled
    source. ``xfail_counts``: the tests whose expected failure counts as passed (default: every one).
    ``runner``: the row's test command when it is not pytest (``toolgym.swe.runners.TestCommand.spec``:
    its ``kind``, ``program``, ``args``, ``env``; ``files``: the test files it runs). ``plugin_autoload``:
    False runs pytest without the plugins its environment has installed (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``:
    a repository whose suite needs none, toolgym's procedural world)."""
    if id_rule not in ID_RULES:
        raise ValueError(f"id_rule must be one of {ID_RULES}, not {id_rule!r}")
    if runner is not None and runner.get("kind", "pytest") not in RUNNER_KINDS:
        raise ValueError(f"runner kind must be one of {RUNNER_KINDS}, not {runner.get('kind')!r}")
    test_files = dict(test_files or {})
    ignored = sorted(
        rel for rel in (*changes.files, *changes.links, *changes.deleted) if protected(rel, test_files)
    )
    kept = [e for e in _entries(changes) if e[0] not in set(ignored)]
    put_back = [
        [rel, "deleted", 0, ""] if data is None else [rel, "file", 0o644, base64.b64encode(data).decode()]
        for rel, data in sorted(test_files.items())
    ]
    config = {
        "changes": kept,
        "tests": put_back,
        "ids": None if tests is None else list(tests),
        "files": files if files is not None else test_files_of(tests or []),
        "test_timeout": test_timeout,
        "trace": trace,
        "memory": JUDGE_LIMITS.memory_bytes - 512 * MiB,  # (the judge's own process and tar keep the rest)
        "id_rule": id_rule,
        "runner": dict(runner) if runner is not None else None,
        "network": "loopback_network" in sandbox.isolation.active,
        "plugin_autoload": plugin_autoload,
    }
    built_note = ""
    if rebuild and any(e[0].endswith(COMPILED_SOURCES) for e in kept):
        built, built_note = _rebuild(sandbox, archive, kept, rebuild, paths, python, timeout)
        config["changes"] = kept + built  # the extension modules, as data, over the agent's changes
    sent: dict[str, str | bytes] = {"testbed.tar": archive, "judge.json": json.dumps(config)}
    code = (
        f"{PROCESS_DRIVER}\n{JUDGE_DRIVER}\n_tg_judge({paths[0]!r}, {paths[1]!r}, {python!r}, {RUNNER!r})\n"
    )
    limits = JUDGE_LIMITS.model_copy(update={"timeout_s": timeout, "cpu_s": timeout})
    res = sandbox.run(code, files=sent, limits=limits)
    reply = last_json(res.stdout) if res.status == "ok" else None
    if reply is None:
        if res.status == "timeout":
            why = f"the test run took longer than {timeout:g} s"
        elif res.status == "ok" and res.stdout_truncated:
            why = f"the judge's reply was cut at {limits.max_output_bytes:,} bytes (too many records)"
        else:
            why = f"the judge failed ({res.status}): {res.detail or res.stderr[-300:]}"
        return TestRun({}, error=why, ignored=tuple(ignored))
    records = reply["records"]
    sealed = any(r.get("sealed") for r in records if "ready" in r)
    evidence = reply.get("evidence", []) if sealed else None
    tampering = tuple(e["tampering"] for e in evidence or () if "tampering" in e)
    if tests is None:  # every collected test of a repository's own tree (the miner): its reports decide
        evidence = None
    outcomes, ready, finished, running = _outcomes(
        None if tests is None else list(tests), records, id_rule, evidence, xfail_counts
    )
    output = built_note + reply["out"][-4000:]
    messages = {r["id"]: r["message"] for r in records if r.get("message")}
    covered = {r["covered"]: [tuple(f) for f in r["functions"]] for r in records if "covered" in r}
    if not ready:
        return TestRun(
            outcomes,
            output=output,
            ignored=tuple(ignored),
            error=f"{(runner or {}).get('kind', 'pytest')} could not start with {python} "
            f"(exit code {reply['exit']}): " + output[-300:].strip(),
            exit_code=reply["exit"],
        )
    if any(r.get("network") == "wanted" for r in records) and set(outcomes.values()) != {"passed"}:
        return TestRun(outcomes, output=output, ignored=tuple(ignored), error=no_network(sandbox))
    if tampering:
        output += f"\n[toolgym: the run stopped where the code under test tampered with it: {tampering[0]}]"
    elif running is not None and not finished:
        output += f"\n[toolgym: {running} ran past its {test_timeout:g} s limit; the run stopped there]"
    elif not finished:
        output += f"\n[toolgym: the test run ended early, exit code {reply['exit']}]"
    return TestRun(
        outcomes,
        output=output,
        ignored=tuple(ignored),
        exit_code=reply["exit"],
        messages=messages,
        covered=covered,
        unapplied=tuple(reply["unapplied"]),
        matched=matched_ids(tests or [], records, id_rule),
        tampering=tampering,
        sealed=sealed,
        looked_up=tuple(sorted({r["looked_up"] for r in records if "looked_up" in r})),
    )


def no_network(sandbox: Sandbox) -> str:
    """Why a run whose tests open inet sockets cannot be judged on ``sandbox``: an error, never a 0 (a test
    serving on 127.0.0.1 fails there with PermissionError whatever the change)."""
    why = sandbox.isolation.missing.get("loopback_network", "the sandbox was made without network='loopback'")
    return (
        "the tests open inet sockets (a local server, a connect) and this sandbox gives them no network: "
        f"{why}. Judge where network namespaces are allowed (as root, or with user namespaces)"
    )


def _rebuild(
    sandbox: Sandbox,
    archive: bytes,
    changes: list[list[Any]],
    rebuild: Sequence[str],
    paths: tuple[str, str],
    python: str,
    timeout: float,
) -> tuple[list[list[Any]], str]:
    """The compiled parts rebuilt from the agent's sources in a sandbox child of their own (the build script
    and the compilers run there, never beside the test runner): the extension modules it made, as change
    entries, and a line for the output."""
    config = {"changes": changes, "tests": [], "rebuild": list(rebuild), "timeout": max(timeout / 2, 1.0)}
    code = f"{PROCESS_DRIVER}\n{JUDGE_DRIVER}\n_tg_build({paths[0]!r}, {paths[1]!r}, {python!r})\n"
    limits = JUDGE_LIMITS.model_copy(update={"timeout_s": timeout, "cpu_s": timeout})
    res = sandbox.run(code, files={"testbed.tar": archive, "build.json": json.dumps(config)}, limits=limits)
    reply = last_json(res.stdout) if res.status == "ok" else None
    if reply is None:
        return [], f"[toolgym: the rebuild of the compiled parts failed ({res.status}): {res.detail or ''}]\n"
    note = f"[toolgym: rebuilt the compiled parts, exit {reply['exit']}, {len(reply['files'])} module(s)]\n"
    if reply["exit"]:
        note += reply["out"][-2000:] + "\n"
    return reply["files"], note


def test_sandbox_for(tool: Any) -> Sandbox:
    """Where a bash tool's tests run: the process-wide test sandbox (pytest preloaded) when the tool uses the
    shared terminal sandbox, else the tool's own sandbox (its layers and limits, whatever they are); a local
    one's twin with a loopback network of each run's own (``LocalSandbox.with_network``), as the test
    sandbox has: suites written for SWE-bench's containers serve on 127.0.0.1."""
    from toolgym.sandbox import LocalSandbox
    from toolgym.sandbox.shared import shared_test_sandbox

    own = getattr(tool, "own_sandbox", None)
    if own is None:
        return shared_test_sandbox()
    return own.with_network("loopback") if isinstance(own, LocalSandbox) else own


class WorkspaceSource(Protocol):
    """What the judge needs of a task beyond ``task.data``: its base archive and hidden test files."""

    def archive(self, task: Task) -> bytes: ...

    def test_files(self, task: Task) -> dict[str, bytes | None]: ...


class SWEJudge(Verifier):
    """Judges a SWE episode by running its task's tests on the agent's changes (see the module docstring).

    ``tool``: the env's bash tool (whose session holds the workspace); ``workspaces``: the task's base
    archive and test files; ``reward``: ``"resolved"`` (1 when every listed test passes) or ``"fraction"``.
    ``sandbox``: where the tests run; default the process-wide test sandbox (``shared_test_sandbox``: the
    terminal sandbox's layers, pytest preloaded) when the tool runs on the shared terminal sandbox, else the
    tool's own."""

    name = "swe"
    judges_answer = False  # the tests judge the repository; the answer only says the work is done

    def __init__(
        self,
        tool: Any,
        workspaces: WorkspaceSource,
        *,
        reward: Literal["resolved", "fraction"] = "resolved",
        python: str | Callable[[Task], str] = sys.executable,
        timeout: float = DEFAULT_TIMEOUT,
        test_timeout: float = DEFAULT_TEST_TIMEOUT,
        sandbox: Sandbox | None = None,
        options: Callable[[Task], Mapping[str, Any]] | None = None,
    ):
        if reward not in ("resolved", "fraction"):
            raise ValueError(f"reward must be 'resolved' or 'fraction', got {reward!r}")
        self.tool, self.workspaces, self.reward = tool, workspaces, reward
        self.python_for = python if callable(python) else (lambda task: python)
        self.timeout, self.test_timeout = timeout, test_timeout
        self._sandbox = sandbox
        self.options = options or (lambda task: {})  # per task: id_rule, rebuild (``judge``'s keywords)

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox or test_sandbox_for(self.tool)

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        changes = self.tool.for_verdict("changes")
        if isinstance(changes, Verdict):
            return changes
        paths = self.tool.workspace_paths()
        if isinstance(paths, str):
            return Verdict(reward=0.0, passed=False, error=paths)
        return judge(
            self.sandbox,
            self.workspaces.archive(task),
            changes,
            task,
            self.workspaces.test_files(task),
            paths=paths,
            reward=self.reward,
            python=self.python_for(task),
            timeout=self.timeout,
            test_timeout=self.test_timeout,
            **self.options(task),
        )


def judge(
    sandbox: Sandbox,
    archive: bytes,
    changes: Changes,
    task: Task,
    test_files: Mapping[str, bytes | None],
    *,
    paths: tuple[str, str] = ("/tmp/testbed", "/testbed"),
    reward: str = "resolved",
    python: str = sys.executable,
    timeout: float = DEFAULT_TIMEOUT,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
    id_rule: str = "exact",
    rebuild: Sequence[str] | None = None,
    runner: Mapping[str, Any] | None = None,
    plugin_autoload: bool = True,
) -> Verdict:
    """The verdict on ``changes`` for a task with ``fail_to_pass`` / ``pass_to_pass`` in its data
    (``runner``: the row's test command when it is not pytest; ``plugin_autoload``: ``run_tests``'). A
    tree judged before in this process with the same tests, interpreter, runner, limits and sandbox gets
    that verdict again (``toolgym.rewards.swe_memo``)."""
    options: dict[str, Any] = {
        "paths": paths,
        "reward": reward,
        "python": python,
        "timeout": timeout,
        "test_timeout": test_timeout,
        "id_rule": id_rule,
        "rebuild": list(rebuild) if rebuild is not None else None,
        "runner": dict(runner) if runner is not None else None,
        "plugin_autoload": plugin_autoload,
    }
    token = sandbox_token(sandbox)
    if token is None:  # (a sandbox this process cannot tell from another: nothing remembered)
        return _judge_now(sandbox, archive, changes, task, test_files, **options)
    key = verdict_key(
        {
            "archive": archive,
            "changes": _entries(changes),
            "task": [task.id, list(task.data["fail_to_pass"]), list(task.data["pass_to_pass"])],
            "test_files": dict(test_files),
            "options": options,
            "sandbox": [token, sorted(sandbox.isolation.active)],
        }
    )
    return MEMO.verdict(key, lambda: _judge_now(sandbox, archive, changes, task, test_files, **options))


def _judge_now(
    sandbox: Sandbox,
    archive: bytes,
    changes: Changes,
    task: Task,
    test_files: Mapping[str, bytes | None],
    *,
    paths: tuple[str, str],
    reward: str,
    python: str,
    timeout: float,
    test_timeout: float,
    id_rule: str,
    rebuild: Sequence[str] | None,
    runner: Mapping[str, Any] | None,
    plugin_autoload: bool,
) -> Verdict:
    """``judge``'s verdict, made: the tests run."""
    f2p, p2p = list(task.data["fail_to_pass"]), list(task.data["pass_to_pass"])
    run = run_tests(
        sandbox,
        archive,
        changes,
        f2p + p2p,
        test_files=test_files,
        paths=paths,
        python=python,
        timeout=timeout,
        test_timeout=test_timeout,
        id_rule=id_rule,
        rebuild=rebuild,
        xfail_counts=p2p,  # a FAIL_TO_PASS test that fails as expected has not been fixed
        runner=runner,
        files=list(runner["files"]) if runner is not None and "files" in runner else None,
        plugin_autoload=plugin_autoload,
    )
    details: dict[str, Any] = {"ignored_changes": list(run.ignored)}
    if run.matched:
        details["matched_ids"] = run.matched
    if run.unapplied:
        details["unapplied_changes"] = list(run.unapplied)
    if run.looked_up:  # (nothing beyond the machine answers: tests that need a real network fail here)
        details["looked_up"] = list(run.looked_up)
    if run.error is not None:
        details["output"] = run.output[-1500:]
        return Verdict(reward=0.0, passed=False, details=details, error=run.error)
    if not run.sealed:
        details["sealed"] = "no: Python before 3.8 has no audit hooks; the outcomes are pytest's reports"
    failed = [t for t in f2p + p2p if run.outcomes.get(t) != "passed"]
    passed = len(f2p) + len(p2p) - len(failed)
    total = max(len(f2p) + len(p2p), 1)
    details.update(
        fail_to_pass={t: run.outcomes[t] for t in f2p},
        pass_to_pass_failed={t: run.outcomes[t] for t in p2p if t in failed},
        tests_passed=f"{passed}/{len(f2p) + len(p2p)}",
    )
    if failed or run.tampering:
        details["output"] = run.output[-1500:]
    if run.tampering:  # the run stopped where it was caught: 0, whatever had passed before
        details["tampering"] = list(run.tampering)
        return Verdict(reward=0.0, passed=False, details=details)
    value = (0.0 if failed else 1.0) if reward == "resolved" else passed / total
    return Verdict(reward=value, passed=not failed, details=details)
