"""A user's agent program as a trainer's samples: per row, ``async def agent(task, base_url, api_key)`` plays
the row's task against a gateway (``toolgym.gateway``) in front of the trainer's own engine, and the trainer
trains on the tokens the gateway recorded, with the env verifier's reward.

verl's gateway agent loop and TRL's rollout function with ``agent=`` both play a sample with
:func:`play_sample`; the rules they share are here once.

- **The trainer's rules on every model call** (:class:`SampleClient`). The trainer's sampling settings
  (temperature, top-p, top-k, ...) replace whatever the agent asked for: the trainer computes the sampled
  tokens' log-probabilities under its own settings, so tokens drawn under others would train off-policy. Each
  turn is capped at ``max_tokens_per_turn`` and at what is left of the sample's response budget; a call that
  would start with no budget left, or a new segment whose prompt is over ``max_prompt_tokens``, is refused
  (HTTP 400 to the agent), so the agent's sample fails and is not trained on. The budgets are hard ones:
  verl pads a sample to its ``prompt_length``/``response_length`` and never truncates, so one over-long sample
  would break the whole batch.
- **What is trained: the session's last segment.** An agent that rewrites its history (truncates, summarises,
  edits a turn) starts a new segment in the gateway (``rollout/token_record.py``); the verdict is on the last
  one, which holds the final answer, and the budgets above hold per segment. verl and TRL take one sequence
  per sample, so the earlier segments are dropped, never re-tokenized into the last: each adapter reports
  ``segments`` per sample and how many were dropped.
- **One gateway, many samples** (:class:`SessionClients`): verl keeps one gateway per event loop for all of
  its samples, so the gateway's engine routes each session's calls to the :class:`SampleClient` of the sample
  playing it (with that sample's sampling settings, its verl priority and the trainer steps its weights had).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgym.core.types import Trajectory
from toolgym.rollout.clients.base import Generation, LLMClient, Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.episode import RolloutConfig

if TYPE_CHECKING:
    from toolgym.gateway import AgentEpisode, Gateway, GatewayConfig
    from toolgym.gateway.agents import AgentFn
    from toolgym.rollout.chat import ChatRenderer
    from toolgym.rollout.host import EpisodeHost
    from toolgym.rollout.keys import EpisodeKey


class SampleClient:
    """The engine as one sample's gateway session calls it: the trainer's sampling and budgets on every call
    (see the module docstring). A call extends the current segment when its ids start with the segment's
    ids so far (the gateway keeps them as the prefix); any other call starts a new segment."""

    def __init__(self, client: LLMClient, config: RolloutConfig):
        self.client, self.config = client, config
        self._ids: list[int] | None = None  # the current segment's ids: its prompt, then its response
        self._prompt_len = 0

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        from toolgym.gateway import GatewayError

        config, ids = self.config, list(prompt_ids)
        if self._ids is None or ids[: len(self._ids)] != self._ids:  # a new segment: these ids are its prompt
            cap = config.max_prompt_tokens
            if cap is not None and len(ids) > cap:
                raise GatewayError(
                    400,
                    f"the prompt has {len(ids)} tokens, more than the trainer's max_prompt_tokens={cap} "
                    "(verl: max_prompt_length): this sample fails",
                )
            self._prompt_len = len(ids)
        room = config.max_response_tokens - (len(ids) - self._prompt_len)
        if room < 1:
            raise GatewayError(
                400,
                f"the sample's response budget is spent: {len(ids) - self._prompt_len} tokens after its "
                f"prompt, the trainer's max_response_tokens={config.max_response_tokens} (verl: "
                "max_response_length); this sample fails",
            )
        own = config.sampling
        turn = own.model_copy(
            update={
                "max_tokens": min(sampling.max_tokens, config.max_tokens_per_turn, room),
                "stop": tuple(dict.fromkeys((*own.stop, *sampling.stop))),
                "seed": sampling.seed if sampling.seed is not None else own.seed,
            }
        )
        generation = await self.client.generate(ids, turn, request_id)
        self._ids = ids + list(generation.token_ids)
        return generation

    async def close(self) -> None:
        """The trainer owns the engine."""


class SessionClients:
    """The engine of a gateway that many samples share: each session's calls go to the client bound to it
    (:meth:`bound`, while that sample's agent runs)."""

    def __init__(self) -> None:
        self._clients: dict[str, LLMClient] = {}

    @contextlib.contextmanager
    def bound(self, session_id: str, client: LLMClient) -> Iterator[None]:
        self._clients[session_id] = client
        try:
            yield
        finally:
            self._clients.pop(session_id, None)

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        client = self._clients.get(request_id)
        if client is None:
            raise ClientError(f"the session {request_id!r} plays no trainer sample (its agent has returned)")
        return await client.generate(prompt_ids, sampling, request_id)

    async def close(self) -> None:
        """The trainer owns the engines."""


async def play_sample(
    gateway: Gateway, agent: AgentFn, key: EpisodeKey, client: LLMClient, config: RolloutConfig
) -> AgentEpisode:
    """Play ``agent`` on ``key``'s task against ``gateway`` (whose engine is :class:`SessionClients`), its
    model calls generated by ``client`` under the trainer's ``config``: the episode whose ``trajectory``
    (the last segment, with the verdict; ``error`` set when the agent failed) the trainer trains on."""
    from toolgym.gateway import play_agent

    engines = gateway.core.client
    if not isinstance(engines, SessionClients):
        raise TypeError("the gateway's engine must be SessionClients (make it with trainer_gateway)")
    sample = SampleClient(client, config)

    async def agent_of_sample(task: Any, base_url: str, api_key: str) -> str | None:
        with engines.bound(task.session_id, sample):
            return await agent(task, base_url, api_key)

    episode = await play_agent(gateway, agent_of_sample, key)
    episode.trajectory = _within_budget(episode.trajectory, config)
    return episode


def _within_budget(traj: Trajectory, config: RolloutConfig) -> Trajectory:
    """The trajectory, or, if it is somehow past the budgets (``SampleClient`` keeps every segment within
    them), a failed one cut to them: a batch must keep its shape."""
    cap, budget = config.max_prompt_tokens, config.max_response_tokens
    if (cap is None or len(traj.prompt_ids) <= cap) and len(traj.response_ids) <= budget:
        return traj
    return traj.model_copy(
        update={
            "error": f"the segment is past the trainer's budgets (prompt {len(traj.prompt_ids)}, response "
            f"{len(traj.response_ids)} tokens)",
            "stop_reason": "error",
            "response_ids": traj.response_ids[:budget],
            "response_mask": traj.response_mask[:budget],
            "logprobs": None if traj.logprobs is None else traj.logprobs[:budget],
        }
    )


async def trainer_gateway(
    name: str, config: GatewayConfig, *, renderer: ChatRenderer, host: EpisodeHost
) -> Gateway:
    """The running loop's gateway ``name`` over :class:`SessionClients` for these settings, started by the
    first sample that asks (``toolgym.gateway.gateway_for_loop``) and shared by every sample on the loop that
    asks with the same settings (one process may build loops with others: a test, a validation config)."""
    from toolgym.gateway import gateway_for_loop

    name = f"{name}:{id(host):x}:{id(renderer):x}:{config.model_dump_json()}"
    return await gateway_for_loop(name, config, client=SessionClients(), renderer=renderer, host=host)


def load_agent_program(spec: str | AgentFn) -> AgentFn:
    """The agent function ``spec`` names, checked (``toolgym.gateway.load_agent``): ``module:function``
    (importable), or ``path/to/file.py:function`` (imported from the file, so a training config can name an
    agent that is not installed). Every problem is a ``ValueError`` that says what to fix."""
    from toolgym.gateway import load_agent

    try:
        if isinstance(spec, str) and spec.rpartition(":")[0].endswith(".py"):
            path, _, name = spec.rpartition(":")
            fn = getattr(_module_of_file(Path(path)), name, None)
            if fn is None:
                raise ValueError(f"{path} has no {name!r}")
            return load_agent(fn)
        return load_agent(spec)
    except Exception as exc:  # a user's module can fail to import in any way: say which agent and why
        raise ValueError(f"the agent {spec!r} cannot be used: {type(exc).__name__}: {exc}") from None


@functools.cache
def agent_program(spec: str) -> AgentFn:
    """:func:`load_agent_program`, once per ``spec`` in a process (a trainer's loop asks per sample: a mix of
    envs names an agent per row). A spec that fails is not remembered: it fails again, with its reason."""
    return load_agent_program(spec)


def agent_spec(spec: str, base: str | Path | None = None) -> str:
    """``spec`` as every process of a run can load it: a file's path made absolute, a relative one read from
    ``base`` (a config file's folder; default: the working directory), since the trainer's workers do not
    share the launcher's working directory."""
    module, _, name = spec.rpartition(":")
    if module.endswith(".py"):
        path = Path(module).expanduser()
        return f"{(Path(base or '.') / path).resolve()}:{name}"
    return spec


def _module_of_file(path: Path) -> Any:
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"no agent file at {path}")
    name = f"toolgym_agent_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


__all__ = [
    "SampleClient",
    "SessionClients",
    "agent_program",
    "agent_spec",
    "load_agent_program",
    "play_sample",
    "trainer_gateway",
]
