"""``pinlater`` and ``pinlater serve`` on the command line: help, and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SERVE_FLAGS = [
    "--host",
    "--port",
    "--admin-host",
    "--admin-port",
    "--data-dir",
    "--properties",
    "--backend",
    "--backend-config",
    "--num-priorities",
    "--max-frame-bytes",
    "--log-level",
]


def pinlater(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pinlater.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def test_top_level_help_lists_serve() -> None:
    done = pinlater("--help")
    assert done.returncode == 0
    assert "serve" in done.stdout and "PinLater" in done.stdout


def test_serve_help_explains_every_flag() -> None:
    done = pinlater("serve", "--help")
    assert done.returncode == 0
    for flag in SERVE_FLAGS:
        assert flag in done.stdout, flag
    assert "0.0.0.0" in done.stdout


def test_the_installed_console_script_runs() -> None:
    done = subprocess.run(["pinlater", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("pinlater ")


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["serve", "--port", "notanumber"], "--port"),
        (["serve", "--bogus"], "--bogus"),
        (["serve", "--backend", "postgres"], "--backend"),
        (["serve", "--port", "70000", "--data-dir", "{tmp}/d"], "port 70000"),
        (["serve", "--properties", "{tmp}/missing.properties"], "missing.properties"),
        (["serve", "--backend", "redis"], "backend config"),
        (["serve", "--backend", "redis", "--backend-config", "{tmp}/missing.json"], "missing.json"),
    ],
)
def test_bad_flags_and_files_are_one_line_errors(tmp_path: Path, args: list[str], expected: str) -> None:
    line = one_line_error(pinlater(*[a.replace("{tmp}", str(tmp_path)) for a in args]))
    assert expected in line


def test_a_bad_properties_value_names_the_file_line_and_key(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("# comment\nTHRIFT_PORT=9010\nNUM_PRIORITY_LEVELS=three\n")
    line = one_line_error(pinlater("serve", "--properties", str(props)))
    assert f"{props}:3" in line and "NUM_PRIORITY_LEVELS" in line


def test_a_bad_backend_config_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "redis.json"
    config.write_text("{this is not json")
    line = one_line_error(pinlater("serve", "--backend", "redis", "--backend-config", str(config)))
    assert str(config) in line


def test_an_unknown_event_loop_is_a_one_line_error(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("EVENT_LOOP=trio\n")
    line = one_line_error(pinlater("serve", "--properties", str(props), "--data-dir", str(tmp_path / "d")))
    assert "EVENT_LOOP" in line and "auto, uvloop, asyncio" in line
