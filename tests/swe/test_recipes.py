"""Where a row's recipe comes from (toolgym.swe.recipes), how test ids a dataset cut are matched, and how
conda and requirements lists become pip's."""

from __future__ import annotations

import sys
import types

import pytest

from toolgym.rewards.swe import _outcomes, listed_forms
from toolgym.swe.recipes import Recipe, RecipeError, UserRecipes, recipe_for, swebench_specs
from toolgym.swe.requirements import failed_source_builds, read_requirements, replace_packages, split_conda
from toolgym.swe.runners import id_rule_for


def test_the_user_file_wins_then_install_config_then_swebench_specs_then_inference(tmp_path):
    recipes = tmp_path / "recipes.yaml"
    recipes.write_text(
        "acme__calc-7:\n  python: '3.10'\n  pip_packages: [pytest, numpy]\n"
        "acme/calc:\n  '1.0':\n    install: python -m pip install -e .[test]\n  '*':\n    python: 3.12\n"
    )
    user = UserRecipes(recipes)
    assert recipe_for({"instance_id": "acme__calc-7", "repo": "acme/calc"}, user).pip_packages == (
        "pytest",
        "numpy",
    )
    assert recipe_for({"instance_id": "x", "repo": "acme/calc", "version": "1.0"}, user).install == (
        "python -m pip install -e .[test]",
    )
    assert recipe_for({"instance_id": "x", "repo": "acme/calc", "version": "2.0"}, user).python == "3.12"
    rebench = {
        "instance_id": "r",
        "repo": "o/n",
        "install_config": '{"python": "3.9", "packages": "numpy=1.21"}',
    }
    found = recipe_for(rebench, user)
    assert (found.python, found.packages, found.source) == ("3.9", "numpy=1.21", "r: install_config")
    pytest_row = {"instance_id": "pytest-dev__pytest-7373", "repo": "pytest-dev/pytest", "version": "5.4"}
    found = recipe_for(pytest_row)
    assert found.python == "3.9" and "pluggy==0.13.1" in found.pip_packages and "SWE-bench" in found.source
    sqlfluff = recipe_for({"instance_id": "s", "repo": "sqlfluff/sqlfluff", "version": "2.0"})
    assert sqlfluff.packages == "requirements.txt" and sqlfluff.reqs_path == ("requirements_dev.txt",)
    assert recipe_for({"instance_id": "m", "repo": "me/mine"}).source.startswith("inferred")


def test_equal_recipes_share_one_environment_and_a_different_one_does_not():
    a = Recipe(python="3.9", pip_packages=["pytest"], source="one")
    b = Recipe(python="3.9", pip_packages=("pytest",), source="another")
    assert a.key("o/n", "abc") == b.key("o/n", "abc") != a.key("o/n", "abd")
    assert Recipe(python="3.10").key("o/n", "abc") != a.key("o/n", "abc")


def test_a_bad_recipe_names_the_file_and_the_key(tmp_path):
    bad = tmp_path / "r.yaml"
    bad.write_text("acme__calc-1:\n  pyton: '3.9'\n")
    with pytest.raises(RecipeError, match=r"r.yaml \(acme__calc-1\): unknown recipe key\(s\) \['pyton'\]"):
        UserRecipes(bad)
    bad.write_text("acme__calc-1:\n  python: latest\n")
    with pytest.raises(RecipeError, match=r"python: .*3\.9"):
        UserRecipes(bad)


def test_swesmith_profiles_are_read_where_the_package_is_installed(monkeypatch):
    class Profile:
        python_version = "3.10"
        install_cmds = ("python -m pip install -e .",)

    registry = types.SimpleNamespace(get_from_inst=lambda row: Profile())
    profiles = types.ModuleType("swesmith.profiles")
    profiles.registry = registry  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "swesmith", types.ModuleType("swesmith"))
    monkeypatch.setitem(sys.modules, "swesmith.profiles", profiles)
    found = recipe_for({"instance_id": "o__n.abc.lm_rewrite__x", "repo": "swesmith/o__n.abc"})
    assert (found.python, found.source) == ("3.10", "SWE-smith profile (Profile)")


def test_swebench_specs_name_their_source_and_licence():
    data = swebench_specs()
    assert "swebench-4.1.0" in data["source"] and data["licence"].startswith("MIT")
    assert len(data["specs"]) >= 18 and data["log_parsers"]["psf/requests"] == "pytest_options"


def test_requirements_are_read_from_the_checkout_with_includes_and_replacements(tmp_path):
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "base.txt").write_text("attrs>=20  # a comment\n")
    (tmp_path / "reqs" / "dev.txt").write_text(
        "-r base.txt\n-e .\n# only a comment\ntypes-pkg_resources\npytest\n"
    )
    rel, lines = read_requirements(tmp_path, ["missing.txt", "reqs/dev.txt"])
    assert rel == "reqs/dev.txt" and lines == ["attrs>=20", "types-setuptools", "pytest"]
    assert replace_packages(["types-pkg_resources==0.1"]) == ["types-setuptools"]
    pip, skipped = split_conda(
        [
            "python=3.9",
            "numpy=1.21",
            "scipy>=1.5",
            "conda-forge::cython",
            "c-compiler",
            "iris",
            "pytables=3.6",
        ]
    )
    assert pip == ["numpy==1.21.*", "scipy>=1.5", "cython", "scitools-iris", "tables==3.6.*"]
    assert skipped == ["python=3.9", "c-compiler"]


def test_an_id_cut_at_its_first_space_stands_for_the_tests_it_names():
    assert "t.py::test_x[select" in listed_forms("t.py::test_x[select a]", "pytest")
    assert listed_forms("t.py::test_x[select a]", "exact") == {"t.py::test_x[select a]"}
    assert "t.py::test_p[/c.txt]" in listed_forms("t.py::test_p[/a/b/c.txt]", "pytest_options")
    # a duplicate id's index, as the other pytest writes it, both ways (sphinx-8265 lists the newer form)
    assert "t.py::test_u[1234-1234_0]" in listed_forms("t.py::test_u[1234-12340]", "pytest")
    assert "t.py::test_u[1234-12340]" in listed_forms("t.py::test_u[1234-1234_0]", "pytest")
    assert listed_forms("t.py::test_u[a_b]", "pytest") == {"t.py::test_u[a_b]"}
    assert listed_forms("t.py::test_u[1234-12340]", "exact") == {"t.py::test_u[1234-12340]"}
    records = [
        {"ready": True},
        {"collected": ["t.py::test_x[select a]", "t.py::test_x[select b]", "t.py::test_y"]},
        *(
            {"id": t, "when": "call", "outcome": "passed", "xfail": False}
            for t in ("t.py::test_x[select a]", "t.py::test_y")
        ),
        {"id": "t.py::test_x[select b]", "when": "call", "outcome": "failed", "xfail": False},
        {"finished": 0},
    ]
    outcomes = _outcomes(["t.py::test_x[select", "t.py::test_y", "t.py::test_z"], records, "pytest")[0]
    # both tests the cut id names must pass: one failed
    assert outcomes == {
        "t.py::test_x[select": "failed",
        "t.py::test_y": "passed",
        "t.py::test_z": "not collected",
    }
    assert _outcomes(["t.py::test_x[select"], records, "exact")[0] == {"t.py::test_x[select": "not collected"}
    assert id_rule_for({"repo": "psf/requests"}) == "pytest_options"
    assert id_rule_for({"repo": "o/n", "log_parser": "parse_log_pytest"}) == "pytest"
    # SWE-bench 5.x's per-repository names for the parser that shortens path parameters (Verified's
    # requests-6028 lists test_unzipped_paths_unchanged[/test_utils.py])
    for name in ("parse_log_requests", "parse_log_pylint", "parse_log_pydicom"):
        assert id_rule_for({"repo": "o/n", "log_parser": name}) == "pytest_options"
    assert id_rule_for({"repo": "o/n", "log_parser": "parse_log_sphinx"}) == "pytest"


def test_a_pass_needs_the_seal_s_evidence_and_any_failure_wins():
    """pytest's reports only take a pass away: a call reported passed counts with the seal's evidence that
    the test's own function returned (the last call, as a retrying decorator makes several), and an
    expected failure counts only for the tests given (the judge gives its PASS_TO_PASS ones)."""
    ids = [f"t.py::test_{n}" for n in "abcdefg"]

    def phases(test, call="passed", xfail=False, teardown="passed"):
        return [
            {"id": test, "when": "setup", "outcome": "passed", "xfail": False},
            {"id": test, "when": "call", "outcome": call, "xfail": xfail},
            {"id": test, "when": "teardown", "outcome": teardown, "xfail": False},
        ]

    records = [{"ready": True}, {"collected": ids}]
    for test in ids[:4]:
        records += phases(test)
    records += phases("t.py::test_e", call="skipped", xfail=True)
    records += phases("t.py::test_f", call="skipped", xfail=True)
    records += phases("t.py::test_g", teardown="failed")
    records += [{"id": "t.py::test_a", "when": "call", "outcome": "passed", "xfail": False}, {"finished": 0}]
    evidence = [
        {"ran": "t.py::test_a", "returned": True},
        {"ran": "t.py::test_b", "returned": True},
        {"ran": "t.py::test_b", "returned": False},  # its last call raised
        {"ran": "t.py::test_c", "unverified": "its code is not its test file's"},
        {"ran": "t.py::test_g", "returned": True},
    ]
    outcomes = _outcomes(ids, records, "exact", evidence, xfail_counts=["t.py::test_f"])[0]
    assert outcomes == {
        "t.py::test_a": "passed",
        "t.py::test_b": "failed",
        "t.py::test_c": "unverified",
        "t.py::test_d": "unverified",  # reported passed, no evidence at all
        "t.py::test_e": "skipped",  # an expected failure of a FAIL_TO_PASS test is not a fix
        "t.py::test_f": "passed",
        "t.py::test_g": "failed",  # the evidence does not outweigh a failed teardown
    }
    # without the seal (Python before 3.8) the reports decide alone
    assert _outcomes(ids, records, "exact")[0]["t.py::test_d"] == "passed"


def test_a_package_list_is_split_as_the_shell_splits_it():
    """SWE-bench's harness hands ``packages`` to ``conda create`` through a shell: scikit-learn 1.3's spec
    quotes its pins, which are then requirements, not words with quotes."""
    spec = swebench_specs()["specs"]["scikit-learn/scikit-learn"]["1.3"]
    recipe = Recipe(packages=spec["packages"])
    words = recipe.package_words()
    assert words[:3] == ["numpy==1.19.2", "scipy==1.5.2", "cython==3.0.10"] and "pandas<2.0.0" in words
    assert split_conda(words)[0][:3] == ["numpy==1.19.2", "scipy==1.5.2", "cython==3.0.10"]
    assert Recipe(packages="numpy 'scipy<2").package_words() == [
        "numpy",
        "'scipy<2",
    ]  # unbalanced: as written


def test_the_source_builds_a_failed_install_names_with_what_required_them():
    """uv's words when a conda package has no wheel and its source build fails (matplotlib's
    environment.yml: pycairo, which pygobject requires, and wxpython); those are then not installed."""
    output = (
        "error: Failed to build `pycairo==1.29.2`\n  cause: The build backend returned an error\n"
        "hint: `pycairo` (v1.29.2) was included because `pygobject` (v3.58.1) depends on `pycairo`\n"
        "error: Failed to download and build `wxPython==4.3.2`\n"
        "hint: `six` (v1.0) was included because `pytest` (v8) depends on `six`\n"
    )
    assert failed_source_builds(output) == {"pycairo", "pygobject", "wxpython"}
    assert failed_source_builds("error: No solution found when resolving dependencies") == set()
