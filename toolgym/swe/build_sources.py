"""Sources a repository's build downloads, supplied from a directory instead (``envs build --sources DIR``).

matplotlib 3.3 and later download FreeType's source during their build (2.6.1: the version the baselines of
its image tests were drawn with) and Qhull's. With no network beyond the package index that download
fails, and the build takes the machine's FreeType instead (``toolchain.build_settings``), whose glyphs
differ: image comparisons and text-extent tests then fail with the gold patch. SWE-bench's images
downloaded it. A directory holding the source lets the build take the version it asks for:

- matplotlib's tarball as its build would download it (``freetype-2.6.1.tar.gz``), or
- the unpacked tree (``freetype-2.6.1/``), such as ``git archive --prefix=freetype-2.6.1/ VER-2-6-1`` of
  FreeType's repository; a git tree has no ``configure``, so FreeType's ``autogen.sh`` makes it (autoconf,
  automake and libtool: ``apt-get install autoconf automake libtool``).

The source is put where matplotlib's build looks before it downloads (``build/freetype-2.6.1``), so the
build compiles it as it would have, and the files of it that a later ``setup.py build_ext`` reads (the
judge's rebuild of an agent's C++ change, a base commit's overlay) travel in the environment's overlay.
The manifest's ``build_sources`` says what was taken, from where, its SHA-256, and whether a tarball is
the one matplotlib's build checks for.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the tarball suffixes a supplied source may have, beside an unpacked directory
TARBALL_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar")
#: the programs FreeType's ``autogen.sh`` runs to make ``configure`` in a tree from git
AUTOTOOLS = ("autoconf", "automake", "libtoolize")


class SourceUnusable(ValueError):
    """A supplied source that the build cannot take, and why (the build fails at its ``sources`` step)."""


@dataclass(frozen=True)
class BuildSource:
    """One source a build downloads: ``version`` reads, from the checkout, which version it asks for (None:
    this checkout's build downloads none); it is looked for in the directory as ``{prefix}-{version}``, put
    at ``build/{prefix}-{version}``, and ``keep`` (globs under it) go into the overlay after the build."""

    key: str  # the system library it stands in for (``toolchain.SYSTEM_LIBRARIES``' key)
    prefix: str
    version: Callable[[Path], str | None]
    keep: tuple[str, ...]
    prepare: Callable[[Path], list[str] | None] = lambda _: None  # a command to run in a tree first
    hashes: str | None = None  # the name of the checkout's table of release tarballs' SHA-256

    def dirname(self, version: str) -> str:
        return f"{self.prefix}-{version}"


def _setupext_version(*names: str) -> Callable[[Path], str | None]:
    """The version matplotlib's ``setupext.py`` downloads (the first of ``names`` assigned a literal) where
    its build downloads by default: 3.3 and later, which have ``system_freetype`` to opt out."""

    def read(src: Path) -> str | None:
        text = _setupext(src)
        if text is None or "system_freetype" not in text:
            return None
        for name in names:
            found = re.search(rf"^{name}\s*=\s*['\"]([\w.]+)['\"]", text, re.MULTILINE)
            if found:
                return found.group(1)
        return None

    return read


def _setupext(src: Path) -> str | None:
    path = src / "setupext.py"
    return path.read_text(errors="replace") if path.is_file() else None


def _freetype_configure(tree: Path) -> list[str] | None:
    """A FreeType tree from git has ``autogen.sh`` and no ``builds/unix/configure``: make it first."""
    if (tree / "builds" / "unix" / "configure").is_file() or not (tree / "autogen.sh").is_file():
        return None
    return ["sh", "./autogen.sh"]


SOURCES: dict[str, tuple[BuildSource, ...]] = {
    "matplotlib/matplotlib": (
        BuildSource(
            "freetype",
            "freetype",
            _setupext_version("TESTING_VERSION_OF_FREETYPE", "LOCAL_FREETYPE_VERSION"),
            keep=("include/**/*", "objs/.libs/libfreetype.a"),
            prepare=_freetype_configure,
            hashes="_freetype_hashes",
        ),
        BuildSource(
            "qhull", "qhull", _setupext_version("LOCAL_QHULL_VERSION"), keep=("src/**/*", "COPYING.txt")
        ),
    ),
}


def wanted(repo: str, src: Path) -> list[tuple[BuildSource, str]]:
    """The sources ``repo``'s build at the checkout ``src`` downloads, with the directory name of each."""
    found = []
    for source in SOURCES.get(repo, ()):
        version = source.version(src)
        if version is not None:
            found.append((source, source.dirname(version)))
    return found


def offers(repo: str, sources: Path) -> bool:
    """Whether ``sources`` holds anything ``repo``'s build could take (any version)."""
    return sources.is_dir() and any(any(sources.glob(f"{s.prefix}-*")) for s in SOURCES.get(repo, ()))


def _supplied(sources: Path, dirname: str) -> Path | None:
    for candidate in (sources / dirname, *(sources / f"{dirname}{suffix}" for suffix in TARBALL_SUFFIXES)):
        if candidate.exists():
            return candidate
    return None


def _sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _sha256_tree(root: Path) -> str:
    """A tree's digest: each file's path and SHA-256, in order (what was built, whatever its timestamps)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        digest.update(f"{path.relative_to(root).as_posix()}\0{_sha256_file(path)}\n".encode())
    return digest.hexdigest()


def _release_hash(src: Path, table: str | None, version: str) -> str | None:
    """The SHA-256 the checkout's build checks its download of ``version`` against, where it says."""
    text = _setupext(src) if table else None
    if text is None or table is None or table not in text:
        return None
    found = re.search(rf"['\"]{re.escape(version)}['\"]\s*:\s*\(?\s*['\"]([0-9a-f]{{64}})['\"]", text)
    return found.group(1) if found else None


def _unpack(tarball: Path, dest_parent: Path, dirname: str) -> None:
    try:
        with tarfile.open(tarball) as tar:
            tops = {name.split("/", 1)[0] for name in tar.getnames() if name not in ("", ".")}
            if tops != {dirname}:
                raise SourceUnusable(
                    f"{tarball} unpacks to {sorted(tops)[:3]}, not to one directory {dirname}/ as the build "
                    "expects"
                )
            tar.extractall(dest_parent, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise SourceUnusable(f"{tarball} cannot be unpacked: {exc}") from None


def supply(repo: str, src: Path, sources: Path, write: Callable[[str], object]) -> dict[str, dict[str, Any]]:
    """Put each source ``repo``'s build at ``src`` downloads, where ``sources`` has it, at ``build/<name>``;
    returns per name what was taken (``build_sources`` in the manifest). A source the directory lacks is
    left to the build (its download, else the system library)."""
    if not sources.is_dir():
        raise SourceUnusable(f"--sources {sources} is not a directory")
    taken: dict[str, dict[str, Any]] = {}
    for source, dirname in wanted(repo, src):
        path = _supplied(sources, dirname)
        if path is None:
            write(f"{dirname}: not in {sources}; the build downloads it or takes the system's\n")
            continue
        dest = src / "build" / dirname
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        record: dict[str, Any] = {"key": source.key, "from": str(path), "at": f"build/{dirname}"}
        if path.is_dir():
            shutil.copytree(path, dest, symlinks=True)
            record.update(form="directory", sha256=_sha256_tree(path))
        else:
            _unpack(path, dest.parent, dirname)
            release = _release_hash(src, source.hashes, dirname.rsplit("-", 1)[1])
            record.update(form="tarball", sha256=_sha256_file(path))
            if release is not None:
                record["release_tarball"] = record["sha256"] == release
        command = source.prepare(dest)
        if command is not None:
            lacking = [tool for tool in AUTOTOOLS if shutil.which(tool) is None]
            if lacking:
                raise SourceUnusable(
                    f"{path} has no configure script (a tree from git): making it ({' '.join(command)}) "
                    f"needs {', '.join(lacking)} (apt-get install autoconf automake libtool), or supply "
                    f"the release tarball {dirname}.tar.gz"
                )
            proc = subprocess.run(command, cwd=dest, capture_output=True, text=True, timeout=600)
            write(f"$ {' '.join(command)}  (in build/{dirname})\n{proc.stdout}{proc.stderr}")
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
                raise SourceUnusable(f"{' '.join(command)} failed in {path}: {tail[0]}")
            record["prepared"] = " ".join(command)
        write(f"{dirname}: from {path} ({record['form']}, sha256 {record['sha256'][:16]})\n")
        taken[dirname] = record
    return taken


def overlay_files(repo: str, src: Path, taken: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The files of the taken sources that a later build of the extensions reads (``keep``), relative to
    ``src``: the build's overlay carries them, since the tree's ``build/`` is not in it."""
    keep = {source.key: source.keep for source in SOURCES.get(repo, ())}
    files: set[str] = set()
    for dirname, record in taken.items():
        root = src / "build" / dirname
        for pattern in keep.get(record["key"], ()):
            files.update(_files(src, root.glob(pattern)))
    return sorted(files)


def _files(src: Path, paths: Iterable[Path]) -> list[str]:
    return [p.relative_to(src).as_posix() for p in paths if p.is_file() and not p.is_symlink()]


__all__ = ["SOURCES", "BuildSource", "SourceUnusable", "offers", "overlay_files", "supply", "wanted"]
