"""The ``tokens`` check (the chat template's prefix property on the env's conversations) and ``timing``."""

from __future__ import annotations

from typing import Any

from toolgym.testing.checks.common import (
    Findings,
    not_applicable,
)
from toolgym.testing.checks.context import CheckResult, Context

# -- tokens --------------------------------------------------------------------------------------------------


def check_tokens(ctx: Context) -> CheckResult:
    from toolgym.rollout.chat import check_prefix_property

    if ctx.renderer is None:
        return not_applicable("tokens", "no tokenizer given (toolgym check uses the tiny model's)")
    f = Findings("tokens")
    renderer = ctx.renderer
    with ctx.target.open() as env:
        _, info = env.reset(seed=ctx.seed)
        tools = info.get("tools")
        prompt = len(renderer.prompt_ids(info["messages"], tools)) if "messages" in info else None
    for problem in check_prefix_property(renderer, tools):
        f.fail(f"the chat template, on a representative conversation: {problem}")
    checked = 0
    for fmt, messages in ctx.conversations.items():
        for problem in _prefix_problems(renderer, messages, tools):
            f.fail(
                f"[{fmt or 'its format'}] the chat template, on the env's own conversation: {problem}",
                messages,
            )
        checked += 1
    f.covered.append(
        f"chat template prefix property on a sample and the env's own conversations ({checked} format(s))"
        + (f"; first prompt {prompt} tokens" if prompt is not None else "")
    )
    return f.result()


def _prefix_problems(renderer: Any, messages: list[dict[str, Any]], tools: Any) -> list[str]:
    problems = []
    for k in range(2, len(messages)):
        head, full = messages[:k], messages[: k + 1]
        earlier = renderer.render(head, tools, generation_prompt=messages[k]["role"] == "assistant")
        later = renderer.render(full, tools)
        if not later.startswith(earlier):
            problems.append(f"message {k} ({messages[k]['role']}): earlier turns are re-rendered differently")
        elif renderer.encode(later)[: len(renderer.encode(earlier))] != renderer.encode(earlier):
            problems.append(f"message {k} ({messages[k]['role']}): a token merges across the turn boundary")
    return problems


# -- timing --------------------------------------------------------------------------------------------------


def check_timing(ctx: Context) -> CheckResult:
    timing = ctx.recorder.timing()
    if not timing:
        return not_applicable("timing", "no steps were taken")
    parts = [
        f"{kind} p50 {t['p50']:.3g} ms, p90 {t['p90']:.3g}, max {t['max']:.3g} (n={int(t['n'])})"
        for kind, t in timing.items()
        if kind in ("tool", "verify")
    ]
    return CheckResult(name="timing", status="passed", why="; ".join(parts) or "steps timed (reported only)")
