"""The local sandbox against the peers' method, and what each isolation layer costs.

Peers (GEM, SkyRL-gym, verl-tool) run model code with ``subprocess.run([python, "-c", code])``: no isolation
beyond a string blocklist, and a new interpreter per call. Measured side by side in one run, on a trivial
snippet (``print(1)``) so that only the execution overhead counts:

- latency: p50/p99 of one call at a time;
- throughput: runs/s with 2 workers (the sandbox's 2 fork servers; a thread pool of 2 for the peers);
- per-layer cost: the local sandbox's p50 with each isolation layer switched off in turn (``disable=``).

Run::

    .venv/bin/pytest benchmarks/bench_sandbox.py -q -s
    TOOLGYM_BENCH_RUNS=200 .venv/bin/pytest benchmarks/bench_sandbox.py -q -s   # a quick look
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from toolgym.sandbox import LAYERS, Limits, LocalSandbox

RUNS = int(os.environ.get("TOOLGYM_BENCH_RUNS", "600"))
PEER_RUNS = max(50, RUNS // 6)
WORKERS = 2
CODE = "print(1)"
LIMITS = Limits(timeout_s=10)

LATENCY: dict[str, list[float]] = {}
THROUGHPUT: dict[str, float] = {}
CPU_PER_RUN: dict[str, float] = {}  # fork server + its children, seconds of CPU per run
BASELINE = "all layers on (1 worker)"


def server_cpu(box: LocalSandbox) -> float:
    """CPU seconds used so far by a sandbox's fork servers and everything they forked and reaped."""
    total = 0.0
    for pid in box.server_pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def peer_run(code: str = CODE) -> str:
    """What GEM / SkyRL-gym / verl-tool do for every tool call."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10).stdout


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table() -> str:
    local = LATENCY.get("local (all layers)")
    base_p50 = statistics.median(local) if local else float("nan")
    layer_base = statistics.median(LATENCY[BASELINE]) if BASELINE in LATENCY else float("nan")
    cpu_base = CPU_PER_RUN.get(BASELINE, float("nan"))
    load = os.getloadavg()[0]
    lines = ["", f"sandbox benchmark: trivial snippet {CODE!r}, {os.cpu_count()} cores, load {load:.1f}", ""]
    cols = ("p50 ms", 8), ("p99 ms", 8), ("runs", 6), ("d p50 ms", 9), ("cpu/run ms", 11), ("d cpu", 7)
    lines.append(f"{'configuration':34} " + " ".join(f"{name:>{width}}" for name, width in cols))
    for name, times in LATENCY.items():
        p50 = statistics.median(times)
        base = layer_base if name.startswith("without") else base_p50
        cpu = CPU_PER_RUN.get(name)
        cpu_cols = f"{cpu * 1e3:11.2f} {(cpu - cpu_base) * 1e3:+7.2f}" if cpu is not None else ""
        lines.append(
            f"{name:34} {p50 * 1e3:8.2f} {_pct(times, 0.99) * 1e3:8.2f} {len(times):6d} "
            f"{(p50 - base) * 1e3:+9.2f} {cpu_cols}"
        )
    lines.append(
        "(d = difference to 'local (all layers)', or for 'without ...' rows to the 1-worker all-on run;"
        " cpu/run = fork server + children)"
    )
    lines.append("")
    lines.append(f"{'throughput, 2 workers':34} {'runs/s':>8}")
    for name, rate in THROUGHPUT.items():
        lines.append(f"{name:34} {rate:8.1f}")
    if "local (all layers)" in THROUGHPUT and "peer subprocess.run" in THROUGHPUT:
        ratio = THROUGHPUT["local (all layers)"] / THROUGHPUT["peer subprocess.run"]
        lines.append(f"{'local / peer':34} {ratio:8.1f}x")
    if local and "peer subprocess.run" in LATENCY:
        ratio = statistics.median(LATENCY["peer subprocess.run"]) / base_p50
        lines.append(f"{'peer p50 / local p50':34} {ratio:8.1f}x")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def sandbox(request):
    with LocalSandbox(limits=LIMITS, workers=WORKERS) as sb:
        assert sb.isolation.missing == {} or os.geteuid() != 0, sb.isolation.missing
        for _ in range(20):  # warm up both servers
            sb.run(CODE)
        yield sb
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in table().splitlines():
        reporter.write_line(line)


def _latency(benchmark, fn, runs: int, record: list[float]):
    def once():
        started = time.perf_counter()
        out = fn()
        record.append(time.perf_counter() - started)
        return out

    return benchmark.pedantic(once, rounds=runs, iterations=1)


def _throughput(benchmark, fn, runs: int) -> float:
    rates: list[float] = []

    def batch():
        with ThreadPoolExecutor(WORKERS) as pool:
            started = time.perf_counter()
            outs = list(pool.map(lambda _: fn(), range(runs)))
            rates.append(runs / (time.perf_counter() - started))
        return outs

    outs = benchmark.pedantic(batch, rounds=3, iterations=1)
    assert all(o == "1\n" for o in outs)
    return statistics.median(rates)


def test_latency_local(benchmark, sandbox):
    times = LATENCY.setdefault("local (all layers)", [])
    res = _latency(benchmark, lambda: sandbox.run(CODE), RUNS, times)
    assert res.ok and res.stdout == "1\n"


def test_latency_peer(benchmark, sandbox):
    times = LATENCY.setdefault("peer subprocess.run", [])
    assert _latency(benchmark, peer_run, PEER_RUNS, times) == "1\n"


def test_throughput_local(benchmark, sandbox):
    THROUGHPUT["local (all layers)"] = _throughput(benchmark, lambda: sandbox.run(CODE).stdout, RUNS)


def test_throughput_peer(benchmark, sandbox):
    THROUGHPUT["peer subprocess.run"] = _throughput(benchmark, peer_run, PEER_RUNS)


def test_layer_costs(benchmark, sandbox):
    """p50 with each layer switched off in turn (ALL: every layer off), against all layers on.

    The configurations are measured interleaved, one run each per round, so that load from anything else
    on the machine falls on all of them alike. Switching off ``fs_view`` or ``pid_namespace`` makes runs
    slower, not faster: their fallbacks (a host tmp dir per run, a uid-wide kill sweep) cost more.
    """
    configs = {"all layers on (1 worker)": ()} | {f"without {layer}": (layer,) for layer in LAYERS}
    configs["without ALL"] = LAYERS
    boxes = {name: LocalSandbox(limits=LIMITS, workers=1, disable=off) for name, off in configs.items()}
    try:
        for box in boxes.values():
            for _ in range(10):
                box.run(CODE)
        rounds = max(100, RUNS // 3)
        times = {name: LATENCY.setdefault(name, []) for name in boxes}
        cpu_before = {name: server_cpu(box) for name, box in boxes.items()}

        def one_round():
            for name, box in boxes.items():
                started = time.perf_counter()
                res = box.run(CODE)
                times[name].append(time.perf_counter() - started)
                assert res.ok

        benchmark.pedantic(one_round, rounds=rounds, iterations=1)
        for name, box in boxes.items():
            CPU_PER_RUN[name] = (server_cpu(box) - cpu_before[name]) / rounds
    finally:
        for box in boxes.values():
            box.close()
