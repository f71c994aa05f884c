"""An episode that a weight update interrupts (verl's fully-async training with ``partial_rollout``) trains
with the right old logprobs: each token's, from the weights that sampled it.

Two versions of the tiny model (the second with perturbed weights) sample one episode through verl's real
``AgentLoopWorker`` running toolgym's agent loop; the stand-in server moves to the second version part-way
through the episode's first turn and aborts the request in flight, as verl's ``abort_all_requests`` does when
the trainer syncs weights. toolgym's client resumes the generation under the new weights. Then verl's own
bypass mode (``apply_bypass_mode``, what the fully-async trainer runs: the rollout's logprobs become the old
policy's) builds ``old_log_probs``, and each generated token's is checked against a fresh forward pass of the
version that sampled it, and against the other version (which gives different numbers: a mix-up fails).
"""

import asyncio
import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode

from toolgym.rollout import EnvRequest
from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.hf import HFClient
from toolgym.testing import tiny_model_path
from toolgym.testing.verl import VersionedServerStandIn, agent_loop_worker, dataset_batch, verl_config
from toolgym.trainers.verl_adapter.client import VerlServerClient
from toolgym.trainers.verl_adapter.export import export_verl

PROMPT, RESPONSE = 1024, 48
UPDATE_AFTER = 5  # tokens into the episode's first turn


@pytest.fixture(scope="module")
def policies():
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_path()))
    old = AutoModelForCausalLM.from_pretrained(str(tiny_model_path()), dtype=torch.float32).eval()
    new = copy.deepcopy(old)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for param in new.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    return tokenizer, old, new


def _token_logprobs(model, ids: list[int], start: int) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= start, one full forward pass (raw logits, as vLLM reports them)."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return [float(logprobs[i - 1, ids[i]]) for i in range(start, len(ids))]


def test_two_policy_versions_in_one_episode_train_with_each_tokens_own_old_logprobs(policies, tmp_path):
    tokenizer, old, new = policies
    server = VersionedServerStandIn(
        [HFClient.from_model(old, tokenizer), HFClient.from_model(new, tokenizer)], [UPDATE_AFTER], seed=0
    )
    parquet = export_verl([EnvRequest(id="toolgym/Calculator-v0")], n=1, out=tmp_path)
    config = verl_config(
        prompt_length=PROMPT,
        response_length=RESPONSE,
        overrides=["+async_training.partial_rollout=True", "actor_rollout_ref.rollout.temperature=1.0"],
    )
    worker = agent_loop_worker(server, config)
    batch = dataset_batch(parquet, config, worker.tokenizer)
    out = asyncio.run(worker.generate_sequences(batch))

    # the episode's first turn was aborted after UPDATE_AFTER tokens and resumed under the new weights
    (attempts,) = server.attempts.values()
    assert [(v, len(ids), aborted) for v, ids, _, aborted in attempts[:2]] == [
        (0, UPDATE_AFTER, True),
        (1, len(attempts[1][1]), False),
    ]
    extra = out.non_tensor_batch
    assert (extra["min_global_steps"][0], extra["max_global_steps"][0]) == (0, 1)
    assert extra["resumed_generations"][0] == 1.0 and extra["toolgym_error"][0] == ""

    # verl's bypass mode: the old policy's logprobs are the rollout's
    policy_loss = config.actor_rollout_ref.actor.policy_loss
    apply_bypass_mode(
        batch=out, rollout_corr_config=config.algorithm.rollout_correction, policy_loss_config=policy_loss
    )
    attention = out.batch["attention_mask"][0]
    prompt = out.batch["prompts"][0, PROMPT - int(attention[:PROMPT].sum()) :].tolist()
    length = int(attention[PROMPT:].sum())
    response = out.batch["responses"][0, :length].tolist()
    mask = out.batch["response_mask"][0, :length].tolist()
    old_logprobs = out.batch["old_log_probs"][0, :length].tolist()
    versions = list(extra["policy_versions"][0])
    assert len(versions) == length
    assert [v for v, m in zip(versions, mask, strict=True) if not m] == [-1] * (length - sum(mask))
    sampled = [v for v, m in zip(versions, mask, strict=True) if m]
    assert sampled[:UPDATE_AFTER] == [0] * UPDATE_AFTER and set(sampled[UPDATE_AFTER:]) == {1}

    ids = prompt + response
    by_version = {v: _token_logprobs(model, ids, len(prompt)) for v, model in ((0, old), (1, new))}
    mismatched = 0
    for i, (version, on) in enumerate(zip(versions, mask, strict=True)):
        if not on:
            continue
        assert old_logprobs[i] == pytest.approx(by_version[version][i], abs=2e-3), (i, version)
        mismatched += abs(old_logprobs[i] - by_version[1 - version][i]) > 2e-2
    assert mismatched >= 0.8 * sum(mask), "the two versions give too alike logprobs to tell a mix-up"


class _Aborting:
    """verl's server handle, aborting its first attempt after two tokens (a weight update), then done."""

    def __init__(self):
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append((list(prompt_ids), dict(sampling_params)))
        if len(self.calls) == 1:
            fields = {"global_steps": 3}
            return TokenOutput(
                token_ids=[7, 8], log_probs=[-0.5, -0.6], stop_reason="aborted", extra_fields=fields
            )
        fields = {"global_steps": 4}
        return TokenOutput(token_ids=[9], log_probs=[-0.7], stop_reason="completed", extra_fields=fields)


def _generate(client: VerlServerClient) -> Generation:
    return asyncio.run(client.generate([1, 2], Sampling(max_tokens=6), "ep"))


def test_a_resumed_generation_asks_for_the_rest_of_the_budget_after_what_was_sampled(monkeypatch):
    monkeypatch.setattr("toolgym.trainers.verl_adapter.client.RESUME_DELAY_S", 0.0)
    server = _Aborting()
    gen = _generate(VerlServerClient(server, resume_aborted=True))
    assert gen.token_ids == [7, 8, 9] and gen.logprobs == [-0.5, -0.6, -0.7]
    assert gen.policy_versions == [3, 3, 4] and gen.finish_reason == "stop"
    (first, params1), (second, params2) = server.calls
    assert (first, params1["max_tokens"]) == ([1, 2], 6) and (second, params2["max_tokens"]) == (
        [1, 2, 7, 8],
        4,
    )


def test_without_partial_rollouts_an_aborted_turn_fails_its_episode_loudly():
    gen = _generate(VerlServerClient(_Aborting()))
    assert gen.finish_reason == "abort" and gen.token_ids == [7, 8]


def test_staleness_metrics_count_each_sample_against_the_trainers_weights():
    from toolgym.trainers.verl_adapter.metrics import labels_lead, staleness_metrics, trainer_weights_version

    columns = {
        "min_global_steps": np.array([3, 2, 4, None], dtype=object),
        "max_global_steps": np.array([3, 3, 4, None], dtype=object),
    }
    assert staleness_metrics(columns, 4) == {
        "toolgym/staleness/mean": pytest.approx(1.0),
        "toolgym/staleness/max": 2.0,
        "toolgym/stale_samples/total": 2.0,
        "toolgym/mixed_version_samples/total": 1.0,
    }
    assert staleness_metrics(columns, None) == {}

    fully_async = SimpleNamespace(  # the version it recorded when it took the batch, not the one it has now
        metrics={"fully_async/count/current_param_version": 4}, global_steps=9, current_param_version=5
    )
    sync = SimpleNamespace(metrics={}, global_steps=3)

    one_step_off = type("OneStepOffRayTrainer", (), {"metrics": {}, "global_steps": 3})()
    assert trainer_weights_version(fully_async) == 4 and trainer_weights_version(sync) == 2
    assert trainer_weights_version(one_step_off) == 2 and labels_lead(one_step_off) and not labels_lead(sync)
    # one step off: step 1 trains the initial weights on a batch of label 0 (stale by 0), step 3 (2 updates)
    # on a batch of label 2 (published at step 2's start: 1 update)
    batch = {"min_global_steps": np.array([0], dtype=object), "max_global_steps": np.array([0], dtype=object)}
    assert staleness_metrics(batch, 0, labels_lead=True)["toolgym/staleness/mean"] == 0.0
    batch = {"min_global_steps": np.array([2], dtype=object), "max_global_steps": np.array([2], dtype=object)}
    assert staleness_metrics(batch, 2, labels_lead=True)["toolgym/staleness/mean"] == 1.0
    assert trainer_weights_version(object()) is None
