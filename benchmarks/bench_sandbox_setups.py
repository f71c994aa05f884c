"""Sandbox runs/s in each setup people train in, beside the full-namespace mode and the peers' method.

Setups (root runs only; each in its own process, measured one after another in one pytest run):

- ``host root``: every layer (the full-namespace mode);
- ``host root, no landlock``: what Landlock adds under the namespaces;
- ``container root``: Docker's default capabilities (no CAP_SYS_ADMIN, through ``setpriv``): no namespace,
  Landlock as the filesystem wall, file access as uid 0 without capabilities where the interpreter needs it;
- ``container root, no landlock``: the same without it (then the canary finds the sandbox broken on a machine
  whose Python is under ``/root``; the runs still measure the layers' cost);
- ``peer subprocess.run``: a new ``python -c`` per call, no isolation (GEM, SkyRL-gym, verl-tool).

One worker, ``print(1)``, so only the execution overhead counts. Run::

    .venv/bin/pytest benchmarks/bench_sandbox_setups.py -q -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

RUNS = int(os.environ.get("TOOLGYM_BENCH_RUNS", "400"))
DOCKER = [
    "setpriv",
    "--inh-caps=-all",
    "--bounding-set=-all,+chown,+dac_override,+fowner,+fsetid,+kill,+setgid,+setuid,+setpcap,"
    "+net_bind_service,+net_raw,+sys_chroot,+mknod,+audit_write,+setfcap",
]
MEASURE = textwrap.dedent(
    """
    import json, logging, subprocess, sys, time
    logging.disable(logging.CRITICAL)
    runs, disable, peer = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3] == "peer"
    if peer:
        call = lambda: subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, check=True)
    else:
        from toolgym.sandbox import LocalSandbox
        box = LocalSandbox(workers=1, disable=disable)
        box._broken = None  # measure the layers' cost even where the canary found it unusable
        call = lambda: box.run("print(1)")
    for _ in range(10):
        call()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    times.sort()
    print("RESULT " + json.dumps({"runs_per_s": runs / sum(times), "p50_ms": 1000 * times[len(times) // 2]}))
    """
)
SETUPS = {
    "host root (every layer)": ([], [], False),
    "host root, no landlock": ([], ["landlock"], False),
    "container root (no CAP_SYS_ADMIN)": (DOCKER, [], False),
    "container root, no landlock": (DOCKER, ["landlock"], False),
    "peer subprocess.run": ([], [], True),
}
RESULTS: dict[str, dict] = {}


def measure(prefix: list[str], disable: list[str], peer: bool) -> dict:
    runs = max(30, RUNS // 10) if peer else RUNS
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", MEASURE, str(runs), json.dumps(disable), "peer" if peer else "box"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, proc.stderr[-2000:]
    return json.loads(line[len("RESULT ") :])


@pytest.mark.skipif(os.geteuid() != 0, reason="simulating a container needs root")
@pytest.mark.parametrize("setup", list(SETUPS))
def test_setup_runs_per_second(benchmark, setup):
    RESULTS[setup] = benchmark.pedantic(lambda: measure(*SETUPS[setup]), rounds=1, iterations=1)


def teardown_module() -> None:
    if not RESULTS:
        return
    base = RESULTS.get("host root (every layer)", {}).get("runs_per_s")
    print("\n\nsandbox runs/s by setup (1 worker, print(1))")
    print(f"{'setup':36} {'runs/s':>8} {'p50 ms':>8} {'vs host root':>13}")
    for name, r in RESULTS.items():
        ratio = f"{r['runs_per_s'] / base:.2f}x" if base else "-"
        print(f"{name:36} {r['runs_per_s']:8.0f} {r['p50_ms']:8.2f} {ratio:>13}")
