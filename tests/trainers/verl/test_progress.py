"""``toolgym train``'s view of a verl run (``toolgym.trainers.verl_adapter.progress``): verl's output streams
through, the step lines are parsed, and a table of the steps follows. The real run's table is checked in
``test_train_cpu.py``; here, a stand-in for verl prints lines the way verl's console logger does."""

from __future__ import annotations

import io
import sys

from toolgym.trainers.verl_adapter.progress import (
    parse_step_line,
    run_and_summarize,
    step_metrics,
    step_table,
)

LINE = (
    "(TaskRunner pid=1) step:3 - critic/score/mean:np.float64(0.625) - toolgym/pass_rate:0.625 - "
    "toolgym/pass_rate/toolgym/Math-v0:0.5 - toolgym/pass_rate/toolgym/SQL-v0:0.75 - "
    "toolgym/tool_errors/total:2.0 - timing_s/step:4.25 - actor/kl_loss:1.5e-05 - response_length/mean:nan"
)


def test_a_console_logger_line_is_parsed_with_numpy_reprs_exponents_and_nan():
    step, metrics = parse_step_line(LINE)
    assert step == 3
    assert metrics["critic/score/mean"] == 0.625
    assert metrics["toolgym/pass_rate/toolgym/Math-v0"] == 0.5
    assert metrics["actor/kl_loss"] == 1.5e-05
    assert metrics["response_length/mean"] != metrics["response_length/mean"]  # nan
    assert parse_step_line("Training Progress: 50%|") is None


def test_the_table_has_a_row_per_step_and_a_column_per_env_of_a_mixed_run():
    steps = step_metrics(f"noise\n{LINE}\n{LINE.replace('step:3', 'step:4').replace('0.625', '0.875')}\n")
    assert sorted(steps) == [3, 4]
    header, *rows = step_table(steps).splitlines()
    assert header.split() == [
        "step",
        "reward",
        "pass",
        "rate",
        "tool",
        "errors",
        "step",
        "s",
        "pass",
        "toolgym/Math-v0",
        "pass",
        "toolgym/SQL-v0",
    ]
    assert rows[0].split() == ["3", "0.625", "0.625", "2", "4.2", "0.500", "0.750"]
    assert rows[1].split()[:3] == ["4", "0.875", "0.875"]


def test_the_run_streams_its_output_keeps_its_exit_status_and_ends_with_the_table(capsys):
    script = f"import sys; print('starting'); print({LINE!r}); print('oops', file=sys.stderr); sys.exit(3)"
    out = io.StringIO()
    assert run_and_summarize([sys.executable, "-c", script], out=out) == 3
    assert out.getvalue() == f"starting\n{LINE}\n"
    err = capsys.readouterr().err
    assert "toolgym train: 1 training step\n" + step_table(step_metrics(LINE)) in err


def test_a_run_without_steps_prints_no_table(capsys):
    assert run_and_summarize([sys.executable, "-c", "print('no steps')"], out=io.StringIO()) == 0
    assert "training steps" not in capsys.readouterr().err
