"""Conditional approval: when an IRREVERSIBLE call needs a human, decided by its input.

A tool declares `compensable(reversibility=IRREVERSIBLE, approval=...)` with either a
sync callable (the call's input → True when a human must approve) or a rule written in a
small language, parsed here (never `eval`):

    rule       := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | "(" rule ")" | comparison
    comparison := NAME OP LITERAL          OP: == != < <= > >=
    LITERAL    := number | 'string' | "string" | true | false | null

NAME is one of the tool's parameters. `==` and `!=` compare JSON values (a number is
never equal to a bool; 1 equals 1.0); `<`, `<=`, `>`, `>=` compare two numbers or two
strings, and anything else (a null optional argument, a string amount) is an error. The
rule is evaluated once, at the call, and its decision journaled with the names it read
and the SHA-256 of the canonical JSON of their values. An error of any kind (a raising
predicate, a wrong type, an answer that is not a bool) fails closed: the human is asked,
and the error is journaled with the request.
"""

from __future__ import annotations

import dataclasses
import decimal
import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sagacity.annotations import Reversibility
from sagacity.errors import ConfigurationError
from sagacity.journal import JsonValue, sha256_hex
from sagacity.journal._canonical import copy_json

__all__ = ["ApprovalRule", "RuleDecision", "approval_rule"]

MAX_RULE_LENGTH = 1000
"""The longest rule text accepted: a rule is a threshold, not a program."""

_MAX_DEPTH = 32
"""How deeply a rule may nest `not` and parentheses."""

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    | (?P<string>"(?:[^"\\]|\\["\\])*"|'(?:[^'\\]|\\['\\])*')
    | (?P<op>==|!=|<=|>=|<|>)
    | (?P<paren>[()])
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "true", "false", "null"}
_LITERALS: dict[str, JsonValue] = {"true": True, "false": False, "null": None}


class RuleError(Exception):
    """The rule could not decide for this input (the call then asks a human)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Compare:
    name: str
    op: str
    literal: JsonValue
    number: decimal.Decimal | None
    """The literal as a number, when it is one."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Not:
    operand: _Node


@dataclasses.dataclass(frozen=True, slots=True)
class _Both:
    op: str  # "and" or "or"
    operands: tuple[_Node, ...]


_Node = _Compare | _Not | _Both


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RuleDecision:
    """What a rule decided for one call, and the record journaled with it."""

    asked: bool
    """Whether a human must approve the call."""
    record: dict[str, JsonValue]
    """The `approval_rule` field of the entry that records the decision."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalRule:
    """A tool's declared answer to "does this call need a human?"."""

    text: str
    """The rule as written, or the predicate's module-qualified name."""
    kind: str
    """`expression` (the rule language) or `callable`."""
    names: tuple[str, ...]
    """The parameters an expression names; empty for a callable."""
    tree: _Node | None = None
    predicate: Callable[[Mapping[str, Any]], object] | None = None

    def decide(self, input: Mapping[str, JsonValue]) -> RuleDecision:
        """Evaluate the rule once on the call's input; any error asks the human."""
        read: dict[str, JsonValue] = {}
        error: str | None = None
        try:
            if self.tree is not None:
                asked = _evaluate(self.tree, input, read, 0)
            else:
                asked = self._ask_predicate(input, read)
        except Exception as raised:  # fail closed: whatever went wrong, a human decides
            asked, error = True, f"{type(raised).__name__}: {raised}"
        record: dict[str, JsonValue] = {
            "rule": self.text,
            "kind": self.kind,
            "asked": asked,
            "read": sorted(read),  # type: ignore[dict-item]  # a list of str is JSON
            "read_sha256": sha256_hex({name: read[name] for name in sorted(read)}),
        }
        if error is not None:
            record["error"] = error
        return RuleDecision(asked=asked, record=record)

    def _ask_predicate(self, input: Mapping[str, JsonValue], read: dict[str, JsonValue]) -> bool:
        assert self.predicate is not None
        answer = self.predicate(_ReadInput(copy_json(dict(input)), read))  # type: ignore[arg-type]
        if inspect.iscoroutine(answer):
            answer.close()  # never awaited: closed so that it does not warn
            raise RuleError("the predicate returned a coroutine; approval= takes a sync callable")
        if not isinstance(answer, bool):
            raise RuleError(f"the predicate returned {answer!r}, not True or False")
        return answer


class _ReadInput(Mapping[str, JsonValue]):
    """The input a predicate is handed: a copy that notes each argument it reads."""

    def __init__(self, values: dict[str, JsonValue], read: dict[str, JsonValue]) -> None:
        self._values = values
        self._read = read

    def __getitem__(self, name: str) -> JsonValue:
        value = self._values[name]
        self._read[name] = value
        return value

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name in self._values:
            self._read[name] = self._values[name]
            return True
        return False

    def __iter__(self) -> Iterator[str]:
        self._read.update(self._values)  # whoever walks the input may read all of it
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def approval_rule(
    declared: object,
    func: Callable[..., Any],
    reversibility: Reversibility,
    name: str,
    where: str,
) -> ApprovalRule | None:
    """Check a tool's `approval=` declaration at wrap time and return it compiled.

    Raises:
        ConfigurationError: The rule is malformed, names a parameter the tool does not
            have, is an async or wrongly shaped callable, or is declared on a tool that
            is not IRREVERSIBLE (such a tool never asks, so a rule could not apply).
    """
    if declared is None:
        return None
    field = f"{where}: tool {name!r} approval="
    if reversibility is not Reversibility.IRREVERSIBLE:
        raise ConfigurationError(
            f"{field}{declared!r}: the tool is {reversibility.name}; it never asks a human, "
            "so a rule that decides when to ask cannot apply. Declare it IRREVERSIBLE or "
            "drop approval="
        )
    if isinstance(declared, str):
        return _compiled(declared, func, field)
    if callable(declared):
        return _callable_rule(declared, field)
    raise ConfigurationError(
        f"{field}{declared!r}: give a rule such as 'amount > 1000' or a sync callable "
        "taking the call's input, not a {type(declared).__name__}"
    )


def _compiled(text: str, func: Callable[..., Any], field: str) -> ApprovalRule:
    if len(text) > MAX_RULE_LENGTH:
        raise ConfigurationError(f"{field}: the rule is longer than {MAX_RULE_LENGTH} characters")
    try:
        tree, names = _Parser(text).parse()
    except RuleError as error:
        raise ConfigurationError(f"{field}{text!r}: {error}") from None
    parameters = inspect.signature(func).parameters
    for named in names:
        if named not in parameters:
            raise ConfigurationError(
                f"{field}{text!r} reads {named!r}, which is not a parameter of the tool "
                f"(it has {', '.join(parameters) or 'none'})"
            )
    return ApprovalRule(text=text, kind="expression", names=names, tree=tree)


def _callable_rule(predicate: Callable[..., Any], field: str) -> ApprovalRule:
    label = getattr(predicate, "__qualname__", type(predicate).__qualname__)
    module = getattr(predicate, "__module__", None)
    text = f"{module}.{label}" if module else label
    if inspect.iscoroutinefunction(predicate) or inspect.iscoroutinefunction(
        getattr(predicate, "__call__", None)  # noqa: B004  # an async __call__ is async too
    ):
        raise ConfigurationError(f"{field}{text}: the predicate is async; give a sync callable")
    try:
        inspect.signature(predicate).bind({})
    except TypeError:
        raise ConfigurationError(
            f"{field}{text}: the predicate must take one argument (the call's input)"
        ) from None
    except ValueError:
        pass  # a builtin without a signature: trusted to take one argument
    return ApprovalRule(text=text, kind="callable", names=(), predicate=predicate)


# -- the language ----------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.names: list[str] = []

    def parse(self) -> tuple[_Node, tuple[str, ...]]:
        if not self.tokens:
            raise RuleError("the rule is empty")
        tree = self._or(0)
        if self.at < len(self.tokens):
            raise RuleError(f"unexpected {self.tokens[self.at][1]!r}")
        return tree, tuple(dict.fromkeys(self.names))

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _next(self, what: str) -> tuple[str, str]:
        token = self._peek()
        if token is None:
            raise RuleError(f"the rule ends where {what} was expected")
        self.at += 1
        return token

    def _or(self, depth: int) -> _Node:
        return self._joined("or", self._and, depth)

    def _and(self, depth: int) -> _Node:
        return self._joined("and", self._not, depth)

    def _joined(self, op: str, operand: Callable[[int], _Node], depth: int) -> _Node:
        operands = [operand(depth)]
        while self._peek() == ("name", op):
            self.at += 1
            operands.append(operand(depth))
        return operands[0] if len(operands) == 1 else _Both(op, tuple(operands))

    def _not(self, depth: int) -> _Node:
        if depth > _MAX_DEPTH:
            raise RuleError(f"the rule nests deeper than {_MAX_DEPTH}")
        token = self._peek()
        if token == ("name", "not"):
            self.at += 1
            return _Not(self._not(depth + 1))
        if token == ("paren", "("):
            self.at += 1
            inner = self._or(depth + 1)
            if self._next("')'") != ("paren", ")"):
                raise RuleError("a '(' is not closed")
            return inner
        return self._comparison()

    def _comparison(self) -> _Node:
        kind, name = self._next("an argument name")
        if kind != "name" or name in _KEYWORDS:
            raise RuleError(f"expected an argument name, found {name!r}")
        kind, op = self._next(f"a comparison after {name!r}")
        if kind != "op":
            raise RuleError(f"expected ==, !=, <, <=, > or >= after {name!r}, found {op!r}")
        kind, text = self._next(f"a literal after {name} {op}")
        self.names.append(name)
        if kind == "number":
            return _Compare(name, op, text, decimal.Decimal(text))
        return _Compare(name, op, _literal(kind, text), None)


def _tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        if text[at:].isspace():
            break
        match = _TOKEN.match(text, at)
        if match is None or match.lastgroup is None:
            at += len(text[at:]) - len(text[at:].lstrip())
            raise RuleError(f"cannot read the rule at character {at + 1}: {text[at : at + 20]!r}")
        found.append((match.lastgroup, match.group(match.lastgroup)))
        at = match.end()
    return found


def _literal(kind: str, text: str) -> JsonValue:
    if kind == "string":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    if kind == "name" and text in _LITERALS:
        return _LITERALS[text]
    raise RuleError(f"expected a number, a quoted string, true, false or null, found {text!r}")


# -- evaluation ------------------------------------------------------------------------


def _evaluate(
    node: _Node, input: Mapping[str, JsonValue], read: dict[str, JsonValue], depth: int
) -> bool:
    if isinstance(node, _Not):
        return not _evaluate(node.operand, input, read, depth + 1)
    if isinstance(node, _Both):
        if node.op == "and":
            return all(_evaluate(n, input, read, depth + 1) for n in node.operands)
        return any(_evaluate(n, input, read, depth + 1) for n in node.operands)
    if node.name not in input:
        raise RuleError(f"the call's input has no argument {node.name!r}")
    value = read[node.name] = input[node.name]
    return _compare(node, value)


def _compare(node: _Compare, value: JsonValue) -> bool:
    literal, op, number = node.literal, node.op, node.number
    is_number = number is not None
    if op in ("==", "!="):
        if number is not None:
            equal = _is_number(value) and _decimal(value) == number
        else:
            equal = type(value) is type(literal) and value == literal
        return equal if op == "==" else not equal
    if number is not None and _is_number(value):
        return _ordered(op, _decimal(value), number)
    if number is None and isinstance(literal, str) and isinstance(value, str):
        return _ordered(op, value, literal)
    raise RuleError(
        f"{node.name} {op} {literal}: cannot order {type(value).__name__} {value!r} against "
        f"{'a number' if is_number else type(literal).__name__}"
    )


def _ordered(op: str, left: Any, right: Any) -> bool:
    if op == "<":
        return bool(left < right)
    if op == "<=":
        return bool(left <= right)
    if op == ">":
        return bool(left > right)
    return bool(left >= right)


def _is_number(value: JsonValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _decimal(value: JsonValue) -> decimal.Decimal:
    number = decimal.Decimal(repr(value))
    if not number.is_finite():
        raise RuleError(f"{value!r} is not a finite number")
    return number
