"""keygen, checkpoint and verify --checkpoint from the command line; --version and help."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from sagacity import __version__
from sagacity.cli import _COMMANDS, _parser, main
from tests.cli._run import restore_triggers_after, run_cli


@pytest.fixture
def demo_db(tmp_path: Path) -> str:
    database = str(tmp_path / "demo.db")
    assert main(["demo", "--database", database]) == 0
    return database


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "keys"
    folder.mkdir()
    done = run_cli("keygen", "--out", str(folder))
    assert done.returncode == 0, done.stderr
    return folder / "sagacity-checkpoint.key", folder / "sagacity-checkpoint.pub"


class TestKeygen:
    def test_two_pem_files_and_never_an_overwrite(self, keys: tuple[Path, Path]) -> None:
        """A private key only its owner can read, a public key; a second keygen refuses."""
        private, public = keys
        assert private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
        assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
        before = private.read_bytes()
        again = run_cli("keygen", "--out", str(private.parent))
        assert again.returncode == 4
        assert again.stderr == (
            f"sagacity keygen: {private} exists already: a key is never overwritten "
            "(move it away first)\n"
        )
        assert private.read_bytes() == before

    def test_a_missing_directory(self, tmp_path: Path) -> None:
        """A keygen into a directory that does not exist: one line, exit 4."""
        done = run_cli("keygen", "--out", str(tmp_path / "nope"))
        assert (done.returncode, done.stderr) == (
            4,
            f"sagacity keygen: --out {tmp_path / 'nope'}: no such directory\n",
        )


class TestCheckpoint:
    def test_checkpoint_then_verify_then_truncate(
        self, demo_db: str, keys: tuple[Path, Path], tmp_path: Path
    ) -> None:
        """A checkpoint verifies; after the tail of a saga is deleted, verify names it."""
        private, public = keys
        folder = tmp_path / "checkpoints"
        folder.mkdir()
        made = run_cli(
            "checkpoint", "--key", str(private), "--out", str(folder), "--database", demo_db
        )
        assert made.returncode == 0, made.stderr
        (path,) = folder.iterdir()
        assert made.stdout.splitlines()[1] == f"  {path}"
        assert re.fullmatch(r"checkpoint-\d{8}T\d{6}\.\d{6}Z\.txt", path.name)
        assert "head 11 " in path.read_text()

        arguments = ["--checkpoint", str(path), "--public-key", str(public), "--database", demo_db]
        ok = run_cli("verify", *arguments)
        assert ok.returncode == 0, ok.stdout
        created_at = path.read_text().splitlines()[1].split(" ")[1]
        assert ok.stdout == f"3 sagas, 17 entries against checkpoint {created_at}: OK\n"

        restore_triggers_after(
            demo_db, "DELETE FROM sagacity_journal WHERE saga_id = 'order-1001' AND seq > 8"
        )
        assert run_cli("verify", "--database", demo_db).returncode == 0  # alone, it looks fine
        broken = run_cli("verify", *arguments)
        assert broken.returncode == 1
        assert broken.stdout.splitlines()[0] == (
            "saga 'order-1001' seq 9: truncation: the chain ends at seq 8, but its head was "
            "recorded at seq 11; the entries after seq 8 were deleted"
        )

    def test_a_journal_that_does_not_verify_is_not_signed(
        self, demo_db: str, keys: tuple[Path, Path], tmp_path: Path
    ) -> None:
        """A row edited in place: exit 1 naming the saga and seq, and no checkpoint written."""
        restore_triggers_after(
            demo_db,
            "UPDATE sagacity_journal SET call_id = 'forged' WHERE saga_id = 'order-1001' "
            "AND seq = 3",
        )
        folder = tmp_path / "checkpoints"
        folder.mkdir()
        done = run_cli(
            "checkpoint", "--key", str(keys[0]), "--out", str(folder), "--database", demo_db
        )
        assert done.returncode == 1
        assert done.stdout == ""
        assert done.stderr.startswith(
            "sagacity checkpoint: checkpoint: saga 'order-1001' seq 3: hash mismatch: "
        )
        assert done.stderr.endswith("; the chain does not verify, so nothing was signed\n")
        assert list(folder.iterdir()) == []

    def test_printed_when_no_directory_is_given(
        self, demo_db: str, keys: tuple[Path, Path]
    ) -> None:
        """Without --out the signed text goes to stdout, for the user to store elsewhere."""
        done = run_cli("checkpoint", "--key", str(keys[0]), "--database", demo_db)
        assert done.returncode == 0
        lines = done.stdout.splitlines()
        assert lines[0] == "sagacity-checkpoint 2"
        assert lines[-1].startswith("signature ")

    def test_the_next_checkpoint_in_a_folder_follows_the_last(
        self, demo_db: str, keys: tuple[Path, Path], tmp_path: Path
    ) -> None:
        """It records the last one's SHA-256; after a truncation it refuses to sign, exit 1."""
        import hashlib

        private, _ = keys
        folder = tmp_path / "checkpoints"
        folder.mkdir()
        sign = ("checkpoint", "--key", str(private), "--out", str(folder), "--database", demo_db)
        assert run_cli(*sign).returncode == 0
        (first,) = folder.iterdir()
        assert "\nprevious none\n" in first.read_text()
        second_run = run_cli(*sign)
        assert second_run.returncode == 0, second_run.stderr
        second = max(folder.iterdir())
        first_at = first.read_text().splitlines()[1].split(" ")[1]
        assert second_run.stdout.splitlines()[0].endswith(f", after checkpoint {first_at}")
        digest = hashlib.sha256(first.read_bytes()).hexdigest()
        assert f"\nprevious {digest}\n" in second.read_text()

        restore_triggers_after(
            demo_db, "DELETE FROM sagacity_journal WHERE saga_id = 'order-1001' AND seq > 8"
        )
        refused = run_cli(*sign)
        assert refused.returncode == 1
        second_at = second.read_text().splitlines()[1].split(" ")[1]
        assert refused.stderr == (
            "sagacity checkpoint: checkpoint: saga 'order-1001' seq 9: truncation: the chain "
            "ends at seq 8, but its head was recorded at seq 11; the entries after seq 8 were "
            f"deleted; the journal no longer holds what checkpoint {second_at} signed (a "
            "shorter or rebuilt chain is never signed as the new truth), so nothing was signed\n"
        )
        assert sorted(folder.iterdir()) == [first, second]
        # Named explicitly, printing to stdout: refused the same way.
        printed = run_cli(
            "checkpoint", "--key", str(private), "--previous", str(second), "--database", demo_db
        )
        assert (printed.returncode, printed.stdout) == (1, "")

    def test_a_previous_checkpoint_of_another_key_needs_its_public_key(
        self, demo_db: str, keys: tuple[Path, Path], tmp_path: Path
    ) -> None:
        """After a key change the last checkpoint is read with --previous-public-key."""
        private, public = keys
        folder = tmp_path / "checkpoints"
        folder.mkdir()
        sign = ("checkpoint", "--out", str(folder), "--database", demo_db)
        assert run_cli(*sign, "--key", str(private)).returncode == 0
        new_keys = tmp_path / "new"
        new_keys.mkdir()
        assert run_cli("keygen", "--out", str(new_keys)).returncode == 0
        new_private = str(new_keys / "sagacity-checkpoint.key")
        refused = run_cli(*sign, "--key", new_private)
        assert refused.returncode == 1
        assert "but the public key given is" in refused.stderr
        done = run_cli(*sign, "--key", new_private, "--previous-public-key", str(public))
        assert done.returncode == 0, done.stderr
        assert len(list(folder.iterdir())) == 2

    def test_a_private_key_others_can_read_is_refused(
        self, demo_db: str, keys: tuple[Path, Path]
    ) -> None:
        """A key file of mode 644 is refused with the chmod that fixes it; nothing signed."""
        private, _ = keys
        private.chmod(0o644)
        done = run_cli("checkpoint", "--key", str(private), "--database", demo_db)
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            f"sagacity checkpoint: the private key {private} is readable or writable by others "
            f"(mode 0644): whoever reads it can sign anything. Make it the owner's alone with: "
            f"chmod 600 {private}\n"
        )

    def test_an_edited_checkpoint_is_refused(
        self, demo_db: str, keys: tuple[Path, Path], tmp_path: Path
    ) -> None:
        """A head moved back by hand fails the signature check: exit 1, one line."""
        private, public = keys
        made = run_cli("checkpoint", "--key", str(private), "--database", demo_db)
        assert made.returncode == 0, made.stderr
        text = made.stdout
        assert "head 11 " in text
        edited = tmp_path / "edited.txt"
        edited.write_text(text.replace("head 11 ", "head 8 "))
        done = run_cli(
            "verify", "--checkpoint", str(edited), "--public-key", str(public),
            "--database", demo_db,
        )  # fmt: skip
        assert done.returncode == 1
        assert "the signature does not match its text" in done.stderr
        assert done.stderr.count("\n") == 1

    def test_a_checkpoint_needs_its_public_key(self, demo_db: str, tmp_path: Path) -> None:
        """--checkpoint without --public-key, or a key file that is not one: one line, exit 2."""
        done = run_cli("verify", "--checkpoint", "x.txt", "--database", demo_db)
        assert done.returncode == 2
        assert done.stderr == (
            "sagacity verify: --checkpoint needs --public-key FILE, the key that signed it\n"
        )
        junk = tmp_path / "junk.pem"
        junk.write_text("not a key")
        bad = run_cli(
            "verify", "--checkpoint", "x.txt", "--public-key", str(junk), "--database", demo_db
        )
        assert bad.returncode == 2
        assert bad.stderr.startswith(f"sagacity verify: {junk}: not a PEM public key")


class TestTheCommandItself:
    def test_version(self) -> None:
        """--version prints the package version."""
        done = run_cli("--version")
        assert (done.returncode, done.stdout) == (0, f"sagacity {__version__}\n")

    def test_help_texts(self) -> None:
        """No markdown backticks in any help; --database help names the URLs and the variable."""
        parser = _parser()
        texts = [parser.format_help()]
        subparsers = next(a for a in parser._actions if a.dest == "command")
        for name, sub in subparsers.choices.items():  # type: ignore[attr-defined]
            texts.append(sub.format_help())
            assert name in _COMMANDS
        assert all("`" not in text for text in texts)
        verify_help = run_cli("verify", "--help").stdout
        assert "SAGACITY_DATABASE_URL" in verify_help
        assert "postgresql://" in verify_help
        assert "sqlite:///" in verify_help

    def test_a_usage_mistake_is_exit_2(self) -> None:
        """The parser's own errors keep its exit status 2."""
        done = run_cli("resolve", "s", "c", "--by", "me")
        assert done.returncode == 2
        assert (
            "one of the arguments --executed --not-executed --undone --not-undone is required"
            in done.stderr
        )

    def test_serve_checks_its_tokens_file(self, tmp_path: Path) -> None:
        """A serve with a tokens file that is not there: one line, exit 2, nothing started."""
        done = run_cli("serve", "--tokens", str(tmp_path / "none.txt"), "--port", "1")
        assert done.returncode == 2
        assert done.stderr == f"sagacity serve: --tokens {tmp_path / 'none.txt'}: no such file\n"
