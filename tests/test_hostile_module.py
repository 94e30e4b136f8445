"""The hostile harness of the module reader: `shardcli inspect PATH.hlo.txt --target gpu-h200:1` on
generated mutations of the four H200 fixtures (examples/gpu_h200).

Truncations at several points (of the text and of its gzip), byte flips, huge and odd numbers in
place of a number, unknown element types, JSON nested deep in a backend config, replica groups no
compiler writes, cycles and fan-out in the call graph, hostile headers, and files that are no file.
Every case must end by the contract (docs/explanation/exit-codes.md): exit 0, 1 or 2, never 3; no
traceback and no "internal error"; bad input in one line on stderr; with `--format json` and exit
0, stdout is one JSON document (no NaN or Infinity); and each within a bounded time.

The mutations fall mostly on the small fixture (mlp_bf16, a quarter of a second a case) and on cuts
of the big ones before their entry computation (refused while the text is checked); a few run a
big fixture's whole analysis (seconds each). `pytest -m hostile` runs it with the other harness
(about a minute with one core); the generator's size is pinned below so it cannot shrink silently.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import signal
from pathlib import Path

import pytest
from conftest import error_lines
from hlo_modules import call_chain, gpu_module

from shardcli.hardware.compilers import compiler_installed

pytestmark = [
    pytest.mark.hostile,
    pytest.mark.slow,
    pytest.mark.skipif(not compiler_installed("cuda"), reason="the gpu extra: JAX's CUDA plugin"),
]

FIXTURES = Path(__file__).resolve().parent.parent / "examples" / "gpu_h200"
NAMES = ("mlp_bf16", "llama1b", "gemma-2b_full_b2", "llama2-7b_full_b1")
TARGET = ["--target", "gpu-h200:1"]
CASE_SECONDS = 30  # any one case; a hang (an exponential walk, a backtracking regex) fails here
GENERATED = 200  # the generator's size, pinned: a change that drops cases must say so here


def _fixture(name: str) -> str:
    return gzip.decompress((FIXTURES / f"{name}.hlo.txt.gz").read_bytes()).decode()


def _cut(text: str, share: float) -> str:
    return text[: int(len(text) * share)]


def _flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at % len(out)] ^= 0xFF
    return bytes(out)


_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?![\w.])")
HUGE = ("9" * 400, "9" * 5000, "9" * 23, "1e999", "-1", "0", "18446744073709551616", "\u00b2", "1.5")


def _numbers(text: str, rng: random.Random, count: int) -> list[tuple[str, str]]:
    """`count` texts with one number swapped for a hostile one (positions drawn by `rng`)."""
    spots = [m.span() for m in _NUMBER_RE.finditer(text)]
    out = []
    for k in range(count):
        start, end = spots[rng.randrange(len(spots))]
        value = HUGE[k % len(HUGE)]
        out.append((f"at{start}={value[:6]}x{len(value)}", text[:start] + value + text[end:]))
    return out


TYPES = ("zz9", "f8e4m3fnuz", "f8e4m3b11fnuz", "f4e2m1fn", "f8e8m0fnu", "s2", "u1", "token", "opaque", "F32")
GROUPS = (
    "[2,4]<=[3]",
    "[4000000000,4000000000]<=[16000000000000000000]",
    "[2,4]<=[4,2]T(1,5)",
    "[2,4]<=[4,2]T(0,0)",
    "[0]<=[0]",
    "[1,1]<=[1]",
    "{{0,1},{2}}",
    "{{" + "9" * 400 + "}}",
    "{{" + "9" * 5000 + "}}",
    "{}",
    "mesh['a'=2,'b'=4]{'c'}",
    "mesh['a'=2,'a'=4]{'a'}",
    "mesh['a'=3], device_ids=([2,2]T(1,0)) {'a'}",
    "[1]<=[1]T()",
)
HEADERS = (
    ", num_partitions=0",
    ", num_partitions=-1",
    ", num_partitions=" + "9" * 30,
    ", entry_computation_layout={(" + ")->}x" * 40_000,
    ", entry_computation_layout={(" + "f32[1]{0}, " * 20_000,
    ", frontend_attributes={" * 20_000,
)


def _mlp_variants(mlp: str, rng: random.Random) -> list[tuple[str, str | bytes]]:
    """Mutations of the small fixture: (id, the file's text or bytes)."""
    out: list[tuple[str, str | bytes]] = []
    raw = mlp.encode()
    for share in (0.0, 0.05, 0.3, 0.6, 0.8, 0.9, 0.95, 0.99):
        out.append((f"cut{share}", _cut(mlp, share)))
    out.append(("cut-last-line", mlp.rstrip("\n").rsplit("\n", 1)[0]))
    for at in rng.sample(range(len(raw)), 24):
        out.append((f"flip{at}", _flip(raw, at)))
    out += _numbers(mlp, rng, 27)
    for name in TYPES:
        out.append((f"type-{name}", mlp.replace("bf16[", f"{name}[")))
        out.append((f"type-{name}-once", mlp.replace("bf16[16384,16384]", f"{name}[16384,16384]", 1)))
    deep = "[" * 100_000 + "]" * 100_000
    out.append(
        ("deep-json", mlp.replace('"gemm_backend_config":{', f'"deep":{deep},"gemm_backend_config":{{'))
    )
    out.append(("open-json", mlp.replace("backend_config={", "backend_config={" + "{" * 100_000, 1)))
    out.append(("deep-quoted", mlp.replace("backend_config={", 'backend_config="' + '\\"' * 50_000, 1)))
    out.append(("no-config", re.sub(r"backend_config=\{.*\}$", "", mlp, flags=re.M)))
    for header in HEADERS:
        first, rest = mlp.split("\n", 1)
        out.append((f"header{len(header)}-{header[2:12]}", first + header + "\n" + rest))
    out.append(("bom", "\ufeff" + mlp))
    out.append(("crlf", mlp.replace("\n", "\r\n")))
    out.append(("nul", mlp.replace("ENTRY", "EN\0TRY")))
    out.append(("latin1", raw.replace(b"jit(mlp_bf16)", b"jit(\xe9)")))
    out.append(("cycle", mlp.replace("calls=%fused_computation.1", "calls=%main.1")))
    out.append(
        ("self-call", mlp.replace("calls=%fused_computation.1", "calls=%fused_computation.1, to_apply=%x"))
    )
    out.append(("undefined-call", mlp.replace("calls=%fused_computation.1", "calls=%nothing")))
    out.append(("two-entries", mlp + "\n" + mlp[mlp.index("ENTRY") :]))
    out.append(("no-root", mlp.replace("ROOT ", "")))
    out.append(("dup-names", mlp.replace("%x.1 =", "%w1.1 =")))
    return out


def _module_variants(rng: random.Random) -> list[tuple[str, str | bytes]]:
    """Mutations of the hand-written module of a loop and a GEMM (tests/hlo_modules.py)."""
    out: list[tuple[str, str | bytes]] = [
        ("gemm-base", gpu_module()),
        *((f"groups-{g[:24]}x{len(g)}", gpu_module(groups=g)) for g in GROUPS),
        *((f"trips-{t[:6]}x{len(t)}", gpu_module(trips=t)) for t in HUGE),
        *((f"bound-{b[:6]}x{len(b)}", gpu_module(trips="x", bound=b)) for b in HUGE),
        *(
            (f"contracting-{c[:6]}", gpu_module(contracting=c))
            for c in ('"9"', "1e999", "-1", "true", "[]", "null")
        ),
        ("body-nobody", gpu_module(body="nobody")),
        ("body-is-cond", gpu_module(body="cond")),
        ("body-is-entry", gpu_module(body="main")),
        ("fanout-40", call_chain(40)),
        ("fanout-12x4", call_chain(12, 4)),
        ("chain-cycle", call_chain(3).replace("add(%p3, %p3)", "call(%p3), to_apply=%c0")),
    ]
    rng.shuffle(out)
    return out


def _big_variants(name: str, text: str, rng: random.Random) -> list[tuple[str, str | bytes]]:
    """Cuts of a big fixture (most before its entry, refused as it is checked) and a flip in the
    whole analysis."""
    entry = text.index("\nENTRY ")
    out: list[tuple[str, str | bytes]] = [
        (f"{name}-cut{share}", _cut(text, share)) for share in (0.01, 0.2, 0.5)
    ]
    out.append((f"{name}-cut-in-entry", text[: entry + (len(text) - entry) // 2]))
    at = rng.randrange(entry)
    out.append((f"{name}-flip{at}", _flip(text.encode(), at)))
    return out


def _gzip_variants(name: str, rng: random.Random) -> list[tuple[str, bytes]]:
    """The fixture's gzip cut short, flipped, or doubled (two members)."""
    data = (FIXTURES / f"{name}.hlo.txt.gz").read_bytes()
    out = [(f"{name}-gz-cut{n}", data[:n]) for n in (0, 5, 100, len(data) // 2, len(data) - 4)]
    out += [(f"{name}-gz-flip{at}", _flip(data, at)) for at in (3, 12, *rng.sample(range(20, len(data)), 2))]
    if name == "mlp_bf16":
        out.append((f"{name}-gz-two-members", data + data))
        out.append((f"{name}-gz-trailing-zeros", data + bytes(64)))
        out.append((f"{name}-gz-trailing-junk", data + b"junk"))
        out.append((f"{name}-gz-plain-text", _fixture(name).encode()))
    return out


def module_cases() -> list[tuple[str, str, str | bytes, list[str]]]:
    """Every generated case: (id, file name, content, extra flags), the same on every run."""
    rng = random.Random(54)
    texts = {name: _fixture(name) for name in NAMES}
    cases: list[tuple[str, str, str | bytes, list[str]]] = []
    formats: tuple[list[str], ...] = (["-f", "json"], [], ["-f", "csv"])
    for k, (case_id, content) in enumerate(_mlp_variants(texts["mlp_bf16"], rng)):
        fmt = formats[k % len(formats)] if k % 4 else ["-f", "json"]
        cases.append((f"mlp-{case_id}{''.join(fmt)}", "m.hlo.txt", content, fmt))
    for k, (case_id, content) in enumerate(_module_variants(rng)):
        cases.append((f"gemm-{case_id}", "m.hlo.txt", content, ["-f", "json"] if k % 3 else []))
    for name in NAMES[1:]:
        for case_id, content in _big_variants(name, texts[name], rng):
            cases.append((case_id, "m.hlo.txt", content, ["-f", "json"]))
    for name in NAMES:
        for case_id, content in _gzip_variants(name, rng):
            cases.append((case_id, "m.hlo.txt.gz", content, ["-f", "json"]))
    return cases


CASES = module_cases()
# Files that are no module's file, and a --save that would overwrite the module.
PLACES = ("folder", "fifo", "dev-zero", "dangling-link", "unreadable", "save-onto-it", "save-through-link")


def test_the_module_harness_generates_its_pinned_number_of_distinct_cases():
    ids = [case_id for case_id, *_ in CASES]
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)[:10]
    assert len(ids) == GENERATED, len(ids)
    sources = {case_id.split("-")[0] for case_id in ids}
    assert {"mlp", "gemm", "llama1b", "gemma", "llama2"} <= sources, sources


def _run_within(cli, given: list[str], seconds: int):
    """`cli(given)`, failed with TimeoutError if it runs past `seconds` (a hang is a defect too)."""

    def late(*_):
        raise TimeoutError(f"the case took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        return cli(given)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _check(result, given: list[str]) -> None:
    shown = f"{given}: exit {result.exit_code}\n{result.output[-2000:]}"
    assert result.exit_code in (0, 1, 2), shown
    assert "Traceback (most recent call last):" not in result.output, shown
    assert "internal error" not in result.output, shown
    if result.exit_code == 2:
        lines = error_lines(result.stderr)
        assert len(lines) == 1 and lines[0].startswith("shardcli: error: "), shown
    if result.exit_code in (0, 1) and "json" in given:

        def refuse(constant: str) -> None:
            raise ValueError(f"{constant} is not JSON")

        json.loads(result.stdout, parse_constant=refuse)


@pytest.mark.parametrize(("name", "content", "flags"), [pytest.param(n, c, f, id=i) for i, n, c, f in CASES])
def test_every_mutated_module_ends_by_the_contract(cli, tmp_path, name, content, flags):
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8", newline="")
    else:
        path.write_bytes(content)
    given = ["inspect", str(path), *TARGET, *flags]
    result = _run_within(cli, given, CASE_SECONDS)
    _check(result, given)


@pytest.mark.parametrize("place", PLACES)
def test_a_place_that_is_no_module_file_is_one_line(cli, tmp_path, place):
    path = tmp_path / "x.hlo.txt"
    save: list[str] = []
    if place == "folder":
        path.mkdir()
    elif place == "fifo":
        os.mkfifo(path)
    elif place == "dev-zero":
        path.symlink_to("/dev/zero")
    elif place == "dangling-link":
        path.symlink_to(tmp_path / "nothing")
    elif place == "unreadable":
        path.write_text(gpu_module())
        path.chmod(0)
    else:
        path.write_text(gpu_module())
        link = tmp_path / "report.txt"
        link.symlink_to(path)
        save = ["--save", str(path if place == "save-onto-it" else link)]
    given = ["inspect", str(path), *TARGET, *save]
    result = _run_within(cli, given, CASE_SECONDS)
    _check(result, given)
    if place != "unreadable" or os.geteuid() != 0:  # root reads a file of mode 0
        assert result.exit_code == 2, result.output
    if save:
        assert path.read_text() == gpu_module()


def test_a_mesh_size_of_23_digits_says_it_is_too_large(cli):
    out = cli(["plan", "--preset", "tiny", "--target", "tpu-v5e:2x2", "--mesh", "data=" + "1" * 23])
    assert out.exit_code == 2, out.output
    assert "the size of data, 23 digits, is too large; a mesh axis holds at most 999,999,999" in out.stderr
    assert "not a positive whole number" not in out.stderr
