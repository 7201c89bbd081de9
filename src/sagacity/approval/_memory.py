"""The in-memory approval store."""

from __future__ import annotations

import threading

from sagacity._ids import require_id
from sagacity.approval._request import ApprovalRequest

__all__ = ["InMemoryApprovalStore"]


class InMemoryApprovalStore:
    """Pending approval requests in this process's memory; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, ApprovalRequest] = {}

    def save(self, request: ApprovalRequest) -> None:
        """Store a new request."""
        with self._lock:
            self._requests[request.request_id] = request

    def get(self, request_id: str) -> ApprovalRequest | None:
        """Return the request, or None; `InvalidIdError` for an id no request can have."""
        require_id(request_id, "request id")
        with self._lock:
            return self._requests.get(request_id)

    def pending(self, saga_id: str | None = None) -> list[ApprovalRequest]:
        """Return stored requests, oldest first."""
        if saga_id is not None:
            require_id(saga_id, "saga id")
        with self._lock:
            found = [r for r in self._requests.values() if saga_id in (None, r.saga_id)]
        return sorted(found, key=lambda r: (r.requested_at, r.saga_id, r.seq))

    def delete(self, request_id: str) -> None:
        """Consume a request."""
        require_id(request_id, "request id")
        with self._lock:
            self._requests.pop(request_id, None)

    def replace(self, request: ApprovalRequest) -> None:
        """Overwrite a stored request: lets tests play an attacker who edits the store."""
        self.save(request)

    def close(self) -> None:
        """Nothing to release."""
