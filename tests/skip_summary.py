#!/usr/bin/env python3
"""Counts the tests of a ctest run that were skipped, grouped by reason.

ctest headlines "100% tests passed" when tests were skipped; scripts/test.sh prints this summary
after each ctest run so a skip is never read as a pass. Two sources: ctest's JUnit file (the shell
and Node checks: their "SKIP: ..." lines) and the GoogleTest XML that every test executable writes to
GTEST_XML_DIR (one ctest test runs all of an executable's cases, so ctest sees none of its skipped
cases: their GTEST_SKIP messages are read here). Paths are cut to their directory so one missing
fixture directory is one line.

Usage: skip_summary.py JUNIT_XML [GTEST_XML_DIR] [--fail-on-skip]
Exit status: 0, or 1 with --fail-on-skip when any test was skipped.
"""
import collections
import glob
import os
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
    args = [a for a in argv[1:] if not a.startswith("--")]
    total, skipped = 0, collections.Counter()
    for case in ET.parse(args[0]).getroot().iter("testcase"):
        # An executable's own entry stands for its cases, which are counted from its XML below.
        if len(args) > 1 and os.path.exists(os.path.join(args[1], case.get("name", "") + ".xml")):
            continue
        total += 1
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            out = case.findtext("system-out") or ""
            skipped[reason_of(out)] += 1
    if len(args) > 1:
        for path in sorted(glob.glob(os.path.join(args[1], "*.xml"))):
            try:
                cases = list(ET.parse(path).getroot().iter("testcase"))
            except ET.ParseError as e:  # an executable killed while writing it: ctest reports the failure
                print("skip summary: %s is not readable XML (%s); its cases are not counted" % (path, e))
                continue
            for case in cases:
                total += 1
                skip = case.find("skipped")
                if case.get("result") == "skipped" or skip is not None:
                    # GoogleTest's message is "FILE:LINE" then the GTEST_SKIP text.
                    message = skip.get("message", "") if skip is not None else ""
                    text = message.split("\n", 1)[1].strip() if "\n" in message else message.strip()
                    reason = reason_of(text)
                    skipped[text if reason == "no reason printed" and text else reason] += 1
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
