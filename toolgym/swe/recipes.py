"""How a SWE row's repository is installed: its recipe, read from where the datasets keep it.

Every published SWE dataset runs each repository, per version, in an environment of its own (SWE-bench's
images run ``pip install -e .`` after the repository's dependencies). The recipe says what goes in it, in
SWE-rebench's ``install_config`` schema, which SWE-bench's harness specs share:

``python`` (a version: ``"3.9"``), ``packages`` (a space-separated list, or ``requirements.txt`` /
``environment.yml``: read from the clone), ``pip_packages``, ``pre_install`` (system steps: listed, never
run), ``install`` (the repository's own install command), ``reqs_path`` / ``env_yml_path`` (where those files
lie in the clone), ``test_cmd``, ``env_vars``, ``no_use_env``; and a row's ``requirements`` pin list.

Where a row's recipe comes from, first match wins (``Recipe.source`` records which):

1. the user's recipe file (``--recipes FILE``: YAML or JSON, keyed by ``instance_id`` or by ``repo`` then
   ``version``; the same keys), for private repositories and mined rows;
2. the row's own ``install_config`` (SWE-rebench) and ``requirements``;
3. SWE-bench's per-(repository, version) specs (SWE-bench, Lite, Verified and SWE-Gym rows of those
   repositories): ``data/swebench_specs.json``, written by ``scripts/swebench_specs.py`` from the swebench
   4.1.0 package (MIT; 5.x moved them into the datasets). A data file, not a dependency: swebench 4.x
   requires docker, modal and ghapi;
4. SWE-smith's repository profile, where the ``swesmith`` package is installed (its Python and install
   commands);
5. inferred: ``pip install -e .`` with a ``test``/``tests``/``dev`` extra the project declares, plus pytest.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

RECIPE_KEYS = (
    "python",
    "packages",
    "pip_packages",
    "pre_install",
    "install",
    "reqs_path",
    "env_yml_path",
    "test_cmd",
    "env_vars",
    "no_use_env",
)
#: the install command when a recipe names none (SWE-bench's for nearly every repository)
DEFAULT_INSTALL = "python -m pip install -e ."


class RecipeError(ValueError):
    """A recipe that cannot be read (the message names the file or row, and the key)."""


def _listed(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


class Recipe(BaseModel):
    """One repository version's environment (module docstring). Two rows with equal recipes (and the same
    repository and setup commit) share one environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    python: str | None = None
    packages: str = ""
    pip_packages: tuple[str, ...] = ()
    pre_install: tuple[str, ...] = ()
    install: tuple[str, ...] = (DEFAULT_INSTALL,)
    reqs_path: tuple[str, ...] = ()
    env_yml_path: tuple[str, ...] = ()
    test_cmd: tuple[str, ...] = ()
    env_vars: dict[str, str] = Field(default_factory=dict)
    no_use_env: bool = False
    requirements: tuple[str, ...] = ()  # a row's own pin list (SWE-rebench's ``requirements``)
    #: where the recipe was read (not part of its identity)
    source: str = Field(default="inferred", exclude=True)

    @field_validator("python", mode="before")
    @classmethod
    def _version(cls, value: Any) -> str | None:
        if value is None or value == "":
            return None
        text = str(value).strip()
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
            raise ValueError(f"python must be a version such as 3.9, not {value!r}")
        return ".".join(text.split(".")[:2])

    @field_validator("packages", mode="before")
    @classmethod
    def _packages(cls, value: Any) -> str:
        if value is None:
            return ""
        return " ".join(_listed(value)) if not isinstance(value, str) else value.strip()

    @field_validator(
        "pip_packages", "pre_install", "reqs_path", "env_yml_path", "test_cmd", "requirements", mode="before"
    )
    @classmethod
    def _seq(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str) and "\n" in value:  # a pin list written as a requirements file's text
            return tuple(line.strip() for line in value.splitlines() if line.strip())
        return tuple(_listed(value))

    @field_validator("install", mode="before")
    @classmethod
    def _install(cls, value: Any) -> tuple[str, ...]:
        return tuple(_listed(value)) or (DEFAULT_INSTALL,)

    @field_validator("env_vars", mode="before")
    @classmethod
    def _env(cls, value: Any) -> dict[str, str]:
        return {str(k): str(v) for k, v in (value or {}).items()}

    def package_words(self) -> list[str]:
        """``packages`` split as the shell SWE-bench's harness gives it to (``conda create ... PACKAGES``)
        splits it: scikit-learn 1.3's spec quotes its pins (``'numpy==1.19.2' 'pandas<2.0.0'``)."""
        try:
            return shlex.split(self.packages)
        except ValueError:  # an unbalanced quote: the words as written
            return self.packages.split()

    def key(self, repo: str, commit: str) -> str:
        """The content address of the environment this recipe builds for ``repo`` at ``commit``."""
        body = json.dumps([repo, commit, self.model_dump(mode="json")], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def recipe_of(config: Mapping[str, Any], source: str, requirements: Any = None) -> Recipe:
    """A recipe from an ``install_config``-shaped mapping; unknown keys are an error naming them."""
    unknown = sorted(set(config) - set(RECIPE_KEYS) - {"requirements"})
    if unknown:
        raise RecipeError(f"{source}: unknown recipe key(s) {unknown} (known: {', '.join(RECIPE_KEYS)})")
    fields = {k: v for k, v in config.items() if v is not None}
    if requirements is not None and "requirements" not in fields:
        fields["requirements"] = requirements
    try:
        return Recipe(**fields, source=source)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise RecipeError(f"{source}: {problems}") from None


# ------------------------------------------------------------------------------------- the sources


@lru_cache(maxsize=1)
def swebench_specs() -> dict[str, Any]:
    """SWE-bench's specs, as ``scripts/swebench_specs.py`` wrote them (module docstring, source 3)."""
    text = resources.files("toolgym.swe").joinpath("data/swebench_specs.json").read_text()
    return json.loads(text)


def swebench_recipe(repo: str, version: str) -> Recipe | None:
    data = swebench_specs()
    spec = data["specs"].get(repo, {}).get(str(version))
    if spec is None:
        return None
    spec = dict(spec)
    if spec.get("packages") == "requirements.txt":
        spec["reqs_path"] = data["reqs_paths"].get(repo, ["requirements.txt"])
    if spec.get("packages") == "environment.yml":
        spec["env_yml_path"] = data["env_yml_paths"].get(repo, ["environment.yml"])
    return recipe_of(spec, f"SWE-bench specs ({repo} {version})")


def swesmith_recipe(row: Mapping[str, Any]) -> Recipe | None:
    """SWE-smith's profile of the row's repository, where ``swesmith`` is installed (its registry's
    ``get_from_inst``: ``python_version`` and ``install_cmds``)."""
    try:
        from swesmith.profiles import registry  # type: ignore[import-not-found]
    except Exception:  # not installed, or it fails to import: this source is skipped
        return None
    try:
        profile = registry.get_from_inst(dict(row))
    except Exception:
        return None
    config = {
        "python": getattr(profile, "python_version", None),
        "install": list(getattr(profile, "install_cmds", []) or []),
    }
    return recipe_of(config, f"SWE-smith profile ({type(profile).__name__})")


class UserRecipes:
    """The user's recipe file: ``{instance_id: recipe}`` and ``{repo: {version: recipe}}`` (a ``"*"``
    version matches any), YAML or JSON."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise RecipeError(f"recipes={path}: {exc.strerror or exc}") from None
        if self.path.suffix == ".json":
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text) or {}
        if not isinstance(raw, Mapping):
            raise RecipeError(f"{path}: a recipe file maps instance ids or repositories to recipes")
        self.by_instance: dict[str, Recipe] = {}
        self.by_repo: dict[str, dict[str, Recipe]] = {}
        for name, body in raw.items():
            if not isinstance(body, Mapping):
                raise RecipeError(f"{path}: {name!r} maps to {type(body).__name__}, not a recipe")
            if "/" in str(name):  # owner/name: versions under it
                self.by_repo[str(name)] = {
                    str(v): recipe_of(r, f"{path} ({name} {v})") for v, r in body.items()
                }
            else:
                self.by_instance[str(name)] = recipe_of(body, f"{path} ({name})")

    def find(self, row: Mapping[str, Any]) -> Recipe | None:
        if row.get("instance_id") in self.by_instance:
            return self.by_instance[row["instance_id"]]
        versions = self.by_repo.get(str(row.get("repo", "")), {})
        return versions.get(str(row.get("version", ""))) or versions.get("*")


def _install_config(row: Mapping[str, Any]) -> Mapping[str, Any] | None:
    config = row.get("install_config")
    if isinstance(config, str) and config.strip():
        try:
            config = json.loads(config)
        except ValueError:
            raise RecipeError(f"{row.get('instance_id')}: install_config is not JSON") from None
    return config if isinstance(config, Mapping) and config else None


def inferred_recipe() -> Recipe:
    """``pip install -e .`` with the project's test extra, when it declares one, and pytest (source 5)."""
    return Recipe(
        install=(DEFAULT_INSTALL,),
        pip_packages=("pytest",),
        source="inferred: pip install -e . (with a test, tests or dev extra when declared) and pytest",
    )


def recipe_for(row: Mapping[str, Any], user: UserRecipes | None = None) -> Recipe:
    """The recipe of a SWE-bench-schema row (module docstring: the first source that has one)."""
    instance = row.get("instance_id", "?")
    if user is not None:
        found = user.find(row)
        if found is not None:
            return found
    config = _install_config(row)
    if config is not None:
        return recipe_of(config, f"{instance}: install_config", requirements=row.get("requirements"))
    if row.get("version") not in (None, ""):
        found = swebench_recipe(str(row.get("repo", "")), str(row["version"]))
        if found is not None:
            return found
    found = swesmith_recipe(row)
    if found is not None:
        return found
    return inferred_recipe()


__all__ = [
    "DEFAULT_INSTALL",
    "Recipe",
    "RecipeError",
    "UserRecipes",
    "inferred_recipe",
    "recipe_for",
    "recipe_of",
    "swebench_recipe",
    "swebench_specs",
]
