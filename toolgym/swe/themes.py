"""The procedural SWE world's themes: the function and class templates ``world`` builds packages from.

Ten themes (text utilities, statistics, money, inventory, intervals and dates, plane geometry, grids,
scheduling, parsing, validation), 58 function templates and five class templates. Each template is the source
of a typed, documented function (names, constants and defaults drawn from the seed's ``random.Random``) and
the calls its tests make. This file is long because it is data: the templates themselves, one after another,
each short; the code that builds a repository from them and injects its bugs is ``toolgym.swe.world``.

Every template uses only bounded constructs (``for`` loops over finite sequences and ranges; no ``while``, no
recursion, no I/O), which ``world`` relies on to run the generated code in-process.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

_R = TypeVar("_R")

# --- templates ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FunctionTemplate:
    """A function: its possible names, its source (a ``string.Template`` over ``$name`` and the keys of
    ``choices``, each filled with one of its values) and the argument lists of its tests."""

    names: tuple[str, ...]
    source: str
    cases: Callable[[random.Random], list[str]]
    choices: dict[str, tuple[object, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ClassTemplate:
    """A small class: its possible names, its source, and test scenarios given the chosen name: (setup
    statements, the expression whose value the test asserts)."""

    names: tuple[str, ...]
    source: str
    scenarios: Callable[[random.Random, str], list[tuple[list[str], str]]]
    choices: dict[str, tuple[object, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Theme:
    topic: str  # what the README calls it
    modules: tuple[str, ...]  # the module's possible names
    doc: str  # the module's docstring
    functions: tuple[FunctionTemplate, ...]
    classes: tuple[ClassTemplate, ...] = ()


def literal(value: object) -> str:
    """``repr`` with double-quoted strings, as code is usually written."""
    if isinstance(value, str):
        text = repr(value)
        return f'"{text[1:-1]}"' if text.startswith("'") and '"' not in value else text
    if isinstance(value, list):
        return "[" + ", ".join(map(literal, value)) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(map(literal, value)) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(key)}: {literal(item)}" for key, item in value.items()) + "}"
    return repr(value)


def _args(*values: object) -> str:
    return ", ".join(map(literal, values))


def _spread(fn: Callable[..., _R]) -> Callable[..., _R]:
    """``fn`` itself, for a template's lambda called at once on drawn values, ``_spread(lambda a, b:
    ...)(*r.sample(...))``: mypy types such a lambda's parameters from its call and gives each one the type
    of the whole unpacked sequence (``a: list[str]``), so it is passed through a callable of any arguments."""
    return fn


_WORDS = (
    "amber", "basin", "cedar", "dune", "ember", "fjord", "grove", "harbor", "island", "jasper", "kettle",
    "lagoon", "meadow", "nectar", "orchid", "pepper", "quarry", "ripple", "saddle", "timber", "velvet",
    "willow", "yonder", "zenith", "copper", "falcon", "lantern", "marble", "canyon", "thistle",
)  # fmt: skip
_ITEMS = (
    "bolt", "nut", "washer", "hinge", "gasket", "spring", "valve", "bracket", "flange", "rivet", "clamp",
    "pulley", "sprocket", "bearing", "latch", "spindle",
)  # fmt: skip
_PEOPLE = ("ana", "ben", "chloe", "dev", "emil", "fatima", "goran", "hana", "ivo", "jun", "kofi", "lena")
STEMS = (
    "ledger", "tally", "quill", "harbor", "ember", "cobalt", "maple", "pebble", "atlas", "lumen", "orbit",
    "sprout", "cinder", "fable", "nimbus", "tundra", "willow", "zephyr", "basalt", "copper", "fennel",
    "garnet", "hazel", "indigo", "juniper", "kestrel", "marble", "nectar", "opal", "prism", "quartz",
    "russet", "sable", "thistle", "umber", "vesper", "yarrow", "alder", "bramble", "lichen",
)  # fmt: skip
SUFFIXES = ("kit", "lib", "tools", "box", "ops", "util", "works", "craft", "py", "core")


def _ints(rng: random.Random, count: int, low: int, high: int) -> list[int]:
    return [rng.randint(low, high) for _ in range(count)]


def _luhn_digit(body: str) -> str:
    """The check digit that makes ``body`` + digit pass the Luhn checksum (for valid test inputs)."""
    total = 0
    for index, ch in enumerate(reversed(body)):
        digit = int(ch) * (2 if index % 2 == 0 else 1)
        total += digit - 9 if digit > 9 else digit
    return str((10 - total % 10) % 10)


# text -------------------------------------------------------------------------------------------------------

_SLUG = FunctionTemplate(
    names=("slugify", "make_slug", "to_slug"),
    choices={"p": ("title", "text", "heading"), "sep": ("-", "_")},
    source='''
    def $name($p: str, sep: str = "$sep") -> str:
        """Turn ``$p`` into a URL slug: its lower-case words of letters and digits joined by ``sep``.

        Characters other than letters and digits are dropped; a word left empty is skipped.
        """
        words = []
        for word in $p.lower().split():
            kept = "".join(ch for ch in word if ch.isalnum())
            if kept:
                words.append(kept)
        return sep.join(words)
    ''',
    cases=lambda r: _spread(lambda a, b, c: [
        _args(f"{a.title()} {b} {c}"),
        _args(f"  {a.upper()}, {b}! & {c}? "),
        _args(f"{a} -- {b}", "."),
    ])(*r.sample(_WORDS, 3)),
)  # fmt: skip

_TRUNCATE = FunctionTemplate(
    names=("truncate", "shorten", "clip_text"),
    choices={"w": ("width", "limit", "max_len"), "marker": ("...", "…")},
    source='''
    def $name(text: str, $w: int, marker: str = "$marker") -> str:
        """Shorten ``text`` to at most ``$w`` characters, ending with ``marker`` when something was cut."""
        if len(text) <= $w:
            return text
        keep = $w - len(marker)
        return text[:keep] + marker
    ''',
    cases=lambda r: _spread(lambda a, b, c, w: [
        _args(a, len(a) + r.randint(1, 4)),
        _args(f"{a} {b} {c}", len(f"{a} {b} {c}")),
        _args(f"{a} {b} {c}", w),
        _args(f"{c} {b} {a}", w + 2, "~"),
    ])(*r.sample(_WORDS, 3), r.randint(8, 12)),
)  # fmt: skip

_INITIALS = FunctionTemplate(
    names=("initials", "acronym", "abbreviate"),
    choices={"k": (2, 3)},
    source='''
    def $name(phrase: str, min_length: int = $k) -> str:
        """The upper-case first letters of the words of ``phrase`` at least ``min_length`` letters long."""
        letters = []
        for word in phrase.split():
            if len(word) >= min_length:
                letters.append(word[0].upper())
        return "".join(letters)
    ''',
    cases=lambda r: _spread(lambda a, b, c, d: [
        _args(f"{a} of the {b} {c}"),
        _args(f"{d} an {a} by {b}"),
        _args(f"{c} and {d} in {a}", 4),
    ])(*r.sample(_WORDS, 4)),
)  # fmt: skip

_VOWELS = FunctionTemplate(
    names=("count_vowels", "vowel_count", "vowels_in"),
    source='''
    def $name(text: str) -> int:
        """How many vowels (a, e, i, o, u, in either case) ``text`` holds."""
        count = 0
        for ch in text.lower():
            if ch in "aeiou":
                count += 1
        return count
    ''',
    cases=lambda r: _spread(lambda a, b: [_args(a), _args(f"{a.upper()} {b}!"), _args("xyz"), _args("")])(
        *r.sample(_WORDS, 2)
    ),
)

_PALINDROME = FunctionTemplate(
    names=("is_palindrome", "reads_both_ways", "palindromic"),
    source='''
    def $name(text: str) -> bool:
        """Whether ``text`` reads the same both ways, ignoring case and anything but letters and digits."""
        chars = [ch.lower() for ch in text if ch.isalnum()]
        for i in range(len(chars) // 2):
            if chars[i] != chars[len(chars) - 1 - i]:
                return False
        return True
    ''',
    cases=lambda r: _spread(lambda a, b: [
        _args(f"{a.title()}, {a[::-1]}!"),
        _args(a + a[-2::-1]),
        _args(f"{a} {b}"),
        _args(a[:-1] + "xy" + a[::-1][1:]),
    ])(*r.sample(_WORDS, 2)),
)  # fmt: skip

_WRAP = FunctionTemplate(
    names=("wrap_words", "wrap_lines", "fill_lines"),
    choices={"w": ("width", "line_width", "columns")},
    source='''
    def $name(text: str, $w: int) -> list[str]:
        """Split ``text`` into lines of whole words, each at most ``$w`` characters long.

        A word longer than ``$w`` gets a line of its own.
        """
        lines: list[str] = []
        current = ""
        for word in text.split():
            if not current:
                current = word
            elif len(current) + 1 + len(word) <= $w:
                current = current + " " + word
            else:
                lines.append(current)
                current = word
        if current:
            lines.append(current)
        return lines
    ''',
    cases=lambda r: [
        _args(" ".join(r.sample(_WORDS, 6)), r.randint(12, 16)),
        _args(" ".join(r.sample(_WORDS, 4)), r.randint(6, 9)),
        _args("", 10),
    ],
)

_TITLE = FunctionTemplate(
    names=("title_case", "headline", "to_title"),
    source='''
    def $name(text: str) -> str:
        """Capitalize each word of ``text`` except short joining words (a, an, the, of, and, or, in, to),
        which stay lower case unless they come first."""
        small = {"a", "an", "the", "of", "and", "or", "in", "to"}
        result = []
        for index, word in enumerate(text.lower().split()):
            if index > 0 and word in small:
                result.append(word)
            else:
                result.append(word.capitalize())
        return " ".join(result)
    ''',
    cases=lambda r: _spread(lambda a, b, c: [
        _args(f"the {a} of {b} and the {c}"),
        _args(f"{a.upper()} IN {b.upper()}"),
        _args(f"a {c}"),
    ])(*r.sample(_WORDS, 3)),
)  # fmt: skip

# statistics -------------------------------------------------------------------------------------------------

_MEAN = FunctionTemplate(
    names=("mean", "average", "arithmetic_mean"),
    choices={"d": (1, 2)},
    source='''
    def $name(values: list[int], digits: int = $d) -> float:
        """The arithmetic mean of ``values`` rounded to ``digits`` decimal places; 0.0 for an empty list."""
        if not values:
            return 0.0
        return round(sum(values) / len(values), digits)
    ''',
    cases=lambda r: [
        _args(_ints(r, 5, 1, 50)),
        _args(_ints(r, 3, -9, 9)),
        _args([]),
        _args([r.randint(2, 9)]),
    ],
)

_MEDIAN = FunctionTemplate(
    names=("median", "middle_value", "midpoint_of"),
    source='''
    def $name(values: list[int]) -> float:
        """The middle of ``values`` once sorted (the mean of the two middle ones for an even count)."""
        ordered = sorted(values)
        middle = len(ordered) // 2
        if len(ordered) % 2 == 1:
            return ordered[middle]
        return (ordered[middle - 1] + ordered[middle]) / 2
    ''',
    cases=lambda r: [
        _args(r.sample(range(1, 40), 5)),
        _args(r.sample(range(1, 40), 4)),
        _args(r.sample(range(-20, 20), 6)),
        _args([r.randint(1, 9)]),
    ],
)

_WINDOWS = FunctionTemplate(
    names=("window_sums", "rolling_sums", "moving_totals"),
    choices={"k": (2, 3)},
    source='''
    def $name(values: list[int], size: int = $k) -> list[int]:
        """The sums of every run of ``size`` consecutive values, in order (none if ``size`` > len(values))."""
        sums = []
        for start in range(len(values) - size + 1):
            sums.append(sum(values[start : start + size]))
        return sums
    ''',
    cases=lambda r: [_args(_ints(r, 6, 0, 20)), _args(_ints(r, 5, -5, 5), 4), _args([1, 2], 3)],
)

_SPREAD = FunctionTemplate(
    names=("spread", "value_range", "span_of"),
    source='''
    def $name(values: list[int]) -> int:
        """The largest value minus the smallest; 0 for fewer than two values."""
        if len(values) < 2:
            return 0
        return max(values) - min(values)
    ''',
    cases=lambda r: [_args(_ints(r, 5, 0, 60)), _args(_ints(r, 4, -30, 30)), _args([r.randint(1, 9)])],
)

_ABOVE = FunctionTemplate(
    names=("count_above", "how_many_above", "above_threshold"),
    choices={"t": (0, 10, 50)},
    source='''
    def $name(values: list[int], threshold: int = $t) -> int:
        """How many of ``values`` are strictly greater than ``threshold``."""
        total = 0
        for value in values:
            if value > threshold:
                total += 1
        return total
    ''',
    cases=lambda r: [
        _args([-1, 0, 10, 11, 50, 51, 70]),
        _args(_ints(r, 6, -20, 80)),
        _args([5, 6, 7, 8], 6),
    ],
)

_MODE = FunctionTemplate(
    names=("mode", "most_common", "commonest"),
    source='''
    def $name(values: list[int]) -> int | None:
        """The most frequent value (the smallest of them on a tie); None for an empty list."""
        counts: dict[int, int] = {}
        for value in values:
            counts[value] = counts.get(value, 0) + 1
        best = None
        for value in sorted(counts):
            if best is None or counts[value] > counts[best]:
                best = value
        return best
    ''',
    cases=lambda r: _spread(lambda a, b, c: [
        _args([a, b, b, c, a, b]),
        _args([c, a, c, a]),
        _args([]),
    ])(*r.sample(range(1, 30), 3)),
)  # fmt: skip

_RUNNING = FunctionTemplate(
    names=("running_totals", "cumulative", "prefix_sums"),
    source='''
    def $name(values: list[int]) -> list[int]:
        """Running totals: element i of the result is the sum of ``values[0]`` to ``values[i]``."""
        totals = []
        running = 0
        for value in values:
            running += value
            totals.append(running)
        return totals
    ''',
    cases=lambda r: [_args(_ints(r, 5, -10, 20)), _args([r.randint(1, 9)]), _args([])],
)

_STATS_CLASS = ClassTemplate(
    names=("Tally", "RunningStats", "Accumulator"),
    source='''
    class $name:
        """A running count, total, minimum and maximum of the values added, without storing them."""

        def __init__(self) -> None:
            self.count = 0
            self.total = 0
            self.low: int | None = None
            self.high: int | None = None

        def add(self, value: int) -> None:
            """Record one value."""
            self.count += 1
            self.total += value
            if self.low is None or value < self.low:
                self.low = value
            if self.high is None or value > self.high:
                self.high = value

        def mean(self) -> float:
            """The mean of the values so far (0.0 before the first)."""
            if self.count == 0:
                return 0.0
            return self.total / self.count

        def span(self) -> int:
            """The largest value minus the smallest (0 before the first)."""
            if self.low is None or self.high is None:
                return 0
            return self.high - self.low
    ''',
    scenarios=lambda r, cls: (lambda first, second: [
        (["stats = " + cls + "()"] + [f"stats.add({v})" for v in first], "stats.mean()"),
        (["stats = " + cls + "()"] + [f"stats.add({v})" for v in second], "stats.span()"),
        (["stats = " + cls + "()"], "(stats.mean(), stats.span())"),
    ])(_ints(r, 4, 1, 40), _ints(r, 5, -20, 20)),
)  # fmt: skip

# money ------------------------------------------------------------------------------------------------------

_DISCOUNT = FunctionTemplate(
    names=("apply_discount", "discounted_price", "price_after_discount"),
    choices={"p": ("price", "amount", "cents")},
    source='''
    def $name($p: int, percent: int) -> int:
        """``$p`` (in cents) reduced by ``percent`` per cent; the discount is rounded down to a whole cent.

        A percentage of 0 or less leaves the price unchanged and one of 100 or more makes it free.
        """
        if percent <= 0:
            return $p
        if percent >= 100:
            return 0
        return $p - $p * percent // 100
    ''',
    cases=lambda r: [
        _args(r.randint(10, 99) * 100 - 1, r.choice((15, 25, 35))),
        _args(r.randint(2, 9) * 100, r.choice((5, 10, 20))),
        _args(r.randint(100, 999), 0),
        _args(r.randint(100, 999), 100),
    ],
)

_TAX = FunctionTemplate(
    names=("add_tax", "with_tax", "gross_amount"),
    choices={"r": (5, 8, 20)},
    source='''
    def $name(amount: int, rate: int = $r) -> int:
        """``amount`` in cents plus ``rate`` per cent of tax, rounded to the nearest cent (halves up)."""
        tax = (amount * rate + 50) // 100
        return amount + tax
    ''',
    cases=lambda r: [_args(r.randint(100, 9999)), _args(150, 3), _args(r.randint(100, 999), 12)],
)

_SPLIT = FunctionTemplate(
    names=("split_bill", "share_cost", "even_shares"),
    choices={"n": ("people", "parts", "ways")},
    source='''
    def $name(total: int, $n: int) -> list[int]:
        """Split ``total`` cents into ``$n`` shares as even as possible; the first shares take the leftover
        cents, one each."""
        share = total // $n
        left = total % $n
        shares = []
        for index in range($n):
            if index < left:
                shares.append(share + 1)
            else:
                shares.append(share)
        return shares
    ''',
    cases=lambda r: [_args(r.randint(10, 99) * 3 + 2, 3), _args(r.randint(2, 9) * 4, 4), _args(7, 5)],
)

_BULK = FunctionTemplate(
    names=("bulk_price", "order_price", "price_for_quantity"),
    choices={"b": (10, 12, 20), "o": (5, 10, 15)},
    source='''
    def $name(unit_price: int, quantity: int, bulk_from: int = $b, bulk_off: int = $o) -> int:
        """The price in cents of ``quantity`` units; from ``bulk_from`` units on, each unit costs ``bulk_off``
        cents less."""
        if quantity >= bulk_from:
            unit_price -= bulk_off
        return unit_price * quantity
    ''',
    cases=lambda r: [
        _args(r.randint(50, 99), r.randint(2, 9)),
        _args(r.randint(50, 99), 20),
        _args(r.randint(50, 99), 12),
        _args(r.randint(50, 99), 4, 3, 7),
    ],
)

_FORMAT_MONEY = FunctionTemplate(
    names=("format_cents", "as_money", "money_text"),
    choices={"sym": ("$", "€", "£")},
    source='''
    def $name(cents: int, symbol: str = "$sym") -> str:
        """``cents`` written as money with two decimals: -1205 is "-${sym}12.05"."""
        sign = "-" if cents < 0 else ""
        cents = abs(cents)
        return f"{sign}{symbol}{cents // 100}.{cents % 100:02d}"
    ''',
    cases=lambda r: [
        _args(r.randint(100, 99999)),
        _args(-r.randint(100, 9999)),
        _args(5),
        _args(1999, "CHF "),
    ],
)

_CART = FunctionTemplate(
    names=("cart_total", "order_total", "basket_total"),
    source='''
    def $name(lines: list[tuple[int, int]]) -> int:
        """The total in cents of an order given as (unit price in cents, quantity) lines."""
        total = 0
        for price, quantity in lines:
            total += price * quantity
        return total
    ''',
    cases=lambda r: [
        _args([(r.randint(100, 999), r.randint(1, 4)) for _ in range(3)]),
        _args([(r.randint(100, 999), 1)]),
        _args([]),
    ],
)

_CHANGE = FunctionTemplate(
    names=("make_change", "coins_for", "change_coins"),
    source='''
    def $name(amount: int, coins: tuple[int, ...] = (200, 100, 50, 20, 10, 5, 2, 1)) -> list[int]:
        """Greedy change for ``amount`` cents: how many of each coin of ``coins``, largest first."""
        counts = []
        for coin in coins:
            counts.append(amount // coin)
            amount = amount % coin
        return counts
    ''',
    cases=lambda r: [_args(r.randint(100, 999)), _args(r.randint(1, 99), (25, 10, 5, 1)), _args(0)],
)

_TAB_CLASS = ClassTemplate(
    names=("Tab", "Account", "Ledger"),
    choices={"limit": (5000, 10000)},
    source='''
    class $name:
        """An open tab in cents: charges up to a limit, payments, and what is still owed."""

        def __init__(self, limit: int = $limit) -> None:
            self.limit = limit
            self.charges: list[int] = []
            self.paid = 0

        def charge(self, amount: int) -> bool:
            """Add a charge unless it would take the balance over the limit; whether it was added."""
            if self.balance() + amount > self.limit:
                return False
            self.charges.append(amount)
            return True

        def pay(self, amount: int) -> int:
            """Pay up to the balance; returns what was actually taken."""
            taken = min(amount, self.balance())
            self.paid += taken
            return taken

        def balance(self) -> int:
            """What is still owed."""
            return sum(self.charges) - self.paid
    ''',
    scenarios=lambda r, cls: (lambda a, b: [
        ([f"tab = {cls}()", f"tab.charge({a})", f"tab.charge({b})"], "tab.balance()"),
        ([f"tab = {cls}(1000)", "tab.charge(600)"], "(tab.charge(400), tab.charge(1), tab.balance())"),
        ([f"tab = {cls}()", f"tab.charge({a})"], f"(tab.pay({a + 500}), tab.balance())"),
        ([f"tab = {cls}()", f"tab.charge({a})", f"tab.pay({a // 2})"], "tab.balance()"),
    ])(r.randint(100, 999), r.randint(100, 999)),
)  # fmt: skip

# inventory --------------------------------------------------------------------------------------------------


def _stock(rng: random.Random, count: int, low: int = 0, high: int = 20) -> dict[str, int]:
    return {item: rng.randint(low, high) for item in rng.sample(_ITEMS, count)}


_LOW_STOCK = FunctionTemplate(
    names=("low_stock", "needs_restock", "running_low"),
    choices={"m": (3, 5, 10)},
    source='''
    def $name(stock: dict[str, int], minimum: int = $m) -> list[str]:
        """The names of the items with fewer than ``minimum`` units, sorted."""
        low = []
        for item, count in stock.items():
            if count < minimum:
                low.append(item)
        return sorted(low)
    ''',
    cases=lambda r: (lambda items: [
        _args(dict(zip(items, (0, 2, 3, 5, 9, 10, 11)))),
        _args(_stock(r, 4)),
        _args(_stock(r, 4), 8),
    ])(r.sample(_ITEMS, 7)),
)  # fmt: skip

_MERGE_STOCK = FunctionTemplate(
    names=("merge_stock", "combine_counts", "pool_stock"),
    source='''
    def $name(first: dict[str, int], second: dict[str, int]) -> dict[str, int]:
        """The two stocks combined: the counts of an item held in both are added."""
        merged = dict(first)
        for item, count in second.items():
            merged[item] = merged.get(item, 0) + count
        return merged
    ''',
    cases=lambda r: _spread(lambda a, b, c: [
        _args({a: 3, b: 1}, {b: 4, c: 2}),
        _args({}, {c: r.randint(1, 9)}),
        _args({a: r.randint(1, 9)}, {}),
    ])(*r.sample(_ITEMS, 3)),
)  # fmt: skip

_REORDER = FunctionTemplate(
    names=("reorder_quantity", "units_to_order", "order_size"),
    choices={"pack": (6, 10, 12)},
    source='''
    def $name(on_hand: int, target: int, pack: int = $pack) -> int:
        """How many units to order to get from ``on_hand`` to at least ``target``, in whole packs of ``pack``
        units (0 when nothing is needed)."""
        missing = target - on_hand
        if missing <= 0:
            return 0
        packs = (missing + pack - 1) // pack
        return packs * pack
    ''',
    cases=lambda r: [_args(r.randint(0, 5), r.randint(20, 40)), _args(30, 30), _args(2, 14, 4), _args(9, 5)],
)

_MOST_STOCKED = FunctionTemplate(
    names=("most_stocked", "largest_item", "top_item"),
    source='''
    def $name(stock: dict[str, int]) -> str | None:
        """The item with the most units (the alphabetically first on a tie); None for an empty stock."""
        best = None
        for item in sorted(stock):
            if best is None or stock[item] > stock[best]:
                best = item
        return best
    ''',
    cases=lambda r: _spread(lambda a, b, c: [
        _args({a: 4, b: 9, c: 2}),
        _args({c: 5, a: 5, b: 1}),
        _args({}),
    ])(*sorted(r.sample(_ITEMS, 3))),
)  # fmt: skip

_SHORTFALL = FunctionTemplate(
    names=("shortfall", "cannot_fill", "missing_items"),
    source='''
    def $name(stock: dict[str, int], order: dict[str, int]) -> list[str]:
        """The items of ``order`` that ``stock`` cannot cover in full, in the order's order."""
        short = []
        for item, wanted in order.items():
            if stock.get(item, 0) < wanted:
                short.append(item)
        return short
    ''',
    cases=lambda r: _spread(lambda a, b, c, d: [
        _args({a: 5, b: 2, c: 7}, {a: 5, b: 3, d: 1}),
        _args({a: 1}, {a: 1}),
        _args({}, {c: 2, b: 1}),
    ])(*r.sample(_ITEMS, 4)),
)  # fmt: skip

_STOCK_CLASS = ClassTemplate(
    names=("Stockroom", "Shelf", "Depot"),
    source='''
    class $name:
        """Counts of the items on hand; taking more than is there is refused."""

        def __init__(self) -> None:
            self.counts: dict[str, int] = {}

        def add(self, item: str, units: int = 1) -> None:
            """Put ``units`` of ``item`` on the shelves."""
            self.counts[item] = self.counts.get(item, 0) + units

        def take(self, item: str, units: int = 1) -> bool:
            """Take ``units`` of ``item`` if that many are on hand; whether they were taken."""
            have = self.counts.get(item, 0)
            if have < units:
                return False
            self.counts[item] = have - units
            return True

        def count(self, item: str) -> int:
            """Units of ``item`` on hand."""
            return self.counts.get(item, 0)

        def empty(self) -> list[str]:
            """The items that ran out, sorted."""
            return sorted(item for item, units in self.counts.items() if units == 0)
    ''',
    scenarios=lambda r, cls: _spread(lambda a, b, n: [
        ([f"room = {cls}()", f"room.add({a}, {n})", f"room.add({a})"], f"room.count({a})"),
        ([f"room = {cls}()", f"room.add({a}, {n})"], f"(room.take({a}, {n + 1}), room.count({a}))"),
        ([f"room = {cls}()", f"room.add({a}, 2)", f"room.add({b}, {n})", f"room.take({a}, 2)"],
         "room.empty()"),
        ([f"room = {cls}()", f"room.add({b}, {n})", f"room.take({b})"], f"room.count({b})"),
    ])(*map(literal, r.sample(_ITEMS, 2)), r.randint(3, 9)),
)  # fmt: skip

# intervals and dates ----------------------------------------------------------------------------------------

_OVERLAP = FunctionTemplate(
    names=("overlap", "overlap_length", "shared_time"),
    source='''
    def $name(start_a: int, end_a: int, start_b: int, end_b: int) -> int:
        """How long the half-open spans [start_a, end_a) and [start_b, end_b) overlap (0 if they do not)."""
        start = max(start_a, start_b)
        end = min(end_a, end_b)
        if end <= start:
            return 0
        return end - start
    ''',
    cases=lambda r: (lambda a: [
        _args(a, a + 60, a + 30, a + 90),
        _args(a, a + 30, a + 30, a + 45),
        _args(a, a + 120, a + 10, a + 20),
        _args(a + 50, a + 80, a, a + 20),
    ])(r.randint(0, 500)),
)  # fmt: skip

_MERGE_SPANS = FunctionTemplate(
    names=("merge_spans", "union_of", "merge_intervals"),
    source='''
    def $name(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The union of half-open ``spans`` as sorted, non-overlapping spans; touching spans are joined."""
        merged: list[tuple[int, int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                last_start, last_end = merged[-1]
                merged[-1] = (last_start, max(last_end, end))
            else:
                merged.append((start, end))
        return merged
    ''',
    cases=lambda r: (lambda a: [
        _args([(a + 40, a + 50), (a, a + 10), (a + 5, a + 20)]),
        _args([(a, a + 10), (a + 10, a + 15), (a + 30, a + 31)]),
        _args([(a, a + 100), (a + 20, a + 30)]),
        _args([]),
    ])(r.randint(0, 300)),
)  # fmt: skip

_CLOCK = FunctionTemplate(
    names=("clock_time", "as_clock", "minutes_to_clock"),
    source='''
    def $name(minutes: int) -> str:
        """``minutes`` after midnight as a 24-hour "HH:MM" time, wrapping around past midnight."""
        minutes = minutes % (24 * 60)
        return f"{minutes // 60:02d}:{minutes % 60:02d}"
    ''',
    cases=lambda r: [
        _args(r.randint(60, 1439)),
        _args(r.randint(0, 59)),
        _args(1440 + r.randint(1, 99)),
        _args(-30),
    ],
)

_LEAP = FunctionTemplate(
    names=("is_leap_year", "leap_year", "has_leap_day"),
    source='''
    def $name(year: int) -> bool:
        """Whether ``year`` is a leap year of the Gregorian calendar."""
        if year % 400 == 0:
            return True
        if year % 100 == 0:
            return False
        return year % 4 == 0
    ''',
    cases=lambda r: [
        _args(r.choice((1600, 2000, 2400))),
        _args(r.choice((1700, 1900, 2100))),
        _args(4 * r.randint(480, 520)),
        _args(4 * r.randint(480, 520) + r.randint(1, 3)),
    ],
)

_DAY_OF_YEAR = FunctionTemplate(
    names=("day_of_year", "ordinal_day", "day_number"),
    source='''
    def $name(year: int, month: int, day: int) -> int:
        """The day's number within its year, 1 for January 1st."""
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        lengths = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        total = day
        for index in range(month - 1):
            total += lengths[index]
        return total
    ''',
    cases=lambda r: [
        _args(2024, 3, 1),
        _args(r.choice((2021, 2022, 2023)), 3, 1),
        _args(r.randint(1990, 2030), 1, r.randint(1, 31)),
        _args(1900, 12, 31),
    ],
)

# geometry ---------------------------------------------------------------------------------------------------


def _point(rng: random.Random, low: int = -9, high: int = 9) -> tuple[int, int]:
    return (rng.randint(low, high), rng.randint(low, high))


_MANHATTAN = FunctionTemplate(
    names=("manhattan", "taxicab_distance", "grid_distance"),
    source='''
    def $name(a: tuple[int, int], b: tuple[int, int]) -> int:
        """The taxicab distance between the points ``a`` and ``b``: along the axes, no diagonals."""
        return abs(a[0] - b[0]) + abs(a[1] - b[1])
    ''',
    cases=lambda r: [
        _args(_point(r), _point(r)),
        _args((0, 0), (3, -4)),
        _args(_point(r, 1, 5), _point(r, 6, 9)),
    ],
)

_BOUNDS = FunctionTemplate(
    names=("bounding_box", "bounds", "extent"),
    source='''
    def $name(points: list[tuple[int, int]]) -> tuple[int, int, int, int] | None:
        """The smallest box (min x, min y, max x, max y) holding every point; None for no points."""
        if not points:
            return None
        xs = [x for x, _ in points]
        ys = [y for _, y in points]
        return (min(xs), min(ys), max(xs), max(ys))
    ''',
    cases=lambda r: [_args([_point(r) for _ in range(4)]), _args([_point(r)]), _args([])],
)

_SHOELACE = FunctionTemplate(
    names=("double_area", "twice_area", "shoelace"),
    source='''
    def $name(vertices: list[tuple[int, int]]) -> int:
        """Twice the area of the polygon with these vertices in order (the shoelace formula), >= 0."""
        total = 0
        for index in range(len(vertices)):
            x1, y1 = vertices[index]
            x2, y2 = vertices[(index + 1) % len(vertices)]
            total += x1 * y2 - x2 * y1
        return abs(total)
    ''',
    cases=lambda r: (lambda w, h: [
        _args([(0, 0), (w, 0), (w, h), (0, h)]),
        _args([(0, 0), (0, h), (w, 0)]),
        _args([(1, 1), (w + 1, 1), (w + 3, h + 1), (3, h + 1)]),
    ])(r.randint(2, 9), r.randint(2, 9)),
)  # fmt: skip

_WITHIN = FunctionTemplate(
    names=("count_within", "points_in_radius", "near_count"),
    source='''
    def $name(points: list[tuple[int, int]], center: tuple[int, int], radius: int) -> int:
        """How many of ``points`` lie within ``radius`` of ``center`` (a point on the circle counts)."""
        count = 0
        for x, y in points:
            dx = x - center[0]
            dy = y - center[1]
            if dx * dx + dy * dy <= radius * radius:
                count += 1
        return count
    ''',
    cases=lambda r: [
        _args([(3, 4), (0, 5), (4, 4), (1, 1), (6, 0)], (0, 0), 5),
        _args([_point(r) for _ in range(6)], _point(r, -2, 2), r.randint(3, 7)),
        _args([], (0, 0), 1),
    ],
)

_CONTAINS = FunctionTemplate(
    names=("in_rect", "contains_point", "inside"),
    source='''
    def $name(rect: tuple[int, int, int, int], point: tuple[int, int]) -> bool:
        """Whether ``point`` lies in ``rect`` = (left, top, right, bottom), edges included."""
        left, top, right, bottom = rect
        x, y = point
        return left <= x <= right and top <= y <= bottom
    ''',
    cases=lambda r: _spread(lambda x, y: [
        _args((x, y, x + 5, y + 5), (x + 2, y + 3)),
        _args((x, y, x + 5, y + 5), (x + 5, y)),
        _args((x, y, x + 5, y + 5), (x + 6, y + 1)),
        _args((x, y, x + 5, y + 5), (x + 1, y - 1)),
    ])(*_point(r)),
)  # fmt: skip

_CENTROID = FunctionTemplate(
    names=("centroid", "mean_point", "center_of"),
    source='''
    def $name(points: list[tuple[int, int]]) -> tuple[int, int]:
        """The mean of ``points`` (at least one), each coordinate rounded down."""
        sum_x = 0
        sum_y = 0
        for x, y in points:
            sum_x += x
            sum_y += y
        return (sum_x // len(points), sum_y // len(points))
    ''',
    cases=lambda r: [
        _args([_point(r, 0, 20) for _ in range(3)]),
        _args([_point(r)]),
        _args([(0, 0), (5, -3)]),
    ],
)

_RECT_CLASS = ClassTemplate(
    names=("Rect", "Box", "Frame"),
    source='''
    class $name:
        """An axis-aligned rectangle given by its top-left corner, its width and its height."""

        def __init__(self, left: int, top: int, width: int, height: int) -> None:
            self.left = left
            self.top = top
            self.width = width
            self.height = height

        def area(self) -> int:
            """The area in square units."""
            return self.width * self.height

        def perimeter(self) -> int:
            """The length of the border."""
            return 2 * (self.width + self.height)

        def overlap(self, other: $name) -> int:
            """The area this rectangle shares with ``other`` (0 if they only touch or are apart)."""
            width = min(self.left + self.width, other.left + other.width) - max(self.left, other.left)
            height = min(self.top + self.height, other.top + other.height) - max(self.top, other.top)
            if width <= 0 or height <= 0:
                return 0
            return width * height
    ''',
    scenarios=lambda r, cls: (lambda w, h: [
        ([f"shape = {cls}(0, 0, {w}, {h})"], "(shape.area(), shape.perimeter())"),
        ([f"first = {cls}(0, 0, {w}, {h})", f"second = {cls}(1, 2, {w}, {h})"], "first.overlap(second)"),
        ([f"first = {cls}(0, 0, {w}, {h})", f"second = {cls}({w}, 0, 3, 3)"], "first.overlap(second)"),
    ])(r.randint(3, 9), r.randint(3, 9)),
)  # fmt: skip

# grids ------------------------------------------------------------------------------------------------------


def _grid(rng: random.Random, rows: int, cols: int, high: int = 9) -> list[list[int]]:
    return [[rng.randint(0, high) for _ in range(cols)] for _ in range(rows)]


_TRANSPOSE = FunctionTemplate(
    names=("transpose", "flip_diagonal", "columns_of"),
    source='''
    def $name(rows: list[list[int]]) -> list[list[int]]:
        """The grid flipped over its diagonal: row i of the result is column i of ``rows``."""
        if not rows:
            return []
        result = []
        for col in range(len(rows[0])):
            result.append([row[col] for row in rows])
        return result
    ''',
    cases=lambda r: [_args(_grid(r, 2, 3)), _args(_grid(r, 3, 1)), _args([])],
)

_COLUMN_SUMS = FunctionTemplate(
    names=("column_sums", "col_totals", "sum_columns"),
    source='''
    def $name(rows: list[list[int]]) -> list[int]:
        """The sum of each column of a rectangular grid."""
        if not rows:
            return []
        sums = [0] * len(rows[0])
        for row in rows:
            for index, value in enumerate(row):
                sums[index] += value
        return sums
    ''',
    cases=lambda r: [_args(_grid(r, 3, 3)), _args(_grid(r, 1, 4)), _args([])],
)

_NEIGHBOURS = FunctionTemplate(
    names=("live_neighbours", "count_neighbours", "neighbour_count"),
    source='''
    def $name(grid: list[list[int]], row: int, col: int) -> int:
        """How many of the up to eight cells around (row, col) are non-zero."""
        count = 0
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                if dr == 0 and dc == 0:
                    continue
                r = row + dr
                c = col + dc
                if 0 <= r < len(grid) and 0 <= c < len(grid[r]) and grid[r][c]:
                    count += 1
        return count
    ''',
    cases=lambda r: (lambda g: [_args(g, 1, 1), _args(g, 0, 0), _args(g, 3, 2)])(_grid(r, 4, 3, 1)),
)

_ROTATE = FunctionTemplate(
    names=("rotate_clockwise", "turn_right", "rotate_grid"),
    source='''
    def $name(grid: list[list[int]]) -> list[list[int]]:
        """The grid turned a quarter turn clockwise."""
        height = len(grid)
        if height == 0:
            return []
        rotated = []
        for col in range(len(grid[0])):
            rotated.append([grid[height - 1 - row][col] for row in range(height)])
        return rotated
    ''',
    cases=lambda r: [_args(_grid(r, 2, 3)), _args(_grid(r, 3, 3)), _args([])],
)

_DIAGONAL = FunctionTemplate(
    names=("diagonal_sum", "trace", "sum_diagonal"),
    source='''
    def $name(grid: list[list[int]]) -> int:
        """The sum of the main diagonal (top left to bottom right) of a square grid."""
        total = 0
        for index in range(len(grid)):
            total += grid[index][index]
        return total
    ''',
    cases=lambda r: [_args(_grid(r, 3, 3)), _args(_grid(r, 2, 2)), _args([[r.randint(1, 9)]])],
)

_COUNT_CELLS = FunctionTemplate(
    names=("count_cells", "cells_equal", "occurrences"),
    choices={"v": (0, 1)},
    source='''
    def $name(grid: list[list[int]], value: int = $v) -> int:
        """How many cells of ``grid`` hold ``value``."""
        count = 0
        for row in grid:
            for cell in row:
                if cell == value:
                    count += 1
        return count
    ''',
    cases=lambda r: [_args(_grid(r, 3, 4, 2)), _args(_grid(r, 2, 3, 3), 3), _args([])],
)

# scheduling -------------------------------------------------------------------------------------------------

_ROUND_ROBIN = FunctionTemplate(
    names=("round_robin", "deal_tasks", "assign_in_turn"),
    source='''
    def $name(tasks: list[str], workers: list[str]) -> dict[str, list[str]]:
        """Deal ``tasks`` out to ``workers`` in turn, the first task to the first worker."""
        plan: dict[str, list[str]] = {worker: [] for worker in workers}
        for index, task in enumerate(tasks):
            plan[workers[index % len(workers)]].append(task)
        return plan
    ''',
    cases=lambda r: [
        _args(r.sample(_WORDS, 5), r.sample(_PEOPLE, 2)),
        _args(r.sample(_WORDS, 2), r.sample(_PEOPLE, 3)),
        _args([], r.sample(_PEOPLE, 1)),
    ],
)

_LATE = FunctionTemplate(
    names=("late_jobs", "count_late", "missed_deadlines"),
    source='''
    def $name(durations: list[int], deadlines: list[int], start: int = 0) -> int:
        """Run jobs back to back from ``start`` in the given order; how many finish after their deadline."""
        clock = start
        late = 0
        for duration, deadline in zip(durations, deadlines):
            clock += duration
            if clock > deadline:
                late += 1
        return late
    ''',
    cases=lambda r: [
        _args([3, 2, 4], [3, 4, 10]),
        _args(_ints(r, 4, 1, 9), _ints(r, 4, 5, 20)),
        _args([5, 5], [10, 12], 3),
    ],
)

_FREE_SLOT = FunctionTemplate(
    names=("first_free_slot", "earliest_opening", "find_slot"),
    choices={"ds": (480, 540), "de": (1020, 1080)},
    source='''
    def $name(
        busy: list[tuple[int, int]], length: int, day_start: int = $ds, day_end: int = $de
    ) -> int | None:
        """The earliest start (minutes after midnight) of ``length`` free minutes between ``day_start`` and
        ``day_end``, given the ``busy`` spans; None if the day has no such gap."""
        candidate = day_start
        for start, end in sorted(busy):
            if start - candidate >= length:
                return candidate
            candidate = max(candidate, end)
        if day_end - candidate >= length:
            return candidate
        return None
    ''',
    cases=lambda r: [
        _args([(600, 660), (540, 600)], 30),
        _args([(0, 700), (730, 800)], 30),
        _args([(0, 1000)], r.choice((60, 90))),
        _args([], 45),
    ],
)

_PRIORITY = FunctionTemplate(
    names=("by_priority", "priority_order", "rank_jobs"),
    source='''
    def $name(jobs: list[tuple[str, int]]) -> list[str]:
        """The names of ``jobs`` (name, priority) from the highest priority down; equal priorities by name."""
        ordered = sorted(jobs, key=lambda job: (-job[1], job[0]))
        return [name for name, _ in ordered]
    ''',
    cases=lambda r: _spread(lambda a, b, c, d: [
        _args([(a, 2), (b, 5), (c, 2), (d, 1)]),
        _args([(c, 1), (a, 1)]),
        _args([]),
    ])(*r.sample(_WORDS, 4)),
)  # fmt: skip

_PAID = FunctionTemplate(
    names=("paid_minutes", "billable_time", "worked_minutes"),
    choices={"after": (240, 360), "pause": (30, 45)},
    source='''
    def $name(shifts: list[tuple[int, int]], break_after: int = $after, break_length: int = $pause) -> int:
        """Paid minutes of ``shifts`` (start, end): a shift longer than ``break_after`` minutes loses an
        unpaid break of ``break_length``."""
        total = 0
        for start, end in shifts:
            length = end - start
            if length > break_after:
                length -= break_length
            total += length
        return total
    ''',
    cases=lambda r: [
        _args([(480, 1020)]),
        _args([(480, 720), (780, 900)]),
        _args([(0, 360), (400, 760)], 300, 20),
    ],
)

_AGENDA_CLASS = ClassTemplate(
    names=("Agenda", "Timeline", "Diary"),
    source='''
    class $name:
        """A day's bookings as half-open minute spans; a booking that clashes with another is refused."""

        def __init__(self) -> None:
            self.bookings: list[tuple[int, int]] = []

        def book(self, start: int, end: int) -> bool:
            """Add [start, end) if it is not empty and overlaps no booking; whether it was added."""
            if end <= start:
                return False
            for other_start, other_end in self.bookings:
                if start < other_end and other_start < end:
                    return False
            self.bookings.append((start, end))
            return True

        def busy(self) -> int:
            """Total booked minutes."""
            return sum(end - start for start, end in self.bookings)
    ''',
    scenarios=lambda r, cls: (lambda a: [
        ([f"day = {cls}()", f"day.book({a}, {a + 60})"], f"(day.book({a + 60}, {a + 90}), day.busy())"),
        ([f"day = {cls}()", f"day.book({a}, {a + 60})"], f"(day.book({a + 30}, {a + 45}), day.busy())"),
        ([f"day = {cls}()"], f"(day.book({a}, {a}), day.busy())"),
    ])(r.randint(480, 900)),
)  # fmt: skip

# parsing ----------------------------------------------------------------------------------------------------

_PAIRS = FunctionTemplate(
    names=("parse_pairs", "read_settings", "parse_options"),
    choices={"sep": (";", ",")},
    source='''
    def $name(text: str, sep: str = "$sep") -> dict[str, str]:
        """Parse "key=value" pairs separated by ``sep``, keys and values stripped; blank pairs are skipped
        and a pair without "=" gets an empty value."""
        pairs: dict[str, str] = {}
        for chunk in text.split(sep):
            if not chunk.strip():
                continue
            key, _, value = chunk.partition("=")
            pairs[key.strip()] = value.strip()
        return pairs
    ''',
    cases=lambda r: _spread(lambda a, b, c: [
        _args(f"{a}=1; {b} = two;; {c}", ";"),
        _args(f"{a}=x,{b}=y", ","),
        _args(f"{c}={a}={b}", "&"),
    ])(*r.sample(_WORDS, 3)),
)  # fmt: skip

_VERSIONS = FunctionTemplate(
    names=("compare_versions", "version_cmp", "versions_order"),
    source='''
    def $name(left: str, right: str) -> int:
        """-1, 0 or 1 as the dotted version ``left`` is older than, the same as or newer than ``right``.

        Missing parts count as 0, so "1.2" and "1.2.0" are the same version.
        """
        a = [int(part) for part in left.split(".")]
        b = [int(part) for part in right.split(".")]
        for index in range(max(len(a), len(b))):
            x = a[index] if index < len(a) else 0
            y = b[index] if index < len(b) else 0
            if x != y:
                return -1 if x < y else 1
        return 0
    ''',
    cases=lambda r: (lambda m: [
        _args(f"{m}.2", f"{m}.2.0"),
        _args(f"{m}.10", f"{m}.9"),
        _args(f"{m}.4.1", f"{m + 1}.0"),
        _args(f"{m}.1.0.1", f"{m}.1"),
    ])(r.randint(1, 9)),
)  # fmt: skip

_DURATION = FunctionTemplate(
    names=("parse_duration", "duration_minutes", "to_minutes"),
    source='''
    def $name(text: str) -> int:
        """The minutes in a duration such as "2h15m", "45m" or "1d2h" (d: days, h: hours, m: minutes).

        Digits not followed by a unit are ignored.
        """
        units = {"d": 1440, "h": 60, "m": 1}
        total = 0
        number = ""
        for ch in text.strip().lower():
            if ch.isdigit():
                number += ch
            elif ch in units and number:
                total += int(number) * units[ch]
                number = ""
        return total
    ''',
    cases=lambda r: [
        _args(f"{r.randint(1, 9)}h{r.randint(10, 59)}m"),
        _args(f"{r.randint(10, 59)}M"),
        _args(f"1d{r.randint(1, 9)}h"),
        _args("90"),
    ],
)

_NUMBERS = FunctionTemplate(
    names=("expand_ranges", "parse_ranges", "numbers_in"),
    source='''
    def $name(spec: str) -> list[int]:
        """The numbers named by a spec like "1-3,7,9-10" (ranges include both ends), in order."""
        numbers = []
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                low, high = part.split("-")
                numbers.extend(range(int(low), int(high) + 1))
            else:
                numbers.append(int(part))
        return numbers
    ''',
    cases=lambda r: (lambda a: [
        _args(f"{a}-{a + 2},{a + 5}"),
        _args(f" {a} , {a + 3}-{a + 4}, "),
        _args(f"{a}-{a}"),
    ])(r.randint(1, 20)),
)  # fmt: skip

_CSV = FunctionTemplate(
    names=("split_fields", "parse_csv_line", "csv_fields"),
    source='''
    def $name(line: str, delimiter: str = ",") -> list[str]:
        """The fields of one CSV line; double quotes (dropped) group a field that holds the delimiter."""
        fields = []
        current = ""
        quoted = False
        for ch in line:
            if ch == '"':
                quoted = not quoted
            elif ch == delimiter and not quoted:
                fields.append(current)
                current = ""
            else:
                current += ch
        fields.append(current)
        return fields
    ''',
    cases=lambda r: _spread(lambda a, b, c: [
        _args(f"{a},{b},{c}"),
        _args(f'{a},"{b},{c}",x'),
        _args(f"{a};;{b}", ";"),
    ])(*r.sample(_WORDS, 3)),
)  # fmt: skip

_INT_LIST = FunctionTemplate(
    names=("parse_ints", "read_numbers", "int_list"),
    source='''
    def $name(text: str) -> list[int]:
        """The whole numbers of a comma-separated list, skipping entries that are not whole numbers."""
        values = []
        for item in text.split(","):
            item = item.strip()
            if item.lstrip("-").isdigit():
                values.append(int(item))
        return values
    ''',
    cases=lambda r: _spread(lambda a, b: [
        _args(f"{a}, {b}, x, -{a}, 4.5"),
        _args(f"{b},,{a}"),
        _args(""),
    ])(*r.sample(range(1, 99), 2)),
)  # fmt: skip

# validation -------------------------------------------------------------------------------------------------

_USERNAME = FunctionTemplate(
    names=("is_valid_username", "valid_handle", "check_username"),
    choices={"low": (3, 4), "high": (12, 16)},
    source='''
    def $name(name: str, min_length: int = $low, max_length: int = $high) -> bool:
        """Whether ``name`` is a valid username: ``min_length`` to ``max_length`` letters, digits and
        underscores, starting with a letter."""
        if len(name) < min_length or len(name) > max_length:
            return False
        if not name[0].isalpha():
            return False
        for ch in name:
            if not (ch.isalnum() or ch == "_"):
                return False
        return True
    ''',
    cases=lambda r: _spread(lambda a, b: [
        _args(f"{a}_{r.randint(1, 99)}"),
        _args(a[:2]),
        _args(f"{r.randint(1, 9)}{a}"),
        _args(f"{a}-{b}"),
        _args(a * 4),
    ])(*r.sample(_WORDS, 2)),
)  # fmt: skip


def _luhn_cases(rng: random.Random) -> list[str]:
    body = "".join(str(rng.randint(0, 9)) for _ in range(15))
    good = body + _luhn_digit(body)
    bad = good[:-1] + str((int(good[-1]) + rng.randint(1, 9)) % 10)
    spaced = " ".join(good[i : i + 4] for i in range(0, 16, 4))
    return [_args(good), _args(bad), _args(spaced), _args("0")]


_LUHN = FunctionTemplate(
    names=("luhn_valid", "passes_luhn", "checksum_ok"),
    source='''
    def $name(number: str) -> bool:
        """Whether the digits of ``number`` (spaces ignored) pass the Luhn checksum used by card numbers."""
        digits = [int(ch) for ch in number if ch.isdigit()]
        if len(digits) < 2:
            return False
        total = 0
        for index, digit in enumerate(reversed(digits)):
            if index % 2 == 1:
                digit *= 2
                if digit > 9:
                    digit -= 9
            total += digit
        return total % 10 == 0
    ''',
    cases=_luhn_cases,
)

_HEX_COLOUR = FunctionTemplate(
    names=("is_hex_colour", "valid_colour", "is_color_code"),
    source='''
    def $name(text: str) -> bool:
        """Whether ``text`` is a colour such as "#1a2B3c": a hash and six hexadecimal digits."""
        if len(text) != 7 or text[0] != "#":
            return False
        for ch in text[1:]:
            if ch not in "0123456789abcdefABCDEF":
                return False
        return True
    ''',
    cases=lambda r: (lambda h: [
        _args("#" + h),
        _args("#" + h[:5]),
        _args(h + "#"),
        _args("#" + h[:5] + "g"),
    ])("".join(r.choice("0123456789abcdefABCDEF") for _ in range(6))),
)  # fmt: skip

_STRENGTH = FunctionTemplate(
    names=("password_score", "strength", "rate_password"),
    choices={"n": (8, 10, 12)},
    source='''
    def $name(password: str, min_length: int = $n) -> int:
        """A strength score from 0 to 4: a point each for being ``min_length`` long, having a digit, having an
        upper-case letter and having a symbol."""
        score = 0
        if len(password) >= min_length:
            score += 1
        if any(ch.isdigit() for ch in password):
            score += 1
        if any(ch.isupper() for ch in password):
            score += 1
        if any(not ch.isalnum() for ch in password):
            score += 1
        return score
    ''',
    cases=lambda r: _spread(lambda a, b: [
        _args(a),
        _args(f"{a.title()}{r.randint(10, 99)}!{b}"),
        _args(f"{a}{b}"[:12]),
        _args(f"{a.upper()}7", 4),
    ])(*r.sample(_WORDS, 2)),
)  # fmt: skip

_MISSING = FunctionTemplate(
    names=("missing_fields", "blank_fields", "incomplete_fields"),
    source='''
    def $name(record: dict[str, str], required: list[str]) -> list[str]:
        """The ``required`` fields that ``record`` lacks or leaves blank, in the order given."""
        missing = []
        for name in required:
            if not record.get(name, "").strip():
                missing.append(name)
        return missing
    ''',
    cases=lambda r: _spread(lambda a, b, c: [
        _args({a: "x", b: "  "}, [a, b, c]),
        _args({a: "1", b: "2"}, [b, a]),
        _args({}, [c]),
    ])(*r.sample(_WORDS, 3)),
)  # fmt: skip

THEMES = (
    Theme(
        "text utilities",
        ("text", "strings", "wording", "textops"),
        "Small text helpers: slugs, truncation, initials and word wrapping.",
        (_SLUG, _TRUNCATE, _INITIALS, _VOWELS, _PALINDROME, _WRAP, _TITLE),
    ),
    Theme(
        "descriptive statistics",
        ("stats", "metrics", "numbers", "summary"),
        "Descriptive statistics over lists of integers.",
        (_MEAN, _MEDIAN, _WINDOWS, _SPREAD, _ABOVE, _MODE, _RUNNING),
        (_STATS_CLASS,),
    ),
    Theme(
        "prices and money",
        ("pricing", "billing", "checkout", "money"),
        "Money arithmetic. Amounts are integers in cents, so nothing is lost to floating point.",
        (_DISCOUNT, _TAX, _SPLIT, _BULK, _FORMAT_MONEY, _CART, _CHANGE),
        (_TAB_CLASS,),
    ),
    Theme(
        "inventory",
        ("inventory", "stock", "warehouse", "supplies"),
        "Stock keeping: counts of items on hand, merged, checked and reordered.",
        (_LOW_STOCK, _MERGE_STOCK, _REORDER, _MOST_STOCKED, _SHORTFALL),
        (_STOCK_CLASS,),
    ),
    Theme(
        "time spans and dates",
        ("intervals", "timespans", "clock", "dates"),
        "Time arithmetic on integers: minute spans, clock times and calendar days.",
        (_OVERLAP, _MERGE_SPANS, _CLOCK, _LEAP, _DAY_OF_YEAR),
    ),
    Theme(
        "plane geometry",
        ("geometry", "shapes", "plane", "points"),
        "Integer plane geometry: distances, boxes, areas and containment.",
        (_MANHATTAN, _BOUNDS, _SHOELACE, _WITHIN, _CONTAINS, _CENTROID),
        (_RECT_CLASS,),
    ),
    Theme(
        "grids",
        ("grid", "matrix", "boards", "cells"),
        "Grids stored as lists of rows of integers.",
        (_TRANSPOSE, _COLUMN_SUMS, _NEIGHBOURS, _ROTATE, _DIAGONAL, _COUNT_CELLS),
    ),
    Theme(
        "scheduling",
        ("scheduling", "planner", "rota", "shifts"),
        "Scheduling helpers; times are minutes after midnight.",
        (_ROUND_ROBIN, _LATE, _FREE_SLOT, _PRIORITY, _PAID),
        (_AGENDA_CLASS,),
    ),
    Theme(
        "parsing",
        ("parsing", "formats", "readers", "decoders"),
        "Parsers for small text formats: settings, versions, durations, ranges and CSV lines.",
        (_PAIRS, _VERSIONS, _DURATION, _NUMBERS, _CSV, _INT_LIST),
    ),
    Theme(
        "validation",
        ("validation", "checks", "validators", "rules"),
        "Validators for user input: usernames, card numbers, colours, passwords and records.",
        (_USERNAME, _LUHN, _HEX_COLOUR, _STRENGTH, _MISSING),
    ),
)
