"""The persistent compile cache: on by default, reused by a second run, never fatal."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import run_shardcli

from shardcli.runtime.cache import CACHE_ENV, default_cache_dir

RUN = ("collective", "psum", "--mesh", "2", "--iters", "2", "--warmup", "1", "--format", "json")


def compile_cached(doc: dict) -> bool | None:
    return doc["sizes"][0]["placements"][0]["timing"]["compile_cached"]


@pytest.mark.slow
def test_a_second_run_reads_the_compiled_program_from_the_cache(tmp_path):
    env = {CACHE_ENV: str(tmp_path / "cache")}
    first = run_shardcli(*RUN, env=env)
    second = run_shardcli(*RUN, env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    docs = [json.loads(p.stdout) for p in (first, second)]
    assert [d["runtime"]["compile_cache"] for d in docs] == [str(tmp_path / "cache")] * 2
    assert [compile_cached(d) for d in docs] == [False, True]
    assert any((tmp_path / "cache").iterdir())
    # the host's copy bandwidth (the roofline) is measured by the first run and read by the second
    rooflines = [d["config"]["roofline"] for d in docs]
    assert [r["cached"] for r in rooflines] == [False, True]
    assert rooflines[0]["bandwidth_gbps"] == rooflines[1]["bandwidth_gbps"]
    assert rooflines[0]["measured_at"] == rooflines[1]["measured_at"]


@pytest.mark.slow
def test_no_compile_cache_turns_it_off(tmp_path):
    proc = run_shardcli(*RUN, "--no-compile-cache", env={CACHE_ENV: str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["runtime"]["compile_cache"] is None and compile_cached(doc) is None
    assert doc["config"]["roofline"]["cached"] is False  # measured by this run, stored nowhere
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_an_unusable_cache_directory_warns_once_and_the_run_goes_on(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = run_shardcli(*RUN, env={CACHE_ENV: str(blocker / "cache")})
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        f"shardcli: warning: the compile cache at {blocker / 'cache'} cannot be used"
    )
    assert json.loads(proc.stdout)["runtime"]["compile_cache"] is None


def test_the_default_directory_follows_xdg_and_the_override(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if sys.platform.startswith("linux"):
        assert default_cache_dir() == tmp_path / "shardcli" / "jax"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"


def test_an_unusable_cache_is_a_warning_in_the_result_not_a_print(monkeypatch, tmp_path, capsys):
    from shardcli.runtime import cache

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))
    monkeypatch.setattr(cache, "_state", None)
    state = cache.enable_compile_cache(True)
    assert state.directory is None
    assert state.warning is not None and state.warning.startswith(
        f"the compile cache at {blocker / 'cache'} cannot be used ("
    )
    assert capsys.readouterr() == ("", "")  # the core prints nothing; the render layer shows it
    assert cache.enable_compile_cache(False).warning is None  # --no-compile-cache: no warning
