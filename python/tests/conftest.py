"""Fixtures: each test starts its own batchd (BATCHD_BIN, set by meson) on a temporary socket."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest


def sha256_hex(text: str | bytes) -> str:
    """What the cpu backend answers at --cost 1 (backend/reference_batchstring.hpp)."""
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def sim_answer(text: str) -> str:
    """What the sim backend answers at --sim-repeat 1: the code points reversed."""
    return text[::-1]


def perf_analyzer() -> tuple[Path, dict[str, str]]:
    """perf_analyzer (tritonclient 2.41.0's wheel installs it in .venv) and the environment it runs
    in: it links libcudart.so.12 even when it uses no GPU, which nvidia-cuda-runtime-cu12 ships."""
    # Beside the interpreter, not resolved: the venv's python is a link to the system's.
    binary = Path(sys.executable).parent / "perf_analyzer"
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: tritonclient 2.41.0's wheel installs it (scripts/setup_venv.sh)")
    try:
        import nvidia.cuda_runtime  # type: ignore[import-not-found]
    except ImportError as e:
        pytest.fail(f"nvidia-cuda-runtime-cu12 is not installed ({e}): run scripts/setup_venv.sh")
    for base in nvidia.cuda_runtime.__path__:
        lib = Path(base) / "lib"
        if (lib / "libcudart.so.12").is_file():
            env = dict(os.environ)
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), env.get("LD_LIBRARY_PATH")]))
            return binary, env
    pytest.fail(f"no libcudart.so.12 under {list(nvidia.cuda_runtime.__path__)}")


def run_perf_analyzer(args: list[str]) -> str:
    """perf_analyzer with `args`: its report, once checked that it exited 0 and reported no error
    or failure."""
    binary, env = perf_analyzer()
    with tempfile.TemporaryFile() as out:
        run = subprocess.run([str(binary), *args], stdout=out, stderr=subprocess.STDOUT, env=env, timeout=120)
        out.seek(0)
        report = out.read().decode(errors="replace")
    assert run.returncode == 0, report
    assert "error" not in report.lower() and "failed" not in report.lower(), report
    return report


def _accepts(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


@pytest.fixture
def socket_dir() -> Iterator[str]:
    # Short, under /tmp: a unix socket path must fit in 108 bytes, which pytest's tmp_path may not.
    path = tempfile.mkdtemp(prefix="batchd-py-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_daemon(socket_dir: str) -> Iterator[Callable[..., str]]:
    """start_daemon(*flags) starts a batchd and returns its socket; it is stopped after the test
    and must exit cleanly."""
    daemons: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> str:
        path = os.path.join(socket_dir, f"{len(daemons)}.sock")
        binary = os.environ.get("BATCHD_BIN")
        if not binary:
            pytest.fail("BATCHD_BIN is not set (run the tests through meson test)")
        process = subprocess.Popen([binary, "--socket", path, "--log-level", "warn", *flags])
        daemons.append(process)
        deadline = time.monotonic() + 10
        while not _accepts(path):
            if process.poll() is not None:
                pytest.fail(f"batchd {' '.join(flags)} exited with {process.returncode} at start")
            if time.monotonic() > deadline:
                pytest.fail("batchd did not start listening within 10 s")
            time.sleep(0.01)
        return path

    yield start
    for process in daemons:
        process.send_signal(signal.SIGTERM)
    for process in daemons:
        assert process.wait(timeout=20) == 0, f"batchd exited with {process.returncode} on SIGTERM"


@pytest.fixture
def cpu_socket(start_daemon: Callable[..., str]) -> str:
    return start_daemon("--backend", "cpu")


@pytest.fixture
def start_http(socket_dir: str) -> Iterator[Callable[..., str]]:
    """start_http(daemon_socket, *flags) starts batchd-http on a free port, waits for /readyz, and
    returns "127.0.0.1:PORT"; each is stopped after the test and must exit cleanly."""
    fronts: list[subprocess.Popen[bytes]] = []

    def start(daemon_socket: str, *flags: str) -> str:
        binary = os.environ.get("BATCHD_HTTP_BIN")
        if not binary:
            pytest.fail("BATCHD_HTTP_BIN is not set (run the tests through meson test)")
        port_file = os.path.join(socket_dir, f"http{len(fronts)}.port")
        process = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--port-file", port_file,
                                    "--socket", daemon_socket, "--log-level", "warn", *flags])
        fronts.append(process)
        deadline = time.monotonic() + 20
        while True:
            assert process.poll() is None, f"batchd-http exited with {process.returncode} at start"
            assert time.monotonic() < deadline, "batchd-http did not become ready within 20 s"
            try:
                with open(port_file) as f:
                    port = int(f.read().strip())
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as ready:
                    if ready.status == 200:
                        return f"127.0.0.1:{port}"
            except (OSError, ValueError):  # no port file yet, or a half-written one, or not ready
                pass
            time.sleep(0.02)

    yield start
    for process in fronts:
        process.send_signal(signal.SIGTERM)
    for process in fronts:
        assert process.wait(timeout=30) == 0, f"batchd-http exited with {process.returncode} on SIGTERM"


def grpc_ready(address: str) -> bool:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    with grpc.insecure_channel(address) as channel:
        try:
            return service_pb2_grpc.GRPCInferenceServiceStub(channel).ServerReady(
                service_pb2.ServerReadyRequest(), timeout=2).ready
        except grpc.RpcError:  # not listening yet
            return False


@pytest.fixture
def start_grpc(socket_dir: str, start_daemon: Callable[..., str]) -> Iterator[Callable[..., str]]:
    """start_grpc(daemon_socket, *flags, wait_ready=True) starts batchd-grpc on a free port and
    returns "127.0.0.1:PORT" once it listens (and, with wait_ready, once ServerReady says true);
    each is stopped after the test and must exit cleanly. It asks for start_daemon so that the
    front-ends stop before the daemons do."""
    fronts: list[subprocess.Popen[bytes]] = []

    def start(daemon_socket: str, *flags: str, wait_ready: bool = True) -> str:
        binary = os.environ.get("BATCHD_GRPC_BIN")
        if not binary:
            pytest.fail("BATCHD_GRPC_BIN is not set (run the tests through meson test)")
        port_file = os.path.join(socket_dir, f"grpc{len(fronts)}.port")
        process = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--port-file", port_file,
                                    "--socket", daemon_socket, "--log-level", "warn", *flags])
        fronts.append(process)
        deadline = time.monotonic() + 20
        address = None
        while True:
            assert process.poll() is None, f"batchd-grpc exited with {process.returncode} at start"
            assert time.monotonic() < deadline, "batchd-grpc did not become ready within 20 s"
            if address is None and os.path.exists(port_file):
                # Renamed into place whole, so a file that is there holds the whole number.
                with open(port_file) as f:
                    address = f"127.0.0.1:{int(f.read().strip())}"
            if address is not None and (not wait_ready or grpc_ready(address)):
                return address
            time.sleep(0.02)

    yield start
    for process in fronts:
        process.send_signal(signal.SIGTERM)
    for process in fronts:
        assert process.wait(timeout=30) == 0, f"batchd-grpc exited with {process.returncode} on SIGTERM"
