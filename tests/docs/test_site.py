"""The documentation site builds offline with `mkdocs build --strict`, and shows what runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs._blocks import DOCS, ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built the way `make docs` builds it, into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def nav_pages(entries: list[object]) -> list[str]:
    """Every page named in mkdocs.yml's nav, depth first."""
    found: list[str] = []
    for entry in entries:
        if isinstance(entry, str):
            found.append(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                found.extend(nav_pages(value) if isinstance(value, list) else [value])
    return found


def configuration() -> dict[str, object]:
    # mkdocs.yml may hold `!!python/name` tags in the future: read it without running them.
    loaded: dict[str, object] = yaml.load(
        (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader
    )
    return loaded


class TestSite:
    def test_builds_strict_and_fetches_nothing_from_the_network(self, site: Path) -> None:
        """No Google font and no CDN script or stylesheet: the site reads offline."""
        for page in site.rglob("*.html"):
            html = page.read_text(encoding="utf-8")
            assert "fonts.googleapis.com" not in html, page
            assert not re.search(r"""<(script|link)[^>]+(src|href)="https?://""", html), page

    def test_every_page_is_in_the_nav(self) -> None:
        """A page left out of the nav is unreachable; a nav entry names a page, once."""
        listed = nav_pages(configuration()["nav"])  # type: ignore[arg-type]
        assert sorted(page for page in set(listed) if listed.count(page) > 1) == []
        named = set(listed)
        pages = {str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md")}
        assert pages - named == set()
        assert named - pages == set()

    def test_tutorials_show_the_programs_that_run(self, site: Path) -> None:
        """Each tutorial page includes its program's text, from the file the tests run."""
        for page in sorted((DOCS / "tutorials").glob("*.md")):
            included = re.findall(r'--8<-- "([^"]+)"', page.read_text(encoding="utf-8"))
            for program in included:
                html = (site / "tutorials" / f"{page.stem}.html").read_text(encoding="utf-8")
                first_def = next(
                    line
                    for line in (ROOT / program).read_text(encoding="utf-8").splitlines()
                    if line.startswith("def ")
                )
                name = first_def.split("(")[0].removeprefix("def ")
                assert name in html, f"{page.name} does not show {program}"
                assert "--8&lt;--" not in html

    def test_the_api_reference_documents_the_public_names(self, site: Path) -> None:
        """Every name in `sagacity.__all__` has an entry in the generated API page."""
        import sagacity

        html = (site / "reference" / "api.html").read_text(encoding="utf-8")
        missing = [
            name
            for name in sagacity.__all__
            if f'id="sagacity.{name}"' not in html
            and f'id="sagacity.annotations.{name}"' not in html
        ]
        assert missing == []
        assert 'id="sagacity.Sagacity.resume_saga"' in html
        assert 'id="sagacity.integrations.langchain.InMemoryCheckpointerWarning"' in html

    def test_the_api_reference_opens_with_the_facade_and_the_decorators(self, site: Path) -> None:
        """`Sagacity`, `compensable` and `compensation` come first; the errors come last."""
        import sagacity

        html = (site / "reference" / "api.html").read_text(encoding="utf-8")
        main = html[: html.index('id="sagacityaudit"')]  # the `sagacity` section only
        documented = re.findall(r'<h[2-6] id="sagacity\.(?:annotations\.)?(\w+)"', main)
        assert documented[:3] == ["Sagacity", "compensable", "compensation"]
        errors = [name for name in sagacity.__all__ if name.endswith(("Error", "Warning"))]
        assert documented[-len(errors) :] == errors
        assert sorted(documented) == sorted(sagacity.__all__)
