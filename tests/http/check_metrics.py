#!/usr/bin/env python3
"""Both Prometheus endpoints under load: batchd-http's /metrics and the daemon's --metrics-listen.

Starts batchd (sim backend, two devices) and batchd-http, sends requests over shared memory and
over HTTP in every priority class, then checks that
- `promtool check metrics` accepts each scrape;
- the latency histograms exist, are cumulative, and count exactly the requests answered (by class)
  and the batches run (by device);
- the daemon's series read the same through either endpoint;
- the listener answers 404 and 405 where it should;
- each model's series in Triton's names (nv_inference_*) count its requests, batches and times,
  and its devices' series (labelled by model) its batches, and PromQL in those names (queue time per request, pending requests) evaluates per model
  (`promtool test rules` over two scrapes of the running daemon);
- deploy/prometheus/prometheus.yml passes `promtool check config`;
- deploy/grafana/batchd.json has a dashboard's fields, and every metric its queries name is one
  these endpoints really emit.
Standard library only; the binaries and files come from meson (tests/http/meson.build).
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BATCHD = os.environ["BATCHD_BIN"]
HTTP = os.environ["BATCHD_HTTP_BIN"]
STRESS = os.environ["BATCHD_STRESS_BIN"]
PROMTOOL = os.environ["BATCHD_PROMTOOL"]
PROMETHEUS_YML = os.environ["BATCHD_PROMETHEUS_YML"]
DASHBOARD = os.environ["BATCHD_GRAFANA_DASHBOARD"]
SCALE = float(os.environ.get("BATCHD_TEST_SCALE", "1"))
REQUESTS = max(100, int(300 * SCALE))  # per transport
CLASSES = ("high", "normal", "low")


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, method="GET"):
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_until(what, check, seconds=20):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    fail(f"{what} within {seconds} s")


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$')


def parse(text):
    """{(name, frozenset(labels)): value} for every sample line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            fail(f"unparsable sample line: {line!r}")
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    if key not in samples:
        fail(f"no sample {name}{labels}")
    return samples[key]


def histogram(samples, name, summed=True, **labels):
    """(cumulative buckets by le, count, sum or None where not `summed`); checks the buckets never
    decrease and +Inf == count."""
    buckets = []
    for (n, ls), v in samples.items():
        d = dict(ls)
        if n == name + "_bucket" and all(d.get(k) == v2 for k, v2 in labels.items()):
            buckets.append((float(d["le"]), v))
    if len(buckets) < 10:
        fail(f"{name}{labels}: {len(buckets)} buckets")
    buckets.sort()
    counts = [v for _, v in buckets]
    if counts != sorted(counts):
        fail(f"{name}{labels}: buckets decrease: {buckets}")
    count = value(samples, name + "_count", **labels)
    if buckets[-1] != (float("inf"), count):
        fail(f"{name}{labels}: +Inf bucket {buckets[-1]} is not the count {count}")
    return buckets, count, value(samples, name + "_sum", **labels) if summed else None


def promtool(*args, stdin=None):
    done = subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"promtool {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


SECOND = "second"  # a second model, on one simulated device of its own, version 7
MODELS = ({"model": "batchstring", "version": "1"}, {"model": SECOND, "version": "7"})


def check_models(samples, answered, second_answered):
    """Triton's per-model series: each model's successes are its answers, every request one
    inference, its executions the batches it ran, its durations within what they measure."""
    for model, version, count in (("batchstring", "1", answered), (SECOND, "7", second_answered)):
        labels = {"model": model, "version": version}
        if value(samples, "nv_inference_request_success", **labels) != count:
            fail(f"{model}: nv_inference_request_success is not its {count} answers")
        if value(samples, "nv_inference_request_failure", **labels) != 0:
            fail(f"{model}: failures counted where none failed")
        if value(samples, "nv_inference_count", **labels) != count:
            fail(f"{model}: nv_inference_count is not its {count} requests")
        executions = value(samples, "nv_inference_exec_count", **labels)
        if not 0 < executions <= count:
            fail(f"{model}: {executions} executions for {count} requests")
        queue = value(samples, "nv_inference_queue_duration_us", **labels)
        compute = value(samples, "nv_inference_compute_infer_duration_us", **labels)
        request = value(samples, "nv_inference_request_duration_us", **labels)
        # Every batch costs the sim at least its fixed 100 or 200 us, each request in it that long.
        if compute < 90 * count or not queue > 0 or abs(request - (queue + compute)) > 2:
            fail(f"{model}: durations queue {queue}, compute {compute}, request {request} us for {count}")
        if value(samples, "nv_inference_pending_request_count", **labels) != 0:
            fail(f"{model}: requests pending with nothing sent")
        if value(samples, "batchd_model_state", backend="sim", state="ready", **labels) != 1:
            fail(f"{model}: not ready")
        # Each model's devices, under its labels: their batches are its executions.
        devices = ("0", "1") if model == "batchstring" else ("0",)
        if value(samples, "batchd_model_healthy_devices", **labels) != len(devices):
            fail(f"{model}: not {len(devices)} healthy devices")
        ran = sum(value(samples, "batchd_daemon_device_batches_total", device=d, result="ok", **labels)
                  for d in devices)
        if ran != executions:
            fail(f"{model}: its devices ran {ran} batches, it counts {executions} executions")
        if value(samples, "batchd_daemon_device_state", device=devices[0], state="healthy", **labels) != 1:
            fail(f"{model}: device 0 not healthy")
        # Its own batches (a batch is one model's): as many by size as it ran, and flushed as many
        # times (every batch ran; by why, none "stopping").
        _, sized, _ = histogram(samples, "batchd_model_batch_size", summed=False, **labels)
        if sized != executions:
            fail(f"{model}: batchd_model_batch_size counts {sized} batches, it ran {executions}")
        flushed = {dict(ls)["reason"]: v for (n, ls), v in samples.items()
                   if n == "batchd_model_flushes_total" and all(dict(ls).get(k) == w for k, w in labels.items())}
        if sum(flushed.values()) != executions or flushed.get("stopping", 0) != 0:
            fail(f"{model}: flushes {flushed} for {executions} batches")
    # The daemon-wide counts are every model's together.
    if value(samples, "batchd_daemon_batch_size_count") < value(samples, "batchd_model_batch_size_count",
                                                                 model=SECOND, version="7") + 1:
        fail("batchd_daemon_batch_size counts fewer batches than the second model's and one more")
    # The default model's executions are the batches its devices ran (the page's devices are its).
    ran = sum(value(samples, "batchd_batch_compute_seconds_count", model="batchstring", version="1", device=d)
              for d in ("0", "1"))
    if value(samples, "nv_inference_exec_count", model="batchstring", version="1") != ran:
        fail(f"batchstring: executions differ from the {ran} batch compute times of its devices")


def check_promql(before, after, minute_apart_dir):
    """Two scrapes a minute apart in promtool's clock: the queue time per request over that minute
    and the requests pending, per model, in Triton's names, evaluate as the scrapes say."""
    triton = ("nv_inference_queue_duration_us", "nv_inference_request_success",
              "nv_inference_pending_request_count")
    series = []
    for (name, labels), v in sorted(after.items()):
        if name not in triton:
            continue
        text = ",".join(f'{k}="{val}"' for k, val in sorted(labels))
        series.append({"series": f"{name}{{{text}}}", "values": f"{int(before[(name, labels)])} {int(v)}"})
    expected_queue, expected_pending = [], []
    for model, version in (("batchstring", "1"), (SECOND, "7")):
        key = lambda name: (name, frozenset({("model", model), ("version", version)}))
        served = after[key("nv_inference_request_success")] - before[key("nv_inference_request_success")]
        queued = after[key("nv_inference_queue_duration_us")] - before[key("nv_inference_queue_duration_us")]
        if served <= 0:
            fail(f"{model}: no requests between the two scrapes")
        expected_queue.append({"labels": f'{{model="{model}"}}', "value": queued / served})
        expected_pending.append({"labels": f'{{model="{model}"}}',
                                 "value": after[key("nv_inference_pending_request_count")]})
    # The difference over the minute, as increase() gives it without its extrapolation: exact.
    per_request = ("sum by (model) (nv_inference_queue_duration_us - nv_inference_queue_duration_us offset 1m)"
                   " / sum by (model) (nv_inference_request_success - nv_inference_request_success offset 1m)")
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": per_request, "eval_time": "1m", "exp_samples": expected_queue},
            {"expr": "sum by (model) (nv_inference_pending_request_count)", "eval_time": "1m",
             "exp_samples": expected_pending}]}]}
    path = os.path.join(minute_apart_dir, "triton_promql_test.yml")
    with open(path, "w") as f:
        json.dump(tests, f)  # JSON is YAML
    promtool("test", "rules", path)
    return {e["labels"]: e["value"] for e in expected_queue}


def check_scrape(text):
    """promtool check metrics passes the whole scrape but for its naming lints on Triton's
    nv_inference_* names (no _total on counters, "_us"), which those names break by design: its
    exit status 3 is lint findings alone, parsed; and without those families it finds nothing."""
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
    findings = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode not in (0, 3) or any(not line.startswith("nv_inference_") for line in findings):
        fail(f"promtool check metrics exited {done.returncode}:\n{done.stdout}{done.stderr}")
    ours = "\n".join(line for line in text.splitlines()
                     if not re.match(r"^(# (HELP|TYPE) )?nv_inference_", line)) + "\n"
    promtool("check", "metrics", stdin=ours)


def stress(args):
    done = subprocess.run([STRESS, *args, "--expect-sim", "1", "--json", "--quiet"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        fail(f"batchd-stress {args} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    if summary["ok"] != summary["sent"] or summary["wrong"] != 0:
        fail(f"batchd-stress {args}: {summary}")
    return summary["ok"]


def check_dashboard(emitted):
    with open(DASHBOARD) as f:
        board = json.load(f)
    for field, kind in (("title", str), ("uid", str), ("schemaVersion", int), ("panels", list)):
        if not isinstance(board.get(field), kind):
            fail(f"dashboard: top-level {field} missing or not a {kind.__name__}")
    if not board["panels"]:
        fail("dashboard: no panels")
    names = set()
    for panel in board["panels"]:
        title = panel.get("title")
        if not isinstance(title, str) or not title:
            fail(f"dashboard: a panel without a title: {panel}")
        if not isinstance(panel.get("type"), str):
            fail(f"dashboard panel {title!r}: no type")
        grid = panel.get("gridPos")
        if not isinstance(grid, dict) or not all(isinstance(grid.get(k), int) for k in "hwxy"):
            fail(f"dashboard panel {title!r}: gridPos needs integer h, w, x, y")
        targets = panel.get("targets")
        if not isinstance(targets, list) or not targets:
            fail(f"dashboard panel {title!r}: no targets")
        for target in targets:
            expr = target.get("expr")
            if not isinstance(expr, str) or not expr:
                fail(f"dashboard panel {title!r}: a target without expr")
            found = re.findall(r"\b((?:batchd|nv_inference)_[a-z0-9_]+)\b", expr)
            if not found:
                fail(f"dashboard panel {title!r}: {expr!r} names no batchd metric")
            for name in found:
                if name not in emitted:
                    fail(f"dashboard panel {title!r}: {name} is not emitted by either endpoint")
                names.add(name)
    # The model variable lists the models from a series the endpoints emit, and panels use it.
    variables = {v.get("name"): v for v in board.get("templating", {}).get("list", [])}
    model = variables.get("model")
    if model is None or not model.get("includeAll"):
        fail("dashboard: no model variable (with All)")
    for name in re.findall(r"\b(batchd_[a-z0-9_]+)\b", json.dumps(model.get("query"))):
        if name not in emitted:
            fail(f"dashboard: the model variable's {name} is not emitted by either endpoint")
    if not any('model=~"$model"' in target["expr"] for panel in board["panels"] for target in panel["targets"]):
        fail("dashboard: no panel selects by the model variable")
    for needed in ("batchd_request_queue_seconds_bucket", "batchd_batch_compute_seconds_bucket",
                   "nv_inference_queue_duration_us", "nv_inference_pending_request_count"):
        if needed not in names:
            fail(f"dashboard: no panel uses {needed}")
    return len(board["panels"]), len(names)


def main():
    if not os.path.isfile(PROMTOOL):
        fail("promtool is not installed (scripts/setup.sh installs Debian's prometheus, which ships it)")
    tmp = tempfile.mkdtemp(prefix="batchd-metrics-")
    sock = os.path.join(tmp, "d.sock")
    metrics_port = free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(
            [BATCHD, "--socket", sock, "--backend", "sim", "--sim-devices", "2", "--sim-fixed-us", "200",
             "--sim-per-item-us", "5", "--metrics-listen", f"127.0.0.1:{metrics_port}", "--log-level", "warn",
             "--model", f"{SECOND}:backend=sim,sim_devices=1,sim_fixed_us=100,version=7"]))
        daemon_url = f"http://127.0.0.1:{metrics_port}"
        wait_until("the daemon's metrics listener answers", lambda: get(daemon_url + "/metrics")[0] == 200)
        port_file = os.path.join(tmp, "port")
        procs.append(subprocess.Popen(
            [HTTP, "--socket", sock, "--listen", "127.0.0.1:0", "--port-file", port_file, "--workers", "1",
             "--log-level", "warn"]))
        wait_until("batchd-http writes its port", lambda: os.path.getsize(port_file) > 0)
        http_url = f"http://127.0.0.1:{open(port_file).read().strip()}"
        wait_until("batchd-http is ready", lambda: get(http_url + "/readyz")[0] == 200)

        mix = ["--priority-mix", "high:20,normal:50,low:30"]
        answered = stress(["--socket", sock, "--threads", "4", "--requests", str(REQUESTS), *mix])
        answered += stress(["--http", http_url, "--threads", "4", "--requests", str(REQUESTS), *mix])
        second_answered = stress(["--socket", sock, "--threads", "2", "--requests", str(REQUESTS // 2),
                                  "--model", SECOND])
        all_answered = answered + second_answered

        def queue_count(samples):
            return sum(value(samples, "batchd_request_queue_seconds_count", **{"class": c}, **labels)
                       for c in CLASSES for labels in MODELS)
        # The daemon publishes every few tens of milliseconds, and counts a request answered just
        # after its batch's queue times: wait for a publication that has both for the last answers.
        def settled(samples, answered_now):
            return (queue_count(samples) == answered_now and
                    value(samples, "batchd_daemon_requests_total", result="ok") == answered_now)
        wait_until("the histograms and the ok counter count every answered request",
                   lambda: settled(parse(get(daemon_url + "/metrics")[1]), all_answered))

        status, daemon_text = get(daemon_url + "/metrics")
        if status != 200:
            fail(f"daemon /metrics answered {status}")
        status, http_text = get(http_url + "/metrics")
        if status != 200:
            fail(f"batchd-http /metrics answered {status}")
        for label, text in (("daemon", daemon_text), ("batchd-http", http_text)):
            check_scrape(text)
            print(f"promtool check metrics ({label}): ok, {len(text.splitlines())} lines")

        daemon, front = parse(daemon_text), parse(http_text)
        for samples in (daemon, front):
            if queue_count(samples) != all_answered:
                fail(f"queue-time histograms count {queue_count(samples)} requests, {all_answered} were answered")
            if value(samples, "batchd_daemon_requests_total", result="ok") != all_answered:
                fail("the daemon's ok counter disagrees with the answers")
            # By model and class: each class's over the models are the requests taken in it, each
            # model's over the classes its inferences, their sum its queue time.
            by_model = {(labels["model"], c): histogram(samples, "batchd_request_queue_seconds", **{"class": c}, **labels)
                        for labels in MODELS for c in CLASSES}
            for c in CLASSES:
                count = sum(by_model[(labels["model"], c)][1] for labels in MODELS)
                total = sum(by_model[(labels["model"], c)][2] for labels in MODELS)
                taken = value(samples, "batchd_daemon_class_requests_taken_total", **{"class": c})
                if count != taken or count == 0:
                    fail(f"class {c}: {count} queue times for {taken} requests taken")
                if not total > 0:
                    fail(f"class {c}: queue time sum {total}")
            for labels in MODELS:
                count = sum(by_model[(labels["model"], c)][1] for c in CLASSES)
                total_us = sum(by_model[(labels["model"], c)][2] for c in CLASSES) * 1e6
                if count != value(samples, "nv_inference_count", **labels):
                    fail(f"{labels['model']}: {count} queue times, not its nv_inference_count")
                if abs(total_us - value(samples, "nv_inference_queue_duration_us", **labels)) > 2 + total_us * 1e-6:
                    fail(f"{labels['model']}: queue times sum to {total_us} us, not its nv_inference_queue_duration_us")
            batches = 0
            for d in ("0", "1"):
                default = {"model": "batchstring", "version": "1", "device": d}
                _, count, total = histogram(samples, "batchd_batch_compute_seconds", **default)
                ran = value(samples, "batchd_daemon_device_batches_total", result="ok", **default)
                if count != ran:
                    fail(f"device {d}: {count} compute times for {ran} batches")
                # The sim's cost model makes every batch take at least its 200 us fixed cost.
                if count and total / count < 150e-6:
                    fail(f"device {d}: mean compute time {total / count:.6f} s under the sim's cost")
                batches += count
            if batches == 0:
                fail("no batch compute time recorded")
            check_models(samples, answered, second_answered)
        histogram_lines = lambda text: [l for l in text.splitlines()
                                        if l.startswith(("batchd_request_queue", "batchd_batch_compute"))]
        if histogram_lines(daemon_text) != histogram_lines(http_text):
            fail("the daemon's histograms read differently through the two endpoints")
        print(f"histograms: {answered} requests answered, "
              f"{int(sum(value(daemon, 'batchd_batch_compute_seconds_count', model='batchstring', version='1', device=d) for d in '01'))} "
              f"batches; both endpoints agree")

        # More of both models' requests between two scrapes: PromQL in Triton's names over them.
        more = stress(["--socket", sock, "--threads", "2", "--requests", str(REQUESTS // 2)])
        more += stress(["--socket", sock, "--threads", "2", "--requests", str(REQUESTS // 2), "--model", SECOND])
        wait_until("the histograms and the ok counter count the second round",
                   lambda: settled(parse(get(daemon_url + "/metrics")[1]), all_answered + more))
        later = parse(get(daemon_url + "/metrics")[1])
        per_request = check_promql(daemon, later, tmp)
        print(f"PromQL in Triton's names per model: queue time per request (us) {per_request}, none pending")

        for method, path, want in (("GET", "/nowhere", 404), ("POST", "/metrics", 405), ("HEAD", "/metrics", 200)):
            got, _ = get(daemon_url + path, method)
            if got != want:
                fail(f"daemon listener: {method} {path} answered {got}, not {want}")

        print(promtool("check", "config", PROMETHEUS_YML).strip())
        # The jobs queue's depth is sampled by batchd-http's jobs consumer once it has attached to
        # the daemon (about once a second): its series appear then.
        wait_until("batchd-http's jobs consumer sampled the queue",
                   lambda: any(name == "batchd_http_jobs_queue_entries" for name, _ in parse(get(http_url + "/metrics")[1])))
        front = parse(get(http_url + "/metrics")[1])
        emitted = {name for name, _ in daemon} | {name for name, _ in front}
        panels, names = check_dashboard(emitted)
        print(f"dashboard: {panels} panels, {names} metrics, all emitted")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("metrics: ok")


if __name__ == "__main__":
    main()
