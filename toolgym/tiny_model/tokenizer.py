"""The tiny model's tokenizer without transformers: its ``tokenizer.json`` read by the ``tokenizers`` library
and its chat template rendered by jinja2, as transformers renders chat templates.

Why: ``--model tiny``, ``make_renderer("tiny")``, the docs and most tests only need the tokenizer, and
``AutoTokenizer`` imports transformers and torch (23.6 s on a busy two-core machine; a fraction of a second
this way). The subset here is what toolgym's rendering uses (``ChatRenderer``, the gateway, trainer rows);
``tests/tiny_model/test_tokenizer.py`` checks it against transformers' tokenizer on the same files, token
for token and character for character. Anything that needs a full Hugging Face tokenizer (a trainer, the HF
backend, vLLM) still loads one from the same directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any


class TinyTokenizer:
    """The Hugging Face tokenizer methods toolgym's rendering calls, for a directory the builder wrote."""

    def __init__(self, model_dir: str | Path):
        from tokenizers import Tokenizer

        directory = Path(model_dir)
        self.name_or_path = str(directory)
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config = json.loads((directory / "tokenizer_config.json").read_text())
        self.chat_template: str = config["chat_template"]
        self.eos_token, self.pad_token = config.get("eos_token"), config.get("pad_token")
        self.bos_token, self.unk_token = config.get("bos_token"), config.get("unk_token")
        self.eos_token_id = self._id(self.eos_token)
        self.pad_token_id = self._id(self.pad_token)
        self.bos_token_id = self._id(self.bos_token)
        self.unk_token_id = self._id(self.unk_token)

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self._tokenizer.token_to_id(token)

    def __len__(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        return str(self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int | None] | None:
        if isinstance(tokens, str):
            found = self._tokenizer.token_to_id(tokens)
            return self.unk_token_id if found is None else found
        return [self.convert_tokens_to_ids(t) for t in tokens]  # type: ignore[misc]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str | None] | None:
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        return [self._tokenizer.id_to_token(i) for i in ids]

    def apply_chat_template(
        self,
        conversation: Sequence[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        text = _template(self.chat_template).render(
            messages=list(conversation),
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            pad_token=self.pad_token,
            unk_token=self.unk_token,
            **kwargs,
        )
        return self.encode(text) if tokenize else text


@lru_cache(maxsize=8)
def _template(source: str) -> Any:
    """The template compiled as transformers compiles chat templates: a sandbox, trimmed blocks, loop
    controls, its ``tojson`` (unlike jinja's, it does not escape HTML), ``raise_exception`` and
    ``strftime_now``."""
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


__all__ = ["TinyTokenizer"]
