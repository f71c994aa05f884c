"""What a store of built environments costs and gives, as it lies on disk: ``toolgym swe envs report``.

uv installs an environment's packages as hard links into its cache, so adding up file sizes (what copying
the store would take) overstates the disk it holds. Each figure here counts a file once per inode
(``st_blocks``, as ``du`` does), and says how much of that is linked from outside the store too (uv's cache:
space the store shares, not space it adds). Beside the disk: each environment's build seconds (its
manifest) and its rows' validation (``ENVS/validation/``: how many were judged, valid, and their median
seconds), per environment and per repository."""

from __future__ import annotations

import json
import os
import stat
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolgym.swe.environments import EnvironmentStore


@dataclass(frozen=True)
class DiskUsage:
    """``listed_bytes``: every path's size (hard links each counted); ``on_disk_bytes``: each inode's
    blocks once; ``shared_bytes``: of those, the inodes that also have links outside what was walked."""

    files: int = 0
    listed_bytes: int = 0
    on_disk_bytes: int = 0
    shared_bytes: int = 0


@dataclass
class _Files:
    """The regular files of one part of a tree: their count, sizes added up, and per inode
    [links seen here, its links, its blocks' bytes]."""

    files: int = 0
    listed: int = 0
    inodes: dict[tuple[int, int], list[int]] = field(default_factory=dict)

    def add(self, st: os.stat_result) -> None:
        self.files += 1
        self.listed += st.st_size
        self.inodes.setdefault((st.st_dev, st.st_ino), [0, st.st_nlink, st.st_blocks * 512])[0] += 1


def _walk(root: str | Path, part: Callable[[str], str]) -> dict[str, _Files]:
    """One walk of ``root`` (symbolic links not followed), its files grouped by ``part(relative dir)``."""
    out: dict[str, _Files] = defaultdict(_Files)
    for top, _dirs, names in os.walk(root):
        group = out[part(os.path.relpath(top, root))]
        for name in names:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:  # (removed while walked)
                continue
            if stat.S_ISREG(st.st_mode):
                group.add(st)
    return out


def _usage(parts: Iterable[_Files]) -> DiskUsage:
    """The parts together: an inode under two of them counts once, and is shared only where it has links
    beyond all of theirs."""
    files = listed = 0
    seen: dict[tuple[int, int], list[int]] = {}
    for p in parts:
        files += p.files
        listed += p.listed
        for inode, (here, links, blocks) in p.inodes.items():
            seen.setdefault(inode, [0, links, blocks])[0] += here
    on_disk = sum(blocks for _, _, blocks in seen.values())
    shared = sum(blocks for here, links, blocks in seen.values() if links > here)
    return DiskUsage(files, listed, on_disk, shared)


def disk_usage(paths: Iterable[str | Path]) -> DiskUsage:
    """The files under ``paths`` together (symbolic links not followed; an inode under two of them once)."""
    return _usage(_walk(root, lambda _: "")[""] for root in paths)


@dataclass
class Validation:
    """Rows judged in an environment, as ``toolgym swe validate`` (or SWE-v0's first draw) left them."""

    rows: int = 0
    valid: int = 0
    seconds: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


def validations(root: Path) -> dict[str, Validation]:
    """Per environment key, its rows' latest validation results (a row validated again, under other
    limits or by another judge, counts once: its newest result)."""
    latest: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
    for path in (root / "validation").glob("*.json"):
        try:
            stamp = path.stat().st_mtime_ns
            result = json.loads(path.read_text())
            parts = Path(result["python"]).relative_to(root).parts
        except (OSError, ValueError, KeyError, TypeError):
            continue
        key = (parts[0], str(result.get("instance_id")))
        if key not in latest or latest[key][0] < stamp:
            latest[key] = (stamp, result)
    out: dict[str, Validation] = defaultdict(Validation)
    for (env, _), (_, result) in sorted(latest.items()):
        v = out[env]
        v.rows += 1
        v.valid += bool(result.get("ok"))
        if isinstance(result.get("seconds"), (int, float)):
            v.seconds.append(float(result["seconds"]))
    return dict(out)


@dataclass
class EnvironmentFigures:
    key: str
    repo: str
    python: str
    build_s: float | None
    rows: int
    disk: DiskUsage
    validation: Validation


@dataclass
class RepositoryFigures:
    repo: str
    environments: int
    build_s: list[float]
    disk: DiskUsage  # its environments together (what they share counted once)
    validation: Validation


@dataclass
class StoreReport:
    root: str
    environments: list[EnvironmentFigures]
    repositories: list[RepositoryFigures]
    total: DiskUsage  # the whole store: environments, validation results, failures' logs

    def as_dict(self) -> dict[str, Any]:
        def with_median(v: Validation) -> dict[str, Any]:
            return {**asdict(v), "median_s": v.median_s}

        return {
            "root": self.root,
            "environments": [
                {**asdict(e), "validation": with_median(e.validation)} for e in self.environments
            ],
            "repositories": [
                {**asdict(r), "validation": with_median(r.validation)} for r in self.repositories
            ],
            "total": asdict(self.total),
        }


def store_report(root: str | Path) -> StoreReport:
    """The figures of every environment built under ``root``; ``ValueError`` where ``root`` holds none."""
    store = EnvironmentStore(root)
    manifests = store.manifests()
    if not manifests:
        raise ValueError(f"{store.root} holds no built environment (no */manifest.json): build with "
                         "toolgym swe envs build ROWS --repos DIR --out ENVS")  # fmt: skip
    judged = validations(store.root)
    # one walk of the whole store, its files grouped by the top folder they are in (an environment's key)
    parts = _walk(store.root, lambda rel: rel.split(os.sep, 1)[0])
    envs = [
        EnvironmentFigures(
            key=m["key"],
            repo=m.get("repo", "?"),
            python=(m.get("python") or {}).get("used") or "?",
            build_s=m.get("build_s"),
            rows=len(m.get("rows") or ()),
            disk=_usage([parts[m["key"]]]),
            validation=judged.get(m["key"], Validation()),
        )
        for m in manifests
        if "key" in m
    ]
    by_repo: dict[str, list[EnvironmentFigures]] = defaultdict(list)
    for e in envs:
        by_repo[e.repo].append(e)
    repos = []
    for repo, group in sorted(by_repo.items()):
        v = Validation()
        for e in group:
            v.rows += e.validation.rows
            v.valid += e.validation.valid
            v.seconds += e.validation.seconds
        built = sorted(e.build_s for e in group if e.build_s is not None)
        disk = _usage(parts[e.key] for e in group)
        repos.append(RepositoryFigures(repo, len(group), built, disk, v))
    return StoreReport(str(store.root), envs, repos, _usage(parts.values()))
