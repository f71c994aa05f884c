"""``toolgym train --trainer trl``: the YAML -> TRL ``GRPOConfig`` mapping, checked by TRL itself, and a real
run of the CPU example through the command line."""

from pathlib import Path

import pytest
import yaml

from toolgym.cli import main
from toolgym.trainers.trl_adapter.config import load_trl_config
from toolgym.trainers.trl_adapter.launch import apply_overrides, grpo_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "trl"
#: the synchronous trainer's examples (test_async_grpo.py checks the asynchronous ones against its config)
EXAMPLE_FILES = [p for p in sorted(EXAMPLES.glob("*.yaml")) if load_trl_config(p).mode == "sync"]


def _dry_run(capsys, config, *extra):
    code = main(["train", "--trainer", "trl", "--config", str(config), "--dry-run", *extra])
    captured = capsys.readouterr()
    return code, captured


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_is_accepted_by_trls_grpo_config(path, tmp_path, capsys):
    cfg = load_trl_config(path)
    args = grpo_config(cfg, tmp_path / "run")
    assert args.num_generations == cfg.group_size
    assert args.per_device_train_batch_size == cfg.prompts_per_step * cfg.group_size
    assert args.max_completion_length == cfg.max_response_length and args.learning_rate == cfg.learning_rate
    assert args.use_vllm is cfg.use_vllm and args.beta == cfg.kl_coef
    code, captured = _dry_run(capsys, path, "--out", str(tmp_path / "run"))
    assert code == 0, captured.err
    settings = yaml.safe_load(captured.out)["GRPOConfig"]
    assert settings["output_dir"] == str(tmp_path / "run") and "accepts the settings" in captured.err
    assert not (tmp_path / "run").exists(), "a dry run writes nothing"


def test_overrides_set_config_keys_or_grpo_fields(tmp_path, capsys):
    code, captured = _dry_run(capsys, EXAMPLES / "tiny-cpu.yaml", "--", "steps=3", "warmup_steps=2", "seed=7")
    assert code == 0, captured.err
    settings = yaml.safe_load(captured.out)["GRPOConfig"]
    assert settings["max_steps"] == 3 and settings["warmup_steps"] == 2 and settings["seed"] == 7
    assert settings["use_cpu"] is True and settings["bf16"] is False


@pytest.mark.parametrize(
    ("text", "override", "expected"),
    [
        ("group_sise: 4\n", [], ["group_sise: unknown key", "Did you mean `group_size`?", "trl_args"]),
        ("", ["warmup_stesp=2"], ["trl_args.warmup_stesp: not a GRPOConfig field", "warmup_steps"]),
        (
            "max_tokens_per_turn: 4096\n",
            [],
            ["max_tokens_per_turn (4096) is larger than max_response_length"],
        ),
        ("envs: [{id: toolgym/Calculatr-v0}]\n", [], ["unknown env 'toolgym/Calculatr-v0'", "Calculator-v0"]),
        (
            "prompts_per_step: 3\ngroup_size: 5\ntrl_args: {generation_batch_size: 7}\n",
            [],
            ["GRPOConfig rejected"],
        ),
        ("agent: nowhere.py:agent\n", [], ["agent: the agent", "no agent file at"]),
    ],
    ids=["unknown-key", "grpo-typo", "per-turn-budget", "unknown-env", "trl-check", "agent-file"],
)
def test_a_bad_config_fails_the_dry_run_with_the_fix(tmp_path, capsys, text, override, expected):
    path = tmp_path / "run.yaml"
    base = "model: tiny\ndevice: cpu\n"
    if "envs:" not in text:
        base += "envs: [{id: toolgym/Calculator-v0}]\n"
    path.write_text(base + text)
    code, captured = _dry_run(capsys, path, "--", *override)
    assert code == 2 and captured.err.startswith("toolgym train: error: ")
    for part in expected:
        assert part in captured.err


def test_override_values_are_validated_like_the_yaml():
    cfg = load_trl_config(EXAMPLES / "tiny-cpu.yaml")
    with pytest.raises(ValueError, match="name=value"):
        apply_overrides(cfg, ["steps"])
    with pytest.raises(ValueError, match="group_size"):
        apply_overrides(cfg, ["group_size=1"])


@pytest.mark.slow
def test_the_cpu_example_trains_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--trainer", "trl", "--config", str(EXAMPLES / "tiny-cpu.yaml"), "--out", str(out)]
    assert main([*args, "--", "steps=3", "train_rows=16"]) == 0
    captured = capsys.readouterr()
    table = [line.split() for line in captured.out.splitlines() if line.strip()]
    assert table[0][:2] == ["step", "reward"]
    assert [row[0] for row in table[1:]] == ["1", "2", "3"]
    assert all(0.0 <= float(row[1]) <= 1.0 for row in table[1:])
    assert (out / "final" / "config.json").exists() and "saved the trained model" in captured.err


def test_the_agent_key_reaches_the_rollout_function(tmp_path, monkeypatch):
    """``agent:`` (a path read from the config's folder) is loaded and checked with the config, and the run's
    rollout function plays it (tests/trainers/trl/test_agent_rollout.py trains one)."""
    from toolgym.trainers.trl_adapter import launch, rollout

    cfg = load_trl_config(EXAMPLES / "agent-cpu.yaml")
    assert cfg.agent == f"{EXAMPLES.parent / 'gateway_agent.py'}:agent"
    made = {}

    def make_rollout_func(envs, **kwargs):
        made.update(kwargs)
        raise KeyboardInterrupt  # stop before the trainer loads the model

    monkeypatch.setattr(rollout, "make_rollout_func", make_rollout_func)
    with pytest.raises(KeyboardInterrupt):
        launch.build_trainer(cfg, tmp_path / "run")
    assert made["agent"] == cfg.agent and made["max_tokens_per_turn"] == 32


def test_the_judge_key_goes_to_the_envs_that_take_a_judge(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "model: tiny\ndevice: cpu\nenvs: [{id: toolgym/Report-v0}, {id: toolgym/Calculator-v0}]\n"
        "max_turns: 3\njudge: {base_url: 'http://judge:8000/v1', model: j, max_concurrency: 4}\n"
    )
    cfg = load_trl_config(path)
    report, calculator = (cfg.env_kwargs(e) for e in cfg.envs)
    judge = {"base_url": "http://judge:8000/v1", "model": "j", "max_concurrency": 4, "group": False}
    assert report == {"max_turns": 3, "judge": judge}
    assert calculator == {"max_turns": 3}
