"""The adaptive policy's sections of docs/BENCHMARKS.md (3b) and their plots, from
bench/results/sweep-adaptive.json, closed-loop.json and load-step.json (bench/sweep.py adaptive,
closed, step). Used by bench/report.py."""

import matplotlib.pyplot as plt


def ms(us):
    return f"{us / 1e3:.2f}"


def held_text(measured):
    if measured["errors"] == 0 and measured["wrong"] == 0:
        return "held"
    return f"**not held** ({measured['errors']} errors of {measured['sent']})"


def adaptive_table(result):
    rows = ["| load | requests/s | adaptive p99 ms (two runs) | best fixed (max-batch, max-wait) p99 ms | "
            "bound ms | within | fixed 64 / 50 ms p99 ms | fixed settings that held |",
            "|---:|---:|---|---|---:|---|---|---:|"]
    for r in result["rows"]:
        a = r["adaptive"]
        runs = " / ".join(ms(m["p99_us"]) for m in r["adaptive_runs"])
        best = r["best_fixed"]
        best_text = (f"({best['max_batch']}, {best['max_wait_ms']} ms) {ms(best['measured']['p99_us'])}"
                     if best else "none held")
        seed = r["fixed_64_50"]
        seed_text = ms(seed["p99_us"]) + ("" if seed["errors"] == 0 else f" ({seed['errors']} errors)")
        rows.append(f"| {r['load'] * 100:.0f}% | {r['rate']:.0f} | {ms(a['p99_us'])} ({runs}; {held_text(a)}) | "
                    f"{best_text} | {ms(r['bound_us']) if 'bound_us' in r else '-'} | "
                    f"{'yes' if r['within_bound'] else '**no**'} | {seed_text} | {r['fixed_settings_held']} |")
    return "\n".join(rows)


def plot_adaptive(result, plots):
    loads = [r["load"] * 100 for r in result["rows"]]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(loads, [r["adaptive"]["p99_us"] / 1e3 for r in result["rows"]], "o-", label="adaptive (defaults)")
    best = [(r["load"] * 100, r["best_fixed"]["measured"]["p99_us"] / 1e3) for r in result["rows"] if r["best_fixed"]]
    ax.plot([b[0] for b in best], [b[1] for b in best], "s--", label="best fixed setting per load (hindsight)")
    seed = [(r["load"] * 100, r["fixed_64_50"]["p99_us"] / 1e3) for r in result["rows"]]
    ax.plot([s[0] for s in seed], [s[1] for s in seed], "^:", label="fixed 64 / 50 ms")
    ax.set_xlabel("offered load, % of max-batch-64 capacity")
    ax.set_ylabel("p99 latency, ms (log)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title("sim 2 ms + 20 us/request, 2 devices, open loop")
    fig.tight_layout()
    fig.savefig(plots / "adaptive-p99-vs-load.png", dpi=110)
    plt.close(fig)


def closed_table(result):
    pol = result["policies"]
    share = pol.get("fixed_share", {})
    rows = ["| closed loop | fixed 64 / 50 ms | adaptive | adaptive / fixed | analytic ceiling | adaptive / ceiling "
            "| fixed k / devices (hindsight) | adaptive / hindsight |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for key, label, ceiling in (("shm_1", "1 caller, shm", "1"), ("shm_4", "4 callers, shm", "4"),
                                ("shm_16", "16 callers, shm", "16"), ("http_16_wrk", "16 HTTP connections, wrk", "16")):
        f, a = pol["fixed_64_50"][key], pol["adaptive"][key]
        ceil = result["ceiling"][ceiling]
        h = share.get(key)
        hind = (f"{h['rps']:.0f}/s, p99 {ms(h['p99_us'])} ms | {a['rps'] / max(h['rps'], 1e-9) * 100:.0f}%"
                if h else "- | -")
        rows.append(f"| {label} | {f['rps']:.0f}/s, p99 {ms(f['p99_us'])} ms | {a['rps']:.0f}/s, p99 {ms(a['p99_us'])} ms "
                    f"(p50 {ms(a['p50_us'])}) | {a['rps'] / max(f['rps'], 1e-9):.1f}x | {ceil:.0f}/s | "
                    f"{a['rps'] / ceil * 100:.0f}% | {hind} |")
    return "\n".join(rows)


def plot_step(result, plots):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, label in (("adaptive", "adaptive"), ("fixed_64_50", "fixed 64 / 50 ms")):
        seconds = result["policies"][name]
        ax.plot(range(1, len(seconds) + 1), [m["p99_us"] / 1e3 for m in seconds], "o-", label=label)
    phase = result["phase_s"]
    for i, load in enumerate(result["phases"]):
        ax.axvspan(i * phase + 0.5, (i + 1) * phase + 0.5, alpha=0.08 if load < 0.5 else 0.2, color="grey")
        ax.text(i * phase + phase / 2 + 0.5, 0.95, f"{load * 100:.0f}%", transform=ax.get_xaxis_transform(),
                ha="center")
    ax.set_xlabel("second")
    ax.set_ylabel("p99 latency that second, ms (log)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="center right")
    ax.set_title("load step 10% -> 90% -> 10%, sim 2 ms + 20 us/request, 2 devices")
    fig.tight_layout()
    fig.savefig(plots / "adaptive-load-step.png", dpi=110)
    plt.close(fig)


def step_table(result):
    rows = ["| policy | p99 ms per second (10% x5, 90% x5, 10% x5) | errors |", "|---|---|---:|"]
    for name, label in (("adaptive", "adaptive"), ("fixed_64_50", "fixed 64 / 50 ms")):
        seconds = result["policies"][name]
        rows.append(f"| {label} | {' '.join(ms(m['p99_us']) for m in seconds)} | {sum(m['errors'] for m in seconds)} |")
    return "\n".join(rows)


def adaptive_parts(adaptive, closed, step, plots):
    missing = "_Not measured yet: `bench/sweep.py adaptive closed step`._"
    parts = {"ADAPTIVE_TABLE": missing, "CLOSED_TABLE": missing, "STEP_TABLE": missing}
    if adaptive:
        plot_adaptive(adaptive, plots)
        parts["ADAPTIVE_TABLE"] = adaptive_table(adaptive)
    if closed:
        parts["CLOSED_TABLE"] = closed_table(closed)
    if step:
        plot_step(step, plots)
        parts["STEP_TABLE"] = step_table(step)
    return parts
