"""The LangChain tools: what the model sees, the call id, injected arguments, control flow."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphInterrupt, ParentCommand
from langgraph.prebuilt import InjectedState
from langgraph.types import Command, interrupt

from sagacity import (
    CompensationContext,
    ConfigurationError,
    FailureKind,
    NoSagaError,
    Sagacity,
    SagaOutcome,
    compensable,
    compensation,
    current_call,
)
from sagacity.integrations.langchain import (
    SagaStructuredTool,
    as_langchain_tool,
    classify_langgraph_error,
    langchain_tools,
)
from tests.integrations.langchain._agents import (
    AsyncOrderTools,
    OrderTools,
    RuntimeTools,
    calls,
    prebuilt_agent,
    scripted,
    tool_call,
)


@compensable(by="forget_note")
def write_note(
    text: str, tags: list[str] | None = None, *, priority: Literal["low", "high"] = "low"
) -> str:
    """Write a note on the order.

    Args:
        text: What the note says.
        tags: Labels to file it under.
        priority: How soon someone should read it.
    """
    call = current_call()
    return f"note by {None if call is None else call.call_id}: {text}"


@compensation
def forget_note(ctx: CompensationContext) -> None:
    pass


@compensable(by="forget_note", name="post_note")
async def post_note_later(text: str) -> str:
    """Post a note once the order ships."""
    return text


class InjectedTools:
    """A tool that takes every kind of argument LangGraph injects."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    @compensable(by="undo")
    def annotate(
        self,
        text: str,
        tool_call_id: Annotated[str, InjectedToolCallId],
        messages: Annotated[list[Any], InjectedState("messages")],
        config: RunnableConfig,
        level: int = 1,
    ) -> str:
        """Annotate the order."""
        self.seen = {
            "tool_call_id": tool_call_id,
            "messages": len(messages),
            "config": isinstance(config, dict),
        }
        return f"annotated: {text}"

    @compensation
    def undo(self) -> None:
        pass


def reference_of(source: Callable[..., Any], **options: Any) -> StructuredTool:
    """What LangChain makes of the undecorated function."""
    if inspect.iscoroutinefunction(source):
        return StructuredTool.from_function(coroutine=source, **options)
    return StructuredTool.from_function(func=source, **options)


CASES: dict[str, tuple[Callable[[], Any], Callable[[Any], Callable[..., Any]], dict[str, Any]]] = {
    "sync method": (OrderTools, lambda o: o.reserve_inventory, {}),
    "async method": (AsyncOrderTools, lambda o: o.charge_card, {}),
    "function, parsed docstring": (lambda: write_note, lambda f: f, {"parse_docstring": True}),
    "renamed async function": (lambda: post_note_later, lambda f: f, {"name": "post_note"}),
    "injected runtime": (RuntimeTools, lambda o: o.pay_invoice, {}),
    "injected id, state, config": (InjectedTools, lambda o: o.annotate, {}),
}


class TestWhatTheModelSees:
    @pytest.mark.parametrize("case", sorted(CASES))
    def test_name_description_and_schema_are_langchains_own(self, case: str) -> None:
        """Name, description, schemas and OpenAI tool are what LangChain makes unwrapped."""
        make_source, pick, options = CASES[case]
        source = make_source()
        sagacity = Sagacity.from_url("memory://")
        reference = reference_of(pick(source), **options)
        tool_options = {k: v for k, v in options.items() if k != "name"}

        by_name = {t.name: t for t in langchain_tools(sagacity, source, **tool_options)}
        wrapped = by_name[reference.name]

        assert isinstance(wrapped, SagaStructuredTool)
        assert wrapped.name == reference.name
        assert wrapped.description == reference.description
        assert list(wrapped.args_schema.model_fields) == list(reference.args_schema.model_fields)
        assert wrapped.args == reference.args
        assert (
            wrapped.tool_call_schema.model_json_schema()
            == reference.tool_call_schema.model_json_schema()
        )
        assert convert_to_openai_tool(wrapped) == convert_to_openai_tool(reference)

    def test_a_sync_tool_stays_sync_and_an_async_tool_stays_async(self) -> None:
        """A sync tool gets `func` only, an async tool `coroutine` only, as LangChain would."""
        sagacity = Sagacity.from_url("memory://")
        (sync_tool,) = langchain_tools(sagacity, write_note)
        (async_tool,) = langchain_tools(sagacity, post_note_later)

        assert isinstance(sync_tool, StructuredTool)
        assert isinstance(async_tool, StructuredTool)
        assert (sync_tool.func is not None, sync_tool.coroutine) == (True, None)
        assert (async_tool.func, async_tool.coroutine is not None) == (None, True)

    def test_options_reach_the_tool(self) -> None:
        """Options are LangChain's own: handle_tool_error and return_direct are set on the tool."""
        sagacity = Sagacity.from_url("memory://")
        (tool,) = langchain_tools(sagacity, write_note, handle_tool_error=True, return_direct=True)

        assert (tool.handle_tool_error, tool.return_direct) == (True, True)

    def test_as_langchain_tool_wraps_one_saga_tool(self) -> None:
        """`as_langchain_tool` turns one SagaTool, as `Sagacity.wrap` returns it, into a tool."""
        sagacity = Sagacity.from_url("memory://")
        (saga_tool,) = sagacity.wrap(write_note)

        tool = as_langchain_tool(saga_tool)

        assert tool.saga_tool.name == "write_note"
        assert tool.name == "write_note"


class TestSagaToolSources:
    def test_saga_tools_from_wrap_are_accepted_in_place(self) -> None:
        """SagaTools already wrapped by the same Sagacity are taken as they are, in order.

        Other sources given with them are wrapped; the calls are journaled as usual.
        """
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools()
        wrapped = sagacity.wrap(shop)

        tools = langchain_tools(sagacity, write_note, *wrapped)

        assert [t.name for t in tools] == ["write_note", *[t.name for t in wrapped]]
        by_name = {t.name: t for t in tools}
        result = sagacity.saga(
            "order-1",
            lambda: by_name["reserve_inventory"].invoke(
                tool_call("reserve_inventory", "call-1", sku="A", qty=2)
            ),
        )
        assert result.value.content == "res-A-2"
        assert shop.ran == [("reserve_inventory", ("A", 2))]
        assert [(e.phase.name, e.call_id) for e in sagacity.history("order-1")][:2] == [
            ("INTENT", "call-1"),
            ("EXECUTED", "call-1"),
        ]

    def test_a_saga_tool_of_another_sagacity_is_refused(self) -> None:
        """A SagaTool wrapped by another Sagacity is refused, naming the tool."""
        other = Sagacity.from_url("memory://")
        (foreign,) = other.wrap(write_note)

        with pytest.raises(ConfigurationError, match="tool 'write_note' was wrapped by another"):
            langchain_tools(Sagacity.from_url("memory://"), foreign)

    def test_a_tool_given_twice_is_refused(self) -> None:
        """Two tools of one name are refused, as `Sagacity.wrap` refuses them."""
        sagacity = Sagacity.from_url("memory://")
        (tool,) = sagacity.wrap(write_note)

        with pytest.raises(ConfigurationError, match="two tools are named 'write_note'"):
            langchain_tools(sagacity, tool, write_note)


class TestCallId:
    def test_the_tool_call_id_is_the_call_id(self) -> None:
        """The framework's tool_call_id is journaled and is what `current_call()` returns."""
        sagacity = Sagacity.from_url("memory://")
        (tool,) = langchain_tools(sagacity, write_note)

        result = sagacity.saga(
            "notes-1", lambda: tool.invoke(tool_call("write_note", "call-7", text="fragile"))
        )

        assert isinstance(result.value, ToolMessage)
        assert (result.value.tool_call_id, result.value.content) == (
            "call-7",
            "note by call-7: fragile",
        )
        assert [(e.phase.name, e.call_id) for e in sagacity.history("notes-1")] == [
            ("INTENT", "call-7"),
            ("EXECUTED", "call-7"),
            ("ENDED", None),
        ]

    async def test_the_tool_call_id_reaches_sync_and_async_tools_under_ainvoke(self) -> None:
        """Under `ainvoke` both a sync tool (in a thread) and an async one journal the id."""
        sagacity = Sagacity.from_url("memory://")
        note, post = langchain_tools(sagacity, write_note, post_note_later)

        async def work() -> None:
            await note.ainvoke(tool_call("write_note", "call-1", text="a"))
            await post.ainvoke(tool_call("post_note", "call-2", text="b"))

        await sagacity.asaga("notes-1", work)

        assert [(e.tool_name, e.call_id) for e in sagacity.history("notes-1")][:4] == [
            ("write_note", "call-1"),
            ("write_note", "call-1"),
            ("post_note", "call-2"),
            ("post_note", "call-2"),
        ]

    def test_without_a_tool_call_id_sagacity_numbers_the_calls(self) -> None:
        """Invoked with plain arguments, calls get sagacity's ids `write_note#1`, `#2`."""
        sagacity = Sagacity.from_url("memory://")
        (tool,) = langchain_tools(sagacity, write_note)

        def work() -> list[Any]:
            return [tool.invoke({"text": "a"}), tool.invoke({"text": "b"})]

        result = sagacity.saga("notes-1", work)

        assert result.value == ["note by write_note#1: a", "note by write_note#2: b"]


class TestInjectedArguments:
    def test_injected_arguments_reach_the_tool_but_not_the_journal(self) -> None:
        """Injected tool_call_id, state and config reach the tool; the journal has the model's.

        The journaled input is the model's arguments, with defaults applied.
        """
        sagacity = Sagacity.from_url("memory://")
        tools = InjectedTools()
        model = scripted(calls(tool_call("annotate", "call-3", text="handle with care")), "ok")
        agent = prebuilt_agent(model, langchain_tools(sagacity, tools))

        result = sagacity.saga(
            "notes-1", lambda: agent.invoke({"messages": [HumanMessage("note it")]})
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert tools.seen == {"tool_call_id": "call-3", "messages": 2, "config": True}
        intent = sagacity.history("notes-1")[0]
        assert intent.payload == {
            "input": {"text": "handle with care", "level": 1},
            "reversibility": "COMPENSATABLE",
        }


class TestOutsideASaga:
    def test_a_compensable_tool_runs_straight_through(self) -> None:
        """Outside a saga the tool runs as if unwrapped and nothing is journaled."""
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools()
        tools = {t.name: t for t in langchain_tools(sagacity, shop)}

        assert tools["reserve_inventory"].invoke({"sku": "A", "qty": 1}) == "res-A-1"
        assert shop.ran == [("reserve_inventory", ("A", 1))]

    def test_an_irreversible_tool_refuses(self) -> None:
        """Outside a saga an IRREVERSIBLE tool raises NoSagaError and does not run."""
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools()
        tools = {t.name: t for t in langchain_tools(sagacity, shop)}

        with pytest.raises(NoSagaError, match="send_wire_transfer"):
            tools["send_wire_transfer"].invoke({"amount": "1.00", "to": "ACME"})
        assert shop.ran == []


class TestStreamedRuns:
    def test_a_stream_consumed_inside_the_work_is_journaled(self) -> None:
        """`graph.stream` consumed inside the work journals its calls like `invoke`."""
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools()
        model = scripted(calls(tool_call("charge_card", "call-1", amount_cents=500)), "ok")
        agent = prebuilt_agent(model, langchain_tools(sagacity, shop), swallow=False)

        result = sagacity.saga(
            "stream-1", lambda: list(agent.stream({"messages": [HumanMessage("pay")]}))
        )

        assert result.outcome is SagaOutcome.COMPLETED
        assert [(e.phase.name, e.call_id) for e in sagacity.history("stream-1")] == [
            ("INTENT", "call-1"),
            ("EXECUTED", "call-1"),
            ("ENDED", None),
        ]

    def test_a_stream_returned_unread_by_the_work_is_refused(self) -> None:
        """A stream the work returns unread is closed and fails the saga: nothing runs.

        Read after the work returned, it would run outside the saga, unjournaled.
        """
        sagacity = Sagacity.from_url("memory://")
        shop = OrderTools()
        model = scripted(calls(tool_call("charge_card", "call-1", amount_cents=500)), "ok")
        agent = prebuilt_agent(model, langchain_tools(sagacity, shop), swallow=False)

        result = sagacity.saga(
            "stream-1", lambda: agent.stream({"messages": [HumanMessage("pay")]})
        )

        assert result.outcome is SagaOutcome.COMPENSATED
        assert isinstance(result.error, TypeError)
        assert "work returned a stream (generator) that was never read" in str(result.error)
        assert shop.ran == []
        assert [e.phase.name for e in sagacity.history("stream-1")] == ["ENDED"]


class AskingTools:
    """A tool that asks the user a question itself, with LangGraph's `interrupt()`."""

    def __init__(self) -> None:
        self.undone: list[str] = []

    @compensable(by="undo")
    def confirm_address(self, address: str) -> str:
        """Ask the customer to confirm the address."""
        answer = interrupt({"question": f"Ship to {address}?"})
        return f"confirmed: {answer}"

    @compensation
    def undo(self) -> None:
        self.undone.append("confirm_address")


class TestControlFlow:
    def test_graph_bubble_up_is_control_flow(self) -> None:
        """The registered classifier makes GraphInterrupt and ParentCommand control flow."""
        sagacity = Sagacity.from_url("memory://")
        langchain_tools(sagacity, write_note)

        assert sagacity.classify(GraphInterrupt()) is FailureKind.CONTROL_FLOW
        assert sagacity.classify(ParentCommand(Command(goto="x"))) is FailureKind.CONTROL_FLOW
        assert sagacity.classify(RuntimeError("boom")) is FailureKind.FAILURE
        assert classify_langgraph_error(RuntimeError("boom")) is None

    def test_an_interrupt_inside_a_tool_suspends_the_saga_until_resumed(self) -> None:
        """A tool's own `interrupt()` pauses the graph and leaves the saga SUSPENDED.

        It is journaled as control flow: nothing is compensated, and the graph waits with
        the tool's own question. `resume_saga` with LangGraph's `Command(resume=...)` runs
        the tool again under the same call id, and the saga ends COMPLETED.
        """
        sagacity = Sagacity.from_url("memory://")
        tools = AskingTools()
        model = scripted(calls(tool_call("confirm_address", "call-4", address="1 Main St")), "ok")
        agent = prebuilt_agent(
            model, langchain_tools(sagacity, tools), checkpointer=InMemorySaver()
        )
        config: Any = {"configurable": {"thread_id": "t"}}

        result = sagacity.saga(
            "ask-1", lambda: agent.invoke({"messages": [HumanMessage("ship")]}, config)
        )

        assert result.outcome is SagaOutcome.SUSPENDED
        assert result.compensation is None
        assert tools.undone == []
        assert [i.value for i in agent.get_state(config).interrupts] == [
            {"question": "Ship to 1 Main St?"}
        ]
        intent, failed = sagacity.history("ask-1")
        assert (intent.phase.name, failed.phase.name) == ("INTENT", "FAILED")
        assert failed.payload["kind"] == "control_flow"
        assert failed.payload["error"]["type"] == "GraphInterrupt"

        resumed = sagacity.resume_saga("ask-1", lambda: agent.invoke(Command(resume="yes"), config))

        assert resumed.outcome is SagaOutcome.COMPLETED
        assert [(e.phase.name, e.call_id) for e in sagacity.history("ask-1")] == [
            ("INTENT", "call-4"),
            ("FAILED", "call-4"),
            ("INTENT", "call-4"),
            ("EXECUTED", "call-4"),
            ("ENDED", None),
        ]
        assert sagacity.history("ask-1")[3].payload == {"result": "confirmed: yes"}
        assert tools.undone == []


class TestImportGuard:
    def test_a_missing_extra_names_the_extra(self) -> None:
        """Without LangGraph installed, importing the adapter says which extra to install."""
        script = textwrap.dedent(
            """
            import sys
            from importlib.abc import MetaPathFinder

            class Block(MetaPathFinder):
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] == "langgraph":
                        raise ImportError(f"blocked: {name}")
                    return None

            sys.meta_path.insert(0, Block())
            try:
                import sagacity.integrations.langchain
            except ImportError as error:
                print(error)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        )

        assert "pip install 'sagacity[langchain]'" in done.stdout
