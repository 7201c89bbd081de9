"""Declarations (`compensable`, `compensation`, `Reversibility`) and `Sagacity.wrap`.

Declarations are checked at wrap time; SagaTools look exactly like the tools they wrap.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import pytest

from sagacity import (
    CompensationContext,
    ConfigurationError,
    Reversibility,
    SagaOutcome,
    SagaTool,
    compensable,
    compensation,
)
from sagacity.annotations import declaration_of
from sagacity.testing import memory_sagacity
from tests._shop import Shop, tools_of

CANCELLED: list[Any] = []


@compensable(by="cancel_booking")
def book_room(hotel: str, nights: int = 1) -> str:
    """Book a hotel room."""
    return f"bk-{hotel}-{nights}"


def cancel_booking(ctx: CompensationContext) -> None:
    CANCELLED.append((ctx.tool_name, ctx.input, ctx.result))


def refund_taxi() -> None:
    CANCELLED.append("taxi refunded")


@compensable(by=refund_taxi)
def order_taxi(to: str) -> str:
    """Order a taxi."""
    return f"taxi-{to}"


@compensable(by="no_such_function")
def rent_car(model: str) -> str:
    """Rent a car."""
    return model


class Fails:
    @compensable(by="undo")
    def step(self) -> str:
        raise RuntimeError("step failed")

    def undo(self) -> None:
        raise AssertionError("a step that failed is never compensated")


class TestDeclarations:
    def test_compensable_returns_the_function_unchanged(self) -> None:
        """`compensable` only records a declaration: the function still runs as written."""
        assert book_room("Ritz", 2) == "bk-Ritz-2"
        declaration = declaration_of(book_room)
        assert declaration is not None
        assert declaration.by == "cancel_booking"
        assert declaration.reversibility is Reversibility.COMPENSATABLE
        assert declaration.name is None

    def test_compensation_is_a_marker(self) -> None:
        """`compensation` returns the function itself, callable as before."""

        def undo() -> str:
            return "undone"

        assert compensation(undo) is undo
        assert undo() == "undone"

    def test_reversibility_members(self) -> None:
        """Three levels, COMPENSATABLE the default."""
        assert [r.value for r in Reversibility] == ["REVERSIBLE", "COMPENSATABLE", "IRREVERSIBLE"]

    def test_a_declaration_is_read_through_a_bound_method(self) -> None:
        """The declaration on a method is visible on the instance's bound method."""
        declaration = declaration_of(Shop().send_wire_transfer)
        assert declaration is not None
        assert declaration.reversibility is Reversibility.IRREVERSIBLE
        assert declaration.by is None


class TestWrapValidation:
    def test_missing_compensation_method_names_class_tool_and_method(self) -> None:
        """A `by` that names nothing fails at wrap time, naming class, tool and method."""

        class Warehouse:
            @compensable(by="unreserve")
            def reserve(self, sku: str) -> str:
                return sku

        with pytest.raises(ConfigurationError) as caught:
            memory_sagacity().wrap(Warehouse())
        message = str(caught.value)
        assert "Warehouse" in message
        assert "'reserve'" in message
        assert "'unreserve'" in message

    def test_compensation_with_two_parameters_is_refused(self) -> None:
        """A compensation must take no argument or one context: two is a wrong signature."""

        class Warehouse:
            @compensable(by="release")
            def reserve(self, sku: str) -> str:
                return sku

            def release(self, ctx: CompensationContext, reason: str) -> None: ...

        with pytest.raises(
            ConfigurationError, match=r"one CompensationContext, not \(ctx, reason\)"
        ):
            memory_sagacity().wrap(Warehouse())

    def test_compensation_with_a_required_keyword_is_refused(self) -> None:
        """A required keyword-only parameter could never be passed: refused."""

        class Warehouse:
            @compensable(by="release")
            def reserve(self, sku: str) -> str:
                return sku

            def release(self, *, ctx: CompensationContext) -> None: ...

        with pytest.raises(ConfigurationError, match="must take no arguments"):
            memory_sagacity().wrap(Warehouse())

    def test_missing_by_is_refused_unless_irreversible(self) -> None:
        """A COMPENSATABLE (or REVERSIBLE) tool without `by` fails at wrap time."""

        class Mailer:
            @compensable
            def send(self, to: str) -> None: ...

        class Cache:
            @compensable(reversibility=Reversibility.REVERSIBLE)
            def put(self, key: str) -> None: ...

        with pytest.raises(ConfigurationError, match="'send' is COMPENSATABLE but declares no"):
            memory_sagacity().wrap(Mailer())
        with pytest.raises(ConfigurationError, match="'put' is REVERSIBLE but declares no"):
            memory_sagacity().wrap(Cache())

    def test_irreversible_with_a_compensation_is_refused(self) -> None:
        """An IRREVERSIBLE tool that names an undo contradicts itself."""

        class Bank:
            @compensable(by="recall", reversibility=Reversibility.IRREVERSIBLE)
            def wire(self) -> None: ...

            def recall(self) -> None: ...

        with pytest.raises(ConfigurationError, match="IRREVERSIBLE and also names"):
            memory_sagacity().wrap(Bank())

    def test_two_tools_with_one_name_in_one_wrap(self) -> None:
        """Two tools of one name, from two objects in one call, are refused."""

        class A:
            @compensable(by="undo")
            def reserve(self) -> None: ...

            def undo(self) -> None: ...

        class B(A):
            pass

        with pytest.raises(ConfigurationError, match="two tools are named 'reserve'"):
            memory_sagacity().wrap(A(), B())

    def test_two_tools_with_one_name_across_wraps(self) -> None:
        """A later wrap may not reuse a name that an earlier wrap gave another tool."""
        sagacity = memory_sagacity()
        sagacity.wrap(Shop())

        class OtherShop:
            @compensable(by="undo")
            def reserve_inventory(self, sku: str, qty: int) -> str:
                return "other"

            def undo(self) -> None: ...

        with pytest.raises(ConfigurationError, match="two tools are named 'reserve_inventory'"):
            sagacity.wrap(OtherShop())

    def test_saga_tools_are_taken_in_their_place(self) -> None:
        """A SagaTool of this Sagacity comes back as itself; one of another is refused."""
        sagacity = memory_sagacity()
        (wire,) = [t for t in sagacity.wrap(Shop()) if t.name == "send_wire_transfer"]

        @compensable(reversibility=Reversibility.IRREVERSIBLE)
        def close_account(account: str) -> None: ...

        tools = sagacity.wrap(wire, close_account)
        assert tools[0] is wire
        assert [t.name for t in tools] == ["send_wire_transfer", "close_account"]
        with pytest.raises(ConfigurationError, match="wrapped by another Sagacity"):
            memory_sagacity().wrap(wire)
        with pytest.raises(ConfigurationError, match="two tools are named 'send_wire_transfer'"):
            sagacity.wrap(wire, wire)

    def test_another_instance_of_the_same_class_replaces_the_tool(self) -> None:
        """Wrapping a second instance (objects built per request) replaces the first's tools."""
        sagacity = memory_sagacity()
        first, second = Shop(), Shop()
        sagacity.wrap(first)
        tools = {tool.name: tool for tool in sagacity.wrap(second)}
        assert sagacity.tool("reserve_inventory") is tools["reserve_inventory"]
        assert getattr(tools["reserve_inventory"].func, "__self__", None) is second

    def test_name_override_collision(self) -> None:
        """`compensable(name=...)` takes part in the one-name-one-tool rule."""

        class Twice:
            @compensable(by="undo", name="act")
            def first(self) -> None: ...

            @compensable(by="undo", name="act")
            def second(self) -> None: ...

            def undo(self) -> None: ...

        with pytest.raises(ConfigurationError, match="two tools are named 'act'"):
            memory_sagacity().wrap(Twice())

    def test_wrapping_the_same_object_twice_is_allowed(self) -> None:
        """Wrapping the very same tools again is not a name clash."""
        sagacity = memory_sagacity()
        shop = Shop()
        assert [t.name for t in sagacity.wrap(shop)] == [t.name for t in sagacity.wrap(shop)]

    def test_a_class_an_undecorated_function_and_an_empty_object_are_refused(self) -> None:
        """wrap() wants instances with tools, or decorated functions."""
        sagacity = memory_sagacity()
        with pytest.raises(ConfigurationError, match="class Shop; pass an instance"):
            sagacity.wrap(Shop)
        with pytest.raises(ConfigurationError, match="is not declared"):
            sagacity.wrap(cancel_booking)
        with pytest.raises(ConfigurationError, match="object has no @compensable methods"):
            sagacity.wrap(object())

    def test_module_function_missing_compensation_names_the_module(self) -> None:
        """For a plain function, `by` names a function of its module."""
        with pytest.raises(ConfigurationError) as caught:
            memory_sagacity().wrap(rent_car)
        assert f"module {__name__}" in str(caught.value)
        assert "'no_such_function'" in str(caught.value)

    def test_nothing_is_called_at_wrap_time(self) -> None:
        """Wrapping calls neither the tools nor their compensations."""
        shop = Shop()
        memory_sagacity().wrap(shop)
        assert shop.log == []


class TestWrapSources:
    def test_object_methods_become_tools_sorted_by_name(self) -> None:
        """Every `compensable` method of an object becomes a tool; compensations do not."""
        tools = memory_sagacity().wrap(Shop())
        assert [(t.name, t.reversibility) for t in tools] == [
            ("charge_card", Reversibility.COMPENSATABLE),
            ("reserve_inventory", Reversibility.COMPENSATABLE),
            ("send_wire_transfer", Reversibility.IRREVERSIBLE),
            ("ship", Reversibility.COMPENSATABLE),
        ]

    def test_plain_function_with_module_compensation(self) -> None:
        """A function's `by` string finds the module's function, which undoes it."""
        CANCELLED.clear()
        sagacity = memory_sagacity()
        (booking,) = sagacity.wrap(book_room)
        (step,) = sagacity.wrap(Fails())

        def work() -> None:
            booking("Ritz")
            step()

        result = sagacity.saga("trip-1", work)
        assert result.outcome is SagaOutcome.COMPENSATED
        assert CANCELLED == [("book_room", {"hotel": "Ritz", "nights": 1}, "bk-Ritz-1")]

    def test_by_given_a_module_callable(self) -> None:
        """`by=` may be the compensation itself, here a function taking no argument."""
        CANCELLED.clear()
        sagacity = memory_sagacity()
        (taxi,) = sagacity.wrap(order_taxi)
        (step,) = sagacity.wrap(Fails())

        def work() -> None:
            taxi("airport")
            step()

        assert sagacity.saga("trip-2", work).outcome is SagaOutcome.COMPENSATED
        assert CANCELLED == ["taxi refunded"]

    def test_by_given_a_method_of_the_class_body_binds_to_the_instance(self) -> None:
        """`by=release` written in the class body runs bound to the wrapped instance."""

        class Locker:
            def __init__(self) -> None:
                self.released: list[str] = []

            def release(self, ctx: CompensationContext) -> None:
                self.released.append(str(ctx.result))

            @compensable(by=release)
            def lock(self, door: str) -> str:
                return f"lock-{door}"

        locker = Locker()
        sagacity = memory_sagacity()
        (lock,) = sagacity.wrap(locker)
        (step,) = sagacity.wrap(Fails())

        def work() -> None:
            lock("front")
            step()

        assert sagacity.saga("doors", work).outcome is SagaOutcome.COMPENSATED
        assert locker.released == ["lock-front"]

    def test_a_bound_method_alone_finds_its_class_compensation(self) -> None:
        """A bound method passed alone resolves `by` on its own instance."""
        shop = Shop()
        sagacity = memory_sagacity()
        (reserve,) = sagacity.wrap(shop.reserve_inventory)
        (step,) = sagacity.wrap(Fails())

        def work() -> None:
            reserve("SKU-9")
            step()

        assert sagacity.saga("bound", work).outcome is SagaOutcome.COMPENSATED
        assert shop.log == ["reserve SKU-9", "release res-SKU-9-1"]

    def test_reversible_compensates_like_compensatable_and_is_recorded(self) -> None:
        """REVERSIBLE runs its undo like COMPENSATABLE; the INTENT records which it was."""
        undone: list[str] = []

        class Cache:
            @compensable(by="evict", reversibility=Reversibility.REVERSIBLE)
            def put(self, key: str) -> str:
                return key

            def evict(self, ctx: CompensationContext) -> None:
                undone.append(str(ctx.result))

        sagacity = memory_sagacity()
        (put,) = sagacity.wrap(Cache())
        (step,) = sagacity.wrap(Fails())

        def work() -> None:
            put("k1")
            step()

        assert sagacity.saga("cache", work).outcome is SagaOutcome.COMPENSATED
        assert undone == ["k1"]
        intent = sagacity.history("cache")[0]
        assert intent.payload == {"input": {"key": "k1"}, "reversibility": "REVERSIBLE"}


class TestSagaToolShape:
    def test_keeps_name_docstring_and_signature(self) -> None:
        """A SagaTool shows the tool's `__name__`, docstring and signature (without self)."""
        shop = Shop()
        tool = tools_of(memory_sagacity(), shop)["reserve_inventory"]
        assert tool.__name__ == "reserve_inventory"
        assert tool.__doc__ == Shop.reserve_inventory.__doc__
        assert tool.__wrapped__ == shop.reserve_inventory
        signature = inspect.signature(tool)
        assert signature == inspect.signature(shop.reserve_inventory)
        assert str(signature) == "(sku: 'str', qty: 'int' = 1) -> 'str'"
        assert list(signature.parameters) == ["sku", "qty"]
        assert tool.signature == signature

    def test_name_description_reversibility(self) -> None:
        """`.name`, `.description` (the cleaned docstring) and `.reversibility`."""
        tool = tools_of(memory_sagacity(), Shop())["send_wire_transfer"]
        assert tool.name == "send_wire_transfer"
        assert tool.description == "Wire money to another bank.\n\nOnce sent it cannot be recalled."
        assert tool.reversibility is Reversibility.IRREVERSIBLE
        assert repr(tool) == "<SagaTool send_wire_transfer IRREVERSIBLE>"

    def test_plain_function_keeps_its_full_signature(self) -> None:
        """A plain function's signature is kept whole."""
        (tool,) = memory_sagacity().wrap(book_room)
        assert inspect.signature(tool) == inspect.signature(book_room)
        assert tool.__doc__ == "Book a hotel room."
        assert tool.__module__ == __name__

    def test_name_override(self) -> None:
        """`compensable(name=...)` renames the tool as agents see it."""

        class Payments:
            @compensable(by="undo", name="pay")
            def pay_invoice_now(self, invoice: str) -> str:
                return invoice

            def undo(self) -> None: ...

        (tool,) = memory_sagacity().wrap(Payments())
        assert tool.name == "pay"
        assert tool.__name__ == "pay_invoice_now"

    def test_sync_stays_sync(self) -> None:
        """A sync tool's call returns its value, not a coroutine."""
        tool = tools_of(memory_sagacity(), Shop())["reserve_inventory"]
        assert tool.is_async is False
        assert inspect.iscoroutinefunction(tool) is False
        assert tool("SKU-1") == "res-SKU-1-1"

    async def test_async_stays_async(self) -> None:
        """An async tool's call returns a coroutine; awaiting it gives the result."""

        class Mail:
            @compensable(by="recall")
            async def send(self, to: str) -> str:
                """Send a mail."""
                return f"mail-{to}"

            async def recall(self) -> None: ...

        (tool,) = memory_sagacity().wrap(Mail())
        assert tool.is_async is True
        # inspect.markcoroutinefunction exists from Python 3.12 on.
        assert inspect.iscoroutinefunction(tool) is (sys.version_info >= (3, 12))
        pending = tool("ann")
        assert inspect.iscoroutine(pending)
        assert await pending == "mail-ann"
        assert await tool("bob") == "mail-bob"

    def test_is_a_saga_tool(self) -> None:
        """wrap() returns SagaTool instances, in a list."""
        tools = memory_sagacity().wrap(Shop(), book_room)
        assert isinstance(tools, list)
        assert all(isinstance(tool, SagaTool) for tool in tools)
        assert tools[-1].name == "book_room"
