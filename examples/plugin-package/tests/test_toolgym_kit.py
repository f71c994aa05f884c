"""The toolgym env check kit on this package's envs: one test per env and check."""

from toolgym.testing import env_check_tests

test_letters_envs = env_check_tests("letters/*", tokenizer="tiny")
