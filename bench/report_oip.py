"""docs/BENCHMARKS.md section 4d (the Open Inference Protocol) from bench/results/oip.json."""

import matplotlib.pyplot as plt

LABELS = {"http": "HTTP (/v2, sync)", "grpc": "gRPC unary (async)", "grpc_stream": "gRPC streaming"}


def plot_oip(result: dict, plots):
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for mode, label in LABELS.items():
        rows = sorted((r for r in result["matrix"] if r["mode"] == mode), key=lambda r: r["concurrency"])
        rows = [r for r in rows if "infer_per_s" in r]  # a point perf_analyzer did not finish is left out
        xs = [r["concurrency"] for r in rows]
        left.plot(xs, [r["infer_per_s"] for r in rows], marker="o", label=label)
        right.plot(xs, [r["p99_us"] / 1000 for r in rows], marker="o", label=label)
    for ax, title in ((left, "throughput (inferences/s)"), (right, "p99 latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("perf_analyzer concurrency")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    right.set_yscale("log")
    left.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plots / "oip.png", dpi=80)
    plt.close(fig)


def oip_section(result: dict, plots) -> str:
    if not result:
        return "_Not measured yet: `bench/oip.py`._"
    plot_oip(result, plots)
    out = ["| perf_analyzer | concurrency | inferences/s | p50 (ms) | p99 (ms) | exit | error lines |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["matrix"]:
        if "infer_per_s" not in r:
            out.append(f"| {LABELS[r['mode']]} | {r['concurrency']} | not finished (exit: {r['exit']}) | | | | |")
            continue
        out.append(f"| {LABELS[r['mode']]} | {r['concurrency']} | {r['infer_per_s']:,.0f} | "
                   f"{r['p50_us'] / 1000:.2f} | {r['p99_us'] / 1000:.2f} | {r['exit']} | {r['error_lines']} |")
    wrk, ratios, run = result["wrk"], result["ratios"], result["open_loop"]
    out += ["", "![throughput and p99 by concurrency](bench/oip.png)", "",
            f"Under wrk (2 threads, 64 connections, {result['wrk_s']:g} s, a 43-byte input): `/v1` "
            f"{wrk['v1']['rps']:,.0f}/s (p99 {wrk['v1']['p99_us'] / 1000:.2f} ms), `/v2` JSON "
            f"{wrk['v2_json']['rps']:,.0f}/s (p99 {wrk['v2_json']['p99_us'] / 1000:.2f} ms); non-2xx "
            f"{wrk['v1']['non_2xx'] + wrk['v2_json']['non_2xx']}, socket errors {wrk['v1']['errors'] + wrk['v2_json']['errors']}.", "",
            "| ratio (same daemon, same run) | measured | bar |", "|---|---:|---:|",
            f"| gRPC streaming at concurrency 64 / `/v1` under wrk at 64 connections | **{ratios['grpc_stream_64_over_v1']:.2f}** | 0.6 |",
            f"| `/v2` HTTP JSON / `/v1`, both under wrk at 64 connections | **{ratios['v2_json_over_v1']:.2f}** | 0.8 |", "",
            f"**gRPC open loop** (`batchd-stress --protocol grpc --rate 10000 --duration {result.get('open_s', 60):g}`): "
            f"{run['sent']:,} sent, {run['ok']:,} right, {run['errors']} errors, {run['wrong']} wrong; "
            f"p50 {run['p50_us'] / 1000:.2f} ms, p99 **{run['p99_us'] / 1000:.2f} ms** (bar 20 ms)."]
    return "\n".join(out)
