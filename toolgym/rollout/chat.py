"""Chat-template rendering for token-faithful multi-turn rollouts.

The episode runner never re-tokenizes what the model generated. Everything else — the prompt, the tokens that
close an assistant turn the model did not close itself, and each observation — comes from the chat template:
an observation's tokens are the tokenized difference between rendering the conversation with and without
the new messages. That only works if the template keeps earlier turns as an exact prefix;
``check_prefix_property`` finds templates that do not (e.g. ones that strip ``<think>`` from earlier
assistant turns), before a rollout trains on tokens the model never saw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_PROBE = "\x00toolgym-probe\x00"


class TemplateError(ValueError):
    """The chat template cannot be used for token-faithful multi-turn rollouts."""


class ChatRenderer:
    """What the runner needs from a tokenizer: prompts, observation deltas and turn endings as token ids.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        template_tools: pass the env's tool schemas to the template (for models trained with native tool
            prompts). Off by default because every env's system prompt already teaches its action format.
        chat_template_kwargs: extra template variables (e.g. ``enable_thinking``).
        eos_ids: ids that end a turn (default: the tokenizer's EOS and the usual end-of-turn tokens); pass the
            model's ``generation_config.eos_token_id`` when it lists more.
    """

    def __init__(
        self,
        tokenizer: Any,
        template_tools: bool = False,
        chat_template_kwargs: dict | None = None,
        eos_ids: Sequence[int] | None = None,
    ):
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template")
        self.tokenizer = tokenizer
        self.template_tools = template_tools
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.eos_ids = set(eos_ids) if eos_ids is not None else _eos_ids(tokenizer)
        self.turn_suffix = self._assistant_turn_suffix()

    def render(
        self, messages: Sequence[dict], tools: list | None = None, generation_prompt: bool = False
    ) -> str:
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=tools if self.template_tools else None,
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **self.chat_template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def prompt_ids(self, messages: Sequence[dict], tools: list | None = None) -> list[int]:
        return self.encode(self.render(messages, tools, generation_prompt=True))

    def action_text(self, generated_ids: Sequence[int]) -> str:
        """The text the env sees: the generated tokens, decoded, without a trailing end-of-turn token."""
        ids = list(generated_ids)
        if ids and ids[-1] in self.eos_ids:
            ids.pop()
        return self.decode(ids)

    def turn_close_ids(self, generated_ids: Sequence[int]) -> list[int]:
        """Tokens that finish the assistant turn after what the model generated (the template's ending, less
        what the model already produced — e.g. only ``"\\n"`` after ``<|im_end|>``, all of it after a stop
        string)."""
        produced = (
            self.decode(generated_ids[-1:]) if generated_ids and generated_ids[-1] in self.eos_ids else ""
        )
        rest = (
            self.turn_suffix[len(produced) :] if self.turn_suffix.startswith(produced) else self.turn_suffix
        )
        return self.encode(rest) if rest else []

    def observation_ids(
        self, before: Sequence[dict], added: Sequence[dict], tools: list | None = None
    ) -> list[int]:
        """Tokens for ``added`` messages (observations) plus the next generation prompt."""
        old = self.render(before, tools)
        new = self.render([*before, *added], tools, generation_prompt=True)
        if not new.startswith(old):
            raise TemplateError(
                "the chat template re-renders earlier turns differently once messages are added; "
                "token-faithful multi-turn rollouts need the earlier conversation as an exact prefix"
            )
        return self.encode(new[len(old) :])

    def _assistant_turn_suffix(self) -> str:
        """What the template writes after an assistant message's content (e.g. ``<|im_end|>\\n``)."""
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _PROBE}]
        text = self.render(messages)
        at = text.rfind(_PROBE)
        if at < 0:
            raise TemplateError("the chat template does not render assistant content verbatim")
        return text[at + len(_PROBE) :]


#: a representative tool-use conversation for ``check_prefix_property``
_SAMPLE_CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 12345 * 6789?"},
    {
        "role": "assistant",
        "content": "<think>Large numbers; use the tool.</think><calculator>12345*6789</calculator>",
    },
    {"role": "tool", "content": "83810205"},
    {"role": "assistant", "content": "<think>Done.</think><answer>83810205</answer>"},
    {"role": "user", "content": "Thanks. And 2 + 2?"},
    {"role": "assistant", "content": "<answer>4</answer>"},
]


def check_prefix_property(
    renderer: ChatRenderer, tools: list | None = None, conversation: Sequence[dict] | None = None
) -> list[str]:
    """Render a representative tool-use conversation (or ``conversation``, e.g. one a trainer adapter
    produced) turn by turn and report every boundary where the earlier rendering is not an exact prefix of
    the later one (string and tokens). Empty list: all good."""
    conversation = list(conversation if conversation is not None else _SAMPLE_CONVERSATION)
    problems = []
    for k in range(2, len(conversation)):
        head, full = conversation[:k], conversation[: k + 1]
        generation = conversation[k]["role"] == "assistant"
        earlier = renderer.render(head, tools, generation_prompt=generation)
        later = renderer.render(full, tools)
        if not later.startswith(earlier):
            problems.append(
                f"turn {k} ({conversation[k]['role']}): earlier turns are re-rendered differently"
            )
            continue
        earlier_ids, later_ids = renderer.encode(earlier), renderer.encode(later)
        if later_ids[: len(earlier_ids)] != earlier_ids:
            problems.append(f"turn {k} ({conversation[k]['role']}): token boundary merges across turns")
    return problems


def _eos_ids(tokenizer: Any) -> set[int]:
    ids = set()
    for token in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.add(tid)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
