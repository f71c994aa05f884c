"""The token record of an agent-driven session (``toolgym.rollout.token_record``), without HTTP: each call is
rendered against the record, sent to a scripted engine and committed, as the gateway does.

What must hold: the first call's ids are the rendered prompt; a call that extends the history adds only
template/observation tokens (mask 0, logprob 0) and then the sampled ids as sampled (mask 1, their
logprobs), so the record is exactly what the engine was sent on the next turn; a rewritten history starts a
new segment whose reason is recorded; an assistant message echoed without its text (same tool calls) still
extends, one with other tool-call arguments does not."""

from __future__ import annotations

import asyncio
import json

import pytest

from toolgym.core.types import ParsedAction
from toolgym.parsers.openai_calls import ToolCallReader
from toolgym.rollout.clients.base import Sampling
from toolgym.rollout.models import make_renderer
from toolgym.rollout.token_record import TokenRecord, same_message
from toolgym.testing.scripted import LOOKUP_TOOLS, ScriptedClient

TOOLS = LOOKUP_TOOLS
OTHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up in the big dictionary.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]
LOOKUP = '<tool_call>\n{"name": "lookup", "arguments": {"word": "gateway"}}\n</tool_call>'
START = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Define gateway."},
]


@pytest.fixture(scope="module")
def renderer():
    return make_renderer("tiny", template_tools=True)


def call(record: TokenRecord, client: ScriptedClient, messages, tools=None, max_tokens=512):
    """One chat call as the gateway makes it: the record's context, the engine, the reply, the commit."""
    context = record.context(messages, tools)
    sampling = Sampling(max_tokens=max_tokens)
    generation = asyncio.run(client.generate(context.ids, sampling, request_id="s"))
    text = record.renderer.action_text(generation.token_ids)
    if tools:
        content, tool_calls, parsed = ToolCallReader(tools).read(text)
    else:
        content, tool_calls, parsed = text, [], ParsedAction.final(text)
    reply = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}
    record.commit(context, messages, tools, generation, reply, parsed, started_s=0.0, generation_s=0.0)
    return context, reply


def sampled(traj):
    return [i for i, m in zip(traj.response_ids, traj.response_mask, strict=True) if m]


def test_the_first_call_is_the_rendered_prompt_then_the_sampled_ids(renderer):
    client = ScriptedClient(renderer, ["A gateway is a door."])
    record = TokenRecord(renderer, task_id="t", env_id="e")
    context, reply = call(record, client, START)
    prompt = renderer.prompt_ids(START)
    assert context.segment is None and context.restart_reason is None
    assert context.ids == prompt and context.added == prompt
    assert client.prompts == [prompt]
    traj = record.last
    assert traj is not None and len(record.segments) == 1 and record.restarts == []
    assert traj.prompt_ids == prompt
    assert traj.response_ids == client.generated[0]
    assert traj.response_mask == [1] * len(client.generated[0])
    assert traj.logprobs == [-0.5] * len(client.generated[0])
    assert (traj.task_id, traj.env_id) == ("t", "e")
    assert reply == {"role": "assistant", "content": "A gateway is a door."}
    assert record.segments[0].history == [*START, reply]
    assert [c.new_context_tokens for c in record.segments[0].calls] == [len(prompt)]


def test_extending_calls_add_only_masked_template_tokens_and_the_engine_saw_the_record(renderer):
    texts = [LOOKUP, "Looking again.\n" + LOOKUP, "<answer>a door</answer>"]
    client = ScriptedClient(renderer, texts)
    record = TokenRecord(renderer)
    messages = list(START)
    for turn in range(3):
        context, reply = call(record, client, messages, TOOLS)
        if turn:
            assert context.segment == 0 and context.restart_reason is None
        messages += [reply, {"role": "tool", "tool_call_id": "call_x", "content": f"result {turn}"}]
    assert len(record.segments) == 1 and record.restarts == []
    traj = record.last
    assert traj is not None
    full = [*traj.prompt_ids, *traj.response_ids]
    # the sampled ids, as sampled and in order, are exactly the mask-1 tokens
    assert sampled(traj) == [i for g in client.generated for i in g]
    # every prompt the engine got is the record up to that call, token for token
    for prompt in client.prompts:
        assert full[: len(prompt)] == prompt
    # the response is: sampled, masked template/observation tokens, sampled, masked, sampled
    pieces, at = [], len(traj.prompt_ids)
    for k, generated in enumerate(client.generated):
        if k:
            added = full[at : len(client.prompts[k])]
            pieces.append(("added", added))
            at = len(client.prompts[k])
        pieces.append(("sampled", full[at : at + len(generated)]))
        assert full[at : at + len(generated)] == generated
        at += len(generated)
    assert at == len(full)
    offset = len(traj.prompt_ids)
    for i, (mask, logprob) in enumerate(zip(traj.response_mask, traj.logprobs or [], strict=True)):
        assert (mask, logprob) in ((0, 0.0), (1, -0.5)), i + offset
    assert sum(traj.response_mask) == sum(len(g) for g in client.generated)
    # the masked tokens are the template's: the tool result, then the next assistant header
    added_text = [renderer.decode(ids) for kind, ids in pieces if kind == "added"]
    assert "result 0" in added_text[0] and "result 1" in added_text[1]
    assert all(text.rstrip().endswith("assistant") for text in added_text)
    # what the engine saw on the last turn reads as the whole conversation rendered by the template
    assert renderer.decode(client.prompts[2]) == renderer.render(messages[:-2], TOOLS, generation_prompt=True)
    assert [c.new_context_tokens for c in record.segments[0].calls][1:] == [
        len(ids) for kind, ids in pieces if kind == "added"
    ]


@pytest.mark.parametrize(
    ("rewrite", "reason"),
    [
        ("edit", "message 1 (user) differs"),
        ("truncate", "not more than"),
        ("tools", "tools differ"),
    ],
)
def test_a_rewritten_history_starts_a_new_segment_with_its_reason(renderer, rewrite, reason):
    client = ScriptedClient(renderer, ["First answer.", "Second answer.", "Third answer."])
    record = TokenRecord(renderer)
    tools = TOOLS
    _, first = call(record, client, START, tools)
    messages = [*START, first, {"role": "user", "content": "Shorter, please."}]
    call(record, client, messages, tools)
    kept = record.segments[0].trajectory.model_copy(deep=True)
    if rewrite == "edit":
        # the whole history sent back, one earlier message edited
        messages = [START[0], {"role": "user", "content": "Define door."}, *messages[2:]]
        messages += [record.segments[0].history[-1], {"role": "user", "content": "Go on."}]
    elif rewrite == "truncate":
        messages = [START[0], {"role": "user", "content": "Define door."}]
    else:
        tools = OTHER_TOOLS
        messages = [*messages, record.segments[0].history[-1], {"role": "user", "content": "Again."}]
    context, _ = call(record, client, messages, tools)
    assert context.segment is None and reason in (context.restart_reason or "")
    assert len(record.segments) == 2
    assert len(record.restarts) == 1 and reason in record.restarts[0]
    # the new segment's prompt is the rewritten history rendered afresh, and the engine was sent exactly it
    assert record.segments[1].trajectory.prompt_ids == renderer.prompt_ids(messages, tools)
    assert client.prompts[2] == renderer.prompt_ids(messages, tools)
    assert record.segments[1].trajectory.response_ids == client.generated[2]
    # the earlier segment is left as it was
    assert record.segments[0].trajectory == kept
    assert record.dump()["restarts"] == record.restarts
    assert [len(s["calls"]) for s in record.dump()["segments"]] == [2, 1]


def test_an_echo_without_the_text_but_with_the_same_tool_calls_extends(renderer):
    client = ScriptedClient(renderer, ["I will look it up.\n" + LOOKUP, "<answer>a door</answer>"])
    record = TokenRecord(renderer)
    _, reply = call(record, client, START, TOOLS)
    assert reply["content"] == "I will look it up." and len(reply["tool_calls"]) == 1
    # as some agent frameworks send it back: no text, a new call id, the arguments re-spaced
    recorded_call = reply["tool_calls"][0]
    echoed = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_other",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{ "word" :  "gateway" }'},
            }
        ],
    }
    assert recorded_call["id"] != "call_other"
    assert same_message(reply, echoed)
    messages = [*START, echoed, {"role": "tool", "tool_call_id": "call_other", "content": "a door"}]
    context, _ = call(record, client, messages, TOOLS)
    assert context.segment == 0 and record.restarts == [] and len(record.segments) == 1
    traj = record.last
    assert traj is not None
    assert sampled(traj) == [*client.generated[0], *client.generated[1]]
    assert client.prompts[1] == [*traj.prompt_ids, *traj.response_ids][: len(client.prompts[1])]


def test_other_tool_call_arguments_are_a_rewrite(renderer):
    client = ScriptedClient(renderer, [LOOKUP, "<answer>a door</answer>"])
    record = TokenRecord(renderer)
    _, reply = call(record, client, START, TOOLS)
    edited = json.loads(json.dumps(reply))
    edited["tool_calls"][0]["function"]["arguments"] = json.dumps({"word": "door"})
    assert not same_message(reply, edited)
    messages = [*START, edited, {"role": "tool", "tool_call_id": "c", "content": "a door"}]
    context, _ = call(record, client, messages, TOOLS)
    assert context.segment is None
    assert len(record.segments) == 2 and "message 2 (assistant) differs" in record.restarts[0]


def test_same_message_rules():
    user = {"role": "user", "content": "hi"}
    assert same_message(user, {"role": "user", "content": "hi"})
    assert same_message(user, {"role": "user", "content": [{"type": "text", "text": "hi"}]})
    assert not same_message(user, {"role": "user", "content": "hi!"})
    assert not same_message(user, {"role": "system", "content": "hi"})
    tool = {"role": "tool", "tool_call_id": "a", "content": "5"}
    assert same_message(tool, dict(tool))
    assert not same_message(tool, {**tool, "tool_call_id": "b"})
    assert not same_message(tool, {**tool, "content": "6"})
    said = {"role": "assistant", "content": "It is 5."}
    assert same_message(said, {"role": "assistant", "content": "It is 5.\n"})  # spacing at the ends
    assert not same_message(said, {"role": "assistant", "content": None})  # no tool calls: the text is all
    assert not same_message(said, {"role": "assistant", "content": "It is 6."})
    calls = [{"id": "x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    with_calls = {"role": "assistant", "content": "thinking", "tool_calls": calls}
    assert same_message(with_calls, {"role": "assistant", "content": None, "tool_calls": calls})
    assert not same_message(
        with_calls, {"role": "assistant", "content": "other thoughts", "tool_calls": calls}
    )
    assert not same_message(with_calls, {"role": "assistant", "content": "thinking"})  # the calls dropped
    two = [*calls, {"id": "y", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert not same_message(with_calls, {"role": "assistant", "content": "thinking", "tool_calls": two})


def test_a_reply_cut_by_max_tokens_is_closed_by_the_template(renderer):
    client = ScriptedClient(renderer, ["A gateway is a door in a wall.", "Yes."])
    record = TokenRecord(renderer)
    _, reply = call(record, client, START, max_tokens=3)
    assert len(client.generated[0]) == 3 and client.generated[0][-1] != client.eos_id
    messages = [*START, reply, {"role": "user", "content": "Finish it."}]
    context, _ = call(record, client, messages)
    assert context.segment == 0
    # the whole end-of-turn text is added (mask 0), so the engine sees the history as the template has it
    assert renderer.decode(client.prompts[1]) == renderer.render(messages, generation_prompt=True)
    assert renderer.decode(context.added).startswith(renderer.turn_suffix)
    traj = record.last
    assert traj is not None and traj.stop_reason is None
    assert sampled(traj) == [*client.generated[0], *client.generated[1]]


def test_no_logprobs_from_the_engine_gives_none(renderer):
    client = ScriptedClient(renderer, ["One.", "Two."], logprobs=False)
    record = TokenRecord(renderer)
    _, reply = call(record, client, START)
    assert record.last is not None and record.last.logprobs is None
    call(record, client, [*START, reply, {"role": "user", "content": "More."}])
    traj = record.last
    assert traj is not None and traj.logprobs is None
    assert len(record.segments) == 1 and sampled(traj) == [*client.generated[0], *client.generated[1]]
    assert record.dump()["segments"][0]["logprobs"] is None
