"""The images `make images` builds start what they are for, as the non-root user they declare:
the operator's entry point, the benchmark runner and the Job's wrapper, the scale-to-zero
holder, the pause binary and (when built) vLLM's OpenAI server. Needs root and buildah
(scripts/install-node-deps.sh); skipped elsewhere. Builds what is missing except the vLLM
image (cached by content: seconds when warm; a cold base takes about 3 minutes)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import setup_missing, wait_for

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build-images.sh"
CACHE = Path(
    os.environ.get("VLLM_OPERATOR_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm-operator"
)
NON_ROOT = "65532"

pytestmark = [
    pytest.mark.images,
    pytest.mark.skipif(os.geteuid() != 0, reason="buildah's storage and debootstrap need root"),
]


@pytest.fixture(autouse=True)
def _buildah_installed() -> None:
    if shutil.which("buildah") is None:
        setup_missing("buildah is not installed (scripts/install-node-deps.sh)")


def buildah(*args: str, timeout: float = 300) -> str:
    """buildah on the storage scripts/build-images.sh builds into."""
    res = subprocess.run(
        [str(SCRIPT), "--buildah", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, f"buildah {' '.join(args)}: {res.stderr}"
    return res.stdout


@pytest.fixture(scope="module")
def built() -> dict[str, dict[str, object]]:
    """index.json after an incremental build of every image but the large vLLM one."""
    subprocess.run([str(SCRIPT), "--no-vllm-cpu"], check=True, timeout=1800)
    index: dict[str, dict[str, object]] = json.loads((CACHE / "images" / "index.json").read_text())[
        "images"
    ]
    return index


class Container:
    def __init__(self, ref: str) -> None:
        self.id = buildah("from", "--pull=false", "--quiet", ref).strip()

    def run(self, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), "--buildah", "run", "--network", "none", self.id, "--", *cmd],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def remove(self) -> None:
        buildah("rm", self.id)


def container(ref: str) -> Iterator[Container]:
    c = Container(ref)
    try:
        yield c
    finally:
        c.remove()


@pytest.fixture
def operator_image(built: dict[str, dict[str, object]]) -> Iterator[Container]:
    yield from container("localhost/vllm-operator:dev")


@pytest.fixture
def bench_image(built: dict[str, dict[str, object]]) -> Iterator[Container]:
    yield from container("localhost/vllm-bench:dev")


def test_index_lists_each_build_with_its_key(built: dict[str, dict[str, object]]) -> None:
    # the key the build computed (not recomputed here: others may edit the tree meanwhile)
    # names the archive and labels the image in buildah's storage
    for ref, name in [
        ("localhost/pause:local", "pause"),
        ("localhost/vllm-operator:dev", "operator"),
        ("localhost/vllm-bench:dev", "benchmark"),
        ("localhost/vllm-holder:dev", "holder"),
    ]:
        entry = built[ref]
        archive = Path(str(entry["archive"]))
        assert archive.name == f"{name}-{entry['key']}.oci.tar"
        assert archive.stat().st_size == entry["archiveBytes"]
        label = buildah(
            "inspect",
            "--type",
            "image",
            "--format",
            '{{index .OCIv1.Config.Labels "vllm-operator.key"}}',
            ref,
        )
        assert label.strip() == entry["key"]


def test_operator_image_has_its_entry_point(operator_image: Container) -> None:
    res = operator_image.run(
        "sh",
        "-c",
        "id -u; command -v vllm-operator; python3 -c 'import vllm_operator.runtime.main'",
    )
    assert res.returncode == 0, res.stderr
    uid, entry = res.stdout.split()
    assert (uid, entry) == (NON_ROOT, "/opt/venv/bin/vllm-operator")


def test_operator_image_holds_the_operator_only(operator_image: Container) -> None:
    """The local-cluster harness (root: iptables, PKI) and the benchmark runner are not in the
    operator's image: neither their packages nor their commands."""
    probe = (
        "import importlib.util as u; "
        "print(*[m for m in ('vllm_operator', 'vllm_localenv', 'vllm_bench', 'vllm_benchjob')"
        " if u.find_spec(m)])"
    )
    res = operator_image.run("python3", "-c", probe)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["vllm_operator"]  # the positive control: it is found
    res = operator_image.run("sh", "-c", "ls /opt/venv/bin | grep -c '^vllm-' ; ls /opt/venv/bin")
    assert res.stdout.split()[0] == "1", res.stdout  # vllm-operator alone


def test_benchmark_image_runs_the_runner_and_the_job_wrapper(bench_image: Container) -> None:
    res = bench_image.run("vllm-bench", "run", "--help")
    assert res.returncode == 0, res.stderr
    assert "--scenarios" in res.stdout
    # the operator's Job runs `python -m vllm_benchjob ...` in /results; without arguments
    # the wrapper prints its usage
    res = bench_image.run("python", "-m", "vllm_benchjob")
    assert "usage: python -m vllm_benchjob --configmap NAME" in res.stderr
    res = bench_image.run("sh", "-c", "id -u && touch /results/probe && pwd")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [NON_ROOT, "/results"]


@pytest.fixture
def holder_image(built: dict[str, dict[str, object]]) -> Iterator[Container]:
    yield from container("localhost/vllm-holder:dev")


def test_holder_image_runs_the_holder_alone(holder_image: Container) -> None:
    """`python -m vllm_holder` (the entry point) as the non-root user, with aiohttp and
    prometheus_client and nothing of the operator, the runner or the harness."""
    res = holder_image.run("python", "-m", "vllm_holder", "--help")
    assert res.returncode == 0, res.stderr
    assert "--config" in res.stdout
    assert "--grace-seconds" in res.stdout
    probe = (
        "import importlib.util as u; "
        "print(*[m for m in ('vllm_holder', 'aiohttp', 'prometheus_client', 'vllm_operator',"
        " 'kopf', 'kubernetes', 'vllm_bench', 'vllm_localenv') if u.find_spec(m)])"
    )
    res = holder_image.run("python3", "-c", probe)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["vllm_holder", "aiohttp", "prometheus_client"]
    assert holder_image.run("id", "-u").stdout.strip() == NON_ROOT
    config = json.loads(buildah("inspect", "--type", "image", "localhost/vllm-holder:dev"))
    assert config["OCIv1"]["config"]["Entrypoint"] == ["python", "-m", "vllm_holder"]


def test_pause_image_blocks_until_sigterm(built: dict[str, dict[str, object]]) -> None:
    c = Container("localhost/pause:local")
    try:
        root = Path(buildah("mount", c.id).strip())
        config = json.loads(buildah("inspect", "--type", "container", c.id))
        assert config["OCIv1"]["config"]["Entrypoint"] == ["/pause"]
        # the static binary runs anywhere, so run it here and signal it as the runtime would
        proc = subprocess.Popen([str(root / "pause")])
        command = f"{root / 'pause'}\0"  # its argv once exec'd (the forked child's is Python's)

        def blocked() -> bool:
            """The binary runs (exec'd) and sleeps, or it is gone (the assertion says so)."""
            try:
                cmdline = Path(f"/proc/{proc.pid}/cmdline").read_text()
                stat = Path(f"/proc/{proc.pid}/stat").read_text()
            except OSError:
                return True
            state = stat.rsplit(")", 1)[1].split()[0]
            return state == "Z" or (cmdline == command and state == "S")

        try:
            # the positive control: the pause binary itself is running and blocked, not the
            # moment before its exec
            wait_for("pause to block", blocked, timeout=60, every=0.1)
            assert proc.poll() is None, "pause exited on its own"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        finally:
            proc.kill()
            proc.wait()
        buildah("umount", c.id)
    finally:
        c.remove()


@pytest.fixture
def vllm_image() -> Iterator[Container]:
    ref = "localhost/vllm-cpu:" + _version("VLLM_CPU_VERSION")
    missing = subprocess.run(
        [str(SCRIPT), "--buildah", "inspect", "--type", "image", ref],
        check=False,
        capture_output=True,
    ).returncode
    if missing:
        setup_missing(f"{ref} is not built (`make images` builds it; about 10 minutes)")
    yield from container(ref)


def test_vllm_cpu_image_serves_the_command_the_operator_renders(vllm_image: Container) -> None:
    # render/deployment.py: command ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    res = vllm_image.run(
        "python3", "-m", "vllm.entrypoints.openai.api_server", "--help", timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "--block-size" in res.stdout
    assert vllm_image.run("id", "-u").stdout.strip() == NON_ROOT


def _version(name: str) -> str:
    for line in (REPO / "scripts" / "versions.env").read_text().splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"{name} is not in scripts/versions.env")
