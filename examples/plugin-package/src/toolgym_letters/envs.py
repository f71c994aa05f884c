"""``letters/CountLetters-v0``: how many times does a letter occur in a word? Answer with the tool's help.

Models famously miscount letters ("r" in "strawberry"), so the env gives them a tool that counts. Everything a
plugin needs is here: a tool from a plain typed function, a procedural task source (one task per seed), a
verifier, an oracle (the kit and the demo prove the verifier's 1.0 path with it) and ``register_env``.
"""

from __future__ import annotations

import toolgym
from toolgym import ProceduralSource, Task, ToolCall, ToolEnv
from toolgym.rewards.numeric import NumericVerifier

WORDS = ("strawberry", "bookkeeper", "mississippi", "assessment", "committee", "banana", "llama", "toolgym")


@toolgym.tool(register=True)
def count_letter(word: str, letter: str) -> int:
    """Count how many times a letter occurs in a word, ignoring case.

    Args:
        word: The word to look in.
        letter: A single letter.
    """
    if len(letter) != 1 or not letter.isalpha():
        raise ValueError(f"letter must be a single letter, got {letter!r}")
    return word.lower().count(letter.lower())


def letter_task(seed: int, words: tuple[str, ...] = WORDS) -> Task:
    word = words[seed % len(words)]
    letter = sorted(set(word))[(seed // len(words)) % len(set(word))]
    prompt = f"How many times does the letter '{letter}' occur in the word '{word}'? Answer with a number."
    return Task(id="", prompt=prompt, answer=word.count(letter), data={"word": word, "letter": letter})


def oracle(task: Task) -> list[ToolCall | str]:
    return [ToolCall(name="count_letter", arguments=dict(task.data)), str(task.answer)]


@toolgym.register_env(
    "letters/CountLetters-v0",
    tools=["count_letter"],
    task_source="procedural: a letter of one of a few hard-to-count words",
    description="Count a letter in a word, with a counting tool; exact numeric answer.",
    oracle=oracle,
)
def make_letters_env(action_format: str = "xml", max_turns: int = 4, **env_kwargs) -> ToolEnv:
    source = ProceduralSource("letters", letter_task)
    return ToolEnv(
        source, [count_letter], NumericVerifier(), action_format, max_turns=max_turns, **env_kwargs
    )
