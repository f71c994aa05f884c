"""Every built-in env passes the env check kit in every action format, with the tiny model's chat template:
one test per env and check (``toolgym check --all`` prints the same as tables). A judged env
(toolgym/Report-v0) is checked against a scripted judge (``scripted_judge_env``)."""

import pytest

from toolgym.testing import env_check_tests

pytestmark = pytest.mark.usefixtures("scripted_judge_env")

test_builtin_env = env_check_tests("toolgym/*", tokenizer="tiny")
