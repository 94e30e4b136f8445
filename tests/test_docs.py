"""The README and the documentation site: built with `mkdocs build --strict`, every console example
produced by bench/gen_cli_reference.py and up to date, the reference covering every command, option
and exit code, and the JSON schema page every document kind and key."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _need_mkdocs() -> None:
    """Skip where the docs extra is not installed; in CI (which installs it) that is a failure."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        if os.environ.get("CI"):
            pytest.fail("the docs extra is not installed; CI installs it (.ci/run)")
        pytest.skip("the docs extra is not installed: pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with `mkdocs build --strict` (a warning, such as a broken link, fails)."""
    _need_mkdocs()
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _text(page: Path) -> str:
    """A built page's text, tags left out and entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


def test_site_builds_with_every_page(site: Path) -> None:
    for page in ("index.html", "tutorials/inspect/index.html", "tutorials/tpu/index.html"):
        assert (site / page).is_file(), page


def test_reference_has_every_command_and_option(site: Path) -> None:
    import typer.main

    from shardcli.cli import app

    text = _text(site / "reference" / "commands" / "index.html")
    group = typer.main.get_command(app)
    commands = [([name], cmd) for name, cmd in group.commands.items()]  # type: ignore[attr-defined]
    commands += [
        ([name, sub], subcmd)
        for name, cmd in group.commands.items()  # type: ignore[attr-defined]
        for sub, subcmd in getattr(cmd, "commands", {}).items()
    ]
    missing = []
    for path, command in commands:
        if f"$ shardcli {' '.join(path)} --help" not in text:
            missing.append(" ".join(path))
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("-") and opt not in text:
                    missing.append(f"{' '.join(path)} {opt}")
    assert not missing


def test_reference_has_every_exit_code(site: Path) -> None:
    from shardcli.errors import ExitCode

    reference = _text(site / "reference" / "commands" / "index.html")
    explanation = _text(site / "explanation" / "exit-codes" / "index.html")
    for code in ExitCode:
        assert code.name in reference
        assert re.search(rf"\b{code.value}\b", explanation), code


def test_json_schema_page_has_every_kind_and_key(site: Path) -> None:
    from shardcli import json_schema

    text = _text(site / "reference" / "json-schema" / "index.html")
    for name, kind in json_schema.DOCUMENTS.items():
        assert name in text
        for key in kind.record.keys:
            assert key in text, (name, key)
    for key in json_schema.RUNTIME.keys + json_schema.MESH.keys:
        assert key in text


def test_readme_is_short_and_starts_with_the_set_up() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "pip install -e ." in first_block and "bash .ci/run" in first_block
    assert text.index("## Set up") < text.index("```")


def test_every_console_example_is_generated_and_up_to_date() -> None:
    """bench/gen_cli_reference.py --check: every example in README.md and docs/ reruns (timings
    compared with their digits masked), and no console example lies outside its markers."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gen_cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
