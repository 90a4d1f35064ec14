#!/usr/bin/env python3
"""Counts the tests of a ctest run that were skipped, grouped by reason, from ctest's JUnit file.

ctest headlines "100% tests passed" when tests were skipped; scripts/test.sh prints this summary
after each ctest run so a skip is never read as a pass. Reasons are the GTEST_SKIP messages and the
"SKIP: ..." lines of the shell checks, with paths cut to their directory so one missing fixture
directory is one line.

Usage: skip_summary.py JUNIT_XML [--fail-on-skip]
Exit status: 0, or 1 with --fail-on-skip when any test was skipped.
"""
import collections
import re
import sys
import xml.etree.ElementTree as ET


def reason_of(text):
    """The first skip message in a test's output, shortened to its kind and directory."""
    for line in (text or "").splitlines():
        m = re.search(r"(fixture missing: \S+|SKIP: .*|Skipped:? .+)", line)
        if m:
            r = m.group(1)
            # ".../v41-tiny/golden/x.npy" -> ".../v41-tiny/": one line per missing directory.
            return re.sub(r"(/[^/\s]+)+\.(npy|json|txt|safetensors|py|u32)\b", lambda p: p.group(0).rsplit("/", 1)[0] + "/",
                          r)
    return "no reason printed"


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    root = ET.parse(argv[1]).getroot()
    total, skipped = 0, collections.Counter()
    for case in root.iter("testcase"):
        total += 1
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            out = case.findtext("system-out") or ""
            skipped[reason_of(out)] += 1
    n = sum(skipped.values())
    if n == 0:
        print("skip summary: all %d tests ran their checks (none skipped)" % total)
        return 0
    print("skip summary: %d of %d tests were SKIPPED, not passed:" % (n, total))
    for reason, k in skipped.most_common():
        print("  %4d  %s" % (k, reason))
    return 1 if "--fail-on-skip" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
