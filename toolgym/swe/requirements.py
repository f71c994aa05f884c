"""What a recipe's ``packages`` become for pip: requirements files read from the checkout (their ``-r``
includes inlined, SWE-bench's package replacements applied), ``environment.yml`` files and conda package lists
(conda's Python packages go to pip, the rest are listed as not installed), and the test extras a project
declares (an inferred recipe installs one)."""

from __future__ import annotations

import contextlib
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from toolgym.swe.recipes import swebench_specs


class RequirementsMissing(ValueError):
    """None of a recipe's requirements or environment files is in the checkout."""


#: conda packages with no pip counterpart of the same name (compilers, system libraries, the interpreter):
#: listed as not installed instead of failing the whole pip resolution
NOT_PIP = frozenset(
    [
        "python",
        "pip",
        "setuptools",
        "wheel",
        "c-compiler",
        "cxx-compiler",
        "fortran-compiler",
        "compilers",
        "gcc",
        "gxx",
        "gfortran",
        "make",
        "cmake",
        "ninja",
        "pkg-config",
        "libxml2",
        "libxslt",
        "libffi",
        "openssl",
        "zlib",
        "graphviz",
        "freetype",
        "libpng",
        "jpeg",
        "libjpeg-turbo",
        "hdf5",
        "netcdf4-c",
        "proj",
        "geos",
        "gdal",
        "blas",
        "openblas",
        "mkl",
        "lapack",
        "libblas",
        "liblapack",
        "libgfortran",
        "cairo",
        "pango",
        "git",
        "tk",
        "tzdata",
        "_libgcc_mutex",
        "_openmp_mutex",
        "ld_impl_linux-64",
        "libgcc-ng",
        "libstdcxx-ng",
        "ncurses",
        "readline",
        "sqlite",
        "xz",
        "nodejs",
        "pandoc",
        "ffmpeg",
        "libspatialindex",
        "udunits2",
        "eccodes",
    ]
)


def clean_lines(text: str) -> list[str]:
    lines = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-e .", ".[", "-e.")):
            continue
        lines.append(line)
    return lines


def replace_packages(lines: list[str]) -> list[str]:
    """SWE-bench's own package replacements (a yanked package: ``types-pkg_resources`` becomes
    ``types-setuptools``)."""
    out = []
    for line in lines:
        for old, new in swebench_specs()["replace_packages"]:
            if re.match(rf"^{re.escape(old)}([<>=!~ ;\[]|$)", line):
                line = new if new else ""
        if line:
            out.append(line)
    return out


def read_requirements(src: Path, paths: Sequence[str]) -> tuple[str, list[str]]:
    """The first of ``paths`` that exists in the checkout, with its ``-r`` includes inlined (read from the
    checkout, relative to the including file), as requirement lines; ``RequirementsMissing`` when none
    exists."""
    for rel in paths:
        path = src / rel
        if path.is_file():
            return rel, replace_packages(_expand(path, src, set()))
    raise RequirementsMissing(f"no requirements file at {', '.join(paths)} in the checkout")


def _expand(path: Path, src: Path, seen: set[Path]) -> list[str]:
    if path in seen:
        return []
    seen.add(path)
    out: list[str] = []
    for line in clean_lines(path.read_text(errors="replace")):
        if line.startswith(("-r ", "--requirement ", "-c ", "--constraint ")):
            target = (path.parent / line.split(None, 1)[1].strip()).resolve()
            if src.resolve() in target.parents and target.is_file():
                out.extend(_expand(target, src, seen))
            continue
        out.append(line)
    return out


#: conda-forge names whose PyPI distribution is named otherwise: on PyPI, ``iris`` is another project (its
#: import raises, pointing at ``irisapi``), which stopped every xarray row of 2022 at collection
CONDA_NAMES_ON_PYPI = {
    "iris": "scitools-iris",
    "pytables": "tables",
    "python-graphviz": "graphviz",
    "matplotlib-base": "matplotlib",
    "dask-core": "dask",
    "msgpack-python": "msgpack",
    "pytorch": "torch",
}


def _conda_to_pip(spec: str) -> str:
    """``numpy=1.19`` -> ``numpy==1.19.*``; ``numpy>=1.2`` and ``numpy==1.2`` stay; a channel prefix goes;
    a name PyPI spells otherwise is renamed (``CONDA_NAMES_ON_PYPI``)."""
    spec = spec.split("::")[-1].strip()
    name = _name(spec)
    if name in CONDA_NAMES_ON_PYPI:
        spec = CONDA_NAMES_ON_PYPI[name] + spec[len(name) :]
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*=\s*([^=<>!~\s]+)(?:=\S+)?", spec)
    if match:
        version = match[2]
        return f"{match[1]}=={version}" if "*" in version else f"{match[1]}=={version}.*"
    return spec.replace(" ", "")


def _name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec.split("::")[-1], maxsplit=1)[0].strip().lower()


def split_conda(specs: Iterable[str]) -> tuple[list[str], list[str]]:
    """(pip requirements, conda packages not installed): conda's Python packages go to pip."""
    pip: list[str] = []
    skipped: list[str] = []
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        (skipped if _name(spec) in NOT_PIP else pip).append(
            spec if _name(spec) in NOT_PIP else _conda_to_pip(spec)
        )
    return pip, skipped


def read_environment_yml(src: Path, paths: Sequence[str]) -> tuple[str, list[str], list[str], list[str]]:
    """(the file, its conda packages as pip requirements, its ``pip:`` requirements, conda packages not
    installed) of the first ``environment.yml`` found. The conda ones are kept apart: a name only conda has
    (``cdms2``) is dropped from them when pip's index lacks it (``registry_misses``), and one whose source
    build fails where conda had it prebuilt (matplotlib's ``pycairo``: ``failed_source_builds``),
    never a pip one."""
    import yaml

    for rel in paths:
        path = src / rel
        if path.is_file():
            data = yaml.safe_load(path.read_text(errors="replace")) or {}
            conda: list[str] = []
            pip_lines: list[str] = []
            for dep in data.get("dependencies") or []:
                if isinstance(dep, Mapping):
                    pip_lines.extend(str(x) for x in dep.get("pip") or [])
                else:
                    conda.append(str(dep))
            pip, skipped = split_conda(conda)
            return rel, pip, replace_packages(clean_lines("\n".join(pip_lines))), skipped
    raise RequirementsMissing(f"no environment.yml at {', '.join(paths)} in the checkout")


def package_name(spec: str) -> str:
    """The normalized project name of a requirement or conda spec (``Foo_Bar>=1`` -> ``foo-bar``)."""
    return re.sub(r"[-_.]+", "-", _name(spec))


#: a project's name as uv's messages print it
PROJECT_NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]*"


def registry_misses(output: str) -> set[str]:
    """The names uv's failed resolution says the package index does not have at all (normalized)."""
    found = re.findall(
        rf"({PROJECT_NAME}) was not found in the (?:package registry|provided package locations)", output
    )
    return {package_name(name) for name in found}


def failed_source_builds(output: str) -> set[str]:
    """The names of the distributions whose source build uv's failed install names (normalized), with the
    packages its hints say required them (``pycairo`` was included because ``pygobject`` depends on it)."""
    failed = {
        package_name(name)
        for name in re.findall(rf"Failed to (?:download and )?build `({PROJECT_NAME})", output)
    }
    for dep, parent in re.findall(
        rf"`({PROJECT_NAME})` \(v[^)]*\) was included because `({PROJECT_NAME})`", output
    ):
        if package_name(dep) in failed:
            failed.add(package_name(parent))
    return failed


def build_requires(src: Path) -> list[str]:
    """What the project's ``pyproject.toml`` says its build needs (``[build-system] requires``); [] where it
    has none or it does not parse (a ``setup.py`` project's build then needs setuptools alone)."""
    with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
        requires = tomllib.loads((src / "pyproject.toml").read_text()).get("build-system", {}).get("requires")
        if isinstance(requires, list):
            return [r.strip() for r in requires if isinstance(r, str) and r.strip()]
    return []


def declared_extras(src: Path) -> set[str]:
    """The optional-dependency groups the project declares (pyproject, setup.cfg, a literal in setup.py)."""
    found: set[str] = set()
    with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
        project = tomllib.loads((src / "pyproject.toml").read_text()).get("project", {})
        found |= set(project.get("optional-dependencies", {}))
    with contextlib.suppress(OSError):
        import configparser

        cfg = configparser.ConfigParser()
        cfg.read(src / "setup.cfg")
        if cfg.has_section("options.extras_require"):
            found |= set(cfg.options("options.extras_require"))
    with contextlib.suppress(OSError):
        text = (src / "setup.py").read_text(errors="replace")
        if "extras_require" in text:
            found |= set(re.findall(r"['\"](tests?|dev|testing)['\"]\s*:", text))
    return found
