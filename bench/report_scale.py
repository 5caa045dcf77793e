"""docs/BENCHMARKS.md's scale-out section, from bench/results/scale-out.json (bench/scale_out.py)."""


def ms(us):
    return f"{us / 1e3:.2f}"


def scale_out_section(result) -> str:
    if not result:
        return "_Not measured yet: run `bench/scale_out.py`._"
    out = []
    if "nodes" in result:
        cost = result["node_cost"]
        out += [f"Nodes through HAProxy, closed loop ({result['seconds']} s, 48 callers per node); each node one sim "
                f"device of {cost['fixed_us'] / 1e3:.0f} ms + {cost['per_item_us'] / 1e3:.0f} ms per request, "
                f"batches of at most {cost['max_batch']} ({result['node_capacity_rps']:.0f} requests/s per node):", "",
                "| nodes | requests/s | of the devices' ceiling | vs 1 node | p99 ms | errors |",
                "|---:|---:|---:|---:|---:|---:|"]
        one = result["nodes"][0]["rps"]
        for row in result["nodes"]:
            out.append(f"| {row['nodes']} | {row['rps']:.0f} | {row['rps'] / row['ceiling_rps']:.0%} | "
                       f"{row['rps'] / one:.2f}x | {ms(row['p99_us'])} | {row['errors']} |")
        out.append("")
    if "overhead" in result:
        o = result["overhead"]
        out += [f"HAProxy's cost: {o['rate']} requests/s open loop to one node (2 sim devices, 2 ms + 20 µs), straight "
                "to its batchd-http and through HAProxy, alternated (each run's p50 / p99 in ms):", "",
                "| path | runs | mean p50 | mean p99 |", "|---|---|---:|---:|"]
        for name in ("direct", "haproxy"):
            runs = ", ".join(f"{ms(r['p50_us'])} / {ms(r['p99_us'])}" for r in o["runs"][name])
            out.append(f"| {name} | {runs} | {ms(o[name]['p50_us'])} | {ms(o[name]['p99_us'])} |")
        out += ["", f"HAProxy adds {o['added_p50_us'] / 1e3:.2f} ms at the median; its p99s scatter more than "
                "the direct ones from run to run on this 2-core VM (the balancer, the node and the load generator share its two cores).", ""]
    if "kill" in result:
        k = result["kill"]
        w = k["worst_p99_us"]
        out += ["Node kill: 3 nodes (2 sim devices each), 5,000 requests/s through HAProxy for 15 s, one node's "
                "batchd-http and batchd killed with SIGKILL at 5 s and restarted at 10 s:", "",
                "| sent | ok | failed | wrong | worst 1-s p99 before | during | after |",
                "|---:|---:|---:|---:|---:|---:|---:|",
                f"| {k['sent']} | {k['ok']} | {k['errors']} | {k['wrong']} | {ms(w['before'])} ms | "
                f"{ms(w['during'])} ms | {ms(w['after'])} ms |", ""]
    return "\n".join(out)
