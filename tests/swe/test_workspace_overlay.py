"""An environment's compiled parts laid over a row's workspace archive (``toolgym.swe.row_envs``): what
the sandbox unpacks is the tree with the overlay's files winning, every member as the archives held it,
and a process lays a row's overlay once, however many SWE-v0 envs it makes."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

from toolgym.swe import row_envs
from toolgym.swe.repos import _tar
from toolgym.swe.row_envs import RowEnvironments, with_overlay

LONG = "pkg/" + "deep_" * 30 + "/module.py"  # past ustar's 100 characters: a pax header of its own


def _tree(root: Path) -> None:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from .core import f\n")
    (root / "pkg" / "core.py").write_text("def f():\n    return 'python'\n")
    (root / "pkg" / "empty.txt").write_text("")
    (root / "pkg" / "zeros.bin").write_bytes(b"head" + b"\0" * 2048)  # data whose last blocks are zeros
    (root / "pkg" / "sub" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "pkg" / "sub" / "run.sh").chmod(0o755)
    (root / "pkg" / "café.txt").write_text("non-ascii name\n")
    (root / "pkg" / "link.py").symlink_to("core.py")
    (root / LONG).parent.mkdir(parents=True)
    (root / LONG).write_text("long = True\n")


def _overlay(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _unpack(archive: bytes, dest: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """The tree GNU tar makes of the archive, as the sandbox's driver unpacks it: per path its kind, content
    (or link target) and mode."""
    dest.mkdir()
    subprocess.run(["tar", "-xf", "-", "-C", str(dest), "--no-same-owner"], input=archive, check=True)
    found: dict[str, tuple[str, bytes | str, int]] = {}
    for path in sorted(dest.rglob("*")):
        rel = path.relative_to(dest).as_posix()
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path), 0)
        elif path.is_file():
            found[rel] = ("file", path.read_bytes(), path.stat().st_mode & 0o777)
    return found


def test_the_overlay_wins_and_every_other_member_is_as_the_workspace_held_it(tmp_path):
    _tree(tmp_path / "repo")
    archive = _tar(tmp_path / "repo")
    compiled = b"\x7fELF" + bytes(range(256)) * 9  # not a multiple of 512 bytes
    overlay = _overlay({"pkg/core.py": b"def f():\n    return 'compiled'\n", "pkg/_speedups.so": compiled})

    merged = with_overlay(archive, overlay)

    base = _unpack(archive, tmp_path / "base")
    laid = _unpack(merged, tmp_path / "laid")
    assert laid["pkg/core.py"][1] == b"def f():\n    return 'compiled'\n"
    assert laid["pkg/_speedups.so"] == ("file", compiled, 0o755)
    assert {k: v for k, v in laid.items() if k not in ("pkg/core.py", "pkg/_speedups.so")} == {
        k: v for k, v in base.items() if k != "pkg/core.py"
    }
    assert base[LONG][1] == b"long = True\n" and base["pkg/zeros.bin"][1] == b"head" + b"\0" * 2048
    assert base["pkg/link.py"] == ("link", "core.py", 0) and base["pkg/sub/run.sh"][2] == 0o755
    with tarfile.open(fileobj=io.BytesIO(merged)) as tar:  # one member a path; the overlay's last
        names = tar.getnames()
        assert tar.extractfile("pkg/café.txt").read() == b"non-ascii name\n"
    assert len(names) == len(set(names))
    assert names[-2:] == ["pkg/core.py", "pkg/_speedups.so"]
    assert len(merged) % tarfile.RECORDSIZE == 0


def test_an_overlay_of_nothing_gives_the_archive_back_as_it_is(tmp_path):
    _tree(tmp_path / "repo")
    archive = _tar(tmp_path / "repo")
    assert with_overlay(archive, b"") is archive
    assert with_overlay(archive, _overlay({})) is archive


def test_a_process_lays_a_rows_overlay_once_for_every_env_it_makes(tmp_path, monkeypatch):
    _tree(tmp_path / "repo")
    archive = _tar(tmp_path / "repo")
    overlay = _overlay({"pkg/_speedups.so": b"compiled"})
    (tmp_path / "envs").mkdir()
    laid: list[str] = []

    class Workspaces:
        store_root = tmp_path / "repos"

        def archive(self, task):
            return archive

    task = SimpleNamespace(id="acme__pkg-1", data={"instance_id": "acme__pkg-1", "base_commit": "a" * 40})

    monkeypatch.setattr(row_envs, "_MERGED", type(row_envs._MERGED)())
    envs = [RowEnvironments(tmp_path / "envs", Workspaces()) for _ in range(3)]
    for env in envs:
        monkeypatch.setattr(env, "manifest", lambda task: {"key": "0123456789abcdef"})
        monkeypatch.setattr(env.store, "overlay_for", lambda key, base: laid.append(key) or overlay)
    first, *others = [env.archive(task) for env in envs]
    assert laid == ["0123456789abcdef"]
    assert all(other is first for other in others)
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        assert "pkg/_speedups.so" in tar.getnames()


def test_a_thousand_member_workspace_keeps_each_member_once_with_the_laid_one_replaced(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    for i in range(1000):
        (root / f"m{i}.py").write_text(f"x = {i}\n")
    merged = with_overlay(_tar(root), _overlay({"m500.py": b"x = 'laid'\n"}))
    with tarfile.open(fileobj=io.BytesIO(merged)) as tar:
        names = tar.getnames()
        assert sorted(names) == sorted(f"m{i}.py" for i in range(1000))
        assert names[-1] == "m500.py" and tar.extractfile("m500.py").read() == b"x = 'laid'\n"
        assert tar.extractfile("m499.py").read() == b"x = 499\n"
