"""The SQL the SQLite journal runs on its tables: the journal's rows and the leases."""

from __future__ import annotations

__all__ = [
    "ACQUIRE",
    "COLUMNS",
    "HEAD",
    "HOLDER",
    "INSERT",
    "INSERT_FENCED",
    "LIVE",
    "SET_EXPIRY",
    "TOKEN",
]

COLUMNS = "saga_id, seq, phase, tool_name, call_id, ref_seq, payload, recorded_at, prev_hash, hash"
INSERT = f"INSERT INTO sagacity_journal ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# Written only while the lease still holds, in the same statement: a holder taken over
# cannot slip an entry in behind the new holder.
INSERT_FENCED = (
    f"INSERT INTO sagacity_journal ({COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
    "WHERE EXISTS (SELECT 1 FROM sagacity_lease WHERE saga_id = ? AND token = ?)"
)
HEAD = "SELECT seq, hash FROM sagacity_journal WHERE saga_id = ? ORDER BY seq DESC LIMIT 1"
TOKEN = "SELECT token FROM sagacity_lease WHERE saga_id = ?"
ACQUIRE = (
    "INSERT INTO sagacity_lease (saga_id, owner, token, expires_at, since_seq) "
    "VALUES (:saga, :owner, 1, :expires, (SELECT coalesce(max(seq), 0) FROM sagacity_journal "
    "WHERE saga_id = :saga)) "
    "ON CONFLICT (saga_id) DO UPDATE SET owner = excluded.owner, token = token + 1, "
    "expires_at = excluded.expires_at, since_seq = excluded.since_seq "
    "WHERE sagacity_lease.expires_at <= :now "
    # A saga ended since the lease was taken is free: its holder has nothing left to do.
    "OR EXISTS (SELECT 1 FROM sagacity_journal j WHERE j.saga_id = :saga AND j.phase = 'ENDED' "
    "AND j.seq > sagacity_lease.since_seq) RETURNING token"
)
HOLDER = "SELECT owner, token, expires_at FROM sagacity_lease WHERE saga_id = ?"
# A lease that expired unreleased, its saga not ended since it was taken: its holder may
# still be running, so taking it over is journaled (TAKEN_OVER).
LIVE = (
    "SELECT 1 FROM sagacity_lease l WHERE l.saga_id = :saga AND l.expires_at > :released "
    "AND NOT EXISTS (SELECT 1 FROM sagacity_journal j WHERE j.saga_id = :saga "
    "AND j.phase = 'ENDED' AND j.seq > l.since_seq)"
)
SET_EXPIRY = "UPDATE sagacity_lease SET expires_at = ? WHERE saga_id = ? AND token = ?"
