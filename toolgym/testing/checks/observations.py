"""The ``observations`` check: failing tool calls show the error marker once; caps; no host paths."""

from __future__ import annotations

import re
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym

from toolgym.core.types import ToolCall, ToolResult
from toolgym.envs.base import ToolEnv
from toolgym.parsers.base import ERROR_MARKER
from toolgym.testing.checks.common import (
    PLANTED,
    Findings,
    action_kind,
    exc_tail,
    exc_text,
    not_applicable,
    short,
    tool_env,
)
from toolgym.testing.checks.context import CheckResult, Context
from toolgym.tools.base import Tool

HOSTILE_VALUES = ("", "1/0", f"raise ValueError('{PLANTED}')", "((((", "\x00")
WRONG_TYPES = {"string": {"not": ["a string"]}, "integer": "not a number", "number": "not a number"}
HOST_FRAME = re.compile(r'File "(/[^"\n]+)", line \d+')


# -- observations --------------------------------------------------------------------------------------------


def check_observations(ctx: Context) -> CheckResult:
    f = Findings("observations")
    with ctx.target.open() as env:
        inner = tool_env(env)
        if inner is None:
            return not_applicable("observations", f"not a toolgym ToolEnv ({type(env.unwrapped).__name__})")
        cap = inner.max_observation_chars
    failing = 0
    for fmt in ctx.target.formats:
        with ctx.target.open(fmt) as env:
            inner = tool_env(env)
            assert inner is not None
            where = f"[{fmt or inner.parser.name}]"
            marker = getattr(inner.parser, "error_marker", ERROR_MARKER)
            for tool in inner.tools.values():
                for label, arguments in _failing_arguments(inner, tool):
                    what = f"{where} {tool.name} {label}"
                    failing += _failing_call(ctx, f, env, inner, what, tool, arguments, marker)
                example = _example_arguments(inner, tool)
                with _patched(tool, error=RuntimeError(PLANTED)):
                    what = f"{where} {tool.name} raising"
                    failing += _failing_call(ctx, f, env, inner, what, tool, example, marker, must_fail=True)
                with _patched(tool, output="x" * (cap * 3)):
                    obs = _call(ctx, f, env, inner, f"{where} {tool.name} oversized output", tool, example)
                    if isinstance(obs, str) and len(obs) > cap:
                        size = f"{len(obs):,}-character observation (cap {cap:,})"
                        f.fail(f"{where} a {cap * 3:,}-character tool output became a {size}")
    seen = [s for s in ctx.recorder.steps if isinstance(s.observation, str)]
    for step in seen:
        if len(step.observation) > cap:
            size = f"{len(step.observation):,} characters"
            f.fail(f"an observation of {size} exceeds the cap {cap:,} ({step.check})", step.observation)
        leak = _leak(step.observation)
        if leak:
            f.fail(
                f"an observation leaks {leak} ({step.check}, action {short(step.action, 60)})",
                step.observation,
            )
    if not inner.tools:
        f.covered.append("no tools")
    f.covered.append(
        f"{failing} failing tool calls show the error marker once; {len(seen)} observations within "
        f"{cap:,} chars, no host paths or tracebacks"
    )
    return f.result()


def _failing_arguments(inner: ToolEnv, tool: Tool) -> list[tuple[str, dict[str, Any]]]:
    """Arguments the tool should refuse or fail on: none of the required ones, wrong types, hostile values."""
    schema = tool.parameters
    props: dict[str, Any] = schema.get("properties", {})
    base = _example_arguments(inner, tool)
    cases: list[tuple[str, dict[str, Any]]] = []
    if schema.get("required"):
        cases.append(("without its required arguments", {}))
    for name, prop in list(props.items())[:3]:
        wrong = WRONG_TYPES.get(prop.get("type", ""))
        if wrong is not None:
            cases.append((f"with a wrong type for {name!r}", {**base, name: wrong}))
    text_arg = tool.primary_arg or next((n for n, p in props.items() if p.get("type") == "string"), None)
    if text_arg is not None:
        cases += [(f"with {text_arg}={value!r}", {**base, text_arg: value}) for value in HOSTILE_VALUES]
    return cases


def _failing_call(
    ctx: Context,
    f: Findings,
    env: gym.Env,
    inner: ToolEnv,
    what: str,
    tool: Tool,
    arguments: dict[str, Any],
    marker: str,
    must_fail: bool = False,
) -> int:
    """Make the call; check the marker rules on each failed result. Returns how many failed."""
    before = len(ctx.recorder.steps)
    obs = _call(ctx, f, env, inner, what, tool, arguments)
    if obs is None or len(ctx.recorder.steps) == before:
        return 0
    info = ctx.recorder.steps[-1].info
    failed = [r for r in info.get("tool_results", []) if isinstance(r, ToolResult) and not r.ok]
    if must_fail and action_kind(info) == "tool_calls" and not failed:
        f.fail(f"{what}: the tool raised but the result is not a failure", obs)
    for result in failed:
        if result.output.lstrip().startswith(marker):
            f.fail(
                f"{what}: the tool's output carries its own error marker {marker!r} (the parser adds it)", obs
            )
    count = len(_marker_pattern(marker).findall(obs))
    if failed and count != len(failed):
        f.fail(
            f"{what}: the error marker {marker!r} appears {count} times for {len(failed)} failed call(s)", obs
        )
    return len(failed)


def _call(
    ctx: Context, f: Findings, env: gym.Env, inner: ToolEnv, what: str, tool: Tool, arguments: dict[str, Any]
) -> str | None:
    try:
        text = inner.parser.format_call(ToolCall(name=tool.name, arguments=arguments))
    except (ValueError, TypeError):  # a format that cannot write these arguments
        return None
    try:
        ctx.reset("observations", env, seed=ctx.seed)
        return ctx.step("observations", env, text)[0]
    except Exception as exc:
        f.fail(
            f"{what}: env.step raised {exc_text(exc)} (a tool failure must be an observation)", exc_tail(exc)
        )
        return None


def _example_arguments(inner: ToolEnv, tool: Tool) -> dict[str, Any]:
    call = inner.parser.example_call(tool.name)
    return dict(call.arguments) if call is not None else {}


@contextmanager
def _patched(tool: Tool, *, error: Exception | None = None, output: str | None = None) -> Iterator[None]:
    """Make ``tool.run``/``arun`` raise ``error`` or return ``output`` on this instance, then restore it."""

    def run(args: Any) -> ToolResult:
        if error is not None:
            raise error
        return ToolResult(name=tool.name, output=output or "")

    async def arun(args: Any) -> ToolResult:
        return run(args)

    saved: dict[str, Any] = {k: tool.__dict__[k] for k in ("run", "arun") if k in tool.__dict__}
    tool.run, tool.arun = run, arun  # type: ignore[method-assign]
    try:
        yield
    finally:
        for k in ("run", "arun"):
            tool.__dict__.pop(k, None)
        tool.__dict__.update(saved)


def _marker_pattern(marker: str) -> re.Pattern[str]:
    """The marker where it starts a word: ``ValueError:`` in a traceback is not the marker."""
    return re.compile(r"(?<![\w])" + re.escape(marker))


def _host_paths() -> list[str]:
    import toolgym

    paths = {str(Path(toolgym.__file__).resolve().parent), sys.prefix, sys.base_prefix, sys.exec_prefix}
    paths |= {sysconfig.get_path(k) for k in ("purelib", "platlib", "stdlib")}
    return sorted(p for p in paths if p and len(p) > 4)


def _leak(text: str) -> str | None:
    frame = HOST_FRAME.search(text)
    if frame:
        return f"a traceback frame with a host path ({frame.group(1)})"
    for path in _host_paths():
        if path in text:
            return f"a host path ({path})"
    return None
