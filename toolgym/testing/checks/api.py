"""The ``api`` and ``determinism`` checks: Gymnasium's contract, the id round trip, seeds and task pinning."""

from __future__ import annotations

import json
import warnings
from typing import Any

import gymnasium as gym

from toolgym.core.messages import MessagesView
from toolgym.envs.base import ToolEnv
from toolgym.testing.checks.common import (
    Findings,
    diff,
    episode,
    exc_tail,
    oracle_texts,
    plain,
    short,
    tool_env,
)
from toolgym.testing.checks.context import CheckResult, Context

# -- api -----------------------------------------------------------------------------------------------------


def check_api(ctx: Context) -> CheckResult:
    from gymnasium.utils.env_checker import check_env

    f = Findings("api")
    with ctx.target.open() as env:
        inner = env.unwrapped
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                check_env(inner, skip_render_check=True)  # gymnasium's render check is for frames
            except Exception as exc:
                f.fail(f"gymnasium's check_env failed: {type(exc).__name__}: {exc}", exc_tail(exc))
        for w in caught:
            if "WARN:" in str(w.message):  # gymnasium's logger.warn
                f.fail(f"gymnasium's check_env warned: {plain(str(w.message))}")
        f.covered.append("gymnasium check_env" + ("" if f.problems else " passes"))
        spec = env.spec
        if spec is None:
            f.covered.append("no spec, so no gym.make round trip (pass a registered id to check it)")
        else:
            _round_trip(ctx, f, env, spec)
    return f.result()


def _round_trip(ctx: Context, f: Findings, env: gym.Env, spec: Any) -> None:
    call = f"gym.make({spec.id!r}, **{short(spec.kwargs, 120)})"
    try:
        again = gym.make(spec.id, **spec.kwargs)
    except Exception as exc:
        f.fail(f"{call} failed: {type(exc).__name__}: {exc}", exc_tail(exc))
        return
    try:
        if again.spec is None or again.spec.id != spec.id or again.spec.kwargs != spec.kwargs:
            f.fail(f"{call} gives an env whose spec differs", again.spec)
        first = env.reset(seed=ctx.seed)[0]
        if again.reset(seed=ctx.seed)[0] != first:
            f.fail(f"{call} gives an env with a different first observation for seed {ctx.seed}")
        f.covered.append("the id and kwargs round-trip through gym.make")
    finally:
        again.close()


# -- determinism ---------------------------------------------------------------------------------------------


def check_determinism(ctx: Context) -> CheckResult:
    f = Findings("determinism")
    seeds = list(range(ctx.seed, ctx.seed + ctx.episodes))
    with ctx.target.open() as env:
        inner = tool_env(env)
        first = [_draw(ctx, env, s) for s in seeds]
        _same(f, first, [_draw(ctx, env, s) for s in seeds], seeds, "reset twice in a row")
        if ctx.target.fresh:
            with ctx.target.open() as other:
                _same(f, first, [_draw(ctx, other, s) for s in seeds], seeds, "a fresh instance")
        else:
            f.covered.append("no fresh instance compared (the env was given as an instance)")
        many = range(ctx.seed, ctx.seed + max(32, ctx.episodes))
        drawn = {_draw(ctx, env, s)[:2] for s in many}
        size = _source_size(inner)
        if (size is None or size > 1) and len(drawn) < 2:
            f.fail(f"{len(many)} different seeds all gave the same task: the task draw ignores the seed")
        if inner is not None:
            for (task_id, obs, _), seed in zip(first[:3], seeds):
                _pinned(ctx, f, env, inner, task_id, obs, seed)
            if ctx.oracle is not None and not f.problems:
                texts = oracle_texts(ctx, env, seeds[0])
                one, two = (
                    episode(ctx, env, texts, seed=seeds[0], check="determinism", comparable=True)
                    for _ in range(2)
                )
                if one != two:
                    f.fail(f"the oracle's episode for seed {seeds[0]} played twice differs", diff(one, two))
                f.covered.append("the oracle's episode replays identically")
    f.covered.insert(0, f"{len(seeds)} seeds: same tasks twice and across instances, seeds differ")
    return f.result()


def _draw(ctx: Context, env: gym.Env, seed: int) -> tuple[Any, str, str]:
    obs, info = ctx.reset("determinism", env, seed=seed)
    chat = info.get("messages")  # ToolEnv's is a MessagesView, a read-only sequence: compare its messages
    messages = json.dumps(list(chat) if isinstance(chat, MessagesView) else chat, default=str, sort_keys=True)
    return info.get("task_id", obs), obs, messages


def _same(f: Findings, a: list, b: list, seeds: list[int], how: str) -> None:
    for seed, x, y in zip(seeds, a, b):
        if x != y:
            f.fail(f"reset(seed={seed}) gave a different task with {how}", diff(x, y))
            return


def _pinned(
    ctx: Context, f: Findings, env: gym.Env, inner: ToolEnv, task_id: Any, obs: str, seed: int
) -> None:
    """``options={"task_id": ...}`` and ``{"task": ...}`` give the seed's task whatever the seed."""
    for key in ("task_id", "task"):
        value = task_id if key == "task_id" else inner.task
        pinned, info = ctx.reset("determinism", env, seed=seed + 1, options={key: value})
        if pinned != obs or info.get("task_id") != task_id:
            f.fail(f"reset(options={{{key!r}: ...}}) did not pin task {task_id!r}", pinned)


def _source_size(inner: ToolEnv | None) -> int | None:
    if inner is None:
        return None
    try:
        return len(inner.tasks)
    except TypeError:
        return None
