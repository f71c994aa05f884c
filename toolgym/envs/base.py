"""ToolEnv: the one turn loop every toolgym environment runs.

An env is data, not code: a TaskSource, some Tools, a Verifier and an action format (parser). Registered envs
are small factories that wire those four together; none of them re-implements ``step``.

One instance runs one episode at a time. ``reset(seed, options)`` picks a task with the env's own RNG
(``options={"task_id": ...}`` or ``{"task": Task}`` pins one, so a GRPO group sees the same task); each
``step(text)`` parses the model's turn, runs tool calls (the output becomes the observation) or verifies a
final answer (the verdict becomes the reward and ends the episode). ``max_turns`` steps without an answer
truncate the episode with reward 0.

A step costs the same at turn 500 as at turn 1: nothing in it reads the whole chat. ``info["messages"]`` is
a :class:`~toolgym.core.messages.MessagesView`, a read-only snapshot of the chat at that step (the
trajectory's append-only message list and its length then), not a copy of it (``tests/core/test_env.py``
checks the per-step cost of a 500-turn episode).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.error import ResetNeeded

from toolgym.core.messages import MessagesView
from toolgym.core.spaces import AnyText
from toolgym.core.task import Task, TaskSource
from toolgym.core.types import ParsedAction, ToolCall, ToolResult, Trajectory, Turn, Verdict
from toolgym.parsers.base import ActionParser, to_json
from toolgym.rewards.base import Verifier, safe_verify
from toolgym.tools.base import Tool
from toolgym.util.text import clip_middle

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant that solves tasks by using tools when they help."
_OPTION_KEYS = frozenset({"task", "task_id"})
_episode_counter = itertools.count()


class ToolEnv(gym.Env[str, str]):
    """A text environment where an LLM solves a task with tools, scored by a verifier.

    Args:
        tasks: where tasks come from.
        tools: the tools the model may call; the first is the primary tool (``<tool>`` routes to it).
        verifier: judges the final answer.
        action_format: a registered parser name (``xml``, ``hermes``, ``json``, ``react``, ``markdown``) or an
            ActionParser instance bound to these tools.
        max_turns: model turns before the episode is truncated.
        system_prompt: the env's own preamble; the parser's format instructions are appended to it.
        max_action_chars: longer actions are invalid (and the action space's bound).
        max_observation_chars: tool output beyond this is cut in the middle (head and tail kept).
        parser_options: extra keyword arguments for the parser (e.g. ``result_tag`` for ``xml``).
        tool_server: run the tools on a ``toolgym serve tools`` server (its URL, or a ``ToolServerClient``)
            instead of in this process; observations are the same (``toolgym.tools.remote``).
        extra_tools: tools added after the env's own, e.g. an MCP server's
            (``gym.make(ID, extra_tools=toolgym.tools.mcp_tools(URL))``); names must not clash.
    """

    # declared as gymnasium.Env declares it, not ClassVar (mypy rejects a ClassVar over its instance variable)
    metadata: dict[str, Any] = {"render_modes": ["ansi"]}  # noqa: RUF012

    def __init__(
        self,
        tasks: TaskSource,
        tools: Sequence[Tool],
        verifier: Verifier,
        action_format: str | ActionParser = "xml",
        *,
        max_turns: int = 4,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        max_action_chars: int = 100_000,
        max_observation_chars: int = 8_000,
        parser_options: dict[str, Any] | None = None,
        render_mode: str | None = None,
        tool_server: Any = None,
        extra_tools: Sequence[Tool] = (),
    ):
        max_turns = _positive_int("max_turns", max_turns)
        max_action_chars = _positive_int("max_action_chars", max_action_chars)
        max_observation_chars = _positive_int("max_observation_chars", max_observation_chars)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}"
            )
        if tool_server is not None:
            from toolgym.tools.remote import remote_tools

            tools = remote_tools(tools, tool_server)
        tools = [*tools, *extra_tools]
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique, got {names}")
        self.tasks = tasks
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.verifier = verifier
        self.parser = _make_parser(action_format, tools, max_action_chars, parser_options or {})
        self.max_turns = int(max_turns)
        self.max_observation_chars = int(max_observation_chars)
        instructions = _instructions(
            self.parser, action_format, tools, max_action_chars, parser_options or {}
        )
        #: the env's own system prompt, without the format's instructions: for trainers whose chat template
        #: renders the tools and their call format itself (TRL's environment_factory)
        self.preamble = system_prompt.strip()
        self.system_prompt = "\n\n".join(p for p in (self.preamble, instructions) if p)
        self.render_mode = render_mode
        self.action_space: AnyText = AnyText(max_action_chars)
        self.observation_space: AnyText = AnyText(1_000_000)
        self.tool_schemas: list[dict[str, Any]] = [t.schema() for t in tools]

        self.task: Task | None = None
        self.trajectory: Trajectory | None = None
        self._episode_id: str | None = None
        self._done = False
        #: the last action ``step_is_inline`` parsed, and its parse: the step that follows reuses it
        self._parsed_ahead: tuple[str, ParsedAction] | None = None

    # -- gymnasium API -------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self._end_episode()
        self.task = self._pick_task(options or {})
        self._episode_id = f"{self.task.id}#{next(_episode_counter)}"
        self._parsed_ahead = None
        for tool in self.tools.values():
            tool.bind_task(self.task)
            tool.start_episode(self._episode_id)
        messages = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": self.task.prompt},
        ]
        env_id = self.spec.id if self.spec is not None else ""
        self.trajectory = Trajectory(task_id=self.task.id, env_id=env_id, messages=messages)
        self._done = False
        return self.task.prompt, self._info()

    def step_is_inline(self, action: str) -> bool:
        """Whether ``step(action)`` is cheap and never waits: its calls all go to ``inline`` tools (or it is
        an invalid turn) and it neither answers nor ends the episode (no verifier, no session teardown). An
        async server may then run it on its event loop rather than a thread (``toolgym serve openenv``).
        The parse is kept for a ``step`` of the same text that follows, so the action is parsed once."""
        traj = self.trajectory
        if not isinstance(action, str) or traj is None or self._done or len(traj.turns) + 1 >= self.max_turns:
            return False
        parsed = self.parser.parse(action)
        self._parsed_ahead = (action, parsed)
        if parsed.kind == "invalid":
            return True
        return parsed.kind == "tool_calls" and all(
            getattr(self.tools.get(call.name), "inline", False) for call in parsed.tool_calls
        )

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if not isinstance(action, str):
            raise TypeError(self._action_type_message(action))
        if self.task is None or self.trajectory is None:
            raise ResetNeeded("call reset() before step()")
        if self._done:
            raise ResetNeeded("the episode is over; call reset() to start another")
        traj = self.trajectory
        ahead, self._parsed_ahead = self._parsed_ahead, None
        parsed = ahead[1] if ahead is not None and ahead[0] == action else self.parser.parse(action)
        traj.messages.append({"role": "assistant", "content": action})

        results: tuple[ToolResult, ...] = ()
        verdict: Verdict | None = None
        reward, terminated = 0.0, False
        if parsed.kind == "answer":
            verdict = safe_verify(self.verifier, self.task, parsed.answer or "", traj)
            reward, terminated, observation = float(verdict.reward), True, ""
        elif parsed.kind == "tool_calls":
            results = tuple(self._run_tool(call) for call in parsed.tool_calls)
            observation = clip_middle(self.parser.render(results), self.max_observation_chars)
            self._append_observation(results, observation)
        else:
            observation = self.parser.render_invalid(parsed.reason or "unrecognised action")
            self._append_observation((), observation)

        traj.turns.append(
            Turn(action=action, parsed=parsed, tool_results=results, observation=observation, reward=reward)
        )
        truncated = not terminated and len(traj.turns) >= self.max_turns
        if truncated:
            verdict = Verdict(
                reward=0.0, passed=False, details={"reason": f"no final answer within {self.max_turns} turns"}
            )
        if terminated or truncated:
            self._done = True
            traj.stop_reason = "answer" if terminated else "max_turns"
            traj.verdict, traj.reward = verdict, reward
            self._end_episode()
        # the same keys at every step (trainers concatenate infos): ``verdict`` is None until the last step
        info = self._info(action=parsed, tool_results=list(results), verdict=verdict)
        return observation, reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.trajectory is None:
            return None
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.trajectory.messages)

    def close(self) -> None:
        self._end_episode()
        for tool in self.tools.values():
            tool.close()
        super().close()

    # -- internals -----------------------------------------------------------------------------------------

    def _pick_task(self, options: dict[str, Any]) -> Task:
        unknown = set(options) - _OPTION_KEYS
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; known: {sorted(_OPTION_KEYS)}")
        if "task" in options and "task_id" in options:
            raise ValueError("pass either options['task'] or options['task_id'], not both")
        if "task" in options:
            task = options["task"]
            return task if isinstance(task, Task) else Task.model_validate(task)
        if "task_id" in options:
            return self.tasks.get(options["task_id"])
        return self.tasks.sample(self.np_random)

    def _run_tool(self, call: ToolCall) -> ToolResult:
        tool = self.tools.get(call.name)
        if tool is None:  # parsers reject unknown names; this guards custom parsers
            known = ", ".join(self.tools)
            return ToolResult(
                name=call.name, status="error", output=f"unknown tool {call.name!r}; tools: {known}"
            )
        return tool(call)

    def _append_observation(self, results: Sequence[ToolResult], observation: str) -> None:
        """Record the observation as chat messages: one ``tool`` message per result where the format uses the
        tool role (chat templates wrap each in their own markers), otherwise one ``user`` message."""
        assert self.trajectory is not None
        messages = self.trajectory.messages
        if self.parser.observation_role == "tool" and results:
            for r in results:
                content = clip_middle(self.parser.render([r]), self.max_observation_chars)
                message = {"role": "tool", "name": r.name, "content": content}
                if r.call_id:
                    message["tool_call_id"] = r.call_id
                messages.append(message)
        else:
            messages.append({"role": "user", "content": observation})

    def _info(self, **extra: Any) -> dict[str, Any]:
        """The info ``reset`` and ``step`` return. ``messages`` is the chat so far as a ``MessagesView``: a
        read-only sequence of plain dicts (indexing, slices and iteration hand out copies; ``==`` a list of
        the same messages; ``list(info["messages"])`` is a list) that stays this step's snapshot after later
        steps, because the env only ever appends to ``trajectory.messages``. It costs O(1) to make, where a
        copy of the chat made every step of a long episode cost O(turns), and the episode O(turns²)."""
        assert self.task is not None and self.trajectory is not None
        info: dict[str, Any] = {
            "task_id": self.task.id,
            "turn": len(self.trajectory.turns),
            "messages": MessagesView(self.trajectory.messages),
            "tools": self.tool_schemas,
        }
        info.update(extra)
        return info

    def _action_type_message(self, action: Any) -> str:
        name = self.spec.id if self.spec is not None else type(self).__name__
        hint = (
            "decode it first (action.decode('utf-8'))"
            if isinstance(action, bytes | bytearray)
            else "decode generated token ids with the tokenizer first, or let toolgym.rollout.run_episode "
            "drive the env"
        )
        return (
            f"{name}: step() takes one action, the model's turn as text (a str), "
            f"got {type(action).__name__}; {hint}"
        )

    def _end_episode(self) -> None:
        if self._episode_id is not None:
            for tool in self.tools.values():
                tool.end_episode(self._episode_id)
            self._episode_id = None


def _positive_int(name: str, value: Any) -> int:
    """``value`` as an int >= 1, or an error naming the argument (a str from a config is a common slip)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int >= 1, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__} {value!r}") from None
    if number < 1:
        raise ValueError(f"{name} must be >= 1, got {number}")
    return number


_INSTRUCTIONS: dict[tuple, str] = {}
_INSTRUCTIONS_LIMIT = 256


def _instructions(
    parser: ActionParser,
    action_format: str | ActionParser,
    tools: Sequence[Tool],
    max_action_chars: int,
    options: dict[str, Any],
) -> str:
    """The parser's instructions, built once per (format, options, tools as the model sees them): a trainer
    makes an env per concurrent episode, and writing the instructions (an example call parsed back to check
    it) is most of what making one costs. A parser passed as an object is asked every time."""
    if isinstance(action_format, ActionParser):
        return parser.instructions()
    try:
        key = (
            action_format,
            max_action_chars,
            tuple(sorted((k, repr(v)) for k, v in options.items())),
            tuple((t.name, t.description, t.primary_arg, to_json(t.parameters_view())) for t in tools),
        )
    except (TypeError, ValueError):  # a schema that is not JSON: no key, no cache
        return parser.instructions()
    text = _INSTRUCTIONS.get(key)
    if text is None:
        text = parser.instructions()
        if len(_INSTRUCTIONS) >= _INSTRUCTIONS_LIMIT:
            _INSTRUCTIONS.clear()
        _INSTRUCTIONS[key] = text
    return text


def _make_parser(
    action_format: str | ActionParser, tools: Sequence[Tool], max_action_chars: int, options: dict[str, Any]
) -> ActionParser:
    if isinstance(action_format, ActionParser):
        if options:
            raise ValueError("parser_options only apply when action_format is a format name")
        return action_format
    from toolgym.parsers import make_parser

    return make_parser(action_format, tools, max_action_chars=max_action_chars, **options)


__all__ = ["ToolEnv"]
