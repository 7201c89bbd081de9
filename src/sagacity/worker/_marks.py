"""The newest decision row a watch has seen: where its next quick look starts."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

__all__ = ["LOOKBACK", "Watermark"]

LOOKBACK = datetime.timedelta(seconds=10)
"""How far before the newest decision row seen a quick look reads again: an entry is
timed when it is written, and may commit a little later than one timed after it."""


class Watermark:
    """The newest decision row seen, and the rows seen within the lookback before it."""

    def __init__(self) -> None:
        self.since: str | None = None
        self._seen: dict[tuple[str, int], str] = {}

    def fresh(self, rows: Iterable[tuple[str, int, str]]) -> set[str]:
        """The sagas of `rows` (saga id, seq, recorded_at) not seen before."""
        sagas = set()
        for saga_id, seq, recorded_at in rows:
            if (saga_id, seq) in self._seen:
                continue
            self._seen[(saga_id, seq)] = recorded_at
            sagas.add(saga_id)
            if self.since is None or recorded_at > self.since:
                self.since = recorded_at
        floor = self.floor()
        if floor is not None:
            self._seen = {key: at for key, at in self._seen.items() if at >= floor}
        return sagas

    def floor(self) -> str | None:
        """The time from which the next quick look reads (the lookback before `since`)."""
        if self.since is None:
            return None
        newest = datetime.datetime.fromisoformat(self.since.replace("Z", "+00:00"))
        return (newest - LOOKBACK).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
