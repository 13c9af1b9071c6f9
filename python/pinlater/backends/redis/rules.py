"""The queue rules a Redis store was given (``ShardStore.set_queue_rules``) and what they add to
its scripts' calls.

A script that applies rules or keeps ordered groups gets them at the end of its ``KEYS`` and
``ARGV`` (the "tail", read by ``lua_compact/lib/groups.lua`` and ``lua/lib/rules.lua``):

* ``ARGV``: group concurrency, max in progress (0: none), group jobs per second (0: none), and
  ``m``, the priorities whose keys follow;
* ``KEYS``, compact layout: the groups' keys (``CompactQueueKeys.group_keys``), then per priority
  1..m its PENDING, waiting and IN_PROGRESS sets (a group's next job may be of any priority, and
  the cap counts every priority's IN_PROGRESS jobs); original layout: the IN_PROGRESS sets only
  (it keeps no groups, ``RedisStore.groups_refused``).

Two kinds of tail: ``DEQUEUE`` (dequeue, reserve, claim of reserved jobs) is sent only when the
queue has a cap or a group rate, so a queue with ``DEFAULT_RULES`` sends and costs what it did
before rules existed; ``GROUPS`` (acks, claim timeouts, retries, deletes, keyed enqueues) is
always sent in the compact layout, whose scripts must be able to move a group's next job up
whatever job they meet (the group is read from the job's record, and a job of no group costs
nothing more than the keys named), and never in the original one.

Tails are built once per queue and rules change (kept until ``set`` or ``clear``), as Python
lists for the blocking calls and as ``RedisScriptTail`` for the Rust-packed hot path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pinlater._pinlater import RedisScriptTail
from pinlater.backends.base import DEFAULT_RULES, JobState, QueueRules
from pinlater.backends.redis.keys_compact import CompactQueueKeys, QueueKeyNames

TailKind = Literal["dequeue", "groups"]
DEQUEUE: TailKind = "dequeue"
GROUPS: TailKind = "groups"

Tail = tuple[list[str], list[Any]]
NO_TAIL: Tail = ([], [])


def rate_arg(rate: float | None) -> str:
    """A group rate as the scripts read it (``tonumber``); 0 for none."""
    return "0" if rate is None else repr(float(rate))


def build_tail(keys: QueueKeyNames, rules: QueueRules, kind: TailKind, num_priorities: int) -> Tail:
    """The tail of a script of ``kind`` for a queue with these rules (see the module docstring)."""
    compact = isinstance(keys, CompactQueueKeys)
    if kind == DEQUEUE:
        wanted = rules.max_in_progress is not None or (compact and rules.group_jobs_per_second is not None)
    else:
        wanted = compact
    if not wanted:
        return NO_TAIL
    priorities = range(1, num_priorities + 1)
    key_list: list[str]
    if isinstance(keys, CompactQueueKeys):
        key_list = keys.group_keys()
        for p in priorities:
            key_list += [keys.set_key(p, JobState.PENDING), keys.waiting_key(p), keys.set_key(p, JobState.IN_PROGRESS)]
    else:
        key_list = [keys.set_key(p, JobState.IN_PROGRESS) for p in priorities]
    args: list[Any] = [
        str(rules.group_concurrency),
        str(rules.max_in_progress or 0),
        rate_arg(rules.group_jobs_per_second),
        str(num_priorities),
    ]
    return key_list, args


class QueueRulesBook:
    """The rules of every queue of one store, and the tails they make (see the module docstring).

    ``set`` may be called from any thread; a call that follows it sees the new rules.
    """

    def __init__(self, queue_keys: Callable[[str], QueueKeyNames], num_priorities: Callable[[], int]) -> None:
        self._queue_keys = queue_keys
        self._num_priorities = num_priorities
        self._rules: dict[str, QueueRules] = {}
        self._tails: dict[tuple[str, TailKind], Tail] = {}
        self._native: dict[tuple[str, TailKind], RedisScriptTail | None] = {}
        self._lock = threading.Lock()

    def set(self, rules: Mapping[str, QueueRules]) -> None:
        with self._lock:
            self._rules = dict(rules)
            self._tails = {}
            self._native = {}

    def clear(self) -> None:
        """Forget the tails built (the layout or the number of priorities changed)."""
        with self._lock:
            self._tails = {}
            self._native = {}

    def of(self, queue: str) -> QueueRules:
        return self._rules.get(queue, DEFAULT_RULES)

    def tail(self, queue: str, kind: TailKind) -> Tail:
        """The tail as Python lists, for the blocking calls."""
        tails = self._tails
        found = tails.get((queue, kind))
        if found is None:
            found = build_tail(self._queue_keys(queue), self.of(queue), kind, self._num_priorities())
            tails[(queue, kind)] = found
        return found

    def native(self, queue: str, kind: TailKind) -> RedisScriptTail | None:
        """The tail held in Rust, for the hot path's packed commands; None when it is empty."""
        natives = self._native
        key = (queue, kind)
        if key in natives:
            return natives[key]
        found = native_tail(self.tail(queue, kind))
        natives[key] = found
        return found


def native_tail(tail: Tail) -> RedisScriptTail | None:
    """``tail`` held in Rust for the hot path's packed commands (its arguments as text); None
    when it is empty."""
    keys, args = tail
    return RedisScriptTail(keys, [str(a) for a in args]) if keys or args else None
