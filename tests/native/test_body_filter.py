"""Body filters (``bodyRegexToMatch``): the extension's linear-time ``BodyMatcher`` and the
``backends.body_filter`` layer the stores use (compile cache, refusals, the time budget)."""

from __future__ import annotations

import asyncio
import re
import threading

import pytest

from pinlater._pinlater import BodyFilterTimeout, BodyMatcher, BodyPatternError
from pinlater.backends import body_filter
from pinlater.backends.body_filter import BodyFilter, BodyFilterBudgetExceeded, compiled
from pinlater.config import Settings
from pinlater.errors import ConfigError, ErrorCode, PinLaterError

# Valid UTF-8 bodies (ASCII, accented, CJK, emoji, empty, with newlines and tabs).
BODIES = [
    b"",
    b"hello world",
    b"Hello World",
    "hällo wörld".encode(),
    "日本語のテキスト 42".encode(),
    "emoji \U0001f600 here".encode(),
    b"user-1",
    b"user-12",
    b"job-7 failed: timeout",
    b"line one\nline two",
    b"tab\tseparated\tvalues",
    b"alice@example.com",
    b"color colour",
    b"a" * 40 + b"!",
    b"aaaa",
    b'{"id": 17, "kind": "email"}',
    b"caf\xc3\xa9",
]

# Ordinary patterns that mean the same in Python's re and the regex crate (none that backtracks
# badly: re would take days on the 40 a's).
PATTERNS = [
    "hello",
    "^hello",
    "world$",
    "^$",
    "h.llo",
    "^h.llo w.rld$",
    r"user-\d$",
    r"user-\d+",
    r"\d{2}",
    r"[a-z]+@[a-z]+\.com",
    "(?i)HELLO",
    r"\bwor",
    "colou?r",
    "email|timeout",
    "[^a-z ]",
    r"\s",
    r"\w+",
    "^[a-z]+$",
    "one.line",
    "(?s)one.line",
    "(?m)^line two$",
    "é",
    "[à-ÿ]",
    "テキスト",
    ".{5}",
    "^.{4}$",
    "\U0001f600",
    r'"id": \d+',
    "a+!",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_ordinary_patterns_match_as_pythons_re_searches_the_decoded_body(pattern: str) -> None:
    matcher = BodyMatcher(pattern)
    expected = [i for i, body in enumerate(BODIES) if re.search(pattern, body.decode("utf-8"))]
    assert [i for i, body in enumerate(BODIES) if matcher.is_match(body)] == expected
    assert matcher.match_indices(BODIES, 60.0) == expected
    assert matcher.pattern == pattern


def test_nested_quantifiers_cost_nothing_whatever_the_length() -> None:
    # Python's re takes about 20 s on 28 a's and doubles with each one more; this is linear.
    matcher = BodyMatcher("(a+)+$")
    attack = b"a" * 40 + b"!"
    assert matcher.match_indices([attack, b"a" * 100_000 + b"!", b"aaaa", None], 60.0) == [2]
    assert not matcher.is_match(b"a" * (1 << 20) + b"!")  # 1 MiB: the GIL is released for this one


def test_invalid_utf8_is_searched_as_bytes() -> None:
    # An invalid byte is no code point: `.` and Unicode classes skip it, `(?-u:.)` takes it, and
    # text around it is still found.
    body = b"abc\xffdef"
    assert BodyMatcher("abc").is_match(body)
    assert BodyMatcher("def$").is_match(body)
    assert not BodyMatcher("c.d").is_match(body)
    assert BodyMatcher("c(?-u:.)d").is_match(body)
    assert BodyMatcher(r"(?-u)\xff").is_match(body)
    assert not BodyMatcher(r"\xff").is_match(body)  # in Unicode mode, \xff is U+00FF (ÿ)
    assert BodyMatcher(r"\xff").is_match("ÿ".encode())


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "backreferences are not supported"),
        (r"foo(?=bar)", "look-around"),
        (r"(?<!x)y", "look-around"),
        (r"(?<=x)y", "look-around"),
        ("(unclosed", "unclosed group"),
        ("*", "repetition operator missing expression"),
        (r"\w{50}", "compiled pattern would exceed 1048576 bytes"),
        (r"(?:\w{10}){1000}", "compiled pattern would exceed"),
        ("a" * 4097, "4097 bytes long; at most 4096"),
    ],
)
def test_patterns_without_a_linear_time_algorithm_are_refused_with_the_reason(pattern: str, reason: str) -> None:
    with pytest.raises(BodyPatternError, match=re.escape(reason)) as info:
        BodyMatcher(pattern)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(BodyPatternError) as named:
        compiled(pattern)
    message = str(named.value)
    assert message.startswith("body regex ") and "cannot be used: " in message and reason in message
    assert len(message) < 300, "a long pattern is cut short in the message"


def test_the_budget_stops_a_batch_instead_of_answering_part_of_it() -> None:
    matcher = BodyMatcher("b")
    bodies = [b"abc"] * 10
    with pytest.raises(BodyFilterTimeout, match="after matching 0 of 10 bodies"):
        matcher.match_indices(bodies, 0.0)
    with pytest.raises(BodyFilterTimeout):
        matcher.match_indices(bodies, -1.0)
    assert matcher.match_indices([], 0.0) == []
    assert matcher.match_indices(bodies, float("inf")) == list(range(10))
    with pytest.raises(ValueError, match="NaN"):
        matcher.match_indices(bodies, float("nan"))


def test_body_filter_reports_a_spent_budget_as_a_contract_error() -> None:
    spent = BodyFilter("x", 1e-9)
    with pytest.raises(BodyFilterBudgetExceeded) as info:
        spent.matching([b"x"] * 100)
    error = info.value
    assert isinstance(error, PinLaterError) and error.code == ErrorCode.UNKNOWN
    assert "BODY_FILTER_TIME_BUDGET_SECONDS" in error.message and "1e-09 s" in error.message
    assert "'x'" in error.message
    with pytest.raises(BodyFilterBudgetExceeded):
        spent.check()
    roomy = BodyFilter("x", 60.0)
    assert roomy.matching([b"x", b"y", None, b"xx"]) == [0, 3]
    roomy.check()
    assert roomy.looked == 4


def test_batches_take_only_bytes_or_none() -> None:
    matcher = BodyMatcher("a")
    with pytest.raises(TypeError, match="not a single bytes"):
        matcher.match_indices(b"abc", 1.0)
    with pytest.raises(TypeError, match="not a single bytes"):
        matcher.match_indices("abc", 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"bodies\[1\] must be bytes or None, not str"):
        matcher.match_indices([b"a", "a"], 1.0)  # type: ignore[list-item]
    assert matcher.match_indices((b for b in [b"a", b"b"]), 1.0) == [0]  # type: ignore[arg-type]


def test_compiled_patterns_are_shared() -> None:
    assert compiled("shared-pattern") is compiled("shared-pattern")


def test_the_budget_is_a_validated_setting() -> None:
    assert Settings().body_filter_time_budget_seconds == 10.0
    settings = Settings.from_properties("BODY_FILTER_TIME_BUDGET_SECONDS=2.5\n")
    assert settings.body_filter_time_budget_seconds == 2.5
    with pytest.raises(ConfigError, match="BODY_FILTER_TIME_BUDGET_SECONDS=0: must be positive"):
        Settings.from_properties("BODY_FILTER_TIME_BUDGET_SECONDS=0\n")


def test_a_request_compiles_its_pattern_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh pattern costs its compile (a few ms): on the event loop, a peer sending a new one
    with every request held everyone's requests that long each time."""
    threads: list[int] = []
    real = body_filter.compiled

    def spy(pattern: str) -> BodyMatcher:
        threads.append(threading.get_ident())
        return real(pattern)

    monkeypatch.setattr(body_filter, "compiled", spy)

    async def check(pattern: str) -> int:
        await body_filter.checked(pattern)
        return threading.get_ident()

    loop_thread = asyncio.run(check(r"\w{20}"))
    assert len(threads) == 1 and threads[0] != loop_thread
    with pytest.raises(BodyPatternError, match="backreferences are not supported"):
        asyncio.run(check(r"(a)\1"))
