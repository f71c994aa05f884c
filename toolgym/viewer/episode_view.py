"""One episode as the page shows it: its row in the list, the conversation, and its tokens by mask.

The token view is the point of the viewer: the ids a trainer consumes, cut into runs at every change of the
mask (a model turn, then the template and observation tokens the runner appended with mask 0), each token
decoded on its own so that a token boundary is visible, with its logprob. The runner's prefix check (in
``ChatRenderer.observation_ids``) fails an episode with a ``TemplateError`` when the chat template
re-renders earlier turns, that is when re-tokenising the conversation would not give the tokens the model
saw: such an episode gets a warning at the top of both views.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from toolgym.rollout.chat import TemplateError
from toolgym.viewer.load import Episode

#: how the runner records a failed prefix check in ``Trajectory.error``
PREFIX_ERROR = f"{TemplateError.__name__}:"


@dataclass
class Token:
    text: str
    id: int
    logprob: float | None = None


@dataclass
class Segment:
    """A run of tokens with one role: the prompt, a model turn (mask 1) or template/observation (mask 0)."""

    kind: str  # prompt | model | template
    label: str
    tokens: list[Token] = field(default_factory=list)


@dataclass
class EpisodeView:
    index: int
    row: dict[str, Any]
    prompt_messages: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    verdict: dict[str, Any] | None
    warnings: list[str]
    segments: list[Segment]
    decoded: bool


def row(index: int, episode: Episode) -> dict[str, Any]:
    """The episode's line in the list, and the values the filters and plots read."""
    t = episode.trajectory
    errors = []
    if t.error:
        errors.append("episode")
    if t.verdict is not None and t.verdict.error:
        errors.append("verifier")
    if t.infra_errors:
        errors.append("infra")
    return {
        "index": index,
        "env": t.env_id or "?",
        "task": t.task_id,
        "group": t.group or "",
        "sample": t.sample,
        "step": episode.step,
        "trained": t.trainable if episode.trained is None else episode.trained,
        "reward": t.reward,
        "passed": bool(t.verdict and t.verdict.passed),
        "stop": t.stop_reason or "?",
        "turns": t.num_turns,
        "tool_calls": t.tool_calls,
        "tool_errors": t.tool_errors,
        "response_tokens": len(t.response_ids),
        "generated_tokens": t.generated_tokens,
        "errors": errors,
        "prefix_error": bool(t.error and t.error.startswith(PREFIX_ERROR)),
        "step_s": list(t.step_s),
        "source": episode.source,
    }


def build(index: int, episode: Episode, decode: Any | None) -> EpisodeView:
    """The full view of one episode; ``decode(ids) -> [text per id]`` or None (then ids are shown)."""
    t = episode.trajectory
    first_model = next((i for i, m in enumerate(t.messages) if m.get("role") == "assistant"), len(t.messages))
    turns = []
    for i, turn in enumerate(t.turns):
        turns.append(
            {
                "number": i + 1,
                "action": turn.action,
                "kind": turn.parsed.kind,
                "calls": [
                    {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}
                    for c in turn.parsed.tool_calls
                ],
                "answer": turn.parsed.answer,
                "reason": turn.parsed.reason,
                "results": [
                    {"name": r.name, "status": r.status, "output": r.output} for r in turn.tool_results
                ],
                "observation": turn.observation,
                "reward": turn.reward,
                "step_ms": t.step_s[i] * 1000 if i < len(t.step_s) else None,
            }
        )
    verdict = None
    if t.verdict is not None:
        verdict = {
            "reward": t.verdict.reward,
            "passed": t.verdict.passed,
            "error": t.verdict.error,
            "details": json.dumps(t.verdict.details, indent=2, ensure_ascii=False, default=str),
        }
    return EpisodeView(
        index=index,
        row=row(index, episode),
        prompt_messages=t.messages[:first_model],
        turns=turns,
        verdict=verdict,
        warnings=warnings(episode),
        segments=segments(episode, decode),
        decoded=decode is not None,
    )


def warnings(episode: Episode) -> list[str]:
    t = episode.trajectory
    found = []
    if t.error and t.error.startswith(PREFIX_ERROR):
        found.append(
            "Re-tokenisation: the runner's prefix check found that the chat template re-renders earlier "
            "turns (e.g. it strips <think> from them), so the conversation's tokens would differ from the "
            "ones the model saw. The episode failed and is not trained on; fix the template "
            f"(toolgym check shows it). {t.error}"
        )
    elif t.error:
        found.append(f"The episode failed: {t.error}")
    if t.verdict is not None and t.verdict.error:
        found.append(f"The verifier failed: {t.verdict.error}")
    if t.infra_errors:
        found.append(f"{t.infra_errors} tool call(s) failed through the infrastructure (infra_error)")
    if episode.trained is False or (episode.trained is None and not t.trainable):
        found.append("Not trained on: the trainer's loss mask for this episode is all zeros.")
    if len(t.response_mask) != len(t.response_ids):
        found.append(
            f"The mask has {len(t.response_mask)} entries for {len(t.response_ids)} response tokens."
        )
    return found


def segments(episode: Episode, decode: Any | None) -> list[Segment]:
    """The prompt, then the response cut at every change of the mask (turn boundaries)."""
    t = episode.trajectory
    texts = decode(t.prompt_ids + t.response_ids) if decode is not None else None

    def text(position: int, token_id: int) -> str:
        return texts[position] if texts is not None else f"[{token_id}]"

    trained = t.trainable if episode.trained is None else episode.trained
    failed = t.error is not None and not any(t.response_mask)  # the runner zeroed the whole mask
    out = [Segment("prompt", "prompt", [Token(text(i, tid), tid) for i, tid in enumerate(t.prompt_ids)])]
    offset, model_turns, others = len(t.prompt_ids), 0, 0
    logprobs = t.logprobs
    for i, tid in enumerate(t.response_ids):
        mask = t.response_mask[i] if i < len(t.response_mask) else 0
        kind = "model" if mask else "template"
        if out[-1].kind != kind:
            if kind == "model":
                model_turns += 1
                used = "trained on" if trained else "generated; this episode is not trained on"
                label = f"model turn {model_turns} (mask 1: {used})"
            elif failed:
                label = "response (mask 0: the episode failed, none of it is trained on)"
            else:
                others += 1
                label = f"template / observation {others} (mask 0)"
            out.append(Segment(kind, label))
        lp = logprobs[i] if logprobs is not None and i < len(logprobs) and mask else None
        out[-1].tokens.append(Token(text(offset + i, tid), tid, lp))
    return out


__all__ = ["PREFIX_ERROR", "EpisodeView", "Segment", "Token", "build", "row", "warnings"]
