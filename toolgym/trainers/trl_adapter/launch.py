"""``toolgym train --trainer trl``: a :class:`TRLTrainConfig` YAML becomes a GRPO run with TRL, in-process.

The run: the train dataset from the envs' task sources (``prompt_dataset``), toolgym's rollout function on
the shared episode runner (``make_rollout_func``; with ``agent:``, the user's agent program plays each row
against a gateway instead), ``env_reward`` as the reward, and TRL's ``GRPOTrainer``
with the ``GRPOConfig`` derived here (``trl_args`` and ``-- name=value`` overrides win). Each logged step
prints a row of the reward table (reward, success, turns, tool calls, tokens). ``--dry-run`` prints the
``GRPOConfig`` settings after TRL has accepted them, and writes nothing.

Several GPUs: ``accelerate launch $(which toolgym) train --trainer trl --config FILE.yaml`` (each rank plays
its share of the episodes; with ``use_vllm`` every rank takes part in every generation round).

``mode: async``: TRL's ``AsyncGRPOTrainer`` (``ToolgymAsyncGRPOTrainer``) with the ``AsyncGRPOConfig`` derived
here, toolgym's episode runner generating on the vLLM server at ``vllm_server_url`` while the trainer trains;
the reward table adds the staleness of the samples trained on and the samples dropped as stale.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.rollout.dump import DumpSettings
from toolgym.rollout.keys import check_env_ids
from toolgym.trainers.trl_adapter.config import TRLTrainConfig, load_trl_config

#: what the reward table shows, from TRL's logs: (column, log key, format)
TABLE_COLUMNS = (
    ("step", "step", "{:>5d}"),
    ("reward", "reward", "{:>7.3f}"),
    ("success", "toolgym/passed", "{:>7.3f}"),
    ("turns", "toolgym/turns", "{:>6.2f}"),
    ("tool calls", "toolgym/tool_calls", "{:>10.2f}"),
    ("gen tokens", "completions/mean_length", "{:>10.1f}"),
    ("untrainable", "toolgym/untrainable", "{:>11.3f}"),
)
#: ``mode: async`` adds the staleness of the samples each step trained on (measured when it trains on them)
#: and the samples the step's pulls dropped as stale
ASYNC_TABLE_COLUMNS = (
    *TABLE_COLUMNS,
    ("staleness", "toolgym/staleness_mean", "{:>9.2f}"),
    ("max stale", "toolgym/staleness_max", "{:>9.0f}"),
    ("dropped", "sample/dropped_stale_total", "{:>7.0f}"),
)


def apply_overrides(cfg: TRLTrainConfig, overrides: list[str] | tuple[str, ...]) -> TRLTrainConfig:
    """``name=value`` (the value read as YAML): a config key, else a ``GRPOConfig`` field (``trl_args``)."""
    import yaml

    data = cfg.model_dump(exclude_unset=True)  # a key the YAML left out stays unset (mode-specific keys)
    trl_args = dict(data.get("trl_args", {}))
    for item in overrides:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ValueError(
                f"{item!r} is not an override: write name=value (e.g. steps=50 or warmup_steps=10)"
            )
        value = yaml.safe_load(text)
        if name in TRLTrainConfig.model_fields:
            data[name] = value
        else:
            trl_args[name] = value
    data["trl_args"] = trl_args
    return TRLTrainConfig.model_validate(data)


def grpo_settings(cfg: TRLTrainConfig, run_dir: Path) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments: toolgym's derived settings, then ``trl_args`` on top."""
    import torch

    cuda = torch.cuda.is_available()
    on_cpu = cfg.device == "cpu" or (cfg.device == "auto" and not cuda)
    bf16 = (not on_cpu and torch.cuda.is_bf16_supported()) if cfg.bf16 == "auto" else cfg.bf16
    settings: dict[str, Any] = {
        "output_dir": str(run_dir),
        "run_name": cfg.experiment,
        "seed": cfg.seed,
        "num_generations": cfg.group_size,
        "per_device_train_batch_size": cfg.prompts_per_step * cfg.group_size,
        "max_completion_length": cfg.max_response_length,
        "learning_rate": cfg.learning_rate,
        "beta": cfg.kl_coef,
        "temperature": cfg.temperature,
        "num_train_epochs": cfg.epochs,
        "max_steps": cfg.steps or -1,
        "use_cpu": on_cpu,
        "bf16": bool(bf16),
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "use_vllm": cfg.use_vllm,
        "logging_steps": cfg.logging_steps,
        "report_to": [name for name in cfg.logger if name != "console"],
        "save_strategy": "steps" if cfg.save_freq > 0 else "no",
        "disable_tqdm": True,  # the reward table is the console log
    }
    if cfg.save_freq > 0:
        settings["save_steps"] = cfg.save_freq
    if cfg.use_vllm:
        settings["vllm_mode"] = cfg.vllm_mode
        settings["vllm_gpu_memory_utilization"] = cfg.vllm_gpu_memory_utilization
        if cfg.max_prompt_length is not None:
            settings["vllm_max_model_length"] = cfg.max_prompt_length + cfg.max_response_length
    settings.update(cfg.trl_args)
    return settings


def async_grpo_settings(cfg: TRLTrainConfig, run_dir: Path) -> dict[str, Any]:
    """``AsyncGRPOConfig`` keyword arguments for ``mode: async``: the settings both trainers share, the
    server and ``max_staleness``, then ``trl_args`` on top. A step trains ``prompts_per_step`` groups
    (``token_budget: 0``: micro-batches of a fixed number of samples, as in sync mode), and the rollout queue
    holds what can still be trained (``max(max_staleness, 1)`` steps of samples), so the generator waits
    instead of producing samples that would only be dropped."""
    shared = grpo_settings(cfg.model_copy(update={"trl_args": {}}), run_dir)
    for name in ("beta", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization", "vllm_max_model_length"):
        shared.pop(name, None)
    per_step = cfg.prompts_per_step * cfg.group_size
    settings: dict[str, Any] = {
        **shared,
        "vllm_server_base_url": cfg.vllm_server_url,
        "max_staleness": cfg.max_staleness,
        "token_budget": 0,
        "queue_maxsize": max(cfg.max_staleness, 1) * per_step,
    }
    settings.update(cfg.trl_args)
    return settings


def check_trl_args(names: list[str], config_class: Any = None) -> None:
    """Every ``trl_args`` name must be a field of TRL's config class (``GRPOConfig``, or ``AsyncGRPOConfig``
    for ``mode: async``): a typo fails here, not as a TypeError."""
    import dataclasses

    if config_class is None:
        from trl import GRPOConfig

        config_class = GRPOConfig
    title = config_class.__name__
    known = [f.name for f in dataclasses.fields(config_class)]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ValueError(f"trl_args.{name}: not a {title} field; {hint}(TRL's {title} lists them)")


def grpo_config(cfg: TRLTrainConfig, run_dir: Path) -> Any:
    """TRL's ``GRPOConfig`` for the run, built (and so checked) by TRL itself."""
    from trl import GRPOConfig

    settings = grpo_settings(cfg, run_dir)
    check_trl_args(list(cfg.trl_args))
    try:
        return GRPOConfig(**settings)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"TRL's GRPOConfig rejected the settings: {exc}") from None


def async_grpo_config(cfg: TRLTrainConfig, run_dir: Path) -> Any:
    """TRL's ``AsyncGRPOConfig`` for a ``mode: async`` run, built (and so checked) by TRL itself."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    settings = async_grpo_settings(cfg, run_dir)
    check_trl_args(list(cfg.trl_args), AsyncGRPOConfig)
    try:
        return AsyncGRPOConfig(**settings)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"TRL's AsyncGRPOConfig rejected the settings: {exc}") from None


def episode_dump(cfg: TRLTrainConfig, run_dir: Path) -> DumpSettings | None:
    """Where and how often the run writes episodes for ``toolgym view`` (``<run dir>/episodes``), or None."""
    if cfg.dump_every is None:
        return None
    directory = str(Path(run_dir).resolve() / "episodes")
    return DumpSettings(directory=directory, every=cfg.dump_every, episodes=cfg.dump_episodes)


def build_trainer(cfg: TRLTrainConfig, run_dir: Path, callbacks: list[Any] | None = None) -> Any:
    """Dataset, rollout function and ``GRPOTrainer`` for the run (nothing trained yet); for ``mode: async``
    the ``ToolgymAsyncGRPOTrainer`` (:func:`build_async_trainer`)."""
    if cfg.mode == "async":
        return build_async_trainer(cfg, run_dir, callbacks)
    from transformers import AutoTokenizer, PrinterCallback
    from trl import GRPOTrainer

    from toolgym.rollout import EnvRequest
    from toolgym.rollout.models import resolve_model
    from toolgym.trainers.trl_adapter.data import prompt_dataset
    from toolgym.trainers.trl_adapter.rollout import env_reward, make_rollout_func

    args = grpo_config(cfg, run_dir)
    envs = [EnvRequest(id=e.id, kwargs=cfg.env_kwargs(e), weight=e.weight) for e in cfg.envs]
    rollout = make_rollout_func(
        envs,
        max_tokens_per_turn=cfg.max_tokens_per_turn,
        max_prompt_tokens=cfg.max_prompt_length,
        max_concurrent_episodes=cfg.max_concurrent_episodes,
        dump=episode_dump(cfg, run_dir),
        agent=cfg.agent,
    )
    model = resolve_model(cfg.model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[env_reward],
        args=args,
        train_dataset=prompt_dataset(envs, cfg.train_rows, seed=cfg.seed),
        processing_class=AutoTokenizer.from_pretrained(model),
        rollout_func=rollout,
        callbacks=[reward_table(), *(callbacks or [])],
    )
    trainer.remove_callback(PrinterCallback)  # the reward table replaces the log dict printed per step
    return trainer


def build_async_trainer(cfg: TRLTrainConfig, run_dir: Path, callbacks: list[Any] | None = None) -> Any:
    """``mode: async``: the dataset and TRL's ``AsyncGRPOTrainer`` with toolgym's episode runner, generating
    on the vLLM server at ``vllm_server_url`` (nothing trained yet; the server is first reached when training
    starts)."""
    from transformers import AutoTokenizer, PrinterCallback

    from toolgym.rollout import EnvRequest
    from toolgym.rollout.models import resolve_model
    from toolgym.trainers.trl_adapter.async_grpo import ToolgymAsyncGRPOTrainer
    from toolgym.trainers.trl_adapter.data import prompt_dataset

    args = async_grpo_config(cfg, run_dir)
    envs = [EnvRequest(id=e.id, kwargs=cfg.env_kwargs(e), weight=e.weight) for e in cfg.envs]
    model = resolve_model(cfg.model)
    trainer = ToolgymAsyncGRPOTrainer(
        model,
        args=args,
        train_dataset=prompt_dataset(envs, cfg.train_rows, seed=cfg.seed),
        processing_class=AutoTokenizer.from_pretrained(model),
        callbacks=[reward_table(columns=ASYNC_TABLE_COLUMNS), *(callbacks or [])],
        env=envs,
        max_tokens_per_turn=cfg.max_tokens_per_turn,
        max_prompt_tokens=cfg.max_prompt_length,
        max_concurrent_episodes=cfg.max_concurrent_episodes,
        dump=episode_dump(cfg, run_dir),
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def reward_table(out: Any = None, columns: Sequence[tuple[str, str, str]] = TABLE_COLUMNS) -> Any:
    """A ``TrainerCallback`` that prints one row per logged step (``columns``: ``TABLE_COLUMNS``, or
    ``ASYNC_TABLE_COLUMNS``) and keeps the rows."""
    from transformers import TrainerCallback

    class RewardTable(TrainerCallback):
        def __init__(self) -> None:
            self.rows: list[dict[str, float]] = []
            self.out = out or sys.stdout

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any
        ) -> None:
            if not logs or "reward" not in logs or not state.is_world_process_zero:
                return
            row = {"step": int(state.global_step), **{k: float(v) for k, v in logs.items() if _number(v)}}
            if not self.rows:
                print("  ".join(name for name, _, _ in columns), file=self.out)
            self.rows.append(row)
            cells = []
            for name, key, fmt in columns:
                value = row.get(key)
                cells.append(fmt.format(value) if value is not None else "-".rjust(len(name)))
            print("  ".join(cells), file=self.out, flush=True)

    return RewardTable()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def train(
    config: str | Path, *, out: str | Path | None = None, overrides: Sequence[str] = (), dry_run: bool = False
) -> int:
    """``toolgym train --trainer trl``: a GRPO run with TRL in this process, from the YAML at ``config`` and
    ``name=value`` overrides of its settings (``dry_run``: print the ``GRPOConfig`` it would use)."""
    cfg = apply_overrides(load_trl_config(config), tuple(overrides))
    run_dir = Path(out) if out else Path("runs") / (cfg.experiment or "toolgym")
    check_env_ids([env.id for env in cfg.envs])  # a misspelt id fails before TRL starts
    if dry_run:
        import yaml

        if cfg.mode == "async":
            settings = async_grpo_settings(cfg, run_dir.resolve())
            async_grpo_config(cfg, run_dir.resolve())
            title = "AsyncGRPOConfig"
        else:
            settings = grpo_settings(cfg, run_dir.resolve())
            grpo_config(cfg, run_dir.resolve())
            title = "GRPOConfig"
        print(yaml.safe_dump({title: settings}, sort_keys=False), end="")
        if cfg.use_vllm and settings.get("use_cpu"):
            print("note: no CUDA GPU here; use_vllm needs one for the real run", file=sys.stderr)
        where = f" on the vLLM server at {cfg.vllm_server_url}" if cfg.mode == "async" else ""
        print(
            f"dry run: TRL's {title} accepts the settings; a real run trains in this process{where} and "
            f"writes to {run_dir}",
            file=sys.stderr,
        )
        return 0
    trainer = build_trainer(cfg, run_dir)
    trainer.train()
    trainer.save_model(str(run_dir / "final"))
    if cfg.mode == "sync":
        trainer.rollout_func.close()
    print(f"saved the trained model to {run_dir / 'final'}", file=sys.stderr)
    return 0


__all__ = [
    "ASYNC_TABLE_COLUMNS",
    "TABLE_COLUMNS",
    "apply_overrides",
    "async_grpo_config",
    "async_grpo_settings",
    "build_async_trainer",
    "build_trainer",
    "grpo_config",
    "grpo_settings",
    "reward_table",
    "train",
]
