"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a nav entry
without a page, a page left out of the nav or an API reference (``::: module``) that does not resolve fails
here, not on the published site. The small builds below prove that the strict settings in ``mkdocs.yml``
catch each kind of breakage."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENV_PAGES = ("calculator", "math", "python-code", "search", "search-multihop", "reasoning-gym")


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner, not a build problem
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )


def test_site_builds_strict(tmp_path):
    out = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert out.returncode == 0, out.stderr
    site = tmp_path / "site"
    for page in ("quickstart", "architecture", "extending", "rollouts", "serving", "sandbox", "training"):
        assert (site / page / "index.html").is_file(), page
    for page in ENV_PAGES:
        assert (site / "envs" / page / "index.html").is_file(), page
    # mkdocstrings rendered the API from the docstrings (a heading per documented object)
    core = (site / "api" / "core" / "index.html").read_text()
    envs = (site / "api" / "envs" / "index.html").read_text()
    assert 'id="toolgym.envs.base.ToolEnv.step"' in envs and 'id="toolgym.core.types.Trajectory"' in core


def small_site(tmp_path: Path, page: str, nav: list[str] | None = None) -> Path:
    """A one-page site with the repository's mkdocs settings (theme, plugins, strict validation)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\n## Known heading\n\n{page}\n")
    config.update(docs_dir=str(docs), nav=nav or ["index.md"])
    config["plugins"][1]["mkdocstrings"]["handlers"]["python"]["paths"] = [str(ROOT)]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_clean_small_site_builds(tmp_path):
    """The control for the breakages below: the same small site, unbroken, builds."""
    page = "[ok](#known-heading)\n\n::: toolgym.core.spaces\n"
    out = mkdocs_build(small_site(tmp_path, page), tmp_path / "site")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(
    ("page", "nav", "named"),
    [
        ("[gone](no-such-page.md)", None, "no-such-page.md"),
        ("[gone](#no-such-heading)", None, "no-such-heading"),
        ("::: toolgym.core.no_such_module", None, "toolgym.core.no_such_module"),
        ("", ["index.md", "missing.md"], "missing.md"),
    ],
    ids=["link", "anchor", "api-reference", "nav-entry"],
)
def test_strict_build_fails_on_a_broken_reference(tmp_path, page, nav, named):
    out = mkdocs_build(small_site(tmp_path, page, nav), tmp_path / "site")
    assert out.returncode != 0
    assert named in out.stderr + out.stdout


def test_nothing_points_at_the_design_notes_outside_the_repo():
    """README, docs and the package never link outside the repository (to notes next to the checkout)."""
    needles = ("../" + "shared", "/work/" + "shared")  # split, so this file does not match itself
    offenders = []
    for base in (ROOT / "README.md", ROOT / "docs", ROOT / "toolgym", ROOT / "mkdocs.yml"):
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for path in files:
            if path.suffix in {".pyc", ".so"}:
                continue
            text = path.read_text(errors="ignore")
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in needles if n in text]
    assert offenders == []
