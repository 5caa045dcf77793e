"""The response cache's section of docs/BENCHMARKS.md (3f), from bench/results/cache.json
(bench/cache.py). Used by bench/report.py."""


def cache_section(result, fastpath=None):
    if not result:
        return "_Not measured yet._"
    m, r, c = result["median"], result["ratios"], result["encryption"]
    lines = [
        "| shared memory, cpu backend | hits | misses (cache on) | cache off | hits / misses | bar |",
        "|---|---:|---:|---:|---:|---|",
        f"| one caller, p50 µs | {m['one_hit_p50_us']:.2f} | {m['one_miss_p50_us']:.2f} | {m['one_off_p50_us']:.2f} | "
        f"{m['one_hit_p50_us'] / m['one_miss_p50_us']:.2f} | hit ≤ 0.3 µs |",
        f"| closed loop, {result['machine']['cores']} threads, requests/s | {m['loop_hit_per_s']:,.0f} | "
        f"{m['loop_miss_per_s']:,.0f} | | {r['loop_hit_over_miss']:.2f} | ≥ 3 |",
        "",
        "| batchd-http /v1 under wrk, 64 connections, one input | requests/s |",
        "|---|---:|",
        f"| cache on (every request after the first a hit) | {m['v1_cache_on_rps']:,.0f} |",
        f"| cache off | {m['v1_cache_off_rps']:,.0f} |",
        f"| nginx, a fixed body, same machine | {m['nginx_rps']:,.0f} |",
        f"| **on / off: {r['v1_hit_over_miss']:.2f}** (bar ≥ 1.1); **on / nginx: {r['v1_hit_over_nginx']:.2f}** "
        "(goal ≥ 1.0) | |",
        "",
        "| perf_analyzer, gRPC, sim 2 ms + 20 µs | mix | concurrency | inferences/s | p99 ms | hits / misses perf_analyzer saw |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for p in result["perf_analyzer"]:
        seen = f"{p['cache_hits']:,} / {p['cache_misses']:,}" if "cache_hits" in p else "(cache off)"
        lines.append(f"| | {p['hit_percent']} % hits | {p['concurrency']} | {p.get('infer_per_s', 0):,.0f} | "
                     f"{p.get('p99_us', 0) / 1e3:.2f} | {seen} |")
    if fastpath:
        f = fastpath["new_over_base"]
        lines += ["", f"The cache off, this tree against the commit before it (`bench/fastpath_ab.py`, "
                  f"{len(fastpath['turns']['new'])} turns, cpu backend, default flags): open loop held "
                  f"{f['openloop_held']:.3f}, one caller's p50 {f['one_caller_p50_us']:.3f}, /v1 under wrk "
                  f"{f['http_v1_rps']:.3f} (new / base)."]
    lines += [
        "",
        f"A miss with the cache on against the cache off (one caller's p50): {r['one_miss_on_over_off']:.2f}. "
        f"Encrypting answers under a key from the input would add to every hit a SHA-256 of the input "
        f"({c['sha256_100B_ns']:.0f} ns for 100 bytes) and an AES-128-GCM pass over the answer "
        f"({c['aes128gcm_64B_ns']:.0f} ns for 64 bytes, `openssl speed`, without its set-up per key): "
        f"{(c['sha256_100B_ns'] + c['aes128gcm_64B_ns']) / max(m['one_hit_p50_us'] * 1e3, 1):.1f} times the hit itself.",
    ]
    if result.get("eviction"):
        lines += ["", "Hit ratio by eviction order, simulated (Zipf 0.99 over 100,000 keys, 1,000,000 requests):", "",
                  "| cache holds | FIFO (batchd's) | CLOCK | LRU |", "|---:|---:|---:|---:|"]
        for e in result["eviction"]:
            lines.append(f"| {e['cache_share'] * 100:.0f} % of the keys | {e['fifo']:.3f} | {e['clock']:.3f} | "
                         f"{e['lru']:.3f} |")
    return "\n".join(lines)
