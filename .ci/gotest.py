#!/usr/bin/env python3
"""Reads `go test -json` on stdin and prints what plain `go test ./...`
prints: each package's closing line (ok, FAIL, no test files), build
errors, and the full output of every failing test; a skipped test prints
its --- SKIP line and reason. At the end it checks that every test named
in the file given as argv[1] ran and passed (a skip or an absence is a
failure), and exits 1 listing those that did not."""
import json
import sys

want = []
with open(sys.argv[1]) as f:
    for line in f:
        line = line.split("#", 1)[0].strip()
        if line:
            pkg, test = line.split()
            want.append((pkg, test))


def emit(s):
    sys.stdout.write(s)
    sys.stdout.flush()


result = {}
buf = {}
for raw in sys.stdin:
    try:
        ev = json.loads(raw)
    except ValueError:
        emit(raw)  # build errors come as plain text
        continue
    pkg, test, action, out = ev.get("Package"), ev.get("Test"), ev.get("Action"), ev.get("Output")
    if not test:
        if out is not None and out != "PASS\n":
            emit(out)
        continue
    key = (pkg, test)
    if out is not None:
        buf.setdefault(key, []).append(out)
    if action in ("pass", "fail", "skip"):
        result[key] = action
        lines = buf.pop(key, [])
        if action == "fail":
            emit("".join(lines))
        elif action == "skip":
            emit("".join(l for l in lines if "--- SKIP" in l or l.startswith("    ")))

bad = [(p, t, result.get((p, t), "did not run")) for p, t in want if result.get((p, t)) != "pass"]
if bad:
    print("ci: required tests that did not pass:")
    for p, t, why in bad:
        print(f"ci:   {p} {t}: {why}")
    sys.exit(1)
print(f"ci: all {len(want)} required end-to-end and interop tests ran and passed")
