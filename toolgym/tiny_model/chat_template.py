"""The tiny model's chat template: ChatML with tools, laid out the way Qwen2.5 does it.

Why Qwen2.5's layout: it is what the hermes ``<tool_call>`` parser and most open tool-use models expect, so
code tested against the tiny model behaves the same against a real Qwen model.

Why it differs on one point: it never rewrites earlier turns (no stripping of ``<think>`` blocks, no
moving of content), so the rendering of ``messages[:k]`` is a string prefix of the rendering of
``messages[:k+1]``, and — because every turn ends in the special token ``<|im_end|>`` — also a token prefix.
Multi-turn RL relies on this: the tokens the model generated stay exactly the tokens that are trained on.
The one place the prefix property cannot hold is *inside* a run of consecutive ``tool`` messages: like
Qwen2.5 they share one ``user`` turn, so the turn is closed only after the last of them. Environments append
all results of one step together, so every boundary the rollout code renders at is still a prefix.

Content may be a string, ``None`` or a list of OpenAI-style content parts (only ``text`` parts are shown).
Tool-call arguments may be a dict (rendered with ``tojson``) or an already-encoded JSON string (kept as is).
"""

from __future__ import annotations

CHAT_TEMPLATE = r"""
{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is none -%}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}
            {%- if part.type == 'text' -%}{{- part.text -}}{%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{- content | string -}}
    {%- endif -%}
{%- endmacro -%}
{%- set has_system = messages | length > 0 and messages[0].role == 'system' -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if has_system -%}
        {{- render_content(messages[0].content) + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments ' -}}
    {{- 'within <tool_call></tool_call> XML tags:\n<tool_call>\n' -}}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
    {{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if loop.first and has_system -%}
        {#- already rendered above, merged with the tools section -#}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or loop.previtem.role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + render_content(message.content) + '\n</tool_response>' -}}
        {%- if loop.last or loop.nextitem.role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif message.role == 'assistant' and message.tool_calls -%}
        {{- '<|im_start|>assistant' -}}
        {%- if message.content -%}
            {{- '\n' + render_content(message.content) -}}
        {%- endif -%}
        {%- for tool_call in message.tool_calls -%}
            {%- set call = tool_call.function if tool_call.function is defined else tool_call -%}
            {{- '\n<tool_call>\n{"name": "' + call.name + '", "arguments": ' -}}
            {%- if call.arguments is string -%}
                {{- call.arguments -}}
            {%- else -%}
                {{- call.arguments | tojson -}}
            {%- endif -%}
            {{- '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' + render_content(message.content) + '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip()
