"""``toolgym view``: a read-only trajectory viewer for rollout JSONL, eval reports and training episode dumps.

``load`` reads the file (``viewer.load``), ``episode`` shapes one episode for the page (conversation, tokens
by mask), ``plots`` draws the summary plots as inline SVG, ``page`` fills the Jinja2 templates, and
``serve`` answers the same pages from a local HTTP server for files too large to inline. Nothing here
writes anything but the report it is asked for.
"""

from __future__ import annotations

from pathlib import Path

from toolgym.viewer.load import Loaded, load
from toolgym.viewer.page import Decode, static_page


def token_decoder(loaded: Loaded, model: str | None = None) -> tuple[Decode | None, str | None]:
    """A function that decodes ids one token at a time, with the tokenizer ``model`` names or else the one
    the episodes recorded (``Trajectory.tokenizer``); ``(None, why)`` when there is none to load (the page
    then shows ids)."""
    names = {e.trajectory.tokenizer for e in loaded.episodes if e.trajectory.tokenizer}
    name = model or (sorted(names)[0] if names else None)
    if name is None:
        return None, "the episodes name no tokenizer; give --model to decode their tokens"
    try:
        return _decoder(name), None
    except Exception as exc:  # an unreachable hub, a moved path: the page still works with ids
        return None, f"could not load the tokenizer {name!r} ({type(exc).__name__}); showing token ids"


def _decoder(name: str) -> Decode:
    """A local ``tokenizer.json`` is read with ``tokenizers`` alone (what a fast HF tokenizer decodes with):
    loading it through transformers' AutoTokenizer imports torch, most of a short report's time. Anything
    else goes through ``load_tokenizer``, as the runner loads it."""
    from toolgym.rollout.models import load_tokenizer, resolve_model

    local = Path(resolve_model(name)) / "tokenizer.json"
    if local.is_file():
        from tokenizers import Tokenizer

        fast = Tokenizer.from_file(str(local))
        return lambda ids: fast.decode_batch([[i] for i in ids], skip_special_tokens=False)
    tokenizer = load_tokenizer(name)
    return lambda ids: tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False)


def write_report(path: str | Path, out: str | Path, model: str | None = None) -> Loaded:
    """Read ``path`` and write the self-contained HTML report to ``out``."""
    loaded = load(path)
    decode, why = token_decoder(loaded, model)
    if why:
        loaded.notes.append(why)
    Path(out).write_text(static_page(loaded, decode), encoding="utf-8")
    return loaded


__all__ = ["Loaded", "load", "token_decoder", "write_report"]
