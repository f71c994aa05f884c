"""The toolgym env check kit on this package's envs: one test per env and check; and the catalogue table
that ``import toolgym`` reads (``toolgym_letters/catalogue.py``) says what ``envs.py`` declares."""

from toolgym.envs.catalogue import check_table
from toolgym.testing import env_check_tests

test_letters_envs = env_check_tests("letters/*", tokenizer="tiny")


def test_the_catalogue_table_is_current():
    """Fails, naming the command that regenerates the table, after a change to a declaration in envs.py."""
    problems = check_table("toolgym_letters.catalogue")
    assert not problems, "\n".join(problems)
