"""An agent program as toolgym's trainers train it: a plain ``openai`` SDK tool loop, unchanged for training.

``toolgym train`` runs it per row when the config names it (``agent: examples/gateway_agent.py:agent``):
``task`` holds the task's messages and the env's tools as OpenAI functions, ``base_url`` is an
OpenAI-compatible endpoint (a gateway session in front of the trainer's own engine, which records every token
the model samples), and the returned text is the final answer the env's verifier judges. The env's tools run
in its sandbox, through the gateway (``task.call_tool``). See docs/training.md, "Train your own agent".
"""

from __future__ import annotations

import json

from openai import AsyncOpenAI

MAX_TURNS = 4


async def agent(task, base_url: str, api_key: str) -> str | None:
    """Ask the model, run the tools it calls, repeat; its first reply without tool calls is the answer."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        messages = list(task.messages)
        for _ in range(MAX_TURNS):
            reply = await client.chat.completions.create(model="policy", messages=messages, tools=task.tools)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content
            for call in message.tool_calls:
                try:
                    output = await task.call_tool(call.function.name, json.loads(call.function.arguments))
                except (ValueError, RuntimeError) as exc:  # bad JSON, an unknown tool: the model reads why
                    output = f"Error: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return None  # no answer within MAX_TURNS: the verifier gives 0
