"""A seeded procedural world of small Python repositories with injected bugs, for toolgym/SWE-v0.

``generate_repo(seed, level)`` writes a package of 3-5 modules, each drawn from one of ten themes (text
utilities, statistics, money, inventory, intervals and dates, plane geometry, grids, scheduling, parsing,
validation; the templates are ``toolgym.swe.themes``) with 3-5 typed, documented functions and, in some,
a small class, plus a pytest suite that passes. Then it breaks it:

=====  ======================================================================================================
level  the task
=====  ======================================================================================================
1      one single-point mutation (:mod:`toolgym.swe.mutate`) in one function; a bug report, one symptom
2      two mutations in two different modules; the report shows both symptoms
3      one function removed from its module, its tests held back as hidden tests; a feature request for it
=====  ======================================================================================================

A mutation is kept only when it breaks a test the clean code passes (candidates are tried in a seeded order,
so equivalent mutants are skipped). The report is written as a user would: the call, what they expected and
what they got (the value the buggy code returns, or the exception it raises), never the location or the nature
of the fix.

The package, module, function, parameter and class names, the constants and defaults, which functions appear
and the test inputs all vary with the seed, so a task cannot be answered from memory, while the code stays
natural and correct. A seed gives the same repository everywhere: ``random.Random`` seeded with a SHA-512
digest of the seed (never the per-process ``hash()``), templates in a fixed order, no iteration over sets in
the generator or in the generated code (whose results would then depend on ``PYTHONHASHSEED``).

**Tests are computed in-process.** The expected value of every test is obtained by executing the clean
generated modules in this process, and the outcome of every test on the buggy code the same way: the buggy
module is executed, the test's setup and call are run and compared with the expected value, an exception being
a failure. Executing this code here is safe and always ends because it is our own: the generated functions use
only bounded constructs (``for`` loops over finite sequences and ranges; no ``while``, no recursion, no I/O,
no imports of anything but the standard library), and a single-point mutation of such code can change a bound,
an operator or a statement but cannot make a loop unbounded. The judge of SWE-v0 still runs real pytest in the
sandbox; ``tests/envs/test_swe_world.py`` checks that pytest agrees with the outcomes computed here.

Why one module of this length: building a repository and injecting its bugs are one pipeline (templates
instantiated, tests computed in-process, bugs chosen where the tests see them, the issue written); the
templates are in themes.py and the mutations in mutate.py.
"""

from __future__ import annotations

import ast
import hashlib
import random
import textwrap
import types
from collections.abc import Sequence
from dataclasses import dataclass
from string import Template

from toolgym.swe.mutate import KINDS, Mutation, apply_mutation, mutations_of
from toolgym.swe.themes import STEMS, SUFFIXES, THEMES, ClassTemplate, FunctionTemplate, literal

LEVELS = (1, 2, 3)


@dataclass
class GeneratedRepo:
    """One task's repository, clean and as the task starts, with what judges it."""

    name: str  # the package's name, e.g. "ledgerkit"
    files: dict[str, str]  # the clean repository: path -> text (package, tests/, README.md, pyproject.toml)
    start_files: dict[
        str, str
    ]  # the repository as the task starts (bugs injected; level 3: the feature missing)
    hidden_tests: dict[str, str]  # test files added only when judging (level 3: the missing feature's tests)
    fail_to_pass: list[str]  # pytest node ids failing on start_files (+ hidden_tests), passing on files
    pass_to_pass: list[str]  # node ids passing on both
    problem_statement: str
    mutations: list[Mutation]  # the injected bugs (empty for level 3)
    level: int


# --- building a repository ----------------------------------------------------------------------------------


@dataclass
class _Unit:
    """A generated function or class with its test cases: (setup statements, the asserted expression)."""

    name: str
    source: str
    cases: list[tuple[tuple[str, ...], str]]
    is_class: bool

    @property
    def test_stem(self) -> str:
        """The name its tests are named after: the function's, or the class's in snake case."""
        if not self.is_class:
            return self.name
        return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in self.name).lstrip("_")


@dataclass
class _Module:
    name: str
    doc: str
    topic: str
    units: list[_Unit]

    def source(self, without: str | None = None) -> str:
        """The module's text (less the unit named ``without``: level 3's missing feature)."""
        body = "\n\n\n".join(unit.source for unit in self.units if unit.name != without)
        return f'"""{self.doc}"""\n\nfrom __future__ import annotations\n\n\n{body}\n'


@dataclass(frozen=True)
class _Test:
    """One pytest function: ``setup`` then ``assert <expr> ...``, run with the module's names in scope (and
    the module itself under its name, which the hidden tests use)."""

    path: str
    name: str
    module: str
    unit: str
    setup: tuple[str, ...]
    expr: str

    @property
    def node_id(self) -> str:
        return f"{self.path}::{self.name}"


#: a test's run: (True, the value) or (False, the exception raised)
_Result = tuple[bool, object]


def _instantiate(template: FunctionTemplate | ClassTemplate, rng: random.Random) -> _Unit:
    name = rng.choice(template.names)
    values = {key: str(rng.choice(options)) for key, options in template.choices.items()}
    source = Template(textwrap.dedent(template.source).strip()).substitute(values, name=name)
    if isinstance(template, ClassTemplate):
        cases = [(tuple(setup), expr) for setup, expr in template.scenarios(rng, name)]
        return _Unit(name, source, cases, is_class=True)
    return _Unit(name, source, [((), f"{name}({args})") for args in template.cases(rng)], is_class=False)


def _rng(key: str) -> random.Random:
    """A generator for ``key``, seeded with its SHA-512 digest: the same everywhere, and unrelated for keys
    that differ in one character (``random.Random("...:0")`` and ``("...:1")`` start out correlated)."""
    return random.Random(int.from_bytes(hashlib.sha512(f"toolgym-swe:{key}".encode()).digest(), "big"))


def _modules_of(seed: int) -> tuple[str, list[_Module]]:
    """The package's name and its modules: the clean code, the same for every level of a seed."""
    rng = _rng(f"repo:{seed}")
    package = rng.choice(STEMS) + rng.choice(SUFFIXES)
    modules = []
    for theme in rng.sample(THEMES, rng.randint(3, 5)):
        picks = rng.sample(theme.functions, rng.randint(3, min(5, len(theme.functions))))
        units = [_instantiate(template, rng) for template in picks]
        if theme.classes and rng.random() < 0.5:
            units.append(_instantiate(rng.choice(theme.classes), rng))
        modules.append(_Module(rng.choice(theme.modules), theme.doc, theme.topic, units))
    return package, modules


def _tests_of(module: _Module, hidden: str | None) -> list[_Test]:
    """The module's tests; those of the unit named ``hidden`` go to their own file and call it through the
    module (``pricing.apply_discount(...)``), so each fails on its own, not at import, while it is missing."""
    tests = []
    for unit in module.units:
        for number, (setup, expr) in enumerate(unit.cases, 1):
            if unit.name == hidden:
                path, expr = f"tests/test_{module.name}_{unit.name}.py", f"{module.name}.{expr}"
            else:
                path = f"tests/test_{module.name}.py"
            tests.append(_Test(path, f"test_{unit.test_stem}_{number}", module.name, unit.name, setup, expr))
    return tests


def _run(package: str, sources: dict[str, str], tests: Sequence[_Test]) -> dict[str, _Result]:
    """Run ``tests`` in-process against ``sources`` (module name -> text); see the module docstring."""
    scopes: dict[str, dict[str, object] | BaseException] = {}
    for name, source in sources.items():
        module = types.ModuleType(f"{package}.{name}")
        try:
            exec(compile(source, f"{package}/{name}.py", "exec", dont_inherit=True), module.__dict__)
        except Exception as exc:  # a module that fails to import fails all its tests, as under pytest
            scopes[name] = exc
        else:
            scopes[name] = {**module.__dict__, name: module}
    results: dict[str, _Result] = {}
    for test in tests:
        scope = scopes[test.module]
        if isinstance(scope, BaseException):
            results[test.node_id] = (False, scope)
            continue
        scope = dict(scope)
        try:
            exec(compile("\n".join(test.setup), test.path, "exec", dont_inherit=True), scope)
            results[test.node_id] = (
                True,
                eval(compile(test.expr, test.path, "eval", dont_inherit=True), scope),
            )
        except Exception as exc:
            results[test.node_id] = (False, exc)
    return results


def _assertion(expr: str, expected: object) -> str:
    """The test's assert line, as a person writes it (``is None``, a bare truth test for a bool)."""
    if expected is None:
        return f"assert {expr} is None"
    if expected is True:
        return f"assert {expr}"
    if expected is False:
        return f"assert not {expr}"
    return f"assert {expr} == {literal(expected)}"


def _passes(result: _Result, expected: object) -> bool:
    """Whether ``_assertion``'s line holds for that result (exactly what pytest checks)."""
    ok, value = result
    if not ok:
        return False
    try:
        if expected is None:
            return value is None
        if expected is True:
            return bool(value)
        if expected is False:
            return not value
        return bool(value == expected)
    except Exception:
        return False


def _test_file(package: str, module: str, tests: list[_Test], expected: dict[str, object]) -> str:
    if tests[0].path.endswith(f"/test_{module}.py"):
        names = sorted({test.unit for test in tests}, key=lambda name: (not name[0].isupper(), name))
        header = f"from {package}.{module} import {', '.join(names)}\n"
    else:
        header = f"from {package} import {module}\n"
    blocks = []
    for test in tests:
        lines = [*test.setup, _assertion(test.expr, expected[test.node_id])]
        blocks.append(f"def {test.name}():\n" + "\n".join(f"    {line}" for line in lines))
    return header + "\n\n" + "\n\n\n".join(blocks) + "\n"


def _files(
    package: str,
    modules: list[_Module],
    sources: dict[str, str],
    tests: list[_Test],
    expected: dict[str, object],
) -> dict[str, str]:
    """The repository's files: the package, its tests, README.md and pyproject.toml."""
    version = f"0.{len(package) % 7 + 1}.{sum(map(ord, package)) % 10}"
    topics = [module.topic for module in modules]
    listing = ", ".join(topics[:-1]) + f" and {topics[-1]}"
    files = {
        f"{package}/__init__.py": f'"""{package}: helpers for {listing}."""\n\n__version__ = "{version}"\n',
        "README.md": (
            f"# {package}\n\n`{package}` is a small, dependency-free Python library of helpers for "
            f"{listing}, one module each ({', '.join(f'`{package}.{module.name}`' for module in modules)}). "
            "Every function is documented in its docstring, and the test suite under `tests/` runs with "
            "`python -m pytest` from the repository's root.\n"
        ),
        "pyproject.toml": (
            f'[project]\nname = "{package}"\nversion = "{version}"\n'
            f'description = "Small helpers for {listing}."\nrequires-python = ">=3.10"\n'
        ),
    }
    for module in modules:
        files[f"{package}/{module.name}.py"] = sources[module.name]
    by_file: dict[str, list[_Test]] = {}
    for test in tests:
        by_file.setdefault(test.path, []).append(test)
    for path, file_tests in by_file.items():
        files[path] = _test_file(package, file_tests[0].module, file_tests, expected)
    return files


# --- bugs ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Symptom:
    """What a user saw: a failing test's code, run on the buggy package."""

    module: str
    unit: str
    test: _Test
    expected: object
    got: _Result


def _seeded_order(rng: random.Random, candidates: list[Mutation]) -> list[Mutation]:
    """The candidates in the order they are tried: functions shuffled, and within one, its kinds shuffled (so
    that a kind with many candidates, such as removed statements, is not drawn more often), then each kind's
    candidates shuffled."""
    by_function: dict[str, list[Mutation]] = {}
    for mutation in candidates:
        by_function.setdefault(mutation.function, []).append(mutation)
    functions = list(by_function)
    rng.shuffle(functions)
    order = []
    for function in functions:
        kinds = [kind for kind in KINDS if any(m.kind == kind for m in by_function[function])]
        rng.shuffle(kinds)
        for kind in kinds:
            group = [m for m in by_function[function] if m.kind == kind]
            rng.shuffle(group)
            order.extend(group)
    return order


def _find_bug(
    rng: random.Random,
    package: str,
    source: str,
    module: str,
    tests: list[_Test],
    expected: dict[str, object],
) -> tuple[Mutation, str, _Symptom] | None:
    """The first mutation of ``module``, in a seeded order, that breaks one of its tests; None if none does.

    One whose tests fail with a NameError (a removed assignment whose name is then undefined) is kept only if
    no other qualifies: the message would point straight at the missing line.
    """
    fallback = None
    for mutation in _seeded_order(rng, mutations_of(source, f"{package}/{module}.py")):
        mutated = apply_mutation(source, mutation)
        results = _run(package, {module: mutated}, tests)
        broken = [test for test in tests if not _passes(results[test.node_id], expected[test.node_id])]
        if not broken:
            continue  # an equivalent mutant, or one the tests do not reach
        test = rng.choice(broken)
        found = (
            mutation,
            mutated,
            _Symptom(module, test.unit, test, expected[test.node_id], results[test.node_id]),
        )
        if not any(isinstance(results[test.node_id][1], NameError) for test in broken):
            return found
        fallback = fallback or found
    return fallback


def _shown(value: object) -> str:
    return f"`{literal(value)}`"


#: exceptions whose messages read the same on every supported Python (``min([])``'s ValueError, many
#: TypeErrors and 3.14's ZeroDivisionError are worded differently across versions): others are shown by type
_STABLE_MESSAGES = (IndexError, KeyError, NameError)


def _did(result: _Result) -> str:
    """What the call did, for a sentence: "returns `3`" or "raises `IndexError: list index out of range`"."""
    ok, value = result
    if ok:
        return f"returns {_shown(value)}"
    message = str(value) if isinstance(value, _STABLE_MESSAGES) else ""
    return f"raises `{type(value).__name__}{': ' + message if message else ''}`"


def _snippet(package: str, symptom: _Symptom) -> str:
    """The code that shows it: the call through its module, or for a class the statements that build it."""
    test = symptom.test
    if test.setup:
        lines = [f"from {package}.{symptom.module} import {symptom.unit}", "", *test.setup, test.expr]
    else:
        lines = [f"from {package} import {symptom.module}", "", f"{symptom.module}.{test.expr}"]
    return "```python\n" + "\n".join(lines) + "\n```"


def _report(rng: random.Random, package: str, symptom: _Symptom) -> str:
    """A one-symptom bug report, in one of several wordings."""
    where = f"{symptom.module}.{symptom.unit}"
    did, expected, code = _did(symptom.got), _shown(symptom.expected), _snippet(package, symptom)
    inline = not symptom.test.setup
    call = f"`{symptom.module}.{symptom.test.expr}`"
    style = rng.randrange(4)
    if style == 0:
        return f"{where} gives a wrong result\n\n{code}\n\nThis {did}, but I expected {expected}.\n"
    if style == 1:
        return (
            f"### Describe the bug\n\n`{where}` does not do what its docstring says.\n\n### To reproduce\n\n"
            f"{code}\n\n### Expected behaviour\n\n{expected}\n\n### Actual behaviour\n\nIt {did}.\n"
        )
    if style == 2 and inline:
        return (
            f"Unexpected result from {symptom.unit}\n\nHi! I'm using {package} and {call} {did}. "
            f"Shouldn't that be {expected}?\n"
        )
    return (
        f"Problem with `{where}`\n\nI ran into this while using {package}:\n\n{code}\n\n"
        f"The last line {did}, while I would expect {expected}. Could someone take a look?\n"
    )


def _two_reports(rng: random.Random, package: str, first: _Symptom, second: _Symptom) -> str:
    """A report of two symptoms (level 2)."""
    parts = []
    for symptom in (first, second):
        parts.append(
            f"`{symptom.module}.{symptom.unit}`:\n\n{_snippet(package, symptom)}\n\n"
            f"The last line {_did(symptom.got)}; it should give {_shown(symptom.expected)}."
        )
    if rng.randrange(2):
        return (
            f"Two wrong results in {package}\n\nI found two problems.\n\n"
            f"First, {parts[0]}\n\nSecond, {parts[1]}\n"
        )
    return (
        f"Bugs in {first.module} and {second.module}\n\nWhile upgrading to the current {package} I "
        f"noticed two things that look broken.\n\n1. {parts[0]}\n\n2. {parts[1]}\n"
    )


def _feature_request(
    rng: random.Random, package: str, module: str, source: str, name: str, examples: list[tuple[str, object]]
) -> str:
    """Level 3's issue: the missing function's name, signature, docstring and two examples."""
    func = next(
        node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef) and node.name == name
    )
    lines = source.splitlines()
    header = "\n".join(lines[func.lineno - 1 : func.body[0].lineno - 1])
    doc = ast.get_docstring(func) or ""
    shown = "\n".join(f">>> {module}.{call}\n{literal(value)}" for call, value in examples[:2])
    if rng.randrange(2):
        return (
            f"Add `{module}.{name}`\n\nIt would be handy to have `{name}` in `{package}.{module}`:\n\n"
            f"```python\n{header}\n```\n\n{doc}\n\nFor example:\n\n"
            f"```pycon\n>>> from {package} import {module}\n{shown}\n```\n"
        )
    listed = "\n".join(f"- `{module}.{call}` should return {_shown(value)}" for call, value in examples[:2])
    return (
        f"Feature request: {name}\n\nPlease add a function `{name}` to `{package}/{module}.py` with this "
        f"signature:\n\n```python\n{header}\n```\n\nWhat it should do: {doc}\n\nExamples:\n\n{listed}\n"
    )


def _expected(seed: int, package: str, sources: dict[str, str], tests: list[_Test]) -> dict[str, object]:
    """Each test's expected value: what the clean code returns. Also the templates' own check: every test
    runs on the clean code, and its value survives being written as a literal in the test file."""
    expected = {}
    for node_id, (ok, value) in _run(package, sources, tests).items():
        if not ok or ast.literal_eval(literal(value)) != value:
            raise RuntimeError(f"seed {seed}: {node_id} gives {value!r} on the clean code")
        expected[node_id] = value
    return expected


def _inject_bugs(
    rng: random.Random,
    package: str,
    modules: list[_Module],
    sources: dict[str, str],
    tests: list[_Test],
    expected: dict[str, object],
    count: int,
) -> tuple[dict[str, str], list[Mutation], str]:
    """Levels 1-2: ``count`` mutations in as many modules (tried in a seeded order), the modules' buggy
    sources and the bug report."""
    order = list(modules)
    rng.shuffle(order)
    buggy = dict(sources)
    mutations, symptoms = [], []
    for module in order:
        module_tests = [test for test in tests if test.module == module.name]
        found = _find_bug(rng, package, sources[module.name], module.name, module_tests, expected)
        if found is not None:
            mutation, buggy[module.name], symptom = found
            mutations.append(mutation)
            symptoms.append(symptom)
            if len(mutations) == count:
                report = (
                    _report(rng, package, *symptoms) if count == 1 else _two_reports(rng, package, *symptoms)
                )
                return buggy, mutations, report
    raise RuntimeError(f"{package}: fewer than {count} modules have a mutation that a test catches")


def generate_repo(seed: int, level: int = 1) -> GeneratedRepo:
    """The task of ``seed`` at ``level`` (1: one bug, 2: two bugs in two modules, 3: a missing function).

    The clean code is the same for every level of a seed (level 3 splits its test files differently); the
    bugs are drawn with a generator of their own.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    package, modules = _modules_of(seed)
    rng = _rng(f"bugs:{seed}:{level}")
    missing = None
    if level == 3:
        missing = rng.choice(
            [(module, unit) for module in modules for unit in module.units if not unit.is_class]
        )
    tests = []
    for module in modules:
        tests += _tests_of(module, missing[1].name if missing is not None and missing[0] is module else None)
    sources = {module.name: module.source() for module in modules}
    expected = _expected(seed, package, sources, tests)
    files = _files(package, modules, sources, tests, expected)
    if missing is None:
        start, mutations, statement = _inject_bugs(rng, package, modules, sources, tests, expected, level)
        hidden_tests = {}
    else:
        module, unit = missing
        start = {**sources, module.name: module.source(without=unit.name)}
        mutations = []
        hidden = [test for test in tests if test.module == module.name and test.unit == unit.name]
        hidden_tests = {hidden[0].path: files[hidden[0].path]}
        examples = [(test.expr.removeprefix(f"{module.name}."), expected[test.node_id]) for test in hidden]
        statement = _feature_request(rng, package, module.name, sources[module.name], unit.name, examples)
    results = _run(package, start, tests)
    passed = {test.node_id for test in tests if _passes(results[test.node_id], expected[test.node_id])}
    start_files = {path: text for path, text in files.items() if path not in hidden_tests}
    start_files.update({f"{package}/{name}.py": text for name, text in start.items()})
    return GeneratedRepo(
        name=package,
        files=files,
        start_files=start_files,
        hidden_tests=hidden_tests,
        fail_to_pass=sorted(test.node_id for test in tests if test.node_id not in passed),
        pass_to_pass=sorted(passed),
        problem_statement=statement,
        mutations=mutations,
        level=level,
    )
