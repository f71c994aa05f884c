"""A recipe's ``pre_install`` steps: the ones that only edit the repository run in the build's checkout, the
system ones (``apt-get``, ``locale-gen``, downloads) never run.

SWE-bench's specs use ``pre_install`` for two different things: fixes to the repository's own files before
its install (sphinx pins its ``setup.py`` dependencies with ``sed -i``, astropy pins setuptools in
``pyproject.toml``, pytest repairs a ``setup.cfg``), and system set-up inside its Docker image. The first
kind decides whether the install works and runs here; the second needs root and the network and must never
run on the user's machine, so it is listed, with the Debian packages it would install that this machine
lacks.

What counts as editing the repository is strict (``repository_step``): a chain of simple commands joined by
``&&`` / ``||``, each one of

- ``sed`` with only ``-i[SUFFIX]``, ``-E``, ``-r``, ``-e`` options, run as ``sed --sandbox`` (GNU sed then
  refuses the ``e``, ``r`` and ``w`` commands that run programs or touch other files);
- ``grep -q`` (a read-only test, as sphinx's steps use it);
- ``echo WORDS > FILE`` or ``>> FILE``, written by this module;

every file a relative path that stays inside the checkout (no ``..``, no symbolic link out of it), and no
``$`` or backquote outside single quotes (a shell would expand them; these commands never see a shell).
Anything else is a system step. The commands run as argument lists, never through a shell.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_OPERATORS = ("&&", "||")
_SED_OPTIONS = re.compile(r"-(i\S*|E|r|n|e)$|--in-place(=\S+)?$|--regexp-extended$")


class StepFailed(RuntimeError):
    """A repository step exited non-zero (the message names the step and what the command said)."""


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    redirect: tuple[str, str] | None = None  # (">" or ">>", path) for echo


def _expands(step: str) -> bool:
    """Whether a shell would expand something in ``step``: a ``$`` or backquote outside single quotes."""
    single = double = False
    for ch in step:
        if ch == "'" and not double:
            single = not single
        elif ch == '"' and not single:
            double = not double
        elif ch in "$`" and not single:
            return True
    return False


def _inside(path: str, root: Path) -> bool:
    if not path or os.path.isabs(path) or ".." in Path(path).parts:
        return False
    real = os.path.realpath(root / path)
    base = os.path.realpath(root)
    return real == base or real.startswith(base + os.sep)


def _command(words: list[str], root: Path) -> Command | None:
    """One simple command of a repository step, or None where it is anything else."""
    if not words:
        return None
    if words[0] == "echo":
        redirect = len(words) >= 3 and words[-2] in (">", ">>") and _inside(words[-1], root)
        if redirect and not any(w.startswith("-") or w in (">", ">>") for w in words[1:-2]):
            return Command(tuple(words[:-2]), (words[-2], words[-1]))
        return None
    if any(w in (">", ">>", "<", "|", ";", "&", "(", ")") for w in words):
        return None
    if words[0] == "grep":
        options = [w for w in words[1:] if w.startswith("-")]
        rest = [w for w in words[1:] if not w.startswith("-")]
        quiet = "-q" in options and set(options) <= {"-q", "-E", "-F"} and len(rest) >= 2
        if quiet and all(_inside(p, root) for p in rest[1:]):
            return Command(tuple(words))
        return None
    if words[0] == "sed":
        args, script, files, i = words[1:], None, [], 0
        in_place = False
        while i < len(args):
            word = args[i]
            if word.startswith("-"):
                if not _SED_OPTIONS.fullmatch(word):
                    return None
                in_place |= word.startswith(("-i", "--in-place"))
                if word == "-e" and i + 1 < len(args):
                    script, i = args[i + 1], i + 2
                    continue
            elif script is None:
                script = word
            else:
                files.append(word)
            i += 1
        if in_place and script is not None and files and all(_inside(p, root) for p in files):
            return Command(("sed", "--sandbox", *words[1:]))
        return None
    return None


def repository_step(step: str, root: Path) -> list[tuple[str, Command]] | None:
    """The step as ``[(operator, command), ...]`` (the first operator ``""``) when it only edits the
    checkout at ``root`` (module docstring); None for a system step."""
    if _expands(step):
        return None
    try:
        lexer = shlex.shlex(step, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return None
    chain: list[tuple[str, Command]] = []
    op = ""
    words: list[str] = []
    for token in [*tokens, "&&"]:
        if token in _OPERATORS:
            command = _command(words, root)
            if command is None:
                return None
            chain.append((op, command))
            op, words = token, []
        else:
            words.append(token)
    return chain


def _run(command: Command, root: Path) -> tuple[int, str]:
    if command.redirect is not None:
        mode, rel = command.redirect
        with open(root / rel, "a" if mode == ">>" else "w") as fh:
            fh.write(" ".join(command.argv[1:]) + "\n")
        return 0, ""
    proc = subprocess.run(
        list(command.argv), cwd=root, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
    )  # fmt: skip
    return proc.returncode, (proc.stderr or proc.stdout).strip()


def run_repository_step(chain: Sequence[tuple[str, Command]], root: Path, step: str) -> None:
    """Run a parsed step as a shell would (``&&`` runs on success, ``||`` on failure); ``StepFailed`` when
    its last command that ran fails."""
    status, said = 0, ""
    for op, command in chain:
        if op == "" or (op == "&&" and status == 0) or (op == "||" and status != 0):
            status, said = _run(command, root)
    if status != 0:
        raise StepFailed(f"pre_install step {step!r} exited {status}: {said[-300:]}")


def apt_packages(step: str) -> list[str]:
    """The packages an ``apt-get install`` / ``apt install`` in a system step names."""
    try:
        words = shlex.split(step)
    except ValueError:
        return []
    found: list[str] = []
    for i, word in enumerate(words):
        if word in ("apt-get", "apt") and "install" in words[i + 1 : i + 3]:
            for pkg in words[words.index("install", i) + 1 :]:
                if pkg in _OPERATORS or pkg in (";", "|"):
                    break
                if not pkg.startswith("-"):
                    found.append(pkg)
    return found


def missing_packages(packages: Sequence[str]) -> list[str] | None:
    """Which of the Debian ``packages`` this machine lacks (``dpkg-query``); None where it cannot tell."""
    if not packages or shutil.which("dpkg-query") is None:
        return None if packages else []
    missing = []
    for pkg in packages:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${db:Status-Status}", pkg], capture_output=True, text=True
        )
        if proc.returncode != 0 or proc.stdout.strip() != "installed":
            missing.append(pkg)
    return missing


__all__ = ["StepFailed", "apt_packages", "missing_packages", "repository_step", "run_repository_step"]
