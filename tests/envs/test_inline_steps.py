"""Which env steps an async server may run on its event loop (``ToolEnv.step_is_inline``, used by
``toolgym serve openenv``), and which tools say they may (``Tool.inline``)."""

from __future__ import annotations

import asyncio
import threading

import gymnasium as gym

import toolgym  # noqa: F401 - registers the envs
from toolgym.tools.calculator import Calculator
from toolgym.tools.python import PythonTool

ANSWER = "<answer>42</answer>"


def test_which_steps_may_run_on_an_event_loop():
    """``ToolEnv.step_is_inline``: only turns whose calls all go to ``inline`` tools (or invalid turns) that
    neither answer nor end the episode; a sandboxed tool, an answer or the last turn never."""
    env = gym.make("toolgym/Calculator-v0", max_turns=3).unwrapped
    assert not env.step_is_inline("<calculator>1+1</calculator>")  # before reset
    env.reset(seed=0)
    assert env.step_is_inline("<calculator>1+1</calculator>") and env.step_is_inline("no tags at all")
    assert not env.step_is_inline(ANSWER)  # the verifier runs
    env.step("<calculator>1+1</calculator>")
    assert env.step_is_inline("<calculator>2+2</calculator>")
    env.step("<calculator>2+2</calculator>")
    assert not env.step_is_inline("<calculator>3+3</calculator>")  # the last turn ends the episode
    python = gym.make("toolgym/PythonCode-v0").unwrapped
    python.reset(seed=0)
    assert not python.step_is_inline("<python>print(1)</python>")  # the sandbox waits


def test_an_inline_tool_runs_on_the_callers_thread_and_others_do_not():
    def thread_of_run(tool, arguments):
        seen = []
        run = tool.run

        def spy(args):
            seen.append(threading.get_ident())
            return run(args)

        tool.run = spy
        asyncio.run(tool.acall(arguments))
        return seen[0]

    assert Calculator.inline and not PythonTool.inline
    assert thread_of_run(Calculator(), {"expression": "2+2"}) == threading.get_ident()


def test_the_step_after_step_is_inline_reuses_its_parse_of_the_same_text_only():
    """A server asks ``step_is_inline(text)`` and then steps ``text``: the action is parsed once. A step of
    other text (or one after a reset) parses its own."""
    env = gym.make("toolgym/Calculator-v0", max_turns=5).unwrapped
    parses = []
    parse = env.parser.parse

    def spy(text):
        parses.append(text)
        return parse(text)

    env.parser.parse = spy
    env.reset(seed=0)
    assert env.step_is_inline("<calculator>6*7</calculator>")
    assert env.step("<calculator>6*7</calculator>")[0] == "<output>\n42\n</output>"
    assert parses == ["<calculator>6*7</calculator>"]
    assert env.step_is_inline("no tags at all")
    assert env.step("<calculator>2+3</calculator>")[0] == "<output>\n5\n</output>"  # not the asked text's
    assert parses[1:] == ["no tags at all", "<calculator>2+3</calculator>"]
    assert env.step_is_inline("<calculator>1+1</calculator>")
    env.reset(seed=1)
    assert env.step("<answer>2</answer>")[2]  # its own parse: an answer ends the episode
    assert parses[3:] == ["<calculator>1+1</calculator>", "<answer>2</answer>"]
