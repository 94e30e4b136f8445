"""The memory roofline (min bytes per collective, host copy bandwidth), its column and JSON, and --malloc."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from shardcli.errors import ShardcliError
from shardcli.playground.collective.cases import get_collective
from shardcli.playground.collective.placement import Roofline, _roofline_fraction, resolve_roofline
from shardcli.playground.roofline import (
    COPY_CACHE_FILE,
    MinBytes,
    measure_copy_bandwidth,
    min_bytes,
    min_bytes_rule,
    streams_with_tunable,
)
from shardcli.runtime.allocator import tune_for_reuse

B = 1024  # bytes per device in the formula cases


@pytest.mark.parametrize(
    ("name", "n", "kw", "read", "written"),
    [
        pytest.param("psum", 8, {}, 8 * B, 8 * B, id="psum-8"),
        pytest.param("pmean", 4, {}, 4 * B, 4 * B, id="pmean-4"),
        pytest.param("pmax", 2, {}, 2 * B, 2 * B, id="pmax-2"),
        pytest.param("pmin", 1, {}, B, B, id="pmin-1"),
        pytest.param("all_gather", 8, {}, 8 * B, 64 * B, id="all_gather-8"),
        pytest.param("psum_scatter", 8, {}, 8 * B, B, id="psum_scatter-8"),
        pytest.param("ppermute", 8, {}, 8 * B, 8 * B, id="ppermute-ring"),
        pytest.param("ppermute", 8, {"senders": 3}, 3 * B, 8 * B, id="ppermute-3-senders"),
        pytest.param("all_to_all", 4, {}, 4 * B, 4 * B, id="all_to_all-4"),
        pytest.param("broadcast", 8, {}, B, 8 * B, id="broadcast-8"),
        pytest.param("psum", 4, {"groups": 2}, 8 * B, 8 * B, id="psum-2-groups-of-4"),
        pytest.param("all_gather", 2, {"groups": 4}, 8 * B, 16 * B, id="all_gather-4-groups-of-2"),
    ],
)
def test_min_bytes(name, n, kw, read, written):
    need = min_bytes(name, B, n, **kw)
    assert need == MinBytes(read=read, written=written)
    assert need.total == read + written


def test_min_bytes_for_a_collective_that_moves_nothing():
    assert min_bytes("axis_index", B, 8) is None
    assert min_bytes_rule("axis_index") is None


def test_min_bytes_takes_the_entry_or_its_name():
    entry = get_collective("ppermute")
    assert min_bytes(entry, B, 8, senders=3) == min_bytes("ppermute", B, 8, senders=3)
    assert min_bytes_rule(entry) == min_bytes_rule("ppermute") == "read the sent blocks, write n outputs"
    with pytest.raises(ShardcliError, match="unknown collective 'psum_all'"):
        min_bytes("psum_all", B, 8)


def test_copy_bandwidth_is_measured_with_the_threads_asked():
    copy = measure_copy_bandwidth(nbytes=1 << 20, threads=2, repeats=2)
    assert copy.threads == 2 and copy.repeats == 2 and copy.nbytes == 1 << 20
    assert copy.bytes_per_s > 0
    assert "GB/s" in copy.describe() and "2 threads" in copy.describe() and "1 MiB each" in copy.describe()


def test_many_threads_copy_less_each(monkeypatch):
    from shardcli.playground import roofline

    monkeypatch.setattr(roofline, "COPY_TOTAL_MAX", 4 << 20)
    copy = roofline.measure_copy_bandwidth(nbytes=8 << 20, threads=4, repeats=1)
    assert copy.nbytes == 1 << 20  # 4 threads x 1 MiB = the 4 MiB cap, not 4 x 8 MiB


needs_tunable = pytest.mark.skipif(
    not streams_with_tunable(),
    reason="glibc's memcpy tunables: Linux on x86 only",
)


@pytest.mark.slow
@needs_tunable
def test_the_streaming_figure_is_measured_in_a_child_with_the_tunable_added(monkeypatch):
    import subprocess

    from shardcli.playground import roofline

    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")
    seen = []
    real_run = subprocess.run

    def run(argv, **kwargs):
        seen.append(kwargs["env"]["GLIBC_TUNABLES"])
        return real_run(argv, **kwargs)

    monkeypatch.setattr(roofline.subprocess, "run", run)
    copy = roofline.measure_streaming_copy_bandwidth(nbytes=1 << 20, threads=1, repeats=1)
    assert seen == [f"glibc.malloc.hugetlb=0:{roofline.STREAMING_TUNABLE}"]  # the user's kept
    assert copy.streaming and copy.bytes_per_s > 0 and copy.threads == 1 and copy.nbytes == 1 << 20
    assert copy.describe().endswith("best of 1, streaming stores)")


@needs_tunable
def test_a_failing_child_leaves_the_in_process_figure_and_says_why(monkeypatch):
    import shutil

    from shardcli.playground import roofline

    monkeypatch.setattr(roofline.sys, "executable", shutil.which("false"))
    with pytest.raises(roofline.StreamingMeasureError, match="the child exited 1"):
        roofline.measure_streaming_copy_bandwidth(nbytes=1 << 20, threads=1, repeats=1)
    copy = roofline.measure_best_copy_bandwidth(threads=1, repeats=1)
    assert not copy.streaming and copy.bytes_per_s > 0
    assert copy.describe().endswith("; no streaming-store figure: the child exited 1")


@needs_tunable
def test_the_child_imports_this_shardcli_from_any_folder(monkeypatch, tmp_path):
    """A `shardcli/` folder in the working directory (an old checkout) must not shadow the module."""
    from shardcli.playground import roofline

    fake = tmp_path / "shardcli"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the wrong shardcli')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    copy = roofline.measure_streaming_copy_bandwidth(nbytes=1 << 20, threads=1, repeats=1)
    assert copy is not None and copy.streaming


@pytest.mark.parametrize(
    "here, streaming, expected",
    [
        pytest.param(86e9, 129e9, 129e9, id="streaming-faster"),  # the 16-core host
        pytest.param(30e9, 29e9, 30e9, id="in-process-faster"),
        pytest.param(30e9, None, 30e9, id="no-tunable"),
    ],
)
def test_the_roofline_is_the_better_of_the_two_figures(monkeypatch, here, streaming, expected):
    from shardcli.playground import roofline

    def fake(bytes_per_s, **flags):
        return roofline.CopyBandwidth(bytes_per_s, threads=16, nbytes=32 << 20, repeats=10, **flags)

    monkeypatch.setattr(roofline, "measure_copy_bandwidth", lambda **kw: fake(here))
    monkeypatch.setattr(
        roofline,
        "measure_streaming_copy_bandwidth",
        lambda **kw: None if streaming is None else fake(streaming, streaming=True),
    )
    best = roofline.measure_best_copy_bandwidth()
    assert best.bytes_per_s == expected and best.streaming == (expected == streaming)


@pytest.fixture
def counted_measure(monkeypatch):
    """`measure_copy_bandwidth` replaced by a fast fake that counts its calls; a fresh process cache."""
    from shardcli.playground import roofline

    calls = []

    def fake(nbytes=roofline.COPY_BYTES, threads=None, repeats=roofline.COPY_REPEATS):
        calls.append(1)
        return roofline.CopyBandwidth(bytes_per_s=20e9 + len(calls), threads=2, nbytes=64 << 20, repeats=10)

    monkeypatch.setattr(roofline, "measure_copy_bandwidth", fake)
    monkeypatch.setattr(roofline, "measure_streaming_copy_bandwidth", lambda **kw: None)
    roofline._host_copy_bandwidth.cache_clear()
    yield calls
    roofline._host_copy_bandwidth.cache_clear()


def _fresh_process():
    from shardcli.playground import roofline

    roofline._host_copy_bandwidth.cache_clear()
    return roofline.host_copy_bandwidth


def test_copy_bandwidth_is_measured_once_per_machine_with_a_cache_directory(counted_measure, tmp_path):
    first = _fresh_process()(str(tmp_path))
    second = _fresh_process()(str(tmp_path))
    assert len(counted_measure) == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.bytes_per_s == first.bytes_per_s and second.measured_at == first.measured_at
    assert first.measured_at.endswith("Z") and "read from the cache" in second.describe()
    assert "cache" not in first.describe()


def test_copy_bandwidth_without_a_cache_directory_is_measured_every_run(counted_measure, tmp_path):
    _fresh_process()(None)
    _fresh_process()(None)
    assert len(counted_measure) == 2


def _edit_entry(path, **fields):
    doc = json.loads(path.read_text())
    for entry in doc["hosts"].values():
        entry.update(fields)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda path: path.write_text("{not json"), id="corrupt"),
        pytest.param(lambda path: path.write_text('{"version": 99, "hosts": {}}'), id="other-version"),
        pytest.param(lambda path: path.write_text('{"version": 1, "hosts": []}'), id="wrong-shape"),
        pytest.param(
            lambda path: path.write_text(path.read_text().replace('"bytes_per_s"', '"bytes"')),
            id="missing-key",
        ),
        pytest.param(lambda path: _edit_entry(path, measured_at=None), id="null-date"),
        pytest.param(lambda path: _edit_entry(path, bytes_per_s="Infinity"), id="infinite"),
        pytest.param(lambda path: _edit_entry(path, bytes_per_s=0), id="zero"),
        pytest.param(lambda path: path.write_text("[" * 100_000 + "]" * 100_000), id="deeply-nested"),
        pytest.param(
            lambda path: path.write_text('{"version": 1, "hosts": {"other": [1], "mine": 2}}'),
            id="odd-entries",
        ),
    ],
)
def test_a_damaged_copy_bandwidth_file_is_measured_again_and_rewritten(counted_measure, tmp_path, damage):
    from shardcli.playground.roofline import COPY_CACHE_FILE

    _fresh_process()(str(tmp_path))
    damage(tmp_path / COPY_CACHE_FILE)
    again = _fresh_process()(str(tmp_path))
    assert len(counted_measure) == 2 and again.cached is False
    assert _fresh_process()(str(tmp_path)).cached is True  # the file was repaired


def test_a_figure_from_another_machine_is_not_used(counted_measure, tmp_path, monkeypatch):
    from shardcli.playground import roofline

    _fresh_process()(str(tmp_path))
    monkeypatch.setattr(roofline, "host_fingerprint", lambda threads: f"another host|{threads}")
    other = _fresh_process()(str(tmp_path))
    assert len(counted_measure) == 2 and other.cached is False
    hosts = json.loads((tmp_path / roofline.COPY_CACHE_FILE).read_text())["hosts"]
    assert len(hosts) == 2  # both machines' entries are kept


def test_a_copy_bandwidth_file_that_cannot_be_written_warns_and_the_run_goes_on(
    counted_measure, tmp_path, capsys
):
    missing = tmp_path / "gone"  # mkstemp fails: no such directory
    copy = _fresh_process()(str(missing))
    assert copy.bytes_per_s > 0 and copy.cached is False
    assert copy.warning == (
        f"shardcli: warning: could not store the copy bandwidth in {missing / COPY_CACHE_FILE} "
        f"(No such file or directory); the next run measures it again"
    )
    assert capsys.readouterr().err == ""  # the core returns it; the render layer prints it


def test_the_copy_bandwidth_warning_reaches_stderr_once_per_command(cli, monkeypatch):
    from shardcli.playground import roofline

    warning = (
        "shardcli: warning: could not store the copy bandwidth in /x/shardcli-copy-bandwidth.json "
        "(Read-only file system); the next run measures it again"
    )
    measured = roofline.CopyBandwidth(
        2e10, 2, 64 << 20, 10, measured_at="2026-01-01T00:00:00Z", warning=warning
    )
    monkeypatch.setattr(roofline, "host_copy_bandwidth", lambda cache_dir=None: measured)
    result = cli(["collective", "psum,pmax", "--mesh", "4", "--iters", "1", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [warning]  # once for the two collectives
    assert "warning" not in json.loads(result.stdout)["collectives"][0]["config"]["roofline"]


def test_runs_started_together_measure_the_copy_bandwidth_once(monkeypatch, tmp_path):
    """The lock: a second run waits for the first's figure instead of measuring beside it."""
    import threading
    import time

    from shardcli.playground import roofline

    calls = []

    def slow_measure():
        calls.append(1)
        time.sleep(0.3)  # long enough for the other run to reach the lock
        return roofline.CopyBandwidth(20e9 + len(calls), 2, 64 << 20, 10, measured_at="2026-01-01T00:00:00Z")

    monkeypatch.setattr(roofline, "_measured_now", slow_measure)
    measure = roofline._host_copy_bandwidth.__wrapped__  # each thread is a fresh run
    got = []
    runs = [threading.Thread(target=lambda: got.append(measure(str(tmp_path)))) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert len(calls) == 1
    assert sorted(c.cached for c in got) == [False, True]
    assert got[0].bytes_per_s == got[1].bytes_per_s


def test_the_copy_bandwidth_file_is_readable_by_others_and_keeps_the_newest_hosts(
    counted_measure, tmp_path, monkeypatch
):
    import os
    import stat

    from shardcli.playground import roofline

    old = {
        f"host {k}": {
            "bytes_per_s": 1e9,
            "threads": 1,
            "nbytes": 1,
            "repeats": 1,
            "measured_at": f"2020-01-{k + 1:02d}T00:00:00Z",
        }
        for k in range(20)
    }
    path = tmp_path / roofline.COPY_CACHE_FILE
    path.write_text(json.dumps({"version": 1, "hosts": old}))
    mask = os.umask(0o022)
    try:
        _fresh_process()(str(tmp_path))
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    hosts = json.loads(path.read_text())["hosts"]
    assert len(hosts) == roofline.COPY_CACHE_HOSTS
    assert roofline.host_fingerprint(roofline.usable_cores()) in hosts  # this run's, the newest
    assert "host 19" in hosts and "host 0" not in hosts  # the oldest went
    # no temporary file is left behind; the lock file stays for the next run
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{path.name}.lock", path.name]


def test_the_fingerprint_names_the_threads_and_the_measurement():
    from shardcli.playground.roofline import COPY_BYTES, host_fingerprint

    assert host_fingerprint(2) != host_fingerprint(4)
    assert str(COPY_BYTES) in host_fingerprint(2)


@pytest.mark.parametrize(
    ("roofline", "roofline_s", "p50", "busbw", "want"),
    [
        pytest.param(Roofline("host memory", 10e9, "x"), 0.25, 1.0, 3.0, 0.25, id="memory-time-ratio"),
        pytest.param(Roofline("host memory", 10e9, "x"), None, 1.0, None, None, id="memory-no-bytes"),
        pytest.param(Roofline("link", 90e9, "x"), None, 1.0, 45.0, 0.5, id="link-busbw-ratio"),
        pytest.param(Roofline("link", 90e9, "x"), None, 1.0, None, None, id="link-no-busbw"),
        pytest.param(Roofline(None, None, "n/a"), 0.25, 1.0, 3.0, None, id="none"),
        pytest.param(None, 0.25, 1.0, 3.0, None, id="no-roofline"),
    ],
)
def test_roofline_fraction(roofline, roofline_s, p50, busbw, want):
    got = _roofline_fraction(roofline, roofline_s, p50, busbw)
    assert got == pytest.approx(want) if want is not None else got is None


def _session(platform: str, kind: str, processes: int = 1) -> SimpleNamespace:
    runtime = SimpleNamespace(platform=platform, device_kind=kind, process_count=processes)
    return SimpleNamespace(runtime=runtime)


@pytest.mark.parametrize(
    ("platform", "kind", "processes", "basis", "gbps", "text"),
    [
        pytest.param("gpu", "NVIDIA H100 80GB HBM3", 1, "link", 450.0, "table: H100 SXM", id="h100-link"),
        pytest.param("tpu", "TPU v5 lite", 1, "link", 45.0, "table: TPU v5e", id="v5e-link"),
        pytest.param(
            "gpu", "Quadro 9000", 1, None, None, "no link bandwidth in the device table", id="unknown"
        ),
        pytest.param("cpu", "cpu", 2, None, None, "several processes", id="cpu-multiprocess"),
    ],
)
def test_resolve_roofline_off_the_host(platform, kind, processes, basis, gbps, text):
    roofline = resolve_roofline(_session(platform, kind, processes), get_collective("psum"))
    assert roofline.basis == basis
    assert text in roofline.source
    if gbps is None:
        assert roofline.bandwidth_bytes_per_s is None
    else:
        assert roofline.bandwidth_bytes_per_s == pytest.approx(gbps * 1e9)


def test_table_shows_the_roofline_column_and_the_timing_mode(cli):
    """The roofline's basis and the allocator are provenance: in the header under -v."""
    result = cli(["collective", "psum", "--mesh", "4", "--size", "64K", "--iters", "2", "--no-color", "-v"])
    assert result.exit_code == 0, result.output
    for needle in (
        "roofline %",
        "each iteration blocked until ready",
        "host memory, min bytes = read n inputs",
        "allocator",
    ):
        assert needle in result.stdout, needle


def test_sweep_table_has_a_roofline_column_per_placement(cli):
    result = cli(
        ["collective", "psum", "--mesh", "4", "--sizes", "1K,4K", "--iters", "2", "--placement", "both"]
        + ["--no-color", "-q"],
        env={"COLUMNS": "250"},
    )
    assert result.exit_code == 0, result.output
    assert "roofline % out" in result.stdout and "roofline % in" in result.stdout


@pytest.mark.parametrize(
    ("name", "n", "read", "written"),
    [
        pytest.param("psum", 4, 4 * 4096, 4 * 4096, id="psum"),
        pytest.param("all_gather", 4, 4 * 4096, 16 * 4096, id="all_gather"),
        pytest.param("psum_scatter", 4, 4 * 4096, 4096, id="psum_scatter"),
    ],
)
def test_json_roofline_fields(cli, name, n, read, written):
    result = cli(["collective", name, "--mesh", str(n), "--size", "4K", "--iters", "3", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    roofline = doc["config"]["roofline"]
    assert roofline["basis"] == "host memory"
    assert roofline["bandwidth_gbps"] > 0
    assert roofline["min_bytes_rule"] == min_bytes_rule(name)
    size = doc["sizes"][0]
    assert size["min_bytes"] == {"read": read, "written": written}
    assert size["roofline_time_s"] == pytest.approx((read + written) / (roofline["bandwidth_gbps"] * 1e9))
    (placement,) = size["placements"]
    p50 = placement["timing"]["stats_s"]["p50"]
    assert placement["roofline_fraction"] == pytest.approx(size["roofline_time_s"] / p50)
    # in-process tests share a JAX backend started by conftest: reuse cannot apply, and says so
    assert doc["config"]["allocator"]["applied"] is False
    assert "JAX had already started" in doc["config"]["allocator"]["note"]


def test_axis_index_has_no_roofline(cli):
    result = cli(["collective", "axis_index", "--mesh", "4", "--iters", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    size = json.loads(result.stdout)["sizes"][0]
    assert size["min_bytes"] is None and size["roofline_time_s"] is None
    assert size["placements"][0]["roofline_fraction"] is None


def test_malloc_system_and_bad_value(cli):
    ok = cli(["collective", "psum", "--mesh", "2", "--iters", "2", "--format", "json", "--malloc", "system"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["config"]["allocator"] == {
        "mode": "system",
        "applied": False,
        "note": "system malloc (--malloc system)",
    }
    bad = cli(["collective", "psum", "--mesh", "2", "--malloc", "tcmalloc"])
    assert bad.exit_code == 2
    assert "--malloc 'tcmalloc' is not valid; choose one of reuse, system" in bad.stderr


def test_reuse_is_refused_once_the_backend_runs():
    state = tune_for_reuse("reuse", backend_started=True)
    assert not state.applied and "JAX had already started" in state.note


@pytest.mark.slow
def test_reuse_applies_in_a_fresh_process(shardcli_subprocess):
    proc = shardcli_subprocess("collective", "psum", "--mesh", "2", "--iters", "2", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    allocator = json.loads(proc.stdout)["config"]["allocator"]
    assert allocator["mode"] == "reuse" and allocator["applied"] is True
    assert "M_MMAP_MAX=0" in allocator["note"]


@pytest.mark.slow
def test_fresh_outputs_default_to_system_malloc_in_a_fresh_process(shardcli_subprocess):
    proc = shardcli_subprocess(
        "collective", "psum", "--mesh", "2", "--iters", "2", "--format", "json", "--out-buffer", "fresh"
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["config"]["allocator"] == {
        "mode": "system",
        "applied": False,
        "note": "system malloc (the default with --out-buffer fresh)",
    }
    assert doc["sizes"][0]["placements"][0]["out_buffer"] == "fresh"
