"""The token record of a session driven by an agent program (the gateway's sessions): what the model saw and
sampled, token by token, while a client sent it whole chat histories one request at a time.

An agent program sends its full message list on every call; a naive recorder would re-tokenize that text
for training, and decode-then-encode is not the identity (the trainer would learn from tokens the model never
sampled). The record instead keeps, per *segment*, the exact ids of the conversation so far: the first
request's rendered prompt, then for each later request that *extends* the history (the messages sent before,
the gateway's own replies among them, then new ones) only the new messages' tokens (mask 0), rendered as the
chat template's difference between the history with and without them (``ChatRenderer.observation_ids``, the
prefix check the episode runner uses), then the sampled ids as sampled (mask 1, with their logprobs).

A request that does not extend the history (the client truncated, summarised or edited it) starts a new
segment with its own prompt: counted, recorded, never re-tokenized into the old one. Each segment is a
:class:`~toolgym.core.types.Trajectory` (the rollout JSONL's record), so everything that trains on an episode
trains on a segment.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.core.types import ParsedAction, ToolResult, Trajectory, Turn, Verdict
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import Generation


@dataclass
class CallRecord:
    """One chat-completions call of a session: where it began, how long it sampled, what it cost."""

    segment: int
    started_s: float
    generation_s: float
    #: tokens of the context the model saw, and of those the ones this call added (0 when it extended the
    #: history by nothing but the sampled reply: impossible; the whole prompt for a new segment)
    context_tokens: int
    new_context_tokens: int
    completion_tokens: int
    finish_reason: str
    #: whether the client received the whole reply (a stream it dropped mid-way: False; the tokens are
    #: recorded either way, they were sampled)
    delivered: bool = True

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Segment:
    """One stretch of a session whose ids are a single growing sequence: a Trajectory plus the messages its
    ids cover (the last is the gateway's reply) and the template settings they were rendered with."""

    trajectory: Trajectory
    history: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    calls: list[CallRecord] = field(default_factory=list)
    #: the ids the last reply sampled (its turn is closed by the template before new messages)
    last_sampled: list[int] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return [*self.trajectory.prompt_ids, *self.trajectory.response_ids]


@dataclass
class Context:
    """What one call sends to the engine: the ids, and how they relate to the session's record."""

    ids: list[int]
    #: the segment the call extends, or None: it starts a new one
    segment: int | None
    #: the ids this call adds after the segment's own (mask 0); all of ``ids`` for a new segment
    added: list[int]
    #: why a new segment starts (None when the call extends one, or is the session's first)
    restart_reason: str | None = None


class TokenRecord:
    """The token-level record of one session (not thread-safe: the gateway runs one call per session at a
    time)."""

    def __init__(self, renderer: ChatRenderer, *, task_id: str = "", env_id: str = ""):
        self.renderer = renderer
        self.task_id, self.env_id = task_id, env_id
        self.segments: list[Segment] = []
        self.restarts: list[str] = []

    def context(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Context:
        """The ids for a call with ``messages`` (and the template's ``tools``): the current segment's ids and
        the new messages' tokens when ``messages`` extends its history, else a fresh prompt."""
        renderer = self.renderer
        if self.segments:
            segment = self.segments[-1]
            reason = _why_not_extending(segment, messages, tools)
            if reason is None:
                added_messages = list(messages[len(segment.history) :])
                close = renderer.turn_close_ids(segment.last_sampled)
                before = list(messages[: len(segment.history)])
                observation = renderer.observation_ids(before, added_messages, tools)
                added = [*close, *observation]
                return Context([*segment.ids, *added], len(self.segments) - 1, added)
        else:
            reason = None
        ids = renderer.prompt_ids(list(messages), tools)
        return Context(ids, None, list(ids), reason)

    def commit(
        self,
        context: Context,
        messages: Sequence[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        generation: Generation,
        reply: dict[str, Any],
        parsed: ParsedAction,
        *,
        started_s: float,
        generation_s: float,
    ) -> CallRecord:
        """Record a sampled reply to ``context``: the added ids with mask 0, the sampled ones as sampled."""
        if context.segment is None:
            if context.restart_reason is not None:
                self.restarts.append(context.restart_reason)
            traj = Trajectory(
                task_id=self.task_id,
                env_id=self.env_id,
                prompt_ids=list(context.ids),
                tokenizer=getattr(self.renderer.tokenizer, "name_or_path", None),
            )
            segment = Segment(traj, [], tools)
            self.segments.append(segment)
            index = len(self.segments) - 1
        else:
            index = context.segment
            segment = self.segments[index]
            traj = segment.trajectory
            added = len(context.added)
            _extend(traj, context.added, [0] * added, [0.0] * added, [-1] * added)
        sampled = list(generation.token_ids)
        logprobs = list(generation.logprobs) if generation.logprobs is not None else None
        versions = list(generation.policy_versions) if generation.policy_versions is not None else None
        _extend(traj, sampled, [1] * len(sampled), logprobs, versions, first=context.segment is None)
        traj.turns.append(Turn(action=self.renderer.action_text(sampled), parsed=parsed))
        traj.generation_s += generation_s
        traj.stop_reason = "length" if generation.finish_reason == "length" else None
        segment.history = [*messages, reply]
        segment.last_sampled = sampled
        traj.messages = segment.history
        call = CallRecord(
            segment=index,
            started_s=started_s,
            generation_s=generation_s,
            context_tokens=len(context.ids),
            new_context_tokens=len(context.added),
            completion_tokens=len(sampled),
            finish_reason=generation.finish_reason,
        )
        segment.calls.append(call)
        return call

    def attach_tool_results(self, results: Sequence[ToolResult]) -> None:
        """Tool calls the session ran for its last reply (the gateway's env tools) join that reply's turn, so
        the trajectory counts them (``tool_calls``, ``tool_errors``, ``infra_errors``) as a runner's does."""
        traj = self.last
        if traj is None or not traj.turns or not results:
            return
        turn = traj.turns[-1]
        traj.turns[-1] = turn.model_copy(update={"tool_results": (*turn.tool_results, *results)})

    def set_verdict(self, verdict: Verdict, stop_reason: str) -> None:
        """The session's verdict goes on its last segment (the one that holds the final answer)."""
        if not self.segments:
            return
        traj = self.segments[-1].trajectory
        traj.verdict, traj.reward, traj.stop_reason = verdict, float(verdict.reward), stop_reason

    @property
    def last(self) -> Trajectory | None:
        return self.segments[-1].trajectory if self.segments else None

    def dump(self) -> dict[str, Any]:
        """Every segment as the rollout JSONL records an episode, with its calls (timings) and restarts."""
        out = []
        for segment in self.segments:
            row = segment.trajectory.model_dump(mode="json")
            row["calls"] = [c.as_dict() for c in segment.calls]
            out.append(row)
        return {"segments": out, "restarts": list(self.restarts)}


def _extend(
    traj: Trajectory,
    ids: list[int],
    mask: list[int],
    logprobs: list[float] | None,
    versions: list[int] | None,
    *,
    first: bool = False,
) -> None:
    """Append to a segment's response; its logprobs (and the weights' versions) stay only while every call's
    engine gave them. A segment's first sampled ids start its versions (a new Trajectory has none)."""
    traj.response_ids.extend(ids)
    traj.response_mask.extend(mask)
    if traj.logprobs is not None:
        if logprobs is None:
            traj.logprobs = None  # the engine stopped giving logprobs: none for the segment
        else:
            traj.logprobs.extend(logprobs)
    if first:
        traj.policy_versions = versions
    elif traj.policy_versions is not None:
        traj.policy_versions = None if versions is None else [*traj.policy_versions, *versions]


def _why_not_extending(
    segment: Segment, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> str | None:
    """None when ``messages`` continues the segment's history; else what changed (a new segment's reason)."""
    history = segment.history
    if _canonical_tools(tools) != _canonical_tools(segment.tools):
        return "the request's tools differ from the ones the history was rendered with"
    if len(messages) <= len(history):
        return f"the request has {len(messages)} messages, not more than the {len(history)} already recorded"
    for index, (old, new) in enumerate(zip(history, messages, strict=False)):
        if not same_message(old, new):
            return f"message {index} ({old.get('role')}) differs from the one recorded"
    return None


def _canonical_tools(tools: list[dict[str, Any]] | None) -> str:
    return json.dumps(tools or [], sort_keys=True)


def message_text(content: Any) -> str:
    """A message's text: a string, nothing, or the text parts of an OpenAI content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def _calls_key(message: dict[str, Any]) -> list[tuple[str, Any]]:
    key = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments) if arguments.strip() else {}
        key.append((str(function.get("name")), arguments))
    return key


def same_message(recorded: dict[str, Any], sent: dict[str, Any]) -> bool:
    """Whether a client's message is the recorded one as clients echo it: the same role, text and tool calls
    (their ids and JSON spacing aside). An assistant message with tool calls may come back without its text
    (several agent frameworks drop it); anything else that differs is a rewrite."""
    if recorded.get("role") != sent.get("role"):
        return False
    old_text, new_text = message_text(recorded.get("content")), message_text(sent.get("content"))
    if recorded.get("role") == "assistant":
        old_calls, new_calls = _calls_key(recorded), _calls_key(sent)
        if old_calls != new_calls:
            return False
        return old_text.strip() == new_text.strip() or (bool(new_calls) and not new_text.strip())
    if old_text != new_text:
        return False
    return recorded.get("tool_call_id") == sent.get("tool_call_id") or "tool_call_id" not in recorded


__all__ = ["CallRecord", "Context", "Segment", "TokenRecord", "message_text", "same_message"]
