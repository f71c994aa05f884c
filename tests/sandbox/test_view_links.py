"""LocalSandbox(links=): symlinks in the read-only view's root into each run's own private /tmp."""

from __future__ import annotations

import pytest

from toolgym.sandbox import LocalSandbox
from toolgym.sandbox.fsview import check_links


@pytest.mark.parametrize(
    "links",
    [{"/usr": "/tmp/x"}, {"/tmp": "/tmp/x"}, {"/a/b": "/tmp/x"}, {"/app": "/etc"}, {"/app": "/tmp/../etc"}],
)
def test_a_link_must_be_new_and_point_into_the_runs_tmp(links):
    with pytest.raises(ValueError, match="view link"):
        check_links(links)


def test_each_run_sees_its_own_files_through_the_link():
    with LocalSandbox(workers=1, links={"/app": "/tmp/app"}) as sb:
        if "fs_view" not in sb.isolation.active:  # the links live in the view; without it they do not exist
            assert not sb.run("import os; print(os.path.lexists('/app'))").stdout.startswith("True")
            return
        assert "/app -> /tmp/app" in sb.isolation.details["fs_view"]
        code = "import os; print(open('/app/f').read(), os.path.realpath('/app'))"
        first = sb.run(code, files={"app/f": "one"})
        second = sb.run(code, files={"app/f": "two"})
        assert (first.stdout, second.stdout) == ("one /tmp/app\n", "two /tmp/app\n")
        wrote = sb.run("open('/app/x', 'w').write('1')")
        assert wrote.status == "error" and "No such file" in wrote.stderr  # /tmp/app is not there unless made
