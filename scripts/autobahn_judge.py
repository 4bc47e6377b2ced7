#!/usr/bin/env python3
"""Judges an Autobahn|Testsuite fuzzingclient report (index.json).

wstest exits 0 even when the server under test is down, so the verdict comes
from the report: the expected number of cases must be there, every case's
`behavior` must be OK or INFORMATIONAL (NON-STRICT fails too: weir holds
itself to the strict reading), and every `behaviorClose` OK or
INFORMATIONAL. Exits 1 otherwise.

Usage: autobahn_judge.py INDEX_JSON [EXPECTED_CASES]
"""

import json
import sys

PASSING_BEHAVIOR = {"OK", "INFORMATIONAL"}
PASSING_CLOSE = {"OK", "INFORMATIONAL"}


def case_key(case_id):
    """Sorts "9.10.2" after "9.2.1" (numerically, part by part)."""
    return [int(part) if part.isdigit() else part for part in case_id.split(".")]


def judge(report, expected):
    """Returns (summary lines, passed)."""
    lines = []
    if len(report) != 1:
        agents = ", ".join(sorted(report)) or "none"
        return [f"autobahn: expected one agent in the report, found: {agents}"], False
    (agent, cases), = report.items()
    counts = {"OK": 0, "NON-STRICT": 0, "INFORMATIONAL": 0}
    failed, non_strict = [], []
    for case_id in sorted(cases, key=case_key):
        result = cases[case_id]
        behavior = result.get("behavior", "MISSING")
        close = result.get("behaviorClose", "MISSING")
        if behavior in PASSING_BEHAVIOR and close in PASSING_CLOSE:
            counts[behavior] += 1
            if behavior == "NON-STRICT":
                non_strict.append(case_id)
        else:
            failed.append(f"{case_id} (behavior {behavior}, close {close}, "
                          f"remote close code {result.get('remoteCloseCode')})")
    lines.append(
        f"autobahn: {len(cases)} cases, {counts['OK']} OK, {counts['NON-STRICT']} NON-STRICT, "
        f"{counts['INFORMATIONAL']} INFORMATIONAL, {len(failed)} FAILED (agent {agent})")
    if non_strict:
        lines.append("NON-STRICT: " + " ".join(non_strict))
    for case in failed:
        lines.append("FAILED: " + case)
    passed = not failed
    if len(cases) != expected:
        lines.append(f"autobahn: expected {expected} cases, the report has {len(cases)} "
                     "(did the server stop or refuse connections?)")
        passed = False
    return lines, passed


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[-1])
    path = sys.argv[1]
    expected = int(sys.argv[2]) if len(sys.argv) == 3 else 301
    try:
        with open(path) as f:
            report = json.load(f)
    except (OSError, ValueError) as err:
        print(f"autobahn: cannot read the report {path}: {err}")
        sys.exit(1)
    lines, passed = judge(report, expected)
    print("\n".join(lines))
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
