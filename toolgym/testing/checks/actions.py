"""The ``actions`` check: non-string, hostile and malformed actions in every format the env supports."""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym

from toolgym.core.types import ToolCall
from toolgym.envs.base import ToolEnv
from toolgym.testing.checks.common import (
    Findings,
    action_kind,
    exc_tail,
    exc_text,
    tool_env,
    turns_taken,
)
from toolgym.testing.checks.context import CheckResult, Context

NON_STRING_ACTIONS: tuple[tuple[str, Any], ...] = (
    ("None", None),
    ("an int", 42),
    ("bytes", b"<answer>42</answer>"),
    ("a dict", {"role": "assistant", "content": "<answer>42</answer>"}),
    ("a list", ["<answer>42</answer>"]),
)
HOSTILE_TEXT: tuple[tuple[str, str], ...] = (
    ("an empty turn", ""),
    ("a whitespace turn", " \n\t  \n"),
    ("1 MB of text", "x" * 1_000_000),
    ("lone surrogates", "\ud800 half a pair \udfff"),
    ("control characters", "\x00\x07\x1b[31m\x7f"),
    ("an unclosed <think>", "<think>still thinking about it"),
    ("deeply nested brackets", "[" * 20_000 + "{" * 20_000),
)


# -- actions -------------------------------------------------------------------------------------------------


def check_actions(ctx: Context) -> CheckResult:
    f = Findings("actions")
    sent = 0
    for fmt in ctx.target.formats:
        with ctx.target.open(fmt) as env:
            inner = tool_env(env)
            where = f"[{fmt or 'its format'}]"
            ctx.reset("actions", env, seed=ctx.seed)
            for label, action in NON_STRING_ACTIONS:
                sent += 1
                _non_string(ctx, f, env, inner, where, label, action)
            for label, action in [*HOSTILE_TEXT, *_malformed_calls(inner)]:
                sent += 1
                _hostile_text(ctx, f, env, inner, where, label, action)
            try:
                ctx.reset("actions", env, seed=ctx.seed)
                ctx.step("actions", env, _valid_action(inner))
            except Exception as exc:
                f.fail(
                    f"{where} after the hostile actions, reset and a valid step raised {exc_text(exc)}",
                    exc_tail(exc),
                )
    f.covered.append(
        f"{sent} non-string, hostile or malformed actions in {len(ctx.target.formats)} format(s): "
        "invalid-action observations or TypeError; env stays usable"
    )
    return f.result()


def _non_string(
    ctx: Context, f: Findings, env: gym.Env, inner: ToolEnv | None, where: str, label: str, action: Any
) -> None:
    turn = turns_taken(inner)
    try:
        out = ctx.step("actions", env, action)
    except TypeError as exc:
        if not re.search(r"\bstr\b|\btext\b|string", str(exc)):
            f.fail(f"{where} step({label}) raised a TypeError that does not say what an action must be", exc)
        if inner is not None and turns_taken(inner) != turn:
            f.fail(f"{where} step({label}) raised a TypeError but still took a turn")
    except Exception as exc:
        f.fail(
            f"{where} step({label}) raised {exc_text(exc)}, not a TypeError saying what an action must be",
            exc_tail(exc),
        )
        ctx.reset("actions", env, seed=ctx.seed)
        return
    else:
        kind = action_kind(out[4])
        if inner is not None and kind != "invalid":
            f.fail(f"{where} step({label}) was taken as a {kind!r} action instead of an invalid one", out[0])
        _after_step(ctx, env, out)
    _still_usable(ctx, f, env, inner, where, f"step({label})")


def _hostile_text(
    ctx: Context, f: Findings, env: gym.Env, inner: ToolEnv | None, where: str, label: str, action: str
) -> None:
    try:
        out = ctx.step("actions", env, action)
    except Exception as exc:
        f.fail(f"{where} {label} raised {exc_text(exc)}", exc_tail(exc))
        ctx.reset("actions", env, seed=ctx.seed)
        return
    obs, reward, terminated, truncated, info = out
    problem = _shape_problem(obs, reward, terminated, truncated, info)
    if problem:
        f.fail(f"{where} {label}: {problem}", obs)
    must_be_invalid = label in ("an empty turn", "a whitespace turn") or (
        label == "1 MB of text" and inner is not None and len(action) > inner.action_space.max_length
    )
    if inner is not None and must_be_invalid and action_kind(info) != "invalid":
        f.fail(f"{where} {label} was taken as a {action_kind(info)!r} action instead of an invalid one", obs)
    _after_step(ctx, env, out)


def _malformed_calls(inner: ToolEnv | None) -> list[tuple[str, str]]:
    """Broken versions of a real call in the env's format: cut short, to an unknown tool, broken JSON, too
    many calls in one turn, a call with an answer."""
    if inner is None or not inner.tools:
        return []
    parser = inner.parser
    call = parser.example_call()
    assert call is not None
    valid = parser.format_call(call)
    with_json = parser.format_call(ToolCall(name=call.name, arguments={**call.arguments, "toolgym": [1, 2]}))
    cut = with_json.rfind("}")
    cases = [
        ("a call cut short", valid[: max(len(valid) // 2, 1)]),
        ("a call to an unknown tool", valid.replace(call.name, "no_such_tool_xyz")),
        ("a call with broken JSON", with_json[:cut] + with_json[cut + 1 :] if cut >= 0 else with_json + "{"),
        ("a call and an answer in one turn", valid + "\n" + parser.format_answer("42")),
    ]
    if parser.supports_multiple_calls:
        cases.append(
            ("too many calls in one turn", parser.format_calls([call] * (parser.max_calls_per_turn + 1)))
        )
    return cases


def _shape_problem(obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any) -> str | None:
    if not isinstance(obs, str):
        return f"the observation is a {type(obs).__name__}, not a str"
    try:
        obs.encode("utf-8")
    except UnicodeEncodeError:
        return "the observation is not valid UTF-8 (lone surrogates): a tokenizer cannot encode it"
    if not isinstance(reward, int | float) or reward != reward:
        return f"the reward {reward!r} is not a number"
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        return f"terminated/truncated are {type(terminated).__name__}/{type(truncated).__name__}, not bool"
    if not isinstance(info, dict):
        return f"info is a {type(info).__name__}, not a dict"
    return None


def _still_usable(
    ctx: Context, f: Findings, env: gym.Env, inner: ToolEnv | None, where: str, what: str
) -> None:
    turn = turns_taken(inner)
    try:
        out = ctx.step("actions", env, _valid_action(inner))
    except Exception as exc:
        f.fail(f"{where} after {what}, a valid action raised {exc_text(exc)}", exc_tail(exc))
        ctx.reset("actions", env, seed=ctx.seed)
        return
    if inner is not None and turn is not None and turns_taken(inner) not in (turn + 1, 0):
        f.fail(f"{where} after {what}, a valid action did not take exactly one turn")
    _after_step(ctx, env, out)


def _after_step(ctx: Context, env: gym.Env, out: tuple) -> None:
    if out[2] or out[3]:
        ctx.reset("actions", env, seed=ctx.seed)


def _valid_action(inner: ToolEnv | None) -> str:
    if inner is None:
        return "42"
    call = inner.parser.example_call()
    return inner.parser.format_call(call) if call is not None else inner.parser.format_answer("42")
