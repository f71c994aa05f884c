import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolgym.core.spaces import AnyText


@given(st.text(max_size=200))
def test_any_text_admits_every_string_within_the_limit(text):
    assert AnyText(200).contains(text)


def test_any_text_rejects_non_strings_and_long_strings():
    space = AnyText(5)
    assert not space.contains("abcdef")
    assert not space.contains(b"abc")
    assert not space.contains(3)
    with pytest.raises(ValueError):
        AnyText(0)


def test_samples_are_seeded_and_inside_the_space():
    a, b = AnyText(30, seed=3), AnyText(30, seed=3)
    samples = [a.sample() for _ in range(50)]
    assert samples == [b.sample() for _ in range(50)]
    assert all(a.contains(s) for s in samples)
    assert any(not s.isascii() for s in samples)
    assert AnyText(30) == AnyText(30) and AnyText(30) != AnyText(31)
