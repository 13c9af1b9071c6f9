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
