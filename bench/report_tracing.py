"""Tracing's section of docs/BENCHMARKS.md (3g), from bench/results/tracing.json (bench/tracing.py).
Used by bench/report.py."""

LABELS = {"off": "tracing off", "rate_1000": "on, 1 in 1,000", "every": "on, every request"}


def tracing_section(result):
    if not result:
        return "_Not measured yet._"
    m, r = result["median"], result["over_base"]
    lines = [
        "| cpu backend, default flags | open loop held, requests/s | one caller p50 µs | /v1 under wrk, requests/s "
        "| /v1: batchd + batchd-http CPU µs a request |",
        "|---|---:|---:|---:|---:|",
        f"| the commit before (base) | {m['base']['openloop_held']:,.0f} | {m['base']['one_caller_p50_us']:.2f} | "
        f"{m['base']['http_v1_rps']:,.0f} | {m['base']['http_v1_cpu_us']:.2f} |",
    ]
    for label, name in LABELS.items():
        lines.append(f"| {name} | {m[label]['openloop_held']:,.0f} ({r[label]['openloop_held']:.3f}) | "
                     f"{m[label]['one_caller_p50_us']:.2f} ({r[label]['one_caller_p50_us']:.3f}) | "
                     f"{m[label]['http_v1_rps']:,.0f} ({r[label]['http_v1_rps']:.3f}) | "
                     f"{m[label]['http_v1_cpu_us']:.2f} ({r[label]['http_v1_cpu_us']:.3f}) |")
    c = result["collector"]
    lines += ["", f"(In brackets: over the base. {len(result['turns']['base'])} turns; the collector took "
              f"{c['exports']:,} exports, {c['bytes'] / 1e6:.1f} MB.)"]
    return "\n".join(lines)
