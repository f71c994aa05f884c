"""``toolgym.testing.verl_trace``, the trace benchmarks/bench_verl_scale.py reads: an episode's tokens and the
row a rank trains on must fingerprint alike, and the events of every process come back in time order. (The
wrappers themselves run inside verl's processes: the bench.)"""

import asyncio
import itertools
import json
import threading

import pytest
import torch

from toolgym.testing import verl_trace
from toolgym.testing.verl_trace import fingerprint, read_trace


def test_an_episodes_token_list_and_its_jagged_training_row_fingerprint_alike():
    prompt, response = [151644, 872, 198, 42], [7, 151645]
    rows = torch.nested.nested_tensor(
        [torch.tensor(prompt + response), torch.tensor([1, 2, 3])], layout=torch.jagged
    )
    batch = {"input_ids": rows}
    assert verl_trace._row_fingerprints(batch) == [fingerprint(prompt + response), fingerprint([1, 2, 3])]
    assert fingerprint(prompt + response) != fingerprint(response + prompt)
    padded = {"input_ids": torch.tensor([[5, 6], [7, 8]])}  # a plain tensor: one row each
    assert verl_trace._row_fingerprints(padded) == [fingerprint([5, 6]), fingerprint([7, 8])]


def test_the_trace_reads_back_in_time_order_across_processes(tmp_path, monkeypatch):
    monkeypatch.setenv(verl_trace.TRACE_ENV, str(tmp_path))
    verl_trace._write("episode", tokens="a")
    verl_trace._write("train", rank=0)
    (tmp_path / "episode-1.jsonl").write_text(json.dumps({"kind": "episode", "time": 0.0, "pid": 1}) + "\n")
    events = read_trace(tmp_path)
    assert [e["kind"] for e in events] == ["episode", "episode", "train"]
    assert events[0]["pid"] == 1 and events[1]["tokens"] == "a" and events[2]["rank"] == 0


def test_the_environment_loads_the_module_next_to_toolgyms(tmp_path):
    env = verl_trace.trace_env(tmp_path)
    assert env[verl_trace.TRACE_ENV] == str(tmp_path)
    modules = env["VERL_USE_EXTERNAL_MODULES"].split(",")
    assert "toolgym.testing.verl_trace" in modules and "toolgym.trainers.verl_adapter.compat" in modules


def _forcing(monkeypatch, tmp_path, first_step_prompts: int = 2) -> None:
    monkeypatch.setenv(verl_trace.TRACE_ENV, str(tmp_path))
    for key, value in verl_trace.trace_env(
        tmp_path, tokens=True, force_partial_after_prompts=first_step_prompts
    ).items():
        monkeypatch.setenv(key, value)


def test_only_the_episodes_of_prompts_after_the_first_steps_are_held():
    """verl's fully-async rollouter numbers its prompts in feed order (``uid_sample_<epoch>_<n>``, n from 1);
    the first step's prompts are never held, whatever their epoch."""
    assert not verl_trace.runs_ahead("uid_sample_0_1", 2)
    assert not verl_trace.runs_ahead("uid_sample_0_2", 2)
    assert verl_trace.runs_ahead("uid_sample_0_3", 2)
    assert verl_trace.runs_ahead("uid_sample_1_12", 2)
    for uid in ("", "3f2a9c", "uid_sample_0_"):  # not the fully-async rollouter's: the force cannot work
        with pytest.raises(verl_trace.ForceFailed, match="fully_async run"):
            verl_trace.runs_ahead(uid, 2)


@pytest.mark.parametrize("order", list(itertools.permutations([1, 2, 3]))[:4])
def test_episodes_that_start_in_any_order_over_two_workers_hold_only_the_run_ahead_prompt(
    order, tmp_path, monkeypatch
):
    """The stall this replaced: the first 4 episodes to ask for a generation, counted in each agent-loop
    worker, went, and the rest waited for the sync after step 1's update. When one of step 1's episodes came
    after a run-ahead one (another start order under load), or step 1's episodes were spread over two
    workers, step 1 waited for an episode that waited for it. Here the episodes of the three prompts (2
    each) start in interleaved orders, split over two workers (event loops in threads): step 1's all finish
    while the sync has not begun, the run-ahead prompt's wait for it, and go once it begins."""
    _forcing(monkeypatch, tmp_path)
    uids = [f"uid_sample_0_{n}" for n in order] * 2  # episode i of every prompt, then episode ii
    finished: list[str] = []
    early: list[bool] = []  # per worker: a held episode finished before the sync began
    step_one_done, checked = threading.Barrier(3, timeout=30), threading.Barrier(3, timeout=30)

    def worker(mine: list[str]) -> None:
        async def play(uid: str) -> None:
            await verl_trace._hold_run_ahead(uid)
            finished.append(uid)

        async def main() -> None:
            tasks = {uid_index: asyncio.create_task(play(uid)) for uid_index, uid in enumerate(mine)}
            ahead = [task for i, task in tasks.items() if mine[i].endswith("_3")]
            await asyncio.gather(*(task for task in tasks.values() if task not in ahead))
            await asyncio.to_thread(step_one_done.wait)
            await asyncio.sleep(0.2)  # the held ones are still held ...
            early.append(any(task.done() for task in ahead))
            await asyncio.to_thread(checked.wait)
            await asyncio.wait_for(asyncio.gather(*ahead), 30)  # ... until the sync begins

        asyncio.run(main())

    threads = [threading.Thread(target=worker, args=(uids[half::2],)) for half in (0, 1)]
    for thread in threads:
        thread.start()
    step_one_done.wait()
    assert sorted(finished) == ["uid_sample_0_1"] * 2 + ["uid_sample_0_2"] * 2
    checked.wait()
    assert early == [False, False]
    verl_trace._sync_begun().touch()
    for thread in threads:
        thread.join(30)
    assert sorted(finished)[-2:] == ["uid_sample_0_3"] * 2 and len(finished) == 6
    asyncio.run(verl_trace._hold_run_ahead("uid_sample_0_4"))  # fed after the sync began: not held
    events = read_trace(tmp_path)
    assert [e["uid"] for e in events if e["kind"] == "held"] == ["uid_sample_0_3"] * 2
    assert [e["uid"] for e in events if e["kind"] == "released"] == ["uid_sample_0_3"] * 2
    assert not [e for e in events if e["kind"] == "force_failed"]


def test_a_run_that_cannot_be_forced_says_why_in_a_force_failed_event(tmp_path, monkeypatch):
    """An episode whose uid is not the fully-async rollouter's goes unheld; an episode whose sync never
    begins gives up after ``HOLD_S``: each writes the reason, which a test's watch ends the run on."""
    _forcing(monkeypatch, tmp_path)
    monkeypatch.setattr(verl_trace, "HOLD_S", 0.1)
    asyncio.run(verl_trace._hold_run_ahead("5c0ffee"))
    asyncio.run(verl_trace._hold_run_ahead("uid_sample_0_3"))
    reasons = [e["reason"] for e in read_trace(tmp_path) if e["kind"] == "force_failed"]
    assert len(reasons) == 2, reasons
    assert "'5c0ffee' is not verl's fully-async rollouter's" in reasons[0]
    assert "uid_sample_0_3 was held 0 s and no sync after an update began" in reasons[1]
