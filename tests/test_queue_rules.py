"""The queue config file's rules (``queue_rules.py``) and their place beside the original's rates."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from pinlater.admin_files import pause_queue, resume_queue, set_queue_rate, set_queue_rules
from pinlater.backends.base import QueueRules
from pinlater.errors import ConfigError
from pinlater.queue_rules import MAX_COUNT, PAUSED_FROM, cap_share, parse_queue_file, parse_queue_rules
from pinlater.ratelimit import QueueRateLimits, parse_queue_config


def config(*entries: tuple[str, dict[str, Any]]) -> str:
    return json.dumps({"queues": [{"name": name, "queueConfig": c} for name, c in entries]})


def test_rules_are_read_beside_the_rates() -> None:
    text = config(
        ("mail", {"maxJobsPerSecond": 5, "groupConcurrency": 2, "maxInProgress": 10, "groupJobsPerSecond": 0.5}),
        ("plain", {"maxJobsPerSecond": 1}),
        ("capped", {"maxInProgress": 3}),
    )
    assert parse_queue_rules(text) == {
        "mail": QueueRules(2, 10, 0.5),
        "capped": QueueRules(group_concurrency=1, max_in_progress=3),
    }
    assert parse_queue_config(text) == {"mail": 5.0, "plain": 1.0}, "a queue with rules only has no rate limit"


@pytest.mark.parametrize(
    ("queue_config", "rate", "warned"),
    [
        ({}, 0.0, "not set: the queue is paused (0), as the original read it"),
        ({"maxJobsPerSecond": None}, 0.0, "not set: the queue is paused"),
        ({"maxJobsPerSecond": -3}, 0.0, "is -3: the queue is paused (0), as the original read it"),
        ({"maxJobsPerSecond": "5"}, 5.0, "is a string ('5'): read as 5"),
        ({"maxJobsPerSecond": " 0.5 "}, 0.5, "read as 0.5"),
        ({"maxJobsPerSecond": 7}, 7.0, None),
    ],
)
def test_a_rate_is_read_as_the_original_read_it(queue_config: dict[str, Any], rate: float, warned: str | None) -> None:
    """The original read ``maxJobsPerSecond`` with Jackson into a double (absent or null 0, a
    number in a string that number) and paused a queue at 0 or less: such files had stopped
    this server at start. Each is taken as it was there, with a warning."""
    parsed = parse_queue_file(config(("q", queue_config)))
    assert parsed.rates == {"q": rate}
    assert [w for w in parsed.warnings if "maxJobsPerSecond" in w] == ([] if warned is None else [parsed.warnings[0]])
    if warned is not None:
        assert warned in parsed.warnings[0] and parsed.warnings[0].startswith("queue config: queues[0] (q): ")


@pytest.mark.parametrize("value", [True, "5x", "NaN", "inf", [1], {"a": 1}])
def test_a_rate_the_original_refused_too_refuses_the_file(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"queues\[0\] \(q\): maxJobsPerSecond must be a number >= 0"):
        parse_queue_config(config(("q", {"maxJobsPerSecond": value})))


def test_a_pause_remembers_its_rate_where_an_original_server_reads_the_file_too(tmp_path: Path) -> None:
    """The original read each entry's ``name`` and ``queueConfig`` only and refused a file with
    another key beside them (Jackson's unknown property), where a pause kept the rate it
    replaced: in the ``queueConfig``, whose unknown keys it ignored, it keeps it now. A file
    written by the earlier build is resumed from, and warned of."""
    path = tmp_path / "queues.json"
    set_queue_rate(path, "q", 10)
    pause_queue(path, "q")
    entry = json.loads(path.read_text())["queues"][0]
    assert entry == {"name": "q", "queueConfig": {"maxJobsPerSecond": 0, PAUSED_FROM: 10}}
    assert parse_queue_file(path.read_text()).warnings == ()
    pause_queue(path, "q")  # again: the rate before the first pause is kept
    resume_queue(path, "q")
    assert json.loads(path.read_text())["queues"] == [{"name": "q", "queueConfig": {"maxJobsPerSecond": 10}}]
    pause_queue(path, "new")
    assert json.loads(path.read_text())["queues"][1] == {
        "name": "new",
        "queueConfig": {"maxJobsPerSecond": 0, PAUSED_FROM: None},
    }

    earlier = {"queues": [{"name": "q", "queueConfig": {"maxJobsPerSecond": 0}, PAUSED_FROM: 4}]}
    path.write_text(json.dumps(earlier))
    (warning,) = parse_queue_file(path.read_text()).warnings
    assert "beside name and queueConfig" in warning and "an original server refuses the whole file" in warning
    resume_queue(path, "q")
    assert json.loads(path.read_text()) == {"queues": [{"name": "q", "queueConfig": {"maxJobsPerSecond": 4}}]}


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"groupConcurrency": 0}, "groupConcurrency must be a whole number from 1"),
        ({"groupConcurrency": 1.5}, "groupConcurrency must be a whole number from 1"),
        ({"groupConcurrency": True}, "groupConcurrency must be a whole number from 1"),
        ({"maxInProgress": MAX_COUNT + 1}, "maxInProgress must be a whole number from 1"),
        ({"maxInProgress": "3"}, "maxInProgress must be a whole number from 1"),
        ({"groupJobsPerSecond": 0}, "groupJobsPerSecond must be a number from 0.001 to 1e"),
        ({"groupJobsPerSecond": 1e-300}, "groupJobsPerSecond must be a number from 0.001 to 1e"),
        ({"groupJobsPerSecond": 2e6}, "groupJobsPerSecond must be a number from 0.001 to 1e"),
        ({"groupJobsPerSecond": float("inf")}, "groupJobsPerSecond must be a number from 0.001 to 1e"),
    ],
)
def test_a_bad_rule_refuses_the_whole_file(rules: dict[str, Any], message: str) -> None:
    text = config(("fine", {"maxJobsPerSecond": 1}), ("bad", {"maxJobsPerSecond": 1, **rules}))
    with pytest.raises(ConfigError, match=rf"queues\[1\] \(bad\): {message}"):
        parse_queue_rules(text)
    with pytest.raises(ConfigError, match=message):
        parse_queue_config(text)  # the rate limits refuse the file too: it is taken or refused whole


def test_the_cap_is_split_between_shards_and_adds_up() -> None:
    assert [cap_share(7, i, 3) for i in range(3)] == [3, 2, 2]
    assert [cap_share(9, i, 3) for i in range(3)] == [3, 3, 3]
    assert [cap_share(2, i, 3) for i in range(3)] == [1, 1, 1], "every shard can hand out a job"
    assert cap_share(None, 0, 3) is None


def test_unlimiting_a_paused_queue_with_rules_forgets_the_paused_rate(tmp_path: Path) -> None:
    path = tmp_path / "queues.json"
    set_queue_rate(path, "q", 10)
    set_queue_rules(path, "q", {"maxInProgress": 5})
    pause_queue(path, "q")
    set_queue_rate(path, "q", None)  # unlimit: no rate, and nothing paused to resume
    assert json.loads(path.read_text()) == {"queues": [{"name": "q", "queueConfig": {"maxInProgress": 5}}]}
    resume_queue(path, "q")
    assert parse_queue_config(path.read_text()) == {}, "resume restores no forgotten rate"
    set_queue_rules(path, "q", {"maxInProgress": None})  # the last rule goes: so does the entry
    assert json.loads(path.read_text()) == {"queues": []}


def test_resuming_a_queue_paused_without_a_rate_keeps_its_rules(tmp_path: Path) -> None:
    path = tmp_path / "queues.json"
    set_queue_rules(path, "q", {"groupConcurrency": 2})
    pause_queue(path, "q")
    assert parse_queue_config(path.read_text()) == {"q": 0.0}
    resume_queue(path, "q")
    assert json.loads(path.read_text()) == {"queues": [{"name": "q", "queueConfig": {"groupConcurrency": 2}}]}
    set_queue_rules(path, "q", {"groupConcurrency": None})
    assert json.loads(path.read_text()) == {"queues": []}


def test_concurrent_edits_of_one_file_lose_none(tmp_path: Path) -> None:
    """The admin API edits the file on executor threads: each edit reads, changes and writes it
    whole, so edits running at once lost each other's changes (6 of 20 kept, each answered 200)."""
    path = tmp_path / "queues.json"
    path.write_text('{"queues": []}')
    start = threading.Barrier(20)

    def edit(i: int) -> None:
        start.wait()
        if i % 4 == 3:
            set_queue_rules(path, f"q{i}", {"maxInProgress": i})
        else:
            set_queue_rate(path, f"q{i}", float(i))

    threads = [threading.Thread(target=edit, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    entries = {e["name"]: e["queueConfig"] for e in json.loads(path.read_text())["queues"]}
    assert sorted(entries, key=lambda name: int(name[1:])) == [f"q{i}" for i in range(20)]
    assert all(entries[f"q{i}"] == ({"maxInProgress": i} if i % 4 == 3 else {"maxJobsPerSecond": i}) for i in range(20))


def test_a_name_that_is_not_text_refuses_the_whole_file() -> None:
    """JSON can spell a lone surrogate ("\\ud800"): no queue has such a name, and the rate limiter
    had taken the entries before it (pausing them) from a file the server said it refused."""
    text = '{"queues": [{"name": "q", "queueConfig": {"maxJobsPerSecond": 0}}, {"name": "\\ud800", "queueConfig": {}}]}'
    with pytest.raises(ConfigError, match=r"queues\[1\]: 'name' .* is not text"):
        parse_queue_config(text)
    limits = QueueRateLimits()
    with pytest.raises(ConfigError):
        limits.apply_queue_config(text)
    assert limits.configured == {} and limits.limiter.rates() == {}


def test_a_queue_listed_twice_is_refused_and_an_unknown_key_warned_of() -> None:
    """The second entry of a queue was in force while the first looked to be; a misspelt rule
    (``maxInProgres``) was dropped unseen: now it is named (and kept out, as the original did)."""
    twice = {"queues": [{"name": "q", "queueConfig": {"maxJobsPerSecond": 1}}, {"name": "q"}]}
    with pytest.raises(ConfigError, match=r"queues\[1\]: 'q' is listed before"):
        parse_queue_config(json.dumps(twice))
    typo = {"queues": [{"name": "q", "queueConfig": {"maxJobsPerSecond": 5, "maxInProgres": 2}}]}
    parsed = parse_queue_file(json.dumps(typo))
    assert parsed.rates == {"q": 5.0} and parsed.rules == {}
    assert parsed.warnings == ("queue config: queues[0] (q): ['maxInProgres'] not a key of this server: ignored",)


def test_one_parse_gives_the_rates_and_the_rules_and_the_first_bad_entry_refuses_the_file() -> None:
    text = config(
        ("a", {"maxJobsPerSecond": 2}),
        ("b", {"maxJobsPerSecond": 0, "maxInProgress": 3}),
        ("c", {"groupConcurrency": 4, "groupJobsPerSecond": 0.5}),
    )
    parsed = parse_queue_file(text)
    assert parsed.rates == {"a": 2.0, "b": 0.0}, "c sets rules alone: no rate limit"
    assert parsed.rules == {"b": QueueRules(1, 3, None), "c": QueueRules(4, None, 0.5)}
    assert parsed.warnings == ()
    with pytest.raises(ConfigError, match=r"queues\[1\] \(b\): maxInProgress"):
        parse_queue_file(config(("a", {"maxJobsPerSecond": 2}), ("b", {"maxInProgress": 0}), ("c", {})))
    with pytest.raises(ConfigError, match=r"queues\[0\] \(a\): maxJobsPerSecond"):
        parse_queue_file(config(("a", {"maxJobsPerSecond": True, "maxInProgress": 2})))


def test_a_reload_keeps_the_buckets_and_takes_the_changed_rates() -> None:
    """Only the changed rates are set again (a reload of a file of many queues cost a call into
    the limiter per queue); a bucket is not refilled by a reload, and a queue dropped from the
    file loses its limit."""
    limits = QueueRateLimits()
    limits.apply_queue_config(config(("a", {"maxJobsPerSecond": 1}), ("b", {"maxJobsPerSecond": 1})))
    assert limits.limiter.try_acquire("a", 1) and limits.limiter.try_acquire("b", 1)
    limits.apply_queue_config(config(("a", {"maxJobsPerSecond": 1}), ("b", {"maxJobsPerSecond": 2})))
    assert not limits.limiter.try_acquire("a", 1), "a's bucket was left as it was: still empty"
    assert limits.configured == {"a": 1.0, "b": 2.0} and limits.limiter.rates()["b"] == 2.0
    limits.apply_queue_config(config(("b", {"maxJobsPerSecond": 2})))
    assert limits.limiter.rates() == {"b": 2.0}


def test_an_admin_edit_reads_the_queue_config_as_the_server_does(tmp_path: Path) -> None:
    """A file with a byte order mark, which the server loads, is edited too (it was refused:
    "Unexpected UTF-8 BOM")."""
    path = tmp_path / "queues.json"
    path.write_bytes(b"\xef\xbb\xbf" + config(("q", {"maxJobsPerSecond": 5})).encode())
    set_queue_rate(path, "q", 7)
    assert parse_queue_config(path.read_text(encoding="utf-8-sig")) == {"q": 7.0}


def test_rules_with_no_rate_or_a_null_one_limit_nothing_and_the_last_rule_removed_takes_the_entry(
    tmp_path: Path,
) -> None:
    """An entry of no rate pauses its queue, as the original read it; but one with rules and no
    rate, or a null one (as earlier builds read it), has no limit. Removing its last rule takes
    the entry whole, keys this server ignores with it: left, it would pause the queue."""
    parsed = parse_queue_file(config(("q", {"maxJobsPerSecond": None, "groupConcurrency": 2})))
    assert parsed.rates == {} and parsed.rules == {"q": QueueRules(2, None, None)}
    path = tmp_path / "queues.json"
    path.write_text(config(("q", {"groupConcurrency": 2, "owner": "team-x"})))
    set_queue_rules(path, "q", {"groupConcurrency": None})
    assert json.loads(path.read_text()) == {"queues": []}
    assert parse_queue_config(path.read_text()) == {}, "no entry: no limit, not a pause"
