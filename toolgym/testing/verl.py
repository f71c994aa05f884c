"""Stand-ins for verl's LLM server handle (``LLMServerClient``), so verl's real agent-loop worker can run
toolgym's agent loop in one process, without Ray or a GPU build of vLLM: in tests, benchmarks, and for env
authors checking their env under verl.

``VLLMServerStandIn`` does what verl's vLLM server does with a request (``vllm_async_server.generate``): it
pops ``max_tokens``, turns the ``logprobs`` flag into vLLM's ``0``/``None``, builds
``SamplingParams(max_tokens=..., **rest)`` (so a field vLLM does not know fails here as it would there) and
returns a ``TokenOutput`` with ``stop_reason="completed"``. ``ClientServerStandIn`` puts any toolgym
``LLMClient`` (a ``ScriptedClient`` playing an oracle, say) behind the same interface. Both record what they
generated per request id, for checking masks and logprobs against. ``agent_loop_worker`` builds verl's own
``AgentLoopWorker`` from verl's own config with toolgym's agent-loop YAML, over such a stand-in, and
``dataset_batch`` reads exported Parquet through verl's ``RLHFDataset`` into the ``DataProto`` the trainer
would hand it. Importing this module imports verl.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.workers.rollout.replica import TokenOutput

from toolgym.rollout.clients.base import LLMClient, Sampling
from toolgym.trainers.verl_adapter.agent_loop import ToolgymAgentLoop


class _Recording:
    def __init__(self) -> None:
        #: request id -> [(token_ids, logprobs or None), ...] in the order generated
        self.generations: dict[str, list[tuple[list[int], list[float] | None]]] = defaultdict(list)
        #: every sampling_params dict as received
        self.requests: list[dict[str, Any]] = []
        self.global_steps = 0

    def turns_of(self, generated: Sequence[int]) -> list[tuple[list[int], list[float] | None]]:
        """The turns of an episode whose generated tokens, in order, are ``generated`` (scripted episodes of
        one GRPO group can be identical: any of them)."""
        found = [
            turns
            for turns in self.generations.values()
            if [t for ids, _ in turns for t in ids] == list(generated)
        ]
        if not found:
            raise LookupError("no recorded episode generated exactly these tokens")
        return found[0]

    def _record(self, request_id: str, ids: list[int], lps: list[float] | None) -> Any:
        self.generations[request_id].append((ids, lps))
        # as verl's LLMServerClient reports them: the server's step, and the episode's range of steps so far
        steps = {key: self.global_steps for key in ("global_steps", "min_global_steps", "max_global_steps")}
        return TokenOutput(token_ids=ids, log_probs=lps, stop_reason="completed", extra_fields=steps)


class VLLMServerStandIn(_Recording):
    """verl's vLLM server over an in-process ``vllm`` ``AsyncLLM`` (``VLLMClient.engine``). A request
    without ``max_tokens`` (verl's own ``ToolAgentLoop`` sends none) gets ``default_max_tokens``, as verl's
    server gives it ``rollout.response_length``."""

    def __init__(self, engine: Any, default_max_tokens: int | None = None):
        super().__init__()
        self.engine = engine
        self.default_max_tokens = default_max_tokens

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> Any:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = dict(sampling_params)
        self.requests.append(dict(params))
        max_tokens = params.pop("max_tokens", None) or self.default_max_tokens
        if max_tokens is None:
            raise ValueError("the request has no max_tokens and the stand-in no default_max_tokens")
        params["logprobs"] = 0 if params.pop("logprobs", False) else None
        sampling = SamplingParams(max_tokens=max_tokens, **params)
        final = None
        prompt = TokensPrompt(prompt_token_ids=list(prompt_ids))
        async for out in self.engine.generate(prompt, sampling, request_id=uuid4().hex):
            final = out
        assert final is not None and final.outputs
        completion = final.outputs[0]
        ids = list(completion.token_ids)
        lps = None
        if sampling.logprobs is not None:
            lps = [float(step[t].logprob) for step, t in zip(completion.logprobs, ids, strict=True)]
        return self._record(request_id, ids, lps)


class ClientServerStandIn(_Recording):
    """A toolgym ``LLMClient`` behind verl's server interface (max_tokens, temperature, stops honoured)."""

    def __init__(self, client: LLMClient):
        super().__init__()
        self.client = client

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> Any:
        params = dict(sampling_params)
        self.requests.append(dict(params))
        sampling = Sampling(
            max_tokens=params["max_tokens"],
            temperature=params.get("temperature", 1.0),
            top_p=params.get("top_p", 1.0),
            top_k=params.get("top_k", -1),
            stop=tuple(params.get("stop") or ()),
            seed=params.get("seed"),
        )
        gen = await self.client.generate(list(prompt_ids), sampling, request_id)
        lps = gen.logprobs if params.get("logprobs") else None
        return self._record(request_id, list(gen.token_ids), lps)


class VersionedServerStandIn(_Recording):
    """verl's server during fully-asynchronous training, over toolgym ``LLMClient`` s: ``policies[v]`` samples
    with the weights of version ``v`` (a ``global_steps`` as verl's servers report it). After
    ``update_after[0]`` tokens sampled in all, the weights move to the next version: the request in flight
    then is aborted at that token (``stop_reason="aborted"``, what it sampled so far), as verl's
    ``abort_all_requests`` does when the trainer syncs weights, and what comes next is sampled by the next
    policy; and so on for each entry of ``update_after``. ``generations`` records each attempt with its
    version.

    ``seed`` makes a test's sampling repeatable: a request that brings no seed of its own (verl's agent loop
    sends none) samples with ``seed + n`` for the server's ``n``-th request, so whether an episode's first
    turn runs past an update point does not depend on the run (unseeded, a first turn that samples EOS
    within ``update_after[0]`` tokens now and then is never interrupted)."""

    def __init__(self, policies: Sequence[LLMClient], update_after: Sequence[int], seed: int | None = None):
        super().__init__()
        self.seed = seed
        if len(update_after) != len(policies) - 1:
            raise ValueError("one update point per policy after the first")
        self.policies = list(policies)
        self.updates = list(update_after)
        self.sampled = 0
        #: request id -> [(version, token_ids, logprobs, aborted), ...] per attempt
        self.attempts: dict[str, list[tuple[int, list[int], list[float] | None, bool]]] = defaultdict(list)

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> Any:
        params = dict(sampling_params)
        self.requests.append(dict(params))
        version = self.global_steps
        budget = int(params["max_tokens"])
        until_update = self.updates[version] - self.sampled if version < len(self.updates) else budget
        sampling = Sampling(
            max_tokens=max(1, min(budget, until_update)),
            temperature=params.get("temperature", 1.0),
            top_p=params.get("top_p", 1.0),
            top_k=params.get("top_k", -1),
            stop=tuple(params.get("stop") or ()),
            seed=params["seed"] if params.get("seed") is not None else self._next_seed(),
        )
        gen = await self.policies[version].generate(list(prompt_ids), sampling, request_id)
        ids = list(gen.token_ids)
        lps = gen.logprobs if params.get("logprobs") else None
        self.sampled += len(ids)
        aborted = version < len(self.updates) and self.sampled >= self.updates[version] and len(ids) < budget
        if version < len(self.updates) and self.sampled >= self.updates[version]:
            self.global_steps += 1  # the trainer synced new weights: in-flight requests were aborted
        self.attempts[request_id].append((version, ids, lps, aborted))
        self.generations[request_id].append((ids, lps))
        steps = {key: version for key in ("global_steps", "min_global_steps", "max_global_steps")}
        stop = "aborted" if aborted else "completed"
        return TokenOutput(token_ids=ids, log_probs=lps, stop_reason=stop, extra_fields=steps)

    def _next_seed(self) -> int | None:
        return None if self.seed is None else self.seed + len(self.requests)


def verl_config(
    model: str = "tiny",
    *,
    prompt_length: int = 1024,
    response_length: int = 512,
    group_size: int = 1,
    agent_loop_config: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> Any:
    """verl's ``ppo_trainer`` config for toolgym's agent loop (composed with Hydra from verl's own files)."""
    from hydra import compose, initialize_config_dir

    from toolgym.rollout.models import resolve_model
    from toolgym.trainers.verl_adapter import AGENT_NAME, agent_loop_config_path
    from toolgym.trainers.verl_adapter.launch import verl_config_dir

    loops = agent_loop_config or agent_loop_config_path()
    settings = [
        f"actor_rollout_ref.model.path={resolve_model(model)}",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.prompt_length={prompt_length}",
        f"actor_rollout_ref.rollout.response_length={response_length}",
        f"actor_rollout_ref.rollout.n={group_size}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
        f"data.max_prompt_length={prompt_length}",
        f"data.max_response_length={response_length}",
        "data.return_raw_chat=True",
        *overrides,
    ]
    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name="ppo_trainer", overrides=settings)


def agent_loop_worker(server: Any, config: Any) -> Any:
    """verl's ``AgentLoopWorker`` (what each Ray worker of verl's ``AgentLoopManager`` runs), in-process."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    return AgentLoopWorker(config, llm_client=server)


def dataset_batch(parquet: str | Path, config: Any, tokenizer: Any, group_size: int = 1) -> Any:
    """Every row of ``parquet`` through verl's ``RLHFDataset`` and collate function, with a ``uid`` per row
    and repeated ``group_size`` times interleaved: the batch verl's trainer gives the agent-loop workers."""
    import numpy as np
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    dataset = RLHFDataset(data_files=[str(parquet)], tokenizer=tokenizer, processor=None, config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))
    batch.non_tensor_batch["uid"] = np.array([uuid4().hex for _ in range(len(batch))], dtype=object)
    return batch.repeat(repeat_times=group_size, interleave=True)


__all__ = [
    "ClientServerStandIn",
    "VLLMServerStandIn",
    "VersionedServerStandIn",
    "agent_loop_worker",
    "dataset_batch",
    "verl_config",
]


class InvertedMaskAgentLoop(ToolgymAgentLoop):
    """toolgym's agent loop with the loss mask inverted: 1 on the observation and template tokens, 0 on the
    generated ones. A control for learning checks, never for training: with it, a run that learns must learn
    nothing (``benchmarks/bench_verl_learning.py``). Selected by its ``_target_`` in the agent-loop YAML
    (``INVERTED_MASK_AGENT_LOOP``)."""

    def _output(self, traj: Any, client: Any) -> Any:
        out = super()._output(traj, client)
        out.response_mask = [1 - m for m in out.response_mask]
        return out


class GreedyAgentLoop(ToolgymAgentLoop):
    """toolgym's agent loop sampling greedily whatever verl's rollout temperature is, while verl's actor keeps
    computing log-probs at that temperature (``rollout.temperature=0`` would divide its logits by zero). With
    the same weights, the same rows give the same episodes: what a check that two runs took the same step
    needs (``benchmarks/bench_verl_resume.py``). Not for training."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        return await super().run({**sampling_params, "temperature": 0.0}, **kwargs)


#: the agent-loop ``_target_`` of each test-only loop
INVERTED_MASK_AGENT_LOOP = f"{__name__}.{InvertedMaskAgentLoop.__qualname__}"
GREEDY_AGENT_LOOP = f"{__name__}.{GreedyAgentLoop.__qualname__}"


def train_with_agent_loop(
    config: str | Path, out: str | Path, target: str | None, overrides: Sequence[str]
) -> int:
    """``toolgym train --config CONFIG --out OUT -- OVERRIDES`` with the agent loop's ``_target_`` replaced
    by ``target`` (one of the loops above): the benchmarks' runs (``python -m toolgym.testing.verl``)."""
    import dataclasses

    from toolgym.trainers.verl_adapter import launch

    cfg = launch.load_train_config(config)
    plan = launch.plan_run(cfg, out, list(overrides))
    if target:
        plan = dataclasses.replace(plan, agent_loop_kwargs={**plan.agent_loop_kwargs, "_target_": target})
    return launch.run_training(cfg, plan)


def session_pids(sid: int) -> list[int]:
    """Every process in session ``sid`` (a ``toolgym train`` started with ``start_new_session=True``)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6 of stat, after pid and (comm): state ppid pgrp session
            pids.append(int(stat.parent.name))
    return pids


def run_in_session(
    command: Sequence[str],
    timeout_s: float,
    env: dict[str, str] | None = None,
    *,
    stall_s: float | None = None,
    trace: Path | None = None,
) -> tuple[int | None, str]:
    """Run ``command`` (in ``env``, else this process's environment) in a process session of its own, its
    stdout and stderr as one text, and end whatever it left in that session afterwards (``end_session``):
    ``(exit status, log)``, the status None when it ran past ``timeout_s`` (verl hangs instead of exiting on
    some failures). With ``stall_s``, a run that makes no progress for that long (no new kind of log line, no
    step, no event in its ``trace`` directory) is ended at once and ``RunStalled`` says where it stood
    (``toolgym.testing.stall_watch``); the log then ends with a line of the watch's saying the run's longest
    silence (``[stall watch] ...``)."""
    from toolgym.testing.stall_watch import run_watched

    code, log, progress = run_watched(
        command, timeout_s, env=env, stall_s=stall_s, trace=trace, end=end_session
    )
    if stall_s is not None:
        log += f"\n[stall watch] {progress.summary()} (bound {stall_s:.0f} s)\n"
    return code, log


def _open_files() -> set[str]:
    paths: set[str] = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            paths.update(os.readlink(fd) for fd in fd_dir.iterdir())
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            paths.update(line.split(maxsplit=5)[-1].strip() for line in maps.read_text().splitlines())
    return paths


@contextlib.contextmanager
def removing_leaked_shm() -> Iterator[None]:
    """verl ends its vLLM servers without shutting their engines down, which leaves vLLM's message-queue
    segments (``/dev/shm/psm_*``, sparse) behind: around a run, remove the ones it made that nobody has
    open when it is over."""
    before = set(Path("/dev/shm").glob("psm_*"))
    try:
        yield
    finally:
        in_use = _open_files()
        for path in set(Path("/dev/shm").glob("psm_*")) - before:
            if str(path) not in in_use:
                path.unlink(missing_ok=True)


def end_session(sid: int) -> None:
    """End what a verl run left in its session: Ray's workers and vLLM's engine run in process groups of
    their own, but in the run's session. SIGTERM, then SIGKILL for what is left 5 s later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = session_pids(sid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(5)


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="toolgym train with a test-only agent loop")
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--agent-loop", default=None, help="the loop's _target_ (default: toolgym's own)")
    parser.add_argument(
        "--native-loop",
        action="store_true",
        help="verl's own ToolAgentLoop instead (toolgym.testing.verl_native)",
    )
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.native_loop:
        from toolgym.testing.verl_native import train_with_native_loop

        sys.exit(train_with_native_loop(args.config, args.out, args.overrides))
    sys.exit(train_with_agent_loop(args.config, args.out, args.agent_loop, args.overrides))
