"""The load shapes' section of docs/BENCHMARKS.md (3e) and its plot, from bench/results/shapes.json
(bench/shapes.py). Used by bench/report.py."""

import matplotlib.pyplot as plt

# The bar the issue set: at or below the best fixed setting in hindsight, or within 10 % of it.
WITHIN = 1.10


def ms(us):
    return f"{us / 1e3:.2f}"


def verdict(adaptive_us, best_us):
    if adaptive_us <= best_us:
        return "at or below"
    return "within 10 %" if adaptive_us <= best_us * WITHIN else "**over 10 %**"


def shapes_table(result):
    rows = ["| shape | mean req/s | adaptive p99 ms (runs) | adaptive p50 ms | best fixed (max-batch:max-wait ms) "
            "p99 ms | adaptive / best | verdict | adaptive errors | fixed settings that held |",
            "|---|---:|---|---:|---|---:|---|---:|---:|"]
    for name, s in result["shapes"].items():
        pol = s["policies"]
        a = pol["adaptive"]
        best = s["best_fixed"]
        b = pol[best]
        runs = " / ".join(ms(r["p99_us"]) for r in a["runs"])
        fixed = [v for p, v in pol.items() if p != "adaptive"]
        held = sum(1 for v in fixed if v["errors"] == 0)
        rows.append(f"| {name}: {s['what']} | {s['mean_rate']:,.0f} | {ms(a['p99_us'])} ({runs}) | {ms(a['p50_us'])} | "
                    f"{best} {ms(b['p99_us'])} | {a['p99_us'] / b['p99_us']:.2f} | {verdict(a['p99_us'], b['p99_us'])} | "
                    f"{a['errors']} | {held} of {len(fixed)} |")
    return "\n".join(rows)


def plot_shapes(result, plots):
    names = list(result["shapes"])
    adaptive = [result["shapes"][n]["policies"]["adaptive"]["p99_us"] / 1e3 for n in names]
    best = [result["shapes"][n]["policies"][result["shapes"][n]["best_fixed"]]["p99_us"] / 1e3 for n in names]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], adaptive, width=0.4, label="adaptive (defaults)")
    ax.bar([i + 0.2 for i in x], best, width=0.4, label="best fixed setting per shape (hindsight)")
    for i, n in enumerate(names):
        ax.text(i + 0.2, best[i], result["shapes"][n]["best_fixed"], ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("p99 latency, ms (median of runs)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    ax.set_title("load shapes, sim 2 ms + 20 us/request, 2 devices, open loop")
    fig.tight_layout()
    fig.savefig(plots / "shapes-p99.png", dpi=110)
    plt.close(fig)


def shapes_section(result, plots):
    if not result:
        return "_Not measured yet: `bench/shapes.py`._"
    plot_shapes(result, plots)
    grid = sorted({p for s in result["shapes"].values() for p in s["policies"] if p != "adaptive"},
                  key=lambda p: tuple(int(x) for x in p.split(":")))
    head = (f"Capacity (batches of 64) {result['capacity']:,.0f} requests/s; {result['runs_per_point']} runs per point "
            f"of {result['measure_s']:g} s after {result['warmup_s']:g} s of warm-up, deadline {result['timeout_ms']} ms; "
            f"fixed grid (max-batch:max-wait ms): {', '.join(grid)}.")
    again = result.get("adaptive_remeasured")
    if again:
        head += (f" The adaptive rows: measured again at commit {again['commit']}, {again['date']}, on the same "
                 f"machine kind; the fixed grid at {result['machine']['commit']}.")
    return head + "\n\n" + shapes_table(result) + "\n\n![p99 per load shape](bench/shapes-p99.png)"
