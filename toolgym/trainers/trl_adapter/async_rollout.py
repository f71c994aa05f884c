"""toolgym's rollout loop for TRL's ``AsyncGRPOTrainer`` (``trl.experimental.async_grpo``, TRL 1.16).

TRL's async trainer generates in a spawned child process, ``_AsyncRolloutLoop``, whose ``_generate_one``
plays one conversation against the vLLM server and whose ``_score_group`` scores a GRPO group. TRL leaves
both to subclasses (``AsyncRolloutWorker._loop_cls``; ``_provides_rollout_reward`` marks a loop that scores
its own rollouts). :class:`ToolgymRolloutLoop` is such a subclass, in one of two modes:

- **tools** (``environment_factory=``): TRL's own tool-call loop plays the conversation, unchanged: it resets
  the pooled environment on the row, folds the reset's text into the last prompt message (TRL 1.16 does; the
  bug of TRL issue #6067 dropped it) and calls the env's tools as the model asks. This loop then judges the
  final assistant message with the env's verifier, while the env still holds its episode, and returns the
  verdict's reward as the rollout's reward. TRL's worker never passes ``environments=`` to reward functions
  (TRL issue #6027), so ``environment_reward`` cannot be used there: the verifier's reward comes from here,
  as the ``rewards/toolgym`` column.
- **episodes** (``env=``): toolgym's episode runner plays the env's own episode (its action format, its
  invalid-action feedback, its turn and token budgets) against the same server, through toolgym's
  ``/v1/completions`` client: the tokens as sampled, the observation tokens with mask 0, the verifier's
  reward. This is what ``make_rollout_func`` does for the synchronous ``GRPOTrainer``, and what ``toolgym
  train --trainer trl`` runs with ``mode: async``. The rows are ``prompt_dataset`` rows (each prompt carries
  its episode key). An env whose verifier judges groups (``verify_group``) has its judge deferred while a
  sample plays, and the group's samples are judged together in ``_score_group``, where TRL hands the loop
  the finished group.

Either way a sample whose verifier failed, or (episodes) whose episode failed, has reward ``None``: TRL gives
it advantage 0, and it is counted (``toolgym/untrainable``), never trained as a 0. Each trained sample carries
``toolgym/passed``, ``toolgym/turns`` and ``toolgym/tool_calls`` in its metrics, which the trainer averages
over the samples it trains on, as it does ``reward``.

This module is what the spawned child imports (the loop class is pickled by reference): it imports TRL's
rollout worker and toolgym's runner, not the trainer.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from trl.experimental.async_grpo import async_rollout_worker as _trl_worker
from trl.experimental.async_grpo.async_rollout_worker import (
    RolloutGroup,
    RolloutSample,
    TrainingSequence,
    _AsyncRolloutLoop,
)

from toolgym.core.task import Task
from toolgym.core.types import Trajectory
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient
from toolgym.rollout.dump import DumpSettings, EpisodeDump
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.group_judge import GroupVerifier, judge_group, play_for_group
from toolgym.rollout.host import DEFAULT_MAX_CONCURRENT_EPISODES, EpisodeHost
from toolgym.rollout.keys import EnvFactory, EnvSource, check_env_ids, env_requests
from toolgym.rollout.samples import TrainerSample, filler_token_id, sampling_from, trainer_sample
from toolgym.trainers.trl_adapter.data import key_of_prompt
from toolgym.trainers.trl_adapter.environment import ToolgymEnvironment, final_answer_text

#: the reward column of the verifier's reward (``rewards/toolgym`` in TRL's logs)
REWARD_NAME = "toolgym"
#: a sample's policy version, in its metrics: the trainer reads it (and removes it) to measure staleness when
#: it trains on the sample (``ToolgymAsyncGRPOTrainer``)
VERSION_KEY = "toolgym/policy_version"
#: the reconciler's drift tally of a conversation played as one row (TRL's ``_push_rollout_metrics`` reads it)
_NO_DRIFT = {
    "clean": 0.0,
    "realign": 0.0,
    "fork": 0.0,
    "transitions": 0.0,
    "drift_tokens": 0.0,
    "drift_max": 0.0,
}


@dataclass(frozen=True)
class EpisodeSettings:
    """What the loop needs beyond TRL's own settings (it travels to the spawned child, so it pickles).

    ``env`` (episodes mode): the envs the rows name, as for ``make_rollout_func`` (an id, ``EnvRequest``s, or
    a module-level factory function); ``None`` in tools mode. The budgets are the runner's: a turn never
    exceeds ``max_tokens_per_turn``, an episode's tokens after the prompt never exceed TRL's
    ``max_completion_length``, a prompt over ``max_prompt_tokens`` fails its episode.
    """

    env: EnvSource | None = None
    max_tokens_per_turn: int | None = None
    max_prompt_tokens: int | None = None
    max_concurrent_episodes: int = DEFAULT_MAX_CONCURRENT_EPISODES
    exclude_infra_errors: bool = True
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    #: episodes mode: write a sample of the episodes every ``dump.every`` weight versions (what
    #: ``toolgym view`` reads; the step of a dumped episode is the version of the weights that played it)
    dump: DumpSettings | None = None


@dataclass
class _AwaitingGroup:
    """An episode of a group-judged env, played with its judge deferred: judged with its group's others when
    TRL hands the loop the whole group (``_score_group``)."""

    traj: Trajectory
    judge: GroupVerifier
    task: Task | None
    rollout_id: str
    config: RolloutConfig


class ToolgymRolloutLoop(_AsyncRolloutLoop):
    """TRL's async rollout loop, scoring toolgym envs with their verifiers (see the module docstring).

    Subclass hook: :meth:`completion_mask` (episodes mode) returns the loss mask of an episode's response
    tokens; the learning benchmark's control inverts it.
    """

    _provides_rollout_reward = True

    def __init__(self, *, toolgym: EpisodeSettings | None = None, **kwargs: Any):
        self.settings = toolgym or EpisodeSettings()
        with _keep_tokenizer(self.settings.env is not None):
            super().__init__(**kwargs)
        self.reward_func_names.append(REWARD_NAME)  # the column of the rollout reward this loop returns
        self.episodes = self.settings.env is not None
        if self.episodes and self.environment_factories is not None:
            raise ValueError(
                "give the async trainer env= (toolgym's episodes) or environment_factory=, not both"
            )
        if not self.episodes:
            if self.environment_factories is None:
                raise ValueError(
                    "toolgym's async rollout loop needs env= (toolgym's episode runner) or "
                    "environment_factory= (TRL's tool-call loop on toolgym envs)"
                )
            for name, pool in self._environment_pool.items():
                _check_environment(name, pool[0], self._env_tools[name])
        if self.episodes and self.lora_name is not None:
            raise ValueError(
                "toolgym's episodes do not follow TRL's adapter-only (LoRA) sync; merge the adapter"
            )
        #: per conversation played (by the id of its completion list): the toolgym metrics of its samples
        self._infos: dict[int, dict[str, float]] = {}
        #: per conversation of a group-judged env (by the id of its completion list): awaiting its group
        self._awaiting: dict[int, _AwaitingGroup] = {}
        self._dump = EpisodeDump(self.settings.dump, trainer="trl") if self.settings.dump else None
        self._host: EpisodeHost | None = None
        self._client: LLMClient | None = None
        self._renderer: ChatRenderer | None = None
        #: episodes failed in a row (episodes mode): past ``max_failed_in_a_row`` the loop stops
        self._failed_in_a_row = 0
        self.max_failed_in_a_row = max(self.max_inflight_tasks, 2 * self.num_generations)

    def run(self) -> None:
        # TRL's AsyncRolloutWorker.stop() gives the child 15 s to exit, then terminates it; a child that holds
        # samples the trainer never read blocks that long at exit, in multiprocessing's join of the queue's
        # feeder thread. The trainer has stopped reading by then: those samples are dropped without the wait.
        self.rollout_buffer.cancel_join_thread()
        self._metrics_queue.cancel_join_thread()
        super().run()

    # -- one conversation ----------------------------------------------------------------------------------

    async def _generate_one(
        self,
        prompt: list[dict[str, Any]],
        tool_dict: dict[str, Callable],
        tools: list[Callable],
        group_id: int = 0,
    ) -> tuple[list[dict[str, Any]], list[int], list[TrainingSequence], int, int, float | None]:
        if self.episodes:
            return await self._play_episode(prompt)
        completion, completion_ids, sequences, calls, failures, _ = await super()._generate_one(
            prompt, tool_dict, tools, group_id
        )
        environment = _environment_of(tool_dict)
        # judged now, while the env holds this episode (TRL returns it to the pool, for another reset, after)
        verdict = await asyncio.get_running_loop().run_in_executor(
            self._tool_pool, environment._judge, final_answer_text(completion)
        )
        reward = None if verdict.error else float(verdict.reward)
        turns = sum(1 for m in completion if m.get("role") == "assistant")
        self._record(completion, passed=verdict.passed, turns=turns, tool_calls=calls, reward=reward)
        return completion, completion_ids, sequences, calls, failures, reward

    async def _play_episode(
        self, prompt: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[int], list[TrainingSequence], int, int, float | None]:
        """toolgym's runner on the episode the prompt's key pins, as one training row."""
        started = time.monotonic()
        key = key_of_prompt(prompt)
        host, client, renderer, config = self._episode_setup()
        rollout_id = uuid.uuid4().hex
        traj, judge, task = await play_for_group(
            host,
            key,
            client,
            renderer,
            config,
            group=True,  # a group-judged env's episodes are judged with their group's, in _score_group
            request_id=f"trl-async-{rollout_id}",
            sampling_seed=random.getrandbits(31),
        )
        self._check_failures(traj)
        sample, sequences = self._training(traj, rollout_id, config)
        completion = _completion_messages(traj, renderer, sample.response_ids)
        self._push_rollout_metrics(
            turns=traj.num_turns,
            sequences=len(sequences),
            completion_ids=sample.response_ids,
            tally=dict(_NO_DRIFT),
            loop_exhausted=False,
            duration_s=time.monotonic() - started,
        )
        passed = traj.verdict is not None and traj.verdict.passed
        awaiting = judge is not None and traj.error is None
        if awaiting:
            assert judge is not None
            self._awaiting[id(completion)] = _AwaitingGroup(traj, judge, task, rollout_id, config)
        else:
            self._offer(traj, trained=bool(sequences))
        self._record(
            completion,
            passed=passed,
            turns=traj.num_turns,
            tool_calls=traj.tool_calls,
            reward=sample.reward,
            count=not awaiting,
        )
        return completion, sample.response_ids, sequences, traj.tool_calls, traj.tool_errors, sample.reward

    def _training(
        self, traj: Trajectory, rollout_id: str, config: RolloutConfig
    ) -> tuple[TrainerSample, list[TrainingSequence]]:
        """The episode as a trainer sample, and the sequence TRL trains on (none when nothing is trainable:
        a failed episode, or one whose verdict awaits its group)."""
        assert self._renderer is not None
        sample = trainer_sample(
            traj,
            filler_id=filler_token_id(self._renderer.tokenizer),
            exclude_infra_errors=self.settings.exclude_infra_errors,
            max_prompt_tokens=config.max_prompt_tokens,
        )
        mask = self.completion_mask(sample, traj)
        if not any(mask):
            return sample, []
        if sample.logprobs is None:
            raise RuntimeError("the vLLM server returned no logprobs; TRL's loss needs the sampled ones")
        n = len(sample.prompt_ids)
        sequence = TrainingSequence(
            input_ids=sample.prompt_ids + sample.response_ids,
            completion_mask=[0] * n + mask,
            old_log_probs=[0.0] * n + sample.logprobs,
            rollout_id=rollout_id,
        )
        return sample, [sequence]

    async def _judge_awaiting(self, group: RolloutGroup) -> None:
        """Judge the group's episodes that await their group's judge in one ``verify_group`` call (the
        group's rows are one task), and put each verdict in place: its reward in the group's rollout
        rewards, its training sequence (built now: an episode awaiting its verdict is untrainable until
        then), its ``toolgym/passed``, and its count in ``toolgym/untrainable``."""
        waiting = [
            (i, self._awaiting.pop(id(completion)))
            for i, completion in enumerate(group.completions)
            if id(completion) in self._awaiting
        ]
        if not waiting:
            return
        first = waiting[0][1]
        task = first.task if first.task is not None else Task(id=first.traj.task_id, prompt="")
        judged = await asyncio.to_thread(judge_group, first.judge, task, [w.traj for _, w in waiting])
        for (i, awaiting), traj in zip(waiting, judged, strict=True):
            sample, sequences = self._training(traj, awaiting.rollout_id, awaiting.config)
            group.completions_sequences[i] = sequences
            group.rollout_rewards[i] = sample.reward
            info = self._infos.setdefault(id(group.completions[i]), {})
            info["toolgym/passed"] = float(traj.verdict is not None and traj.verdict.passed)
            self._count(sample.reward)
            self._offer(traj, trained=bool(sequences))

    def _offer(self, traj: Trajectory, *, trained: bool) -> None:
        """Offer an episode, with its final verdict, to the dump (the weights version is its step)."""
        if self._dump is not None:
            self._dump.offer(self.model_version, traj, trained=trained)

    def _check_failures(self, traj: Trajectory) -> None:
        """A failed episode is trained on as untrainable (reward ``None``, nothing queued); when every episode
        fails (the server is down, the env cannot run) the trainer would wait for samples forever, so past
        ``max_failed_in_a_row`` failures in a row the loop raises, and TRL's trainer with it."""
        self._failed_in_a_row = self._failed_in_a_row + 1 if traj.error else 0
        if self._failed_in_a_row >= self.max_failed_in_a_row:
            raise RuntimeError(
                f"the last {self._failed_in_a_row} episodes all failed, the last with: {traj.error} "
                f"(vLLM server: {self.vllm_server_url})"
            )

    def completion_mask(self, sample: TrainerSample, traj: Trajectory) -> list[int]:
        """The loss mask over the episode's response tokens: 1 exactly on the tokens the policy sampled (all
        zero for an untrainable episode)."""
        return list(sample.mask)

    async def _run_loops(self, stop_event: Any) -> None:
        """TRL's loops, then the server's client closed on this loop (its pooled aiohttp session is bound to
        the loop, which TRL closes when the loops end: left open, aiohttp warns of an unclosed session)."""
        try:
            await super()._run_loops(stop_event)
        finally:
            if self._client is not None:
                await self._client.close()

    def _episode_setup(self) -> tuple[EpisodeHost, LLMClient, ChatRenderer, RolloutConfig]:
        """The host, the server's client, the renderer and the budgets, made once in the child process."""
        if self._host is None:
            requests = env_requests(self.settings.env)  # type: ignore[arg-type]
            if requests is not None:
                check_env_ids([r.id for r in requests], where="env")
            factory: EnvFactory | None = None if requests is not None else self.settings.env  # type: ignore[assignment]
            self._host = EpisodeHost(
                max_concurrent_episodes=self.settings.max_concurrent_episodes,
                factory=factory,
                name="trl-async",
            )
        if self._client is None:
            from toolgym.rollout.clients.openai_http import OpenAICompletionsClient

            self._client = OpenAICompletionsClient(
                self.vllm_server_url, model=self._request_model, timeout=float(self.request_timeout)
            )
        if self._renderer is None:
            self._renderer = self._host.renderer(
                self.tokenizer,
                chat_template_kwargs=self.settings.chat_template_kwargs,
                eos_ids=self.eos_token_ids,
            )
        response = int(self.max_tokens)
        per_turn = min(self.settings.max_tokens_per_turn or response, response)
        config = RolloutConfig(
            max_response_tokens=response,
            max_tokens_per_turn=per_turn,
            max_prompt_tokens=self.settings.max_prompt_tokens,
            sampling=sampling_from(self),
        )
        return self._host, self._client, self._renderer, config

    # -- metrics -------------------------------------------------------------------------------------------

    def _record(
        self,
        completion: list[dict[str, Any]],
        *,
        passed: bool,
        turns: int,
        tool_calls: int,
        reward: float | None,
        count: bool = True,
    ) -> None:
        """Keep the conversation's toolgym metrics for its samples, and count it (untrainable or not; one
        awaiting its group's judge is counted when judged)."""
        self._infos[id(completion)] = {
            "toolgym/passed": float(passed),
            "toolgym/turns": float(turns),
            "toolgym/tool_calls": float(tool_calls),
        }
        if count:
            self._count(reward)

    def _count(self, reward: float | None) -> None:
        rate = self._rates["toolgym/untrainable"]
        rate[0] += float(reward is None)
        rate[1] += 1.0

    async def _score_group(self, group: RolloutGroup) -> list[RolloutSample]:
        await self._judge_awaiting(group)
        samples = await super()._score_group(group)
        for sample in samples:
            sample.metrics.update(self._infos.get(id(sample.completion), {}))
            sample.metrics[VERSION_KEY] = float(sample.model_version)
        for completion in group.completions:
            self._infos.pop(id(completion), None)
        return samples


@contextlib.contextmanager
def _keep_tokenizer(active: bool) -> Iterator[None]:
    """While ``active`` (episodes mode): TRL's ``_AsyncRolloutLoop.__init__`` leaves the tokenizer as it is.
    It calls ``add_response_schema`` on a tokenizer without a response template, which raises for a chat
    template TRL does not know, to parse tool calls in its own loop; the episode runner parses the env's own
    action format instead and never reads that template."""
    if not active:
        yield
        return
    original = _trl_worker.add_response_schema
    _trl_worker.add_response_schema = lambda processing_class: processing_class
    try:
        yield
    finally:
        _trl_worker.add_response_schema = original


def _environment_of(tool_dict: dict[str, Callable]) -> ToolgymEnvironment:
    """The environment instance behind a rollout's tools (TRL hands the loop its bound methods only)."""
    for method in tool_dict.values():
        owner = getattr(method, "__self__", None)
        if isinstance(owner, ToolgymEnvironment):
            return owner
    raise RuntimeError(
        "this rollout's tools belong to no toolgym environment: build environment_factory with "
        "toolgym.trainers.trl_adapter.environment_factory"
    )


def _check_environment(name: str | None, instance: object, tools: Sequence[Callable]) -> None:
    if not isinstance(instance, ToolgymEnvironment):
        raise TypeError(
            f"environment {name!r} is a {type(instance).__name__}, not a toolgym environment: build "
            "environment_factory with toolgym.trainers.trl_adapter.environment_factory"
        )
    if not any(getattr(tool, "__self__", None) is instance for tool in tools):
        raise ValueError(
            f"{instance.env_id} has no tools, so TRL's tool-call loop has nothing to call and the verifier "
            "could not be reached: train it with env= (toolgym's episode runner) instead"
        )


def _completion_messages(
    traj: Trajectory, renderer: ChatRenderer, response_ids: list[int]
) -> list[dict[str, Any]]:
    """The episode after its prompt, as chat messages (for TRL's completion logs and traces)."""
    first = next((i for i, m in enumerate(traj.messages) if m.get("role") == "assistant"), None)
    if first is None:
        return [{"role": "assistant", "content": renderer.decode(response_ids)}]
    return [dict(m) for m in traj.messages[first:]]


__all__ = ["REWARD_NAME", "VERSION_KEY", "EpisodeSettings", "ToolgymRolloutLoop"]
