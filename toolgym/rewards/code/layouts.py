"""Test layouts of code datasets, parsed into the two shapes ``CodeTestsVerifier`` judges.

One parser for every place tests arrive: contest task files (``toolgym.envs.contest_tasks``), a verl row's
``reward_model.ground_truth`` (``compute_score``) and the reward server (scorer ``code_io``). The layouts:
APPS/TACO ``input_output`` (``inputs``, ``outputs``, ``fn_name``?), CodeContests' ``{input: [...], output:
[...]}``, a list of ``{input, output, testtype|type, fn_name?}`` (LiveCodeBench, DeepCoder, PrimeIntellect's
``test_cases``), as JSON or LiveCodeBench's compressed string. stdin/stdout tests become
``{"io_tests": [{"input", "output"}]}``; call-based ones assert tests on ``candidate``
(``{"tests": [...], "entry_point": fn or "Solution"}``) for the hidden-test harness.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from collections.abc import Mapping, Sequence
from typing import Any


def decode_tests(value: Any) -> Any:
    """A JSON string, LiveCodeBench's base64(zlib(pickle(json))) string, or the value itself."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, str | bytes):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:  # LiveCodeBench's private tests (its own dataset format, a pickled JSON string)
        raw = pickle.loads(zlib.decompress(base64.b64decode(value)))
        return json.loads(raw) if isinstance(raw, str | bytes) else raw
    except Exception as exc:
        raise ValueError(f"tests are neither JSON nor LiveCodeBench's compressed form: {exc}") from None


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "\n".join(str(v) for v in value)
    return "" if value is None else str(value)


def _call_test(fn_name: str, args: Any, expected: Any, class_based: bool) -> str:
    call = f"candidate().{fn_name}" if class_based else "candidate"
    if not isinstance(args, list | tuple):
        args = [args]
    # APPS stores a call's expected value wrapped in a one-element list as often as not
    return f"_got = {call}(*{list(args)!r})\nassert _got == {expected!r} or [_got] == {expected!r}\n"


def _functional(cases: Sequence[tuple[Any, Any]], fn_name: str, starter_code: str) -> dict[str, Any]:
    class_based = "class Solution" in (starter_code or "")
    tests = [_call_test(fn_name, args, expected, class_based) for args, expected in cases]
    return {"tests": tests, "entry_point": "Solution" if class_based else fn_name}


def ground_truth_tests(
    value: Any, *, fn_name: str | None = None, starter_code: str = "", max_tests: int | None = None
) -> dict[str, Any]:
    """``Task.data`` for tests in any of the layouts (or a verl row's ground truth): ``{"io_tests": [...]}``
    for stdin/stdout, ``{"tests": [...], "entry_point": ...}`` for call-based. ``ValueError`` if none."""
    value = decode_tests(value)
    if isinstance(value, Mapping) and "test_cases" in value:  # PrimeIntellect's verification_info
        value = decode_tests(value["test_cases"])
    if isinstance(value, Mapping) and "inputs" in value and "outputs" in value:  # APPS input_output
        fn_name = value.get("fn_name") or fn_name
        pairs = list(zip(value["inputs"], value["outputs"], strict=False))
        if fn_name:
            return _functional(_longest(pairs, max_tests), fn_name, starter_code)
        io = [{"input": _text(i), "output": _text(o)} for i, o in pairs]
        return {"io_tests": longest_io(io, max_tests)}
    if isinstance(value, Mapping) and "input" in value and "output" in value:  # CodeContests' test dict
        io = [
            {"input": _text(i), "output": _text(o)}
            for i, o in zip(value["input"], value["output"], strict=False)
        ]
        return {"io_tests": longest_io(io, max_tests)}
    if isinstance(value, list) and value and all(isinstance(t, Mapping) for t in value):
        kinds = {str(t.get("testtype") or t.get("type") or "stdin") for t in value}
        fn = fn_name or next((t.get("fn_name") for t in value if t.get("fn_name")), None)
        if kinds & {"functional", "function_call"}:
            if not fn:
                raise ValueError("functional tests without a function name (metadata.func_name / fn_name)")
            cases = [(_json_args(t["input"]), _json_value(t["output"])) for t in value]
            return _functional(_longest(cases, max_tests), fn, starter_code)
        io = [{"input": _text(t.get("input")), "output": _text(t.get("output"))} for t in value]
        return {"io_tests": longest_io(io, max_tests)}
    raise ValueError(f"no tests in a known layout: {value!r:.200}")


def _json_args(raw: Any) -> list[Any]:
    """LiveCodeBench's functional input: one JSON value per line (or already a list of arguments)."""
    if isinstance(raw, list):
        return raw
    return [json.loads(line) for line in str(raw).splitlines() if line.strip()]


def _json_value(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _longest(pairs: list[tuple[Any, Any]], n: int | None) -> list[tuple[Any, Any]]:
    if n is None or len(pairs) <= n:
        return pairs
    keep = sorted(range(len(pairs)), key=lambda i: -len(repr(pairs[i][0])))[:n]
    return [pairs[i] for i in sorted(keep)]


def longest_io(io: list[dict[str, str]], n: int | None) -> list[dict[str, str]]:
    """DeepCoder keeps the tests with the longest inputs (the strongest ones) when a problem has many."""
    if n is None or len(io) <= n:
        return io
    keep = sorted(range(len(io)), key=lambda i: -len(io[i]["input"]))[:n]
    return [io[i] for i in sorted(keep)]


def first_solution(value: Any) -> str | None:
    """A reference solution (APPS/TACO's ``solutions`` JSON list) for the oracle, when the row has one."""
    try:
        value = decode_tests(value)
    except ValueError:
        return value if isinstance(value, str) and value.strip() else None
    if isinstance(value, list) and value and isinstance(value[0], str) and value[0].strip():
        return value[0]
    return None
