"""What old repositories need from `toolgym swe envs build`, on repositories the tests write: a setuptools
with `pkg_resources` and `setuptools.dep_util`, the legacy editable install where the build backend has no
`build_editable`, the `pre_install` steps that edit the repository (and only those), a conda-only package
in `environment.yml`, pytest as the repository under test, a base commit that declares a dependency its
setup commit does not, `--exclude-newer` with pinned recipes, a clone missing objects, a source build that
needs the environment's setuptools, and a compiled repository whose rebuild needs what only its build system
declares, pytest 7.4 with a package imported before its conftest, a submodule the build needs, a legacy
namespace package, conda packages PyPI cannot build, a build whose download of a library's source
fails (matplotlib's FreeType), and compiled parts that, built in isolation, do not load in the environment.
The builds take PyPI's packages (setuptools<70, iniconfig, six, pluggy, pytest and its dependencies)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.envs.swe import swe_oracle, swe_wrong
from toolgym.swe import toolchain
from toolgym.swe.environments import BuildFailed, EnvironmentStore, build_all, egg_requirements, plan
from toolgym.swe.pre_install import apt_packages, repository_step
from toolgym.swe.repos import RepoStore, RepoUnavailable
from toolgym.testing.scripted import script_texts
from toolgym.testing.swe import _git
from toolgym.testing.swe_layouts import build_with_this_python, layout_row, open_to_sandbox

PYTEST_PIN = f"pytest=={pytest.__version__}"
#: an in-tree build backend as setuptools before 64 was: every hook but PEP 660's
LEGACY_BACKEND = (
    '"""setuptools as it was before 64: no build_editable."""\n'
    "from setuptools.build_meta import __legacy__ as _legacy\n\n"
    "get_requires_for_build_wheel = _legacy.get_requires_for_build_wheel\n"
    "get_requires_for_build_sdist = _legacy.get_requires_for_build_sdist\n"
    "prepare_metadata_for_build_wheel = _legacy.prepare_metadata_for_build_wheel\n"
    "build_wheel = _legacy.build_wheel\n"
    "build_sdist = _legacy.build_sdist\n"
)
#: a C module with one constant (the base commit's is 2: its compiled parts are its own)
UNIT_C = (
    "#include <Python.h>\n\n"
    'static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_unit", NULL, -1, NULL};\n'
    "PyMODINIT_FUNC PyInit__unit(void) {\n"
    "    PyObject *m = PyModule_Create(&module);\n"
    '    if (m != NULL && PyModule_AddIntConstant(m, "UNIT", 1) < 0) { Py_DECREF(m); return NULL; }\n'
    "    return m;\n}\n"
)
AREA = "def rectangle(w, h):\n    return w * h\n"
TESTS = "from oldpkg.area import rectangle\n\n\ndef test_rectangle():\n    assert rectangle(2, 5) == 10\n"

PYTESTER_TESTS = (
    "from oldpkg.area import rectangle\n\n\n"
    "def test_an_inner_run_collects_testcase(pytester):\n"
    '    pytester.makepyfile("from unittest import TestCase\\n\\n\\nclass TestOk(TestCase):\\n'
    '    def test_ok(self):\\n        pass\\n")\n'
    "    pytester.inline_run().assertoutcome(passed=1)\n\n\n"
    "def test_rectangle(pytester):\n"
    '    pytester.makepyfile("import unittest\\n\\n\\ndef test_fresh():\\n'
    "    assert not [k for k in vars(unittest.TestCase) if 'pytest' in k]\\n\")\n"
    "    pytester.inline_run().assertoutcome(passed=1)\n"
    "    assert rectangle(2, 5) == 10\n"
)


def _row(
    store: Path,
    name: str,
    files: dict[str, str],
    config: dict,
    base_files: dict | None = None,
    tests: str = "tests/test_area.py",
    gitlinks: dict | None = None,
    test_text: str = TESTS,
    **extra,
) -> dict:
    """A clone ``acme__<name>``: ``files`` at the setup commit, a base commit whose ``oldpkg/area.py`` adds
    instead of multiplying (where it has one) and that writes ``base_files``, and the row with ``config``
    as its recipe (its test file at ``tests``; ``gitlinks``: submodule paths and the commits they pin)."""
    repo = store / f"acme__{name}"
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    for path, commit in (gitlinks or {}).items():
        _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},{path}")
    _git(repo, "commit", "-qm", "first version")
    setup = _git(repo, "rev-parse", "HEAD")
    patch = test_patch = ""
    if "oldpkg/area.py" in files:
        (repo / "oldpkg/area.py").write_text(AREA.replace("w * h", "w + h"))
        for rel, text in (base_files or {}).items():
            (repo / rel).write_text(text)
        _git(repo, "commit", "-qam", "a refactor")
        (repo / "oldpkg/area.py").write_text(AREA)
        patch = _git(repo, "diff") + "\n"
        _git(repo, "checkout", "-q", "--", ".")
        (repo / tests).parent.mkdir(exist_ok=True)
        (repo / tests).write_text(test_text)
        _git(repo, "add", "-N", tests)
        test_patch = _git(repo, "diff") + "\n"
        _git(repo, "rm", "-q", "--cached", tests)
        (repo / tests).unlink()
    return {
        "instance_id": f"acme__{name}-1", "repo": f"acme/{name}", "version": "1.0",
        "base_commit": _git(repo, "rev-parse", "HEAD"), "environment_setup_commit": setup,
        "patch": patch, "test_patch": test_patch, "problem_statement": "rectangle(2, 5) should be 10.",
        "FAIL_TO_PASS": [f"{tests}::test_rectangle"], "PASS_TO_PASS": [],
        "install_config": config, **extra,
    }  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = open_to_sandbox(tmp_path_factory.mktemp("old-builds"))
    store = root / "repos"
    legacy = _row(
        store,
        "legacy",
        {
            "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
            'build-backend = "legacy_backend"\nbackend-path = ["."]\n',
            "legacy_backend.py": LEGACY_BACKEND,
            "setup.py": "raise SystemExit('run pre_install first')  # PRE_INSTALL_GUARD\n"
            "from setuptools import setup\n\n"
            "setup(name='oldpkg', version='1.0', packages=['oldpkg'], install_requires=['iniconfig'])\n",
            # what SWE-bench's conda environments had: pkg_resources and the legacy setuptools modules
            "oldpkg/__init__.py": "import pkg_resources  # noqa: F401\n"
            "from setuptools.dep_util import newer_group  # noqa: F401\n",
            "oldpkg/area.py": AREA,
            # a dependency built from source whose setup.py imports what setuptools 70 dropped (astropy's
            # extension-helpers and setuptools.dep_util): the newest setuptools cannot build it
            "vendor/legacydep/setup.py": "from setuptools import setup\n"
            "from setuptools.dep_util import newer_group  # noqa: F401\n\n"
            "setup(name='legacydep', version='1.0', py_modules=['legacydep'])\n",
            "vendor/legacydep/legacydep.py": "",
            # one whose setup.py imports what it does not declare (scitools-iris's sdist: six)
            "vendor/needsix/setup.py": "import six  # noqa: F401\nfrom setuptools import setup\n\n"
            "setup(name='needsix', version='1.0', py_modules=['needsix'])\n",
            "vendor/needsix/setup.cfg": "[metadata]\nname = needsix\nversion = 1.0\n",  # uv names it
            "vendor/needsix/needsix.py": "",
        },
        {
            "pip_packages": [PYTEST_PIN, "./vendor/legacydep", "./vendor/needsix"],
            "install": "python -m pip install -e .",
            "pre_install": [
                "sed -i '/PRE_INSTALL_GUARD/d' setup.py",
                "apt-get update && apt-get install -y no-such-package-toolgym",
                "sed -i 's/a/b/' ../escaped.txt",
                "echo planted > /tmp/toolgym-planted.txt",
                "sed -i 's/x/y/e' setup.py || echo $(id) > id.txt",
            ],
        },
    )
    (root / "escaped.txt").write_text("a\n")
    conda = _row(
        store,
        "conda",
        {
            "environment.yml": "name: t\ndependencies:\n  - python=3.11\n  - iniconfig\n  - cdms2\n"
            f"  - pip:\n    - {PYTEST_PIN}\n",
            "setup.py": "from setuptools import setup\n\nsetup(name='condapkg', py_modules=[])\n",
        },
        {"packages": "environment.yml", "install": "python -m pip install -e ."},
    )
    under_test = _row(
        store,
        "pytest",
        {
            "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\n'
            'build-backend = "setuptools.build_meta"\n\n[project]\nname = "pytest"\nversion = "0.0.1"\n'
            '\n[tool.setuptools.packages.find]\nwhere = ["src"]\n',
            "src/pytest/__init__.py": '"""pytest, as the repository under test."""\n',
        },
        {"install": "python -m pip install -e ."},
    )
    # a base commit that declares a dependency its setup commit did not (SWE-bench installs the repository
    # at each row's base commit): pytest 4.6/5.0's bases and their unconditional importlib-metadata
    plain = "from setuptools import setup\n\nsetup(name='oldpkg', version='1.0', packages=['oldpkg']"
    base_deps = _row(
        store,
        "basedeps",
        {"setup.py": plain + ")\n", "oldpkg/__init__.py": "", "oldpkg/area.py": AREA},
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
        base_files={
            "setup.py": plain + ", install_requires=['six'])\n",
            "oldpkg/__init__.py": "import six\n",
        },
    )
    # a base commit that pins another version of what its setup commit installed (pylint-7080's base
    # requires astroid<=2.12.0-dev0, its setup commit brought 2.12.13): that base gets an environment of
    # its own (six 1.17.0 is the lock's, in uv's cache; 1.16.0 comes from the package index)
    pinned = "from setuptools import setup\n\nsetup(name='oldpkg', version='1.0', packages=['oldpkg'], "
    base_pins = _row(
        store,
        "basepins",
        {"setup.py": pinned + "install_requires=['six==1.17.0'])\n", "oldpkg/__init__.py": "",
         "oldpkg/area.py": AREA},
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
        base_files={
            "setup.py": pinned + "install_requires=['six==1.16.0'])\n",
            "oldpkg/__init__.py": "import six\n\nassert six.__version__ == '1.16.0', six.__version__\n",
        },
    )  # fmt: skip
    # a compiled repository whose setup.py imports what only its build system declares (astropy's
    # extension_helpers): the rebuilds at the base commits run in the environment, which must have it; a
    # declared requirement that would change an installed distribution (oldest-supported-numpy's numpy; here
    # tox 3.0.0's pluggy<1) is not installed
    rebuild = _row(
        store,
        "rebuild",
        {
            "pyproject.toml": '[build-system]\nrequires = ["setuptools", "six", "tox==3.0.0"]\n'
            'build-backend = "setuptools.build_meta"\n',
            "setup.py": "import six  # noqa: F401 - what the build system declares\n"
            "from setuptools import Extension, setup\n\n"
            "setup(name='oldpkg', version='1.0', packages=['oldpkg'], "
            "ext_modules=[Extension('oldpkg._unit', ['oldpkg/_unit.c'])])\n",
            ".gitignore": "*.so\nbuild/\n*.egg-info/\n",
            "oldpkg/__init__.py": "from oldpkg._unit import UNIT  # noqa: F401\n",
            "oldpkg/_unit.c": UNIT_C,
            "oldpkg/area.py": AREA,
        },
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
        base_files={"oldpkg/_unit.c": UNIT_C.replace('"UNIT", 1', '"UNIT", 2')},
    )
    # pytest 7.4 (astropy 4.3 to 5.2's recipes) registers a package's conftest.py twice, and collects
    # nothing, where the package was imported by another path than the one pytest sees the tree at (the
    # tree shown at /testbed through a link)
    conftests = _row(
        store,
        "conftests",
        {
            "setup.py": plain + ")\n",
            # a plugin of the package's own, loaded before the conftests (astropy's: pytest-astropy's)
            "setup.cfg": "[tool:pytest]\naddopts = -p oldpkg.plugin\n",
            "oldpkg/plugin.py": "",
            "oldpkg/__init__.py": "",
            "oldpkg/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef unit():\n    return 1\n",
            "oldpkg/tests/__init__.py": "",
            "oldpkg/area.py": AREA,
        },
        {"pip_packages": ["pytest==7.4.0"], "install": "python -m pip install -e ."},
        tests="oldpkg/tests/test_area.py",
    )
    # a setup.py project (no pyproject.toml) whose setup.py imports what it does not declare (astropy 1.3's
    # imports numpy): pip ran it in the environment; its isolated builds cannot
    undeclared = _row(
        store,
        "undeclared",
        {
            "setup.py": "import iniconfig  # noqa: F401 - in the environment (pytest's), not declared\n"
            + plain
            + ")\n",
            "oldpkg/__init__.py": "",
            "oldpkg/area.py": AREA,
        },
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
    )
    # a repository whose build needs a git submodule (astropy before 4.0: astropy_helpers, which its
    # ah_bootstrap clones from GitHub during the build): the store holds the submodule's clone
    helpers = store / "acme__helpers"
    (helpers / "buildhelp.py").parent.mkdir(parents=True)
    (helpers / "buildhelp.py").write_text("NAME = 'oldpkg'\n")
    _git(helpers, "init", "-q")
    _git(helpers, "add", "-A")
    _git(helpers, "commit", "-qm", "the build helper")
    helper_commit = _git(helpers, "rev-parse", "HEAD")
    submodule = _row(
        store,
        "submodule",
        {
            ".gitmodules": '[submodule "helpers"]\n\tpath = helpers\n'
            "\turl = https://github.com/acme/helpers.git\n",
            "setup.py": "import sys\n\nsys.path.insert(0, 'helpers')\nfrom buildhelp import NAME\n"
            "from setuptools import setup\n\nsetup(name=NAME, version='1.0', packages=['oldpkg'])\n",
            "oldpkg/__init__.py": "",
            "oldpkg/area.py": AREA,
        },
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
        gitlinks={"helpers": helper_commit},
    )
    # a legacy namespace package (setuptools' namespace_packages: matplotlib's mpl_toolkits) whose
    # __init__ imports pkg_resources, under a suite that makes warnings errors: the editable install's
    # -nspkg.pth makes the package from the tree's path without running that __init__, as in SWE-bench's
    # environments, where its path is the workspace's
    namespace = _row(
        store,
        "nspkg",
        {
            "setup.py": "from setuptools import setup\n\n"
            "setup(name='oldpkg', version='1.0', packages=['oldpkg', 'acmens', 'acmens.tools'], "
            "namespace_packages=['acmens'])\n",
            "setup.cfg": "[tool:pytest]\nfilterwarnings =\n    error\n",
            "acmens/__init__.py": "__import__('pkg_resources').declare_namespace(__name__)\n",
            "acmens/tools/__init__.py": "",
            "oldpkg/__init__.py": "import acmens.tools  # noqa: F401\n",
            "oldpkg/area.py": AREA,
        },
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
    )
    # a setup.py project whose C module, built in uv's isolated environment, does not load against the
    # environment's numpy (matplotlib 3.1's ft2font: setup_requires fetched the newest numpy): here the
    # isolated build lacks the recipe's six, and its module fails to load as such a module does
    isolated = _row(
        store,
        "isolated",
        {
            "setup.py": "import importlib.util\n\nfrom setuptools import Extension, setup\n\n"
            "macros = [] if importlib.util.find_spec('six') else [('BUILT_ELSEWHERE', '1')]\n"
            "setup(name='oldpkg', version='1.0', packages=['oldpkg'], "
            "ext_modules=[Extension('oldpkg._unit', ['oldpkg/_unit.c'], define_macros=macros)])\n",
            ".gitignore": "*.so\nbuild/\n*.egg-info/\n",
            "oldpkg/__init__.py": "from oldpkg._unit import UNIT  # noqa: F401\n",
            "oldpkg/_unit.c": UNIT_C.replace(
                "    PyObject *m",
                "#ifdef BUILT_ELSEWHERE\n"
                '    PyErr_SetString(PyExc_ImportError, "numpy.core.multiarray failed to import");\n'
                "    return NULL;\n#endif\n    PyObject *m",
            ),
            "oldpkg/area.py": AREA,
        },
        {"pip_packages": [PYTEST_PIN, "six"], "install": "python -m pip install -e ."},
    )
    # pytester's in-process runs under a pytest that does not import unittest itself (before 7.2; pytest's
    # own tree at pytest-10081's base): each run imports a fresh unittest under python -m pytest, so what
    # the first run's collection put on TestCase (a file's `from unittest import TestCase`) is not there
    # in the second; the judge imports unittest before pytest runs, to guard it
    pytester = _row(
        store,
        "pytester",
        {
            "setup.py": "from setuptools import setup\n\n"
            "setup(name='oldpkg', version='1.0', packages=['oldpkg'])\n",
            "conftest.py": 'pytest_plugins = ["pytester"]\n',
            "oldpkg/__init__.py": "",
            "oldpkg/area.py": AREA,
        },
        {"pip_packages": ["pytest==7.1.3"], "install": "python -m pip install -e ."},
        test_text=PYTESTER_TESTS,
    )
    pytester["PASS_TO_PASS"] = ["tests/test_area.py::test_an_inner_run_collects_testcase"]
    # a row of mid-2023 whose recipe pins a pytest of today: the pin and what it needs (pluggy>=1.5, 2024)
    # win, the date bounds the rest
    dated = layout_row(store, "src", pytest_pin=PYTEST_PIN)
    dated["created_at"] = "2023-06-01T00:00:00Z"
    rows = [
        legacy,
        conda,
        under_test,
        base_deps,
        base_pins,
        rebuild,
        conftests,
        submodule,
        undeclared,
        namespace,
        isolated,
        pytester,
    ]
    rows.append(dated)
    for row in rows[:-1]:
        row.pop("created_at", None)
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifests = build_with_this_python(rows, store, root / "envs", exclude_newer=True)
    return {"root": root, "manifests": manifests, "helper_commit": helper_commit}


def _play_oracle_and_wrong(built: dict, task_id: str, check: Callable[[Any], None] | None = None) -> None:
    """The row's oracle scores 1 and a wrong answer 0, neither an error (``check``: called with the env
    after each reset)."""
    root = built["root"]
    env = gym.make(
        "toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root / "repos"), envs=str(root / "envs")
    )
    try:
        for policy, reward in ((swe_oracle, 1.0), (swe_wrong, 0.0)):
            env.reset(options={"task_id": task_id})
            if check is not None:
                check(env)
            for action in script_texts(env, policy(env.unwrapped.task)):
                _, got, _, _, info = env.step(action)
            assert (got, info["verdict"].error) == (reward, None), info["verdict"].details
    finally:
        env.close()


def _at_base(base: str) -> Callable[[Any], None]:
    """A check that the env drew the row at ``base``."""

    def check(env: Any) -> None:
        assert env.unwrapped.task.data["base_commit"] == base

    return check


def _pin(manifest: dict, name: str) -> str:
    return next(p for p in manifest["pins"] if p.lower().startswith(f"{name}=="))


def test_an_old_setuptools_project_installs_the_legacy_way_with_pkg_resources_and_plays(built):
    manifest = built["manifests"]["acme/legacy"]
    assert (
        manifest["setuptools"]["requirement"] == "setuptools<70"
        and "dep_util" in manifest["setuptools"]["reason"]
    )
    assert _pin(manifest, "setuptools").startswith("setuptools==69.")
    assert manifest["editable"].startswith("setup.py develop") and "iniconfig" in " ".join(manifest["pins"])
    _play_oracle_and_wrong(built, "acme__legacy-1")  # oldpkg imports pkg_resources and dep_util


def test_a_source_build_the_newest_setuptools_cannot_do_is_built_with_the_environments(built):
    """uv builds a source distribution in an isolated environment with the newest setuptools; SWE-bench's
    pip built a setup.py project with the environment's own. A build that fails so is tried again held to
    the environment's setuptools, and the later builds keep it."""
    manifest = built["manifests"]["acme/legacy"]
    held = manifest["builds_held"]
    assert held["setuptools"] == _pin(manifest, "setuptools").split("==")[1], held
    assert held["reason"].startswith("step pip_packages: a source build failed"), held
    assert any(p.startswith("legacydep @ file://") for p in manifest["pins"]), manifest["pins"]  # built
    # a build that needed nothing held holds nothing
    assert built["manifests"]["acme/conda"]["builds_held"] == {}


def test_a_source_build_importing_what_it_does_not_declare_is_built_in_the_environment(built):
    """pip built a setup.py project in the environment: what the environment had, the build had. uv builds
    it in isolation, where an undeclared import fails; the module is installed and the package built in
    the environment."""
    manifest = built["manifests"]["acme/legacy"]
    assert list(manifest["built_in_environment"]) == ["needsix"], manifest["built_in_environment"]
    assert "its build imports six, which it does not declare" in manifest["built_in_environment"]["needsix"]
    assert _pin(manifest, "six") and any(p.startswith("needsix @ file://") for p in manifest["pins"])
    assert built["manifests"]["acme/conda"]["built_in_environment"] == {}


def test_a_compiled_repositorys_build_requirements_are_in_the_environment_for_its_rebuilds(built):
    manifest = built["manifests"]["acme/rebuild"]
    needs = manifest["rebuild_requirements"]
    # tox 3.0.0 requires pluggy<1, where the environment's pytest brought pluggy 1.x
    assert needs["installed"] == ["six"] and list(needs["not_installed"]) == ["tox==3.0.0"], needs
    assert "would change a distribution the environment has" in needs["not_installed"]["tox==3.0.0"]
    assert _pin(manifest, "six") and not _pin(manifest, "pluggy").startswith("pluggy==0.")
    (base,) = manifest["base_overlays"]  # rebuilt at its base commit, in the environment
    with tarfile.open(built["root"] / "envs" / manifest["key"] / "overlays" / f"{base}.tar") as tar:
        assert any(name.startswith("oldpkg/_unit") and name.endswith(".so") for name in tar.getnames())
    _play_oracle_and_wrong(built, "acme__rebuild-1", _at_base(base))


def test_compiled_parts_that_do_not_load_against_the_environments_numpy_are_built_again_there(built):
    manifest = built["manifests"]["acme/isolated"]
    here = manifest["compiled_in_environment"]
    (module,) = here["modules"]
    assert module.startswith("oldpkg/_unit") and module.endswith(".so"), here
    assert "numpy.core.multiarray failed to import" in here["error"], here
    assert "setup.py build_ext --inplace" in here["how"], here
    assert module in manifest["overlay_files"]
    # a compiled repository whose parts load is left as its install built it
    assert built["manifests"]["acme/rebuild"]["compiled_in_environment"] == {}
    _play_oracle_and_wrong(built, "acme__isolated-1")


def test_a_setup_py_projects_packages_directory_is_on_sys_path_as_setup_py_develop_put_it(built, tmp_path):
    """pip installed a setup.py project (no pyproject.toml) with ``setup.py develop``, which put its packages'
    directory on sys.path; pylint's plugin loader maps its files to modules through sys.path (astroid) in a
    ``python -m pylint`` run from another directory. uv's PEP 660 finder alone leaves sys.path as it was: the
    build adds the entry, at the workspace. A pyproject.toml project keeps its finder alone, as pip's
    PEP 660 install did."""
    tree = tmp_path / "workspace"
    for repo, on_path in (("acme/conftests", True), ("acme/rebuild", False)):
        manifest = built["manifests"][repo]
        assert "(setuptools editable finder)" in manifest["import_roots"], manifest["import_roots"]
        python = built["root"] / "envs" / manifest["key"] / "venv" / "bin" / "python"
        shown = subprocess.run(
            [str(python), "-c", "import sys; print(sys.path)"], cwd=tmp_path, capture_output=True, text=True,
            env={"PATH": os.environ["PATH"], "TOOLGYM_TESTBED": str(tree)}, check=True,
        )  # fmt: skip
        assert (repr(str(tree)) in shown.stdout) is on_path, (repo, shown.stdout)
    _play_oracle_and_wrong(built, "acme__conftests-1")


def test_a_package_imported_before_pytest_reads_its_conftest_is_one_module_to_pytest_7(built):
    manifest = built["manifests"]["acme/conftests"]
    assert _pin(manifest, "pytest") == "pytest==7.4.0"
    _play_oracle_and_wrong(built, "acme__conftests-1")


def test_pytesters_inner_runs_each_see_a_fresh_unittest_as_under_python_m_pytest(built):
    """pytest-10081's bare tree passed its listed test here and failed under ``python -m pytest``: pytester
    ran an earlier test's inner session, whose ``from unittest import TestCase`` put a skip fixture on
    TestCase, and in the judge's process that TestCase was still the next inner session's."""
    assert _pin(built["manifests"]["acme/pytester"], "pytest") == "pytest==7.1.3"
    _play_oracle_and_wrong(built, "acme__pytester-1")


def test_a_setup_py_that_imports_what_it_does_not_declare_installs_from_the_environment(built):
    manifest = built["manifests"]["acme/undeclared"]
    assert manifest["editable"].startswith("setup.py develop"), manifest["editable"]
    assert "its setup.py run in the environment" in manifest["editable"], manifest["editable"]
    assert _pin(manifest, "iniconfig")
    _play_oracle_and_wrong(built, "acme__undeclared-1")


def test_an_egg_infos_requirements_are_read_for_the_extras_asked():
    requires = 'numpy>=1.10\n\n[:python_version < "3"]\nsix\n\n[test]\npytest-astropy\n[docs]\nsphinx\n'
    assert egg_requirements(requires, ["test"]) == [
        "numpy>=1.10",
        'six; python_version < "3"',
        "pytest-astropy",
    ]
    assert egg_requirements(requires, []) == ["numpy>=1.10", 'six; python_version < "3"']


def test_a_submodule_the_build_needs_comes_from_the_store_never_the_network(built):
    manifest = built["manifests"]["acme/submodule"]
    assert manifest["submodules"] == {"helpers": f"acme/helpers at {built['helper_commit']}"}
    assert built["manifests"]["acme/conda"]["submodules"] == {}
    _play_oracle_and_wrong(built, "acme__submodule-1")


def test_pre_install_runs_only_what_edits_the_checkout_and_lists_the_system_packages_missing(built):
    manifest = built["manifests"]["acme/legacy"]
    # the guard line is gone (the install ran), and nothing else ran: not the sed outside the checkout, not
    # the echo onto /tmp, not the sed whose `e` flag would run a command
    assert manifest["pre_install_run"] == ["sed -i '/PRE_INSTALL_GUARD/d' setup.py"]
    assert len(manifest["pre_install_not_run"]) == 4
    assert (built["root"] / "escaped.txt").read_text() == "a\n"
    assert not Path("/tmp/toolgym-planted.txt").exists()
    assert manifest["system_packages"] == ["no-such-package-toolgym"]
    assert manifest["system_packages_missing"] in (["no-such-package-toolgym"], None)  # None: no dpkg


def test_repository_steps_are_told_from_system_steps(tmp_path):
    (tmp_path / "setup.py").write_text("x\n")
    sphinx = (
        "grep -q 'sphinxcontrib-htmlhelp>=2.0.0' setup.py && sed -i 's/a/b/' setup.py "
        "|| sed -i 's/sphinxcontrib-htmlhelp/sphinxcontrib-htmlhelp<=2.0.4/' setup.py"
    )
    assert [op for op, _ in repository_step(sphinx, tmp_path)] == ["", "&&", "||"]
    assert repository_step("echo 'x = 1' >> setup.py", tmp_path) is not None
    (tmp_path / "out").symlink_to("/etc/hostname")
    for system in ("sed -i s/a/b/ /etc/hosts", "sed -i s/a/b/ out", "sed -i 's/$/x/' setup.py; id",
                   'sed -i "s/$HOME/x/" setup.py', "sed s/a/b/ setup.py", "sed -i -f s.sed setup.py",
                   "echo 'en_US UTF-8' > /etc/locale.gen", "locale-gen en_US.UTF-8", "python setup.py x",
                   "sed -i s/a/b/ setup.py | sh"):  # fmt: skip
        assert repository_step(system, tmp_path) is None, system
    assert apt_packages("DEBIAN_FRONTEND=noninteractive apt-get install -y graphviz pkg-config && x") == [
        "graphviz",
        "pkg-config",
    ]


def test_a_conda_only_package_is_listed_as_not_installed_and_the_rest_resolves(built):
    manifest = built["manifests"]["acme/conda"]
    assert manifest["not_installed"] == ["python=3.11", "cdms2 (conda only: not in the package index)"]
    assert _pin(manifest, "iniconfig") and _pin(manifest, "pytest") == PYTEST_PIN


def test_a_base_commits_own_dependencies_are_installed_beside_the_setup_commits(built):
    manifest = built["manifests"]["acme/basedeps"]
    ((base, added),) = manifest["base_requirements"].items()
    assert [package for package in added if package.startswith("six==")] == added, added
    _play_oracle_and_wrong(built, "acme__basedeps-1", _at_base(base))  # oldpkg imports six at the base


def test_a_base_commit_that_pins_other_versions_gets_an_environment_of_its_own(built):
    manifest = built["manifests"]["acme/basepins"]
    ((base, variant),) = manifest["base_environments"].items()
    assert variant == {"changed": ["six==1.16.0"], "added": []} and manifest["base_requirements"] == {}
    assert _pin(manifest, "six") == "six==1.17.0"  # the environment itself is as its setup commit built it
    variant_python = built["root"] / "envs" / manifest["key"] / "bases" / base / "venv" / "bin" / "python"

    def on_its_own(env: Any) -> None:  # oldpkg asserts six 1.16.0 at its base
        _at_base(base)(env)
        assert env.unwrapped.verifier.python_for(env.unwrapped.task) == str(variant_python)

    _play_oracle_and_wrong(built, "acme__basepins-1", on_its_own)


def test_the_repository_under_test_may_be_pytest_itself(built):
    manifest = built["manifests"]["acme/pytest"]
    python = built["root"] / "envs" / manifest["key"] / "venv" / "bin" / "python"
    tree = built["root"] / "tree"
    (tree / "src" / "pytest").mkdir(parents=True, exist_ok=True)
    (tree / "src" / "pytest" / "__init__.py").write_text("")
    out = subprocess.run(
        [str(python), "-I", "-c", "import pytest; print(pytest.__file__)"], capture_output=True, text=True,
        env={"TOOLGYM_TESTBED": str(tree)},
    )  # fmt: skip
    assert out.stdout.strip() == str(tree / "src" / "pytest" / "__init__.py"), out.stderr


def test_exclude_newer_lets_the_pins_win_and_bounds_the_rest(built):
    manifest = built["manifests"]["acme/src"]
    assert manifest["exclude_newer"] == "2023-06-01T00:00:00Z"
    exempt = manifest["exclude_newer_exempt"]
    assert exempt["pytest"] == "pinned by the recipe" and exempt["pluggy"].startswith("what the pins need")
    assert _pin(manifest, "pytest") == PYTEST_PIN
    # setuptools is chosen by its bound, not the date (one of a 2020 row's date writes versions uv refuses)
    assert _pin(manifest, "setuptools").startswith("setuptools==69.") and "PEP 440" in exempt["setuptools"]
    # the rest as of the date: iniconfig 2.0.0 (January 2023), not a newer one
    assert _pin(manifest, "iniconfig") == "iniconfig==2.0.0"


def test_a_clone_missing_objects_names_the_repository_the_commit_and_the_fix(tmp_path):
    row = layout_row(tmp_path / "repos", "src")
    clone = tmp_path / "repos" / "acme__src"
    blob = _git(clone, "rev-parse", f"{row['base_commit']}:src/shapes/area.py")
    (clone / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # a loose object lost: as a damaged pack
    with pytest.raises(RepoUnavailable) as caught:
        RepoStore(tmp_path / "repos").snapshot("acme/src", row["base_commit"])
    message = str(caught.value)
    assert f"repository acme/src: the clone at {clone} is missing 1 object(s)" in message, message
    assert row["base_commit"] in message and "Fetch the repository whole" in message
    assert "fatal" not in message and "index-pack" not in message
    row["environment_setup_commit"] = row["base_commit"]
    (failed,) = build_all(plan([row]), tmp_path / "repos", tmp_path / "envs").values()
    assert isinstance(failed, BuildFailed) and failed.step == "checkout", failed
    assert "is missing 1 object(s)" in failed.message and "Fetch the repository whole" in failed.message


def test_a_base_commit_the_clone_cannot_give_is_skipped_and_the_environment_still_builds(tmp_path):
    """astropy's 5.2 bases need a blob that a clone fetched without its largest files lacks: that build
    (and every other one of the command) stopped on git's text. Now the base is skipped and listed, the
    environment builds, and the base's rows are refused where they play with the clone's diagnosis."""
    row = layout_row(tmp_path / "repos", "src")
    clone = tmp_path / "repos" / "acme__src"
    setup = row["base_commit"]
    _git(clone, "checkout", "-q", "--detach", setup)
    (clone / "data.bin").write_bytes(b"a large data file\n")
    with open(clone / "pyproject.toml", "a") as fh:  # a dependency file changes: the build checks it out
        fh.write("\n# the base's own\n")
    _git(clone, "add", "data.bin", "pyproject.toml")
    _git(clone, "commit", "-q", "-m", "a base with a data file")
    base = _git(clone, "rev-parse", "HEAD")
    blob = _git(clone, "rev-parse", f"{base}:data.bin")
    (clone / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # left out of the clone
    _git(clone, "checkout", "-q", "--detach", setup)
    row.update(base_commit=base, environment_setup_commit=setup)
    (manifest,) = build_all(plan([row]), tmp_path / "repos", tmp_path / "envs").values()
    assert not isinstance(manifest, BuildFailed), manifest
    assert list(manifest["bases_unreadable"]) == [base] and manifest["base_requirements"] == {}
    with pytest.raises(RepoUnavailable) as caught:
        RepoStore(tmp_path / "repos").snapshot("acme/src", base)
    assert "is missing 1 object(s)" in str(caught.value) and "Fetch the repository whole" in str(caught.value)


def test_a_legacy_namespace_package_is_made_from_the_workspace_without_running_its_init(built):
    manifest = built["manifests"]["acme/nspkg"]
    assert any(root.startswith("(namespace package line of ") for root in manifest["import_roots"])
    site = next(Path(built["root"], "envs", manifest["key"], "venv", "lib").glob("python*/site-packages"))
    (nspkg,) = site.glob("*-nspkg.pth")
    assert "_toolgym_testbed" in nspkg.read_text() and "/.tmp/" not in nspkg.read_text()
    _play_oracle_and_wrong(built, "acme__nspkg-1")  # acmens/__init__.py's pkg_resources: an error if run


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A pure-Python wheel of one empty module, as a package index holds it (``requires``: its
    Requires-Dist)."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-{version}.dist-info"
    needs = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{needs}",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for rel, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for rel, text in files.items():
            whl.writestr(rel, text)


def _failing_sdist(folder: Path, name: str, version: str) -> None:
    """A source distribution whose build fails, as one needing system libraries does (pycairo's)."""
    import io as _io

    base = f"{name}-{version}"
    files = {
        f"{base}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{base}/setup.py": "raise SystemExit('cairo was not found: the cairo libraries are needed')\n",
    }
    with tarfile.open(folder / f"{base}.tar.gz", "w:gz") as tar:
        for rel, text in files.items():
            info = tarfile.TarInfo(rel)
            info.size = len(text.encode())
            tar.addfile(info, _io.BytesIO(text.encode()))


def test_conda_packages_pypi_cannot_build_get_their_series_wheels_or_are_not_installed(tmp_path, monkeypatch):
    """conda's channels had builds PyPI lacks. A pinned conda package with no wheel for this Python whose
    source build fails gets its release series' wheels (scikit-learn 1.3's numpy==1.19.2 on Python 3.9:
    PyPI's wheels start at 1.19.3); an unpinned one that fails so (matplotlib's pycairo) is not installed;
    the pip section is installed as written. The index here is a folder the test writes."""
    index = tmp_path / "index"
    index.mkdir()
    _failing_sdist(index, "condapin", "1.0.0")
    _wheel(index, "condapin", "1.0.2")
    _wheel(index, "condapin", "1.1.0")  # another series: never chosen for the 1.0.0 pin
    _failing_sdist(index, "needscairo", "2.0")
    monkeypatch.setenv("UV_FIND_LINKS", str(index))
    (tmp_path / "root").mkdir()
    root = open_to_sandbox(tmp_path / "root")
    row = _row(
        root / "repos",
        "condabuilds",
        {
            "environment.yml": "name: t\ndependencies:\n  - python=3.11\n  - condapin==1.0.0\n"
            f"  - needscairo\n  - pip:\n    - {PYTEST_PIN}\n",
            "setup.py": "from setuptools import setup\n\nsetup(name='condabuilds', py_modules=[])\n",
        },
        {"packages": "environment.yml", "install": "python -m pip install -e ."},
    )
    manifest = build_with_this_python([row], root / "repos", root / "envs")["acme/condabuilds"]
    assert manifest["conda_pins_relaxed"] == {"condapin==1.0.0": "condapin==1.0.*"}
    assert _pin(manifest, "condapin") == "condapin==1.0.2" and _pin(manifest, "pytest") == PYTEST_PIN
    assert manifest["not_installed"] == [
        "python=3.11",
        "needscairo (conda only here: no wheel for this Python, and its source build failed)",
    ]


def test_the_packages_step_resolves_under_the_recipes_later_pins(tmp_path, monkeypatch):
    """The recipe's pip_packages pins are installed after its packages step and win (SWE-bench's pip ran
    after conda). Resolved without them, the step takes today's ``usesbase`` 2.0, which needs ``base>=2``,
    and the pin ``base==1.0`` then breaks it (matplotlib 3.7: today's pandas, which needs numpy 2, under
    ``numpy==1.25.2``); resolved under them it takes ``usesbase`` 1.0. A step with no solution under them
    (its own exact pin of another version) resolves without them, saying why."""
    index = tmp_path / "index"
    index.mkdir()
    for version in ("1.0", "2.0"):
        _wheel(index, "base", version)
        _wheel(index, "usesbase", version, (f"base>={version}",))
    monkeypatch.setenv("UV_FIND_LINKS", str(index))
    (tmp_path / "root").mkdir()
    root = open_to_sandbox(tmp_path / "root")
    setup = "from setuptools import setup\n\nsetup(name='{}', py_modules=[])\n"
    rows = [
        _row(
            root / "repos",
            name,
            {"environment.yml": f"name: t\ndependencies:\n  - {conda}\n", "setup.py": setup.format(name)},
            {"packages": "environment.yml", "pip_packages": ["base==1.0", PYTEST_PIN], "install": "true"},
        )
        for name, conda in (("laterpins", "usesbase"), ("laterclash", "base==2.0"))
    ]
    manifests = build_with_this_python(rows, root / "repos", root / "envs")
    fits = manifests["acme/laterpins"]
    assert (_pin(fits, "usesbase"), _pin(fits, "base")) == ("usesbase==1.0", "base==1.0")
    assert fits["packages_under_pins"] == {"pins": ["base==1.0", PYTEST_PIN], "applied": True}
    clash = manifests["acme/laterclash"]
    assert clash["packages_under_pins"]["applied"] is False
    assert clash["packages_under_pins"]["reason"].startswith("no solution under them")
    assert _pin(clash, "base") == "base==1.0"  # the pip_packages pin still wins, as it did


def download_failing_row(tmp_path: Path, name: str, first: str = "") -> tuple[Path, dict]:
    """A repository whose build fails as matplotlib's does where it cannot download FreeType's source,
    unless ``mplsetup.cfg`` opts out (``first``: lines its ``setup.py`` runs before); the sandbox's root
    under ``tmp_path`` and the row."""
    setup = (
        f"import os\nfrom setuptools import setup\n{first}\n"
        "if not os.path.exists('mplsetup.cfg'):  # as matplotlib's setupext.py says it, with no network\n"
        "    raise IOError(\"Failed to download any of the following: ['https://download.savannah.gnu.org/"
        "releases/freetype/freetype-2.6.1.tar.gz']\")\n"
        "setup(name='oldpkg', version='1.0', packages=['oldpkg'])\n"
    )
    (tmp_path / "root").mkdir()
    root = open_to_sandbox(tmp_path / "root")
    row = _row(
        root / "repos",
        name,
        {"setup.py": setup, "oldpkg/__init__.py": "", "oldpkg/area.py": AREA},
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
    )
    return root, row


def test_where_the_builds_download_of_a_library_fails_it_asks_for_the_machines(tmp_path, monkeypatch):
    """matplotlib 3.3+ downloads FreeType's and Qhull's sources during its build unless ``mplsetup.cfg``
    says otherwise. Where that download fails, the build writes ``mplsetup.cfg`` for the libraries the
    machine has (here: Qhull found, FreeType not) and installs again; being a file the install leaves in the
    tree, it reaches each workspace and the judge's rebuild with the compiled parts."""
    root, row = download_failing_row(tmp_path, "mpl")
    monkeypatch.setitem(toolchain.SYSTEM_LIBRARIES, row["repo"], ("freetype", "qhull"))
    monkeypatch.setitem(
        toolchain.BUILD_SETTINGS, row["repo"], toolchain.BUILD_SETTINGS["matplotlib/matplotlib"]
    )
    monkeypatch.setitem(
        toolchain.PARTS, "qhull", toolchain.Part("qhull", "Qhull", "libqhull-dev", lambda _: None)
    )
    absent = toolchain.Part(
        "freetype", "FreeType", "libfreetype-dev", lambda _: "pkg-config knows no freetype2"
    )
    monkeypatch.setitem(toolchain.PARTS, "freetype", absent)
    envs = root / "envs"
    manifest = build_with_this_python([row], root / "repos", envs)["acme/mpl"]
    assert manifest["build_settings"] == {"mplsetup.cfg": "[libs]\nsystem_qhull = true\n"}
    assert manifest["system_libraries_missing"] == ["freetype"]
    assert "mplsetup.cfg" in manifest["overlay_files"]
    with tarfile.open(fileobj=io.BytesIO(EnvironmentStore(envs).overlay(manifest["key"]))) as tar:
        member = tar.extractfile("mplsetup.cfg")
        assert member is not None and member.read() == b"[libs]\nsystem_qhull = true\n"
    log = (envs / manifest["key"] / "build.log").read_text()
    assert log.index("Failed to download any of the following") < log.index("its download failed: wrote")


def test_where_the_builds_download_works_nothing_is_asked_of_the_machine(tmp_path, monkeypatch):
    """A build whose download works (a machine with a network) takes the library versions the repository's
    tests were drawn with, as SWE-bench's images did: no ``mplsetup.cfg``."""
    (tmp_path / "root").mkdir()
    root = open_to_sandbox(tmp_path / "root")
    plain = "from setuptools import setup\n\nsetup(name='oldpkg', version='1.0', packages=['oldpkg'])\n"
    row = _row(
        root / "repos",
        "mplnet",
        {"setup.py": plain, "oldpkg/__init__.py": "", "oldpkg/area.py": AREA},
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
    )
    monkeypatch.setitem(toolchain.SYSTEM_LIBRARIES, row["repo"], ("qhull",))
    monkeypatch.setitem(
        toolchain.BUILD_SETTINGS, row["repo"], toolchain.BUILD_SETTINGS["matplotlib/matplotlib"]
    )
    monkeypatch.setitem(
        toolchain.PARTS, "qhull", toolchain.Part("qhull", "Qhull", "libqhull-dev", lambda _: None)
    )
    manifest = build_with_this_python([row], root / "repos", root / "envs")["acme/mplnet"]
    assert manifest["build_settings"] == {} and "mplsetup.cfg" not in manifest["overlay_files"]
