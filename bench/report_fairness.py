"""docs/BENCHMARKS.md's sections 5d and 5e: priority grants over the network (bench/grants.py) and
a peer costing only itself (bench/fairness.py)."""


def _ms(us) -> str:
    return "n/a" if us is None else f"{us / 1000:.2f}"


def grants_section(result) -> str:
    if not result:
        return "_Not measured yet: run `bench/run-all.sh grants report`._"
    rows = [f"{result['run_s']:g} s per light run (200/s); the flood: {result['flood_threads']} threads of 60 KB "
            f"inputs. Build: `{result.get('build', 'build-release')}`.", "",
            "| front-end | light p99 alone ms | beside the flood marked normal | marked high | high / normal "
            "(bar 1.5) | light errors | downgrades counted |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in ("http", "grpc"):
        r = result.get(name)
        if not r:
            continue
        rows.append(f"| {name} | {_ms(r['alone']['p99_us'])} | {_ms(r['beside_normal']['p99_us'])} | "
                    f"{_ms(r['beside_high']['p99_us'])} | **{r['p99_ratio_high_vs_normal']:.2f}** | "
                    f"{r['beside_high']['errors']} | {r['beside_high']['downgrades']:.0f} |")
    g = result.get("granted")
    if g:
        rows += ["", f"Beside an HTTP flood marked high: a caller granted high by token p99 "
                     f"{_ms(g['granted_p99_us'])} ms, a normal caller {_ms(g['normal_p99_us'])} ms "
                     f"(errors {g['granted_errors']} / {g['normal_errors']})."]
    return "\n".join(rows)


def fairness_section(result) -> str:
    if not result:
        return "_Not measured yet: run `bench/run-all.sh fairness report`._"
    rows = [f"{result['run_s']:g} s per measured run. Build: `{result.get('build', 'build-release')}`.", ""]
    s = result.get("slow_worker")
    if s:
        shares = ", ".join(f"{x:.0%}" for x in s["shares_after_flag"])
        rows += ["**A slow worker** (batchd-worker cpu beside a Python worker at 200 ms a batch; 3,000/s):", "",
                 "| | p50 ms | p99 ms | max ms | errors | timeouts |", "|---|---:|---:|---:|---:|---:|"]
        for label, key in (("good worker alone", "alone"), ("with the slow worker in the pool", "beside")):
            r = s[key]
            rows.append(f"| {label} | {_ms(r['p50_us'])} | {_ms(r['p99_us'])} | {_ms(r['max_us'])} | {r['errors']} | "
                        f"{r['timeouts']} |")
        back = f"**{s['recovered_s']:.1f} s**" if s["recovered_s"] is not None else "**never**"
        rows += ["", f"p99 with / alone: **{s['p99_ratio']:.2f}x** (bar 2x). Meanwhile the slow worker ran "
                     f"{s['slow_batches']} batches and {s['slow_probes']} probes. Fast again (its flag file): "
                     f"its share of the batches second by second: {shares}; back to a quarter or more after "
                     f"{back} (bar 10 s).", ""]
    f = result.get("class_floor")
    if f:
        rows += ["**A granted high flood** (the daemon's own user, 64 KiB inputs, open loop at 20,000/s: its ring "
                 "full) beside a light normal client at 200/s:", "",
                 "| | light p99 alone ms | light p99 beside ms | errors | timeouts | overloaded |",
                 "|---|---:|---:|---:|---:|---:|"]
        for label, key in (("floors (default: 10 %)", "floors"), ("strict priority (floor 0)", "strict")):
            r = f[key]
            b = r["beside"]
            rows.append(f"| {label} | {_ms(r['alone']['p99_us'])} | {_ms(b['p99_us'])} | {b['errors']} | "
                        f"{b['timeouts']} | {b['overloaded']} |")
        rows.append("")
    lg = result.get("langid")
    if lg:
        t = lg["throughput"]
        rows += ["**examples/langid behind batchd-http** (64 connections, closed loop): default flags "
                 f"{t['default']['rps']:.0f}/s and {t['default_again']['rps']:.0f}/s, `--fair-slice-us 0` "
                 f"{t['fair_slice_off']['rps']:.0f}/s: **{lg['default_over_off']:.2f}** of it (bar 0.95)."]
        for label, name in (("default flags", "default"), ("`--fair-slice-us 0`", "fair_slice_off")):
            st = lg.get("second_tenant", {}).get(name)
            if st:
                rows.append(f"At 2,000/s ({label}), its p99 alone {_ms(st['alone']['p99_us'])} ms, beside a second "
                            f"tenant's flood over shared memory ({st['flood_rps']:.0f}/s) "
                            f"{_ms(st['beside']['p99_us'])} ms: **{st['p99_ratio']:.2f}x** (bar 2x), errors "
                            f"{st['beside']['errors']}.")
    tf = result.get("tenant_flood")
    if tf:
        rows += ["", "**A request arriving while another tenant's batches hold the lanes** (cpu backend; another "
                 "user's open-loop flood of 64 KiB inputs, its load tool at `nice 19`; a light client at 200/s):", "",
                 "| | light p99 alone ms | light p50 beside ms | light p99 beside ms | errors |",
                 "|---|---:|---:|---:|---:|"]
        for label, key in (("fairness cut (default)", "cut"), ("cut off (`--fair-slice-us 0`)", "cut_off")):
            r = tf[key]
            rows.append(f"| {label} | {_ms(r['alone']['p99_us'])} | {_ms(r['beside']['p50_us'])} | "
                        f"{_ms(r['beside']['p99_us'])} | {r['beside']['errors']} |")
    return "\n".join(rows)
