"""Shared helpers for the benchmark scripts: the build to use, starting and stopping the daemon
and reference servers, running batchd-stress and reading its JSON summary, machine facts."""

import json
import os
import platform
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def build_dir() -> Path:
    return Path(os.environ.get("BATCHD_BENCH_BUILD", ROOT / "build-release"))


def binary(relative: str) -> str:
    path = build_dir() / relative
    if not path.exists():
        raise SystemExit(f"bench: {path} is missing; run bench/run-all.sh (it builds the release tree)")
    return str(path)


class Process:
    """A server started for one measurement; stopped with SIGTERM (then SIGKILL) on exit."""

    def __init__(self, args, log_name, env=None):
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{log_name}-", suffix=".log", delete=False)
        self.args = args
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines=15) -> str:
        self.log.flush()
        return "\n".join(Path(self.log.name).read_text(errors="replace").splitlines()[-lines:])

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def wait_for_path(path: Path, proc: Process, what: str, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return
        if not proc.alive():
            break
        time.sleep(0.02)
    raise SystemExit(f"bench: {what} did not come up; its log:\n{proc.log_tail()}")


def held(run: dict) -> bool:
    """An open-loop rate held: every request sent was answered, right (batchd-stress's summary)."""
    return run["sent"] > 0 and run["errors"] == 0 and run["wrong"] == 0 and run["ok"] == run["sent"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(workdir: Path, *flags) -> tuple[Process, Path]:
    """batchd in the release build, on its own socket under workdir, with the given flags."""
    sock = workdir / "batchd.sock"
    if sock.exists():
        sock.unlink()
    proc = Process([binary("daemon/batchd"), "--socket", str(sock), "--log-level", "warn", *flags], "batchd")
    wait_for_path(sock, proc, "batchd")
    return proc, sock


def last_json_line(text: str, what: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"bench: {what} printed no JSON summary:\n{text[-2000:]}")


def run_stress(sock: Path, *flags, timeout_s=600) -> dict:
    """batchd-stress over shared memory; its --json summary as a dict."""
    args = [binary("tools/batchd-stress"), "--socket", str(sock), "--json", "--quiet", *flags]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    return last_json_line(done.stdout + "\n" + done.stderr, "batchd-stress " + " ".join(flags))



def open_loop_step(sock: Path, rate: int, duration_s: float, *flags) -> dict:
    """One open-loop rate over shared memory (1 s of warm-up, 0.5 s of cool-down, inputs of 16 to
    256 bytes): batchd-stress's summary, marked held or not."""
    run = run_stress(sock, "--rate", str(rate), "--duration", str(duration_s), "--warmup", "1", "--cooldown", "0.5",
                     "--input-bytes", "16:256", *flags, timeout_s=duration_s + 120)
    run["held"] = held(run)
    return run

def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def write_result(name: str, data: dict):
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"machine": machine(), **data}
    (RESULTS / name).write_text(json.dumps(data, indent=1) + "\n")
    print(f"bench: wrote {RESULTS / name}")
