"""The procedural worlds' words: invented names, unique by construction, and the attribute vocabulary.

Shared by the search knowledge world (``toolgym.search.world``) and the SQL database world
(``toolgym.sql.world``), so it sits below both rather than in either.

Names are injective codes (see :mod:`toolgym.search.world` for why each gold answer is unique): a seeded
``Bijection`` scatters entity indices over a name space, and ``invented_word`` decodes a code into
syllables by mixed radix. Onsets and codas are consonant-only, nuclei vowel-only, so a word splits back into
its syllables in exactly one way and distinct codes give distinct words.
"""

from __future__ import annotations

import math

_MASK = (1 << 64) - 1

# Consonant-only onsets and codas, vowel-only nuclei: a word's consonant and vowel runs give its syllables.
ONSETS = [
    "b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t", "th", "tr",
    "v", "z", "sh", "w",
]  # fmt: skip
NUCLEI = ["a", "e", "i", "o", "u", "ai", "ea", "io"]
CODAS = ["", "n", "r", "l", "s", "th", "nd", "rk", "x", "m", "sk", "rn"]
#: organisation kinds: English words starting with a vowel, so never equal to an invented word
ORG_KINDS = [
    "Institute", "Academy", "Observatory", "Order", "Archive", "Assembly", "Union", "Ensemble", "Atelier",
    "Infirmary", "Exchange", "Orchestra",
]  # fmt: skip
ADJECTIVES = [
    "Amber", "Silent", "Hollow", "Crimson", "Distant", "Golden", "Broken", "Quiet", "Northern", "Endless",
    "Pale", "Hidden", "Iron", "Velvet", "Burning", "Frozen", "Scarlet", "Silver", "Lonely", "Restless",
    "Ancient", "Bitter", "Gentle", "Wandering", "Sunken", "Azure", "Copper", "Last", "Winter", "Secret",
]  # fmt: skip
NOUNS = [
    "Lantern", "Orchard", "Harbour", "Compass", "Garden", "Mirror", "Bridge", "Voyage", "Tower", "Letter",
    "River", "Feather", "Crown", "Archive", "Mountain", "Lighthouse", "Season", "Engine", "Chorus", "Atlas",
    "Meadow", "Citadel", "Promise", "Tide", "Window", "Clockwork", "Forest", "Canal", "Empire", "Ledger",
]  # fmt: skip
FORMS = ["novel", "treatise", "chronicle", "memoir", "play", "atlas", "poem cycle", "essay collection"]
OCCUPATIONS = [
    "cartographer", "astronomer", "glassblower", "shipwright", "botanist", "clockmaker", "physician",
    "banker", "brewer", "engineer", "architect", "poet", "painter", "composer", "historian", "surveyor",
    "apothecary", "printer", "bookbinder", "mathematician", "sculptor", "weaver", "navigator", "chemist",
    "librarian", "diplomat", "merchant", "judge", "teacher", "inventor",
]  # fmt: skip
FIELDS = [
    "shipbuilding", "astronomy", "glassmaking", "cartography", "the textile trade", "printing", "botany",
    "clockmaking", "medicine", "banking", "brewing", "mining", "music", "theatre", "architecture", "pottery",
    "fishing", "railways", "the tea trade", "salt mining", "bookbinding", "ironworking", "silk weaving",
    "perfumery", "telegraphy",
]  # fmt: skip

WORD2 = len(ONSETS) ** 2 * len(NUCLEI) ** 2 * len(CODAS)  # onset vowel onset vowel coda
FIRST = len(ONSETS) ** 2 * len(NUCLEI) ** 2  # onset vowel onset vowel (a first name has no coda)
WORD3 = WORD2 * len(ONSETS) * len(NUCLEI)  # three syllables: place names


def invented_word(code: int, syllables: int, coda: bool = True) -> str:
    """The invented word with this code (injective for a fixed shape; see the module docstring)."""
    parts = []
    if coda:
        code, c = divmod(code, len(CODAS))
        parts.append(CODAS[c])
    for _ in range(syllables):
        code, n = divmod(code, len(NUCLEI))
        code, o = divmod(code, len(ONSETS))
        parts.append(ONSETS[o] + NUCLEI[n])
    return "".join(reversed(parts)).capitalize()


def a_or_an(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class Bijection:
    """A seeded permutation of ``range(capacity)``: ``x -> (a*x + b) mod capacity`` with ``gcd(a, cap) = 1``.

    It scatters consecutive entity indices over the name space (so names look unrelated) while staying a
    bijection, which is what makes names unique without a set of every name seen.
    """

    def __init__(self, capacity: int, key: int):
        self.capacity = capacity
        a = splitmix(key) % capacity | 1
        while math.gcd(a, capacity) != 1:
            a += 2
        self.a, self.b = a, splitmix(key ^ 0xA5A5) % capacity

    def __call__(self, x: int) -> int:
        return (self.a * x + self.b) % self.capacity
