"""Module-level exports of the extension: constants, the runtime, and panic safety."""

from __future__ import annotations

import os
import threading

import pytest

import pinlater
from pinlater import _pinlater
from pinlater._pinlater import NativeError


def test_constants() -> None:
    assert _pinlater.__version__ == pinlater.__version__
    assert "service PinLater" in _pinlater.THRIFT_IDL


def test_runtime_has_two_workers_from_any_thread() -> None:
    counts: list[int] = []
    threads = [threading.Thread(target=lambda: counts.append(_pinlater.runtime_worker_count())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert counts == [2, 2, 2, 2]
    assert _pinlater.runtime_worker_count() == 2


def test_runtime_threads_are_named() -> None:
    _pinlater.runtime_worker_count()
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs Linux /proc")
    names = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.add(f.read().strip())
        except OSError:
            continue  # a thread that ended meanwhile
    assert "pinlater-rt" in names


def test_panic_becomes_native_error() -> None:
    assert issubclass(NativeError, RuntimeError)
    assert NativeError.__module__ == "pinlater._pinlater"
    with pytest.raises(NativeError, match=r"^internal error in pinlater\._pinlater\._panic_for_tests: boom$"):
        _pinlater._panic_for_tests("boom")


def test_panic_is_caught_by_except_exception_and_module_keeps_working() -> None:
    try:
        _pinlater._panic_for_tests("again")
    except Exception as exc:  # a PanicException (BaseException) would escape this
        assert type(exc) is NativeError
    assert _pinlater.decode_descriptor("q:s1:p1:1") == ("q", "1", 1, 1)
