"""SWE-v0's repositories: the workspace archive an episode starts from, and the files a patch leaves behind.

A SWE episode's workspace is a git work tree at the task's base commit whose history **ends there**: no
later commit, branch, tag, reflog entry, stash or object (the ``git log --all`` leak found in SWE-bench's
images in 2025). It is built once per (repository, commit) per process, on the trainer's side with the
system's ``git`` (fixed commands on the user's own clones; nothing of the repository runs):

1. ``git init`` an empty repository and fetch **only the base commit** from the clone, shallow
   (``--depth 1``, by id, ``file://`` so git packs just what that commit reaches): the new repository
   holds the base commit's tree and nothing else, not even its parents, under its real id;
2. check it out on a branch ``main``, drop ``FETCH_HEAD``, the reflog, the sample hooks;
3. pack the whole directory, ``.git`` included, into an uncompressed tar (modes and symlinks kept).

The tar is what the bash tool unpacks into each episode's sandbox session (``BashTool(archive=...)``) and
what the judge unpacks into its fresh child: the store itself (``repos=DIR``) is never visible from the
sandbox. The post-images of the gold ``patch`` and the hidden ``test_patch`` (every file each touches, as
applying it to the base leaves it, ``None`` where it deletes one) come from the same temporary checkout.

``RepoStore`` opens clones lazily and is shared per process (``shared_repo_store``, keyed by the directory):
a verl worker's hundreds of envs build each archive once. ``files_archive`` builds the same kind of
archive from generated files (the procedural world's repositories), committed with a fixed author and date
so the same files give the same commit id on any machine.
"""

from __future__ import annotations

import functools
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

#: archives kept in memory per process (least recently used dropped first)
ARCHIVE_CACHE = 64
_FIXED_DATE = "2024-01-01T00:00:00+00:00"
_IDENTITY = {"name": "toolgym", "email": "toolgym@localhost"}


class RepoUnavailable(ValueError):
    """A task's repository, commit or patch cannot be had here (the message says why)."""


@dataclass(frozen=True)
class RepoSnapshot:
    """What one (repository, commit, gold patch, test patch) gives: the workspace archive, the gold patch's
    post-image (the oracle writes it) and the test patch's (the judge puts it back)."""

    archive: bytes
    gold_files: dict[str, bytes | None]
    test_files: dict[str, bytes | None]
    files: int  # regular files in the work tree


def _git_env(home: str) -> dict[str, str]:
    """An environment for git that reads no user or system configuration and never prompts."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": _IDENTITY["name"],
        "GIT_AUTHOR_EMAIL": _IDENTITY["email"],
        "GIT_COMMITTER_NAME": _IDENTITY["name"],
        "GIT_COMMITTER_EMAIL": _IDENTITY["email"],
        "GIT_AUTHOR_DATE": _FIXED_DATE,
        "GIT_COMMITTER_DATE": _FIXED_DATE,
        "LC_ALL": "C",
    }


def git(
    args: list[str],
    cwd: str | Path,
    *,
    stdin: bytes | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> str:
    """Run ``git ARGS`` in ``cwd``; ``RepoUnavailable`` with git's message when it fails (``check``).
    ``env``: variables beside git's own clean environment (``GIT_INDEX_FILE``)."""
    if shutil.which("git") is None:
        raise RepoUnavailable("SWE-v0 builds its workspaces with git, and no git is on PATH")
    proc = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "-c", "advice.detachedHead=false", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        env={**_git_env(str(cwd)), **(env or {})},
        timeout=600,
    )
    if check and proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines()
        raise RepoUnavailable(f"git {' '.join(args[:3])} failed: {why[-1] if why else proc.returncode}")
    return proc.stdout.decode(errors="replace")


def _tar(root: Path, mtime: int | None = None) -> bytes:
    """The directory as an uncompressed tar (paths relative to it; owner and group dropped)."""

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        if mtime is not None:
            info.mtime = mtime
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False, filter=clean)
    return buf.getvalue()


def _seal(repo: Path) -> None:
    """Leave only the checked-out commit: no fetch head, reflog, sample hooks or description."""
    git_dir = repo / ".git"
    for name in ("FETCH_HEAD", "ORIG_HEAD", "description"):
        (git_dir / name).unlink(missing_ok=True)
    for name in ("logs", "hooks"):
        shutil.rmtree(git_dir / name, ignore_errors=True)
    git(["config", "user.name", _IDENTITY["name"]], repo)
    git(["config", "user.email", _IDENTITY["email"]], repo)


#: the lines of a git diff that name a file: ---/+++ (a/ and b/ dropped), a rename's or copy's two sides,
#: and the header of a file whose diff has no hunk (an empty file added or deleted, a mode change: sphinx's
#: test_patch adds an empty tests/roots/test-toctree-index/conf.py), where both sides are one path
_PATCH_PATH = re.compile(
    r"^(?:(?:---|\+\+\+) (?:[ab]/)?(?P<side>.+?)\t?|(?:rename|copy) (?:from|to) (?P<moved>.+)|"
    r"diff --git a/(?P<header>.+) b/(?P=header))$",
    flags=re.M,
)


def patch_paths(patch: str) -> list[str]:
    """The files a unified git diff touches (both sides of a rename, an empty file it adds or deletes), in
    order of appearance."""
    out: list[str] = []
    for match in _PATCH_PATH.finditer(patch):
        path = match.group("side") or match.group("moved") or match.group("header")
        if path != "/dev/null" and path not in out:
            out.append(path)
    return out


def _post_image(repo: Path, patch: str, what: str) -> dict[str, bytes | None]:
    """The files ``patch`` touches as applying it to the checkout leaves them; the checkout is restored."""
    if not patch.strip():
        return {}
    try:
        git(["apply", "--whitespace=nowarn", "-"], repo, stdin=patch.encode())
    except RepoUnavailable as exc:
        raise RepoUnavailable(f"the {what} does not apply at the base commit: {exc}") from None
    out: dict[str, bytes | None] = {}
    for rel in patch_paths(patch):
        path = repo / rel
        out[rel] = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    git(["checkout", "-q", "--", "."], repo)
    git(["clean", "-qfdx"], repo)
    return out


def _file_count(root: Path) -> int:
    return sum(1 for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts)


class RepoStore:
    """Clones named ``owner__name`` (as SWE-bench's harness names them) under ``root``, opened lazily."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._cache: OrderedDict[tuple, RepoSnapshot] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[tuple, threading.Lock] = {}

    def clone_dir(self, repo: str) -> Path:
        """The clone of ``owner/name``; ``RepoUnavailable`` naming the directory expected when absent."""
        path = self.root / repo.replace("/", "__")
        if not (path / ".git").exists() and not (path / "HEAD").is_file():
            raise RepoUnavailable(
                f"repository {repo}: no git clone at {path} (repos= holds owner__name clones)"
            )
        return path

    def check(self, repo: str, commit: str) -> None:
        """``RepoUnavailable`` unless the clone exists and holds the commit."""
        clone = self.clone_dir(repo)
        if not re.fullmatch(r"[0-9a-f]{7,64}", commit or ""):
            raise RepoUnavailable(f"repository {repo}: base commit {commit!r} is not a commit id")
        if git(["cat-file", "-t", commit], clone, check=False).strip() != "commit":
            raise RepoUnavailable(f"repository {repo}: the base commit {commit} is not in {clone}")

    def missing_objects(self, repo: str, commit: str) -> RepoUnavailable | None:
        """Where the clone lacks objects ``commit`` needs (a partial or shallow clone, a damaged pack: git's
        ``fetch-pack: invalid index-pack output``), an error naming the repository, the commit, what is
        missing and the fix (fetch it whole); None where every object is there. (``git checkout`` of a tree
        with a missing blob prints an error and still exits 0, leaving the file out: builds ask first.)"""
        clone = self.clone_dir(repo)
        listed = git(["rev-list", "--objects", "--missing=print", "--no-walk", commit], clone, check=False)
        tree = git(["ls-tree", "-r", "-t", "--full-tree", commit], clone, check=False)
        missing = [line[1:] for line in listed.splitlines() if line.startswith("?")]
        if not tree.strip() or not missing:  # one more check: every blob of the commit's tree is there
            blobs = [line.split()[2] for line in tree.splitlines() if line.split()[1:2] == ["blob"]]
            have = git(["cat-file", "--batch-check"], clone, stdin="\n".join(blobs).encode(), check=False)
            missing += [line.split()[0] for line in have.splitlines() if line.endswith(" missing")]
        if not missing and tree.strip():
            return None
        shallow = (clone / "shallow").is_file() or (clone / ".git" / "shallow").is_file()
        how = "a shallow clone" if shallow else ""
        if git(["config", "--get", "extensions.partialclone"], clone, check=False).strip():
            how = "a partial clone (--filter)"
        what = f"{len(missing)} object(s) that commit needs, e.g. {missing[0]}" if missing else "its tree"
        return RepoUnavailable(
            f"repository {repo}: the clone at {clone} is missing {what}, so commit {commit} cannot be read"
            f"{f' ({how})' if how else ''}. Fetch the repository whole, without --depth or --filter "
            f"(git clone https://github.com/{repo} {clone}), or fetch that commit into this clone "
            f"(git -C {clone} fetch origin {commit})"
        )

    def snapshot(self, repo: str, commit: str, patch: str = "", test_patch: str = "") -> RepoSnapshot:
        """The workspace archive at ``commit`` and the patches' post-images (built once, then cached)."""
        key = (repo, commit, hash(patch), hash(test_patch))
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:  # one build per key, however many envs ask at once
            with self._lock:
                if key in self._cache:
                    return self._cache[key]
            self.check(repo, commit)
            try:
                snap = self._build(self.clone_dir(repo), commit, patch, test_patch)
            except RepoUnavailable as exc:
                raise self.missing_objects(repo, commit) or exc from None
            with self._lock:
                self._cache[key] = snap
                while len(self._cache) > ARCHIVE_CACHE:
                    self._cache.popitem(last=False)
                self._building.pop(key, None)
            return snap

    def _build(self, clone: Path, commit: str, patch: str, test_patch: str) -> RepoSnapshot:
        with tempfile.TemporaryDirectory(prefix="toolgym-swe-") as tmp:
            repo = Path(tmp) / "testbed"
            repo.mkdir()
            git(["init", "-q"], repo)
            upload = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
            url = "file://" + str(clone.resolve())
            git(["fetch", "-q", "--depth", "1", "--no-tags", "--upload-pack", upload, url, commit], repo)
            git(["checkout", "-q", "-B", "main", commit], repo)
            _seal(repo)
            archive = _tar(repo)
            test_files = _post_image(repo, test_patch, "test_patch")
            gold_files = _post_image(repo, patch, "patch")
            return RepoSnapshot(archive, gold_files, test_files, _file_count(repo))


def files_archive(files: dict[str, str | bytes], message: str = "Initial commit") -> tuple[bytes, str]:
    """A repository of these files, committed once with a fixed author and date, as a workspace archive,
    and its commit id (the same files give the same id anywhere)."""
    with tempfile.TemporaryDirectory(prefix="toolgym-swe-") as tmp:
        repo = Path(tmp) / "testbed"
        for rel, data in files.items():
            path = repo / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data if isinstance(data, bytes) else data.encode())
        git(["init", "-q"], repo)
        git(["symbolic-ref", "HEAD", "refs/heads/main"], repo)
        git(["add", "-A"], repo)
        git(["commit", "-q", "--no-gpg-sign", "-m", message], repo)
        _seal(repo)
        commit = git(["rev-parse", "HEAD"], repo).strip()
        return _tar(repo, mtime=1704067200), commit


_stores: dict[Path, RepoStore] = {}
_stores_lock = threading.Lock()


def shared_repo_store(root: str | Path) -> RepoStore:
    """The process's one ``RepoStore`` for this directory (envs share its cached archives)."""
    key = Path(root).resolve()
    with _stores_lock:
        if key not in _stores:
            _stores[key] = RepoStore(key)
        return _stores[key]


@functools.lru_cache(maxsize=ARCHIVE_CACHE)
def cached_files_archive(files: tuple[tuple[str, str], ...], message: str) -> tuple[bytes, str]:
    """``files_archive`` of sorted (path, text) pairs, cached per process (procedural tasks' repositories)."""
    return files_archive(dict(files), message)
