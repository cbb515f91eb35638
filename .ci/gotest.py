#!/usr/bin/env python3
"""Reads `go test -json` on stdin, prints the ordinary go test output as it
comes, and at the end checks that every test named in the file given as
argv[1] ran and passed (a skip or an absence is a failure). Exits 1 if any
did not, listing them."""
import json
import sys

want = []
with open(sys.argv[1]) as f:
    for line in f:
        line = line.split("#", 1)[0].strip()
        if line:
            pkg, test = line.split()
            want.append((pkg, test))

result = {}
for raw in sys.stdin:
    try:
        ev = json.loads(raw)
    except ValueError:
        sys.stdout.write(raw)  # build errors come as plain text
        sys.stdout.flush()
        continue
    out = ev.get("Output")
    if out is not None:
        sys.stdout.write(out)
        sys.stdout.flush()
    if ev.get("Test") and ev.get("Action") in ("pass", "fail", "skip"):
        result[(ev.get("Package"), ev["Test"])] = ev["Action"]

bad = [(p, t, result.get((p, t), "did not run")) for p, t in want if result.get((p, t)) != "pass"]
if bad:
    print("ci: required tests that did not pass:")
    for p, t, why in bad:
        print(f"ci:   {p} {t}: {why}")
    sys.exit(1)
print(f"ci: all {len(want)} required end-to-end and interop tests ran and passed")
