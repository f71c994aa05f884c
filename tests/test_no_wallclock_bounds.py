"""No test asserts a wall-clock bound: a time limit in a unit test fails on a slower or busier machine.

What to write instead, by what the bound was meant to catch:

- *it must not be quadratic*: a complexity check, measured in one run: ten times the input costs at most
  ~20x the time (``toolgym.testing.complexity.cost_ratio``: CPU time of the thread, the best of a few
  tries);
- *it must not do needless work*: an operation count (``python_calls`` in ``tests/search/test_world.py``);
- *the timeout was passed down, the runaway was killed*: the outcome (the status and the detail naming the
  limit, the process is gone);
- *it ran concurrently*: the overlap of the recorded start and end times, or a barrier all workers reach;
- *it is fast*: a benchmark in ``benchmarks/``, which reports the target next to the measurement.

A timeout passed to a call, so that a hang fails instead of blocking (``proc.wait(timeout=300)``, a deadline a
polling loop checks), is a hang guard, not an assertion on speed, and is fine.

What is flagged: an ``assert`` that compares (``<``, ``<=``, ``>``, ``>=``) a timing expression with a number,
as an upper bound (``elapsed < 1.0``, ``res.wall_s < 3``, ``time.monotonic() - t0 < 4``, ``5 > took``). A
timing expression is a name or an attribute that says time (``elapsed``, ``duration``, ``took``, ``seconds``,
``wall_s``, ``latency``, ...), ``x.total_seconds()``, a clock call (``time.perf_counter()``, ``monotonic``,
``time.time``, ``process_time``, ``thread_time``, their ``_ns`` forms, ``loop.time()``), a name assigned from
any of these in the same file, or arithmetic on one. A number is a literal, arithmetic on literals, or a
module-level name bound to one. Lower bounds (``res.wall_s >= 0.5``: the limit did not fire early) cannot
fail for want of speed and are not flagged.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = (ROOT / "tests", ROOT / "examples" / "plugin-package" / "tests")

#: words (of a snake_case name) that make a name or an attribute a duration
TIME_WORDS = frozenset(
    {"elapsed", "duration", "durations", "took", "seconds", "secs", "wall", "latency", "latencies", "runtime"}
    | {"dt", "timing", "timings"}
)
CLOCKS = frozenset(
    f"{clock}{suffix}"
    for clock in ("time", "monotonic", "perf_counter", "process_time", "thread_time")
    for suffix in ("", "_ns")
)
#: calls whose result is as much a duration as their arguments
PASS_THROUGH = frozenset({"min", "max", "sum", "abs", "float", "round"})


class _Scanner:
    """The timing names and numeric constants of one module, and its asserts that bound a duration."""

    def __init__(self, tree: ast.Module):
        self.constants = {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign) and self._number(node.value, set())
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        self.timed: set[str] = set()  # names bound to a timing expression anywhere in the module
        # (target, value) of every binding; a loop variable's value is its iterable
        bindings: list[tuple[ast.AST, ast.AST]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                bindings += [(target, node.value) for target in node.targets]
            elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
                bindings.append((node.target, node.value))
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                bindings.append((node.target, node.iter))
        changed = True
        while changed:  # to a fixed point: t1 = perf_counter(); took = t1 - t0; for d in [took]: ...
            changed = False
            for target, value in bindings:
                if isinstance(target, ast.Name) and target.id not in self.timed and self.timing(value):
                    self.timed.add(target.id)
                    changed = True

    def timing(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.timed or _says_time(node.id)
        if isinstance(node, ast.Attribute):
            return _says_time(node.attr)
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in CLOCKS or name == "total_seconds":
                return True
            return name in PASS_THROUGH and any(self.timing(arg) for arg in node.args)
        if isinstance(node, ast.BinOp):
            return self.timing(node.left) or self.timing(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.timing(node.operand)
        if isinstance(node, ast.Subscript):
            return self.timing(node.value)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return any(self.timing(elt) for elt in node.elts)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return self.timing(node.elt)
        return False

    def number(self, node: ast.AST) -> bool:
        return self._number(node, self.constants)

    @staticmethod
    def _number(node: ast.AST, constants: set[str]) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int | float) and not isinstance(node.value, bool)
        if isinstance(node, ast.UnaryOp):
            return _Scanner._number(node.operand, constants)
        if isinstance(node, ast.BinOp):
            return _Scanner._number(node.left, constants) and _Scanner._number(node.right, constants)
        return isinstance(node, ast.Name) and node.id in constants

    def upper_bounds(self, tree: ast.Module) -> Iterable[ast.Assert]:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert) and any(
                self._bounds(compare) for compare in ast.walk(node.test) if isinstance(compare, ast.Compare)
            ):
                yield node

    def _bounds(self, compare: ast.Compare) -> bool:
        operands = [compare.left, *compare.comparators]
        for op, left, right in zip(compare.ops, operands, operands[1:], strict=False):
            if isinstance(op, ast.Lt | ast.LtE) and self.timing(left) and self.number(right):
                return True
            if isinstance(op, ast.Gt | ast.GtE) and self.number(left) and self.timing(right):
                return True
        return False


def _says_time(name: str) -> bool:
    return not TIME_WORDS.isdisjoint(name.lower().split("_"))


def wall_clock_bounds(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """(line, the assert's source) for each assert in ``source`` that bounds a duration from above."""
    tree = ast.parse(source, filename)
    found = _Scanner(tree).upper_bounds(tree)
    return sorted((node.lineno, ast.get_source_segment(source, node) or "") for node in found)


def scan(roots: Iterable[Path]) -> list[str]:
    """``path:line: assert ...`` for every wall-clock bound in the Python files under ``roots``."""
    out = []
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else ():
            for line, text in wall_clock_bounds(path.read_text(encoding="utf-8"), str(path)):
                out.append(f"{path}:{line}: {text.splitlines()[0]}")
    return out


def test_no_test_asserts_a_wall_clock_bound():
    found = scan(SCANNED)
    assert not found, "wall-clock bounds (this module's docstring says what to write instead):\n" + "\n".join(
        found
    )


PLANTED = """
import time
from time import perf_counter

LIMIT_S = 2.0


def test_planted(res, refused, loop, run):
    start = time.perf_counter()
    run()
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"took {elapsed:.2f}s"  # flagged
    done = perf_counter()
    assert done - start <= LIMIT_S  # flagged
    assert res.status == "timeout" and 0.5 <= res.wall_s < 2.5  # flagged
    assert time.monotonic() - start < 3 * 1.0 + 5  # flagged
    assert refused.elapsed.total_seconds() < 0.5  # flagged
    assert 5 > loop.time() - start  # flagged
    per_call = (time.perf_counter() - start) / 50
    assert per_call < 0.1, per_call  # flagged
    assert all(d < 0.2 for d in [res.duration_ms / 1000])  # flagged
    assert max(res.latencies) <= 0.05  # flagged
"""

ALLOWED = """
import time


def test_allowed(res, ratio, proc, calls):
    t0 = time.monotonic()
    around = time.monotonic() - t0
    assert 0 < res.wall_s <= around  # relative to a measurement in the same run
    assert res.wall_s >= 0.5 and 1 <= res.wall_s  # lower bounds: the limit did not fire early
    assert ratio <= 20  # a complexity check
    assert calls == 19 and len(res.spans) < 10  # operation counts
    assert proc.wait(timeout=300) == 0  # a hang guard passed to a call
    deadline = time.monotonic() + 60
    assert time.monotonic() < deadline  # a hang guard's deadline
    assert res.timeout < 10 and res.timeout_s <= 30  # a configured limit is not a measured duration
    assert res.status == "timeout" and "0.5 s" in res.detail
"""


def test_the_scanner_flags_planted_bounds_in_a_file_and_nothing_else(tmp_path):
    (tmp_path / "sub").mkdir()
    planted, allowed = tmp_path / "sub" / "test_planted.py", tmp_path / "test_allowed.py"
    planted.write_text(PLANTED, encoding="utf-8")
    allowed.write_text(ALLOWED, encoding="utf-8")
    marked = [i for i, line in enumerate(PLANTED.splitlines(), 1) if line.endswith("# flagged")]
    assert len(marked) == 9
    found = scan([tmp_path])
    assert [line.split(": assert ")[0] for line in found] == [f"{planted}:{i}" for i in marked], found
    assert wall_clock_bounds(ALLOWED) == []


def test_the_scanner_reads_every_test_file():
    """The guard is not vacuous: it parses the suite's files (a syntax error would raise), and they hold
    timing code it had to look at and clear."""
    files = [path for root in SCANNED if root.is_dir() for path in root.rglob("*.py")]
    assert len(files) > 100 and Path(__file__) in files
    clock = re.compile(r"\b(perf_counter|monotonic|thread_time)\(\)")
    assert len([path for path in files if clock.search(path.read_text(encoding="utf-8"))]) >= 5
