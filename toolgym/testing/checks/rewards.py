"""The ``rewards``, ``info`` and ``verifier_errors`` checks: what an episode pays and reports."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from toolgym.core.types import ToolCall, Verdict
from toolgym.envs.base import ToolEnv
from toolgym.rewards.base import Verifier
from toolgym.testing.checks.common import (
    GARBAGE,
    PLANTED,
    Findings,
    final,
    not_applicable,
    oracle_texts,
    short,
    tool_env,
    verdict_agrees,
)
from toolgym.testing.checks.context import CheckResult, Context

#: keys the ToolEnv contract promises in every reset's and every step's info
RESET_KEYS = frozenset({"messages", "tools", "task_id", "turn"})
STEP_KEYS = RESET_KEYS | {"action", "tool_results", "verdict"}


# -- rewards -------------------------------------------------------------------------------------------------


def check_rewards(ctx: Context) -> CheckResult:
    f = Findings("rewards")
    low, high = ctx.reward_range
    played = 0
    for index, fmt in enumerate(ctx.target.formats):
        with ctx.target.open(fmt) as env:
            inner = tool_env(env)
            if inner is None:
                return not_applicable("rewards", f"not a toolgym ToolEnv ({type(env.unwrapped).__name__})")
            where = f"[{fmt or inner.parser.name}]"
            n = ctx.episodes if index == 0 else min(ctx.episodes, 2)
            seeds = range(ctx.seed, ctx.seed + n)
            if ctx.oracle is not None:
                for seed in seeds:
                    played += 1
                    reward, terminated, verdict, info = final(ctx, env, oracle_texts(ctx, env, seed), seed)
                    if not terminated or reward != high or not verdict_agrees(verdict, reward):
                        f.fail(
                            f"{where} the oracle got reward {reward} (terminated={terminated}, verdict "
                            f"{short(verdict, 100)}) for seed {seed}; the maximum is {high}",
                            info.get("messages", [])[-2:],
                        )
                    ctx.conversations.setdefault(fmt, info.get("messages", []))
            for label, texts in _wrong_answers(ctx, env, inner, ctx.seed):
                played += 1
                reward, terminated, verdict, info = final(ctx, env, texts, ctx.seed)
                if label == WORK_WITH_A_WRONG_ANSWER and not getattr(inner.verifier, "judges_answer", True):
                    # the work is judged, the answer only ends the episode: the oracle's work earns the top
                    if reward != high:
                        f.fail(
                            f"{where} {label} got reward {reward}; this verifier judges the work", texts[-1]
                        )
                    continue
                if reward != low:
                    f.fail(f"{where} {label} got reward {reward}; the minimum is {low}", texts[-1])
                if verdict is not None and verdict.error:
                    f.fail(f"{where} {label} made the verifier fail: {verdict.error}", texts[-1])
                if verdict is not None and not verdict_agrees(verdict, reward):
                    f.fail(f"{where} {label}: the reward {reward} is not the verdict's {verdict.reward}")
                ctx.conversations.setdefault(fmt, info.get("messages", []))
            played += _turn_budget(ctx, f, env, inner, where)
    f.covered.append(
        f"{played} episodes: "
        + ("oracle earns the maximum, " if ctx.oracle else "no oracle to earn the maximum (pass oracle=), ")
        + "wrong/empty/garbage answers the minimum, rewards = verdicts, truncation at max_turns"
    )
    return f.result()


WORK_WITH_A_WRONG_ANSWER = "a wrong answer after the oracle's tool calls"


def _wrong_answers(ctx: Context, env: gym.Env, inner: ToolEnv, seed: int) -> list[tuple[str, list[str]]]:
    ctx.reset("rewards", env, seed=seed)
    task = inner.task
    assert task is not None
    parser = inner.parser
    calls: list[str] = []
    if ctx.oracle is not None:
        calls = [parser.format_call(s) for s in ctx.oracle(task) if isinstance(s, ToolCall)]
    answers = [
        (WORK_WITH_A_WRONG_ANSWER, [*calls, parser.format_answer("I do not know.")]),
        ("an empty answer", [parser.format_answer("")]),
        ("a garbage answer", [parser.format_answer(GARBAGE)]),
        ("the prompt echoed as the answer", [parser.format_answer(task.prompt[:4_000])]),
        ("an answer with lone surrogates", [parser.format_answer("\ud800\udfff")]),
        ("a 20,000-digit answer", [parser.format_answer("9" * 20_000)]),
    ]
    return answers


def _turn_budget(ctx: Context, f: Findings, env: gym.Env, inner: ToolEnv, where: str) -> int:
    """``max_turns`` tool calls truncate with the minimum reward; an answer on the last turn terminates."""
    low = ctx.reward_range[0]
    turns = inner.max_turns
    ctx.reset("rewards", env, seed=ctx.seed)
    task = inner.task
    call = next((s for s in ctx.oracle(task) if isinstance(s, ToolCall)), None) if ctx.oracle else None
    call = call or inner.parser.example_call()
    busy = inner.parser.format_call(call) if call is not None else ""
    answer = oracle_texts(ctx, env, ctx.seed)[-1] if ctx.oracle else inner.parser.format_answer(GARBAGE)
    for i in range(1, turns + 1):
        _, reward, terminated, truncated, info = ctx.step("rewards", env, busy)
        last = i == turns
        if terminated or truncated != last:
            f.fail(
                f"{where} turn {i} of max_turns={turns} without an answer gave terminated={terminated}, "
                f"truncated={truncated}; expected terminated=False, truncated={last}"
            )
            break
        if last and (reward != low or not isinstance(info.get("verdict"), Verdict)):
            f.fail(f"{where} truncation at max_turns paid {reward} with verdict {info.get('verdict')!r}")
    ctx.reset("rewards", env, seed=ctx.seed)
    out = None
    for _ in range(turns - 1):
        out = ctx.step("rewards", env, busy)
        if out[2] or out[3]:
            break
    if out is None or not (out[2] or out[3]):
        _, reward, terminated, truncated, info = ctx.step("rewards", env, answer)
        if not terminated or truncated:
            f.fail(
                f"{where} an answer on the last turn (max_turns={turns}) gave terminated={terminated}, "
                f"truncated={truncated}; expected terminated=True, truncated=False"
            )
    return 2


# -- info ----------------------------------------------------------------------------------------------------


def check_info(ctx: Context) -> CheckResult:
    f = Findings("info")
    steps, resets = ctx.recorder.steps, ctx.recorder.reset_infos
    if not steps:
        return not_applicable("info", "no steps were taken")
    with ctx.target.open() as env:
        is_tool_env = tool_env(env) is not None
    first = steps[0]
    for step in steps:
        keys = set(step.info)
        if keys != set(first.info):
            f.fail(
                f"info keys change between steps: a {step.kind} step ({step.check}) has "
                f"{_keydiff(keys, set(first.info))} compared with a {first.kind} step ({first.check})",
                sorted(keys),
            )
            break
    for check, info in resets:
        if set(info) != set(resets[0][1]):
            f.fail(
                f"reset info keys change: {_keydiff(set(info), set(resets[0][1]))} ({check})", sorted(info)
            )
            break
    if is_tool_env:
        missing = STEP_KEYS - set(first.info)
        if missing:
            f.fail(f"step info lacks the contract's keys {sorted(missing)}", sorted(first.info))
        missing = RESET_KEYS - set(resets[0][1])
        if missing:
            f.fail(f"reset info lacks the contract's keys {sorted(missing)}", sorted(resets[0][1]))
    f.covered.append(f"the same keys in {len(steps)} step infos and {len(resets)} reset infos")
    return f.result()


def _keydiff(keys: set[str], reference: set[str]) -> str:
    parts = []
    if keys - reference:
        parts.append(f"extra {sorted(keys - reference)}")
    if reference - keys:
        parts.append(f"missing {sorted(reference - keys)}")
    return " and ".join(parts)


# -- verifier errors -----------------------------------------------------------------------------------------


class _RaisingVerifier(Verifier):
    name = "planted"

    def verify(self, task: Any, answer: str, trajectory: Any = None) -> Verdict:
        raise RuntimeError(PLANTED)


def check_verifier_errors(ctx: Context) -> CheckResult:
    f = Findings("verifier_errors")
    with ctx.target.open() as env:
        inner = tool_env(env)
        if inner is None:
            return not_applicable(
                "verifier_errors", f"not a toolgym ToolEnv ({type(env.unwrapped).__name__})"
            )
        original = inner.verifier
        inner.verifier = _RaisingVerifier()
        try:
            answer = inner.parser.format_answer("42")
            verdict = final(ctx, env, [answer], ctx.seed)[2]
        finally:
            inner.verifier = original
        if not isinstance(verdict, Verdict) or not verdict.error:
            f.fail(
                f"a verifier that raises gave the verdict {verdict!r}: a silent score, not an error", verdict
            )
        elif inner.trajectory is not None and inner.trajectory.trainable:
            f.fail("a verifier that raised left the trajectory trainable")
    f.covered.append("a verifier that raises gives an error verdict (untrainable), not a silent 0")
    return f.result()
