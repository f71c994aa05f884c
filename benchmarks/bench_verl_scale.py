"""verl through toolgym on several ranks and on several nodes, on a CPU: the learning run of
``examples/verl/learn-cpu.yaml`` (GRPO on ``toolgym-debug/Probe-v0``) with two FSDP ranks on one node, and
with one rank on each of two nodes of a Ray cluster started the way docs/training.md ("Several nodes") tells
users to (``ray start --head``, then ``ray start --address`` for the second node, here on the same machine,
each declaring one GPU).

Every process of each run loads ``toolgym.testing.verl_trace``, which records each rank's actor update (the
rows it trained on, checksums of the policy after it) and each episode of toolgym's agent loop (the process
and the Ray node it ran in). The checks, per training step:

- the two ranks trained on different halves of the batch, which together are exactly the step's 32 episodes
  (4 prompts x 8 samples; rows and episodes compared by their tokens);
- after the update, the policy each rank holds (gathered from the shards) is the same on both, and it
  changed since the step before; the ranks' own shards differ (the model really is split);
- the episodes ran in two agent-loop workers (one per rank) and, on two nodes, on both nodes, as did the
  ranks: the episodes' tools run in those workers' processes too;
- and the mean reward rises as the one-rank run's does (benchmarks/bench_verl_learning.py).

Not in ``make test``: each run is a full verl start plus 25 steps, about 10 minutes on two cores.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolgym.testing.probe import check_probe_curve
from toolgym.testing.servers import free_port
from toolgym.testing.verl import end_session, removing_leaked_shm, run_in_session
from toolgym.testing.verl_trace import TRACE_ENV, read_trace, trace_env
from toolgym.trainers.verl_adapter.progress import step_metrics, step_table

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "verl" / "learn-cpu.yaml"
TIMEOUT_S = 2400
SAMPLES_PER_STEP = 4 * 8  # train_batch_size x group_size in learn-cpu.yaml
RAY = Path(sys.executable).parent / "ray"


def _config(tmp_path: Path, *, gpus_per_node: int, nodes: int) -> Path:
    text = EXAMPLE.read_text()
    assert "\ngpus_per_node: 1\n" in text
    text = text.replace("\ngpus_per_node: 1\n", f"\ngpus_per_node: {gpus_per_node}\nnodes: {nodes}\n")
    # the same 32 sequences an update, half on each rank: micro batches of 16 (toolgym train checks it)
    assert "\nmicro_batch_size_per_gpu: 32\n" in text
    ranks = gpus_per_node * nodes
    text = text.replace("\nmicro_batch_size_per_gpu: 32\n", f"\nmicro_batch_size_per_gpu: {32 // ranks}\n")
    path = tmp_path / f"learn-{nodes}x{gpus_per_node}.yaml"
    path.write_text(text)
    return path


@contextlib.contextmanager
def two_node_ray_cluster(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Two Ray nodes on this machine, each with 8 CPUs and one declared GPU, started with Ray's own CLI;
    yields the environment a driver needs to join them (the address, and the token Ray 2.5x+ requires of
    every node and driver once its authentication is on). Both nodes are ended afterwards (only these:
    ``ray stop`` would end every Ray instance on the machine)."""
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    common = ["--num-cpus=8", "--num-gpus=1", "--disable-usage-stats", "--block"]
    started = []
    try:
        for name, where in (
            ("head", ["--head", f"--port={port}", "--include-dashboard=false"]),
            ("worker", [f"--address=127.0.0.1:{port}"]),
        ):
            log = open(tmp_path / f"ray-{name}.log", "w")  # noqa: SIM115 (closed with the process)
            started.append(
                subprocess.Popen(
                    [str(RAY), "start", *where, *common],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
            _wait_for_nodes(len(started), port, env)
        yield {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}
    finally:
        for proc in started:
            end_session(proc.pid)
            proc.wait()
        # `ray stop` would remove the address `ray start --head` left for drivers on this machine
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        with contextlib.suppress(OSError):
            if current.read_text().strip().endswith(f":{port}"):
                current.unlink()


def _wait_for_nodes(count: int, port: int, env: dict[str, str], timeout_s: float = 180) -> None:
    probe = (
        f"import ray; ray.init(address='127.0.0.1:{port}', logging_level='ERROR');"
        "print(sum(n['Alive'] and n['Resources'].get('GPU') == 1 for n in ray.nodes()))"
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
        time.sleep(2)
    pytest.fail(f"the Ray cluster did not reach {count} nodes in {timeout_s}s:\n{proc.stderr[-2000:]}")


def _train(config: Path, out: Path, env: dict[str, str]) -> tuple[dict[int, dict[str, float]], list[dict]]:
    trace = out / "trace"
    env = {**env, **trace_env(trace)}
    # a node started by `ray start` has its shell's environment: the trace switch goes through Ray's runtime
    # env, as the launcher sends toolgym's modules and the CPU platform's variables
    command = [sys.executable, "-m", "toolgym.cli", "train", "--config", str(config), "--out", str(out)]
    command += ["--", f"+ray_kwargs.ray_init.runtime_env.env_vars.{TRACE_ENV}={trace}"]
    with removing_leaked_shm():
        code, log = run_in_session(command, TIMEOUT_S, env=env)
    (out / "train.log").parent.mkdir(parents=True, exist_ok=True)
    (out / "train.log").write_text(log)
    if code is None:
        pytest.fail(f"the run did not finish in {TIMEOUT_S}s; the end of its log:\n{log[-6000:]}")
    assert code == 0, f"the run failed; the end of its log:\n{log[-6000:]}"
    steps = step_metrics(log)
    print(f"\n{out.name}: {len(steps)} steps\n{step_table(steps)}")
    return steps, read_trace(trace)


def _updates_by_step(events: list[dict]) -> list[dict[int, dict]]:
    """The actor's updates, one dict per training step: rank -> that rank's event."""
    per_rank = defaultdict(list)
    for event in events:
        if event["kind"] == "train" and "CausalLM" in event["model"]:
            per_rank[event["rank"]].append(event)
    assert sorted(per_rank) == [0, 1], f"ranks that updated the actor: {sorted(per_rank)}"
    assert len(per_rank[0]) == len(per_rank[1]), {rank: len(e) for rank, e in per_rank.items()}
    return [dict(enumerate(pair)) for pair in zip(per_rank[0], per_rank[1], strict=True)]


def _check_ranks_and_episodes(steps: dict[int, dict[str, float]], events: list[dict]) -> list[dict]:
    """Rows are compared by their tokens, as multisets: Probe-v0's prompt is the same for every task, and
    once the policy has learned, every sample generates the same tokens, so late steps' rows can all be
    alike. The split is then seen on the steps whose rows still differ (the first ones at least: the
    random policy's tokens vary)."""
    updates = _updates_by_step(events)
    assert len(updates) == len(steps), (len(updates), len(steps))
    episodes = [event for event in events if event["kind"] == "episode"]
    assert len(episodes) == SAMPLES_PER_STEP * len(steps)
    previous, split_seen = None, []
    for step, ranks in enumerate(updates, start=1):
        first, second = ranks[0], ranks[1]
        played = episodes[(step - 1) * SAMPLES_PER_STEP : step * SAMPLES_PER_STEP]  # a step's rollout
        assert first["dp_size"] == second["dp_size"] == 2
        assert len(first["rows"]) == len(second["rows"]) == SAMPLES_PER_STEP // 2, step
        # each rank trained on its own half: together exactly the step's episodes, none twice
        trained = Counter(first["rows"]) + Counter(second["rows"])
        assert trained == Counter(event["tokens"] for event in played), f"step {step}: rows != episodes"
        if Counter(first["rows"]) != Counter(second["rows"]):
            split_seen.append(step)
        assert first["policy"] == pytest.approx(second["policy"], rel=1e-9, abs=1e-9), step
        assert first["shard"] != second["shard"], f"step {step}: both ranks hold the same shard"
        assert previous is None or first["policy"] != previous, f"step {step}: the policy did not change"
        previous = first["policy"]
    print(f"steps whose two ranks trained on different rows: {split_seen}")
    assert split_seen[:5] == [1, 2, 3, 4, 5], f"the ranks' rows differed only at steps {split_seen}"
    workers = {event["pid"] for event in episodes}
    assert len(workers) == 2, f"episodes ran in {len(workers)} agent-loop workers, not one per rank"
    return episodes


def _check_learned(steps: dict[int, dict[str, float]]) -> None:
    rewards = [steps[step]["critic/score/mean"] for step in sorted(steps)]
    curve = [round(r, 2) for r in rewards]
    print(f"mean reward per step: {curve}")
    check_probe_curve(rewards, learns=True)


def test_two_ranks_on_one_node_split_the_batch_keep_one_policy_and_learn(tmp_path):
    config = _config(tmp_path, gpus_per_node=2, nodes=1)
    steps, events = _train(config, tmp_path / "two-ranks", dict(os.environ))
    _check_ranks_and_episodes(steps, events)
    _check_learned(steps)


def test_two_nodes_train_one_rank_each_and_both_play_episodes(tmp_path):
    with two_node_ray_cluster(tmp_path) as env:
        steps, events = _train(_config(tmp_path, gpus_per_node=1, nodes=2), tmp_path / "two-nodes", env)
    episodes = _check_ranks_and_episodes(steps, events)
    rank_nodes = {rank: update["node"] for rank, update in _updates_by_step(events)[0].items()}
    assert None not in rank_nodes.values() and rank_nodes[0] != rank_nodes[1], rank_nodes
    episode_nodes = {event["node"] for event in episodes}
    assert episode_nodes == set(rank_nodes.values()), (episode_nodes, rank_nodes)
    per_node = {node: sum(event["node"] == node for event in episodes) for node in episode_nodes}
    print(f"episodes per node: {sorted(per_node.values())}; ranks on nodes {rank_nodes}")
    _check_learned(steps)
