"""VerlServerClient: toolgym's LLM-client protocol over verl's LLM server handle."""

import asyncio

import gymnasium as gym
import pytest
from verl.workers.rollout.replica import TokenOutput
from vllm import SamplingParams

from toolgym.rollout import run_episode
from toolgym.rollout.clients.base import Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.trainers.verl_adapter.client import VerlServerClient


class FakeServer:
    """verl's LLMServerClient.generate signature; answers with canned TokenOutputs."""

    def __init__(self, *outputs, fail=None):
        self.outputs = list(outputs)
        self.calls = []
        self.fail = fail

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params), kwargs))
        if self.fail:
            raise self.fail
        return self.outputs.pop(0)


def _generate(client, sampling=None, request_id="ep"):
    return asyncio.run(
        client.generate([1, 2, 3], sampling or Sampling(max_tokens=4, stop=("</x>",)), request_id)
    )


def test_sampling_fields_are_what_verls_vllm_server_can_build_sampling_params_from():
    server = FakeServer(TokenOutput(token_ids=[5, 6], log_probs=[-0.1, -0.2], stop_reason="completed"))
    sampling = Sampling(
        max_tokens=4, temperature=0.7, top_k=20, repetition_penalty=1.05, stop=("</x>",), seed=3
    )
    gen = _generate(VerlServerClient(server), sampling)
    assert gen.token_ids == [5, 6] and gen.logprobs == [-0.1, -0.2] and gen.finish_reason == "stop"
    request_id, prompt, params, kwargs = server.calls[0]
    assert request_id == "ep" and prompt == [1, 2, 3] and kwargs == {}
    assert params["logprobs"] is True  # verl's server turns the flag into vLLM's 0/None itself
    # what verl's vLLM server does with the dict, then vLLM's own validation
    max_tokens = params.pop("max_tokens")
    params["logprobs"] = 0 if params.pop("logprobs") else None
    built = SamplingParams(max_tokens=max_tokens, **params)
    assert built.stop == ["</x>"] and built.include_stop_str_in_output and not built.skip_special_tokens
    assert (built.temperature, built.top_k, built.repetition_penalty, built.seed) == (0.7, 20, 1.05, 3)


def test_a_turn_that_used_all_its_tokens_is_length_and_priority_passes_through():
    server = FakeServer(TokenOutput(token_ids=[1, 2, 3, 4], log_probs=[-1.0] * 4, stop_reason="completed"))
    gen = _generate(VerlServerClient(server, priority=7))
    assert gen.finish_reason == "length" and server.calls[0][3] == {"priority": 7}


def test_logprobs_are_none_only_when_not_asked_for():
    quiet = FakeServer(TokenOutput(token_ids=[5], log_probs=None, stop_reason="completed"))
    assert _generate(VerlServerClient(quiet, logprobs=False)).logprobs is None
    assert quiet.calls[0][2]["logprobs"] is False
    missing = FakeServer(TokenOutput(token_ids=[5], log_probs=None, stop_reason="completed"))
    with pytest.raises(ClientError, match="no logprobs"):
        _generate(VerlServerClient(missing))


def test_server_failures_and_aborts_fail_the_episode_not_the_batch(renderer):
    env = gym.make("toolgym/Calculator-v0")
    broken = VerlServerClient(FakeServer(fail=RuntimeError("actor died")))
    traj = asyncio.run(run_episode(env, broken, renderer, seed=0))
    assert "actor died" in traj.error and not traj.trainable
    aborted = VerlServerClient(FakeServer(TokenOutput(token_ids=[], stop_reason="aborted")))
    traj = asyncio.run(run_episode(env, aborted, renderer, seed=0))
    assert "abort" in traj.error and traj.response_ids == []


def test_the_weights_steps_an_episode_was_generated_with_are_recorded():
    outputs = [
        TokenOutput(
            token_ids=[5], log_probs=[-1.0], extra_fields={"min_global_steps": s, "max_global_steps": s}
        )
        for s in (4, 6, 5)
    ]
    client = VerlServerClient(FakeServer(*outputs))
    for _ in outputs:
        _generate(client)
    assert (client.min_global_steps, client.max_global_steps) == (4, 6)
