"""The same verl run with verl's own multi-turn loop (``ToolAgentLoop``) in place of toolgym's, for the
side-by-side benchmark (``benchmarks/bench_verl_native_loop.py``).

A ``toolgym train`` config of toolgym-debug/Probe-v0 (``examples/verl/learn-cpu.yaml``) runs unchanged but for
the loop: the same exported rows (their ``agent_name`` set to ``tool_agent``), model, batch, lengths and
seeds; the probe's tool and format as a verl function tool and tool parser (``verl_native_tools.py``: one
generated token a turn, a tool call on the first turn, the answer on the second); and the reward from verl's
reward loop through ``compute_score`` below (the native loop has no verifier; toolgym's loop hands verl its
verifier's reward). Set ``template_tools: true`` in the config for toolgym's run, so both loops render the
tool's schema into the prompt as verl's loop always does.

Run: ``python -m toolgym.testing.verl --native-loop --config CONFIG --out DIR``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

NATIVE_AGENT_NAME = "tool_agent"  # verl's ToolAgentLoop
TOOLS_FILE = Path(__file__).with_name("verl_native_tools.py")
#: the probe's format as a verl tool parser (``multi_turn.format``), registered by ``TOOLS_FILE``
PARSER_NAME = "toolgym_probe"
#: what the tiny model's chat template (ChatML) opens an assistant turn with, less its special tokens (verl's
#: reward loop decodes without them): the answer is what follows the last one
ASSISTANT_HEADER = "assistant\n"


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """Probe-v0's verifier for verl's reward loop, which sees only the decoded response: 1.0 when the answer
    turn (the text after the tool's response, so the probe was called) starts with ``s`` or ``t``."""
    from toolgym.testing.probe import TARGET_LETTERS, first_letter

    if ASSISTANT_HEADER not in solution_str:  # no second turn: the episode never answered
        return 0.0
    answer = solution_str.rsplit(ASSISTANT_HEADER, 1)[1]
    return float(first_letter(answer) in TARGET_LETTERS)


def native_overrides(max_turns: int) -> list[str]:
    """verl's keys that swap toolgym's loop for verl's own with the probe's tool, format and reward."""
    return [
        f"actor_rollout_ref.rollout.agent.default_agent_loop={NATIVE_AGENT_NAME}",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        f"actor_rollout_ref.rollout.multi_turn.format={PARSER_NAME}",
        f"actor_rollout_ref.rollout.multi_turn.function_tool_path={TOOLS_FILE}",
        f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={max_turns}",
        f"reward.custom_reward_function.path={Path(__file__).resolve()}",
        "reward.custom_reward_function.name=compute_score",
    ]


def route_rows(parquet: Path, agent_name: str) -> None:
    """Send every row of an exported Parquet to ``agent_name``'s loop (the row's column beats verl's
    default)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(parquet)
    column = table.schema.get_field_index("agent_name")
    table = table.set_column(column, "agent_name", pa.array([agent_name] * table.num_rows, pa.string()))
    pq.write_table(table, parquet)


def train_with_native_loop(config: str | Path, out: str | Path, overrides: list[str]) -> int:
    """``toolgym train --config CONFIG --out OUT -- OVERRIDES`` with verl's ``ToolAgentLoop`` playing the
    rows."""
    from toolgym.trainers.verl_adapter import launch

    cfg = launch.load_train_config(config)
    if cfg.max_turns is None:
        raise ValueError("set max_turns in the config: verl's loop ends an episode by its assistant turns")
    plan = launch.plan_run(cfg, out, [*native_overrides(cfg.max_turns), *overrides])
    launch.compose(plan.overrides)
    launch.prepare_run(cfg, plan)
    for parquet in (plan.train_file, plan.val_file):
        route_rows(parquet, NATIVE_AGENT_NAME)
    return launch.run_verl(plan.command, cwd=plan.run_dir, env=plan.env)


__all__ = ["compute_score", "native_overrides", "route_rows", "train_with_native_loop"]
