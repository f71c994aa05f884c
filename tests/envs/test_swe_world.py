"""SWE-v0's procedural bugs: single-point mutations of real-world-style source, and generated repositories.

The repositories' outcomes are computed in-process by ``toolgym.swe.world``; here real pytest, in a
subprocess from each repository's root, checks them: the clean repository passes, and on the repository as the
task starts (plus the hidden tests) exactly ``fail_to_pass`` fails. To keep the file fast the runs are batched
(``DRIVER``: pytest imported once, one forked child per repository, all at once), with pytest's plugin
autoloading off (the sandbox's pytest has no plugins).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolgym.swe.mutate import KINDS, Mutation, apply_mutation, functions_of, mutations_of
from toolgym.swe.world import LEVELS, GeneratedRepo, generate_repo

SEEDS = (0, 1, 2)

REAL_WORLD = '''\
"""Parsing helpers — with non-ASCII text: café, naïve, 数据."""

import functools


def cached(func):
    """Wrap ``func`` (a decorator with a nested function)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        return func(*args, **kwargs) if key else None

    return wrapper


class Parser:
    """Parses “things”: the parts between separators."""

    limit = 10

    def __init__(self, text: str, strict: bool = False, sep: str = ",", *, depth: int = -1) -> None:
        self.text = text  # the raw text
        self.strict = strict
        self.sep = sep

    @property
    def size(self) -> int:
        return len(self.text)

    @cached
    def parse(self, start: int = 0) -> list[str]:
        # split on the separator, dropping blanks
        parts = []
        for piece in self.text.split(self.sep)[start:]:
            if not piece.strip():
                continue
            parts.append(piece.strip())  # kept
        if self.strict and len(parts) > self.limit:
            raise ValueError(f"too many parts: {len(parts) - 1}")
        return parts

    async def fetch(self, items, offset=1):
        total = 0
        for i in range(len(items) - 1):
            total += items[i + offset] * 2  # ünïcode comment
            if items[i] is None:
                break
        while total > 100:
            total //= 2
        return total if total >= 0 else -total


def label(name: str, size: int) -> str:
    if name == "café" and size > 3:  # a non-ASCII string before the operators
        return "grand café"
    kept = [ch for ch in name if ch not in "aeiou"]
    return max(name, "é") + "".join(kept)[0:size]
'''


# --- swe.mutate ---------------------------------------------------------------------------------------------


def test_mutations_of_real_world_source_cover_every_kind_and_each_parses_and_changes_one_span():
    found = mutations_of(REAL_WORLD, "pkg/parser.py")
    assert {m.kind for m in found} == set(KINDS)
    assert found == sorted(found, key=lambda m: (m.start, KINDS.index(m.kind), m.end, m.after))
    original = ast.dump(ast.parse(REAL_WORLD))
    for m in found:
        assert m.path == "pkg/parser.py"
        assert REAL_WORLD[m.start : m.end] == m.before
        assert REAL_WORLD.count("\n", 0, m.start) + 1 == m.line
        mutated = apply_mutation(REAL_WORLD, m)
        assert mutated[: m.start] == REAL_WORLD[: m.start]
        assert mutated[m.start + len(m.after) :] == REAL_WORLD[m.end :]
        assert ast.dump(ast.parse(mutated)) != original, m


def test_candidates_are_the_expected_single_point_changes():
    found = {(m.function, m.kind, m.before, m.after) for m in mutations_of(REAL_WORLD, "p.py")}
    expected = {
        ("Parser.parse", "invert_condition", "not piece.strip()", "piece.strip()"),
        ("Parser.parse", "flip_operator", "and", "or"),
        ("Parser.parse", "flip_comparison", ">", ">="),
        ("Parser.parse", "remove_statement", " " * 12 + "parts.append(piece.strip())  # kept\n", ""),
        ("Parser.fetch", "flip_operator", "+=", "-="),
        ("Parser.fetch", "off_by_one", "1", "2"),
        ("Parser.fetch", "flip_comparison", "is", "is not"),
        ("Parser.fetch", "invert_condition", "total >= 0", "not (total >= 0)"),
        ("Parser.__init__", "wrong_default", "False", "True"),
        ("Parser.__init__", "wrong_default", '","', '""'),
        ("Parser.__init__", "wrong_default", "-1", "0"),
        ("Parser.fetch", "wrong_default", "1", "2"),
        ("cached.wrapper", "remove_statement", "        key = (args, tuple(sorted(kwargs.items())))\n", ""),
        ("label", "flip_comparison", "not in", "in"),
        ("label", "swap_arguments", 'name, "é"', '"é", name'),
        ("label", "off_by_one", "3", "4"),
        ("label", "flip_comparison", "==", "!="),
    }  # fmt: skip
    assert expected <= found, expected - found
    # never the function's final return, a while test, the only statement of a body, inside an f-string
    assert not any(kind == "remove_statement" and "return parts" in before for _, kind, before, _ in found)
    assert not any(kind == "invert_condition" and "total > 100" in before for _, kind, before, _ in found)
    assert not any(
        kind == "remove_statement" and before.strip() == "continue" for _, kind, before, _ in found
    )
    inside = REAL_WORLD.index('f"too many parts'), REAL_WORLD.index('}")') + 2
    assert not any(inside[0] <= m.start < inside[1] for m in mutations_of(REAL_WORLD, "p.py"))
    assert not any(function == "Parser.size" for function, _, _, _ in found)  # one statement: nothing to do


def test_non_ascii_lines_map_byte_columns_to_characters():
    line = '    if name == "café" and size > 3:  # a non-ASCII string before the operators\n'
    at = REAL_WORLD.index(line)
    flips = [m for m in mutations_of(REAL_WORLD, "p.py", ["label"]) if at <= m.start < at + len(line)]
    by_before = {m.before: m for m in flips}
    assert REAL_WORLD[by_before[">"].start] == ">"
    assert by_before[">"].start == at + line.index(">")
    assert by_before["and"].start == at + line.index(" and ") + 1


def test_apply_mutation_keeps_comments_and_formatting():
    comments = [line.split("#", 1)[1] for line in REAL_WORLD.splitlines() if "#" in line]
    (flip,) = [
        m for m in mutations_of(REAL_WORLD, "p.py") if m.before == "*" and m.function == "Parser.fetch"
    ]
    mutated = apply_mutation(REAL_WORLD, flip)
    assert "            total += items[i + offset] / 2  # ünïcode comment\n" in mutated
    assert all(comment in mutated for comment in comments)
    assert len(mutated.splitlines()) == len(REAL_WORLD.splitlines())


def test_functions_filter_qualified_names_and_bad_input():
    assert functions_of(REAL_WORLD) == [
        ("cached", 6, 14),
        ("cached.wrapper", 9, 12),
        ("Parser.__init__", 22, 25),
        ("Parser.size", 27, 29),
        ("Parser.parse", 31, 41),
        ("Parser.fetch", 43, 51),
        ("label", 54, 58),
    ]
    only = mutations_of(REAL_WORLD, "p.py", functions=["Parser.parse"])
    assert only and {m.function for m in only} == {"Parser.parse"}
    assert mutations_of(REAL_WORLD, "p.py", functions=["cached"]) == []  # its only candidates are wrapper's
    assert mutations_of("def broken(:\n    pass\n", "p.py") == []
    assert functions_of("def broken(:\n") == []
    stale = dataclasses.replace(only[0], before="something else")
    with pytest.raises(ValueError, match="does not hold"):
        apply_mutation(REAL_WORLD, stale)


def test_formatting_that_would_break_a_naive_replacement_is_handled():
    source = (
        "def f(a, b, items):\n"
        "\tif not (a or\n"
        "\t        b):\n"
        "\t\treturn (a  # the left one\n"
        "\t\t        -b)\n"
        "\tx = a if (lambda: b)() else b\n"
        "\treturn [i for i in items if i]\r\n"
    )
    found = mutations_of(source, "p.py")
    assert found
    for m in found:
        assert ast.dump(ast.parse(apply_mutation(source, m))) != ast.dump(ast.parse(source))
    dropped = [m for m in found if m.kind == "invert_condition" and m.before.startswith("not")]
    assert [m.after for m in dropped] == ["(a or\n\t        b)"]  # the parentheses stay: it spans two lines
    assert any(m.kind == "flip_operator" and m.before == "-" and m.after == "+" for m in found)


# --- swe.world ----------------------------------------------------------------------------------------------


ELSEWHERE = ((5, 1), (6, 2), (7, 3))


def _digest(repo: GeneratedRepo) -> str:
    return hashlib.sha256(json.dumps(dataclasses.asdict(repo), sort_keys=True).encode()).hexdigest()


@pytest.fixture(scope="module", autouse=True)
def elsewhere() -> Iterator[subprocess.Popen[str]]:
    """The digests of ELSEWHERE's repos computed in another process with another hash seed, started with the
    file's first test so that it runs alongside the others (its check is the file's last test)."""
    code = (
        "import dataclasses, hashlib, json\nfrom toolgym.swe.world import generate_repo\n"
        "print([hashlib.sha256(json.dumps(dataclasses.asdict(generate_repo(seed, level)), sort_keys=True)"
        f".encode()).hexdigest() for seed, level in {ELSEWHERE!r}])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


def test_different_seeds_and_levels_differ():
    repos = [generate_repo(seed, 1) for seed in range(6)]
    assert len({_digest(repo) for repo in repos}) == 6
    assert len({repo.problem_statement for repo in repos}) == 6
    assert len({tuple(sorted(repo.files)) for repo in repos}) > 1  # different modules, not only other values
    assert generate_repo(0, 1).start_files != generate_repo(0, 2).start_files
    with pytest.raises(ValueError):
        generate_repo(0, 4)


def test_generated_code_is_bounded_typed_and_documented():
    for seed in range(8):
        repo = generate_repo(seed, 1)
        modules = [path for path in repo.files if path.startswith(f"{repo.name}/") and "__init__" not in path]
        assert 3 <= len(modules) <= 5
        for path in modules:
            tree = ast.parse(repo.files[path])
            assert ast.get_docstring(tree)
            assert not any(isinstance(node, ast.While) for node in ast.walk(tree)), path
            functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
            assert len(functions) >= 3
            for func in functions:
                assert ast.get_docstring(func) and func.returns is not None
                assert all(arg.annotation is not None for arg in func.args.args)
                called = {
                    n.func.id
                    for n in ast.walk(func)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                }
                assert func.name not in called  # no recursion
            module = path.removeprefix(f"{repo.name}/").removesuffix(".py")
            assert f"tests/test_{module}.py" in repo.files


def _write(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def _outcomes(stdout: str) -> dict[str, str]:
    """node id -> PASSED / FAILED / ERROR, from pytest's -rA summary."""
    return {m[2]: m[1] for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\S+)", stdout, re.MULTILINE)}


#: Runs real pytest, as ``python -m pytest -q -p no:cacheprovider -rA`` would, in each directory named on the
#: command line, each in a child forked from this process once it has imported pytest (the import is most of a
#: run's cost), from the directory as its working directory and first entry of sys.path, its output in
#: ``<directory>.out``; all children run at once.
DRIVER = """
import os, sys
import pytest

children = []
for root in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        out = os.open(root + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.chdir(root)
        sys.path.insert(0, root)
        code = pytest.main(["-q", "-p", "no:cacheprovider", "-rA"])
        sys.stdout.flush()
        os._exit(int(code))
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""


@pytest.fixture(scope="module")
def judged(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[int, int], tuple[GeneratedRepo, dict, dict]]:
    """For each (seed, level): the repo, and real pytest's outcomes on its clean and on its starting files."""
    base = tmp_path_factory.mktemp("repos")
    repos = {(seed, level): generate_repo(seed, level) for seed in SEEDS for level in LEVELS}
    roots = {}
    for (seed, level), repo in repos.items():
        if level == 2:  # the clean repository is the same for levels 1 and 2
            assert repo.files == repos[(seed, 1)].files
            roots[(seed, level, "clean")] = roots[(seed, 1, "clean")]
        else:
            roots[(seed, level, "clean")] = _write(base / f"{seed}-{level}-clean", repo.files)
        roots[(seed, level, "start")] = _write(
            base / f"{seed}-{level}-start", {**repo.start_files, **repo.hidden_tests}
        )
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, *sorted({str(root) for root in roots.values()})],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    results = {}
    for (seed, level), repo in repos.items():
        outcomes = []
        for side in ("clean", "start"):
            stdout = Path(f"{roots[(seed, level, side)]}.out").read_text()
            outcomes.append(_outcomes(stdout))
            assert outcomes[-1], stdout
        results[(seed, level)] = (repo, *outcomes)
    return results


@pytest.mark.parametrize("level", LEVELS)
def test_real_pytest_agrees_with_the_computed_outcomes(judged, level):
    for seed in SEEDS:
        repo, clean, start = judged[(seed, level)]
        every = sorted(repo.fail_to_pass + repo.pass_to_pass)
        assert repo.fail_to_pass and repo.pass_to_pass
        assert not set(repo.fail_to_pass) & set(repo.pass_to_pass)
        assert repo.fail_to_pass == sorted(repo.fail_to_pass) and repo.pass_to_pass == sorted(
            repo.pass_to_pass
        )
        assert sorted(clean) == every and set(clean.values()) == {"PASSED"}, (seed, level)
        assert sorted(start) == every, (seed, level)
        assert sorted(node for node, outcome in start.items() if outcome == "FAILED") == repo.fail_to_pass
        assert sorted(node for node, outcome in start.items() if outcome == "PASSED") == repo.pass_to_pass


@pytest.mark.parametrize("level", (1, 2))
def test_bugs_are_single_point_mutations_of_the_clean_files(judged, level):
    for seed in SEEDS:
        repo, _, _ = judged[(seed, level)]
        assert repo.level == level and repo.hidden_tests == {} and set(repo.start_files) == set(repo.files)
        assert len(repo.mutations) == level
        assert len({m.path for m in repo.mutations}) == level  # level 2: two different modules
        changed = sorted(path for path in repo.files if repo.files[path] != repo.start_files[path])
        assert changed == sorted(m.path for m in repo.mutations)
        for m in repo.mutations:
            assert isinstance(m, Mutation) and m in mutations_of(repo.files[m.path], m.path)
            assert apply_mutation(repo.files[m.path], m) == repo.start_files[m.path]


def test_level_3_removes_one_function_and_hides_its_tests(judged):
    for seed in SEEDS:
        repo, _, _ = judged[(seed, 3)]
        assert repo.mutations == [] and len(repo.hidden_tests) == 1
        ((hidden_path, hidden_text),) = repo.hidden_tests.items()
        module, function = re.fullmatch(r"tests/test_([a-z]+)_(\w+)\.py", hidden_path).groups()
        assert (
            set(repo.files) == set(repo.start_files) | {hidden_path} and hidden_path not in repo.start_files
        )
        assert repo.fail_to_pass == sorted(
            f"{hidden_path}::{name}" for name in re.findall(r"def (test_\w+)", hidden_text)
        )
        assert f"def {function}(" in repo.files[f"{repo.name}/{module}.py"]
        assert f"def {function}(" not in repo.start_files[f"{repo.name}/{module}.py"]
        assert function not in repo.start_files[f"tests/test_{module}.py"]
        assert function in repo.problem_statement and "def " + function in repo.problem_statement


def test_problem_statements_show_symptoms_never_the_fix_or_the_tests(judged):
    for (seed, level), (repo, _, _) in judged.items():
        statement = repo.problem_statement
        assert "::" not in statement and "tests/" not in statement and "test_" not in statement
        assert repo.name in statement
        for m in repo.mutations:
            assert m.function.split(".")[0] in statement  # the function (or the method's class) called
            after = m.after.strip()
            if len(after) >= 2 and not re.fullmatch(r"[A-Za-z ]+|-?\d+|'.*'|\".*\"", after):
                assert after not in statement, (seed, level, m)
            assert f"line {m.line}" not in statement and m.kind not in statement
        if level == 2:
            assert all(
                m.path.removeprefix(f"{repo.name}/").removesuffix(".py") in statement for m in repo.mutations
            )


def test_same_seed_same_repo_in_this_process_and_in_another_with_another_hash_seed(elsewhere):
    assert generate_repo(5, 2) == generate_repo(5, 2)
    out, err = elsewhere.communicate(timeout=300)
    assert elsewhere.returncode == 0, err
    assert out.strip() == repr([_digest(generate_repo(seed, level)) for seed, level in ELSEWHERE])
