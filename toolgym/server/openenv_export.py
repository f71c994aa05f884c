"""``toolgym export openenv``: a toolgym env as an OpenEnv environment directory, in the layout OpenEnv's CLI
(``openenv validate``, ``openenv build``, ``openenv push``) expects from its ``openenv init`` template:

``openenv.yaml`` (the manifest: name, version, ``runtime: fastapi``, ``app: server.app:app``, port 8000,
and the ``validation:`` block OpenEnv 0.10's validator reads: reward range, resources, the verifier as the
reward channel, the env's tools, tags), ``pyproject.toml`` (depends on toolgym with its ``openenv`` extra
and on ``openenv``; ``[project.scripts] server``), ``server/app.py`` (``app`` =
``toolgym.server.openenv.create_app(...)`` for the env, and ``main()``), ``server/requirements.txt``,
``server/Dockerfile`` (OpenEnv's base image, ``uv sync``, uvicorn on port 8000, a ``/health`` check),
``models.py`` (the action and observation models), ``client.py`` (OpenEnv's ``GenericEnvClient``),
``__init__.py``, ``server/__init__.py`` and a ``README.md`` with the Hugging Face Space header.

Run ``uv lock`` in the directory before ``openenv push`` (OpenEnv's validator asks for ``uv.lock``; writing
one needs the package index, so the export leaves it to you). Importing this module imports no openenv.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_PORT = 8000
#: OpenEnv's package (``openenv-core`` stopped at 0.3; 0.10's ``openenv init`` writes ``openenv>=...``)
OPENENV_REQUIREMENT = "openenv>=0.10.0"
#: what an exported env declares to OpenEnv's validator (``validation.resources``): one episode of a toolgym
#: env runs in one process; the episode timeout covers a tool-heavy episode of the longest built-in env
RESOURCES = {"cpu": 1.0, "memory_mb": 1024, "disk_mb": 512, "episode_timeout_s": 300.0}


def package_name(env_id: str) -> str:
    """``toolgym/Calculator-v0`` -> ``toolgym_calculator_v0`` (a Python package and Space name)."""
    return re.sub(r"[^0-9a-z]+", "_", env_id.lower()).strip("_")


def default_toolgym_requirement() -> str:
    import toolgym

    version = toolgym.__version__
    return "toolgym[openenv]" if "unknown" in version else f"toolgym[openenv]>={version}"


def write_openenv_package(
    env_id: str,
    out: str | Path,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    max_sessions: int = 256,
    name: str | None = None,
    toolgym_requirement: str | None = None,
) -> list[Path]:
    """Write the OpenEnv environment directory for ``env_id`` into ``out``; returns the files written.

    ``env_kwargs`` go to ``gym.make`` in the server (JSON values); ``toolgym_requirement`` is the dependency
    line for toolgym (e.g. ``toolgym[openenv] @ git+https://...`` where toolgym is not on your index).
    """
    import gymnasium as gym

    import toolgym  # noqa: F401  (registers the envs)

    gym.spec(env_id)  # an unknown id fails here, before anything is written
    pkg = name or package_name(env_id)
    if not pkg.isidentifier():
        raise ValueError(f"--name must be a Python identifier (it names the package), got {pkg!r}")
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
    root = Path(out)
    files = {
        "openenv.yaml": _manifest(pkg, env_id, env_kwargs or {}),
        "pyproject.toml": _pyproject(pkg, env_id, toolgym_requirement or default_toolgym_requirement()),
        "README.md": _readme(pkg, env_id),
        "__init__.py": f'"""OpenEnv package for {env_id} (written by `toolgym export openenv`)."""\n',
        "client.py": _CLIENT.format(env_id=env_id),
        "models.py": _MODELS.format(env_id=env_id),
        "server/__init__.py": "",
        "server/requirements.txt": f"{OPENENV_REQUIREMENT}\nfastapi>=0.116.0\nuvicorn>=0.24.0\n",
        "server/app.py": _APP.format(
            env_id=env_id, kwargs=repr(dict(env_kwargs or {})), sessions=max_sessions, port=DEFAULT_PORT
        ),
        "server/Dockerfile": _DOCKERFILE.format(env_id=env_id, port=DEFAULT_PORT),
    }
    written = []
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _manifest(pkg: str, env_id: str, env_kwargs: Mapping[str, Any]) -> str:
    """``openenv.yaml``: the fields ``openenv init`` writes, with the ``validation:`` block filled from the
    env (its tool names; rewards are verifier rewards in [0, 1])."""
    import gymnasium as gym
    import yaml

    import toolgym

    env = gym.make(env_id, **env_kwargs)
    try:
        inner = env.unwrapped
        assert isinstance(inner, toolgym.ToolEnv), env_id
        tools = sorted(inner.tools)
    finally:
        env.close()
    manifest = {
        "spec_version": 1,
        "name": pkg,
        "version": "0.1.0",
        "type": "space",
        "runtime": "fastapi",
        "app": "server.app:app",
        "port": DEFAULT_PORT,
        "validation": {
            "reward": {"range": [0.0, 1.0], "oracle_tolerance": 0.0, "floor_margin": 0.1},
            "resources": dict(RESOURCES),
            "capabilities": {"verifier": {"kind": "reward_channel"}, "declared_tools": tools},
            "types": {"tags": ["toolgym", "tool-use"]},
        },
    }
    return yaml.safe_dump(manifest, sort_keys=False)


def _pyproject(pkg: str, env_id: str, toolgym_requirement: str) -> str:
    return f"""[build-system]
requires = ["setuptools>=45", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "openenv-{pkg.replace("_", "-")}"
version = "0.1.0"
description = "{env_id} (toolgym) as an OpenEnv environment"
requires-python = ">=3.11"
dependencies = [
    "{toolgym_requirement}",
    "{OPENENV_REQUIREMENT}",
    "uvicorn>=0.24.0",
]

[project.scripts]
server = "{pkg}.server.app:main"

[tool.setuptools]
packages = ["{pkg}", "{pkg}.server"]
package-dir = {{ "{pkg}" = ".", "{pkg}.server" = "server" }}
"""


def _readme(pkg: str, env_id: str) -> str:
    return f"""---
title: {env_id}
sdk: docker
pinned: false
app_port: {DEFAULT_PORT}
tags:
  - openenv
  - toolgym
---

# {env_id}

A [toolgym](https://pypi.org/project/toolgym/) env served with OpenEnv's protocol by
`toolgym serve openenv`. Action: `{{"message": "<the model's turn>"}}`. Observation: `text`, `messages`
(the chat messages the call added), `tools`, `task_id`, `turn`, `terminated`, `truncated`, `verdict`;
`reward` and `done` as in every OpenEnv env. The env's tools are listed and callable on `/mcp`.

```python
from openenv.core.generic_client import GenericEnvClient

with GenericEnvClient(base_url="http://localhost:{DEFAULT_PORT}").sync() as env:
    result = env.reset(seed=0)
    print(result.observation["text"])
```

Run locally: `uv run --project . server` (or `python -m server.app`). Build: `openenv build`;
publish: `uv lock && openenv push` (package `{pkg}`).
"""


_CLIENT = '''"""A client for {env_id}: OpenEnv's generic client speaks its protocol as is (dict actions and
observations), so nothing of toolgym is needed on the client side."""

from openenv.core.generic_client import GenericEnvClient

Env = GenericEnvClient

__all__ = ["Env"]
'''

_MODELS = '''"""The wire models of {env_id}: OpenEnv Action / Observation / State subclasses from toolgym."""

from toolgym.server.openenv_env import TextAction, ToolgymObservation, ToolgymState

__all__ = ["TextAction", "ToolgymObservation", "ToolgymState"]
'''

_APP = '''"""The OpenEnv server of {env_id} (written by `toolgym export openenv`): OpenEnv's own app from
openenv, with a toolgym env instance per session.

    uvicorn server.app:app --host 0.0.0.0 --port {port}
    TOOLGYM_MAX_SESSIONS=64 python -m server.app --port 8001
"""

import os

from toolgym.server.openenv import create_app

ENV_ID = "{env_id}"
ENV_KWARGS = {kwargs}
MAX_SESSIONS = int(os.environ.get("TOOLGYM_MAX_SESSIONS", "{sessions}"))

app = create_app(ENV_ID, ENV_KWARGS, max_sessions=MAX_SESSIONS)


def main(host: str = "0.0.0.0", port: int = {port}) -> None:
    import uvicorn

    uvicorn.run(app, host=host, port=port)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default={port})
    args = parser.parse_args()
    main(host=args.host, port=args.port)
'''

_DOCKERFILE = """# {env_id} as an OpenEnv environment (written by `toolgym export openenv`).
# `openenv build` builds it; `openenv push` moves it to the Space's root.
ARG BASE_IMAGE=ghcr.io/huggingface/openenv-base:latest
FROM ${{BASE_IMAGE}}

WORKDIR /app/env
COPY . /app/env

# uv resolves pyproject.toml (toolgym and openenv); uv.lock pins it when present
RUN if ! command -v uv >/dev/null 2>&1; then pip install --no-cache-dir uv; fi
RUN --mount=type=cache,target=/root/.cache/uv \\
    if [ -f uv.lock ]; then uv sync --frozen --no-editable; else uv sync --no-editable; fi

ENV PATH="/app/env/.venv/bin:$PATH"
ENV PYTHONPATH="/app/env:$PYTHONPATH"

HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \\
    CMD curl -f http://localhost:{port}/health || exit 1

CMD ["sh", "-c", "cd /app/env && uvicorn server.app:app --host 0.0.0.0 --port {port}"]
"""


__all__ = ["default_toolgym_requirement", "package_name", "write_openenv_package"]
