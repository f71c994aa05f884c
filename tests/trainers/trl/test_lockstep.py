"""``LockstepClient``: multi-turn episodes on several ranks, generated through a collective call every rank
must make the same number of times with the same number of prompts (TRL's vLLM server mode)."""

import asyncio
import random
import threading

from toolgym.rollout.clients.base import Sampling
from toolgym.rollout.clients.lockstep import LockstepClient
from toolgym.trainers.trl_adapter.lockstep import trl_batch_generate

FILLER = 0


class Collective:
    """Two ranks in two threads: ``exchange`` all-gathers an int, ``generate`` is a collective that checks
    every rank brings as many prompts, and answers each prompt with ``[last token + 1] * 5``."""

    def __init__(self, ranks):
        self.barrier = threading.Barrier(ranks)
        self.values = [None] * ranks
        self.calls = [[] for _ in range(ranks)]

    def exchange(self, rank):
        def exchange(n):
            self.values[rank] = n
            self.barrier.wait()
            out = list(self.values)
            self.barrier.wait()
            return out

        return exchange

    def generate(self, rank):
        def generate(prompts):
            self.calls[rank].append([list(p) for p in prompts])
            self.values[rank] = len(prompts)
            self.barrier.wait()
            assert len(set(self.values)) == 1, f"unequal prompt counts across ranks: {self.values}"
            self.barrier.wait()
            return [[p[-1] + 1] * 5 for p in prompts], [[-0.5] * 5 for _ in prompts]

        return generate


def _episode(client, turns, budget, seen, rng):
    async def play():
        prompt = [100]
        for _ in range(turns):
            gen = await client.generate(prompt, Sampling(max_tokens=budget), "ep")
            seen.append(gen)
            prompt = prompt + gen.token_ids + [7]  # an observation token
            await asyncio.sleep(rng.random() / 100)  # env.step takes a while
        return len(prompt)

    return play()


def test_ranks_with_different_numbers_of_turns_call_the_collective_together():
    collective = Collective(2)
    plans = {0: [(3, 5), (1, 2), (2, 5)], 1: [(1, 5)]}  # (turns, max_tokens) per episode
    results, seen = {}, {0: [], 1: []}

    def rank(r):
        client = LockstepClient(collective.generate(r), exchange=collective.exchange(r), filler_id=FILLER)
        rng = random.Random(r)
        episodes = [_episode(client, t, b, seen[r], rng) for t, b in plans[r]]
        results[r] = (asyncio.run(client.drive(episodes)), client.rounds)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert all(not t.is_alive() for t in threads)
    # both ranks took the same rounds: as many as the longest episode has turns
    assert results[0][1] == results[1][1] == 3
    # rank 1 finished after one round and took part in the others with filler prompts only
    assert [len(c) for c in collective.calls[1]] == [3, 2, 1]
    assert collective.calls[1][1] == [[FILLER], [FILLER]] and collective.calls[1][2] == [[FILLER]]
    # every turn got its own completion, cut to its own budget
    assert sorted(len(g.token_ids) for g in seen[0]) == [2, 5, 5, 5, 5, 5]
    assert all(g.finish_reason == "length" and g.logprobs == [-0.5] * len(g.token_ids) for g in seen[0])
    # an episode's prompt grows by its generation and observation each turn
    assert results[0][0] == [1 + 3 * 6, 1 + 3, 1 + 2 * 6] and results[1][0] == [1 + 6]


def test_a_single_rank_needs_no_exchange_and_stops_when_its_episodes_end():
    calls = []

    def generate(prompts):
        calls.append(len(prompts))
        return [[1, 2]] * len(prompts), None

    client = LockstepClient(generate, exchange=None, filler_id=FILLER)
    seen = []
    out = asyncio.run(client.drive([_episode(client, 2, 4, seen, random.Random(0)) for _ in range(3)]))
    assert calls == [3, 3] and out == [1 + 2 * 3] * 3
    assert all(g.finish_reason == "stop" and g.logprobs is None for g in seen)


class VLLMGenerationSettings:
    """What ``trl_batch_generate`` reads and sets on TRL's ``VLLMGeneration``."""

    def __init__(self):
        self.max_completion_length = 256
        self.generation_kwargs = {"stop": ["<stop>"], "min_tokens": 1}
        self.during = None

    def generate(self, prompts, images, num_generations):
        assert images is None and num_generations == 1
        self.during = (self.max_completion_length, dict(self.generation_kwargs))
        completions = [[5, 6, 7] for _ in prompts]
        logprobs = [[[-0.1, -2.0], [None, -1.0], [-0.3, -0.2]] for _ in prompts]  # top-2, by rank
        ranked = [[[5, 9], [8, 6], [7, 1]] for _ in prompts]
        return prompts, completions, logprobs, ranked


def test_trl_generation_settings_are_set_for_the_call_and_restored():
    generation = VLLMGenerationSettings()
    batch_generate = trl_batch_generate(generation, max_tokens=12, stop=["</calculator>", "<stop>"])
    completions, logprobs = batch_generate([[1, 2], [3]])
    max_tokens, kwargs = generation.during
    assert max_tokens == 12 and kwargs["min_tokens"] == 1
    assert kwargs["stop"] == ["<stop>", "</calculator>"]
    assert kwargs["include_stop_str_in_output"] is True and kwargs["skip_special_tokens"] is False
    assert generation.max_completion_length == 256 and generation.generation_kwargs == {
        "stop": ["<stop>"],
        "min_tokens": 1,
    }
    # the sampled token's logprob, found by id among the top-k (NaN where vLLM had none)
    assert completions == [[5, 6, 7]] * 2
    assert logprobs[0][0] == -0.1 and logprobs[0][1] == -1.0 and logprobs[0][2] == -0.3
