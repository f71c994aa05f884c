"""Single-point AST mutations of Python source: the procedural bugs of toolgym/SWE-v0 (SWE-smith's kind).

A bug-fixing task is made by changing one small thing in a working function (an operator, a comparison, a
bound, a condition, a statement, the order of two arguments, a default) and keeping the change if the
repository's tests catch it. This module lists every such candidate in a module's functions and applies one by
replacing only the characters it changes, so comments, formatting and the rest of the file stay byte for byte
and the diff a solver has to undo is one span. It works on any Python source, not only on generated code
(methods, nested and async functions, decorators, non-ASCII text), because the miner mutates real
repositories with it.

=====================  ===========================================================================
kind                   the change
=====================  ===========================================================================
``flip_operator``      an arithmetic operator (``+``/``-``, ``*``/``/``, ``//``/``%``, ...) or ``and``/``or``
``flip_comparison``    ``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``in``/``not in``, ``is``/``is not``
``off_by_one``         an integer used as an index or slice bound, a ``range`` argument, a compared value
                       or a ``+``/``-`` operand, one more or one less
``invert_condition``   the test of an ``if``/``elif``, a conditional expression or a comprehension filter
                       negated (or its leading ``not`` dropped)
``remove_statement``   a statement (assignment, call, ``if`` block, ...) deleted from a body that keeps
                       others; never the ``return`` that ends the function
``swap_arguments``     the first two positional arguments of a call exchanged
``wrong_default``      a parameter's constant default changed (an int + 1, a bool flipped, a string
                       emptied); ``None`` defaults are left alone
=====================  ===========================================================================

``while`` and ``assert`` tests are not inverted: a negated loop test mostly gives a loop that never ends,
which hangs the judge rather than failing a test, and a negated assert fails on every call. Nothing inside an
f-string is mutated (Python 3.11 places the nodes inside one less precisely than 3.12).

Every candidate is checked before it is offered: the function that holds it, with the replacement applied,
must parse to exactly the AST the mutation means (the original with that one node changed) and that AST must
differ from the original. So a candidate never gives a syntax error, never binds differently from what it
claims (an operator next to a bracket, a ``not`` before a comparison) and is never a no-op, whatever the
formatting. The check parses the function alone (its lines, under an ``if 1:`` when indented), which is
equivalent to parsing the module because a function's lines start and end outside any bracket or string,
and keeps the cost proportional to the function rather than to the file.

Why one module of this length: each kind of mutation is its own short visitor method of one collector, and
every candidate goes through the same check.
"""

from __future__ import annotations

import ast
import bisect
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

KINDS = (
    "flip_operator", "flip_comparison", "off_by_one", "invert_condition", "remove_statement",
    "swap_arguments", "wrong_default",
)  # fmt: skip

#: operator -> (its text, the operator it is flipped to)
_BINOPS: dict[type[ast.operator], tuple[str, type[ast.operator]]] = {
    ast.Add: ("+", ast.Sub), ast.Sub: ("-", ast.Add), ast.Mult: ("*", ast.Div), ast.Div: ("/", ast.Mult),
    ast.FloorDiv: ("//", ast.Mod), ast.Mod: ("%", ast.FloorDiv), ast.Pow: ("**", ast.Mult),
    ast.LShift: ("<<", ast.RShift), ast.RShift: (">>", ast.LShift), ast.BitAnd: ("&", ast.BitOr),
    ast.BitOr: ("|", ast.BitAnd), ast.BitXor: ("^", ast.BitOr),
}  # fmt: skip
_CMPOPS: dict[type[ast.cmpop], tuple[str, type[ast.cmpop]]] = {
    ast.Lt: ("<", ast.LtE), ast.LtE: ("<=", ast.Lt), ast.Gt: (">", ast.GtE), ast.GtE: (">=", ast.Gt),
    ast.Eq: ("==", ast.NotEq), ast.NotEq: ("!=", ast.Eq), ast.In: ("in", ast.NotIn),
    ast.NotIn: ("not in", ast.In), ast.Is: ("is", ast.IsNot), ast.IsNot: ("is not", ast.Is),
}  # fmt: skip
_BOOLOPS: dict[type[ast.boolop], tuple[str, type[ast.boolop]]] = {
    ast.And: ("and", ast.Or),
    ast.Or: ("or", ast.And),
}
#: statements whose removal is a plausible bug (a missing update, call, check or early exit)
_REMOVABLE = (
    ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.Raise, ast.Delete, ast.Continue,
    ast.Break, ast.If,
)  # fmt: skip
#: expressions that read well after a bare ``not`` (anything else is parenthesized)
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
#: operands that mean string building or sequence repetition, where a flipped operator only makes a TypeError
_SEQUENCE_LITERALS = (ast.JoinedStr, ast.List, ast.Tuple, ast.ListComp)

#: a change made in place on the fields of one node (see _Candidate)
_Edit = Callable[[ast.AST], None]


@dataclass(frozen=True)
class Mutation:
    """One single-point change: replace ``before`` at ``source[start:end]`` with ``after``."""

    path: str  # the file, relative to the repo root (as given by the caller)
    function: str  # qualified name of the enclosing function, e.g. "Parser.parse" or "mean"
    kind: str  # one of KINDS
    line: int  # 1-based line where the change is
    before: str  # the exact source text replaced
    after: str  # the text put in its place
    start: int  # character offsets into the source of the replaced text [start, end)
    end: int


@dataclass(frozen=True)
class _Candidate:
    """A mutation before its check: the span, the new text, and the same change made on the AST.

    ``edit(owner)`` makes the change by setting fields of ``owner`` only (an operator, a list item, a child),
    so the check can make it in place, dump the function and put the fields back, with no copy of the tree.
    """

    kind: str
    start: int
    end: int
    after: str
    owner: ast.AST
    edit: _Edit


class _Text:
    """The source with AST positions (1-based line, UTF-8 byte column) turned into character offsets.

    Lines are split on ``\\n`` only, as the tokenizer does (``str.splitlines`` also splits on form feeds and
    Unicode separators, which Python treats as ordinary characters).
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.line_starts = [0]
        at = source.find("\n")
        while at != -1:
            self.line_starts.append(at + 1)
            at = source.find("\n", at + 1)

    def line_start(self, lineno: int) -> int:
        return self.line_starts[lineno - 1]

    def line_end(self, lineno: int) -> int:
        """The offset just past line ``lineno``'s newline (the end of the source for the last line)."""
        return self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.source)

    def offset(self, lineno: int, col: int) -> int:
        start = self.line_start(lineno)
        line = self.source[start : self.line_end(lineno)]
        if line.isascii():
            return start + col
        return start + len(line.encode("utf-8")[:col].decode("utf-8"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)


def _parse(source: str) -> ast.Module | None:
    """The module's AST, or None where it does not parse (its warnings, e.g. invalid escapes, silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def _defs(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method with its dotted qualified name ("Parser.parse", "outer.inner"), in order."""
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    found = []
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((prefix + child.name, child))
                stack.append((child, f"{prefix}{child.name}."))
            elif isinstance(child, ast.ClassDef):
                stack.append((child, f"{prefix}{child.name}."))
            else:
                stack.append((child, prefix))
    found.sort(key=lambda item: (item[1].lineno, item[1].col_offset))
    yield from found


def _first_line(func: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return min([func.lineno] + [decorator.lineno for decorator in func.decorator_list])


def functions_of(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, first line, last line) of every function and method, in source order.

    The first line is that of the first decorator, if any, so the range is the function's whole text. Names
    are dotted (``Parser.parse``; a function defined inside another is ``outer.inner``). [] for source that
    does not parse.
    """
    tree = _parse(source)
    if tree is None:
        return []
    return [(name, _first_line(func), func.end_lineno or func.lineno) for name, func in _defs(tree)]


def _owned(func: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``func``'s body that are its own: not those of a nested def or class (their own entries),
    not annotations (no behaviour), not the inside of f-strings."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    stack: list[ast.AST] = [node for node in reversed(func.body) if not isinstance(node, nested)]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.JoinedStr):
            continue
        children = []
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "returns", "decorator_list", "type_params"):
                continue
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST) and not isinstance(child, nested):
                    children.append(child)
        stack.extend(reversed(children))


def _token_between(text: _Text, lo: int, hi: int, token: str) -> tuple[int, int] | None:
    """Where ``token`` (an operator, possibly two words such as "not in") lies in ``source[lo:hi]``.

    The gap between two operands holds only the operator, brackets, whitespace, line continuations and
    comments, so the token is what is left once those are skipped; None if it is not exactly ``token``.
    """
    source = text.source
    significant: list[int] = []
    i = lo
    while i < hi:
        ch = source[i]
        if ch == "#":
            newline = source.find("\n", i, hi)
            i = hi if newline == -1 else newline
            continue
        if ch not in " \t\f\r\n\\()":
            significant.append(i)
        i += 1
    if not significant:
        return None
    start, end = significant[0], significant[-1] + 1
    if source[start:end].split() != token.split():
        return None
    return start, end


def _replace_child(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list):
            for index, item in enumerate(value):
                if item is old:
                    value[index] = new
                    return
    raise ValueError("node not found in its parent")


def _set_op(op: type[ast.AST]) -> _Edit:
    def edit(owner: ast.AST) -> None:
        owner.op = op()  # type: ignore[attr-defined]

    return edit


def _int_value(node: ast.AST) -> int | None:
    """The value of an integer literal (``3`` or ``-3``), not a bool; None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


def _int_node(value: int) -> ast.expr:
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


class _Collector:
    """Builds the candidates of one function, kind by kind, from the nodes it owns."""

    def __init__(self, text: _Text, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.text = text
        self.func = func
        self.found: list[_Candidate] = []

    def add(self, kind: str, start: int, end: int, after: str, owner: ast.AST, edit: _Edit) -> None:
        self.found.append(_Candidate(kind, start, end, after, owner, edit))

    def collect(self) -> list[_Candidate]:
        self.statements(self.func, "body")
        self.defaults()
        for node in _owned(self.func):
            if isinstance(node, ast.BinOp):
                self.binop(node)
            elif isinstance(node, ast.AugAssign):
                self.augassign(node)
            elif isinstance(node, ast.BoolOp):
                self.boolop(node)
            elif isinstance(node, ast.Compare):
                self.compare(node)
            elif isinstance(node, ast.Subscript):
                self.subscript(node)
            elif isinstance(node, ast.Call):
                self.call(node)
            elif isinstance(node, ast.If | ast.IfExp):
                self.invert(node, node.test)
            elif isinstance(node, ast.comprehension):
                for test in node.ifs:
                    self.invert(node, test)
            for field in ("body", "orelse", "finalbody"):
                value = getattr(node, field, None)
                if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                    self.statements(node, field)
        return self.found

    # flip_operator and flip_comparison ---------------------------------------------------------------------

    def token(
        self, kind: str, left: ast.AST, right: ast.AST, token: str, after: str, node: ast.AST, edit: _Edit
    ) -> None:
        """A candidate replacing the operator ``token`` found between the operands ``left`` and ``right``."""
        where = _token_between(self.text, self.text.span(left)[1], self.text.span(right)[0], token)
        if where is not None:
            self.add(kind, *where, after, node, edit)

    def binop(self, node: ast.BinOp) -> None:
        text, new = _BINOPS.get(type(node.op), ("", None))
        if new is not None and not any(
            isinstance(side, _SEQUENCE_LITERALS)
            or (isinstance(side, ast.Constant) and isinstance(side.value, str | bytes))
            for side in (node.left, node.right)
        ):
            edit = _set_op(new)
            self.token("flip_operator", node.left, node.right, text, _BINOPS[new][0], node, edit)
        if isinstance(node.op, ast.Add | ast.Sub):
            for side in (node.left, node.right):
                self.off_by_one(node, side, allow_zero=False)

    def augassign(self, node: ast.AugAssign) -> None:
        text, new = _BINOPS.get(type(node.op), ("", None))
        if new is not None and not isinstance(node.value, _SEQUENCE_LITERALS):
            edit = _set_op(new)
            self.token(
                "flip_operator", node.target, node.value, text + "=", _BINOPS[new][0] + "=", node, edit
            )
        if isinstance(node.op, ast.Add | ast.Sub):
            self.off_by_one(node, node.value, allow_zero=False)

    def boolop(self, node: ast.BoolOp) -> None:
        # Only two-operand ones: flipping one of several makes a differently nested expression.
        if len(node.values) == 2:
            text, new = _BOOLOPS[type(node.op)]
            edit = _set_op(new)
            left, right = node.values
            self.token("flip_operator", left, right, text, _BOOLOPS[new][0], node, edit)

    def compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for index, op in enumerate(node.ops):
            text, new = _CMPOPS[type(op)]

            def edit(owner: ast.AST, index: int = index, new: type[ast.cmpop] = new) -> None:
                owner.ops[index] = new()  # type: ignore[attr-defined]

            self.token(
                "flip_comparison", operands[index], operands[index + 1], text, _CMPOPS[new][0], node, edit
            )
        for operand in operands:
            self.off_by_one(node, operand, allow_zero=True)

    # off_by_one --------------------------------------------------------------------------------------------

    def subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.slice, ast.Slice):
            for bound in (node.slice.lower, node.slice.upper):
                if bound is not None:
                    self.off_by_one(node.slice, bound, allow_zero=True)
        else:
            self.off_by_one(node, node.slice, allow_zero=True)

    def off_by_one(self, parent: ast.AST, node: ast.AST, allow_zero: bool) -> None:
        value = _int_value(node)
        if value is None:
            return
        start, end = self.text.span(node)
        for new in (value + 1, value - 1):
            if new == 0 and not allow_zero:
                continue  # `n + 0` reads as a planted bug

            def edit(owner: ast.AST, new: int = new) -> None:
                _replace_child(owner, node, _int_node(new))

            self.add("off_by_one", start, end, str(new), parent, edit)

    # calls: range bounds and swapped arguments --------------------------------------------------------------

    def call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            for arg in node.args:
                self.off_by_one(node, arg, allow_zero=True)
        if len(node.args) < 2 or any(isinstance(arg, ast.Starred) for arg in node.args[:2]):
            return
        first, second = node.args[0], node.args[1]
        (start, first_end), (second_start, end) = self.text.span(first), self.text.span(second)
        source = self.text.source
        after = source[second_start:end] + source[first_end:second_start] + source[start:first_end]

        def edit(owner: ast.AST) -> None:
            args = owner.args  # type: ignore[attr-defined]
            args[0], args[1] = args[1], args[0]

        self.add("swap_arguments", start, end, after, node, edit)

    # invert_condition --------------------------------------------------------------------------------------

    def invert(self, parent: ast.AST, test: ast.expr) -> None:
        if isinstance(test, ast.Constant):
            return
        start, end = self.text.span(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            operand = test.operand
            after = self.text.segment(operand)
            if "\n" in after or isinstance(operand, ast.Lambda | ast.IfExp | ast.NamedExpr | ast.Yield):
                after = f"({after})"

            def drop(owner: ast.AST) -> None:
                _replace_child(owner, test, operand)

            self.add("invert_condition", start, end, after, parent, drop)
            return
        segment = self.text.segment(test)
        after = f"not {segment}" if isinstance(test, _ATOMS) else f"not ({segment})"

        def negate(owner: ast.AST) -> None:
            _replace_child(owner, test, ast.UnaryOp(ast.Not(), test))

        self.add("invert_condition", start, end, after, parent, negate)

    # remove_statement --------------------------------------------------------------------------------------

    def statements(self, parent: ast.AST, field: str) -> None:
        body = getattr(parent, field)
        if len(body) < 2:
            return
        for index, stmt in enumerate(body):
            if not isinstance(stmt, _REMOVABLE):
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring or a bare literal: removing it changes nothing
            if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
                continue
            if parent is self.func and index == len(body) - 1 and isinstance(stmt, ast.Return):
                continue
            span = self.whole_lines(stmt)
            if span is None:
                continue

            def edit(owner: ast.AST, index: int = index) -> None:
                getattr(owner, field).pop(index)

            self.add("remove_statement", *span, "", parent, edit)

    def whole_lines(self, stmt: ast.stmt) -> tuple[int, int] | None:
        """The statement's lines, indentation and newline included, if nothing else shares them."""
        text = self.text
        start, end = text.span(stmt)
        line_start = text.line_start(stmt.lineno)
        line_end = text.line_end(stmt.end_lineno or stmt.lineno)
        rest = text.source[end:line_end].strip()
        if text.source[line_start:start].strip() or (rest and not rest.startswith("#")):
            return None
        return line_start, line_end

    # wrong_default -----------------------------------------------------------------------------------------

    def defaults(self) -> None:
        args = self.func.args
        for default in [*args.defaults, *args.kw_defaults]:
            if default is None:
                continue
            new = self.wrong(default)
            if new is None:
                continue
            after, node = new

            def edit(owner: ast.AST, default: ast.AST = default, node: ast.expr = node) -> None:
                _replace_child(owner, default, node)

            self.add("wrong_default", *self.text.span(default), after, args, edit)

    def wrong(self, default: ast.expr) -> tuple[str, ast.expr] | None:
        """Another plausible value for a default, as (text, node)."""
        number = _int_value(default)
        if number is not None:
            return str(number + 1), _int_node(number + 1)
        if not isinstance(default, ast.Constant):
            return None
        value = default.value
        if isinstance(value, bool):
            return str(not value), ast.Constant(not value)
        if isinstance(value, float):
            return repr(value + 1), ast.Constant(value + 1)
        if isinstance(value, str):
            segment = self.text.segment(default).lstrip("rRuU")
            if not segment or segment[0] not in "'\"":
                return None
            quote = segment[0]
            return (quote * 2, ast.Constant("")) if value else (f"{quote} {quote}", ast.Constant(" "))
        return None


def _dump_edited(func: ast.AST, cand: _Candidate) -> str | None:
    """``ast.dump(func)`` with the candidate's edit made, and undone after; None where it cannot be made."""
    saved = [
        (name, value, list(value) if isinstance(value, list) else None)
        for name, value in ast.iter_fields(cand.owner)
    ]
    try:
        cand.edit(cand.owner)
        return ast.dump(func)
    except ValueError:
        return None
    finally:
        for name, value, items in saved:
            setattr(cand.owner, name, value)
            if items is not None:
                value[:] = items


def _checked(
    text: _Text,
    path: str,
    qualname: str,
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    found: list[_Candidate],
) -> list[Mutation]:
    """The candidates whose text parses to exactly the AST they mean (see the module docstring)."""
    unit_start = text.line_start(_first_line(func))
    unit_end = text.line_end(func.end_lineno or func.lineno)
    indented = text.source[unit_start : unit_start + 1] in (" ", "\t")
    prefix = "if 1:\n" if indented else ""
    original = ast.dump(func)
    kept: list[Mutation] = []
    seen: set[tuple[str, int, int, str]] = set()
    for cand in found:
        key = (cand.kind, cand.start, cand.end, cand.after)
        if key in seen:
            continue
        seen.add(key)
        mutated = text.source[unit_start : cand.start] + cand.after + text.source[cand.end : unit_end]
        tree = _parse(prefix + mutated)
        if tree is None:
            continue
        body = tree.body
        if indented:
            body = body[0].body if len(body) == 1 and isinstance(body[0], ast.If) else []
        if len(body) != 1:
            continue
        want = _dump_edited(func, cand)
        if want is None:
            continue
        if want == original or ast.dump(body[0]) != want:
            continue
        kept.append(
            Mutation(
                path=path,
                function=qualname,
                kind=cand.kind,
                line=text.line_of(cand.start),
                before=text.source[cand.start : cand.end],
                after=cand.after,
                start=cand.start,
                end=cand.end,
            )
        )
    return kept


def mutations_of(source: str, path: str, functions: Collection[str] | None = None) -> list[Mutation]:
    """Every single-point mutation candidate inside the module's functions (only those named, if given).

    In a deterministic order: source position, then kind (in ``KINDS`` order), then the replacement. Names
    are the qualified names of ``functions_of``; a function nested in another is its own entry, so naming the
    outer one does not select the inner one's candidates. Never raises on valid Python; [] for source that
    does not parse.
    """
    tree = _parse(source)
    if tree is None:
        return []
    text = _Text(source)
    wanted = None if functions is None else set(functions)
    found: list[Mutation] = []
    for qualname, func in _defs(tree):
        if wanted is not None and qualname not in wanted:
            continue
        try:
            found.extend(_checked(text, path, qualname, func, _Collector(text, func).collect()))
        except (RecursionError, ValueError, IndexError):
            continue  # a pathologically deep function, or positions that do not fit the text: no candidates
    found.sort(key=lambda m: (m.start, KINDS.index(m.kind), m.end, m.after))
    return found


def apply_mutation(source: str, mutation: Mutation) -> str:
    """The source with that one mutation applied, replacing only ``source[start:end]``.

    Comments and formatting elsewhere are kept byte for byte, and the result parses (candidates whose result
    would not are never produced). Raises ValueError if ``source[start:end]`` is not the mutation's ``before``
    (a mutation of another version of the file).
    """
    if source[mutation.start : mutation.end] != mutation.before:
        raise ValueError(
            f"{mutation.path}:{mutation.line}: the source does not hold {mutation.before!r} at "
            f"[{mutation.start}, {mutation.end}); was the mutation found on another version of the file?"
        )
    return source[: mutation.start] + mutation.after + source[mutation.end :]
