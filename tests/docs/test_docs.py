"""The README and docs/ hold in a plain clone: every relative link resolves, the README stays short.

A link resolves when its file is in the repository (not outside it, not git-ignored) and, when
it names a heading (`page.md#heading`), that heading is on the page, slugged as GitHub does.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

# docs/architecture.md is written in the same restructuring on its own branch. Until it lands,
# links to it are not checked; once the file exists they are checked like any other.
PENDING = frozenset({"docs/architecture.md"})

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+).+?\1", re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def doc_pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The text with fenced blocks and code spans blanked, so code that looks like a link is not one."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the visible text, lower-cased, punctuation dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text, not its target
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def ignored_by_git(root: Path, target: Path) -> bool:
    if shutil.which("git") is None or not (root / ".git").exists():
        return False
    result = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "-q", str(target)], check=False, capture_output=True
    )
    return result.returncode == 0


def broken_links(root: Path, page: Path) -> list[str]:
    """Each relative link of `page` that would not resolve in a clone, with the reason."""
    root = root.resolve()
    problems: list[str] = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if SCHEME.match(target):
            continue  # a web address, not a file of the repository
        path_part, _, fragment = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page.resolve()
        where = f"{page.relative_to(root)}: ({target})"
        if not dest.is_relative_to(root):
            problems.append(f"{where} points outside the repository")
            continue
        if dest.relative_to(root).as_posix() in PENDING and not dest.exists():
            continue
        if not dest.exists():
            problems.append(f"{where} names a file that does not exist")
        elif ignored_by_git(root, dest):
            problems.append(f"{where} names a git-ignored file, missing from a clone")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{where} names a heading that {dest.relative_to(root)} does not have")
    return problems


@pytest.mark.parametrize("page", doc_pages(ROOT), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(ROOT, page) == []


def test_readme_is_at_most_300_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the rest belongs in docs/"


def test_every_picture_in_docs_is_shown_by_a_page() -> None:
    linked = {
        (page.parent / target.partition("#")[0]).resolve()
        for page in doc_pages(ROOT)
        for target in LINK.findall(prose(page.read_text(encoding="utf-8")))
        if not SCHEME.match(target)
    }
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.png")) if p.resolve() not in linked]
    assert unlinked == []


def test_the_check_finds_each_kind_of_broken_link(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Two words\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "# Top\n\n"
        "[ok](docs/a.md) [ok heading](docs/a.md#two-words) [ok self](#top) [web](https://example.org/x)\n"
        "[missing](docs/b.md) [outside](../shared/CONTRACT.md) [bad heading](docs/a.md#three)\n"
        "![missing picture](docs/p.png) [pending](docs/architecture.md)\n"
        "`[in code](docs/c.md)`\n\n```\n[in a fence](docs/d.md)\n```\n",
        encoding="utf-8",
    )
    problems = broken_links(tmp_path, tmp_path / "README.md")
    assert [p.split(": ", 1)[1].split(")", 1)[0] + ")" for p in problems] == [
        "(docs/b.md)",
        "(../shared/CONTRACT.md)",
        "(docs/a.md#three)",
        "(docs/p.png)",
    ]


def test_slugs_follow_github() -> None:
    assert slug("The plan cycle: CP-SAT on windows (`scheduler/lns.py`)") == (
        "the-plan-cycle-cp-sat-on-windows-schedulerlnspy"
    )
    assert slug("Where the contract is silent: what gpuplan chose") == (
        "where-the-contract-is-silent-what-gpuplan-chose"
    )
