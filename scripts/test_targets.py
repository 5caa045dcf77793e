#!/usr/bin/env python3
"""Prints the ninja targets a meson build's tests need, one per line: each test's own program and
everything it names as a dependency. scripts/test.sh builds only these in the sanitizer builds,
which run tests and nothing else (the benchmark programs are built, and so checked, by the debug
build). Usage: test_targets.py BUILD_DIR"""
import json
import os
import subprocess
import sys


def main() -> int:
    build = sys.argv[1]
    out = subprocess.run(["meson", "introspect", build, "--tests", "--targets"],
                         check=True, capture_output=True, text=True).stdout
    info = json.loads(out)
    by_id = {t["id"]: t for t in info["targets"]}
    need = set()
    for test in info["tests"]:
        for target_id in test["depends"]:
            for path in by_id[target_id]["filename"]:
                need.add(os.path.relpath(path, build))
    if not need:
        print(f"{build}: its tests name no target", file=sys.stderr)
        return 1
    print("\n".join(sorted(need)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
