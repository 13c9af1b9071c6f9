"""What a body filter costs on large bodies, and whether its time budget holds within one body.

For each case (a pattern and a body), the script times the extension's ``BodyMatcher`` two ways
in one run, the best of ``--repeat``:

- ``regex crate``: ``is_match``, the `regex` crate's own search, unbudgeted: what
  ``match_indices`` did with every body before it walked large ones itself;
- ``budgeted``: ``match_indices([body], --budget)``, what count, scan and delete filters run
  (``backends/body_filter.py``): the crate for bodies whose worst case is small, else the lazy DFA
  walked here with the clock read every 256 bytes (``rust/queue/body_matcher.rs``), and it
  prints whether the body matched or the budget ran out.

The costly pattern ``a(?-u:[\\x00-\\xff]){8000}c`` makes every byte a new automaton state of up
to 8,000 NFA states: over a body of a random mix of ``a`` and ``b`` the crate's search takes
seconds per 64 KiB, about half a minute per MiB (``--full`` times that too), and nothing could
stop it before the walk.

    PYTHONPATH=$PWD/python python benches/body_filter_cost.py
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from pinlater._pinlater import BodyFilterTimeout, BodyMatcher

MIB = 1 << 20
COSTLY = r"a(?-u:[\x00-\xff]){8000}c"


def best_of(repeat: int, call: Callable[[], object]) -> tuple[float, object]:
    """The shortest of ``repeat`` timings of ``call`` (seconds) and its last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            result = call()
        except BodyFilterTimeout:
            result = "budget spent"
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=1.0, help="match_indices' budget, seconds (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="timings of each, the best printed (default 3)")
    parser.add_argument("--full", action="store_true", help="also time the crate on the costly 1 MiB body (~30 s)")
    args = parser.parse_args()
    rng = random.Random(1)
    mixed = bytes(rng.choice(b"ab") for _ in range(MIB))
    cases: list[tuple[str, str, bytes, bool]] = [
        ("costly, 64 KiB a|b", COSTLY, mixed[: 64 * 1024], True),
        ("costly, 1 MiB a|b", COSTLY, mixed, args.full),
        ("needle, 1 MiB", "needle", b"x" * MIB + b"needle", True),
        ("word@word.com, 1 MiB", r"\w+@\w+\.com", b"x " * (MIB // 2) + b"a@b.com", True),
        ("^.*z$, 1 MiB", r"^.*z$", b"a" * MIB + b"z", True),
    ]
    print(f"{'case':24} {'regex crate':>14} {'budgeted':>10}  (budget {args.budget:g} s, best of {args.repeat})")
    for name, pattern, body, time_crate in cases:
        matcher = BodyMatcher(pattern)

        def crate_search(m: BodyMatcher = matcher, b: bytes = body) -> bool:
            return m.is_match(b)

        def budgeted(m: BodyMatcher = matcher, b: bytes = body) -> list[int]:
            return m.match_indices([b], args.budget)

        crate = "not run"
        if time_crate:
            seconds, found = best_of(args.repeat, crate_search)
            crate = f"{seconds * 1000:9.1f} ms {'y' if found else 'n'}"
        seconds, outcome = best_of(args.repeat, budgeted)
        shown = outcome if isinstance(outcome, str) else ("y" if outcome else "n")
        print(f"{name:24} {crate:>14} {seconds * 1000:7.1f} ms {shown}")


if __name__ == "__main__":
    main()
