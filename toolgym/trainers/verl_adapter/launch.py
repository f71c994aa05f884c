"""``toolgym train``: a :class:`TrainConfig` YAML becomes ``python -m verl.trainer.main_ppo <overrides>`` (or,
with ``mode: one_step_off`` / ``mode: fully_async``, verl's experimental asynchronous trainer: ``ENTRIES``).

The overrides are derived, never hand-kept: one prompt/response length feeds ``data.*``, ``rollout.*`` and
``max_model_len``; the rollout is async vLLM driven by toolgym's agent loop (with ``agent:``, the gateway
loop, whose agent-loop YAML entry gets the agent and to which the exported rows are routed; an env entry's
own ``agent:`` routes that env's rows there, each naming its agent, and a mix trains both loops in one
batch); GRPO gets the KL loss verl's examples use, PPO a critic; an asynchronous mode gets a rollout pool of
its own and its batch keys (``mode_settings``). ``--dry-run`` composes the overrides against the mode's own
Hydra config in verl and runs verl's config checks, so a typo or an inconsistent batch size
fails in seconds on a laptop instead of minutes into a GPU job. A real run exports the train/val Parquet
into the run dir, then runs verl in a child process whose output streams through and whose exit status is
the command's.

It is one file of some 600 lines because it is one derivation: the config, the plan of overrides it yields,
the checks against verl's Hydra config and the run are read together when verl changes a key; the command
line itself is ``toolgym.cli.train``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import re
import shlex
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from toolgym.trainers.verl_adapter import (
    AGENT_NAME,
    GATEWAY_AGENT_NAME,
    agent_loop_config_path,
    verl_modules_env,
)
from toolgym.trainers.verl_adapter.config import Mode, TrainConfig, load_train_config


@dataclass(frozen=True)
class Entry:
    """A verl trainer: the module ``python -m`` runs and the Hydra config it composes (``config_name`` in
    ``config_dir``, a folder of the verl package)."""

    module: str
    config_dir: str
    config_name: str


#: the verl trainer of each ``mode``: PPO's own, and verl's two experimental asynchronous ones
ENTRIES: dict[Mode, Entry] = {
    "sync": Entry("verl.trainer.main_ppo", "trainer/config", "ppo_trainer"),
    "one_step_off": Entry(
        "verl.experimental.one_step_off_policy.main_ppo",
        "experimental/one_step_off_policy/config",
        "one_step_off_ppo_trainer",
    ),
    "fully_async": Entry(
        "verl.experimental.fully_async_policy.fully_async_main",
        "experimental/fully_async_policy/config",
        "fully_async_ppo_trainer",
    ),
}
#: the sync mode's entry module
VERL_ENTRY = ENTRIES["sync"].module
#: imported by verl in every process of an asynchronous run: fixes its trainers need (``async_compat.py``)
ASYNC_COMPAT_MODULE = "toolgym.trainers.verl_adapter.async_compat"


@dataclass(frozen=True)
class RunPlan:
    """Everything a run needs, decided before anything is written: paths and the full override list."""

    run_dir: Path
    train_file: Path
    val_file: Path
    #: the shipped agent-loop YAML, or ``<run_dir>/agent_loops.yaml`` when the config sets loop kwargs
    agent_loop_path: Path
    agent_loop_kwargs: dict[str, int | bool | str]
    attn_implementation: str
    overrides: list[str] = field(default_factory=list)
    #: environment the verl process needs on top of ours: toolgym's verl modules
    #: (``VERL_USE_EXTERNAL_MODULES``) and, for ``device: cpu``, verl's CPU platform
    env: dict[str, str] = field(default_factory=dict)
    #: the config's ``mode``: which verl trainer runs (``ENTRIES``)
    mode: Mode = "sync"

    @property
    def entry(self) -> Entry:
        return ENTRIES[self.mode]

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", self.entry.module, *self.overrides]


def plan_run(
    cfg: TrainConfig, run_dir: str | Path, extra_overrides: list[str] | tuple[str, ...] = ()
) -> RunPlan:
    """Resolve the model, paths and attention kernels, and build verl's overrides (extras win)."""
    from toolgym.rollout.models import resolve_model

    check_env_ids(cfg)
    run_dir = Path(run_dir).resolve()
    kwargs: dict[str, int | bool | str] = dict(cfg.agent_loop_kwargs())
    if cfg.dump_every is not None:  # episodes for `toolgym view`, where every worker can write
        kwargs["dump_dir"] = str(run_dir / "episodes")
    agent_loop_path = run_dir / "agent_loops.yaml" if kwargs else Path(agent_loop_config_path())
    model = resolve_model(cfg.model)
    if Path(model).expanduser().exists():  # Ray workers do not share the launcher's cwd
        model = str(Path(model).expanduser().resolve())
    attn = resolve_attn_implementation(cfg.attn_implementation)
    plan = RunPlan(
        run_dir=run_dir,
        train_file=run_dir / "train.parquet",
        val_file=run_dir / "val.parquet",
        agent_loop_path=agent_loop_path,
        agent_loop_kwargs=kwargs,
        attn_implementation=attn,
        mode=cfg.mode,
    )
    ours = build_overrides(cfg, plan, model)
    modules = (ASYNC_COMPAT_MODULE,) if cfg.mode != "sync" else ()
    env = verl_modules_env(*modules)
    if cfg.device == "cpu":
        from toolgym.trainers.verl_adapter.cpu import cpu_env, cpu_overrides

        env = cpu_env(modules=modules)
        knobs = cfg.async_training
        cpu = cpu_overrides(
            cfg.gpus_per_node,
            cfg.nodes,
            cfg.tensor_parallel_size,
            mode=cfg.mode,
            rollout_gpus_per_node=(knobs.rollout_gpus_per_node or 0) if knobs else 0,
            rollout_nodes=knobs.rollout_nodes if knobs else 1,
        )
        ours = merge_overrides(ours, cpu)
    # the verl process gets ``env``; Ray workers on other nodes (started by `ray start` there, with that
    # shell's environment) get it through the runtime env: toolgym's modules, and on CPU the platform's
    for name, value in env.items():
        ours.append(f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}={hydra_value(value)}")
    overrides = merge_overrides(ours, [*cfg.verl_overrides, *extra_overrides])
    return replace(plan, overrides=overrides, env=env)


def build_overrides(cfg: TrainConfig, plan: RunPlan, model: str) -> list[str]:
    """verl's keys from the toolgym config: one place that keeps lengths, batch sizes and paths in step."""
    prompt, response = cfg.max_prompt_length, cfg.max_response_length
    micro = cfg.micro_batch_size_per_gpu
    checkpoints = (
        Path(cfg.checkpoint_dir).expanduser().resolve()
        if cfg.checkpoint_dir
        else plan.run_dir / "checkpoints"
    )
    grpo = cfg.algorithm == "grpo"
    settings: dict[str, Any] = {
        "algorithm.adv_estimator": "grpo" if grpo else "gae",
        "algorithm.use_kl_in_reward": False,
        # data: the Parquet written by `toolgym export verl`; raw chat so the agent loop gets the messages
        "data.train_files": str(plan.train_file),
        "data.val_files": str(plan.val_file),
        "data.train_batch_size": cfg.train_batch_size,
        "data.max_prompt_length": prompt,
        "data.max_response_length": response,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.return_raw_chat": True,
        # the policy: FSDP, remove-padding and gradient checkpointing as in verl's GRPO examples
        "actor_rollout_ref.model.path": model,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        "+actor_rollout_ref.model.override_config.attn_implementation": plan.attn_implementation,
        "actor_rollout_ref.actor.optim.lr": cfg.learning_rate,
        "actor_rollout_ref.actor.ppo_mini_batch_size": cfg.ppo_mini_batch_size or cfg.train_batch_size,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.actor.use_kl_loss": grpo and cfg.kl_loss_coef > 0,
        "actor_rollout_ref.actor.kl_loss_coef": cfg.kl_loss_coef,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff": 0,
        "actor_rollout_ref.actor.fsdp_config.param_offload": False,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.ref.fsdp_config.param_offload": True,
        # the rollout: async vLLM server, toolgym's agent loop, one length budget everywhere
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.n": cfg.group_size,
        "actor_rollout_ref.rollout.temperature": cfg.temperature,
        "actor_rollout_ref.rollout.prompt_length": prompt,
        "actor_rollout_ref.rollout.response_length": response,
        "actor_rollout_ref.rollout.max_model_len": prompt + response,
        "actor_rollout_ref.rollout.max_num_batched_tokens": max(8192, prompt + response),
        "actor_rollout_ref.rollout.tensor_model_parallel_size": cfg.tensor_parallel_size,
        "actor_rollout_ref.rollout.gpu_memory_utilization": cfg.gpu_memory_utilization,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(plan.agent_loop_path),
        "actor_rollout_ref.rollout.agent.default_agent_loop": cfg.agent_loop_name,
        # the trainer
        "trainer.nnodes": cfg.nodes,
        "trainer.n_gpus_per_node": cfg.gpus_per_node,
        "trainer.logger": list(cfg.logger),
        "trainer.project_name": cfg.project,
        "trainer.experiment_name": cfg.experiment or "toolgym",
        "trainer.default_local_dir": str(checkpoints),
        "trainer.total_epochs": cfg.epochs,
        "trainer.save_freq": cfg.checkpoint_every,
        "trainer.test_freq": cfg.test_freq,
        "trainer.val_before_train": cfg.val_before_train,
        "trainer.critic_warmup": 0,
    }
    if cfg.steps is not None:
        settings["trainer.total_training_steps"] = cfg.steps
    if not grpo:  # PPO: a critic of the same model, as in verl's PPO examples
        settings |= {
            "critic.model.path": model,
            # the actor's attention kernels (compat.py makes verl's critic loader honour this)
            "+critic.model.override_config.attn_implementation": plan.attn_implementation,
            "critic.model.use_remove_padding": True,
            "critic.model.enable_gradient_checkpointing": True,
            "critic.optim.lr": cfg.critic_learning_rate,
            "critic.ppo_micro_batch_size_per_gpu": micro,
        }
    settings |= mode_settings(cfg)
    return [f"{key}={hydra_value(value)}" for key, value in settings.items()]


def mode_settings(cfg: TrainConfig) -> dict[str, Any]:
    """An asynchronous mode's keys (on top of ``build_overrides``'s): the rollout's own pool of GPUs and, for
    fully_async, its batch semantics. Nothing for ``sync``.

    fully_async streams: its rollouter takes one prompt at a time (``gen_batch_size`` 1, ``train_batch_size``
    0, both asserted in verl) and queues its group; the trainer takes ``ppo_mini_batch_size`` x
    ``require_batches`` groups per training step (here ``train_batch_size``, so a training step is as many
    prompts as in the sync mode, in ``train_batch_size / ppo_mini_batch_size`` updates) and syncs the weights
    every ``trigger_parameter_sync_step`` training steps, a step of its logs. ``rollout.total_rollout_steps``
    counts prompts: ``steps`` syncs' worth (none: the epochs over the rows)."""
    if cfg.mode == "sync":
        return {}
    knobs = cfg.async_training
    assert knobs is not None  # TrainConfig requires it for an asynchronous mode
    settings: dict[str, Any] = {
        "actor_rollout_ref.hybrid_engine": False,  # the trainer's workers hold no rollout
        "rollout.nnodes": knobs.rollout_nodes,
        "rollout.n_gpus_per_node": knobs.rollout_gpus_per_node,
    }
    if cfg.mode == "one_step_off":
        # one_step_off_ppo_trainer.yaml finds ppo_trainer at `file://verl/trainer/config`, a path relative to
        # the working directory (verl's source tree); the package path finds it from anywhere
        return settings | {"hydra.searchpath": ["pkg://verl.trainer.config"]}
    prompts_per_sync = cfg.train_batch_size * knobs.trigger_parameter_sync_step
    return settings | {
        "data.train_batch_size": 0,
        "data.gen_batch_size": 1,
        "async_training.require_batches": cfg.train_batch_size // cfg.mini_batch_size,
        "async_training.trigger_parameter_sync_step": knobs.trigger_parameter_sync_step,
        "async_training.staleness_threshold": knobs.staleness_threshold,
        "async_training.partial_rollout": knobs.partial_rollout,
        "rollout.total_rollout_steps": cfg.steps * prompts_per_sync if cfg.steps is not None else None,
        # verl/experimental/fully_async_policy/detach_utils.py:66 gives every row verl's single_turn_agent
        # unless multi_turn is on (nothing else reads the flag): the rows name toolgym's loops
        "actor_rollout_ref.rollout.multi_turn.enable": True,
    }


def merge_overrides(ours: list[str], theirs: list[str]) -> list[str]:
    """Append the user's overrides; drop ours for any key they set, so the printed command has one value."""
    taken = {override_key(o) for o in theirs}
    return [o for o in ours if override_key(o) not in taken] + list(theirs)


def override_key(override: str) -> str:
    """``+a.b=1`` / ``++a.b=1`` / ``~a.b`` / ``a.b=1`` -> ``a.b``."""
    return override.split("=", 1)[0].lstrip("+~")


_PLAIN = re.compile(r"[A-Za-z0-9_./:+\-@]+")


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar; strings are quoted unless Hydra would read them as is."""
    if isinstance(value, bool):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and not _looks_typed(text):
        return text
    # in Hydra's quoted strings a backslash is literal except in a run before a quote or the end
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m[1] * 2 + ("\\'" if m[2] else ""), text) + "'"


def _looks_typed(text: str) -> bool:
    if text.lower() in ("true", "false", "null", "nan", "inf", "-inf", "+inf"):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def format_command(plan: RunPlan) -> str:
    """The command, one override per line, ready to paste into a shell."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items())
    head = f"{env} {shlex.quote(sys.executable)}" if env else shlex.quote(sys.executable)
    lines = [f"{head} -m {plan.entry.module}", *(shlex.quote(o) for o in plan.overrides)]
    return " \\\n    ".join(lines)


def check_env_ids(cfg: TrainConfig) -> None:
    """A misspelt env id fails here, not in a Ray worker minutes into the run."""
    from toolgym.rollout.keys import check_env_ids as check

    check([env.id for env in cfg.envs])


def resolve_attn_implementation(choice: str) -> str:
    """``auto``: flash_attention_2 where flash-attn is importable (verl's default), else PyTorch's sdpa.

    verl 0.9.1 builds the actor's HF config with ``override_config.attn_implementation`` (default
    flash_attention_2), which fails without the flash-attn package. With remove-padding verl packs sequences
    and passes only position ids; transformers (>= 4.54) turns those into a per-sequence causal mask for sdpa.
    """
    if choice != "auto":
        return choice
    return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"


# -- composing against verl's own config ------------------------------------------------------------------


def verl_config_dir(mode: Mode = "sync") -> Path:
    """The folder of the mode's Hydra config in the installed verl package."""
    try:
        import verl
    except ImportError as exc:
        raise ValueError(
            f"toolgym train needs verl ({exc}): pip install -e '.[gpu]' on a CUDA machine (docs/training.md: "
            "Install on a CUDA machine), or `make test`'s CPU install for --dry-run"
        ) from None
    return Path(verl.__file__).resolve().parent / ENTRIES[mode].config_dir


def compose(overrides: list[str], mode: Mode = "sync") -> Any:
    """The mode's verl config (``ppo_trainer``, or an asynchronous trainer's, which extends it) with the
    overrides applied, checked as verl's entry checks it.

    Uses Hydra's compose API on verl's packaged config dir: every key must exist in verl's schema (a typo
    is Hydra's error), then verl's ``validate_config`` (batch divisibility, micro batch sizes, critic) and the
    rollout dataclass run, and finally toolgym's own consistency checks. No GPU, no Ray, nothing written.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    entry = ENTRIES[mode]
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir(mode)), version_base=None):
            cfg = hydra_compose(config_name=entry.config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        cause = f"\n  cause: {exc.__cause__}" if exc.__cause__ and str(exc.__cause__) not in str(exc) else ""
        raise ValueError(
            f"verl's config rejected an override: {exc}{cause}\n"
            "  every key must exist in verl's config (verl/trainer/config/_generated_ppo_trainer.yaml lists "
            "them all"
            + ("" if mode == "sync" else f", verl/{entry.config_dir}/{entry.config_name}.yaml the mode's own")
            + "); fix the key in verl_overrides or after `--`, or prefix it with + to add a new one"
        ) from None
    check_types(cfg, overrides, _verl_defaults(mode))
    _verl_checks(cfg, mode)
    check_consistency(cfg, mode)
    return cfg


@functools.cache
def _verl_defaults(mode: Mode = "sync") -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    # one_step_off's own YAML finds ppo_trainer only from verl's source tree (see mode_settings)
    path = ["hydra.searchpath=[pkg://verl.trainer.config]"] if mode == "one_step_off" else []
    with initialize_config_dir(config_dir=str(verl_config_dir(mode)), version_base=None):
        return hydra_compose(config_name=ENTRIES[mode].config_name, overrides=path)


def check_types(cfg: Any, overrides: list[str], defaults: Any) -> None:
    """verl's YAML has no type schema, so ``data.train_batch_size=lots`` composes; catch it by the default's
    type here rather than as a baffling error deep in verl's checks."""
    from omegaconf import OmegaConf

    for override in overrides:
        key = override_key(override)
        try:
            default = OmegaConf.select(defaults, key, throw_on_missing=False)
            value = OmegaConf.select(cfg, key, throw_on_missing=False)
        except Exception:  # an interpolation that only resolves at run time: nothing to compare
            continue
        if isinstance(default, bool | int | float) and isinstance(value, str):
            kind = {bool: "true/false", int: "an integer", float: "a number"}[type(default)]
            raise ValueError(f"{key} must be {kind} (verl's default is {default!r}), got {value!r}")


def _verl_checks(cfg: Any, mode: Mode = "sync") -> None:
    """``main_ppo``'s own ``validate_config``, on a copy whose critic has no model attached: building the
    critic's dataclass would otherwise load the model's tokenizer and config (a download; a hang offline).

    fully_async's entry runs none (its ``data.train_batch_size`` is 0, which the batch checks refuse): the
    copy gets the batch one of its training steps trains on (``ppo_mini_batch_size`` x ``require_batches``
    prompts), which is what those checks are about."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    checked = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    checked.critic.model = None
    if mode == "fully_async":
        mini_batch = cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        checked.data.train_batch_size = mini_batch * cfg.async_training.require_batches
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validate_config(
                checked, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
            )
            omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    except (AssertionError, ValueError, TypeError) as exc:
        raise ValueError(f"verl's config checks failed: {exc}") from None


def check_consistency(cfg: Any, mode: Mode = "sync") -> None:
    """What toolgym's agent loop (and an asynchronous mode) relies on, re-checked after the user's overrides
    had their say."""
    rollout, data = cfg.actor_rollout_ref.rollout, cfg.data
    problems = []
    if mode != "sync":
        if cfg.actor_rollout_ref.hybrid_engine:
            problems.append(
                f"actor_rollout_ref.hybrid_engine is True; mode {mode} rolls out on GPUs of its own"
            )
        if not rollout.calculate_log_probs:
            problems.append(
                f"rollout.calculate_log_probs is False; mode {mode} trains on the rollout's logprobs"
            )
        if rollout.checkpoint_engine.backend == "naive":
            problems.append(
                "rollout.checkpoint_engine.backend is naive, which syncs a rollout in the trainer's own "
                f"processes only; mode {mode} needs nccl on GPUs (verl's default here), gloo on a CPU"
            )
    if mode == "fully_async" and not rollout.multi_turn.enable:
        problems.append(
            "rollout.multi_turn.enable is False; fully_async then plays every row with verl's single-turn "
            "loop"
        )
    if rollout.prompt_length != data.max_prompt_length:
        problems.append(
            f"rollout.prompt_length ({rollout.prompt_length}) != data.max_prompt_length "
            f"({data.max_prompt_length})"
        )
    if rollout.response_length != data.max_response_length:
        problems.append(
            f"rollout.response_length ({rollout.response_length}) != data.max_response_length "
            f"({data.max_response_length})"
        )
    if (
        rollout.max_model_len is not None
        and rollout.max_model_len < rollout.prompt_length + rollout.response_length
    ):
        problems.append(
            f"rollout.max_model_len ({rollout.max_model_len}) < prompt_length + response_length "
            f"({rollout.prompt_length + rollout.response_length})"
        )
    if rollout.mode != "async":
        problems.append(f"rollout.mode is {rollout.mode!r}; agent loops need async")
    if not data.return_raw_chat:
        problems.append("data.return_raw_chat is False; the agent loop needs the raw messages")
    if problems:
        raise ValueError(
            "inconsistent verl overrides: "
            + "; ".join(problems)
            + ". Set max_prompt_length / max_response_length (and mode) in the toolgym config instead of "
            "overriding them"
        )


# -- a real run ----------------------------------------------------------------------------------------------


def prepare_run(cfg: TrainConfig, plan: RunPlan) -> None:
    """Write what verl will read: the agent-loop YAML (when customised) and the train/val Parquet (each row
    routed to the loop that plays its env: toolgym's runner, or the gateway loop with the env's agent)."""
    from toolgym.rollout.keys import EnvRequest, Split
    from toolgym.trainers.verl_adapter.export import export_verl

    plan.run_dir.mkdir(parents=True, exist_ok=True)
    if plan.agent_loop_kwargs:
        write_agent_loop_config(plan.agent_loop_path, plan.agent_loop_kwargs, cfg.agent_loops)
    envs = [EnvRequest(id=e.id, kwargs=cfg.env_kwargs(e), weight=e.weight) for e in cfg.envs]
    agents = [cfg.env_agent(e) for e in cfg.envs]
    splits: tuple[tuple[Split, int, Path], ...] = (
        ("train", cfg.train_rows, plan.train_file),
        ("val", cfg.val_rows, plan.val_file),
    )
    for split, n, path in splits:
        written = Path(export_verl(envs, n=n, split=split, out=plan.run_dir, seed=cfg.seed, agents=agents))
        if written.resolve() != path:
            raise RuntimeError(f"export_verl wrote {written}, expected {path}")
        check_prompt_lengths(written, cfg)
        print(f"exported {n} {split} rows to {written}", file=sys.stderr)
    (plan.run_dir / "command.sh").write_text(format_command(plan) + "\n")


def check_prompt_lengths(parquet: Path, cfg: TrainConfig) -> None:
    """Fail before training when a prompt is longer than ``max_prompt_length``: verl's overlong filter would
    drop those rows silently (and without it, the samples would fail)."""
    from toolgym.trainers.verl_adapter.export import prompt_token_lengths

    # the rows an agent program plays always render the tools (prompt_token_lengths reads their agent_name)
    lengths = prompt_token_lengths(parquet, cfg.model, template_tools=bool(cfg.template_tools))
    over = [n for n in lengths if n > cfg.max_prompt_length]
    if over:
        raise ValueError(
            f"{len(over)} of {len(lengths)} rows in {parquet.name} have prompts longer than "
            f"max_prompt_length={cfg.max_prompt_length} (the longest has {max(over)} tokens): raise "
            "max_prompt_length"
        )


#: (setting, loop) pairs a run's settings skip: ToolgymAgentLoop takes no agent, and the gateway loop always
#: renders tools
_NOT_FOR = {("agent", AGENT_NAME), ("template_tools", GATEWAY_AGENT_NAME)}


def write_agent_loop_config(
    path: Path, kwargs: dict[str, int | bool | str], name: str | Sequence[str] = AGENT_NAME
) -> None:
    """A copy of the shipped agent-loop YAML with this run's kwargs for the loop ``name`` (or each of several
    names: Hydra passes them to the loop). ``agent`` goes to the gateway loop only (the agent of the rows
    that name none), ``template_tools`` to toolgym's runner only (the gateway loop always renders tools)."""
    import yaml

    names = [name] if isinstance(name, str) else list(name)
    entries = yaml.safe_load(Path(agent_loop_config_path()).read_text())
    for wanted in names:
        entry = next((e for e in entries if e.get("name") == wanted), None)
        if entry is None:
            raise RuntimeError(f"the shipped agent-loop YAML has no {wanted!r} entry")
        entry.update({k: v for k, v in kwargs.items() if (k, wanted) not in _NOT_FOR})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(entries, sort_keys=False))


def missing_weight_sync(composed: Any) -> str | None:
    """Why an asynchronous mode's weight sync cannot start here, if it cannot: verl's ``nccl`` checkpoint
    engine (the default on GPUs) imports cupy, which ``verl[vllm]`` does not install, and verl would only
    find out once every worker has started."""
    rollout = composed.actor_rollout_ref.rollout
    if composed.actor_rollout_ref.hybrid_engine or rollout.checkpoint_engine.backend != "nccl":
        return None
    if importlib.util.find_spec("cupy") is not None:
        return None
    return (
        "verl's nccl checkpoint engine, which syncs the weights of an asynchronous mode on GPUs, needs cupy: "
        "pip install 'verl[cupy-cu130]==0.9.1' (or the cupy build of your CUDA)"
    )


def run_training(cfg: TrainConfig, plan: RunPlan) -> int:
    """Compose first (fail before exporting anything), export, then run verl with its output streaming."""
    problem = missing_weight_sync(compose(plan.overrides, plan.mode))
    if problem:
        raise ValueError(problem)
    prepare_run(cfg, plan)
    print(f"running verl (command in {plan.run_dir / 'command.sh'})", file=sys.stderr, flush=True)
    return run_verl(plan.command, cwd=plan.run_dir, env=plan.env)


def run_verl(command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> int:
    """verl in a child process: its output streams through, a table of the training steps follows it
    (``progress.py``), and its exit status is ours. It runs in the run dir (every path in the command is
    absolute), where Hydra writes its ``outputs/`` logs, with ``env`` added to ours."""
    from toolgym.trainers.verl_adapter.progress import run_and_summarize

    child_env = {**os.environ, **env} if env else None
    return run_and_summarize(command, cwd=cwd, env=child_env)


# -- the command ---------------------------------------------------------------------------------------------


def train(
    config: str | Path, *, out: str | Path | None = None, overrides: Sequence[str] = (), dry_run: bool = False
) -> int:
    """``toolgym train`` with verl: plan the run from the YAML at ``config``, then run it (``dry_run``: print
    the verl command, checked against verl's config, and write nothing)."""
    cfg = load_train_config(config)
    run_dir = Path(out) if out else Path("runs") / (cfg.experiment or "toolgym")
    plan = plan_run(cfg, run_dir, list(overrides))
    if cfg.nodes > 1:
        print(
            f"note: {cfg.nodes} nodes: start Ray on every node first (docs/training.md), and keep "
            f"{plan.run_dir} on a filesystem every node sees at the same path (verl's workers read the data "
            "and agent-loop YAML)",
            file=sys.stderr,
        )
    if not dry_run:
        return run_training(cfg, plan)
    composed = compose(plan.overrides, plan.mode)
    print(format_command(plan))
    notes = [f"dry run: verl's config accepts all {len(plan.overrides)} overrides; nothing was written"]
    problem = missing_weight_sync(composed)
    if problem:
        notes.append(f"a real run here would stop: {problem}")
    notes.append(f"a real run exports {plan.train_file.name} and {plan.val_file.name} into {plan.run_dir}")
    if plan.agent_loop_kwargs:
        notes.append(f"and writes {plan.agent_loop_path.name} there with {plan.agent_loop_kwargs}")
    if cfg.attn_implementation == "auto" and plan.attn_implementation != "flash_attention_2":
        notes.append(
            "flash-attn is not installed here, so the trainer uses sdpa attention "
            "(docs/training.md: Install on a CUDA machine)"
        )
    print("\n".join(notes), file=sys.stderr)
    return 0
