"""`function_tools` and `as_function_tool` make the tools the SDK makes unwrapped.

Each call is journaled under the model's tool-call id.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Annotated, Any

import pydantic
import pytest
from agents import (
    Agent,
    FunctionTool,
    RunContextWrapper,
    Runner,
    UserError,
    function_tool,
    tool_namespace,
)
from agents.exceptions import ModelBehaviorError, ToolTimeoutError
from agents.testing import function_call
from agents.tool import set_function_tool_failure_error_function
from agents.tool_context import ToolContext

from sagacity import (
    CompensationContext,
    ConfigurationError,
    CurrentCall,
    FailureKind,
    NoSagaError,
    Reversibility,
    Sagacity,
    SagaOutcome,
    SagaStateError,
    compensable,
)
from sagacity.integrations.openai_agents import (
    as_function_tool,
    classify_agents_error,
    function_tools,
)
from tests.integrations.openai_agents._orders import (
    Orders,
    agent_with,
    call,
    phases,
    scripted,
    tool_outputs,
)


class Receipt(pydantic.BaseModel):
    number: str
    total: float


class Desk:
    """Tools of other shapes: context parameters, keyword-only, constraints, models."""

    def __init__(self) -> None:
        self.contexts: list[RunContextWrapper[Any]] = []

    @compensable(by="undo")
    def note(self, ctx: RunContextWrapper[Any], text: str) -> str:
        """Write a note for the user on whose behalf the agent runs."""
        self.contexts.append(ctx)
        return f"noted {text} for {ctx.context['user']}"

    @compensable(by="undo")
    async def tag(self, ctx: ToolContext[Any], label: str) -> str:
        """Tag the conversation."""
        self.contexts.append(ctx)
        return f"tagged {label}"

    @compensable(by="undo")
    def quote(
        self,
        sku: Annotated[str, pydantic.Field(description="The stock unit.", pattern="^SKU-")],
        *,
        express: bool = False,
        notes: list[str] | None = None,
    ) -> dict[str, Any]:
        """Quote a price.

        Args:
            sku: Overridden by the Field description.
            express: Ship the same day.
            notes: Remarks for the warehouse.
        """
        return {"sku": sku, "price": 12.5, "express": express, "notes": notes}

    @compensable(by="undo")
    def receipt(self, number: str) -> Receipt:
        """Print a receipt."""
        return Receipt(number=number, total=37.5)

    @compensable(by="undo", name="restock")
    def restock_items(self, sku: str, qty: int) -> str:
        """Order stock from the supplier."""
        return f"restocked {sku} x{qty}"

    def undo(self, ctx: CompensationContext) -> None:
        """Nothing to undo in these tests."""


@compensable(reversibility=Reversibility.IRREVERSIBLE)
async def publish(slug: str, draft: bool = True) -> str:
    """Publish an article.

    Args:
        slug: The article's address.
        draft: Publish as a draft.
    """
    return f"published {slug}"


@pytest.fixture
def default_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """The thread's default event loop, which `Runner.run_sync` reuses, closed afterwards."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


def sdk_view(tool: FunctionTool) -> tuple[Any, ...]:
    """What the SDK sends the model about a tool."""
    return (tool.name, tool.description, tool.params_json_schema, tool.strict_json_schema)


class TestImportGuard:
    def test_import_error_names_the_extra(self) -> None:
        """Without the SDK installed, importing the adapter says which extra to install."""
        script = textwrap.dedent(
            """
            import sys
            sys.modules["agents"] = None
            try:
                import sagacity.integrations.openai_agents
            except ImportError as error:
                print(error)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )
        assert "pip install 'sagacity[openai-agents]'" in done.stdout


class TestExports:
    def test_public_names(self) -> None:
        """The adapter's public names are pinned: a change here is an API change."""
        import sagacity.integrations.openai_agents as adapter

        assert adapter.__all__ == [
            "REJECTION_SOURCE",
            "RESUMER",
            "OpenAIAgentsResumer",
            "as_function_tool",
            "classify_agents_error",
            "function_tools",
        ]


class TestSchema:
    @pytest.mark.parametrize(
        "name",
        ["reserve_inventory", "charge_card", "ship", "book_courier", "send_wire_transfer"],
    )
    def test_methods_look_as_unwrapped(self, name: str) -> None:
        """Name, description, schema and strictness equal `function_tool` of the bound method."""
        orders = Orders()
        tools = {t.name: t for t in function_tools(Sagacity.from_url("memory://"), orders)}
        assert sdk_view(tools[name]) == sdk_view(function_tool(getattr(orders, name)))

    @pytest.mark.parametrize("name", ["note", "tag", "quote", "receipt"])
    def test_other_shapes_look_as_unwrapped(self, name: str) -> None:
        """Context parameters, keyword-only ones, Field constraints, models: as unwrapped."""
        desk = Desk()
        tools = {t.name: t for t in function_tools(Sagacity.from_url("memory://"), desk)}
        assert sdk_view(tools[name]) == sdk_view(function_tool(getattr(desk, name)))

    def test_plain_function_looks_as_unwrapped(self) -> None:
        """A module-level async IRREVERSIBLE function keeps its schema and docstring."""
        (tool,) = function_tools(Sagacity.from_url("memory://"), publish)
        assert sdk_view(tool) == sdk_view(function_tool(publish))

    def test_options_reach_the_sdk(self) -> None:
        """Options such as `strict_mode=False` give what they give the unwrapped tool."""
        desk = Desk()
        (tool,) = [
            t
            for t in function_tools(Sagacity.from_url("memory://"), desk, strict_mode=False)
            if t.name == "quote"
        ]
        assert sdk_view(tool) == sdk_view(function_tool(desk.quote, strict_mode=False))

    def test_a_declared_name_is_the_tools_name(self) -> None:
        """`compensable(name=...)` names the tool for the model and the journal alike."""
        desk = Desk()
        tools = {t.name: t for t in function_tools(Sagacity.from_url("memory://"), desk)}
        expected = function_tool(desk.restock_items, name_override="restock")
        assert sdk_view(tools["restock"]) == sdk_view(expected)


class TestCalls:
    async def test_call_ids_are_the_models(self) -> None:
        """Journaled call ids and `current_call()` in sync and async tools are the model's ids."""
        sagacity = Sagacity.from_url("memory://")
        orders = Orders()
        model = scripted(
            [
                call("reserve_inventory", "call_abc", sku="SKU-1"),
                call("charge_card", "call_def", amount="9.99", card="4242"),
            ]
        )
        agent = agent_with(model, function_tools(sagacity, orders))

        await sagacity.asaga("ids-1", lambda: Runner.run(agent, "go"))

        assert orders.seen == {
            "reserve_inventory SKU-1": CurrentCall("ids-1", "call_abc", "reserve_inventory"),
            "charge_card 9.99": CurrentCall("ids-1", "call_def", "charge_card"),
        }
        assert sorted(e.call_id or "" for e in sagacity.history("ids-1"))[1:] == [
            "call_abc",
            "call_abc",
            "call_def",
            "call_def",
        ]

    async def test_results_reach_the_model_as_unwrapped(self) -> None:
        """The model is given exactly what the unwrapped tools give it."""
        turns = [
            call("quote", "c1", sku="SKU-1", express=True, notes=["fragile"]),
            call("receipt", "c2", number="R-1"),
            call("note", "c3", text="hi"),
        ]
        desk = Desk()
        plain_model = scripted(turns)
        plain = agent_with(
            plain_model,
            [function_tool(desk.quote), function_tool(desk.receipt), function_tool(desk.note)],
        )
        await Runner.run(plain, "go", context={"user": "ann"})

        sagacity = Sagacity.from_url("memory://")
        wrapped_model = scripted(turns)
        tools = {t.name: t for t in function_tools(sagacity, desk)}
        wrapped = agent_with(wrapped_model, [tools["quote"], tools["receipt"], tools["note"]])
        await sagacity.asaga(
            "results-1", lambda: Runner.run(wrapped, "go", context={"user": "ann"})
        )

        assert tool_outputs(wrapped_model) == tool_outputs(plain_model)
        assert tool_outputs(wrapped_model)["c3"] == "noted hi for ann"

    async def test_context_parameter_is_passed_and_not_journaled(self) -> None:
        """A tool taking the SDK's context gets the ToolContext; the journal holds the arguments."""
        sagacity = Sagacity.from_url("memory://")
        desk = Desk()
        tools = {t.name: t for t in function_tools(sagacity, desk)}
        model = scripted([call("note", "c1", text="hi"), call("tag", "c2", label="vip")])
        agent = agent_with(model, [tools["note"], tools["tag"]])

        await sagacity.asaga("ctx-1", lambda: Runner.run(agent, "go", context={"user": "ann"}))

        # The SDK runs the sync tool on a thread and the async one on the loop: either
        # may start first.
        contexts = [(type(c).__name__, getattr(c, "tool_call_id", None)) for c in desk.contexts]
        assert sorted(contexts) == [("ToolContext", "c1"), ("ToolContext", "c2")]
        intents = [e for e in sagacity.history("ctx-1") if e.phase.value == "INTENT"]
        assert {e.call_id: e.payload["input"] for e in intents} == {
            "c1": {"text": "hi"},
            "c2": {"label": "vip"},
        }

    def test_sync_saga_with_run_sync(self, default_loop: asyncio.AbstractEventLoop) -> None:
        """`Runner.run_sync` inside `Sagacity.saga` journals into the saga too."""
        sagacity = Sagacity.from_url("memory://")
        orders = Orders(ship_fails=True)
        model = scripted(
            [call("reserve_inventory", "c1", sku="SKU-1")], [call("ship", "c2", order_id="o-1")]
        )
        agent = agent_with(model, function_tools(sagacity, orders))

        result = sagacity.saga("sync-1", lambda: Runner.run_sync(agent, "go"))

        assert result.outcome is SagaOutcome.COMPENSATED
        assert orders.log == ["reserve SKU-1 x1", "release res-SKU-1-1"]


class TestFailurePassesThrough:
    async def test_the_sdk_gets_the_tools_own_exception(self) -> None:
        """The SDK's failure formatter receives the very exception the tool raised."""
        sagacity = Sagacity.from_url("memory://")
        orders = Orders(ship_fails=True)
        received: list[Exception] = []

        def explain(ctx: RunContextWrapper[Any], error: Exception) -> str:
            received.append(error)
            return f"shipping failed: {error}"

        model = scripted([call("ship", "c1", order_id="o-1")])
        tools = function_tools(sagacity, orders, failure_error_function=explain)

        await sagacity.asaga("fail-1", lambda: Runner.run(agent_with(model, tools), "go"))

        assert received == orders.errors
        assert received[0] is orders.errors[0]
        assert tool_outputs(model) == {"c1": "shipping failed: courier down"}

    async def test_invalid_arguments_never_reach_the_journal(self) -> None:
        """Arguments the SDK rejects before calling the tool journal nothing."""
        sagacity = Sagacity.from_url("memory://")
        model = scripted([call("reserve_inventory", "c1", sku="SKU-1", qty="many")])
        tools = function_tools(sagacity, Orders())

        result = await sagacity.asaga("bad-1", lambda: Runner.run(agent_with(model, tools), "go"))

        assert result.outcome is SagaOutcome.COMPLETED
        assert phases(sagacity.history("bad-1")) == [("ENDED", None, None)]


class TestStreamedRuns:
    async def test_a_streamed_run_consumed_inside_the_work_is_journaled(self) -> None:
        """`Runner.run_streamed` consumed inside the work journals its calls like `run`."""
        sagacity = Sagacity.from_url("memory://")
        orders = Orders()
        agent = agent_with(
            scripted([call("reserve_inventory", "c1", sku="SKU-1")]),
            function_tools(sagacity, orders),
        )

        async def work() -> None:
            run = Runner.run_streamed(agent, "go")
            async for _ in run.stream_events():
                pass

        result = await sagacity.asaga("stream-1", work)

        assert result.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["reserve SKU-1 x1"]
        assert phases(sagacity.history("stream-1")) == [
            ("INTENT", "reserve_inventory", "c1"),
            ("EXECUTED", "reserve_inventory", "c1"),
            ("ENDED", None, None),
        ]

    async def test_a_call_of_a_stream_left_unconsumed_is_refused(self) -> None:
        """A call that starts after the work returned raises SagaStateError and does not run.

        The SDK hands the refusal to the model as a tool error; the saga has ended.
        """
        sagacity = Sagacity.from_url("memory://")
        orders = Orders()
        received: list[Exception] = []

        def explain(context: RunContextWrapper[Any], error: Exception) -> str:
            received.append(error)
            return "refused"

        agent = agent_with(
            scripted([call("reserve_inventory", "c1", sku="SKU-1")]),
            function_tools(sagacity, orders, failure_error_function=explain),
        )

        result = await sagacity.asaga("stream-1", lambda: Runner.run_streamed(agent, "go"))
        async for _ in result.value.stream_events():
            pass

        assert result.outcome is SagaOutcome.COMPLETED
        assert orders.log == []
        assert [type(error) for error in received] == [SagaStateError]
        assert "Consume a streamed run inside the work" in str(received[0])
        assert phases(sagacity.history("stream-1")) == [("ENDED", None, None)]

    async def test_an_irreversible_call_of_a_stream_left_unconsumed_fails_the_run(
        self,
    ) -> None:
        """The approval policy of a call after the work returned refuses: the run fails.

        Nothing is journaled after ENDED and no request is stored.
        """
        sagacity = Sagacity.from_url("memory://")
        orders = Orders()
        agent = agent_with(
            scripted([call("delete_account", "c1", account="acct-1")]),
            function_tools(sagacity, orders),
        )

        result = await sagacity.asaga("stream-1", lambda: Runner.run_streamed(agent, "go"))
        with pytest.raises(UserError) as raised:
            async for _ in result.value.stream_events():
                pass

        assert isinstance(raised.value.__cause__, SagaStateError)
        assert "saga 'stream-1'" in str(raised.value.__cause__)
        assert orders.calls["delete_account"] == 0
        assert phases(sagacity.history("stream-1")) == [("ENDED", None, None)]
        assert sagacity.pending("stream-1") == []


class TestOutsideSaga:
    async def test_compensable_tool_runs_straight_through(self) -> None:
        """Without a saga, a compensable tool runs and nothing is journaled."""
        sagacity = Sagacity.from_url("memory://")
        orders = Orders()
        model = scripted([call("reserve_inventory", "c1", sku="SKU-1")])

        result = await Runner.run(agent_with(model, function_tools(sagacity, orders)), "go")

        assert result.final_output == "done"
        assert orders.log == ["reserve SKU-1 x1"]
        assert sagacity.journal.list_sagas() == []

    async def test_irreversible_tool_fails_the_run(self) -> None:
        """Outside a saga an IRREVERSIBLE tool fails the run (NoSagaError) and does not run."""
        sagacity = Sagacity.from_url("memory://")
        orders = Orders()
        model = scripted([call("send_wire_transfer", "c1", amount="1.00", to="ACME")])

        with pytest.raises(UserError) as raised:
            await Runner.run(agent_with(model, function_tools(sagacity, orders)), "go")

        assert isinstance(raised.value.__cause__, NoSagaError)
        assert orders.calls["send_wire_transfer"] == 0


class TestConfiguration:
    def test_irreversible_tool_refuses_a_needs_approval_option(self) -> None:
        """Sagacity decides approval for IRREVERSIBLE tools; passing one is an error."""
        sagacity = Sagacity.from_url("memory://")
        with pytest.raises(ConfigurationError, match="'publish' is IRREVERSIBLE"):
            function_tools(sagacity, publish, needs_approval=False)

    @pytest.mark.parametrize("enabled", [True, False])
    async def test_irreversible_tool_keeps_its_own_is_enabled(self, enabled: bool) -> None:
        """An IRREVERSIBLE tool's `is_enabled` (a flag or a callable) still decides.

        sagacity's rejection watch runs first and answers what the tool's own option says.
        """
        sagacity = Sagacity.from_url("memory://")
        wire = {t.name: t for t in sagacity.wrap(Orders())}["send_wire_transfer"]
        agent = Agent(name="orders")
        asked: list[str] = []

        async def only_when(ctx: RunContextWrapper[Any], agent: Any) -> bool:
            asked.append(agent.name)
            return enabled

        for option in (enabled, only_when):
            built = as_function_tool(wire, is_enabled=option)
            assert callable(built.is_enabled)
            assert await built.is_enabled(RunContextWrapper(None), agent) is enabled
        assert asked == ["orders"]

    def test_compensable_tool_keeps_an_sdk_approval(self) -> None:
        """On a compensable tool `needs_approval` is the SDK's own, passed through."""
        sagacity = Sagacity.from_url("memory://")
        ship = {t.name: t for t in sagacity.wrap(Orders())}["ship"]
        assert as_function_tool(ship, needs_approval=True).needs_approval is True


class TestSagaToolSources:
    async def test_saga_tools_from_wrap_are_accepted_in_place(self) -> None:
        """SagaTools already wrapped by the same Sagacity are taken as they are, in order.

        Other sources given with them are wrapped; the calls are journaled as usual.
        """
        sagacity = Sagacity.from_url("memory://")
        orders = Orders()
        wrapped = sagacity.wrap(orders)

        tools = function_tools(sagacity, publish, *wrapped)

        assert [t.name for t in tools] == ["publish", *[t.name for t in wrapped]]
        model = scripted([call("reserve_inventory", "c1", sku="SKU-1")])
        result = await sagacity.asaga("src-1", lambda: Runner.run(agent_with(model, tools), "go"))
        assert result.outcome is SagaOutcome.COMPLETED
        assert orders.log == ["reserve SKU-1 x1"]
        assert phases(sagacity.history("src-1")) == [
            ("INTENT", "reserve_inventory", "c1"),
            ("EXECUTED", "reserve_inventory", "c1"),
            ("ENDED", None, None),
        ]

    def test_a_saga_tool_of_another_sagacity_is_refused(self) -> None:
        """A SagaTool wrapped by another Sagacity is refused, naming the tool."""
        (foreign,) = Sagacity.from_url("memory://").wrap(publish)

        with pytest.raises(ConfigurationError, match="tool 'publish' was wrapped by another"):
            function_tools(Sagacity.from_url("memory://"), foreign)

    def test_a_tool_given_twice_is_refused(self) -> None:
        """Two tools of one name are refused, as `Sagacity.wrap` refuses them."""
        sagacity = Sagacity.from_url("memory://")
        (tool,) = sagacity.wrap(publish)

        with pytest.raises(ConfigurationError, match="two tools are named 'publish'"):
            function_tools(sagacity, tool, publish)


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire_abroad(to: str) -> str:
    """Wire money to a foreign bank."""
    raise RuntimeError("the bank is down")


class TestCopies:
    async def test_a_copy_handles_failures_with_its_own_failure_function(self) -> None:
        """A copy of an IRREVERSIBLE tool (as `tool_namespace` makes) fails as the copy.

        The copy's failure function, not the original's, tells the model; the failure
        is journaled and the saga compensates.
        """
        sagacity = Sagacity.from_url("memory://")
        (tool,) = sagacity.wrap(wire_abroad)
        original = as_function_tool(tool, failure_error_function=lambda c, e: f"original: {e}")
        copied = copy.copy(original)
        set_function_tool_failure_error_function(copied, lambda c, e: f"copy: {e}")
        model = scripted([call("wire_abroad", "c1", to="ACME")])
        agent = agent_with(model, [copied])
        paused = await sagacity.asaga("copy-1", lambda: Runner.run(agent, "pay"))
        state = paused.value.to_state()
        state.approve(paused.value.interruptions[0])
        sagacity.approve("copy-1", approver="alice")

        result = await sagacity.aresume_saga("copy-1", lambda: Runner.run(agent, state))

        assert tool_outputs(model) == {"c1": "copy: the bank is down"}
        assert result.outcome is SagaOutcome.COMPENSATED
        assert [phase for phase, *_ in phases(sagacity.history("copy-1"))] == [
            "AWAITING_APPROVAL",
            "APPROVED",
            "INTENT",
            "FAILED",
            "ENDED",
        ]

    async def test_a_namespaced_copy_still_asks_sagacity(self) -> None:
        """`tool_namespace` copies of an IRREVERSIBLE tool keep sagacity's approval policy."""
        sagacity = Sagacity.from_url("memory://")
        (copied,) = tool_namespace(
            name="payments",
            description="Payment tools.",
            tools=[as_function_tool(sagacity.wrap(wire_abroad)[0])],
        )
        model = scripted(
            [function_call("wire_abroad", {"to": "ACME"}, call_id="c1", namespace="payments")]
        )

        paused = await sagacity.asaga(
            "copy-2", lambda: Runner.run(agent_with(model, [copied]), "pay")
        )

        assert paused.outcome is SagaOutcome.AWAITING_APPROVAL
        (request,) = paused.pending
        assert (request.call_id, request.input) == ("c1", {"to": "ACME"})


class TestClassifier:
    @pytest.mark.parametrize(
        ("error", "kind"),
        [
            (
                ToolTimeoutError(tool_name="lookup", timeout_seconds=1.0),
                FailureKind.OUTCOME_UNKNOWN,
            ),
            (ModelBehaviorError("bad"), None),
            (RuntimeError("boom"), None),
        ],
    )
    def test_nested_timeouts_are_unknown_outcomes(
        self, error: BaseException, kind: FailureKind | None
    ) -> None:
        """A nested tool's timeout leaves the outcome unknown; other errors are not classified."""
        assert classify_agents_error(error) is kind

    def test_installed_on_the_tools_sagacity(self) -> None:
        """Making a tool installs the classifier: a ToolTimeoutError journals unknown."""
        sagacity = Sagacity.from_url("memory://")
        as_function_tool(sagacity.wrap(publish)[0])
        error = ToolTimeoutError(tool_name="lookup", timeout_seconds=1.0)
        assert sagacity.classify(error) is FailureKind.OUTCOME_UNKNOWN
