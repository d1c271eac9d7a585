#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
"""Assert on the counters of a job: the tw_stats_json lines of its output.

    twt_stats.py [--ranks N] FILE|- QUERY...

Reads the output of a job whose ranks printed tw_stats_json (a test
program's --stats=json, tw_perf --stats=json): the lines that are JSON
objects with "threadwire_stats", one per rank; other lines are ignored.
There must be exactly one per rank 0 .. size-1 (or N ranks with --ranks).
Then each QUERY, one argument each, must hold:

    all PATH OP NUMBER       every rank's counter
    any PATH OP NUMBER       at least one rank's
    sum PATH OP NUMBER       the sum over the ranks
    rank R PATH OP NUMBER    rank R's
    has PATH                 every rank has PATH
    none PATH                no rank has PATH
    print sum PATH           print the sum (print rank R PATH: rank R's)

PATH names keys from the top, joined by '/': ifaces/tl:tcp/tx_msgs,
ifaces/rel/retransmits, rma/served, engines/0/counters/wakeups. OP is one
of == != >= <= > <. A query that fails prints what each rank has and the
script exits 1; a malformed query or missing ranks exit 2 or 1 with why.
"""
import json
import operator
import sys

OPS = {"==": operator.eq, "!=": operator.ne, ">=": operator.ge,
       "<=": operator.le, ">": operator.gt, "<": operator.lt}


def fail(msg, code=1):
    print(f"twt_stats: FAIL: {msg}", file=sys.stderr)
    sys.exit(code)


def load(lines, want_ranks):
    ranks = {}
    for n, line in enumerate(lines, 1):
        start = line.find('{"threadwire_stats"')
        if start < 0:
            continue
        try:
            obj = json.loads(line[start:])
        except json.JSONDecodeError as e:
            fail(f"line {n} is not valid JSON ({e}): {line[:200]!r}")
        if obj.get("threadwire_stats") != 1:
            fail(f"line {n}: unknown format version {obj.get('threadwire_stats')!r}")
        r = obj.get("rank")
        if not isinstance(r, int) or r in ranks:
            fail(f"line {n}: rank {r!r} missing or printed twice")
        ranks[r] = obj
    if not ranks:
        fail("no tw_stats_json line in the output (run with --stats=json)")
    size = want_ranks if want_ranks is not None else next(iter(ranks.values())).get("size")
    if sorted(ranks) != list(range(size)):
        fail(f"want the stats of ranks 0..{size - 1}, have those of {sorted(ranks)}")
    return ranks


def lookup(obj, path):
    """The value at path, or None when a key is missing."""
    for key in path.split("/"):
        if isinstance(obj, list) and key.isdigit() and int(key) < len(obj):
            obj = obj[int(key)]
        elif isinstance(obj, dict) and key in obj:
            obj = obj[key]
        else:
            return None
    return obj


def number(ranks, r, path):
    v = lookup(ranks[r], path)
    if isinstance(v, bool) or not isinstance(v, int):
        fail(f"rank {r} has no counter {path} (found {v!r})")
    return v


def parse_number(word, query):
    try:
        return int(word)
    except ValueError:
        fail(f"'{query}': '{word}' is not a number", 2)


def compare(ranks, words, query):
    """Queries with an operator; returns (ok, what each rank has)."""
    if words[0] == "rank":
        if len(words) != 5:
            fail(f"'{query}': want 'rank R PATH OP NUMBER'", 2)
        r = parse_number(words[1], query)
        if r not in ranks:
            fail(f"'{query}': no rank {r}")
        words = [words[0]] + words[2:]
        targets = [r]
    else:
        if len(words) != 4:
            fail(f"'{query}': want '{words[0]} PATH OP NUMBER'", 2)
        targets = sorted(ranks)
    kind, path, op, want = words[0], words[1], words[2], parse_number(words[3], query)
    if op not in OPS:
        fail(f"'{query}': unknown operator {op}", 2)
    values = {r: number(ranks, r, path) for r in targets}
    have = ", ".join(f"rank {r}: {v}" for r, v in values.items())
    test = OPS[op]
    if kind == "sum":
        total = sum(values.values())
        return test(total, want), f"sum {total} ({have})"
    if kind == "any":
        return any(test(v, want) for v in values.values()), have
    return all(test(v, want) for v in values.values()), have


def run(ranks, query):
    words = query.split()
    if not words:
        fail("an empty query", 2)
    kind = words[0]
    if kind == "print":
        rest = words[1:]
        if rest[:1] == ["sum"] and len(rest) == 2:
            print(sum(number(ranks, r, rest[1]) for r in sorted(ranks)))
        elif rest[:1] == ["rank"] and len(rest) == 3:
            r = parse_number(rest[1], query)
            if r not in ranks:
                fail(f"'{query}': no rank {r}")
            print(number(ranks, r, rest[2]))
        else:
            fail(f"'{query}': want 'print sum PATH' or 'print rank R PATH'", 2)
        return
    if kind in ("has", "none"):
        if len(words) != 2:
            fail(f"'{query}': want '{kind} PATH'", 2)
        with_it = [r for r in sorted(ranks) if lookup(ranks[r], words[1]) is not None]
        if kind == "has" and len(with_it) != len(ranks):
            fail(f"'{query}': only ranks {with_it} have it")
        if kind == "none" and with_it:
            fail(f"'{query}': ranks {with_it} have it")
        return
    if kind not in ("all", "any", "sum", "rank"):
        fail(f"'{query}': unknown query kind '{kind}'", 2)
    ok, have = compare(ranks, words, query)
    if not ok:
        fail(f"'{query}' does not hold: {have}")


def main(argv):
    want_ranks = None
    if len(argv) >= 2 and argv[0] == "--ranks":
        want_ranks = int(argv[1])
        argv = argv[2:]
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    src = sys.stdin if argv[0] == "-" else open(argv[0], encoding="utf-8", errors="replace")
    with src:
        ranks = load(src.read().splitlines(), want_ranks)
    for query in argv[1:]:
        run(ranks, query)


if __name__ == "__main__":
    main(sys.argv[1:])
