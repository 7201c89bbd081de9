"""Tutorial 1: your first saga, and a failure the agent swallowed.

Run it with `python examples/tutorials/first_saga.py`. The "agent" is a plain function
that calls three tools, catches the third one's error the way agent frameworks do, and
claims success. The journal knows better: the saga ends COMPENSATED, the two calls that
ran are undone in reverse order, and the chain verifies.
"""

from __future__ import annotations

import tempfile

from sagacity import CompensationContext, Sagacity, compensable, compensation, verify


class Shop:
    """Three tools that change the world, each with the undo a developer declares."""

    @compensable(by="release_inventory")
    def reserve_inventory(self, sku: str, qty: int) -> str:
        """Reserve stock; returns the reservation's handle."""
        print(f"  reserved {qty} x {sku}")
        return f"res-{sku}"

    @compensation
    def release_inventory(self, ctx: CompensationContext) -> None:
        print(f"  undo: released {ctx.result}")  # ctx.result is what the tool returned

    @compensable(by="refund_card")
    def charge_card(self, amount: str) -> str:
        """Charge the customer's card; returns the charge id."""
        print(f"  charged {amount}")
        return "ch-1"

    @compensation
    def refund_card(self, ctx: CompensationContext) -> None:
        print(f"  undo: refunded {ctx.result} ({ctx.input['amount']})")

    @compensable(by="cancel_shipment")
    def ship_order(self, address: str) -> str:
        """Book a courier."""
        raise RuntimeError(f"the carrier does not deliver to {address!r}")

    @compensation
    def cancel_shipment(self, ctx: CompensationContext) -> None:
        print(f"  undo: cancelled {ctx.result}")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        sagacity = Sagacity.from_url(f"sqlite:///{folder}/sagacity.db")
        tools = {tool.name: tool for tool in sagacity.wrap(Shop())}

        def agent() -> str:
            tools["reserve_inventory"]("SKU-42", 2)
            tools["charge_card"]("19.99")
            try:
                tools["ship_order"]("Atlantis")
            except RuntimeError as error:
                # What every agent framework does: the error becomes a message to the model,
                # and the model carries on.
                print(f"  the agent was told: {error}")
            return "Your order is on its way!"

        print("order-1:")
        result = sagacity.saga("order-1", agent)
        print(f"the model said: {result.value!r}")
        print(f"the journal says: {result.outcome.name}, because of {result.error!r}")
        assert result.compensation is not None
        print("undone:", [ref.tool_name for ref in result.compensation.compensated])
        for entry in sagacity.history("order-1"):
            print(f"  {entry.seq:>2} {entry.phase.name:<13} {entry.tool_name or ''}")
        print("chain verifies:", verify(sagacity.journal).ok)
        sagacity.close()


if __name__ == "__main__":
    main()
