"""SWE-v0's side of the built environments (``envs=``): each row's environment, found by its instance id in
the manifests (the newest build) or by its recipe's key; its interpreter; the compiled parts laid over its
workspace; how its test ids were written and how the judge rebuilds what the agent changes."""

from __future__ import annotations

import io
import tarfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from toolgym.swe.environments import EnvironmentMissing, EnvironmentStore
from toolgym.swe.runners import judge_options_for

#: workspace archives with their overlays kept in memory per process (least recently used dropped first)
ARCHIVE_CACHE = 64
#: (store, environment, base commit) -> (the workspace archive it was made from, that archive with the
#: overlay): one per process, so that every SWE-v0 env of a process (a pool of them, a new one per worker)
#: lays a row's overlay once; a hit needs the very archive object it was made from (the repository store
#: keeps one per row while it caches the row)
_MERGED: OrderedDict[tuple[str, str, str], tuple[bytes, bytes]] = OrderedDict()
_MERGED_LOCK = threading.Lock()


def _block_end(offset: int) -> int:
    return -(-offset // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE


def with_overlay(archive: bytes, overlay: bytes) -> bytes:
    """The workspace archive with the environment's generated files laid over it (they win).

    The members are copied as the archives hold them (header and data blocks sliced, not read and written
    again through ``tarfile``): Django's tree, 9,659 files, took 2.6 s a workspace that way, and an
    environment with nothing compiled (an overlay of no members) gives the archive back as it is."""
    if not overlay:
        return archive
    with tarfile.open(fileobj=io.BytesIO(overlay)) as tar:
        laid = tar.getmembers()
        laid_end = tar.offset  # where its end-of-archive blocks start
    if not laid:
        return archive
    names = {m.name for m in laid}
    parts = []
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if member.name not in names:  # (a member's offset is its first header's, pax or GNU included)
                parts.append(archive[member.offset : member.offset_data + _block_end(member.size)])
    parts.append(overlay[:laid_end])
    body = b"".join(parts)
    end = body + b"\0" * (2 * tarfile.BLOCKSIZE)
    return end + b"\0" * (-len(end) % tarfile.RECORDSIZE)


class RowEnvironments:
    """SWE-v0's view of a built store (``envs=``): each row's environment (its interpreter, the compiled
    parts laid over its workspace, how the judge rebuilds them), found by the row's instance id in the
    manifests (the newest build), else by its recipe's key. Rows whose environment is missing or failed
    are refused with the reason (``EnvironmentMissing``)."""

    def __init__(self, root: str | Path, workspaces: Any):
        self.store = EnvironmentStore(root)
        if not self.store.root.is_dir():
            raise FileNotFoundError(f"envs={root}: no such directory (toolgym swe envs build writes it)")
        self.workspaces = workspaces
        # the manifests, read once: a published environment does not change (a rebuild is a new process's)
        self._manifests = {m["key"]: m for m in self.store.manifests()}
        #: instance id -> its environment's manifest (the newest build that lists the row)
        self._of_row: dict[str, dict[str, Any]] = {}
        for manifest in sorted(self._manifests.values(), key=lambda m: m.get("built_at", "")):
            for row in manifest.get("rows", []):
                self._of_row[row] = manifest
        self._lock = threading.Lock()

    def manifest(self, task: Any) -> dict[str, Any]:
        """The task's environment's manifest: asked for by every shell command (its ``PATH``) and verdict,
        so found once per row and kept."""
        row = task.data.get("instance_id", task.id)
        found = self._of_row.get(row)
        if found is not None:
            return found
        try:
            found = self.store.find(task.data)
        except EnvironmentMissing:
            raise
        except Exception as exc:  # a recipe that cannot be read
            raise EnvironmentMissing(f"its recipe: {exc}") from None
        with self._lock:
            self._of_row[row] = found
        return found

    @property
    def store_root(self) -> Path | None:
        return self.workspaces.store_root

    def pythons(self) -> list[str]:
        return [
            python
            for key, manifest in self._manifests.items()
            for python in self.store.pythons(key, manifest)
        ]

    def python_for(self, task: Any) -> str:
        """The row's interpreter: its environment's, or its base commit's own where that needs other
        versions (``EnvironmentStore.python``)."""
        manifest = self.manifest(task)
        return self.store.python(manifest["key"], task.data.get("base_commit") or None, manifest)

    def check(self, task: Any) -> None:
        self.workspaces.check(task)
        self.manifest(task)

    def archive(self, task: Any) -> bytes:
        key = self.manifest(task)["key"]
        base = task.data.get("base_commit", "")
        archive = self.workspaces.archive(task)
        cached = (str(self.store.root), key, base)
        with _MERGED_LOCK:
            hit = _MERGED.get(cached)
            if hit is not None and hit[0] is archive:
                _MERGED.move_to_end(cached)
                return hit[1]
        built = with_overlay(archive, self.store.overlay_for(key, base))
        with _MERGED_LOCK:
            _MERGED[cached] = (archive, built)
            _MERGED.move_to_end(cached)
            while len(_MERGED) > ARCHIVE_CACHE:
                _MERGED.popitem(last=False)
        return built

    def test_files(self, task: Any) -> dict[str, bytes | None]:
        return self.workspaces.test_files(task)

    def gold_files(self, task: Any) -> dict[str, bytes | None]:
        return self.workspaces.gold_files(task)

    def base_text(self, task: Any, path: str) -> str | None:
        return self.workspaces.base_text(task, path)

    def judge_options(self, task: Any) -> dict[str, Any]:
        manifest = self.manifest(task)
        test_cmd = (manifest.get("recipe") or {}).get("test_cmd") or None
        return {**judge_options_for(task.data, test_cmd), "rebuild": manifest.get("rebuild")}
