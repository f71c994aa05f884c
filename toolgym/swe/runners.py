"""The test command a SWE row's tests run by, read from the row, and the runner the judge plays for it.

SWE-bench runs each repository's tests with the repository's own command. Where a row says it, that
command decides; first match wins (``TestCommand.source`` records which):

1. the row's ``eval_script`` (SWE-bench 5.x rows): the line between its ``: '>>>>> Start Test Output'`` and
   ``: '>>>>> End Test Output'`` markers, the test labels or files included;
2. a ``test_cmd`` (SWE-rebench's ``install_config``, a recipe file, SWE-bench's per-version specs), with the
   test patch's files as SWE-bench's harness turns them into arguments (Django: ``tests/a/b.py`` is the label
   ``a.b``; the others: the paths);
3. none: pytest on the listed node ids' files, as for every row before.

The runner the judge plays (``toolgym.sandbox.judge_driver``, sealed as pytest's is):

- ``unittest``: a script that runs unittest cases, run as ``__main__`` in the judge's test process: Django's
  ``./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 <labels>``. Ids are unittest's
  ``name (module.Class)`` (``name (module.Class.name)`` on Python 3.11+) or, where the test method has a
  docstring, its first line, as Django's verbose runner prints them;
- ``sympy``: SymPy's ``bin/test -C --verbose <files>``, played by the judge by SymPy's runner's rules (the
  runner in the repository is code under test). Ids are bare function names (``test_MpmathPrinter``);
- ``pytest``: everything else (``pytest``, ``python -m pytest``, ``tox ... -- <paths>``): the judge's pytest.

Outcomes reach the judge over the seal's signed channel, never from a log the code under test can print into.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.swe.recipes import swebench_specs

START_MARK = ": '>>>>> Start Test Output'"
END_MARK = ": '>>>>> End Test Output'"
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: a unittest id as Django's verbose runner prints it: ``name (dotted.path)``
_UNITTEST_ID = re.compile(r"^(\w+) \(([\w.]+)\)$")
_NON_TEST_SUFFIXES = (".json", ".png", ".csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml")


@dataclass(frozen=True)
class TestCommand:
    """A row's test command: the ``kind`` of runner, its ``program`` (``tests/runtests.py``, ``bin/test``,
    ``pytest``), its ``args`` (labels and files included), what it sets in the environment, and the test
    files whose code the seal accepts as the tests' (a path ending in ``/``: every ``.py`` file under it)."""

    __test__ = False  # (not a pytest test class)

    kind: str
    program: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    source: str = ""

    @property
    def id_rule(self) -> str | None:
        """How the row's ids are matched: the runner names each test's forms (None: pytest's rules)."""
        return None if self.kind == "pytest" else "forms"

    def spec(self) -> dict[str, Any]:
        """What the judge's runner reads (``toolgym.rewards.swe.run_tests``'s ``runner``)."""
        return {"kind": self.kind, "program": self.program, "args": list(self.args), "env": dict(self.env),
                "files": list(self.files)}  # fmt: skip


def runner_kind(program: str) -> str:
    """The runner a program stands for: ``unittest`` (a ``runtests.py`` script), ``sympy`` (``bin/test``),
    else ``pytest``."""
    name = program.removeprefix("./")
    if name.endswith("runtests.py"):
        return "unittest"
    if name == "bin/test":
        return "sympy"
    return "pytest"


def split_command(line: str) -> tuple[dict[str, str], str, list[str]]:
    """``VAR=value ... program args...`` as (its variables, the program, the arguments); a leading
    ``python`` runs its script (``python tests/runtests.py``)."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ValueError(f"the test command {line!r} cannot be read: {exc}") from None
    env: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        raise ValueError(f"the test command {line!r} names no program")
    program, args = words[0], words[1:]
    if re.fullmatch(r"python[\d.]*", program) and args and args[0].endswith(".py"):
        program, args = args[0], args[1:]
    return env, program.removeprefix("./"), args


def eval_script_command(script: str) -> str | None:
    """The test command of a SWE-bench 5.x ``eval_script``: the line between its output markers."""
    lines = script.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == START_MARK)
        end = next(i for i, line in enumerate(lines) if i > start and line.strip() == END_MARK)
    except StopIteration:
        return None
    body = [line.strip() for line in lines[start + 1 : end] if line.strip()]
    return " && ".join(body) if len(body) > 1 else (body[0] if body else None)


def patched_files(test_patch: str) -> list[str]:
    """The files a test patch touches, in order (``diff --git a/X b/X``)."""
    out: list[str] = []
    for path in re.findall(r"^diff --git a/\S+ b/(\S+)$", test_patch or "", flags=re.M):
        if path not in out:
            out.append(path)
    return out


def directives(kind: str, test_patch: str) -> list[str]:
    """The test patch's files as SWE-bench's harness passes them to the test command: Django's labels
    (``tests/a/b.py`` -> ``a.b``), the test files' paths for the others."""
    paths = [p for p in patched_files(test_patch) if not p.endswith(_NON_TEST_SUFFIXES)]
    if kind != "unittest":
        return paths
    py = [p for p in paths if p.endswith(".py")]
    return [p.removesuffix(".py").removeprefix("tests/").replace("/", ".") for p in py]


def _module_files(dotted: str, base: str) -> list[str]:
    """Where a dotted module (or a name in one) may lie under ``base``: each prefix's file and package."""
    parts = dotted.split(".")
    out: list[str] = []
    for n in range(1, len(parts) + 1):
        stem = "/".join([base, *parts[:n]]) if base else "/".join(parts[:n])
        out += [f"{stem}.py", f"{stem}/__init__.py"]
    return out


def files_to_seal(
    kind: str, program: str, args: Sequence[str], ids: Iterable[str], test_patch: str
) -> list[str]:
    """The files whose code the seal accepts as the tests' (what the runner runs, and where the listed
    ids' tests lie); paths that do not exist are passed over by the runner."""
    out: list[str] = [p for p in patched_files(test_patch) if p.endswith(".py")]
    if kind == "sympy":
        out += [a for a in args if a.endswith(".py")]
    elif kind == "unittest":
        base = program.rsplit("/", 1)[0] if "/" in program else ""
        for label in (a for a in args if not a.startswith("-")):
            if "/" in label or label.endswith(".py"):
                out.append(label)
                continue
            out += _module_files(label, base)
            out.append(f"{base}/{label.replace('.', '/')}/" if base else f"{label.replace('.', '/')}/")
        for test in ids:
            m = _UNITTEST_ID.match(test)
            if m:
                out += _module_files(m.group(2), base)
    return list(dict.fromkeys(out))  # (in order, once each)


def listed_ids(value: Any) -> list[str]:
    """A row's FAIL_TO_PASS or PASS_TO_PASS: a list of ids, or its JSON text (as SWE-bench's parquet files
    hold it). ``ValueError`` saying what is wrong otherwise (the task loader refuses the row with it)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            raise ValueError("is neither a JSON list nor a list") from None
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of test ids")
    return list(value)


def _ids(row: Mapping[str, Any], column: str) -> list[str]:
    """The ids, or none where the column is malformed (the task loader refuses that row, saying why)."""
    try:
        return listed_ids(row.get(column, row.get(column.upper())))
    except ValueError:
        return []


def command_of(row: Mapping[str, Any], test_cmd: str | Sequence[str] | None = None) -> TestCommand | None:
    """The row's test command (module docstring), or None where only pytest's rules are known.
    ``test_cmd``: the recipe's, where the row carries none of its own."""
    ids = [*_ids(row, "fail_to_pass"), *_ids(row, "pass_to_pass")]
    test_patch = str(row.get("test_patch") or "")
    line = eval_script_command(str(row.get("eval_script") or ""))
    source = "eval_script"
    if line is None:
        config = row.get("install_config")
        own = config.get("test_cmd") if isinstance(config, Mapping) else None
        base = own or row.get("test_cmd") or test_cmd
        if isinstance(base, list | tuple):
            base = base[-1] if base else None
        if not base:
            return None
        source = "install_config" if own else "test_cmd"
        env, program, args = split_command(str(base))
        args += directives(runner_kind(program), test_patch)
    else:
        if " && " in line:  # a compound command: the runner is its last part's
            line = line.rsplit(" && ", 1)[1]
        env, program, args = split_command(line)
    kind = runner_kind(program)
    files = files_to_seal(kind, program, args, ids, test_patch)
    return TestCommand(kind, program, tuple(args), env, tuple(files), source)


#: SWE-bench's parsers that shorten a path parameter to its last part, by every name a row's ``log_parser``
#: column gives them (5.x names a parser per repository: ``parse_log_requests = parse_log_pytest_options``)
OPTIONS_PARSERS = frozenset(
    ("parse_log_pytest_options", "parse_log_requests", "parse_log_pylint", "parse_log_pydicom")
)


def id_rule_for(row: Mapping[str, Any]) -> str:
    """How a pytest row's test ids were written (``toolgym.rewards.swe.ID_RULES``): its ``log_parser`` column
    where it has one, else SWE-bench's parser for its repository, else pytest's summary-line form."""
    parser = str(row.get("log_parser") or swebench_specs()["log_parsers"].get(str(row.get("repo", ""))) or "")
    return "pytest_options" if parser in OPTIONS_PARSERS or "options" in parser else "pytest"


def specs_test_cmd(row: Mapping[str, Any]) -> str | None:
    """SWE-bench's test command for the row's repository and version, where its specs have one."""
    spec = swebench_specs()["specs"].get(str(row.get("repo", "")), {}).get(str(row.get("version", "")))
    return spec.get("test_cmd") if isinstance(spec, Mapping) else None


def row_command(row: Mapping[str, Any], test_cmd: str | Sequence[str] | None = None) -> TestCommand | None:
    """The row's test command: its own, else ``test_cmd`` (its recipe's), else SWE-bench's specs'."""
    return command_of(row, test_cmd or specs_test_cmd(row))


def judge_options_for(row: Mapping[str, Any], test_cmd: str | Sequence[str] | None = None) -> dict[str, Any]:
    """The judge's keywords for a row (``toolgym.rewards.swe.judge``): the runner its test command names,
    or pytest's id rule."""
    command = row_command(row, test_cmd)
    if command is not None and command.id_rule is not None:
        return {"id_rule": command.id_rule, "runner": command.spec()}
    return {"id_rule": id_rule_for(row)}
