"""Module-level exports of the extension: constants and panic safety."""

from __future__ import annotations

import pytest

import pinlater
from pinlater import _pinlater
from pinlater._pinlater import NativeError


def test_constants() -> None:
    assert _pinlater.__version__ == pinlater.__version__
    assert "service PinLater" in _pinlater.THRIFT_IDL


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
