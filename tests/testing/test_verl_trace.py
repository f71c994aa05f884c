"""``toolgym.testing.verl_trace``, the trace benchmarks/bench_verl_scale.py reads: an episode's tokens and the
row a rank trains on must fingerprint alike, and the events of every process come back in time order. (The
wrappers themselves run inside verl's processes: the bench.)"""

import json

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
