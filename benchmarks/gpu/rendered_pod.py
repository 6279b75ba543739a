"""The operator's rendered vLLM container, run as rendered on the GPU host (issue 19, item 1).

Two halves:

  here (the operator's venv):  rendered_pod.py render OUT.json
      renders every sample in crds/samples/ with the operator's own renderer and writes, per
      sample, the container's command, args, env, the pod's uid/gid and the volume mounts.
  on the GPU host (its Python with vLLM):  rendered_pod.py parse RENDERED.json ANSWER.json
      reads every sample's args with the installed vLLM's own parser
      (localenv/vllm_localenv/parse_vllm_args.py); and
  rendered_pod.py start RENDERED.json SAMPLE MODEL_DIR OUT.json
      starts that sample's container as rendered: its command, its args (only --model
      replaced by the local directory, mounted read-only at /models/SAMPLE: the host has no
      hub), exactly its environment (nothing inherited but PATH), as the pod's uid and gid with
      no passwd entry, with HOME and each emptyDir mount a fresh folder bind-mounted at the
      rendered path in a private mount namespace;
      then times the start to /health, sends one completion, and stops it. `--without VAR`
      (repeatable) drops a variable of the rendered env: the control that shows what it is for.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PORT = 8000  # the rendered --port


def render(out: Path) -> None:
    sys.path.insert(0, str(REPO / "operator"))
    import yaml  # noqa: PLC0415 - only the render half needs the operator's packages

    from vllm_operator.api.settings import OperatorSettings  # noqa: PLC0415
    from vllm_operator.api.spec import Service  # noqa: PLC0415
    from vllm_operator.render.deployment import render_deployment  # noqa: PLC0415

    samples: dict[str, Any] = {}
    for path in sorted((REPO / "crds" / "samples").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        body["metadata"].update(namespace="default", uid="0", generation=1)
        deployment = render_deployment(Service.from_body(body), OperatorSettings())
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        samples[path.stem] = {
            "image": container["image"],
            "command": container.get("command", []),
            "args": container.get("args", []),
            "env": [e for e in container.get("env", []) if "value" in e],
            "envFrom": [e["name"] for e in container.get("env", []) if "valueFrom" in e],
            "uid": pod["securityContext"]["runAsUser"],
            "gid": pod["securityContext"].get("runAsGroup", pod["securityContext"]["runAsUser"]),
            "emptyDirs": [
                m["mountPath"]
                for m in container.get("volumeMounts", [])
                if "emptyDir" in volumes.get(m["name"], {})
            ],
        }
    out.write_text(json.dumps(samples, indent=1) + "\n")


def parse(rendered: Path, answer: Path) -> None:
    samples = json.loads(rendered.read_text())
    request = {"cases": {name: {"args": s["args"]} for name, s in samples.items()}}
    script = REPO / "localenv" / "vllm_localenv" / "parse_vllm_args.py"
    subprocess.run(
        [sys.executable, str(script), str(answer)],
        input=json.dumps(request),
        text=True,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    doc = json.loads(answer.read_text())
    doc.pop("options", None)
    answer.write_text(json.dumps(doc, indent=1))
    for name, result in doc["results"].items():
        print(f"vllm {doc['vllm']}: {name}: {'accepted' if result['ok'] else result}")


def _health() -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _completion(model: str) -> dict[str, Any]:
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 16}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        answer: dict[str, Any] = json.loads(r.read())
        return answer


def pod_shell(  # noqa: PLR0917 - what a start of the rendered container needs
    s: dict[str, Any],
    sample: str,
    model_dir: str,
    without: list[str],
    scratch: Path | None = None,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The shell command that starts sample `s`'s container as rendered (see `start`), and
    the record of what it runs. `scratch`: where its emptyDirs live (a fresh folder when None;
    an existing one is reused as it is, as a container restarted in the same pod finds its
    emptyDirs); `extra_args`/`extra_env`: added to the rendered args/env (a lab's switch, said
    so in the record)."""
    args = [*s["args"], *extra_args]
    env = {e["name"]: e["value"] for e in s["env"] if e["name"] not in without}
    env.update(extra_env or {})
    # the image's PATH: here, the host's Python with vLLM first (the rendered `python3`)
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
    if scratch is None:
        scratch = Path(tempfile.mkdtemp(prefix="pod-"))
    scratch.mkdir(parents=True, exist_ok=True)
    # the model first (a read-only volume at /models/SAMPLE), then the emptyDirs parents first,
    # as the kubelet mounts them (HOME=/root hides the host's /root, the model is not there)
    mounted_model = f"/models/{sample}"
    args[args.index("--model") + 1] = mounted_model
    # a pod reads its model volume as the pod's user (a PVC through fsGroup); the host's model
    # folder is root's (0700 under /root/gpu-work: the first run on 2026-12-02 failed with
    # FileNotFoundError for model.safetensors), so it is opened to every user, read-only
    binds = [
        f"chmod -R a+rX {shlex.quote(model_dir)}",
        f"mkdir -p {mounted_model} && mount --bind -o ro {shlex.quote(model_dir)} {mounted_model}",
    ]
    for i, path in enumerate(sorted(s["emptyDirs"], key=lambda p: p.count("/"))):
        d = scratch / f"empty{i}"
        if not d.exists():
            d.mkdir()
            os.chown(d, s["uid"], s["gid"])  # fsGroup: the pod's group owns its emptyDirs
        binds.append(f"mkdir -p {shlex.quote(path)} && mount --bind {d} {shlex.quote(path)}")
    scratch.chmod(0o755)
    inner = " && ".join(
        [
            *binds,
            "cd /",
            "exec setpriv --reuid {u} --regid {g} --clear-groups --no-new-privs env -i {env} "
            "{cmd}".format(
                u=s["uid"],
                g=s["gid"],
                env=" ".join(shlex.quote(f"{k}={v}") for k, v in env.items()),
                cmd=shlex.join([*s["command"], *args]),
            ),
        ]
    )
    record: dict[str, Any] = {
        "sample": sample,
        "image": s["image"],
        "command": s["command"],
        "args": args,
        "env": env,
        "without": without,
        "extraArgs": list(extra_args),
        "extraEnv": dict(extra_env or {}),
        "scratch": str(scratch),
        "uid": s["uid"],
        "gid": s["gid"],
        "passwdEntry": subprocess.run(
            ["getent", "passwd", str(s["uid"])], capture_output=True, text=True, check=False
        ).stdout.strip()
        or None,
        "shell": inner,
    }
    shell = shlex.join(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner])
    return shell, record


def start(  # noqa: PLR0917 - the command line's arguments, one to one
    rendered: Path, sample: str, model_dir: str, out: Path, without: list[str], budget: float
) -> None:
    s = json.loads(rendered.read_text())[sample]
    shell, record = pod_shell(s, sample, model_dir, without)
    log_path = out.with_suffix(".log")
    t0 = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            ["sh", "-c", shell],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while not _health():
            if proc.poll() is not None:
                record.update(started=False, exitCode=proc.returncode)
                break
            if time.monotonic() - t0 > budget:
                record.update(started=False, timedOut=True)
                break
            time.sleep(1)
        else:
            record.update(started=True, startSeconds=round(time.monotonic() - t0, 1))
            reply = _completion(s["args"][s["args"].index("--served-model-name") + 1])
            record["completionTokens"] = reply.get("usage", {}).get("completion_tokens")
    finally:
        record["wallSeconds"] = round(time.monotonic() - t0, 1)
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        lines = log_path.read_text(errors="replace").splitlines()
        record["logTail"] = lines[-25:]
        record["keyErrors"] = [line for line in lines if "getpwuid" in line][:3]
        out.write_text(json.dumps(record, indent=1))
    print(
        f"{sample} without {without or 'nothing'}: started={record['started']} "
        f"start={record.get('startSeconds')}s keyErrors={len(record['keyErrors'])}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("out", type=Path)
    p = sub.add_parser("parse")
    p.add_argument("rendered", type=Path)
    p.add_argument("answer", type=Path)
    s = sub.add_parser("start")
    s.add_argument("rendered", type=Path)
    s.add_argument("sample")
    s.add_argument("model_dir")
    s.add_argument("out", type=Path)
    s.add_argument("--without", action="append", default=[])
    s.add_argument("--budget", type=float, default=420)
    a = parser.parse_args()
    if a.cmd == "render":
        render(a.out)
    elif a.cmd == "parse":
        parse(a.rendered, a.answer)
    else:
        start(a.rendered, a.sample, a.model_dir, a.out, a.without, a.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
