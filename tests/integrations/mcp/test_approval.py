"""Approval over MCP, where the protocol has no native pause.

An IRREVERSIBLE call answers the waiting text; after `Sagacity.approve`, sending the call
again runs it exactly once with that input.
"""

from __future__ import annotations

from mcp import Client

from sagacity import Sagacity, SagaOutcome, SagaStateError, verify
from sagacity.integrations.mcp import APPROVAL_META, end_saga, mcp_server, request_end_saga
from sagacity.integrations.mcp import PROCESS_TOKEN as TOKEN
from tests.integrations.mcp._shop import Shop, meta, phases, text

WIRE = {"amount": "100.00", "to": "ACME-IBAN"}


class TestApprovalWithoutCallId:
    async def test_waits_is_approved_elsewhere_then_runs_once(self, sqlite_url: str) -> None:
        """A waiting call runs once, after an approval recorded by another process.

        The first call is not run and not an error; sending it again before approval, with a
        client's claim of approval, or with changed input is refused; after an approval recorded by
        another process it runs once with the approved input.
        """
        shop = Shop()
        with (
            Sagacity.from_url(sqlite_url) as sagacity,
            Sagacity.from_url(sqlite_url) as approver_process,
        ):
            async with Client(mcp_server(sagacity, shop)) as client:
                waiting = await client.call_tool("send_wire_transfer", WIRE, meta=meta("pay-1"))
                (request,) = sagacity.pending("pay-1")
                early = await client.call_tool(
                    "send_wire_transfer", WIRE, meta={**meta("pay-1"), "sagacity/approved": True}
                )
                asked = (waiting.meta or {})[APPROVAL_META]
                approver_process.approve(
                    "pay-1", approver="alice@ops", expected_sha256=asked["input_sha256"]
                )
                changed = await client.call_tool(
                    "send_wire_transfer", {**WIRE, "amount": "9999.00"}, meta=meta("pay-1")
                )
                ran = await client.call_tool("send_wire_transfer", WIRE, meta=meta("pay-1"))
                ended = await request_end_saga(client, "pay-1")

            assert not waiting.is_error
            assert text(waiting).startswith("[AWAITING_APPROVAL] send_wire_transfer was not run")
            assert asked == request.to_json()  # the whole request, for the host to show a human
            assert (asked["call_id"], asked["input"]) == (f"send_wire_transfer#1.{TOKEN}", WIRE)
            assert early.is_error
            assert "no approval is journaled for request" in text(early)
            assert changed.is_error
            assert "sha256" in text(changed)
            assert text(ran) == "wire-100.00-ACME-IBAN"
            assert shop.events == [("send_wire_transfer", "100.00", "ACME-IBAN")]
            assert ended.outcome == "COMPLETED"
            entries = sagacity.history("pay-1")
            assert phases(entries) == [
                ("AWAITING_APPROVAL", "send_wire_transfer", f"send_wire_transfer#1.{TOKEN}"),
                ("APPROVED", "send_wire_transfer", f"send_wire_transfer#1.{TOKEN}"),
                (
                    "REFUSED",
                    "send_wire_transfer",
                    f"send_wire_transfer#1.{TOKEN}",
                ),  # the changed input
                ("INTENT", "send_wire_transfer", f"send_wire_transfer#1.{TOKEN}"),
                ("EXECUTED", "send_wire_transfer", f"send_wire_transfer#1.{TOKEN}"),
                ("ENDED", None, None),
            ]
            assert entries[1].payload["approver"] == "alice@ops"
            assert entries[2].payload["reason"] == "input_mismatch"
            assert entries[3].payload["input"] == WIRE
            assert verify(sagacity.journal, "pay-1").ok

    async def test_a_second_wire_needs_a_second_approval(self) -> None:
        """A second identical wire is a new call with its own approval.

        Once the approved call has run, the same input again is a new call that waits for its own
        approval; the saga ending then stays open, AWAITING_APPROVAL.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await client.call_tool("send_wire_transfer", WIRE, meta=meta("pay-2"))
            sagacity.approve("pay-2", approver="alice@ops")
            await client.call_tool("send_wire_transfer", WIRE, meta=meta("pay-2"))
            second = await client.call_tool("send_wire_transfer", WIRE, meta=meta("pay-2"))
            ended = await request_end_saga(client, "pay-2")

        assert (second.meta or {})[APPROVAL_META]["call_id"] == f"send_wire_transfer#2.{TOKEN}"
        assert len(shop.events) == 1
        assert ended.outcome == "AWAITING_APPROVAL"
        assert ended.pending == [sagacity.pending("pay-2")[0].request_id]

    async def test_rejection_compensates_and_closes_the_saga(self) -> None:
        """Rejecting the wire compensates the saga and closes it.

        Rejecting the wire undoes the reservation made before it, ends the saga, and a later call of
        the wire is refused without running.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await client.call_tool("reserve_inventory", {"sku": "A", "qty": 1}, meta=meta("p3"))
            await client.call_tool("send_wire_transfer", WIRE, meta=meta("p3"))
            rejected = sagacity.reject("p3", approver="bob@ops", reason="unknown supplier")
            late = await client.call_tool("send_wire_transfer", WIRE, meta=meta("p3"))
            ended = await end_saga(sagacity, "p3")

        assert rejected.outcome is SagaOutcome.COMPENSATED
        assert late.is_error
        assert "saga 'p3' ended COMPENSATED" in text(late)
        assert shop.events == [("reserve_inventory", "A", 1), ("release_inventory", "res-A-1")]
        assert ended.outcome is SagaOutcome.COMPENSATED

    async def test_failed_saga_refuses_irreversible_calls(self) -> None:
        """After a failed call, an IRREVERSIBLE call is refused, even once approved.

        The saga will be compensated when it ends; the wire could not be undone with it,
        so it is not run (as `Sagacity.saga` would have ended the saga before it).
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await client.call_tool("send_wire_transfer", WIRE, meta=meta("p5"))
            sagacity.approve("p5", approver="alice@ops")
            await client.call_tool("reserve_inventory", {"sku": "A", "qty": 1}, meta=meta("p5"))
            await client.call_tool("ship_order", {"address": "x"}, meta=meta("p5"))
            refused = await client.call_tool("send_wire_transfer", WIRE, meta=meta("p5"))
            ended = await request_end_saga(client, "p5")

        assert refused.is_error
        assert text(refused) == (
            "Error executing tool send_wire_transfer: saga 'p5': a call has failed, so the "
            "saga will be compensated; IRREVERSIBLE tool 'send_wire_transfer' is not run. "
            "Run it in a new saga if it is still wanted"
        )
        assert [e[0] for e in shop.events] == [
            "reserve_inventory",
            "ship_order",
            "release_inventory",
        ]
        assert (ended.outcome, ended.pending) == ("COMPENSATED", [])
        assert sagacity.pending("p5") == []


class TestResumeSaga:
    async def test_resume_refuses_the_approved_call_once_a_call_failed(self) -> None:
        """`aresume_saga` on an MCP saga with a failed call refuses the wire and compensates.

        The failure was journaled by an earlier request; resuming reads it, refuses the
        approved IRREVERSIBLE call with the core's `SagaStateError`, undoes the reservation
        and ends the saga, so a later call over MCP is refused too.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await client.call_tool("reserve_inventory", {"sku": "A", "qty": 1}, meta=meta("p6"))
            await client.call_tool("send_wire_transfer", WIRE, meta=meta("p6"))
            await client.call_tool("ship_order", {"address": "x"}, meta=meta("p6"))
            sagacity.approve("p6", approver="alice@ops")
            resumed = await sagacity.aresume_saga("p6")
            late = await client.call_tool("send_wire_transfer", WIRE, meta=meta("p6"))

        assert resumed.outcome is SagaOutcome.COMPENSATED
        assert isinstance(resumed.error, SagaStateError)
        assert str(resumed.error) == (
            "saga 'p6': a call has failed, so the saga will be compensated; IRREVERSIBLE tool "
            "'send_wire_transfer' is not run. "
            "Run it in a new saga if it is still wanted"
        )
        assert [e[0] for e in shop.events] == [
            "reserve_inventory",
            "ship_order",
            "release_inventory",
        ]
        assert late.is_error
        assert "saga 'p6' ended COMPENSATED at seq" in text(late)
        assert "of tool 'send_wire_transfer' is not run" in text(late)

    async def test_resume_runs_the_approved_call_and_ends_the_saga(self) -> None:
        """Without a failed call, `aresume_saga` runs the approved wire once and ends COMPLETED.

        The saga is ended: a call sent over MCP afterwards is refused and does not run.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await client.call_tool("send_wire_transfer", WIRE, meta=meta("p7"))
            sagacity.approve("p7", approver="alice@ops")
            resumed = await sagacity.aresume_saga("p7")
            late = await client.call_tool(
                "reserve_inventory", {"sku": "A", "qty": 1}, meta=meta("p7")
            )

        assert (resumed.outcome, resumed.value) == (SagaOutcome.COMPLETED, "wire-100.00-ACME-IBAN")
        assert shop.events == [("send_wire_transfer", "100.00", "ACME-IBAN")]
        assert late.is_error
        assert "saga 'p7' ended COMPLETED at seq" in text(late)
        assert "of tool 'reserve_inventory' is not run" in text(late)


class TestApprovalWithCallId:
    async def test_call_id_binds_the_approval_to_one_call(self) -> None:
        """A client call id binds the approval to exactly that call.

        With `sagacity/call_id`, the approval belongs to that call: another call id asks anew, the
        approved one runs once, and sending it again replays its result.
        """
        sagacity, shop = Sagacity.from_url("memory://"), Shop()
        async with Client(mcp_server(sagacity, shop)) as client:
            await client.call_tool("send_wire_transfer", WIRE, meta=meta("pay-4", "toolu_01"))
            sagacity.approve("pay-4", approver="alice@ops")
            other = await client.call_tool(
                "send_wire_transfer", WIRE, meta=meta("pay-4", "toolu_02")
            )
            ran = await client.call_tool("send_wire_transfer", WIRE, meta=meta("pay-4", "toolu_01"))
            again = await client.call_tool(
                "send_wire_transfer", WIRE, meta=meta("pay-4", "toolu_01")
            )

        assert (other.meta or {})[APPROVAL_META]["call_id"] == "toolu_02"
        assert text(ran) == text(again) == "wire-100.00-ACME-IBAN"
        assert shop.events == [("send_wire_transfer", "100.00", "ACME-IBAN")]
        assert [p for p in phases(sagacity.history("pay-4")) if p[2] == "toolu_01"] == [
            ("AWAITING_APPROVAL", "send_wire_transfer", "toolu_01"),
            ("APPROVED", "send_wire_transfer", "toolu_01"),
            ("INTENT", "send_wire_transfer", "toolu_01"),
            ("EXECUTED", "send_wire_transfer", "toolu_01"),
        ]
