"""Every built-in env passes the env check kit in every action format, with the tiny model's chat template:
one test per env and check (``toolgym check --all`` prints the same as tables)."""

from toolgym.testing import env_check_tests

test_builtin_env = env_check_tests("toolgym/*", tokenizer="tiny")
