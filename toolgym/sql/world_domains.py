"""The SQL world's domains: table and column templates that seeded databases are drawn from.

A domain is a small business (a shop, a school, a library, a clinic, an airline, a sports league) described as
tables whose columns say what kind of value they hold. ``toolgym.sql.world`` picks a connected subset of a
domain's tables, a name variant for each table and column, the row counts and every value from a seed; the
question templates (``toolgym.sql.world_questions``) read the kinds to know what they can ask.

Column kinds:

===============  ============================================================================================
kind             values
===============  ============================================================================================
``label``        unique per row: what a question names a row by (``style`` says how names are made)
``category``     a few repeated values: ``values``, or invented ``cities``/``countries`` for ``"@city"`` etc.
``int``/``real`` numbers in ``span`` (reals have two decimals)
``year``         an integer year in ``span``
``date``         an ISO date (``YYYY-MM-DD``) in the years of ``span``
``fk``           the id of a row of the table ``ref``; ``role`` is how a question names that row
===============  ============================================================================================

Every table also has ``id INTEGER PRIMARY KEY``. A table whose ``fk`` points at another needs that table in
the database, so a database is closed under references.

This file is long because it is data: the six domains' table and column templates, one after another.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column template: its name variants (one is picked per database) and what it holds."""

    names: tuple[str, ...]
    kind: str
    phrase: str = ""
    values: tuple[str, ...] = ()
    span: tuple[float, float] = (0, 0)
    ref: str = ""
    role: str = ""
    style: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("label", "category", "int", "real", "year", "date", "fk"):
            raise ValueError(f"unknown column kind {self.kind!r}")


@dataclass(frozen=True)
class Table:
    """One table template: name variants as (table name, singular noun, plural noun), its columns and how
    many rows it gets."""

    key: str
    names: tuple[tuple[str, str, str], ...]
    columns: tuple[Column, ...]
    rows: tuple[int, int]


def _label(names: tuple[str, ...], phrase: str, style: str) -> Column:
    return Column(names, "label", phrase, style=style)


def _cat(names: tuple[str, ...], phrase: str, *values: str) -> Column:
    return Column(names, "category", phrase, values=values)


def _num(kind: str, names: tuple[str, ...], phrase: str, lo: float, hi: float) -> Column:
    return Column(names, kind, phrase, span=(lo, hi))


def _fk(names: tuple[str, ...], ref: str, role: str) -> Column:
    return Column(names, "fk", role, ref=ref, role=role)


PERSON = "person"

DOMAINS: dict[str, tuple[Table, ...]] = {
    "shop": (
        Table(
            "customers",
            (("customers", "customer", "customers"), ("clients", "client", "clients")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _cat(("city", "home_city"), "city", "@city"),
                _num("date", ("signup_date", "joined_on"), "sign-up date", 2018, 2024),
                _num("int", ("loyalty_points", "points"), "loyalty points", 0, 5000),
            ),
            (25, 120),
        ),
        Table(
            "suppliers",
            (("suppliers", "supplier", "suppliers"), ("vendors", "vendor", "vendors")),
            (
                _label(("name", "company_name"), "name", "company:Traders,Supply,Wholesale,Goods"),
                _cat(("country",), "country", "@country"),
                _num("real", ("rating", "score"), "rating", 1, 5),
            ),
            (6, 20),
        ),
        Table(
            "products",
            (("products", "product", "products"), ("items", "item", "items")),
            (
                _label(("name", "product_name"), "name", "pair"),
                _cat(
                    ("category", "department"),
                    "category",
                    "Kitchen",
                    "Garden",
                    "Toys",
                    "Books",
                    "Tools",
                    "Sports",
                    "Beauty",
                ),
                _num("real", ("price", "list_price"), "price", 2, 500),
                _num("int", ("stock", "units_in_stock"), "stock", 0, 400),
                _fk(("supplier_id",), "suppliers", "supplier"),
            ),
            (30, 150),
        ),
        Table(
            "stores",
            (("stores", "store", "stores"), ("shops", "shop", "shops")),
            (
                _label(("name", "store_name"), "name", "company:Market,Emporium,Outlet,Corner"),
                _cat(("city", "location"), "city", "@city"),
                _num("year", ("opened_year", "opened"), "opening year", 1990, 2022),
                _num("int", ("floor_area", "area_sqm"), "floor area", 200, 5000),
            ),
            (5, 15),
        ),
        Table(
            "employees",
            (("employees", "employee", "employees"), ("staff", "staff member", "staff members")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _fk(("store_id",), "stores", "store"),
                _cat(("role", "position"), "role", "cashier", "manager", "stocker", "clerk", "buyer"),
                _num("int", ("salary", "annual_salary"), "salary", 25000, 90000),
                _num("date", ("hire_date", "hired_on"), "hire date", 2010, 2024),
            ),
            (20, 80),
        ),
        Table(
            "orders",
            (("orders", "order", "orders"), ("purchases", "purchase", "purchases")),
            (
                _fk(("customer_id",), "customers", "customer"),
                _fk(("store_id",), "stores", "store"),
                _num("date", ("order_date", "placed_on"), "order date", 2021, 2024),
                _cat(("status", "order_status"), "status", "pending", "shipped", "delivered", "returned"),
                _num("real", ("shipping_fee", "delivery_cost"), "shipping fee", 0, 30),
            ),
            (60, 300),
        ),
        Table(
            "order_items",
            (("order_items", "order line", "order lines"), ("order_lines", "order line", "order lines")),
            (
                _fk(("order_id",), "orders", "order"),
                _fk(("product_id",), "products", "product"),
                _num("int", ("quantity", "qty"), "quantity", 1, 12),
                _num("real", ("unit_price", "price_paid"), "unit price", 2, 500),
            ),
            (100, 500),
        ),
    ),
    "school": (
        Table(
            "departments",
            (("departments", "department", "departments"), ("faculties", "faculty", "faculties")),
            (
                _label(
                    ("name", "department_name"),
                    "name",
                    "list:Astronomy,Botany,Chemistry,Economics,Geology,History,Linguistics,Mathematics,"
                    "Music,Philosophy,Physics,Psychology,Sociology,Statistics,Zoology",
                ),
                _cat(("building", "hall"), "building", "@place"),
                _num("int", ("budget", "annual_budget"), "budget", 100000, 2000000),
            ),
            (5, 12),
        ),
        Table(
            "instructors",
            (("instructors", "instructor", "instructors"), ("teachers", "teacher", "teachers")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _fk(("department_id",), "departments", "department"),
                _cat(("rank", "title"), "rank", "lecturer", "assistant professor", "professor", "fellow"),
                _num("int", ("salary",), "salary", 40000, 160000),
                _num("year", ("hire_year", "joined_year"), "hire year", 1995, 2023),
            ),
            (15, 60),
        ),
        Table(
            "courses",
            (("courses", "course", "courses"), ("classes", "class", "classes")),
            (
                _label(("title", "course_title"), "title", "pair"),
                _fk(("department_id",), "departments", "department"),
                _num("int", ("credits", "credit_hours"), "credits", 1, 6),
                _cat(("level", "difficulty"), "level", "introductory", "intermediate", "advanced"),
            ),
            (20, 80),
        ),
        Table(
            "students",
            (("students", "student", "students"), ("pupils", "pupil", "pupils")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _fk(("major_id",), "departments", "major department"),
                _num("year", ("enrollment_year", "entry_year"), "enrollment year", 2017, 2024),
                _num("real", ("gpa", "grade_average"), "grade point average", 1.5, 4),
                _cat(("home_city", "hometown"), "home city", "@city"),
            ),
            (40, 200),
        ),
        Table(
            "enrollments",
            (
                ("enrollments", "enrollment", "enrollments"),
                ("registrations", "registration", "registrations"),
            ),
            (
                _fk(("student_id",), "students", "student"),
                _fk(("course_id",), "courses", "course"),
                _num("int", ("grade", "score"), "grade", 40, 100),
                _cat(("semester", "term"), "semester", "spring", "summer", "autumn"),
            ),
            (100, 500),
        ),
    ),
    "library": (
        Table(
            "authors",
            (("authors", "author", "authors"), ("writers", "writer", "writers")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _cat(("country", "nationality"), "country", "@country"),
                _num("year", ("birth_year", "born"), "birth year", 1900, 1995),
            ),
            (15, 60),
        ),
        Table(
            "publishers",
            (("publishers", "publisher", "publishers"), ("presses", "press", "presses")),
            (
                _label(("name", "publisher_name"), "name", "company:Press,Books,House,Editions"),
                _cat(("city", "based_in"), "city", "@city"),
                _num("year", ("founded_year", "founded"), "founding year", 1850, 2010),
            ),
            (5, 15),
        ),
        Table(
            "books",
            (("books", "book", "books"), ("titles", "title", "titles")),
            (
                _label(("title", "book_title"), "title", "pair"),
                _fk(("author_id",), "authors", "author"),
                _fk(("publisher_id",), "publishers", "publisher"),
                _cat(
                    ("genre", "category"),
                    "genre",
                    "mystery",
                    "fantasy",
                    "history",
                    "poetry",
                    "science",
                    "travel",
                ),
                _num("int", ("pages", "page_count"), "page count", 80, 900),
                _num("year", ("published_year", "year_published"), "publication year", 1950, 2024),
                _num("real", ("price", "list_price"), "price", 5, 60),
            ),
            (40, 200),
        ),
        Table(
            "members",
            (("members", "member", "members"), ("patrons", "patron", "patrons")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _cat(("city", "home_city"), "city", "@city"),
                _num("year", ("joined_year", "member_since"), "joining year", 2005, 2024),
                _cat(("membership", "plan"), "membership plan", "basic", "silver", "gold"),
            ),
            (30, 150),
        ),
        Table(
            "loans",
            (("loans", "loan", "loans"), ("checkouts", "checkout", "checkouts")),
            (
                _fk(("book_id",), "books", "book"),
                _fk(("member_id",), "members", "member"),
                _num("date", ("loan_date", "borrowed_on"), "loan date", 2022, 2024),
                _num("int", ("days_kept", "loan_days"), "number of days kept", 1, 60),
                _num("real", ("late_fee", "fine"), "late fee", 0, 20),
            ),
            (100, 500),
        ),
        Table(
            "reviews",
            (("reviews", "review", "reviews"), ("ratings", "rating", "ratings")),
            (
                _fk(("book_id",), "books", "book"),
                _fk(("member_id",), "members", "member"),
                _num("int", ("stars", "score"), "stars", 1, 5),
                _num("date", ("review_date", "written_on"), "review date", 2020, 2024),
            ),
            (50, 250),
        ),
    ),
    "clinic": (
        Table(
            "departments",
            (("departments", "department", "departments"), ("wards", "ward", "wards")),
            (
                _label(
                    ("name", "department_name"),
                    "name",
                    "list:Cardiology,Neurology,Oncology,Pediatrics,Orthopedics,Dermatology,Radiology,"
                    "Psychiatry,Urology,Nephrology,Geriatrics,Hematology",
                ),
                _num("int", ("floor", "floor_number"), "floor", 1, 9),
                _num("int", ("budget", "annual_budget"), "budget", 200000, 5000000),
            ),
            (4, 12),
        ),
        Table(
            "doctors",
            (("doctors", "doctor", "doctors"), ("physicians", "physician", "physicians")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _fk(("department_id",), "departments", "department"),
                _num("int", ("years_experience", "experience_years"), "years of experience", 1, 40),
                _num("real", ("consultation_fee", "fee"), "consultation fee", 40, 400),
            ),
            (10, 50),
        ),
        Table(
            "patients",
            (("patients", "patient", "patients"),),
            (
                _label(("name", "full_name"), "name", PERSON),
                _cat(("city", "home_city"), "city", "@city"),
                _num("year", ("birth_year", "born"), "birth year", 1940, 2020),
                _cat(("blood_type", "blood_group"), "blood type", "A+", "A-", "B+", "B-", "O+", "O-", "AB+"),
            ),
            (40, 200),
        ),
        Table(
            "appointments",
            (("appointments", "appointment", "appointments"), ("visits", "visit", "visits")),
            (
                _fk(("patient_id",), "patients", "patient"),
                _fk(("doctor_id",), "doctors", "doctor"),
                _num("date", ("appointment_date", "visit_date"), "date", 2022, 2024),
                _num("real", ("cost", "charge"), "cost", 20, 900),
                _cat(("status", "outcome"), "status", "scheduled", "completed", "cancelled"),
            ),
            (100, 500),
        ),
        Table(
            "medications",
            (("medications", "medication", "medications"), ("drugs", "drug", "drugs")),
            (
                _label(("name", "drug_name"), "name", "place"),
                _cat(("form", "kind"), "form", "tablet", "syrup", "injection", "cream", "inhaler"),
                _num("real", ("unit_price", "price"), "unit price", 1, 200),
            ),
            (10, 40),
        ),
        Table(
            "prescriptions",
            (("prescriptions", "prescription", "prescriptions"),),
            (
                _fk(("appointment_id",), "appointments", "appointment"),
                _fk(("medication_id",), "medications", "medication"),
                _num("int", ("quantity", "units"), "quantity", 1, 90),
                _num("int", ("days", "duration_days"), "duration in days", 1, 30),
            ),
            (60, 300),
        ),
    ),
    "airline": (
        Table(
            "airports",
            (("airports", "airport", "airports"),),
            (
                _label(("name", "airport_name"), "name", "place"),
                _cat(("country",), "country", "@country"),
                _num("int", ("runways", "runway_count"), "number of runways", 1, 6),
            ),
            (6, 20),
        ),
        Table(
            "aircraft",
            (("aircraft", "aircraft", "aircraft"), ("planes", "plane", "planes")),
            (
                _label(("registration", "tail_number"), "registration", "code:TG-"),
                _cat(("manufacturer", "maker"), "manufacturer", "@company"),
                _num("int", ("capacity", "seats"), "capacity", 50, 400),
                _num("year", ("year_built", "built"), "year built", 1995, 2023),
            ),
            (8, 30),
        ),
        Table(
            "flights",
            (("flights", "flight", "flights"),),
            (
                _label(("flight_number", "code"), "flight number", "code:TG"),
                _fk(("origin_id",), "airports", "origin airport"),
                _fk(("destination_id",), "airports", "destination airport"),
                _fk(("aircraft_id",), "aircraft", "aircraft"),
                _num("date", ("departure_date", "departs_on"), "departure date", 2023, 2024),
                _num("int", ("distance_km", "distance"), "distance", 200, 12000),
                _num("real", ("base_fare", "fare"), "base fare", 50, 1500),
            ),
            (40, 200),
        ),
        Table(
            "passengers",
            (("passengers", "passenger", "passengers"), ("travellers", "traveller", "travellers")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _cat(("country", "nationality"), "country", "@country"),
                _num("year", ("birth_year", "born"), "birth year", 1940, 2010),
                _cat(("tier", "loyalty_tier"), "loyalty tier", "none", "silver", "gold", "platinum"),
            ),
            (40, 200),
        ),
        Table(
            "bookings",
            (("bookings", "booking", "bookings"), ("reservations", "reservation", "reservations")),
            (
                _fk(("flight_id",), "flights", "flight"),
                _fk(("passenger_id",), "passengers", "passenger"),
                _cat(("seat_class", "cabin"), "seat class", "economy", "premium", "business", "first"),
                _num("real", ("price", "amount_paid"), "price", 40, 4000),
            ),
            (100, 500),
        ),
    ),
    "league": (
        Table(
            "teams",
            (("teams", "team", "teams"), ("clubs", "club", "clubs")),
            (
                _label(("name", "team_name"), "name", "company:Rovers,Hawks,United,Wanderers,Athletic"),
                _cat(("city", "home_city"), "city", "@city"),
                _num("year", ("founded_year", "founded"), "founding year", 1880, 2010),
                _num("int", ("budget", "annual_budget"), "budget", 1000000, 90000000),
            ),
            (6, 20),
        ),
        Table(
            "stadiums",
            (("stadiums", "stadium", "stadiums"), ("venues", "venue", "venues")),
            (
                _label(("name", "stadium_name"), "name", "place"),
                _cat(("city", "location"), "city", "@city"),
                _num("int", ("capacity", "seats"), "capacity", 5000, 90000),
            ),
            (4, 12),
        ),
        Table(
            "players",
            (("players", "player", "players"), ("athletes", "athlete", "athletes")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _fk(("team_id",), "teams", "team"),
                _cat(("position", "role"), "position", "goalkeeper", "defender", "midfielder", "forward"),
                _num("int", ("age",), "age", 17, 39),
                _num("int", ("salary", "wage"), "salary", 20000, 900000),
                _num("int", ("goals", "goals_scored"), "goals", 0, 40),
            ),
            (50, 250),
        ),
        Table(
            "coaches",
            (("coaches", "coach", "coaches"), ("managers", "manager", "managers")),
            (
                _label(("name", "full_name"), "name", PERSON),
                _fk(("team_id",), "teams", "team"),
                _cat(("nationality", "country"), "nationality", "@country"),
                _num("int", ("experience_years", "years_experience"), "years of experience", 1, 35),
            ),
            (6, 30),
        ),
        Table(
            "matches",
            (("matches", "match", "matches"), ("games", "game", "games")),
            (
                _fk(("home_team_id",), "teams", "home team"),
                _fk(("away_team_id",), "teams", "away team"),
                _fk(("stadium_id",), "stadiums", "stadium"),
                _num("date", ("match_date", "played_on"), "match date", 2022, 2024),
                _num("int", ("home_goals",), "home goals", 0, 6),
                _num("int", ("away_goals",), "away goals", 0, 6),
                _num("int", ("attendance", "crowd"), "attendance", 1000, 90000),
            ),
            (40, 200),
        ),
    ),
}
