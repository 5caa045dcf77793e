"""docs/BENCHMARKS.md's section 5f: many models in one daemon (bench/models.py: isolation between
two models, and the cost of eight) and the A/B of one model against the commit before models
(bench/fastpath_ab.py)."""


def _ms(us) -> str:
    return "n/a" if us is None else f"{us / 1000:.2f}"


def _isolation_rows(result) -> list[str]:
    rows = ["| backend | B's p99 alone ms | beside A's flood ms | ratio (bar 2) | B's errors / timeouts beside | "
            "A's flood: sent, refused overloaded | A answered/s alone, beside B |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, key in (("sim (2 devices, both models on them)", "isolate_sim"), ("cpu (1 thread per model)", "isolate_cpu")):
        r = result.get(key)
        if not r:
            continue
        beside = r["b_beside_flood"]
        a_rates = (f"{r['a_answered_per_s_alone']:,.0f}, {r['a_answered_per_s_beside']:,.0f}"
                   if "a_answered_per_s_alone" in r else "n/a")
        rows.append(f"| {label} | {_ms(r['b_alone']['p99_us'])} | {_ms(beside['p99_us'])} | "
                    f"**{r['p99_ratio']:.2f}** | {beside['errors']} / {beside['errors_by_kind']['timeout']} | "
                    f"{r['flood']['sent']:,}, {r['flood']['errors_by_kind']['overloaded']:,} | {a_rates} |")
    return rows


def models_section(result, fastpath) -> str:
    if not result and not fastpath:
        return "_Not measured yet: run `bench/run-all.sh models report`._"
    rows = []
    if result:
        rows += ["**Isolation**: model A flooded (open loop, every slot of its client in flight) beside a "
                 "light client of model B at 200 requests/s, against B alone in the same run.", ""]
        rows += _isolation_rows(result)
        many = result.get("many")
        if many:
            held = many["held"]
            rows += ["", f"**The cost of many models**: the highest shared-memory open-loop rate held (0 errors), "
                         f"one cpu model against eight at an eighth of the load each, {len(held['one'])} turns of "
                         f"{many['step_s']:g} s per rung: one {', '.join(f'{x:,}' for x in held['one'])}/s, eight "
                         f"{', '.join(f'{x:,}' for x in held['eight'])}/s; medians' ratio "
                         f"**{many['eight_over_one']:.2f}** (the issue's bar: 0.9)."]
    if fastpath:
        ratio = fastpath["new_over_base"]
        rows += ["", f"**One model, against the commit before models** ({len(fastpath['turns']['new'])} turns each, "
                     f"medians): open-loop rate held {ratio['openloop_held']:.3f}, one caller's p50 "
                     f"{ratio['one_caller_p50_us']:.3f}, `/v1` under wrk {ratio['http_v1_rps']:.3f} (new / base)."]
    return "\n".join(rows)
