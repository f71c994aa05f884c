"""Harbor-layout terminal tasks from disk for toolgym/Terminal-v0 (``tasks=DIR``).

A task directory holds ``instruction.md`` (the prompt), ``task.toml`` (``[verifier] timeout_sec``, ``[agent]
timeout_sec``), ``environment/`` (a ``Dockerfile`` and the files it copies), ``tests/test.sh`` (the verifier)
and ``solution/solve.sh`` (the oracle). ``tasks=`` names one such directory or a folder of them.

No container is built: commands run on this system's own tools in the sandbox. The Dockerfile is read only
for ``WORKDIR`` (it must be ``/app``, where the workspace appears) and ``COPY`` (which files of
``environment/`` start in the workspace, and where). A ``RUN`` step may only install what this system already
has (``apt-get install`` of a command on ``PATH``, ``pip install`` of an importable package, ``mkdir``); any
other step, a package the system lacks, or a test script that downloads (there is no network) refuses the
task at load, with the reason. In a folder of tasks the refused ones are left out (``source.refused`` says
why) and the load fails only when none is left.

After the episode, ``tests/test.sh`` runs in a fresh sandbox child that sees a copy of the final workspace at
``/app`` (modes and symlinks kept) and the tests at ``/tests``, and writes ``/logs/verifier/reward.txt`` (a
number) or ``reward.json`` (``{"reward": x}``): the agent's commands ran in another process tree that is gone
by then, so they can neither write that file nor touch the test run. A test script that writes no reward is a
verifier error, not a 0.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import posixpath
import re
import shlex
import shutil
import tomllib
from pathlib import Path

from toolgym.core.task import ListSource, Task
from toolgym.core.types import Verdict
from toolgym.sandbox import Sandbox
from toolgym.sandbox.driver import last_json
from toolgym.sandbox.shell_driver import SHELL_DRIVER
from toolgym.tools.bash import TERMINAL_LIMITS, WORKSPACE_PATH, Workspace

log = logging.getLogger("toolgym.envs.terminal")

_DOWNLOADS = re.compile(
    r"\b(curl|wget|pip3?\s+install|uv\s+(pip|add|sync|run|tool)|uvx|apt-get|apt|apk|npm)\b"
)
_SKIP = {".git", "__pycache__"}


class HarborTaskRefused(ValueError):
    """A Harbor task that cannot run on this system's tools (the message says why)."""


def _read_tree(root: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not _SKIP.intersection(path.relative_to(root).parts):
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def _dockerfile_steps(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per step, with continuation lines joined and comments dropped."""
    steps, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        op, _, rest = buf.strip().partition(" ")
        steps.append((op.upper(), rest.strip()))
        buf = ""
    return steps


def _check_run(command: str) -> str | None:
    """Why a ``RUN`` step cannot be honoured here, or None when what it installs is present."""
    for part in re.split(r"&&|;|\|\|", command):
        words = shlex.split(part)
        if not words:
            continue
        if words[:2] in (["apt-get", "update"], ["apt", "update"]) or words[0] in ("rm", "true", "mkdir"):
            continue
        if words[0] in ("apt-get", "apt") and "install" in words:
            pkgs = [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
            lacking = [p for p in pkgs if shutil.which(p.split("=")[0]) is None]
            if lacking:
                return f"RUN installs {', '.join(lacking)}, which this system lacks (no command of that name)"
            continue
        if "install" in words and any(w in ("pip", "pip3") or w.endswith("/pip") for w in words):
            pkgs = [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
            names = [re.split(r"[<>=!~\[ ]", p)[0] for p in pkgs]
            lacking = [n for n in names if importlib.util.find_spec(n.replace("-", "_").lower()) is None]
            if lacking:
                return f"RUN installs the Python packages {', '.join(lacking)}, which this system lacks"
            continue
        return f"RUN {part.strip()!r} is not replayed (only installs of what the system has are accepted)"
    return None


def _workspace_from_dockerfile(env_dir: Path) -> dict[str, bytes]:
    """The workspace's initial files: what the Dockerfile's ``COPY`` steps put under ``/app``."""
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():  # no Dockerfile: the environment's files are the workspace
        return _read_tree(env_dir)
    files: dict[str, bytes] = {}
    workdir = "/"
    for op, args in _dockerfile_steps(dockerfile.read_text()):
        if op in ("FROM", "LABEL", "ENV", "ARG", "CMD", "ENTRYPOINT", "USER", "EXPOSE"):
            continue  # the image and its metadata: the system's own tools stand in for it
        if op == "WORKDIR":
            workdir = args if args.startswith("/") else f"{workdir.rstrip('/')}/{args}"
            if workdir.rstrip("/") != WORKSPACE_PATH:
                raise HarborTaskRefused(f"WORKDIR {workdir}: only {WORKSPACE_PATH} is supported")
        elif op in ("COPY", "ADD"):
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            if len(words) < 2:
                raise HarborTaskRefused(f"{op} {args!r} names no source and destination")
            *sources, raw_dest = words
            dest = posixpath.normpath(raw_dest if raw_dest.startswith("/") else f"{workdir}/{raw_dest}")
            if not (dest + "/").startswith(WORKSPACE_PATH + "/"):
                raise HarborTaskRefused(f"{op} to {dest}: only files under {WORKSPACE_PATH} are supported")
            rel_dest = dest[len(WORKSPACE_PATH) :].strip("/")
            for src in sources:
                path = (env_dir / src).resolve()
                if not path.is_relative_to(env_dir.resolve()) or not path.exists():
                    raise HarborTaskRefused(f"{op} source {src!r} is not a file of environment/")
                if path.is_dir():
                    for rel, data in _read_tree(path).items():
                        if path == env_dir.resolve() and rel == "Dockerfile":
                            continue
                        files["/".join(p for p in (rel_dest, rel) if p)] = data
                else:
                    into_dir = raw_dest.endswith(("/", "/.")) or raw_dest == "." or len(sources) > 1
                    name = f"{rel_dest}/{path.name}" if into_dir or not rel_dest else rel_dest
                    files[name.strip("/")] = path.read_bytes()
        elif op == "RUN":
            why = _check_run(args)
            if why:
                raise HarborTaskRefused(why)
        else:
            raise HarborTaskRefused(f"Dockerfile instruction {op} is not supported")
    return files


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return data


def load_harbor_task(task_dir: str | Path) -> Task:
    """One Harbor task as a Terminal-v0 task (``HarborTaskRefused`` says why one cannot run here)."""
    root = Path(task_dir)
    instruction = root / "instruction.md"
    test_sh = root / "tests" / "test.sh"
    for needed in (instruction, test_sh):
        if not needed.is_file():
            raise HarborTaskRefused(f"{root}: {needed.relative_to(root)} is missing")
    config = tomllib.loads((root / "task.toml").read_text()) if (root / "task.toml").is_file() else {}
    tests = {rel: data.decode() for rel, data in _read_tree(root / "tests").items()}
    downloads = _DOWNLOADS.search(tests["test.sh"])
    if downloads:
        raise HarborTaskRefused(
            f"tests/test.sh runs {downloads.group(0)!r}: there is no network in the sandbox"
        )
    env_dir = root / "environment"
    files = _workspace_from_dockerfile(env_dir) if env_dir.is_dir() else {}
    solve = root / "solution" / "solve.sh"
    return Task(
        id=f"harbor/{root.name}",
        prompt=instruction.read_text().strip(),
        answer="done",
        source=str(root),
        data={
            "files": {k: _text_or_bytes(v) for k, v in sorted(files.items())},
            "requires_path": True,  # its instruction, tests and solution name /app
            "solution": [solve.read_text()] if solve.is_file() else [],
            "harbor": {
                "tests": tests,
                "verifier_timeout": config.get("verifier", {}).get("timeout_sec"),
                "agent_timeout": config.get("agent", {}).get("timeout_sec"),
            },
        },
    )


def harbor_source(path: str | Path) -> ListSource:
    """A source of one Harbor task dir, or a folder of them (refused tasks left out, with a warning)."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"tasks={path!s}: no such directory")
    if (root / "instruction.md").is_file():
        return ListSource([load_harbor_task(root)], name=f"harbor:{root.name}")
    tasks, refused = [], {}
    for sub in sorted(p for p in root.iterdir() if (p / "instruction.md").is_file()):
        try:
            tasks.append(load_harbor_task(sub))
        except HarborTaskRefused as exc:
            refused[sub.name] = str(exc)
    if refused:
        log.warning("Harbor tasks refused: %s", "; ".join(f"{k}: {v}" for k, v in refused.items()))
    if not tasks:
        why = "; ".join(f"{k}: {v}" for k, v in refused.items()) or "no task directory (instruction.md) in it"
        raise HarborTaskRefused(f"tasks={path!s}: no usable Harbor task ({why})")
    source = ListSource(tasks, name=f"harbor:{root.name}")
    source.refused = refused  # type: ignore[attr-defined]
    return source


_RUNNER = r"""
def _tg_harbor(modes, links, timeout):
    _tg_guard()
    _os.makedirs("/tmp/app", exist_ok=True)  # an empty workspace (an episode that ran nothing) is judged too
    for rel, target in links:
        _os.symlink(target, "/tmp/app/" + rel)
    for rel, mode in modes:
        _os.chmod("/tmp/app/" + rel, mode)
    _os.makedirs("/tmp/logs/verifier", exist_ok=True)
    try:
        proc = _sp.run(["bash", "/tests/test.sh"], cwd="/app", stdin=_sp.DEVNULL, stdout=_sp.PIPE,
                       stderr=_sp.STDOUT, timeout=timeout, start_new_session=True,
                       env=dict(_os.environ, PWD="/app"))
        out, code = proc.stdout, proc.returncode
    except _sp.TimeoutExpired as exc:
        out, code = exc.output or b"", None
    _tg_kill_all()
    reward = None
    for name in ("reward.txt", "reward.json"):
        try:
            fd = _os.open("/tmp/logs/verifier/" + name, _os.O_RDONLY | _os.O_NOFOLLOW)
            with open(fd, "rb") as fh:
                reward = [name, fh.read(4096).decode("utf-8", "replace")]
            break
        except OSError:
            continue
    print(_json.dumps({"exit": code, "reward": reward, "out": out[-2000:].decode("utf-8", "replace")}))
"""


def run_harbor_tests(sandbox: Sandbox, task: Task, ws: Workspace, timeout: float) -> Verdict:
    """Run the task's ``tests/test.sh`` against a copy of the final workspace in a fresh sandbox child."""
    files: dict[str, str | bytes] = {f"app/{rel}": data for rel, data in ws.files.items()}
    files.update({f"tests/{rel}": text for rel, text in task.data["harbor"]["tests"].items()})
    for rel in ws.dirs:
        files.setdefault(f"app/{rel}/.toolgym-dir", b"")  # empty dirs exist too (the marker is removed below)
    modes = sorted((rel, mode) for rel, mode in ws.modes.items() if rel in ws.files or rel in ws.dirs)
    links = sorted(ws.links.items())
    code = (
        f"{SHELL_DRIVER}\n{_RUNNER}\n"
        "import glob\n[_os.remove(p) for p in glob.glob('/tmp/app/**/.toolgym-dir', recursive=True)]\n"
        f"_tg_harbor({modes!r}, {links!r}, {timeout!r})\n"
    )
    limits = TERMINAL_LIMITS.model_copy(update={"timeout_s": timeout + 10})
    res = sandbox.run(code, files=files, limits=limits)
    reply = last_json(res.stdout) if res.status == "ok" else None
    if reply is None:
        return Verdict(
            reward=0.0,
            passed=False,
            error=f"the test run failed ({res.status}): {res.detail or res.stderr[-300:]}",
        )
    details = {"exit_code": reply["exit"], "output": reply["out"][-500:]}
    if reply["exit"] is None:
        return Verdict(
            reward=0.0, passed=False, details=details, error=f"tests/test.sh timed out after {timeout:g} s"
        )
    if reply["reward"] is None:
        return Verdict(
            reward=0.0, passed=False, details=details, error="tests/test.sh wrote no /logs/verifier/reward"
        )
    name, text = reply["reward"]
    try:
        value = json.loads(text)
        reward = float(value["reward"] if name.endswith(".json") else value)
    except (ValueError, KeyError, TypeError):
        return Verdict(reward=0.0, passed=False, details=details, error=f"unreadable {name}: {text[:100]!r}")
    return Verdict(reward=reward, passed=reward >= 1.0, details=details)
