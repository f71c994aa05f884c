"""str_replace_editor: SWE-agent's and OpenHands' editor on the bash tool's workspace. Each command does what
its name says, a non-unique or absent ``old_str`` leaves the file untouched with a count, paths outside the
workspace (absolute, ``..``, through a symbolic link) are refused, undo is per file, output is capped, and
the bash tool sees every edit (one workspace)."""

from __future__ import annotations

import pytest

from toolgym.core.task import Task
from toolgym.core.types import ToolCall
from toolgym.sandbox import LocalSandbox
from toolgym.sandbox.shared import TERMINAL_LINKS
from toolgym.tools.base import make_tool
from toolgym.tools.bash import BashTool
from toolgym.tools.editor import EditorTool

TASK = Task(
    id="t",
    prompt="",
    data={
        "files": {
            "a.py": "x = 1\ny = 2\nx = 1\n",
            "pkg/mod.py": "def f():\n    return 1\n",
            "pkg/sub/z.txt": "z",
        }
    },
)


@pytest.fixture(scope="module")
def sb():
    with LocalSandbox(workers=2, links=TERMINAL_LINKS, max_sessions=8) as box:
        yield box


@pytest.fixture
def tools(sb):
    bash = BashTool(sandbox=sb, timeout=5)
    bash.bind_task(TASK)
    bash.start_episode("e1")
    yield bash, EditorTool(bash)
    bash.close()


def edit(editor: EditorTool, **args):
    return editor(ToolCall(name="str_replace_editor", arguments=args))


def sh(bash: BashTool, command: str) -> str:
    return bash.run(BashTool.Args(command=command)).output


def test_view_shows_numbered_lines_a_range_and_a_directory_two_levels_deep(tools):
    _, ed = tools
    out = edit(ed, command="view", path="/app/a.py")
    assert out.status == "ok" and out.output.endswith("     1\tx = 1\n     2\ty = 2\n     3\tx = 1\n     4\t")
    assert "cat -n" in out.output
    ranged = edit(ed, command="view", path="/app/a.py", view_range=[2, 3]).output
    assert ranged.endswith("     2\ty = 2\n     3\tx = 1")
    assert edit(ed, command="view", path="/app/a.py", view_range=[2, -1]).output.endswith("     4\t")
    listing = edit(ed, command="view", path="/app").output.splitlines()
    assert listing[1:] == ["/app", "/app/a.py", "/app/pkg", "/app/pkg/mod.py", "/app/pkg/sub"]
    bad = edit(ed, command="view", path="/app/a.py", view_range=[9, 10])
    assert bad.status == "error" and "[1, 4]" in bad.output


def test_str_replace_needs_exactly_one_occurrence_and_leaves_the_file_untouched_otherwise(tools):
    bash, ed = tools
    several = edit(ed, command="str_replace", path="/app/a.py", old_str="x = 1", new_str="x = 9")
    assert (
        several.status == "error"
        and "Multiple occurrences (2)" in several.output
        and "[1, 3]" in several.output
    )
    none = edit(ed, command="str_replace", path="a.py", old_str="w = 0", new_str="")
    assert none.status == "error" and "did not appear verbatim" in none.output
    assert sh(bash, "cat a.py").startswith("x = 1\ny = 2\nx = 1\n")
    ok = edit(ed, command="str_replace", path="a.py", old_str="y = 2", new_str="y = 3")
    assert ok.status == "ok" and "     2\ty = 3" in ok.output
    assert sh(bash, "cat a.py").startswith("x = 1\ny = 3\nx = 1\n")  # the shell sees the edit


def test_create_insert_and_undo_per_file(tools):
    bash, ed = tools
    assert edit(ed, command="create", path="/app/a.py", file_text="").status == "error"  # exists
    assert edit(ed, command="create", path="/app/new/b.py", file_text="b = 1\n").status == "ok"
    assert (
        edit(ed, command="insert", path="/app/pkg/mod.py", insert_line=0, new_str="import os").status == "ok"
    )
    assert edit(ed, command="insert", path="/app/pkg/mod.py", insert_line=99, new_str="x").status == "error"
    edit(ed, command="str_replace", path="/app/pkg/mod.py", old_str="return 1", new_str="return 2")
    assert sh(bash, "cat pkg/mod.py").startswith("import os\ndef f():\n    return 2\n")
    assert edit(ed, command="undo_edit", path="/app/pkg/mod.py").status == "ok"
    assert sh(bash, "cat pkg/mod.py").startswith("import os\ndef f():\n    return 1\n")
    edit(ed, command="undo_edit", path="/app/pkg/mod.py")
    assert sh(bash, "cat pkg/mod.py").startswith("def f():\n    return 1\n")
    assert "No edit history" in edit(ed, command="undo_edit", path="/app/pkg/mod.py").output
    edit(ed, command="undo_edit", path="/app/new/b.py")  # undoing a creation removes the file
    assert "No such file" in sh(bash, "cat new/b.py")


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../../etc/passwd", "/app/../etc/passwd", "/tmp/x", "/appx/a.py", "link/passwd"]
)
def test_paths_outside_the_workspace_are_refused(tools, path):
    bash, ed = tools
    sh(bash, "ln -s /etc link")
    out = edit(ed, command="view", path=path)
    assert out.status == "error" and "outside" in out.output
    written = edit(ed, command="create", path=path + ".new", file_text="x")
    assert written.status == "error" and "outside" in written.output


def test_output_is_capped_and_bad_arguments_are_the_models_errors(sb):
    bash = BashTool(sandbox=sb, timeout=5)
    bash.bind_task(Task(id="big", prompt="", data={"files": {"big.txt": "line\n" * 20_000}}))
    bash.start_episode("e2")
    ed = EditorTool(bash, max_output_chars=2_000)
    try:
        out = edit(ed, command="view", path="/app/big.txt")
        assert out.status == "ok" and len(out.output) <= 2_100 and "cut" in out.output
        assert edit(ed, command="delete", path="/app/big.txt").status == "error"
        assert edit(ed, command="str_replace", path="/app/big.txt").status == "error"  # no old_str
        assert edit(ed, command="view", path="/app/nothing").status == "error"
    finally:
        bash.close()


def test_an_editor_without_a_bash_tool_keeps_a_workspace_of_its_own():
    ed = make_tool("str_replace_editor")
    assert isinstance(ed, EditorTool)
    ed.bind_task(TASK)
    ed.start_episode("own")
    try:
        assert "x = 1" in edit(ed, command="view", path="a.py").output
    finally:
        ed.end_episode("own")
        ed.close()


def test_without_the_view_paths_are_relative_to_the_workspace_and_the_nominal_path_still_works():
    """Without the view (a container, a cluster user) the workspace is the session's own directory. Where
    this machine's sandbox cannot let commands write it there (children reading files as uid 0), both tools
    refuse loudly, naming why, instead of playing a workspace that cannot change."""
    with LocalSandbox(workers=1, links=TERMINAL_LINKS, max_sessions=4, disable=["fs_view"]) as box:
        bash = BashTool(sandbox=box, timeout=5)
        bash.bind_task(TASK)
        bash.start_episode("nv")
        ed = EditorTool(bash)
        try:
            why = bash.workspace_paths()
            out = edit(ed, command="view", path="/app/pkg/mod.py")
            if isinstance(why, str):
                assert out.status == "infra_error" and why in out.output
                return
            assert out.status == "ok" and "on pkg/mod.py:" in out.output
            listing = edit(ed, command="view", path="pkg").output.splitlines()[1:]
            assert listing == ["pkg", "pkg/mod.py", "pkg/sub", "pkg/sub/z.txt"]
            assert edit(ed, command="view", path="/etc/passwd").status == "error"
        finally:
            bash.close()
