"""Where Redis' time goes per script under a running load: each script's time per call, split into
the commands it calls and the rest (its own Lua: the interpreter, argument and reply conversion).

Callgrind (``instructions_per_job.py --count redis``) counts instructions on small hashes and
cannot tell scripts apart in the stripped redis-server; perf sees the binary, not the scripts.
Redis' slow log can: with ``slowlog-log-slower-than 0`` it records every command with its
duration in microseconds, the commands a script calls too, each logged as it finishes and so
before the script that called it. This script turns that on for ``--seconds`` on the Redis at
``--port``, reads the log back (then restores the settings it found) and prints, per script, the
calls, microseconds per call, and the share of them its commands took, with the commands that
took most. Scripts are named by the SHA1 of every script of both layouts, ready lists on and off
(``pinlater.backends.redis.scripts``).

Run a load first, for example ``benches/dedup_keys.py --backends redis-compact --seconds 20``,
find its redis-server's port (``ps aux | grep redis-server``), then:

    PYTHONPATH=$PWD/python python benches/redis_script_time.py --port 37681

Logging every command costs Redis time too (an entry per command, its first 32 arguments
copied), which lands in the calling script's own share: compare scripts and loads side by side
rather than reading the figures as absolute. The log keeps ``--entries`` entries at most (the
oldest go first), so keep ``--seconds`` short enough for them to hold the whole interval: the
benches' loads on this machine log about 17,000 commands a second.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import redis

from pinlater.backends.redis import scripts


@dataclass
class ScriptTime:
    """One script's calls and microseconds, and those of the commands it called, by name."""

    calls: int = 0
    micros: int = 0
    commands: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))

    def command_micros(self) -> int:
        return sum(micros for _, micros in self.commands.values())


def script_names() -> dict[str, str]:
    """SHA1 of each script text of either layout (ready lists on and off) -> its name."""
    names: dict[str, str] = {}
    for layout in scripts.SCRIPT_DIRS:
        for name in scripts.SCRIPT_NAMES:
            for ready_lists in (True, False):
                text = scripts._source(name, layout, ready_lists)  # the text Redis runs
                names[hashlib.sha1(text.encode()).hexdigest()] = f"{name} ({layout})"
    return names


def attribute(entries: list[dict[str, Any]], names: dict[str, str]) -> dict[str, ScriptTime]:
    """Per script, from slow log entries oldest first: each command logged before a script's
    EVALSHA (since the one before) was called by it."""
    per: dict[str, ScriptTime] = defaultdict(ScriptTime)
    called: list[tuple[str, int]] = []
    for entry in entries:
        words = entry["command"].split()
        command = words[0].decode(errors="replace").upper() if words else "?"
        if command in ("EVALSHA", "EVAL"):
            sha = words[1].decode(errors="replace") if command == "EVALSHA" and len(words) > 1 else ""
            script = per[names.get(sha, sha[:12] or "EVAL")]
            script.calls += 1
            script.micros += int(entry["duration"])
            for name, micros in called:
                script.commands[name][0] += 1
                script.commands[name][1] += micros
            called = []
        else:
            called.append((command, int(entry["duration"])))
    return per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True, help="the Redis under load")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--seconds", type=float, default=1.0, help="how long to log (default 1)")
    parser.add_argument("--entries", type=int, default=50_000, help="most log entries kept (default 50,000)")
    parser.add_argument("--top", type=int, default=6, help="commands shown per script (default 6)")
    args = parser.parse_args()

    client = redis.Redis(host=args.host, port=args.port)
    found = {key: client.config_get(key)[key] for key in ("slowlog-log-slower-than", "slowlog-max-len")}
    try:
        client.config_set("slowlog-max-len", args.entries)
        client.slowlog_reset()
        client.config_set("slowlog-log-slower-than", 0)
        time.sleep(args.seconds)
        client.config_set("slowlog-log-slower-than", found["slowlog-log-slower-than"])
        entries = list(reversed(client.slowlog_get(args.entries)))
    finally:
        for key, value in found.items():
            client.config_set(key, value)
        client.slowlog_reset()
    if len(entries) >= args.entries:
        print(f"the log filled up ({args.entries} entries): only the interval's end is counted")
    per = attribute(entries, script_names())
    print(f"{len(entries)} commands logged in {args.seconds:g} s")
    print(f"{'script':34s} {'calls':>7s} {'us/call':>9s} {'commands':>9s} {'own Lua':>9s}")
    for name, script in sorted(per.items(), key=lambda item: -item[1].micros):
        own = script.micros - script.command_micros()
        print(
            f"{name:34s} {script.calls:7d} {script.micros / script.calls:9.1f} "
            f"{script.command_micros() / script.calls:9.1f} {own / script.calls:9.1f}"
        )
        top = sorted(script.commands.items(), key=lambda item: -item[1][1])[: args.top]
        for command, (count, micros) in top:
            print(f"    {command:16s} {count / script.calls:6.2f} a call {micros / script.calls:9.1f} us/call")


if __name__ == "__main__":
    main()
