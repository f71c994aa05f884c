"""``toolgym.testing.stall_watch``: a watched run that stops making progress is ended at once and the error
says where it stood; one that keeps moving runs to its end, however long."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toolgym.testing.stall_watch import Progress, RunStalled, line_shape, run_watched
from toolgym.trainers.verl_adapter.progress import step_metrics


def _python(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


def test_a_line_shape_leaves_out_numbers_and_ids():
    assert line_shape("(pid=4121) paused: staleness 3 >= 3, 0.52 s") == line_shape(
        "(pid=977) paused: staleness 4 >= 3, 10.1 s"
    )
    assert line_shape("request 3f2a9c0d11 done") == line_shape("request 77e0aa91b2 done")
    assert line_shape("sample collected") != line_shape("weights synced")


def test_a_run_that_keeps_printing_new_things_runs_to_its_end():
    code, log, _ = run_watched(
        _python(
            "import time\nfor i in range(6):\n    print('phase ' + 'x' * i, flush=True); time.sleep(0.5)"
        ),
        timeout_s=120,
        stall_s=30,
    )
    assert code == 0 and log.count("phase") == 6


def test_a_run_that_only_repeats_itself_is_stalled_and_ended(tmp_path):
    """As verl's rollouter does while paused: the same line with other numbers, for ever."""
    marker = tmp_path / "alive"
    script = (
        "import os, time\n"
        "print('[FullyAsyncTrainer] sample collected 1/2', flush=True)\n"
        f"open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "i = 0\n"
        "while True:\n"
        "    i += 1\n"
        "    print(f'[FullyAsyncRollouter] paused: staleness {i} >= 3', flush=True)\n"
        "    time.sleep(0.1)\n"
    )
    with pytest.raises(RunStalled) as stalled:
        run_watched(_python(script), timeout_s=300, stall_s=2)
    message = str(stalled.value)
    assert "made no progress for" in message and "the bound is 2 s" in message
    assert "last FullyAsyncTrainer lines:\n[FullyAsyncTrainer] sample collected 1/2" in message
    assert "last FullyAsyncRollouter lines:" in message
    pid = int(marker.read_text())
    assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0, "not ended"


def test_trace_events_are_progress_and_a_force_failed_event_ends_the_run_with_its_reason(tmp_path):
    trace = tmp_path / "trace"
    trace.mkdir()
    event = {"kind": "force_failed", "time": 1.0, "reason": "no episode of a prompt that ran ahead"}
    attempts, failed = str(trace / "attempt-1.jsonl"), str(trace / "force_failed-1.jsonl")
    script = (
        "import json, time\n"
        "print('started', flush=True)\n"
        "for i in range(8):\n"  # silent on stdout, but writing events: progress
        f"    open({attempts!r}, 'a').write(json.dumps({{'kind': 'attempt', 'time': i}}) + '\\n')\n"
        "    time.sleep(0.5)\n"
        f"open({failed!r}, 'w').write({json.dumps(json.dumps(event))} + '\\n')\n"
        "time.sleep(600)\n"
    )
    with pytest.raises(RunStalled) as stalled:
        run_watched(_python(script), timeout_s=900, stall_s=3, trace=trace)
    message = str(stalled.value)
    assert "could not be forced as asked" in message and "no episode of a prompt that ran ahead" in message
    assert "the trace's last events:" in message and '"kind": "attempt"' in message


def test_past_its_time_limit_a_run_is_ended_and_has_no_status():
    code, log, _ = run_watched(_python("import time\nprint('up', flush=True)\ntime.sleep(600)"), timeout_s=2)
    assert code is None and log == "up\n"


def test_the_watchs_summary_of_a_silence_after_a_step_line_leaves_that_steps_metrics_as_logged():
    """The summary quotes the line before the longest silence, cut at 200 characters: where that was verl's
    ``step:1 - ...`` line (its next step took longest), ``step_metrics`` read the quote as step 1's last line,
    and the verl tests lost every metric past the cut (CI, 12-08: ``KeyError: 'num_turns/max'``)."""
    metrics = " - ".join(f"metric/number_{i}:{i}.5" for i in range(40))
    log = f"(TaskRunner pid=1) step:1 - {metrics}\n(TaskRunner pid=1) step:2 - {metrics}\n"
    progress = Progress()
    for line in log.splitlines():
        progress.saw_line(line)
    progress.last -= 100  # a long silence after step 2's line, then one more line
    progress.saw_line("done")
    assert progress.longest_after.startswith("(TaskRunner pid=1) step:2 - metric/number_0")
    annotated = log + f"\n[stall watch] {progress.summary()} (bound 150 s)\n"  # as run_in_session ends it
    assert step_metrics(annotated)[2]["metric/number_39"] == 39.5
    assert step_metrics(annotated) == step_metrics(log)
