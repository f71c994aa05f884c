"""``toolgym swe envs report``: a store's disk as it lies (uv's hard links counted once, the part linked
from its cache shown apart), build seconds and validation, per environment and per repository."""

import json
import os

from toolgym.cli import main
from toolgym.swe.store_report import disk_usage, store_report


def _env(root, key, repo, build_s, rows):
    env = root / key
    (env / "venv" / "bin").mkdir(parents=True)
    (env / "venv" / "bin" / "python").write_bytes(b"#!")
    (env / "manifest.json").write_text(
        json.dumps(
            {
                "key": key,
                "repo": repo,
                "python": {"asked": "3.11", "used": "3.11"},
                "build_s": build_s,
                "rows": rows,
            }
        )
    )
    return env


def _validated(root, key, row, ok, seconds, name, mtime):
    (root / "validation").mkdir(exist_ok=True)
    path = root / "validation" / f"{name}.json"
    python = str(root / key / "venv" / "bin" / "python")
    path.write_text(
        json.dumps({"instance_id": row, "python": python, "ok": ok, "reason": None, "seconds": seconds})
    )
    os.utime(path, ns=(mtime, mtime))


def _blocks(path):
    return os.lstat(path).st_blocks * 512


def test_a_hard_link_counts_once_and_a_link_from_uvs_cache_is_shown_as_shared(tmp_path):
    root, cache = tmp_path / "envs", tmp_path / "uv-cache"
    cache.mkdir()
    a = _env(root, "aaaa", "acme/a", 2.5, ["acme__a-1", "acme__a-2"])
    b = _env(root, "bbbb", "acme/a", 7.5, ["acme__a-3"])
    c = _env(root, "cccc", "acme/c", 3.0, ["acme__c-1"])
    (a / "venv" / "big").write_bytes(os.urandom(64 * 1024))
    os.link(a / "venv" / "big", a / "venv" / "big-again")  # one inode, two paths
    (cache / "wheel").write_bytes(os.urandom(128 * 1024))
    os.link(cache / "wheel", b / "venv" / "wheel")  # uv's way: linked from its cache
    os.link(a / "venv" / "big", c / "venv" / "from-a")  # two environments share an inode

    whole = disk_usage([a])
    manifest, python = a / "manifest.json", a / "venv" / "bin" / "python"
    assert whole.files == 4
    assert whole.listed_bytes == 2 * 64 * 1024 + 2 + manifest.stat().st_size  # both paths of the link
    assert whole.on_disk_bytes == _blocks(a / "venv" / "big") + _blocks(python) + _blocks(manifest)
    assert whole.on_disk_bytes < whole.listed_bytes  # the link counted once
    assert whole.shared_bytes == _blocks(a / "venv" / "big")  # c links it too
    assert disk_usage([b]).shared_bytes == _blocks(b / "venv" / "wheel")
    together = disk_usage([a, c])  # (what a and c share, counted once)
    c_own = _blocks(c / "venv" / "bin" / "python") + _blocks(c / "manifest.json")
    assert together.on_disk_bytes == whole.on_disk_bytes + c_own
    assert together.shared_bytes == 0

    _validated(root, "aaaa", "acme__a-1", False, 9.0, "old", 1_000_000_000)
    _validated(root, "aaaa", "acme__a-1", True, 4.0, "new", 2_000_000_000)  # validated again: this one counts
    _validated(root, "aaaa", "acme__a-2", False, 6.0, "two", 1_500_000_000)
    _validated(root, "bbbb", "acme__a-3", True, 11.0, "three", 1_500_000_000)
    (root / "validation" / "torn.json").write_text("{")  # a torn result: not counted
    report = store_report(root)

    envs = {e.key: e for e in report.environments}
    assert (envs["aaaa"].validation.rows, envs["aaaa"].validation.valid) == (2, 1)
    assert envs["aaaa"].validation.median_s == 5.0
    assert envs["cccc"].validation.rows == 0 and envs["cccc"].validation.median_s is None
    repos = {r.repo: r for r in report.repositories}
    assert repos["acme/a"].environments == 2 and repos["acme/a"].build_s == [2.5, 7.5]
    assert (repos["acme/a"].validation.valid, repos["acme/a"].validation.rows) == (2, 3)
    assert repos["acme/a"].validation.median_s == 6.0
    assert report.total.shared_bytes == _blocks(b / "venv" / "wheel")  # only the cache is outside the store

    out = tmp_path / "figures.json"
    assert main(["swe", "envs", "report", str(root), "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["total"] == json.loads(json.dumps(report.as_dict()))["total"]
    assert [r["validation"]["median_s"] for r in figures["repositories"]] == [6.0, None]


def test_a_directory_with_no_environment_is_refused_saying_how_to_build(tmp_path, capsys):
    assert main(["swe", "envs", "report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds no built environment" in err and "toolgym swe envs build" in err
