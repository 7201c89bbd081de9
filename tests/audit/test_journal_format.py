"""docs/journal-format.md: its example and its stand-alone verifier, run for real."""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import rfc8785

from sagacity import CompensationContext, Sagacity, SagaOutcome, compensable, compensation
from sagacity.audit import export_jsonl, read_jsonl, verify_entries

DOC = Path(__file__).resolve().parents[2] / "docs" / "journal-format.md"


def block_after(marker: str) -> str:
    """The fenced code block that follows `<!-- marker -->` in the document."""
    text = DOC.read_text(encoding="utf-8")
    after = text.split(f"<!-- {marker} -->", 1)[1]
    opening = after.index("```")
    body_start = after.index("\n", opening) + 1
    return after[body_start : after.index("```", body_start)]


@pytest.fixture(scope="module")
def verifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The verification program of the document, saved as a file."""
    path = tmp_path_factory.mktemp("verifier") / "verify_export.py"
    path.write_text(block_after("verify-export"), encoding="utf-8")
    return path


def run(verifier: Path, export: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(verifier), str(export)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Warehouse:
    @compensable(by="release")
    def reserve(self, sku: str, qty: int, price: float) -> dict[str, object]:
        return {"reservation": f"res-{sku}", "total": qty * price, "note": "Grüße 😀 \u2028"}

    @compensation
    def release(self, ctx: CompensationContext) -> None:
        pass

    @compensable(by="release")
    def ship(self, to: str) -> str:
        raise RuntimeError(f"no carrier for {to}")


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """A JSON Lines export of a real SQLite journal: a completed and a compensated saga."""
    sagacity = Sagacity.from_url(f"sqlite:///{tmp_path / 'journal.db'}")
    tools = {tool.name: tool for tool in sagacity.wrap(Warehouse())}

    def completed() -> None:
        tools["reserve"]("SKU-é", 3, 0.1)
        tools["reserve"]("SKU-big", 1, 2.0**60)  # a double written without exponent

    def compensated() -> None:
        tools["reserve"]("SKU-2", 2, 1e-7)
        tools["ship"]("東京")

    assert sagacity.saga("order-1", completed).outcome is SagaOutcome.COMPLETED
    assert sagacity.saga("order-2", compensated).outcome is SagaOutcome.COMPENSATED
    path = tmp_path / "journal.jsonl"
    with path.open("w", encoding="utf-8") as out:
        assert export_jsonl(sagacity.journal, out) == 5 + 7
    sagacity.close()
    return path


def edit_line(path: Path, index: int, key: str, value: object) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")[:-1]
    entry = json.loads(lines[index])
    entry[key] = value
    lines[index] = json.dumps(entry, ensure_ascii=False)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


class TestStandAloneVerifier:
    def test_it_uses_only_hashlib_json_and_rfc8785(self) -> None:
        """The program imports nothing of sagacity, and stays about a dozen lines."""
        source = block_after("verify-export")
        imported = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
        assert imported == {"hashlib", "json", "sys", "rfc8785"}
        assert len([line for line in source.splitlines() if line.strip()]) <= 20

    def test_it_accepts_an_untouched_export(self, verifier: Path, export: Path) -> None:
        """An export of a real journal verifies: exit status 0, every saga counted."""
        result = run(verifier, export)
        assert (result.returncode, result.stdout.strip()) == (0, "OK: 2 sagas verified")

    def test_it_rejects_a_changed_payload(self, verifier: Path, export: Path) -> None:
        """Editing one result is caught, naming the saga and the seq of the edited entry."""
        edit_line(export, 1, "payload", {"result": {"reservation": "res-other"}})
        result = run(verifier, export)
        assert result.returncode == 1
        assert result.stderr.strip() == "saga 'order-1': the chain is broken at seq 2"

    def test_it_rejects_a_deleted_entry(self, verifier: Path, export: Path) -> None:
        """Deleting a line in the middle of a saga is a break at that seq."""
        lines = export.read_text(encoding="utf-8").split("\n")[:-1]
        del lines[7]  # order-2 seq 3
        export.write_text("\n".join(lines) + "\n", encoding="utf-8")
        result = run(verifier, export)
        assert result.returncode == 1
        assert result.stderr.strip() == "saga 'order-2': the chain is broken at seq 3"

    def test_it_rejects_a_changed_time(self, verifier: Path, export: Path) -> None:
        """Any member counts: a changed time breaks the chain at its entry."""
        edit_line(export, 6, "recorded_at", "2000-01-01T00:00:00.000000Z")  # order-2 seq 2
        result = run(verifier, export)
        assert result.returncode == 1
        assert result.stderr.strip() == "saga 'order-2': the chain is broken at seq 2"

    def test_it_rejects_swapped_lines(self, verifier: Path, export: Path) -> None:
        """Reordering two entries of a saga breaks it at the first of them."""
        lines = export.read_text(encoding="utf-8").split("\n")[:-1]
        lines[1], lines[3] = lines[3], lines[1]
        export.write_text("\n".join(lines) + "\n", encoding="utf-8")
        result = run(verifier, export)
        assert result.stderr.strip() == "saga 'order-1': the chain is broken at seq 2"

    def test_sagacity_agrees(self, export: Path) -> None:
        """Sagacity's own verify_entries accepts the same export."""
        lines = export.read_text(encoding="utf-8").split("\n")[:-1]
        assert verify_entries(read_jsonl(lines)).ok


class TestDocumentedExample:
    def test_the_example_export_verifies(self, verifier: Path, tmp_path: Path) -> None:
        """The two example entries verify with the document's own program and with sagacity."""
        example = block_after("example-export")
        path = tmp_path / "example.jsonl"
        path.write_text(example, encoding="utf-8")
        assert run(verifier, path).stdout.strip() == "OK: 1 sagas verified"
        assert verify_entries(read_jsonl(example.splitlines())).ok

    def test_the_hashed_bytes_and_hash_shown(self) -> None:
        """The canonical bytes the document shows are JCS of the first entry, hashing as shown."""
        first = json.loads(block_after("example-export").splitlines()[0])
        hashed = {key: value for key, value in first.items() if key != "hash"}
        text = DOC.read_text(encoding="utf-8")
        canonical = rfc8785.dumps(hashed)
        assert f"```json\n{canonical.decode()}\n```" in text
        assert hashlib.sha256(canonical).hexdigest() == first["hash"]
        assert f"their SHA-256 is `{first['hash']}`" in text
