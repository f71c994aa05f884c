"""Procedural multi-step arithmetic word problems whose exact integer answers call for a calculator.

``generate_calculator_task(seed, level)`` writes one problem from one of several story templates (a
warehouse, a delivery fleet, a factory, a fund earning interest, a shared event bill, a field harvest).
Each template is one chain of quantities; the level decides how long the chain is and how large the numbers:

=====  =====  ==========================  =========================
level  steps  main quantities             rates / per-unit amounts
=====  =====  ==========================  =========================
1      2      3-4 digits                  2-3 digits
2      3      4-6 digits                  3-4 digits
3      4-5    5-7 digits                  3-4 digits
=====  =====  ==========================  =========================

Every step is one calculator call on literal numbers (earlier results substituted in), recorded in
``task.data["steps"]``; replaying them through ``toolgym.tools.calculator.Calculator`` yields the gold as the
last result, so a scripted policy can solve any task. Divisions are exact by construction: an amount added
or removed just before a division is nudged so the total divides, or the question asks for *full* boxes
(floor division, ``//``). Numbers are written as plain digits (no thousands separators) so the model can
copy them into the calculator verbatim. All randomness comes from a local ``random.Random``, so a seed
always gives the same task.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from toolgym.core.task import Task

LEVELS = (1, 2, 3)
#: (main quantity digits, rate digits) per level
_DIGITS = {1: ((3, 4), (2, 3)), 2: ((4, 6), (3, 4)), 3: ((5, 7), (3, 4))}


@dataclass
class _Story:
    """A problem being written: its sentences, the calculator steps so far and the question."""

    rng: random.Random
    level: int
    steps: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    question: str = ""
    value: int = 0  # the result of the last step

    def big(self) -> int:
        """A main quantity (crates, kilometres, dollars) with the level's digit count."""
        return _digits(self.rng, *_DIGITS[self.level][0])

    def rate(self) -> int:
        """A per-unit amount (screws per crate, kilometres per week) with the level's smaller digit count."""
        return _digits(self.rng, *_DIGITS[self.level][1])

    def part_of(self, total: int, lo: float = 0.15, hi: float = 0.6) -> int:
        """An amount between ``lo`` and ``hi`` of ``total``: large, yet never more than what is there."""
        return self.rng.randint(max(1, int(total * lo)), max(2, int(total * hi)))

    def divisor(self, lo: int, hi: int, total: int, keep: int = 10**4) -> int:
        """A divisor in ``lo..hi``, smaller when needed so ``total`` divided by it stays at least ``keep``
        (the answer should not shrink to something one could guess or do in one's head)."""
        return self.rng.randint(lo, max(lo, min(hi, total // keep)))

    def say(self, sentence: str) -> None:
        self.sentences.append(sentence)

    def calc(self, expression: str, value: int) -> int:
        """Record one calculator step; ``value`` is the exact integer it evaluates to."""
        self.steps.append(expression)
        self.value = value
        return value

    def mul(self, a: int, b: int) -> int:
        return self.calc(f"{a}*{b}", a * b)

    def add(self, a: int, b: int) -> int:
        return self.calc(f"{a}+{b}", a + b)

    def sub(self, a: int, b: int) -> int:
        assert a > b, "quantities never go negative"
        return self.calc(f"{a}-{b}", a - b)

    def div(self, a: int, b: int) -> int:
        assert a % b == 0, "exact division by construction"
        return self.calc(f"{a}/{b}", a // b)

    def floordiv(self, a: int, b: int) -> int:
        return self.calc(f"{a}//{b}", a // b)

    def percent(self, a: int, p: int) -> int:
        assert a * p % 100 == 0, "exact percentage by construction"
        return self.calc(f"{a}*{p}/100", a * p // 100)


def _digits(rng: random.Random, lo: int, hi: int) -> int:
    n = rng.randint(lo, hi)
    return rng.randint(10 ** (n - 1), 10**n - 1)


def _nudge_up(amount: int, total_after: int, divisor: int) -> int:
    """``amount`` increased by the least that makes ``total_after + (increase)`` divisible by ``divisor``."""
    return amount + (-total_after) % divisor


def _nudge_down_remainder(total: int, removed: int, divisor: int) -> int:
    """``removed`` increased by the least that makes ``total - removed`` divisible by ``divisor``."""
    return removed + (total - removed) % divisor


# -- templates: each writes a story of exactly ``n`` calculator steps (2 <= n <= 5) -----------------------


def _warehouse(s: _Story, n: int) -> None:
    crates, per_crate = s.big(), s.rate()
    s.say(
        f"A distribution centre receives {crates} crates of screws, and every crate holds {per_crate} screws."
    )
    total = s.mul(crates, per_crate)
    shipped = s.part_of(total)
    s.say(f"During the following month it ships {shipped} screws to hardware stores.")
    total = s.sub(total, shipped)
    s.question = "How many screws are left at the distribution centre?"
    if n >= 3:
        extra = s.part_of(total, 0.1, 0.5)
        s.say(f"Then a late delivery adds another {extra} screws.")
        total = s.add(total, extra)
        s.question = "How many screws does the distribution centre hold after the late delivery?"
    if n >= 4:
        bag = s.divisor(12, 400, total)
        s.say(f"All of these screws are then packed into bags of exactly {bag} screws each.")
        bags = s.floordiv(total, bag)
        s.question = "How many completely full bags can be packed?"
    if n >= 5:
        price = s.rng.randint(150, 2500)
        s.say(f"Each full bag sells for {price} cents, and the screws left over are not sold.")
        s.mul(bags, price)
        s.question = "How many cents does the centre earn if it sells every full bag?"


def _fleet(s: _Story, n: int) -> None:
    vans, km = s.rng.randint(12, 480), s.big()
    s.say(f"A courier company runs {vans} vans, and each van drives {km} kilometres in a year.")
    total = s.mul(vans, km)
    if n == 2:
        trucks_km = s.big() * s.rng.randint(3, 40)
        s.say(f"Its long-haul trucks cover another {trucks_km} kilometres in the same year.")
        s.add(total, trucks_km)
        s.question = "How many kilometres do all of the company's vehicles cover in that year?"
        return
    years = s.rng.randint(3, 12)
    s.say(f"The vans keep exactly the same schedule for {years} years.")
    total = s.mul(total, years)
    trucks_km = s.part_of(total, 0.2, 0.9)
    per_litre = s.rng.randint(6, 15)
    if n >= 4:
        trucks_km = _nudge_up(trucks_km, total + trucks_km, per_litre)
    s.say(f"Over those {years} years its long-haul trucks cover {trucks_km} kilometres.")
    total = s.add(total, trucks_km)
    s.question = f"How many kilometres do the vans and trucks cover together over the {years} years?"
    if n >= 4:
        s.say(f"Every vehicle in the fleet uses exactly one litre of diesel for each {per_litre} kilometres.")
        litres = s.div(total, per_litre)
        s.question = f"How many litres of diesel does the fleet use over the {years} years?"
    if n >= 5:
        price = s.rng.randint(110, 240)
        s.say(f"Diesel costs {price} cents per litre.")
        s.mul(litres, price)
        s.question = f"How many cents does the company spend on diesel over the {years} years?"


def _factory(s: _Story, n: int) -> None:
    machines, per_day = s.rng.randint(12, 360), s.big()
    s.say(f"A plant has {machines} identical machines, and each of them makes {per_day} bolts per day.")
    daily = s.mul(machines, per_day)
    days = s.rng.randint(14, 90)
    s.say(f"The plant runs every day for {days} days.")
    total = s.mul(daily, days)
    s.question = f"How many bolts does the plant make in those {days} days?"
    if n >= 3:
        rejected = s.part_of(total, 0.01, 0.08)
        box = s.divisor(24, 600, total)
        if n >= 4:
            rejected = _nudge_down_remainder(total, rejected, box)
        s.say(f"Quality control rejects {rejected} of these bolts as defective.")
        total = s.sub(total, rejected)
        s.question = "How many bolts pass quality control?"
    if n >= 4:
        s.say(f"The bolts that pass are packed into boxes of {box}, and every box is filled completely.")
        boxes = s.div(total, box)
        s.question = "How many boxes are filled?"
    if n >= 5:
        grams = s.rng.randint(200, 9000)
        s.say(f"A filled box weighs {grams} grams.")
        s.mul(boxes, grams)
        s.question = "How many grams do all of the filled boxes weigh together?"


def _fund(s: _Story, n: int) -> None:
    balance = s.big() * 100
    rate = s.rng.randint(2, 19)
    s.say(f"A town's pension fund holds {balance} dollars. At the end of the year it earns {rate}% interest.")
    interest = s.percent(balance, rate)
    s.say("The interest is added to the fund.")
    balance = s.add(balance, interest)
    s.question = "How many dollars does the fund hold once the interest has been added?"
    if n >= 3:
        payout = s.part_of(balance, 0.1, 0.5)
        if n >= 4:
            payout = _nudge_down_remainder(balance, payout, 100)
        s.say(f"At the start of the next year it pays out {payout} dollars in pensions.")
        balance = s.sub(balance, payout)
        s.question = "How many dollars are left in the fund after the payout?"
    if n >= 4:
        rate2 = s.rng.randint(2, 19)
        s.say(f"During that second year the remaining money earns {rate2}% interest.")
        interest = s.percent(balance, rate2)
        s.question = "How many dollars of interest does the fund earn in the second year?"
    if n >= 5:
        s.say("That interest is also added to the fund.")
        s.add(balance, interest)
        s.question = "How many dollars does the fund hold at the end of the second year?"


def _shared_bill(s: _Story, n: int) -> None:
    guests, per_guest = s.big(), s.rate()
    s.say(f"A trade fair expects {guests} visitors, and catering costs {per_guest} dollars per visitor.")
    total = s.mul(guests, per_guest)
    sponsors = s.divisor(3, 48, total, keep=3 * 10**4 if n >= 5 else 10**4)
    venue = s.big() * s.rng.randint(2, 9)
    if n == 3:
        venue = _nudge_up(venue, total + venue, sponsors)
    s.say(f"Renting the exhibition halls costs a further {venue} dollars.")
    total = s.add(total, venue)
    s.question = "What is the total cost of the fair in dollars?"
    if n >= 4:
        grant = _nudge_down_remainder(total, s.part_of(total, 0.05, 0.3), sponsors)
        s.say(f"A city grant covers {grant} dollars of that cost.")
        total = s.sub(total, grant)
    if n >= 3:
        s.say(f"The {'remaining ' if n >= 4 else ''}cost is split equally between {sponsors} sponsors.")
        share = s.div(total, sponsors)
        s.question = "How many dollars does each sponsor pay?"
    if n >= 5:
        deposit = s.part_of(share, 0.1, 0.6)
        s.say(f"Each sponsor has already paid a deposit of {deposit} dollars.")
        s.sub(share, deposit)
        s.question = "How many more dollars does each sponsor still have to pay?"


def _harvest(s: _Story, n: int) -> None:
    length, width = s.big(), s.rate()
    s.say(f"A rectangular farm measures {length} metres by {width} metres.")
    area = s.mul(length, width)
    if n == 2:
        grams = s.rng.randint(120, 950)
        s.say(f"Every square metre yields {grams} grams of wheat.")
        s.mul(area, grams)
        s.question = "How many grams of wheat does the farm produce?"
        return
    pond_l, pond_w = s.rng.randint(10, max(11, length // 4)), s.rng.randint(10, max(11, width // 4))
    s.say(f"A rectangular pond inside it measures {pond_l} metres by {pond_w} metres.")
    pond = s.mul(pond_l, pond_w)
    area = s.sub(area, pond)
    s.question = "How many square metres of the farm are not covered by the pond?"
    if n >= 4:
        grams = s.rng.randint(120, 950)
        s.say(f"Every square metre of dry land yields {grams} grams of wheat.")
        wheat = s.mul(area, grams)
        s.question = "How many grams of wheat does the farm produce?"
    if n >= 5:
        sack = s.divisor(5, 60, wheat // 1000) * 1000
        s.say(f"The wheat is poured into sacks that each hold {sack} grams.")
        s.floordiv(wheat, sack)
        s.question = "How many sacks can be filled completely?"


_TEMPLATES: dict[str, Callable[[_Story, int], None]] = {
    "warehouse": _warehouse,
    "fleet": _fleet,
    "factory": _factory,
    "fund": _fund,
    "shared_bill": _shared_bill,
    "harvest": _harvest,
}


def _steps_for(level: int, rng: random.Random) -> int:
    return {1: 2, 2: 3}.get(level) or rng.choice((4, 5))


def generate_calculator_task(seed: int, level: int = 1) -> Task:
    """One word problem for ``seed`` at ``level`` (1-3); the same arguments always give the same task.

    ``answer`` is the integer gold; ``data`` holds ``level``, ``template`` and ``steps`` (calculator
    expressions on literal numbers whose last result is the gold).
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    rng = random.Random(f"toolgym.calculator_tasks:{level}:{seed}")
    for _ in range(100):
        name = rng.choice(sorted(_TEMPLATES))
        story = _Story(rng, level)
        _TEMPLATES[name](story, _steps_for(level, rng))
        prompt = " ".join([*story.sentences, story.question])
        answer = story.value
        # The gold must be something to compute, not something to copy from the text.
        if not re.search(rf"(?<!\d){answer}(?!\d)", prompt):
            break
    return Task(
        id=f"calculator-L{level}/{seed}",
        prompt=prompt,
        answer=answer,
        data={"level": level, "template": name, "steps": story.steps},
    )
