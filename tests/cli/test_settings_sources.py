"""Where settings come from: the defaults, then a properties file, then flags (a flag wins),
validated once. Every combination of where the backend, its config file and the ports come from
resolves; an error names the source (flag, or file, line and key) of the value at fault.

The resolution is checked in process through the real argument parser (fast, every combination);
the case a switching team hits first is also served end to end by a real ``pinlater serve``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.pinlater_server import ServerProcess
from tests.support.redis_server import RedisServer
from tests.support.thrift_client import connect

from pinlater.cli.__main__ import build_parser
from pinlater.cli.serve import settings_from_args
from pinlater.config import Settings
from pinlater.errors import ConfigError

#: Where a value comes from in a combination.
SOURCES = ("default", "properties", "flag")


def resolve(tmp_path: Path, properties: dict[str, str], flags: list[str]) -> Settings:
    argv = ["serve", *flags]
    if properties:
        props = tmp_path / "pinlater.properties"
        props.write_text("# the original's keys\n" + "".join(f"{k}={v}\n" for k, v in properties.items()))
        argv += ["--properties", str(props)]
    return settings_from_args(build_parser().parse_args(argv))


REDIS_CONFIG = {"shards": [{"name": "1", "shardConfig": {"master": {"host": "127.0.0.1", "port": 6379}}}]}
MYSQL_CONFIG = {"1": {"master": {"host": "127.0.0.1", "port": 3306}, "user": "u", "passwd": "p"}}


@pytest.mark.parametrize(
    ("backend_from", "config_from", "ports_from"),
    [
        combo
        for combo in itertools.product(SOURCES, SOURCES, SOURCES)
        # a redis backend always has its config here (without one it is an error, below)
        if not (combo[0] != "default" and combo[1] == "default")
    ],
)
def test_every_combination_of_sources_resolves(
    tmp_path: Path, backend_from: str, config_from: str, ports_from: str
) -> None:
    """With no backend named, a config file given says which backend (the redis format here)."""
    properties: dict[str, str] = {}
    flags: list[str] = []
    config = tmp_path / "redis.json"
    config.write_text(json.dumps(REDIS_CONFIG))
    if backend_from == "properties":
        properties["PINLATER_BACKEND"] = "redis"
    elif backend_from == "flag":
        flags += ["--backend", "redis"]
    if config_from == "properties":
        properties["BACKEND_CONFIG_PATH"] = str(config)
    elif config_from == "flag":
        flags += ["--backend-config", str(config)]
    if ports_from == "properties":
        properties.update(THRIFT_PORT="9100", OSTRICH_PORT="9101")
    elif ports_from == "flag":
        flags += ["--port", "9100", "--admin-port", "9101"]

    settings = resolve(tmp_path, properties, flags)

    assert settings.backend == ("embedded" if config_from == "default" else "redis")
    assert settings.backend_config_path == (None if config_from == "default" else config)
    assert (settings.port, settings.admin_port) == ((9010, 9999) if ports_from == "default" else (9100, 9101))


@pytest.mark.parametrize(("config", "backend"), [(REDIS_CONFIG, "redis"), (MYSQL_CONFIG, "mysql")])
def test_an_original_properties_file_without_a_backend_takes_it_from_the_config(
    tmp_path: Path, config: dict[str, Any], backend: str
) -> None:
    """The original's MySQL properties name no backend (anything but redis meant MySQL there)."""
    path = tmp_path / "backend.json"
    path.write_text(json.dumps(config))
    settings = resolve(
        tmp_path, {"THRIFT_PORT": "9010", "MYSQL_NUM_DB_PER_QUEUE": "4"}, ["--backend-config", str(path)]
    )
    assert (settings.backend, settings.backend_config_path, settings.mysql_num_db_per_queue) == (backend, path, 4)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{not json", "is not JSON"), ('{"x": 1}', "cannot tell which backend"), ("[]", "cannot tell which backend")],
)
def test_a_config_that_names_no_backend_is_an_error(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "backend.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected) as info:
        resolve(tmp_path, {}, ["--backend-config", str(path)])
    assert str(info.value).startswith(f"--backend-config {path}: ")


def test_the_embedded_backend_named_with_a_config_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "backend.json"
    path.write_text(json.dumps(REDIS_CONFIG))
    with pytest.raises(ConfigError, match="--backend embedded: the embedded backend takes no backend config"):
        resolve(tmp_path, {}, ["--backend", "embedded", "--backend-config", str(path)])


def test_a_flag_wins_over_the_properties_file(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        {"PINLATER_BACKEND": "mysql", "BACKEND_CONFIG_PATH": "a.json", "THRIFT_PORT": "9100", "OSTRICH_PORT": "9101"},
        ["--backend", "redis", "--backend-config", "b.json", "--port", "9200"],
    )
    assert (settings.backend, settings.backend_config_path) == ("redis", Path("b.json"))
    assert (settings.port, settings.admin_port) == (9200, 9101)


def test_a_flag_can_mend_what_the_file_alone_gets_wrong(tmp_path: Path) -> None:
    """Validated once, after the flags: the file's bad port is not an error when a flag replaces it."""
    settings = resolve(tmp_path, {"THRIFT_PORT": "70000"}, ["--port", "9300"])
    assert settings.port == 9300


@pytest.mark.parametrize(
    ("properties", "flags", "expected"),
    [
        # the backend from the file, no config anywhere: names the file, line and key
        ({"PINLATER_BACKEND": "redis"}, [], ["pinlater.properties:2 PINLATER_BACKEND=redis", "backend config"]),
        ({}, ["--backend", "mysql"], ["--backend mysql", "backend config"]),
        ({"THRIFT_PORT": "70000"}, [], ["pinlater.properties:2 THRIFT_PORT=70000", "port 70000"]),
        ({}, ["--port", "70000"], ["--port 70000", "port 70000"]),
        ({"PINLATER_BACKEND": "postgres"}, [], ["pinlater.properties:2 PINLATER_BACKEND=postgres", "one of"]),
        ({"BROKER_HOLD_SECONDS": "500"}, [], ["BROKER_HOLD_SECONDS=500", "half the claim timeout"]),
        ({"SERVER_SET_ENABLED": "true"}, [], ["SERVER_SET_ENABLED=true", "needs SERVER_SET_PATH"]),
    ],
)
def test_an_error_names_the_source_and_key(
    tmp_path: Path, properties: dict[str, str], flags: list[str], expected: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        resolve(tmp_path, properties, flags)
    for part in expected:
        assert part in str(info.value)


def test_a_value_that_does_not_convert_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pinlater\.properties:2: NUM_PRIORITY_LEVELS='three'"):
        resolve(tmp_path, {"NUM_PRIORITY_LEVELS": "three"}, [])


@pytest.mark.redis
def test_serve_with_the_backend_in_properties_and_its_config_as_a_flag(
    tmp_path: Path, start_server: Callable[..., ServerProcess], thrift_gen: Any
) -> None:
    """The first thing a switching team runs: their properties file (PINLATER_BACKEND=redis) and
    the backend JSON given on the command line, as the original took it (-Dbackend_config)."""
    with RedisServer(tmp_path / "redis") as redis:
        config = tmp_path / "redis.json"
        shard = {"master": {"host": redis.host, "port": redis.port}, "dequeueOnly": False}
        config.write_text(json.dumps({"shards": [{"name": "1", "shardConfig": shard}]}))
        server = start_server(
            "--backend-config", str(config), properties={"PINLATER_BACKEND": "redis", "NUM_PRIORITY_LEVELS": "2"}
        )
        _, ttypes = thrift_gen
        client, transport = connect("127.0.0.1", server.port)
        try:
            ctx = ttypes.RequestContext(source="settings-test")
            client.createQueue(ctx, "switched")
            request = ttypes.PinLaterEnqueueRequest(queueName="switched", jobs=[ttypes.PinLaterJob(body=b"x")])
            [descriptor] = client.enqueueJobs(ctx, request).jobDescriptors
            count = client.getJobCount(ctx, ttypes.PinLaterGetJobCountRequest(queueName="switched", jobState=0))
        finally:
            transport.close()
        assert descriptor.startswith("switched:s1:p1:")
        assert count == 1
        assert redis.client().dbsize() > 0  # the jobs went to the Redis the flag named


def test_a_file_that_is_not_utf8_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    """A Latin-1 properties file or backend config: a ``ConfigError`` naming the file and the
    byte, where it was a UnicodeDecodeError traceback."""
    props = tmp_path / "latin1.properties"
    props.write_bytes(b"THRIFT_PORT=90\xe910\n")
    with pytest.raises(ConfigError, match=r"latin1.properties is not UTF-8: byte 14 is 0xe9"):
        settings_from_args(build_parser().parse_args(["serve", "--properties", str(props)]))
    config = tmp_path / "redis.json"
    config.write_bytes(json.dumps(REDIS_CONFIG).encode().replace(b'"1"', b'"\xe9"'))
    with pytest.raises(ConfigError, match=r"redis\.json is not UTF-8"):
        settings_from_args(build_parser().parse_args(["serve", "--backend-config", str(config)]))


def test_a_byte_order_mark_is_not_part_of_the_first_key(tmp_path: Path) -> None:
    """An editor's BOM made the first key another key, and its setting was dropped unseen."""
    props = tmp_path / "bom.properties"
    props.write_bytes(b"\xef\xbb\xbfTHRIFT_PORT=9123\n")
    settings = settings_from_args(build_parser().parse_args(["serve", "--properties", str(props)]))
    assert settings.port == 9123


def test_a_key_this_server_does_not_know_is_warned_of(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A typo's setting is named in a warning; the original's unused keys pass without one."""
    import logging

    with caplog.at_level(logging.WARNING, logger="pinlater.config"):
        settings = resolve(tmp_path, {"THRIFT_PORTT": "9011", "BACKEND_CONNECTION_MAX_WAIT_MILLIS": "5000"}, [])
    assert settings.port == Settings().port
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "THRIFT_PORTT is not a key of this server: ignored" in warned[0], warned


def test_a_config_file_that_is_a_fifo_or_too_big_is_refused_unread(tmp_path: Path) -> None:
    """A FIFO read on the event loop hung the server past SIGTERM; 100 MB held it 22 s."""
    import os

    from pinlater.config_files import MAX_CONFIG_BYTES, read_config_text

    fifo = tmp_path / "queues.json"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_config_text(fifo, "queue config", regular=True)
    read, write = os.pipe()  # a file read once at start may be a pipe: --properties <(envsubst ...)
    os.write(write, b"THRIFT_PORT=9010\n")
    os.close(write)
    try:
        assert read_config_text(Path(f"/dev/fd/{read}"), "properties file") == "THRIFT_PORT=9010\n"
    finally:
        os.close(read)
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(ConfigError, match=f"past the {MAX_CONFIG_BYTES}"):
        read_config_text(big, "queue config")


def test_a_watched_file_that_could_not_be_read_is_read_again_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read error (a permission denied: simulated, as root reads any file) leaves the file's
    signature unseen, so the file put right is taken at the next look, with no edit that would
    change its signature; a file refused for what it is (a FIFO) is not read again until it
    changes."""
    import os

    from pinlater import watch
    from pinlater.config_files import ConfigUnreadable

    path = tmp_path / "queues.json"
    seen: list[str] = []
    watcher = watch.FileWatcher(path, seen.append, "queue config")
    path.write_text("v1")
    assert watcher.load_now() and seen == ["v1"]
    path.write_text("v2")
    real = watch.read_config_text

    def denied(*args: Any, **kwargs: Any) -> str:
        raise ConfigUnreadable(f"cannot read queue config {path}: Permission denied")

    monkeypatch.setattr(watch, "read_config_text", denied)
    assert not watcher.load_now() and watcher.errors == 1
    monkeypatch.setattr(watch, "read_config_text", real)  # (the permission put right)
    assert watcher.load_now() and seen == ["v1", "v2"]

    path.unlink()
    os.mkfifo(path)
    assert not watcher.load_now() and watcher.errors == 2
    assert not watcher.load_now() and watcher.errors == 2, "a FIFO is not looked at again until it changes"
    path.unlink()
    path.write_text("v3")
    assert watcher.load_now() and seen == ["v1", "v2", "v3"]


def test_a_port_of_other_than_ascii_digits_is_a_config_error() -> None:
    """``"²"`` passed ``str.isdigit`` and failed ``int()`` with a traceback."""
    from pinlater.backends.redis.config import parse_redis_config

    shard = {"name": "1", "shardConfig": {"master": {"host": "h", "port": "\u00b2"}}}
    with pytest.raises(ConfigError, match="port must be a number"):
        parse_redis_config(json.dumps({"shards": [shard]}), "redis.json")


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_the_ready_lists_are_turned_off_by_any_usual_spelling(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from pinlater.backends.redis import scripts

    monkeypatch.setenv(scripts.READY_LISTS_ENV, value)
    assert scripts.READY_LISTS_OFF in scripts.source("enqueue_jobs", "compact")
    monkeypatch.setenv(scripts.READY_LISTS_ENV, "1")
    assert scripts.READY_LISTS_OFF not in scripts.source("enqueue_jobs", "compact")


def test_a_data_dir_with_shards_past_embedded_num_shards_is_refused(tmp_path: Path) -> None:
    """Lowering EMBEDDED_NUM_SHARDS left shard-2's jobs on disk, served by no one, unsaid."""
    from pinlater.backends.embedded.driver import EmbeddedDriver

    settings = resolve(tmp_path, {"EMBEDDED_DATA_DIR": str(tmp_path), "EMBEDDED_NUM_SHARDS": "1"}, [])
    (tmp_path / "shard-1.sqlite3").write_bytes(b"")
    assert list(EmbeddedDriver().shard_configs(settings)) == ["1"]
    (tmp_path / "shard-2.sqlite3").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"holds shard 2 past EMBEDDED_NUM_SHARDS=1.*set EMBEDDED_NUM_SHARDS to 2"):
        EmbeddedDriver().shard_configs(settings)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("BACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS", "inf"),
        ("BACKEND_MONITOR_JOB_SUCCEEDED_GC_TTL_HOURS", "1e300"),
        ("BACKEND_MONITOR_UPDATE_MAX_SIZE", "99999999999999999999"),
        ("BACKEND_SOCKET_TIMEOUT_SECONDS", "inf"),
    ],
)
def test_an_infinite_or_huge_number_is_a_config_error_naming_its_line(tmp_path: Path, key: str, value: str) -> None:
    """``inf`` passed "must be positive" and crashed the start with a traceback; 1e300 hours of
    GC TTL started, then failed every monitor pass."""
    with pytest.raises(ConfigError, match=rf"pinlater\.properties:2 {key}={value}: .* is not a finite number"):
        resolve(tmp_path, {key: value}, [])


def test_an_empty_data_dir_is_refused_not_taken_as_the_current_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match=r"EMBEDDED_DATA_DIR=.*must name a directory"):
        resolve(tmp_path, {"EMBEDDED_DATA_DIR": ""}, [])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--data-dir", ""])
    assert "--data-dir" in capsys.readouterr().err


def test_a_server_set_counts_a_server_once_and_refuses_a_bad_port() -> None:
    """A server listed twice divided every rate by one server too many."""
    from pinlater.ratelimit import parse_server_set

    assert parse_server_set("h1:9010\nh1:9010\nh2:9010\n") == ["h1:9010", "h2:9010"]
    with pytest.raises(ConfigError, match=r"not in 1\.\.65535"):
        parse_server_set("h2:99999\n")
    with pytest.raises(ConfigError, match="expected host:port"):
        parse_server_set("h 3:1\n")


def test_a_watch_prepares_off_the_loop_and_prepares_again_a_file_changed_meanwhile(tmp_path: Path) -> None:
    """The watch reads and prepares a changed file on a thread (a large queue config was parsed
    for seconds, a reload's new shard connected, on the event loop); what it prepared is applied on
    the loop, unless the file changed meanwhile (an admin edit applied at once would be undone
    by the text read before it): then it is read and prepared again, and what was prepared of
    the older text is discarded (a reload's new stores closed: they were left open). A file
    rewritten at every look is applied at the last of them all the same; a look cancelled while
    it prepares discards what it prepared once that is done."""
    import asyncio
    import os
    import threading

    from pinlater import watch

    path = tmp_path / "queues.json"
    path.write_text("v1")
    release, preparing = threading.Event(), threading.Event()
    applied: list[str] = []
    discarded: list[str] = []
    edits: list[str] = []

    def prepare(text: str) -> str:
        preparing.set()
        assert release.wait(10)
        if edits:  # a writer that edits the file while it is prepared
            (tmp_path / "edit").write_text(edits.pop(0))
            os.replace(tmp_path / "edit", path)
        return text.upper()

    watcher = watch.FileWatcher(path, applied.append, "queue config", prepare=prepare, discard=discarded.append)

    async def main() -> None:
        look = asyncio.create_task(watcher.look_now())
        ticks = 0
        while not preparing.is_set() or ticks < 20:  # the loop runs on while the file is prepared
            await asyncio.sleep(0.005)
            ticks += 1
        assert not look.done() and applied == []
        release.set()
        assert await look and applied == ["V1"]

        path.write_text("v2")
        edits.append("v3")  # an edit while v2 is prepared
        assert await watcher.look_now() and applied == ["V1", "V3"] and discarded == ["V2"]

        path.write_text("v4")
        edits.extend(["v5", "v6", "v7"])  # rewritten at every look
        assert await watcher.look_now() and applied == ["V1", "V3", "V6"] and discarded == ["V2", "V4", "V5"]
        assert await watcher.look_now() and applied[-1] == "V7"

        release.clear()
        preparing.clear()
        path.write_text("v8")
        look = asyncio.create_task(watcher.look_now())
        while not preparing.is_set():
            await asyncio.sleep(0.005)
        look.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await look
        for _ in range(200):
            if discarded[-1] == "V8":
                break
            await asyncio.sleep(0.01)
        assert discarded[-1] == "V8" and applied[-1] == "V7"

    asyncio.run(main())


def test_a_properties_file_is_read_as_the_original_read_it(caplog: pytest.LogCaptureFixture) -> None:
    """The original read its properties with Apache Commons Configuration (Java's format): a
    blank as the separator, a line continued by a backslash, escapes, integers in hex, and the
    first of a key set twice. Each had stopped this server at start or been read otherwise."""
    import logging

    from pinlater.config import parse_properties, resolve_settings

    text = (
        "# the original's file\n"
        "THRIFT_PORT 9011\n"  # a blank separates
        "OSTRICH_PORT : 0x270f\n"  # hex, and ':' with blanks around it
        "QUEUE_CONFIG_FILE_PATH = /etc/pin\\\n"
        "    later/queues.json\n"  # continued on the next line, its leading blanks dropped
        "SERVER_SET_PATH=/etc/a\\u0062c\\=d\\\\e\n"  # \uXXXX, an escaped '=', an escaped backslash
        "NUM_PRIORITY_LEVELS=4\n"
        "NUM_PRIORITY_LEVELS=7\n"  # set twice: the first is used
    )
    with caplog.at_level(logging.WARNING, logger="pinlater.config"):
        settings = resolve_settings(parse_properties(text, source="p"))
    assert (settings.port, settings.admin_port, settings.num_priority_levels) == (9011, 9999, 4)
    assert settings.queue_config_file_path == Path("/etc/pinlater/queues.json")
    assert settings.server_set_path == Path("/etc/abc=d\\e")
    assert [r.getMessage() for r in caplog.records] == [
        "p:8: NUM_PRIORITY_LEVELS is set again (first at line 7): the first value is used, as the original did"
    ]
    from pinlater.config import java_properties

    assert list(java_properties("A=x\fy\u2028z\r\nB=1\rC=2")) == [(1, "A", "x\fy\u2028z"), (2, "B", "1"), (3, "C", "2")]
    for bad in ("THRIFT_PORT=٩٠١٠", "THRIFT_PORT=90_10", "THRIFT_PORT=0x", "X=\\u00g1"):
        with pytest.raises(ConfigError, match=r"p:1: (THRIFT_PORT=|malformed)"):
            parse_properties(bad, source="p")
