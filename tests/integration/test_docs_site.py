"""`make docs`: the documentation site builds with every warning an error, its API reference
names everything `import txstream` gives, and a broken link between pages fails the build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import txstream

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MKDOCS, "-f", str(config), "--site-dir", str(site)], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_site_builds_strict_with_every_public_name_in_its_api_reference(
    tmp_path: Path,
) -> None:
    listed = re.findall(r"^::: txstream\.(\w+)$", (ROOT / "docs/api.md").read_text(), re.M)
    assert sorted(listed) == sorted(txstream.__all__), "docs/api.md lists txstream.__all__"
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "site/api/index.html").read_text()
    missing = [n for n in txstream.__all__ if f'id="txstream.{n}"' not in page]
    assert missing == [], "every name rendered from its docstring"


def test_a_broken_link_between_pages_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the guide](guide.md#setup).\n")
    (docs / "guide.md").write_text("# Guide\n\n## Install\n")
    config = tmp_path / "mkdocs.yml"
    mine = (ROOT / "mkdocs.yml").read_text()
    settings = mine.split("\nplugins:", 1)[0].replace("docs_dir: docs", f"docs_dir: {docs}")
    validation = mine[mine.index("\nvalidation:") :].split("\nnav:", 1)[0]
    config.write_text(settings + validation + "\n")
    done = build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "guide.md#setup" in done.stdout + done.stderr, "the bad anchor is named"
    (docs / "index.md").write_text("# Home\n\nSee [the guide](guide.md#install).\n")
    assert build(config, tmp_path / "site").returncode == 0
