"""``make_rollout_func``: TRL's ``GRPOTrainer(rollout_func=...)`` on toolgym's shared episode runner.

TRL calls ``rollout_func(prompts, trainer)`` with this rank's prompts, each repeated ``num_generations`` times
in a row (a GRPO group), and wants one row back per prompt, in order: ``prompt_ids``, ``completion_ids``,
``logprobs`` and any extra keys, which reach the reward functions as keyword arguments; ``env_mask`` becomes
the loss's tool mask (0 = not trained on). TRL checks none of the lengths. For each prompt the function here:

1. reads the episode key the prompt carries (:func:`~toolgym.trainers.trl_adapter.data.prompt_dataset`
   puts it there): env, kwargs, task, seed — so every sample of a group plays the same task from the same
   reset;
2. plays the episode with ``toolgym.rollout.run_episode`` (all of the batch at once, concurrently), generating
   with the trainer's own policy: its model through toolgym's HF client (``unwrap_model_for_generation``, as
   TRL's own generation does), or TRL's vLLM backend when ``use_vllm=True`` (in rounds all ranks take
   together, see :mod:`~toolgym.trainers.trl_adapter.lockstep`);
3. returns the runner's tokens as they are: ``completion_ids`` = every token after the prompt, ``env_mask``
   = 1 exactly on the tokens the policy generated (0 on observations and template tokens), their
   ``logprobs``, and the verifier's reward as ``env_reward`` (give :func:`env_reward` to ``reward_funcs``).
   Where the env's verifier judges groups (``verify_group``: a ``GroupJudgeVerifier``), the episodes of each
   group are judged together after all of the call's episodes, one judge call per group
   (``toolgym.rollout.group_judge``; no pointwise call first).

Budgets are the runner's: ``completion_ids`` never exceed ``max_completion_length`` (or
``max_response_tokens``), a turn never exceeds ``max_tokens_per_turn``, and a prompt over
``max_prompt_tokens`` fails its episode. An episode that fails (engine, env, prompt too long) or whose
verifier failed is returned untrainable: an all-zero ``env_mask`` and ``env_reward=None``, which TRL treats as
unscorable (advantage 0), so a batch survives one bad episode and never learns from a reward that judged
nothing.

Keep ``mask_truncated_completions=False`` (TRL's default): TRL counts a completion that does not end in EOS as
truncated, and multi-turn episodes routinely end on a stop string such as ``</answer>``.

With ``agent=`` (``async def agent(task, base_url, api_key) -> answer``, ``toolgym.gateway``), a user's agent
program plays each prompt's task instead of the runner: the call starts a gateway in front of the same
generation backend, runs the agents against it, and returns the tokens the gateway recorded, under the same
budgets and with the trainer's sampling settings (``toolgym.trainers.agent_samples``). TRL takes one
sequence per sample: an agent that rewrote its history is trained on its session's last segment (the one
with the final answer and the verdict); the earlier ones are dropped and counted (``env_segments``, logged as
``toolgym/segments`` and ``toolgym/dropped_segments``). An agent that fails, or runs past the budget (its call
is refused), gives an untrainable sample. With TRL's vLLM backend a round has one set of stop strings, so an
agent's own ``stop`` is not applied there (turns end at EOS or the per-turn cap).

TRL's other multi-turn path, ``environment_factory`` (``environment.py``), lets TRL drive the turns itself
in the chat template's tool-call format; this one plays the env's own episode (its action format,
invalid-action feedback, turn and token budgets) with token-exact masks. docs/training.md compares them.

One file of some 530 lines: the rollout function, its two generation backends, the agent programs' gateway
and the TRL-shaped outputs and reward function are one contract with TRL (the keys it reads, the lengths it
does not check), kept together.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from toolgym.core.task import Task
from toolgym.core.types import Trajectory
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient, Sampling
from toolgym.rollout.dump import DumpSettings, EpisodeDump
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.group_judge import GroupVerifier, judge_group, play_for_group
from toolgym.rollout.host import DEFAULT_MAX_CONCURRENT_EPISODES, EpisodeHost
from toolgym.rollout.keys import EnvFactory, EnvSource, EpisodeKey, check_env_ids, env_requests
from toolgym.rollout.samples import filler_token_id, sampling_from, trainer_sample
from toolgym.trainers.agent_samples import SessionClients, load_agent_program, play_sample
from toolgym.trainers.trl_adapter.data import key_of_prompt

if TYPE_CHECKING:
    from toolgym.gateway.agents import AgentFn


class ToolgymRolloutFunc:
    """A ``rollout_func`` for ``trl.GRPOTrainer`` that plays toolgym episodes (see the module docstring);
    ``make_rollout_func`` is this class.

    Args:
        env: the env(s) the dataset's rows name: an id, an ``EnvRequest``, a list of them, or a factory that
            returns a toolgym env (then every row is played on envs it makes). Build the dataset with
            ``prompt_dataset`` from the same ``env``.
        max_response_tokens: tokens after the prompt, generated and observation tokens together (default:
            the trainer's ``max_completion_length``).
        max_tokens_per_turn: tokens one model turn may generate (default: the whole response budget).
        max_prompt_tokens: a longer first prompt fails its episode (default: no cap).
        max_concurrent_episodes: episodes in flight at once (each holds an env: a sandbox, an index).
        chat_template_kwargs: template variables (default: the trainer's ``chat_template_kwargs``).
        client: generate with this ``LLMClient`` instead of the trainer's policy (a scripted policy in tests,
            or a server whose weights you keep in sync yourself).
        exclude_infra_errors: keep an episode whose tool calls failed through our fault (the sandbox lost
            its state or had no slot for it, the retriever was down) out of the loss, as an untrainable one
            (``Trajectory.trainable_for``); False trains on it with the reward it got.
        dump: write a sample of the episodes every ``dump.every`` steps to ``dump.directory`` (with their
            tokens, mask, reward, verdict; ``toolgym view DIR`` opens it); each process writes its own file.
        agent: a user's agent program plays each prompt's task instead of the runner: an
            ``async def agent(task, base_url, api_key) -> answer``, or its ``module:function`` /
            ``path/to/file.py:function`` (see the module docstring).

    ``last_trajectories`` holds the trajectories of the latest call (for logging, debugging and tests) and
    ``last_call`` its number (episode ``i`` of call ``c`` sends its turns as session ``trl-<c>-<i>``).
    """

    def __init__(
        self,
        env: EnvSource,
        *,
        max_response_tokens: int | None = None,
        max_tokens_per_turn: int | None = None,
        max_prompt_tokens: int | None = None,
        max_concurrent_episodes: int = DEFAULT_MAX_CONCURRENT_EPISODES,
        chat_template_kwargs: dict[str, Any] | None = None,
        client: LLMClient | None = None,
        exclude_infra_errors: bool = True,
        dump: DumpSettings | None = None,
        agent: str | AgentFn | None = None,
    ):
        for name, value in (
            ("max_response_tokens", max_response_tokens),
            ("max_tokens_per_turn", max_tokens_per_turn),
            ("max_prompt_tokens", max_prompt_tokens),
        ):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.requests = env_requests(env)
        if self.requests is not None:
            check_env_ids([r.id for r in self.requests], where="env")
        self.max_response_tokens = max_response_tokens
        self.max_tokens_per_turn = max_tokens_per_turn
        self.max_prompt_tokens = max_prompt_tokens
        self.chat_template_kwargs = chat_template_kwargs
        self.client = client
        self.exclude_infra_errors = exclude_infra_errors
        self.dump = EpisodeDump(dump, trainer="trl") if dump is not None else None
        self.agent = load_agent_program(agent) if agent is not None else None
        #: this call's gateway (agent programs only) and the segments of each sample's session
        self._gateway: Any = None
        self._segments: dict[int, int] = {}
        self.last_trajectories: list[Trajectory] = []
        self.last_call = -1
        factory = None if self.requests is not None else cast(EnvFactory, env)
        self.host = EpisodeHost(max_concurrent_episodes=max_concurrent_episodes, factory=factory, name="trl")
        self._stops: list[str] | None = None
        self._calls = itertools.count()
        #: this call's episodes whose env judges groups: index -> (its group verifier, the task it played)
        self._group_judges: dict[int, tuple[GroupVerifier, Task]] = {}

    # -- TRL's entry point -----------------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        keys = [key_of_prompt(p) for p in prompts]
        self._check_envs(keys)
        call = next(self._calls)
        config = self._config(trainer)
        renderer = self._renderer(trainer)
        if self.client is not None:
            seeds = self._seeds(trainer, call, len(keys))
            episodes = self._episodes(self.client, keys, config, renderer, seeds, call)
            trajs = _run(self._in_gateway(self._gather(episodes), renderer, config))
        elif getattr(trainer, "use_vllm", False):
            trajs = self._with_vllm(trainer, keys, config, renderer, call)
        else:
            trajs = self._with_model(trainer, keys, config, renderer, call)
        trajs = self._judge_groups(keys, trajs)
        self.last_trajectories, self.last_call = trajs, call
        if self.dump is not None:  # the step the trainer is at; each rank writes its own file
            step = int(trainer.state.global_step)
            for traj in trajs:
                self.dump.offer(step, traj, trained=traj.trainable_for(self.exclude_infra_errors))
        return trl_outputs(
            trajs,
            filler_id=filler_token_id(renderer.tokenizer),
            max_prompt_tokens=config.max_prompt_tokens,
            exclude_infra_errors=self.exclude_infra_errors,
            segments=[self._segments.get(i, 1) for i in range(len(trajs))],
        )

    def close(self) -> None:
        self.host.close()

    # -- generation backends ---------------------------------------------------------------------------------

    def _with_model(
        self, trainer: Any, keys: list[EpisodeKey], config: RolloutConfig, renderer: ChatRenderer, call: int
    ) -> list[Trajectory]:
        """The trainer's model, unwrapped for generation as TRL's own HF generation does it."""
        from trl.models import unwrap_model_for_generation

        from toolgym.rollout.clients.hf import HFClient

        args = trainer.args
        with ExitStack() as stack:
            model = stack.enter_context(
                unwrap_model_for_generation(
                    trainer.model_wrapped,
                    trainer.accelerator,
                    gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True),
                    gradient_checkpointing_kwargs=getattr(args, "gradient_checkpointing_kwargs", None),
                )
            )
            dist = getattr(trainer, "_dist", None)  # FSDP: full parameters for the forward passes
            if dist is not None and hasattr(dist, "summon_full_params"):
                stack.enter_context(dist.summon_full_params(trainer.model_wrapped, recurse=False))
            client = HFClient.from_model(model, renderer.tokenizer, max_batch=min(len(keys), 64))
            seeds = self._seeds(trainer, call, len(keys))
            episodes = self._episodes(client, keys, config, renderer, seeds, call)
            return _run(self._in_gateway(self._gather(episodes, close=client), renderer, config))

    def _with_vllm(
        self, trainer: Any, keys: list[EpisodeKey], config: RolloutConfig, renderer: ChatRenderer, call: int
    ) -> list[Trajectory]:
        """TRL's vLLM backend, in rounds every rank takes together (see ``lockstep``)."""
        from toolgym.rollout.clients.lockstep import LockstepClient
        from toolgym.trainers.trl_adapter.lockstep import accelerate_exchange, trl_batch_generate

        generation = trainer.vllm_generation
        collective = trainer.vllm_mode == "server" or getattr(generation, "tensor_parallel_size", 1) > 1
        stop = self._stop_strings(keys) if self.agent is None else []  # agents: turns end at EOS
        client = LockstepClient(
            trl_batch_generate(generation, max_tokens=config.max_tokens_per_turn, stop=stop),
            exchange=accelerate_exchange(trainer.accelerator) if collective else None,
            filler_id=filler_token_id(renderer.tokenizer),
        )

        async def play() -> list[Trajectory]:
            episodes = self._episodes(client, keys, config, renderer, [None] * len(keys), call)
            return await client.drive(episodes)

        return _run(self._in_gateway(play(), renderer, config))

    # -- episodes --------------------------------------------------------------------------------------------

    @staticmethod
    async def _gather(
        episodes: list[Coroutine[Any, Any, Trajectory]], close: LLMClient | None = None
    ) -> list[Trajectory]:
        """Play ``episodes`` at once; close ``close`` (a client made for this call) after."""
        try:
            return list(await asyncio.gather(*episodes))
        finally:
            if close is not None:
                await close.close()

    def _episodes(
        self,
        client: LLMClient,
        keys: list[EpisodeKey],
        config: RolloutConfig,
        renderer: ChatRenderer,
        seeds: Sequence[int | None],
        call: int,
    ) -> list[Coroutine[Any, Any, Trajectory]]:
        self._group_judges.clear()
        self._segments.clear()
        if self.agent is not None:
            return [self._agent_episode(i, key, client, config) for i, key in enumerate(keys)]
        grouped = {i for run in _runs(keys) if len(run) > 1 for i in run}

        async def one(i: int, key: EpisodeKey) -> Trajectory:
            traj, judge, task = await play_for_group(
                self.host,
                key,
                client,
                renderer,
                config,
                group=i in grouped,
                request_id=f"trl-{call}-{i}",
                sampling_seed=seeds[i],
            )
            if judge is not None and task is not None:
                self._group_judges[i] = (judge, task)
            return traj.model_copy(update={"sample": i})

        return [one(i, key) for i, key in enumerate(keys)]

    async def _in_gateway(
        self,
        episodes: Coroutine[Any, Any, list[Trajectory]],
        renderer: ChatRenderer,
        config: RolloutConfig,
    ) -> list[Trajectory]:
        """``episodes``; for agent programs, with this call's gateway serving on the loop meanwhile (over
        the call's backend, per sample: ``SessionClients``)."""
        if self.agent is None:
            return await episodes
        from toolgym.gateway import Gateway, GatewayConfig

        prompt, response = config.max_prompt_tokens, config.max_response_tokens
        gateway_config = GatewayConfig(
            model=str(getattr(renderer.tokenizer, "name_or_path", "") or "policy"),
            # no prompt cap: the budgets bound each sample (SampleClient), not the gateway's context check
            max_model_len=prompt + response if prompt is not None else 2**31 - 1,
            max_sessions=self.host.max_concurrent_episodes,
        )
        gateway = Gateway(gateway_config, client=SessionClients(), renderer=renderer, host=self.host)
        async with gateway:
            self._gateway = gateway
            try:
                return await episodes
            finally:
                self._gateway = None

    async def _agent_episode(
        self, i: int, key: EpisodeKey, client: LLMClient, config: RolloutConfig
    ) -> Trajectory:
        """Sample ``i``: the agent program on ``key``'s task, generating with ``client`` (``play_sample``)."""
        assert self.agent is not None and self._gateway is not None
        async with self.host.slots():
            episode = await play_sample(self._gateway, self.agent, key, client, config)
        self._segments[i] = episode.segments
        return episode.trajectory.model_copy(update={"sample": i})

    def _judge_groups(self, keys: list[EpisodeKey], trajs: list[Trajectory]) -> list[Trajectory]:
        """The episodes of each group (consecutive prompts with one episode key) whose env judges groups
        (``verify_group``), judged together: one judge call per group, the groups judged at once."""
        judged = [run for run in _runs(keys) if all(i in self._group_judges for i in run)]
        if not judged:
            return trajs
        out = list(trajs)

        def judge(run: list[int]) -> list[Trajectory]:
            verifier, task = self._group_judges[run[0]]
            return judge_group(verifier, task, [trajs[i] for i in run])

        for run, results in zip(judged, self.host.executor.map(judge, judged), strict=True):
            for i, traj in zip(run, results, strict=True):
                out[i] = traj
        self._group_judges.clear()
        return out

    def _check_envs(self, keys: list[EpisodeKey]) -> None:
        if self.requests is None:
            return
        configured = {r.id for r in self.requests}
        stray = sorted({k.env_id for k in keys} - configured)
        if stray:
            raise ValueError(
                f"the batch has rows for envs {stray}, but this rollout function was made for "
                f"{sorted(configured)}: build the dataset and the rollout function from the same envs"
            )

    # -- settings from the trainer ---------------------------------------------------------------------------

    def _config(self, trainer: Any) -> RolloutConfig:
        response = self.max_response_tokens or int(trainer.max_completion_length)
        per_turn = min(self.max_tokens_per_turn or response, response)
        if getattr(trainer, "mask_truncated_completions", False):
            warnings.warn(
                "mask_truncated_completions=True masks every episode that ends on a stop string (not EOS); "
                "toolgym's budgets already bound the completions, so leave it False",
                stacklevel=3,
            )
        return RolloutConfig(
            max_response_tokens=response,
            max_tokens_per_turn=per_turn,
            max_prompt_tokens=self.max_prompt_tokens,
            sampling=trainer_sampling(
                trainer, vllm=bool(getattr(trainer, "use_vllm", False)) or self.client is not None
            ),
        )

    def _renderer(self, trainer: Any) -> ChatRenderer:
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        kwargs = self.chat_template_kwargs
        if kwargs is None:
            kwargs = getattr(trainer, "chat_template_kwargs", None) or {}
        config = getattr(trainer.model, "generation_config", None)
        eos = getattr(config, "eos_token_id", None)
        eos_ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
        # an agent's request tools are rendered by the chat template, as vLLM's OpenAI server does
        tools = self.agent is not None
        return self.host.renderer(
            tokenizer, chat_template_kwargs=kwargs, eos_ids=eos_ids, template_tools=tools
        )

    def _seeds(self, trainer: Any, call: int, n: int) -> list[int]:
        """Distinct, reproducible sampling seeds per call and rank (turn ``t`` of an episode adds ``t``)."""
        accelerator = getattr(trainer, "accelerator", None)
        rank = int(getattr(accelerator, "process_index", 0))
        base = [int(getattr(trainer.args, "seed", 0)), rank, int(trainer.state.global_step), call]
        state = np.random.SeedSequence(base).generate_state(n, dtype=np.uint32)
        return [int(s) % (2**31 - 1_000) for s in state]

    def _stop_strings(self, keys: list[EpisodeKey]) -> list[str]:
        """The union of the envs' stop strings (one vLLM batch has one set; see ``lockstep``), the same on
        every rank: from the configured envs, or the factory's env."""
        if self._stops is None:
            stops: list[str] = []
            # a factory: the env it makes
            envs = [(r.id, r.kwargs) for r in self.requests] if self.requests else [("factory", {})]
            for env_id, kwargs in envs:
                with self.host.session(env_id, kwargs) as session:
                    stops += session.inner.parser.stop_sequences
            self._stops = list(dict.fromkeys(stops))
        return self._stops


#: ``make_rollout_func(env, ...)``: a ``rollout_func`` for ``trl.GRPOTrainer`` that plays toolgym episodes
#: (the class's docstring lists the settings)
make_rollout_func = ToolgymRolloutFunc


def trl_outputs(
    trajs: Sequence[Trajectory],
    *,
    filler_id: int,
    max_prompt_tokens: int | None = None,
    exclude_infra_errors: bool = False,
    segments: Sequence[int] | None = None,
) -> dict[str, Any]:
    """TRL's rollout keys from trajectories, one row each, in order (see the module docstring).
    ``segments``: each sample's session segments (an agent program's; default 1 each), as ``env_segments``.

    An untrainable trajectory gets an all-zero ``env_mask`` and ``env_reward=None``; an empty prompt or
    response (the reset itself failed) becomes one filler token with mask 0, since TRL indexes the last
    completion token; only a failed over-long prompt is cut (from the left) to ``max_prompt_tokens``.
    """
    out: dict[str, list[Any]] = {
        "prompt_ids": [],
        "completion_ids": [],
        "logprobs": [],
        "env_mask": [],
        "env_reward": [],
        "env_passed": [],
        "env_turns": [],
        "env_tool_calls": [],
        "env_infra_errors": [],
        "env_stop_reason": [],
        "env_error": [],
        "env_task_id": [],
        "env_segments": list(segments) if segments is not None else [1] * len(trajs),
    }
    any_logprobs = any(t.logprobs is not None for t in trajs)
    for t in trajs:
        sample = trainer_sample(
            t,
            filler_id=filler_id,
            exclude_infra_errors=exclude_infra_errors,
            max_prompt_tokens=max_prompt_tokens,
        )
        out["prompt_ids"].append(sample.prompt_ids)
        out["completion_ids"].append(sample.response_ids)
        out["env_mask"].append(sample.mask)
        out["logprobs"].append(sample.logprobs or [0.0] * len(sample.response_ids))
        out["env_reward"].append(sample.reward)
        out["env_passed"].append(bool(t.verdict is not None and t.verdict.passed))
        out["env_turns"].append(t.num_turns)
        out["env_tool_calls"].append(t.tool_calls)
        out["env_infra_errors"].append(t.infra_errors)
        out["env_stop_reason"].append(t.stop_reason or "")
        out["env_error"].append(t.error)
        out["env_task_id"].append(t.task_id)
    result: dict[str, Any] = dict(out)
    if not any_logprobs:
        result["logprobs"] = None
    return result


def env_reward(
    prompts: Any = None,
    completions: Any = None,
    env_reward: Sequence[float | None] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """The reward function to give TRL: the verifier's reward the rollout function returned for each sample
    (``None`` — unscorable, advantage 0 — for an untrainable episode). Logs the success rate, turns, tool
    calls, tool calls that failed through our fault, the share of untrainable episodes and the segments of
    agent programs' sessions (the earlier ones dropped) as ``toolgym/*`` metrics."""
    if env_reward is None:
        raise ValueError(
            "env_reward found no env rewards: pass "
            "rollout_func=toolgym.trainers.trl_adapter.make_rollout_func(...) to the GRPOTrainer"
        )
    rewards = [None if r is None else float(r) for r in env_reward]
    if log_metric is not None and rewards:
        n = len(rewards)
        log_metric("toolgym/untrainable", sum(r is None for r in rewards) / n)
        for name, key in (
            ("passed", "env_passed"),
            ("turns", "env_turns"),
            ("tool_calls", "env_tool_calls"),
            ("infra_errors", "env_infra_errors"),
        ):
            values = kwargs.get(key)
            if values:
                log_metric(f"toolgym/{name}", float(np.mean([float(v) for v in values])))
        segments = kwargs.get("env_segments")
        if segments:
            log_metric("toolgym/segments", float(np.mean(segments)))
            log_metric("toolgym/dropped_segments", float(sum(max(int(s) - 1, 0) for s in segments)))
    return rewards


def trainer_sampling(trainer: Any, *, vllm: bool) -> Sampling:
    """The trainer's sampling settings (``temperature``, ``top_p``, ``top_k``, ``repetition_penalty``,
    ``min_p``) as toolgym's; TRL's ``top_k=0`` means no cut-off. The HF backend implements no ``min_p`` and
    no ``generation_kwargs``: asking for them without vLLM is an error here, not a silent change."""
    min_p = getattr(trainer, "min_p", None)
    if not vllm:
        unsupported = {"min_p": min_p} if min_p else {}
        if getattr(trainer.args, "generation_kwargs", None):
            unsupported["generation_kwargs"] = trainer.args.generation_kwargs
        if unsupported:
            raise ValueError(
                f"toolgym's HF generation does not implement {sorted(unsupported)}: drop them or set "
                "use_vllm=True"
            )
    return sampling_from(trainer)


def _runs(keys: Sequence[EpisodeKey]) -> list[list[int]]:
    """The indices of each run of consecutive equal keys (TRL repeats each prompt ``num_generations`` times in
    a row: a GRPO group)."""
    runs: list[list[int]] = []
    for i, key in enumerate(keys):
        if runs and keys[runs[-1][0]] == key:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def _run(coro: Coroutine[Any, Any, list[Trajectory]]) -> list[Trajectory]:
    """Run the episodes' event loop to completion, from sync code (TRL calls the rollout function so); in a
    thread of its own when the caller already runs a loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


__all__ = ["ToolgymRolloutFunc", "env_reward", "make_rollout_func", "trainer_sampling", "trl_outputs"]
