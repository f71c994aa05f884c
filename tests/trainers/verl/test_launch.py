"""``toolgym train``: the YAML -> verl overrides mapping, composed against verl's real Hydra config.

Every example config is composed once with Hydra's compose API on verl's packaged config (an override verl
does not know fails there) and put through verl's own ``validate_config``; the CLI path is exercised for the
dry run, a typo, and a real run whose final ``python -m verl.trainer.main_ppo`` is replaced (no GPU here).
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from toolgym.cli import main
from toolgym.trainers.verl_adapter import agent_loop_config_path, launch
from toolgym.trainers.verl_adapter.config import load_train_config
from toolgym.trainers.verl_adapter.cpu import cpu_env

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "verl"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
MATH = "model: m\nenvs: [{id: toolgym/Math-v0}]\n"


def _write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _command_env(stdout: str) -> dict[str, str]:
    """The environment assignments in front of the printed command."""
    tokens = shlex.split(stdout.replace("\\\n", " "))
    return dict(t.split("=", 1) for t in tokens[: tokens.index("-m") - 1])


def _command_overrides(stdout: str) -> list[str]:
    """The overrides of the printed command, parsed as a shell would."""
    tokens = shlex.split(stdout.replace("\\\n", " "))
    start = tokens.index("-m")
    assert tokens[start : start + 2] == ["-m", "verl.trainer.main_ppo"]
    return tokens[start + 2 :]


def test_the_examples_cover_every_documented_run():
    names = {p.stem for p in EXAMPLE_FILES}
    assert {"math", "python-code", "search", "mixed", "tiny-cpu", "learn-cpu", "learn-ppo-cpu"} <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_composes_against_verls_config(path, tmp_path):
    cfg = load_train_config(path)
    plan = launch.plan_run(cfg, tmp_path / "run")
    composed = launch.compose(plan.overrides, plan.mode)

    rollout, data = composed.actor_rollout_ref.rollout, composed.data
    assert (rollout.name, rollout.mode) == ("vllm", "async")
    assert (
        rollout.agent.default_agent_loop
        == cfg.agent_loop_name
        == ("toolgym_agent" if cfg.agent else "toolgym")
    )
    expected_loop = (
        tmp_path / "run" / "agent_loops.yaml" if cfg.agent_loop_kwargs() else agent_loop_config_path()
    )
    assert Path(rollout.agent.agent_loop_config_path) == Path(expected_loop)
    assert data.return_raw_chat is True
    assert data.max_prompt_length == rollout.prompt_length == cfg.max_prompt_length
    assert data.max_response_length == rollout.response_length == cfg.max_response_length
    assert rollout.max_model_len >= cfg.max_prompt_length + cfg.max_response_length
    assert Path(data.train_files) == tmp_path / "run" / "train.parquet"
    assert Path(data.val_files) == tmp_path / "run" / "val.parquet"
    # fully_async's rollouter takes one prompt at a time (its trainer, train_batch_size from the queue)
    batch = 0 if cfg.mode == "fully_async" else cfg.train_batch_size
    assert data.train_batch_size == batch and rollout.n == cfg.group_size
    assert composed.algorithm.adv_estimator == {"grpo": "grpo", "ppo": "gae"}[cfg.algorithm]
    assert composed.actor_rollout_ref.actor.use_kl_loss is (cfg.algorithm == "grpo" and cfg.kl_loss_coef > 0)
    assert composed.trainer.n_gpus_per_node == cfg.gpus_per_node and composed.trainer.nnodes == cfg.nodes
    assert composed.actor_rollout_ref.model.override_config.attn_implementation in (
        "flash_attention_2",
        "sdpa",
    )
    if cfg.algorithm == "ppo":  # the critic attends as the actor does (compat.py makes verl honour it)
        critic_attention = composed.critic.model.override_config.attn_implementation
        assert critic_attention == composed.actor_rollout_ref.model.override_config.attn_implementation
    assert Path(composed.actor_rollout_ref.model.path).exists() == (cfg.model == "tiny")
    assert not (tmp_path / "run").exists(), "planning and composing must write nothing"


def test_cli_dry_run_prints_the_command_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--config", str(EXAMPLES / "math.yaml"), "--dry-run", "--out", str(out)]
    assert main([*args, "--", "trainer.save_freq=7", "+trainer.extra_note=hello"]) == 0

    captured = capsys.readouterr()
    overrides = _command_overrides(captured.out)
    keys = [launch.override_key(o) for o in overrides]
    assert len(keys) == len(set(keys)), "each key is set once"
    assert "trainer.save_freq=7" in overrides and "trainer.save_freq=-1" not in overrides
    assert overrides[-1] == "+trainer.extra_note=hello"
    assert f"data.train_files={out / 'train.parquet'}" in overrides
    assert "actor_rollout_ref.rollout.max_model_len=3072" in overrides
    assert "accepts all" in captured.err
    assert not out.exists()
    # toolgym's verl compat module is imported in the verl process and, via Ray's runtime env, in every worker
    modules = _command_env(captured.out)["VERL_USE_EXTERNAL_MODULES"]
    assert "toolgym.trainers.verl_adapter.compat" in modules.split(",")
    assert (
        f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={launch.hydra_value(modules)}"
        in overrides
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        # a key verl does not have: Hydra's own error, with the fix
        ("actor_rollout_ref.rollout.nme=vllm", ["rejected an override", "rollout.nme", "prefix it with +"]),
        # a value of the wrong type (verl's YAML has no schema, so Hydra alone would accept it)
        ("data.train_batch_size=lots", ["data.train_batch_size must be an integer", "'lots'"]),
    ],
    ids=["unknown-key", "wrong-type"],
)
def test_a_bad_override_fails_the_dry_run_with_a_clear_message(tmp_path, capsys, override, expected):
    args = ["train", "--config", str(EXAMPLES / "math.yaml"), "--dry-run", "--out", str(tmp_path)]
    assert main([*args, "--", override]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("toolgym train: error: ")
    assert captured.out == ""
    for part in expected:
        assert part in captured.err


def test_verls_own_checks_run_in_the_dry_run(tmp_path):
    # 3 prompts x 1 sample cannot be split over 2 GPUs: verl's validate_config says so before any GPU starts
    # (toolgym's config refuses train_batch_size: 3 itself; an override reaches verl unchecked)
    text = "model: tiny\nenvs: [{id: toolgym/Calculator-v0}]\ntrain_batch_size: 4\ngroup_size: 1\n"
    text += "gpus_per_node: 2\nmicro_batch_size_per_gpu: 1\n"
    cfg = load_train_config(_write(tmp_path, text))
    plan = launch.plan_run(cfg, tmp_path / "run", ["data.train_batch_size=3"])
    with pytest.raises(ValueError, match=r"verl's config checks failed: real_train_batch_size \(3\)"):
        launch.compose(plan.overrides)


def test_overriding_one_length_alone_is_refused(tmp_path):
    plan = launch.plan_run(
        load_train_config(EXAMPLES / "math.yaml"), tmp_path, ["data.max_response_length=4096"]
    )
    with pytest.raises(
        ValueError, match=r"response_length \(2048\) != data.max_response_length \(4096\).*toolgym"
    ):
        launch.compose(plan.overrides)


def test_awkward_strings_reach_verl_unchanged(tmp_path):
    text = (
        "model: tiny\nenvs: [{id: toolgym/Calculator-v0}]\nexperiment: 'run 1, take=2'\nproject: '1.5'\n"
        f"checkpoint_dir: '{tmp_path}/my ckpts'\nlogger: console\n"
    )
    composed = launch.compose(
        launch.plan_run(load_train_config(_write(tmp_path, text)), tmp_path / "r").overrides
    )
    assert composed.trainer.experiment_name == "run 1, take=2"
    assert composed.trainer.project_name == "1.5"
    assert composed.trainer.default_local_dir == f"{tmp_path}/my ckpts"
    assert list(composed.trainer.logger) == ["console"]


def test_hydra_reads_back_every_string_the_launcher_writes():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in [
        "Qwen/Qwen2.5-1.5B-Instruct",
        "a b, c=d",
        "1.5",
        "true",
        "~/models",
        "it's",
        "C:\\x\\",
        "a\\'b",
    ]:
        assert parser.parse_override(f"k={launch.hydra_value(text)}").value() == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "model: m\nenvs: [{id: toolgym/Math-v0}]\nlerning_rate: 1e-6\n",
            ["lerning_rate: unknown key", "`learning_rate`", "verl_overrides"],
        ),
        ("model: m\nenvs: [{id: toolgym/Math-v0, kwrgs: {}}]\n", ["envs.0.kwrgs: unknown key", "`kwargs`"]),
        ("envs: [{id: toolgym/Math-v0}]\n", ["model: required"]),
        ("model: m\nenvs: []\n", ["envs: List should have at least 1 item"]),
        (
            "model: m\nenvs: [{id: toolgym/Math-v0}]\nlogger: [console, slack]\n",
            ["logger.1", "'console', 'wandb' or 'tensorboard'"],
        ),
        (
            "model: m\nenvs: [{id: toolgym/Math-v0}]\ntrain_rows: 8\ntrain_batch_size: 16\n",
            ["raise train_rows"],
        ),
        (
            "model: m\nenvs: [{id: toolgym/Math-v0}]\nverl_overrides: [trainer.save_freq]\n",
            ["write key=value"],
        ),
        ("- model: m\n", ["must be a YAML mapping"]),
        (  # 4 x 8 sequences, 16 a rank: verl would assert in a worker after minutes of start-up
            "model: m\nenvs: [{id: toolgym/Math-v0}]\ntrain_batch_size: 4\ngroup_size: 8\n"
            "gpus_per_node: 2\nmicro_batch_size_per_gpu: 32\n",
            ["each rank gets 16 sequences", "micro_batch_size_per_gpu (32)"],
        ),
        (
            "model: m\nenvs: [{id: toolgym/Math-v0}]\ntrain_batch_size: 3\ngroup_size: 1\ngpus_per_node: 2\n",
            ["3 sequences", "do not divide over 2 ranks"],
        ),
        (f"{MATH}agent: nowhere.py:agent\n", ["agent: ", "no agent file at", "nowhere.py"]),
        (f"{MATH}agent: json:dumps\n", ["agent: ", "must be `async def"]),
        (
            f"{MATH}agent: {EXAMPLES.parent / 'gateway_agent.py'}:agent\ntemplate_tools: false\n",
            ["template_tools"],
        ),
    ],
    ids=[
        "typo",
        "env-typo",
        "missing",
        "no-envs",
        "logger",
        "rows",
        "override",
        "not-a-mapping",
        "micro-batch",
        "ranks",
        "agent-file",
        "agent-not-async",
        "agent-without-template-tools",
    ],
)
def test_bad_configs_name_the_key_and_the_fix(tmp_path, text, expected):
    with pytest.raises(ValueError) as info:
        load_train_config(_write(tmp_path, text))
    message = str(info.value)
    assert message.startswith(str(tmp_path / "run.yaml"))
    for part in expected:
        assert part in message


def test_an_unknown_env_id_suggests_the_registered_one(tmp_path):
    cfg = load_train_config(_write(tmp_path, "model: tiny\nenvs: [{id: toolgym/Mat-v0}]\n"))
    with pytest.raises(
        ValueError, match=r"envs.0.id: unknown env 'toolgym/Mat-v0'; did you mean toolgym/Math-v0"
    ):
        launch.plan_run(cfg, tmp_path)


def test_an_env_given_as_module_and_id_is_imported_and_checked(tmp_path):
    """``module:id`` as gym.make takes it (the probe registers itself on import)."""
    probe = "toolgym.testing.probe:toolgym-debug/Probe-v0"
    launch.check_env_ids(load_train_config(_write(tmp_path, f"model: tiny\nenvs: [{{id: '{probe}'}}]\n")))
    missing = load_train_config(_write(tmp_path, "model: tiny\nenvs: [{id: 'no_such_module:x/Y-v0'}]\n"))
    with pytest.raises(ValueError, match=r"envs.0.id: cannot import 'no_such_module'"):
        launch.check_env_ids(missing)
    unregistered = load_train_config(
        _write(tmp_path, "model: tiny\nenvs: [{id: 'toolgym.testing.probe:x/Y-v0'}]\n")
    )
    with pytest.raises(ValueError, match=r"unknown env 'toolgym.testing.probe:x/Y-v0'"):
        launch.check_env_ids(unregistered)


def test_a_real_run_exports_the_data_then_runs_verl_and_keeps_its_exit_status(tmp_path, monkeypatch):
    ran = []

    def fake_verl(command, cwd=None, env=None):  # the real run is test_train_cpu.py; here all before it is
        ran.append(command)
        assert cwd == out.resolve()  # Hydra's outputs/ go into the run dir, not the user's cwd
        assert env == cpu_env()  # device: cpu selects verl's CPU platform in the verl process
        return 3

    monkeypatch.setattr(launch, "run_verl", fake_verl)
    out = tmp_path / "run"
    assert main(["train", "--config", str(EXAMPLES / "tiny-cpu.yaml"), "--out", str(out)]) == 3

    cfg = load_train_config(EXAMPLES / "tiny-cpu.yaml")
    (command,) = ran
    assert command[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert (out / "command.sh").read_text().strip() == launch.format_command(launch.plan_run(cfg, out))
    train = pq.read_table(out / "train.parquet").to_pylist()
    val = pq.read_table(out / "val.parquet").to_pylist()
    assert (len(train), len(val)) == (cfg.train_rows, cfg.val_rows)
    assert {row["data_source"] for row in train} == {"toolgym/Calculator-v0"}
    assert {row["agent_name"] for row in train + val} == {"toolgym"}
    assert all(json.loads(row["extra_info"]["env_kwargs"])["max_turns"] == 2 for row in train + val)

    loops = yaml.safe_load((out / "agent_loops.yaml").read_text())
    shipped = yaml.safe_load(Path(agent_loop_config_path()).read_text())
    (ours,) = [e for e in loops if e["name"] == "toolgym"]
    (theirs,) = [e for e in shipped if e["name"] == "toolgym"]
    assert ours == {**theirs, "max_tokens_per_turn": 64, "max_concurrent_episodes": 4}


def test_the_agent_key_routes_the_rows_to_the_gateway_loop_with_the_agent(tmp_path, monkeypatch):
    """``agent:`` (a file next to the config): the rows carry ``agent_name: toolgym_agent``, the run's
    agent-loop YAML gives that entry the agent (an absolute path: verl's workers run elsewhere) and the
    config's loop settings, and the runner's entry is left as shipped."""
    monkeypatch.setattr(launch, "run_verl", lambda command, cwd=None, env=None: 0)
    out = tmp_path / "run"
    assert main(["train", "--config", str(EXAMPLES / "agent-cpu.yaml"), "--out", str(out)]) == 0

    agent = f"{EXAMPLES.parent / 'gateway_agent.py'}:agent"
    assert load_train_config(EXAMPLES / "agent-cpu.yaml").agent == agent
    rows = pq.read_table(out / "train.parquet").to_pylist() + pq.read_table(out / "val.parquet").to_pylist()
    assert {row["agent_name"] for row in rows} == {"toolgym_agent"}
    loops = {e["name"]: e for e in yaml.safe_load((out / "agent_loops.yaml").read_text())}
    shipped = {e["name"]: e for e in yaml.safe_load(Path(agent_loop_config_path()).read_text())}
    assert loops["toolgym"] == shipped["toolgym"]
    settings = {"agent": agent, "max_tokens_per_turn": 64, "max_concurrent_episodes": 4}
    assert loops["toolgym_agent"] == {**shipped["toolgym_agent"], **settings}
    command = (out / "command.sh").read_text()
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=toolgym_agent" in command


MIX = """model: tiny
device: cpu
agent: {agent}
envs:
  - id: toolgym/Calculator-v0
    agent: null
  - id: toolgym/Calculator-v0
  - id: toolgym/Math-v0
    agent: own_agent.py:agent
train_rows: 6
val_rows: 3
train_batch_size: 2
group_size: 2
micro_batch_size_per_gpu: 2
max_prompt_length: 2048
max_tokens_per_turn: 64
template_tools: false
"""


def test_an_env_entrys_agent_plays_its_rows_and_the_others_keep_their_loop(tmp_path, monkeypatch):
    """An env entry's ``agent:`` (a relative file read from the config's folder, loaded and checked at load)
    plays that env's rows; an entry without the key gets the config's ``agent:``, and ``agent: null`` is
    toolgym's runner even then. The rows name their loop and agent, and the run's agent-loop YAML gives both
    loops the config's settings, the gateway loop the config's agent (for rows that name none) and the runner
    the ``template_tools`` that only it reads."""
    monkeypatch.setattr(launch, "run_verl", lambda command, cwd=None, env=None: 0)
    default = f"{EXAMPLES.parent / 'gateway_agent.py'}:agent"
    (tmp_path / "own_agent.py").write_text("async def agent(task, base_url, api_key):\n    return None\n")
    config = _write(tmp_path, MIX.format(agent=default))
    cfg = load_train_config(config)
    own = f"{tmp_path / 'own_agent.py'}:agent"
    assert [cfg.env_agent(env) for env in cfg.envs] == [None, default, own]
    assert cfg.agent_loops == ("toolgym", "toolgym_agent") and cfg.agent_loop_name == "toolgym_agent"

    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out)]) == 0
    rows = pq.read_table(out / "train.parquet").to_pylist()
    played = Counter((r["data_source"], r["agent_name"], r["extra_info"]["agent"]) for r in rows)
    assert played == {
        ("toolgym/Calculator-v0", "toolgym", None): 2,
        ("toolgym/Calculator-v0", "toolgym_agent", default): 2,
        ("toolgym/Math-v0", "toolgym_agent", own): 2,
    }
    loops = {e["name"]: e for e in yaml.safe_load((out / "agent_loops.yaml").read_text())}
    shipped = {e["name"]: e for e in yaml.safe_load(Path(agent_loop_config_path()).read_text())}
    settings = {"max_tokens_per_turn": 64}
    assert loops["toolgym"] == {**shipped["toolgym"], **settings, "template_tools": False}
    assert loops["toolgym_agent"] == {**shipped["toolgym_agent"], **settings, "agent": default}

    # without a config-level agent: the runner is the default, and only the entry that names one is played
    # by an agent program
    alone = load_train_config(_write(tmp_path, MIX.format(agent="null"), "alone.yaml"))
    assert [alone.env_agent(env) for env in alone.envs] == [None, None, own]
    assert alone.agent_loop_name == "toolgym" and alone.agent_loops == ("toolgym", "toolgym_agent")
    plan = launch.plan_run(alone, tmp_path / "alone")
    assert "agent" not in plan.agent_loop_kwargs  # the rows name their agent; the gateway loop needs none


@pytest.mark.parametrize(
    ("envs", "expected"),
    [
        ("[{id: toolgym/Math-v0, agent: nowhere.py:agent}]", ["envs.0.agent", "no agent file at"]),
        (
            "[{id: toolgym/Math-v0}, {id: toolgym/Math-v0, agent: 'json:dumps'}]",
            ["envs.1.agent", "async def"],
        ),
        (
            "[{id: toolgym/Math-v0, agnt: x}]",
            ["envs.0.agnt", "Did you mean `agent`?", "id, kwargs, weight, agent"],
        ),
        (  # template_tools is the runner's setting: false means nothing when agents play every env
            "[{id: toolgym/Math-v0, agent: AGENT}]\ntemplate_tools: false",
            ["template_tools"],
        ),
    ],
    ids=["file", "not-async", "typo", "template-tools"],
)
def test_bad_env_agents_name_the_entry_and_the_fix(tmp_path, envs, expected):
    agent = f"{EXAMPLES.parent / 'gateway_agent.py'}:agent"
    path = _write(tmp_path, f"model: m\nenvs: {envs.replace('AGENT', agent)}\n")
    with pytest.raises(ValueError) as info:
        load_train_config(path)
    for part in expected:
        assert part in str(info.value)


def test_template_tools_false_is_the_runners_when_an_env_opts_out_of_the_agent(tmp_path):
    agent = f"{EXAMPLES.parent / 'gateway_agent.py'}:agent"
    text = f"model: m\nagent: {agent}\nenvs: [{{id: toolgym/Math-v0, agent: null}}]\ntemplate_tools: false\n"
    cfg = load_train_config(_write(tmp_path, text))
    assert cfg.agent_loops == ("toolgym",) and cfg.template_tools is False


def test_the_documented_config_composes(tmp_path):
    """The config docs/training.md shows composes against verl's own config."""
    page = (EXAMPLES.parents[1] / "docs" / "training.md").read_text()
    section = page.split("### The config", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.DOTALL)
    cfg = load_train_config(_write(tmp_path, block))
    composed = launch.compose(launch.plan_run(cfg, tmp_path / "run").overrides)
    assert composed.actor_rollout_ref.rollout.gpu_memory_utilization == 0.6
    assert list(composed.trainer.logger) == ["console", "wandb"]


def test_a_real_run_refuses_prompts_longer_than_max_prompt_length(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "run_verl", lambda command, cwd, env: pytest.fail("verl must not start"))
    text = (
        (EXAMPLES / "tiny-cpu.yaml").read_text().replace("max_prompt_length: 2048", "max_prompt_length: 300")
    )
    cfg = load_train_config(_write(tmp_path, text))
    with pytest.raises(
        ValueError, match=r"4 of 4 rows in train.parquet .* longer than max_prompt_length=300"
    ):
        launch.run_training(cfg, launch.plan_run(cfg, tmp_path / "run"))


def test_dump_every_puts_the_episode_dump_in_the_run_dir(tmp_path):
    """``dump_every`` in the config reaches the agent loop with the run dir's ``episodes`` folder."""
    text = "model: tiny\nenvs:\n  - id: toolgym/Calculator-v0\ndump_every: 5\ndump_episodes: 2\n"
    plan = launch.plan_run(load_train_config(_write(tmp_path, text)), tmp_path / "run")
    assert plan.agent_loop_kwargs == {
        "dump_every": 5,
        "dump_episodes": 2,
        "dump_dir": str((tmp_path / "run" / "episodes").resolve()),
    }
    assert plan.agent_loop_path == (tmp_path / "run" / "agent_loops.yaml").resolve()
    plain = launch.plan_run(load_train_config(_write(tmp_path, text.split("dump_every")[0])), tmp_path / "r")
    assert plain.agent_loop_kwargs == {}


def test_template_tools_reaches_the_agent_loop_and_the_prompt_check(tmp_path, monkeypatch):
    """``template_tools: true`` goes into the run's agent-loop YAML, and the pre-flight prompt check counts
    the tool schemas the template will render (a prompt that fits without them may not fit with them)."""
    text = "model: tiny\nenvs:\n  - id: toolgym/Calculator-v0\ntemplate_tools: true\n"
    cfg = load_train_config(_write(tmp_path, text))
    plan = launch.plan_run(cfg, tmp_path / "run")
    assert plan.agent_loop_kwargs == {"template_tools": True}
    launch.write_agent_loop_config(plan.agent_loop_path, plan.agent_loop_kwargs)
    (entry,) = [e for e in yaml.safe_load(plan.agent_loop_path.read_text()) if e["name"] == "toolgym"]
    assert entry["template_tools"] is True
    seen = []
    monkeypatch.setattr(
        "toolgym.trainers.verl_adapter.export.prompt_token_lengths",
        lambda parquet, model, template_tools=False: seen.append(template_tools) or [1],
    )
    launch.check_prompt_lengths(tmp_path / "rows.parquet", cfg)
    launch.check_prompt_lengths(tmp_path / "rows.parquet", cfg.model_copy(update={"template_tools": None}))
    assert seen == [True, False]


def test_gpu_runs_checkpoint_by_default_and_cpu_runs_do_not(tmp_path, capsys):
    """A crash at hour ten must not lose a GPU run: it checkpoints every 50 steps unless told otherwise,
    and verl (resume_mode auto) resumes from the newest checkpoint when the same command runs again."""
    from toolgym.trainers.verl_adapter.config import GPU_SAVE_FREQ

    out = tmp_path / "run"
    assert main(["train", "--config", str(EXAMPLES / "math.yaml"), "--dry-run", "--out", str(out)]) == 0
    overrides = _command_overrides(capsys.readouterr().out)
    assert f"trainer.save_freq={GPU_SAVE_FREQ}" in overrides
    assert f"trainer.default_local_dir={out / 'checkpoints'}" in overrides
    assert "trainer.resume_mode" not in {launch.override_key(o) for o in overrides}  # verl's auto stays
    assert main(["train", "--config", str(EXAMPLES / "tiny-cpu.yaml"), "--dry-run", "--out", str(out)]) == 0
    assert "trainer.save_freq=-1" in _command_overrides(capsys.readouterr().out)


def test_a_cpu_run_on_several_nodes_joins_the_running_ray_cluster_and_gives_its_workers_the_platform(
    tmp_path, capsys
):
    """``nodes: 2`` on the CPU platform (``ray start`` on each node beforehand, each declaring its GPUs): the
    run asks Ray for no resources of its own (joining a cluster, ``ray.init`` refuses them), every worker on
    every node gets the platform's environment through Ray's runtime env (a node's own ``ray start`` shell
    has none of it), and each rank gets an agent-loop worker. The run itself is
    benchmarks/bench_verl_scale.py."""
    text = (EXAMPLES / "tiny-cpu.yaml").read_text().replace("gpus_per_node: 1", "gpus_per_node: 1\nnodes: 2")
    out = tmp_path / "run"
    assert main(["train", "--config", str(_write(tmp_path, text)), "--dry-run", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    overrides = _command_overrides(captured.out)
    assert "trainer.nnodes=2" in overrides and "trainer.n_gpus_per_node=1" in overrides
    assert "actor_rollout_ref.rollout.agent.num_workers=2" in overrides
    assert not [o for o in overrides if o.split("=")[0].lstrip("+").startswith("ray_kwargs.ray_init.num_")]
    assert not [o for o in overrides if "ray_init.address" in o]  # RAY_ADDRESS, or the local `ray start`
    for name, value in cpu_env().items():
        assert f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}={launch.hydra_value(value)}" in overrides
    assert "start Ray on every node first" in captured.err
    one_node = launch.plan_run(load_train_config(EXAMPLES / "tiny-cpu.yaml"), tmp_path / "one").overrides
    assert "+ray_kwargs.ray_init.num_gpus=1" in one_node  # one node: verl starts Ray with the declared GPU
    assert "+ray_kwargs.ray_init.address=local" in one_node  # its own, even where a cluster is running


def test_cpu_replicas_run_the_model_in_vllms_engine_process_unless_tensor_parallel(tmp_path):
    """One process less a vLLM replica on a CPU (the ``uni`` executor, kept by vLLM-CPU only with
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0``); a tensor-parallel replica keeps verl's multiprocess executor.
    test_train_cpu.py's run shows verl's weight sync reaching the model there."""
    uni = "+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=uni"
    cfg = load_train_config(EXAMPLES / "tiny-cpu.yaml")
    plan = launch.plan_run(cfg, tmp_path / "one")
    assert uni in plan.overrides and plan.env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    wide = launch.plan_run(cfg.model_copy(update={"tensor_parallel_size": 2}), tmp_path / "two").overrides
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size=2" in wide
    assert not [o for o in wide if "distributed_executor_backend" in o]


JUDGED = """model: tiny
device: cpu
train_batch_size: 2
group_size: 2
micro_batch_size_per_gpu: 1
train_rows: 3
val_rows: 3
max_turns: 2
max_prompt_length: 1024
envs:
  - {id: toolgym/Report-v0}
  - {id: toolgym/Calculator-v0}
  - {id: toolgym/Report-v0, kwargs: {judge: {base_url: "http://own:1/v1", model: own}}}
judge:
  {base_url: "http://judge:8000/v1", model: judge-model, api_key_env: JUDGE_KEY, timeout: 30, group: true}
"""


def test_the_judge_key_reaches_the_rows_of_every_env_that_takes_a_judge(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "run_verl", lambda command, cwd=None, env=None: 0)
    out = tmp_path / "run"
    assert main(["train", "--config", str(_write(tmp_path, JUDGED)), "--out", str(out)]) == 0
    rows = pq.read_table(out / "train.parquet").to_pylist() + pq.read_table(out / "val.parquet").to_pylist()
    kwargs = {}
    for row in rows:
        kwargs.setdefault(row["data_source"], []).append(json.loads(row["extra_info"]["env_kwargs"]))
    judge = {
        "base_url": "http://judge:8000/v1",
        "model": "judge-model",
        "api_key_env": "JUDGE_KEY",
        "timeout": 30,
        "group": True,
    }
    report = kwargs["toolgym/Report-v0"]
    assert {"max_turns": 2, "judge": judge} in report  # the run-wide judge, as written (no key in the rows)
    assert {
        "max_turns": 2,
        "judge": {"base_url": "http://own:1/v1", "model": "own"},
    } in report  # its own wins
    assert kwargs["toolgym/Calculator-v0"] and all(
        k == {"max_turns": 2} for k in kwargs["toolgym/Calculator-v0"]
    )


def test_a_judge_option_the_judge_does_not_take_is_refused_with_the_options(tmp_path, capsys):
    text = "model: m\nenvs: [{id: toolgym/Report-v0}]\njudge: {base_url: u, model: j, timout: 3}\n"
    assert main(["train", "--config", str(_write(tmp_path, text)), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "unknown judge option 'timout'" in err and "did you mean `timeout`?" in err


# -- the asynchronous modes (mode: one_step_off / fully_async; the real runs: test_train_async_cpu.py) -----

ASYNC = """model: tiny
device: {device}
mode: {mode}
async_training: {{rollout_gpus_per_node: 2{knobs}}}
envs: [{{id: toolgym/Calculator-v0}}]
train_batch_size: 8
group_size: 2
ppo_mini_batch_size: 4
micro_batch_size_per_gpu: 1
gpus_per_node: 2
train_rows: 64
{extra}"""
ASYNC_EXAMPLES = {"one-step-off-cpu", "fully-async-cpu", "learn-one-step-off-cpu", "learn-fully-async-cpu"}


def _async_plan(tmp_path, mode, device="gpu", knobs="", extra="steps: 3\n"):
    text = ASYNC.format(device=device, mode=mode, knobs=knobs, extra=extra)
    cfg = load_train_config(_write(tmp_path, text, f"{mode}-{device}.yaml"))
    return cfg, launch.plan_run(cfg, tmp_path / "run")


def test_the_examples_cover_both_asynchronous_modes():
    examples = {p.stem: load_train_config(p) for p in EXAMPLE_FILES}
    assert examples.keys() >= ASYNC_EXAMPLES
    assert {examples[name].mode for name in ASYNC_EXAMPLES} == {"one_step_off", "fully_async"}


@pytest.mark.parametrize(
    ("mode", "module"),
    [
        ("sync", "verl.trainer.main_ppo"),
        ("one_step_off", "verl.experimental.one_step_off_policy.main_ppo"),
        ("fully_async", "verl.experimental.fully_async_policy.fully_async_main"),
    ],
)
def test_each_mode_runs_its_own_verl_trainer_checked_against_its_own_config(tmp_path, capsys, mode, module):
    """The dry run prints the mode's entry module and composes against that trainer's Hydra config (which
    extends ppo_trainer with its own keys): an asynchronous mode gets a rollout pool of its own beside the
    trainer's, no hybrid engine, and on GPUs verl's own weight sync (nccl)."""
    text = (EXAMPLES / "tiny-cpu.yaml").read_text().replace("device: cpu", "device: gpu")
    if mode != "sync":
        text += f"mode: {mode}\nasync_training: {{rollout_gpus_per_node: 3, rollout_nodes: 2}}\n"
    out = tmp_path / "run"
    assert main(["train", "--config", str(_write(tmp_path, text)), "--dry-run", "--out", str(out)]) == 0
    tokens = shlex.split(capsys.readouterr().out.replace("\\\n", " "))
    assert tokens[tokens.index("-m") + 1] == module

    cfg = load_train_config(tmp_path / "run.yaml")
    plan = launch.plan_run(cfg, out)
    assert plan.command[1:3] == ["-m", module] and plan.entry.module == module
    # verl imports the fixes its asynchronous trainers need in every process of such a run, and only there
    modules = plan.env["VERL_USE_EXTERNAL_MODULES"].split(",")
    assert (launch.ASYNC_COMPAT_MODULE in modules) == (mode != "sync")
    runtime_env = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES="
    assert f"{runtime_env}{launch.hydra_value(','.join(modules))}" in plan.overrides
    composed = launch.compose(plan.overrides, plan.mode)
    if mode == "sync":
        assert composed.actor_rollout_ref.hybrid_engine is True and "async_training" not in composed
        return
    assert composed.actor_rollout_ref.hybrid_engine is False
    assert (composed.rollout.nnodes, composed.rollout.n_gpus_per_node) == (2, 3)
    assert (composed.trainer.nnodes, composed.trainer.n_gpus_per_node) == (1, 1)
    assert composed.actor_rollout_ref.rollout.checkpoint_engine.backend == "nccl"
    assert composed.actor_rollout_ref.rollout.calculate_log_probs is True
    assert composed.algorithm.rollout_correction.bypass_mode is True  # the rollout's logprobs, as verl sets
    # one_step_off's YAML finds ppo_trainer only from verl's source tree; the package path works from anywhere
    assert ("hydra.searchpath=[pkg://verl.trainer.config]" in plan.overrides) == (mode == "one_step_off")


def test_fully_async_streams_prompts_and_a_training_step_takes_train_batch_size_of_them(tmp_path):
    """verl's rollouter takes one prompt at a time (train_batch_size 0, gen_batch_size 1: both asserted in
    verl); a training step takes ppo_mini_batch_size x require_batches groups (train_batch_size), the
    weights sync every trigger_parameter_sync_step steps, and steps: N rolls out N syncs' worth of prompts."""
    knobs = ", staleness_threshold: 0.5, trigger_parameter_sync_step: 2, partial_rollout: false"
    _, plan = _async_plan(tmp_path, "fully_async", knobs=knobs)
    composed = launch.compose(plan.overrides, plan.mode)
    assert (composed.data.train_batch_size, composed.data.gen_batch_size) == (0, 1)
    assert composed.actor_rollout_ref.actor.ppo_mini_batch_size == 4
    knobs_there = composed.async_training
    assert (knobs_there.require_batches, knobs_there.trigger_parameter_sync_step) == (2, 2)
    assert (knobs_there.staleness_threshold, knobs_there.partial_rollout) == (0.5, False)
    assert composed.rollout.total_rollout_steps == 3 * 8 * 2
    # the rows name toolgym's loops; without multi_turn verl gives every row its single-turn loop
    assert composed.actor_rollout_ref.rollout.multi_turn.enable is True
    assert composed.actor_rollout_ref.rollout.agent.default_agent_loop == "toolgym"

    _, epochs = _async_plan(tmp_path, "fully_async", extra="")
    assert launch.compose(epochs.overrides, epochs.mode).rollout.total_rollout_steps is None  # the epochs


@pytest.mark.parametrize(("mode", "actor_cpus"), [("one_step_off", 10), ("fully_async", 23)])
def test_a_cpu_async_run_declares_both_pools_and_syncs_the_weights_over_gloo(tmp_path, mode, actor_cpus):
    """On a CPU, Ray is told of the trainer's and the rollout's GPUs (2 + 2 here) and of the CPUs the async
    trainers' own actors ask for; each rollout GPU gets an agent-loop worker; the weights go through
    toolgym's gloo checkpoint engine, which verl imports through its plug-in point."""
    import importlib

    from verl.checkpoint_engine import CheckpointEngineRegistry

    from toolgym.trainers.verl_adapter.cpu import CHECKPOINT_ENGINE_MODULE

    _, plan = _async_plan(tmp_path, mode, device="cpu")
    assert "+ray_kwargs.ray_init.num_gpus=4" in plan.overrides
    assert f"ray_kwargs.ray_init.num_cpus={8 * 4 + actor_cpus}" in plan.overrides
    composed = launch.compose(plan.overrides, plan.mode)
    engine = composed.actor_rollout_ref.rollout.checkpoint_engine
    assert (engine.backend, engine.custom_backend_module) == ("gloo", CHECKPOINT_ENGINE_MODULE)
    assert composed.actor_rollout_ref.rollout.agent.num_workers == 2
    assert composed.trainer.device == "cpu" and composed.actor_rollout_ref.actor.strategy == "fsdp2"
    module = importlib.import_module(CHECKPOINT_ENGINE_MODULE)
    assert CheckpointEngineRegistry.get("gloo") is module.GlooCheckpointEngine


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{MATH}async_training: {{rollout_gpus_per_node: 1}}\n", ["async_training is for mode"]),
        (
            f"{MATH}mode: one_step_off\n",
            ["mode: one_step_off rolls out on GPUs of its own", "rollout_gpus_per_node"],
        ),
        (
            f"{MATH}mode: one_step_off\n"
            "async_training: {rollout_gpus_per_node: 1, staleness_threshold: 0.5}\n",
            ["async_training.staleness_threshold is a mode: fully_async knob", "drop the key"],
        ),
        (
            f"{MATH}mode: fully_async\n"
            "async_training: {rollout_gpus_per_node: 1, stalenes_threshold: 0.5}\n",
            ["async_training", "unknown key 'stalenes_threshold'", "did you mean `staleness_threshold`?"],
        ),
        (
            f"{MATH}mode: one_step_off\ntensor_parallel_size: 2\n"
            "async_training: {rollout_gpus_per_node: 1}\n",
            ["rollout pool's 1 GPUs", "whole vLLM replicas of tensor_parallel_size (2)"],
        ),
        (
            f"{MATH}mode: fully_async\nasync_training: {{rollout_gpus_per_node: 1}}\n"
            "train_batch_size: 6\nppo_mini_batch_size: 4\ngroup_size: 4\n",
            ["train_batch_size (6) must be a multiple of ppo_mini_batch_size (4)"],
        ),
        (f"{MATH}mode: async\n", ["mode", "'sync', 'one_step_off' or 'fully_async'"]),
    ],
    ids=[
        "sync-with-knobs",
        "no-rollout-pool",
        "fully-async-knob",
        "knob-typo",
        "tensor-parallel",
        "mini-batch",
        "mode",
    ],
)
def test_bad_async_configs_name_the_key_and_the_fix(tmp_path, text, expected):
    with pytest.raises(ValueError) as info:
        load_train_config(_write(tmp_path, text))
    for part in expected:
        assert part in str(info.value)


@pytest.mark.parametrize(
    ("mode", "override", "expected"),
    [
        ("one_step_off", "actor_rollout_ref.hybrid_engine=True", "hybrid_engine is True"),
        ("fully_async", "actor_rollout_ref.rollout.checkpoint_engine.backend=naive", "backend is naive"),
        ("fully_async", "actor_rollout_ref.rollout.multi_turn.enable=False", "single-turn"),
        (
            "one_step_off",
            "actor_rollout_ref.rollout.calculate_log_probs=False",
            "calculate_log_probs is False",
        ),
    ],
)
def test_an_override_that_breaks_an_async_mode_fails_the_dry_run(tmp_path, mode, override, expected):
    _, plan = _async_plan(tmp_path, mode)
    with pytest.raises(ValueError, match=rf"inconsistent verl overrides: .*{expected}"):
        launch.compose([*plan.overrides, override], plan.mode)


def test_an_unknown_async_key_names_the_modes_own_config(tmp_path):
    _, plan = _async_plan(tmp_path, "fully_async")
    with pytest.raises(
        ValueError, match=r"(?s)rejected an override.*fully_async_ppo_trainer.yaml the mode's own"
    ):
        launch.compose([*plan.overrides, "async_training.stalenes=1"], plan.mode)
    with pytest.raises(ValueError, match=r"async_training.staleness_threshold must be a number"):
        launch.compose([*plan.overrides, "async_training.staleness_threshold=lots"], plan.mode)


def test_a_real_async_run_runs_the_modes_trainer(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(launch, "run_verl", lambda command, cwd=None, env=None: ran.append(command) or 0)
    out = tmp_path / "run"
    assert main(["train", "--config", str(EXAMPLES / "fully-async-cpu.yaml"), "--out", str(out)]) == 0
    ((_, flag, module, *_),) = ran
    assert (flag, module) == ("-m", "verl.experimental.fully_async_policy.fully_async_main")
    assert f" -m {module} " in (out / "command.sh").read_text().replace("\\\n", " ")


def test_an_async_gpu_run_without_cupy_stops_before_exporting(tmp_path, monkeypatch, capsys):
    """verl's nccl checkpoint engine (the asynchronous modes' weight sync on GPUs) imports cupy, which
    ``toolgym[gpu]`` does not install: a real run stops before writing anything, a dry run says so."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else find_spec(name, *a)
    )
    monkeypatch.setattr(
        launch, "run_verl", lambda command, cwd=None, env=None: pytest.fail("verl must not start")
    )
    cfg, plan = _async_plan(tmp_path, "one_step_off")
    with pytest.raises(
        ValueError, match=r"nccl checkpoint engine.*needs cupy: pip install 'verl\[cupy-cu130\]"
    ):
        launch.run_training(cfg, plan)
    assert not plan.run_dir.exists()
    args = ["train", "--config", str(tmp_path / "one_step_off-gpu.yaml"), "--dry-run", "--out", str(tmp_path)]
    assert main(args) == 0
    assert "a real run here would stop: verl's nccl checkpoint engine" in capsys.readouterr().err
    _, on_cpu = _async_plan(tmp_path, "one_step_off", device="cpu")  # gloo: nothing to install
    assert launch.missing_weight_sync(launch.compose(on_cpu.overrides, on_cpu.mode)) is None
