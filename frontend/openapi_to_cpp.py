#!/usr/bin/env python3
"""Writes docs/openapi.yaml as a C++ source that holds it as JSON, for GET /openapi.json.

Usage: openapi_to_cpp.py SPEC.yaml OUT.cpp

The JSON is the YAML document itself, so the served contract cannot drift from the file. Run by
meson at build time with Debian's python3-yaml (scripts/setup.sh installs it).
"""
import json
import sys

import yaml

DELIMITER = "batchd_openapi"  # of the raw string literal; at most 16 characters


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    spec_path, out_path = sys.argv[1], sys.argv[2]
    with open(spec_path, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    if not isinstance(spec, dict) or not str(spec.get("openapi", "")).startswith("3.1."):
        print(f"{spec_path}: not an OpenAPI 3.1 document", file=sys.stderr)
        return 1
    text = json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
    if f'){DELIMITER}"' in text:
        print(f"{spec_path}: holds the raw string's end ){DELIMITER}\"", file=sys.stderr)
        return 1
    with open(out_path, "w", encoding="utf-8") as out:
        out.write(f"// Generated from {spec_path} by frontend/openapi_to_cpp.py: edit the YAML.\n")
        out.write('#include "frontend/openapi_spec.hpp"\n\n')
        out.write("namespace batchd::http {\n\n")
        out.write("std::string_view openapi_json() noexcept {\n")
        out.write(f'  static constexpr char kJson[] = R"{DELIMITER}({text}){DELIMITER}";\n')
        out.write("  return {kJson, sizeof(kJson) - 1};\n")
        out.write("}\n\n")
        out.write("}  // namespace batchd::http\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
