"""The README and the documentation site: built with `mkdocs build --strict`, every console example
produced by bench/gen_cli_reference.py and up to date, the reference covering every command, option
and exit code, and the JSON schema page every document kind and key."""

from __future__ import annotations

import functools
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


@pytest.mark.once("docs-site")  # the site is built once, in one share
def test_site_builds_with_every_page(site: Path) -> None:
    for page in ("index.html", "tutorials/inspect/index.html", "tutorials/tpu/index.html"):
        assert (site / page).is_file(), page


@pytest.mark.once("docs-site")  # the site is built once, in one share
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


@pytest.mark.once("docs-site")  # the site is built once, in one share
def test_reference_has_every_exit_code(site: Path) -> None:
    from shardcli.errors import ExitCode

    reference = _text(site / "reference" / "commands" / "index.html")
    explanation = _text(site / "explanation" / "exit-codes" / "index.html")
    for code in ExitCode:
        assert code.name in reference
        assert re.search(rf"\b{code.value}\b", explanation), code


@pytest.mark.once("docs-site")  # the site is built once, in one share
def test_json_schema_page_has_every_kind_and_key(site: Path) -> None:
    from shardcli.results.documents import DOCUMENTS
    from shardcli.results.records import MESH, RUNTIME

    text = _text(site / "reference" / "json-schema" / "index.html")
    for name, kind in DOCUMENTS.items():
        assert name in text
        for key in kind.record.keys:
            assert key in text, (name, key)
    for key in RUNTIME.keys + MESH.keys:
        assert key in text


def test_readme_is_short_and_starts_with_the_set_up() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "pip install -e ." in first_block and "bash .ci/run" in first_block
    assert text.index("## Set up") < text.index("```")


@functools.cache
def _generator_module():
    spec = importlib.util.spec_from_file_location(
        "gen_cli_reference", ROOT / "bench" / "gen_cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_console_example_is_generated() -> None:
    """Every marker names a block of bench/gen_cli_reference.py, and no console example (a fenced block
    with a `$ ` line) lies outside the markers."""
    gen = _generator_module()
    texts = {path: path.read_text(encoding="utf-8") for path in gen.doc_files()}
    assert gen.marker_problems(texts) == []
    assert len(gen.block_names(texts)) >= 50


def _block_names() -> list[str]:
    gen = _generator_module()
    return gen.block_names({path: path.read_text(encoding="utf-8") for path in gen.doc_files()})


@pytest.mark.slow
@pytest.mark.once
@pytest.mark.parametrize("name", _block_names())
def test_console_example_is_up_to_date(name: str) -> None:
    """`bench/gen_cli_reference.py --check --only NAME`, in-process: the block reruns and reads as the
    docs show it (timings compared with their digits masked)."""
    gen = _generator_module()
    missing = gen.missing_for(name)
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}; CI installs every extra (.ci/run)")
        pytest.skip(missing)
    stale = gen.check_block(name)
    assert stale == [], (
        f"out of date: {', '.join(stale)}; run python bench/gen_cli_reference.py --only {name}"
    )


WRAPPED_AT_ARGUMENTS = """\
lowered in 192 ms, compiled in 560 ms; nothing of the arguments'
size was allocated
┌──────┬──────────┐
│ impl │   time   │
├──────┼──────────┤
│ auto │  2.4 ms  │
└──────┴──────────┘"""
WRAPPED_AT_SIZE = """\
lowered in 1192 ms, compiled in 1560 ms; nothing of the arguments' size
was allocated
┌──────┬───────────┐
│ impl │   time    │
├──────┼───────────┤
│ auto │  12.41 ms │
└──────┴───────────┘"""


@pytest.mark.parametrize(
    ("old", "new", "equal"),
    [
        pytest.param(
            WRAPPED_AT_ARGUMENTS, WRAPPED_AT_SIZE, True, id="wider-timings-move-the-wrap-and-padding"
        ),
        pytest.param("busbw 1.4 GB/s  p50 381 us", "busbw 12.9 GB/s  p50 2.4 ms", True, id="unit-prefix"),
        pytest.param("x (cache) 3 ms", "x 3 ms", True, id="cache-mark"),
        pytest.param(
            WRAPPED_AT_ARGUMENTS, WRAPPED_AT_SIZE.replace("auto", "shard_map"), False, id="changed-cell"
        ),
        pytest.param("verified: ok", "verified: WRONG", False, id="changed-word"),
        pytest.param("a │ b │ rel err", "a │ b", False, id="a-column-left-out"),
        pytest.param(
            "x bound 0.51x\np50/bound under 1x (auto 0.51x): the bound is a model, not a floor; it assumes "
            "peak 2.1 GFLOP/s\n(measured) and link 551 MB/s (measured), and this run did better than those "
            "figures (a\nsmall size in cache, fused work, or figures measured under other load)"
            "\nverified: ok",
            "x bound 1.3x\nverified: ok",
            True,
            id="the-below-bound-note-comes-and-goes-with-the-timings",
        ),
        pytest.param(
            "x bound 0.51x\np50/bound under 1x for 3 runs: the bound is a model, not a floor (-v says why)"
            "\nverified: ok",
            "x bound 1.3x\nverified: ok",
            True,
            id="its-one-line-comes-and-goes-too",
        ),
    ],
)
def test_the_docs_check_compares_what_a_reader_would_call_the_same(old, new, equal):
    gen = _generator_module()
    gen.VOLATILE.add("probe")
    assert gen.same("probe", old, new) is equal
    assert gen.same("fixed", old, old) and not gen.same("fixed", old, old + " ")  # not VOLATILE: exact


PIPELINE_CHECKS = (
    "makespan 180 ms (compile 1.21 s, separate)\n"
    "ok   mpmd: the loss matches (max |err| 4.47e-08 <= 2.00e-05 (1e-4 x max|ref|))\n"
    "ok   mpmd: every layer's gradients match the unpipelined run (4 layers; worst layer 0 W: max |err|\n"
    "3.73e-09 vs bound 2.12e-06 (1e-4 x max|ref|))\n"
    "verified: every check passed (each of the 2 processes checked its own devices)"
)


@pytest.mark.parametrize(
    ("new", "equal"),
    [
        pytest.param(PIPELINE_CHECKS, True, id="itself"),
        pytest.param(
            PIPELINE_CHECKS.replace("worst layer 0 W: max |err|\n", "worst layer 3 b:\nmax |err| "),
            True,
            id="another-layer-and-parameter-worst-wrapped-elsewhere",
        ),
        pytest.param(PIPELINE_CHECKS.replace("makespan 180 ms", "makespan 1.4 s"), True, id="slower"),
        pytest.param(
            PIPELINE_CHECKS.replace("ok   mpmd: the loss", "FAIL mpmd: the loss"), False, id="a-failed-check"
        ),
        pytest.param(
            PIPELINE_CHECKS.replace("the loss matches", "the loss differs"), False, id="another-statement"
        ),
        pytest.param(PIPELINE_CHECKS.replace("verified: every check passed ", ""), False, id="no-verdict"),
    ],
)
def test_a_multi_process_block_is_compared_by_what_it_states(new, equal):
    """The processes' timing decides which layer's parameter is worst (and how the line wraps); the
    check compares each check's verdict and subject, not the details in its parentheses."""
    gen = _generator_module()
    assert "tutorial-pipeline-launch" in gen.STATED
    assert gen.same("tutorial-pipeline-launch", PIPELINE_CHECKS, new) is equal


def test_a_column_left_out_by_wider_timings_reads_the_same_a_few_columns_wider(monkeypatch):
    """The generated text kept a column that this run's wider timings push out at 100 columns."""
    gen = _generator_module()
    generated = "impl time rel err\nauto 2.4 ms 1e-7"

    def block(columns: int = gen.COLUMNS) -> str:
        return generated.replace("2.4", "12.4") if columns >= gen.COLUMNS + 4 else "impl time\nauto 12.4 ms"

    monkeypatch.setitem(gen.BLOCKS, "probe", block)
    gen.VOLATILE.add("probe")
    assert not gen.same("probe", generated, block())
    assert gen.same_at_some_width("probe", generated)
    monkeypatch.setitem(gen.BLOCKS, "probe", lambda columns=gen.COLUMNS: "impl time\nauto 12.4 ms")
    assert not gen.same_at_some_width("probe", generated)  # left out at every width: a real change


HEADER_0_10 = "$ shardcli mesh --mesh 4\nplatform  cpu, 4 faked CPU devices, kind cpu\n" + (
    "compiler  jax 0.10.2, jaxlib 0.10.2"
)
INSPECT_0_10 = "$ shardcli inspect llama.py:step -q\nmemory 12 MiB per device\ncollectives: 4 ops in 2 groups"
INSPECT_0_12 = (
    "$ shardcli inspect llama.py:step -q\n"
    "W1127 16:56:53.623271   24996 spmd_partitioner.cc:666] [SPMD] Involuntary full rematerialization.\n"
    "memory 11 MiB per device\ncollectives: 5 ops in 3 groups"
)


@pytest.mark.parametrize(
    ("name", "old", "new", "jax_version", "equal"),
    [
        pytest.param(
            "fixed",
            HEADER_0_10,
            HEADER_0_10.replace("0.10.2", "0.12.0.1"),
            "0.12.0.1",
            True,
            id="versions-named",
        ),
        pytest.param(
            "fixed",
            HEADER_0_10 + ", libtpu 0.0.52",
            HEADER_0_10.replace("0.10.2", "0.12.0.1") + ", libtpu 0.0.53",
            "0.12.0.1",
            True,
            id="libtpu-version",
        ),
        pytest.param(
            "fixed", HEADER_0_10, HEADER_0_10.replace("4 faked", "8 faked"), "0.12.0.1", False, id="fixed"
        ),
        pytest.param("readme-inspect", INSPECT_0_10, INSPECT_0_12, "0.12.0.1", True, id="compiler-dependent"),
        pytest.param(
            "readme-inspect", INSPECT_0_10, INSPECT_0_12, "0.10.2", False, id="exact-under-examples-jax"
        ),
        pytest.param(
            "readme-inspect",
            INSPECT_0_10,
            "$ shardcli inspect llama.py:step -q\nshardcli: error: the program failed to trace",
            "0.12.0.1",
            False,
            id="compiler-dependent-but-failed",
        ),
        pytest.param(
            "readme-inspect",
            INSPECT_0_10,
            INSPECT_0_12 + "\nTraceback (most recent call last):",
            "0.12.0.1",
            False,
            id="compiler-dependent-with-a-traceback",
        ),
    ],
)
def test_the_docs_check_under_another_jax(name, old, new, jax_version, equal):
    """Examples are made with EXAMPLES_JAX; another JAX of the window names other versions in each
    header, and changes what a few examples (COMPILER_DEPENDENT) print after their first line."""
    gen = _generator_module()
    assert gen.EXAMPLES_JAX == "0.10.2" and "readme-inspect" in gen.COMPILER_DEPENDENT
    assert gen.same(name, old, new, jax_version) is equal


def test_the_json_schema_page_states_the_version_the_tool_writes() -> None:
    from shardcli.results.documents import SCHEMA_VERSION

    page = (ROOT / "docs" / "reference" / "json-schema.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `schema` |"))
    assert row.startswith(f"| `schema` | `{SCHEMA_VERSION}`:"), row


# --- the docs' claims about output (issue 41) ------------------------------------------------------


def _pages() -> list[Path]:
    """README.md and every page of the docs site."""
    docs = ROOT / "docs"
    return [README, *sorted(p for p in docs.rglob("*.md") if "hooks" not in p.relative_to(docs).parts)]


def _split_page(text: str) -> tuple[str, list[str]]:
    """A page's prose (fenced blocks left out) and its console blocks."""
    prose: list[str] = []
    blocks: list[str] = []
    block: list[str] = []
    inside: str | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if inside is None:
                inside, block = line[3:].strip(), []
            else:
                if inside == "console":
                    blocks.append("\n".join(block))
                inside = None
        elif inside is None:
            prose.append(line)
        else:
            block.append(line)
    return "\n".join(prose), blocks


def _header_keys(block: str) -> set[str]:
    """The keys of the `key  value` header lines a console block shows."""
    return {m.group(1) for m in re.finditer(r"^([a-z][a-z ]*?[a-z]) {2,}\S", block, re.MULTILINE)}


def test_the_index_names_every_command() -> None:
    """docs/index.md's table of commands is the CLI's: none missing (it lacked `run` and `plan`),
    none that does not exist."""
    import typer.main

    from shardcli.cli import app

    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    table = text.split("## The commands", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^\| `([a-z-]+)` \|", table, re.MULTILINE)
    commands = list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert sorted(named) == sorted(commands)
    assert len(named) == len(set(named))


def test_every_header_line_the_docs_name_is_in_an_example() -> None:
    """A page that names a header line (`the header's buffers line`) shows it in one of its
    examples; where the page says the line is there under `-v`, an example run with -v shows it."""
    verbose_keys: set[str] = set()
    pages = {}
    for page in _pages():
        prose, blocks = _split_page(page.read_text(encoding="utf-8"))
        pages[page] = prose, set().union(*map(_header_keys, blocks)) if blocks else set()
        for block in blocks:
            if re.search(r"^\$ shardcli .* (-v|--verbose)\b", block, re.MULTILINE):
                verbose_keys |= _header_keys(block)
    named = []
    for page, (prose, keys) in pages.items():
        for m in re.finditer(r"header's `([a-z ]+)` line( \(under `-v`)?", " ".join(prose.split())):
            key, verbose = m.group(1), bool(m.group(2))
            named.append(key)
            shown = verbose_keys if verbose else keys
            assert key in shown, f"{page.relative_to(ROOT)} names the header's {key!r} line, never shown"
    assert {"buffers", "allocator", "timing"} <= set(named)


def test_verbose_header_lines_are_named_as_verbose() -> None:
    """Each header line the docs name without `(under -v)` is in the default header (not -v only)."""
    pages = [(p, *_split_page(p.read_text(encoding="utf-8"))) for p in _pages()]
    default_keys = set().union(
        *(
            _header_keys(block)
            for _, _, blocks in pages
            for block in blocks
            if not re.search(r"^\$ shardcli .* (-v|--verbose)\b", block, re.MULTILINE)
        )
    )
    for page, prose, _ in pages:
        for m in re.finditer(r"header's `([a-z ]+)` line(?! \(under `-v`)", " ".join(prose.split())):
            assert m.group(1) in default_keys, (page.relative_to(ROOT), m.group(1))


# Phrases that promise how long something takes: the time goes to what dominates it (a compile, the
# machine's load), so the docs say what dominates, or give a measured figure with its machine.
TIMING_PROMISES = re.compile(
    r"a few seconds|about a second|in (about |under )?a second|seconds each|fraction of a second"
    r"|in milliseconds|instantly|in no time",
    re.IGNORECASE,
)


def test_no_page_promises_a_time() -> None:
    found = []
    for page in _pages():
        prose, _ = _split_page(page.read_text(encoding="utf-8"))
        joined = " ".join(prose.split())
        found += [f"{page.relative_to(ROOT)}: {m.group(0)!r}" for m in TIMING_PROMISES.finditer(joined)]
    assert found == []


@pytest.mark.parametrize(
    ("text", "promises"),
    [
        pytest.param("three compiles, a few seconds each", True, id="a-few-seconds"),
        pytest.param("is inspected on a\nlaptop in about a second.", True, id="across-a-line-break"),
        pytest.param("8 compiles in 7 min 34 s on the development machine", False, id="a-measured-figure"),
    ],
)
def test_the_timing_check_reads_a_promise(text, promises):
    assert bool(TIMING_PROMISES.search(" ".join(text.split()))) is promises


def test_every_bound_an_example_shows_is_explained() -> None:
    """`model-bound on TPU v5e` in an example: `model` is a mesh axis, not a unit, so the page
    says what a bound named after an axis means (math and hbm are their own words)."""
    for page in _pages():
        prose, blocks = _split_page(page.read_text(encoding="utf-8"))
        shown = {m.group(1) for block in blocks for m in re.finditer(r"\b([\w+]+)-bound on ", block)}
        for word in sorted(shown - {"math", "hbm"}):
            assert f"`{word}-bound`" in prose, f"{page.relative_to(ROOT)} shows {word}-bound unexplained"


def test_the_plan_rule_sets_are_explained() -> None:
    """The rule-set names a plan prints (`tp4 fsdp-tp`) are said in the tutorial and in --help."""
    import typer.main

    from shardcli.cli import app
    from shardcli.plan.candidates import RULE_SETS

    prose, _ = _split_page((ROOT / "docs" / "tutorials" / "plan.md").read_text(encoding="utf-8"))
    help_text = typer.main.get_command(app).commands["plan"].help  # type: ignore[attr-defined]
    first_table = prose.index("<!-- readme-plan:start -->")
    for name in RULE_SETS:
        assert f"`{name}`" in prose[:first_table], name  # before the first table shows one
        assert f"{name} (" in help_text, name


def test_the_plan_tutorial_says_what_its_batch_column_holds() -> None:
    """`--batch 2` is sequences per chip; the tiny table's `batch` is the global batch, as the prose
    before it says: every row's batch is --batch times the chips of the header."""
    page = (ROOT / "docs" / "tutorials" / "plan.md").read_text(encoding="utf-8")
    prose = " ".join(page.split("<!-- readme-plan:start -->", 1)[0].split())
    block = page.split("<!-- readme-plan:start -->", 1)[1].split("<!-- readme-plan:end -->", 1)[0]
    per_chip = int(re.search(r"--batch (\d+)", block).group(1))  # type: ignore[union-attr]
    chips = int(re.search(r"^(\d+) chips,", block, re.MULTILINE).group(1))  # type: ignore[union-attr]
    rows = re.findall(r"^ +\d+ +\S+ +\S+ +(\d+) +(?:yes|no) ", block, re.MULTILINE)
    assert rows and {int(b) for b in rows} == {per_chip * chips}, block
    assert f"`--batch {per_chip}` is sequences per chip" in prose
    assert f"those {per_chip} on each of the {chips} chips" in prose
