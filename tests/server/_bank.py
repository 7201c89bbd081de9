"""The tools the server's tests run: reserve stock (compensable) and wire money (IRREVERSIBLE)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from sagacity import (
    CompensationContext,
    Reversibility,
    Sagacity,
    SagaResult,
    compensable,
    compensation,
)
from sagacity.server import Principal, TokenAuth

TOKENS = {
    "tok-viewer": Principal("vic", frozenset({"viewer"})),
    "tok-alice": Principal("alice", frozenset({"approver"})),
    "tok-bob": Principal("bob", frozenset({"approver"})),
    "tok-carol": Principal("carol", frozenset({"approver"})),
    "tok-olga": Principal("olga", frozenset({"operator"})),
}
"""Clear tokens of the test principals (only their hashes reach the server)."""


def bearer(token: str) -> dict[str, str]:
    """The Authorization header for `token`."""
    return {"Authorization": f"Bearer {token}"}


VIEWER = bearer("tok-viewer")
ALICE = bearer("tok-alice")
BOB = bearer("tok-bob")
CAROL = bearer("tok-carol")
OLGA = bearer("tok-olga")


def token_auth() -> TokenAuth:
    """The authenticator of the test principals."""
    return TokenAuth.from_tokens(TOKENS)


class Bank:
    """Reserve stock, wire money, wire a lot (two approvers); every run is logged."""

    def __init__(self) -> None:
        self.log: list[str] = []

    @compensable(by="release")
    def reserve(self, sku: str) -> str:
        """Reserve stock."""
        self.log.append(f"reserve {sku}")
        return f"res-{sku}"

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        self.log.append(f"release {ctx.result}")

    @compensable(reversibility=Reversibility.IRREVERSIBLE)
    def wire(self, amount: str, to: str) -> str:
        """Wire money."""
        self.log.append(f"wire {amount} to {to}")
        return f"wired {amount}"

    @compensable(reversibility=Reversibility.IRREVERSIBLE, approvers=2)
    def wire_big(self, amount: str, to: str) -> str:
        """Wire a large amount: two approvers."""
        self.log.append(f"wire_big {amount} to {to}")
        return f"wired big {amount}"


def start_wire(
    sagacity: Sagacity,
    bank: Bank,
    saga_id: str,
    *,
    amount: str = "100",
    to: str = "acct-1",
    big: bool = False,
    started_by: str | None = None,
) -> SagaResult:
    """Run a saga that reserves, then asks approval for a wire; return its result."""

    def work() -> Any:
        sagacity.tool("reserve")(sku=f"sku-{saga_id}")
        return sagacity.tool("wire_big" if big else "wire")(amount=amount, to=to)

    return sagacity.saga(saga_id, work, started_by=started_by)


def pending_one(client: TestClient, saga_id: str) -> dict[str, Any]:
    """The one pending request of `saga_id`, as the API lists it."""
    response = client.get("/sagacity/approvals", params={"saga_id": saga_id}, headers=VIEWER)
    assert response.status_code == 200, response.text
    found = response.json()
    assert len(found) == 1, found
    request: dict[str, Any] = found[0]
    return request
