"""A program's output does not depend on which fork server ran it, nor on the host's environment.

Sets of strings iterate in hash order, and CPython salts string hashes per process. Every sandboxed child is
forked from its server and shares the server's salt, which the server fixes (``PYTHONHASHSEED=0``), so the
same action gives the same observation in every episode, process and machine.
"""

import os

from toolgym.sandbox import LocalSandbox

SET_ORDER = "print(list({'alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta', 'iota'}))"
SUBPROCESS_SET_ORDER = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {SET_ORDER!r}])"


def output_of(code: str) -> str:
    with LocalSandbox(workers=1) as box:
        result = box.run(code)
    assert result.status == "ok", result
    return result.stdout


def test_a_set_prints_in_the_same_order_from_every_server():
    first = output_of(SET_ORDER)
    assert first == output_of(SET_ORDER) == output_of(SET_ORDER)
    # the program's own python subprocesses too
    assert output_of(SUBPROCESS_SET_ORDER) == first


def test_the_hosts_python_variables_do_not_reach_the_program(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "12345")
    monkeypatch.setenv("PYTHONPATH", "/host/site")
    out = output_of("import os, sys; print(os.environ.get('PYTHONHASHSEED'), '/host/site' in sys.path)")
    assert out.split() == ["0", "False"]
    assert "PYTHONPATH" not in os.environ or os.environ["PYTHONPATH"] == "/host/site"


def test_the_interpreter_keeps_the_isolated_flags():
    out = output_of("import sys; print(sys.flags.no_user_site, sys.flags.safe_path, sys.path[0])")
    no_user_site, safe_path, first_path = out.split()
    assert no_user_site == "1" and safe_path == "True"
    assert first_path != "" and not first_path.endswith("/.")  # no cwd on sys.path
