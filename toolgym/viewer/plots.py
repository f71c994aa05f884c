"""The summary plots: matplotlib figures written as SVG and inlined in the page.

Inline SVG needs no script, no CDN and no network, so the page works from ``file://`` on a machine without
internet; ``svg.fonttype: none`` keeps the labels as text (smaller, searchable). matplotlib's object API
(``Figure``) draws without pyplot's global state or a GUI backend. Each plot returns ``(title, svg)``; a plot
with nothing to show (no steps outside a training dump, no tool calls) is left out rather than drawn empty.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

#: one colour per role, the same as the page's token colours
MODEL, OTHER, ACCENT = "#2f7d32", "#9e9e9e", "#1565c0"


def plots(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every plot that has data for ``rows`` (the episode rows of ``viewer.episode_view.row``)."""
    if not rows:
        return []
    makers = (reward_by_env, reward_by_step, turns_and_calls, tool_latency, response_length)
    return [made for maker in makers if (made := maker(rows)) is not None]


def reward_by_env(rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
    by_env: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_env[r["env"]].append(r["reward"])
    envs = sorted(by_env)
    fig, ax = _figure(width=max(4.0, 1.1 * len(envs) + 1.5))
    means = [sum(by_env[e]) / len(by_env[e]) for e in envs]
    bars = ax.bar(range(len(envs)), means, color=ACCENT)
    ax.bar_label(bars, labels=[f"{m:.2f} (n={len(by_env[e])})" for m, e in zip(means, envs, strict=True)])
    ax.set_xticks(range(len(envs)), [e.split("/")[-1] for e in envs])
    ax.set_ylabel("mean reward")
    low = min(0.0, *means)
    ax.set_ylim(low * 1.2, max(1.0, *means) * 1.2)
    return "Reward by env", _svg(fig)


def reward_by_step(rows: Sequence[dict[str, Any]]) -> tuple[str, str] | None:
    by_step: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r["step"] is not None:
            by_step[r["step"]].append(r["reward"])
    if not by_step:
        return None
    steps = sorted(by_step)
    fig, ax = _figure()
    ax.plot(steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], marker="o", color=ACCENT)
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward of the dumped episodes")
    return "Reward by step", _svg(fig)


def turns_and_calls(rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
    fig, ax = _figure()
    turns = [r["turns"] for r in rows]
    calls = [r["tool_calls"] for r in rows]
    top = max([*turns, *calls, 1])
    bins = [b - 0.5 for b in range(top + 2)]
    ax.hist([turns, calls], bins=bins, label=["turns", "tool calls"], color=[ACCENT, MODEL])
    ax.set_xlabel("per episode")
    ax.set_ylabel("episodes")
    ax.legend()
    return "Turns and tool calls per episode", _svg(fig)


def tool_latency(rows: Sequence[dict[str, Any]]) -> tuple[str, str] | None:
    """env.step per turn: the turn's tool calls (or the verifier on the answer turn)."""
    ms = [s * 1000 for r in rows for s in r["step_s"]]
    if not ms:
        return None
    fig, ax = _figure()
    ax.hist(ms, bins=min(30, max(5, len(ms) // 3)), color=ACCENT)
    ax.set_xlabel("env.step per turn (tools, verifier), ms")
    ax.set_ylabel("turns")
    return "Tool latency", _svg(fig)


def response_length(rows: Sequence[dict[str, Any]]) -> tuple[str, str]:
    fig, ax = _figure()
    ax.hist(
        [[r["generated_tokens"] for r in rows], [r["response_tokens"] for r in rows]],
        bins=20,
        label=["generated (mask 1)", "response (all tokens after the prompt)"],
        color=[MODEL, OTHER],
    )
    ax.set_xlabel("tokens")
    ax.set_ylabel("episodes")
    ax.legend()
    return "Response length", _svg(fig)


def _figure(width: float = 4.0) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 2.8), layout="constrained")
    return fig, fig.add_subplot()


def _svg(fig: Any) -> str:
    """The figure as an ``<svg>`` element (the XML prolog and doctype dropped: it goes inside HTML)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "toolgym"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})  # the same data, the same page
    text = buffer.getvalue()
    return text[text.index("<svg") :]


__all__ = ["plots"]
