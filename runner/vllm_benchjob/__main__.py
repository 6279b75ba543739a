"""`python -m vllm_benchjob --configmap NAME --revision REV -- run --url ... --out DIR`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from kubernetes import client, config

from vllm_bench.cli import main as bench_main

log = logging.getLogger("vllm_benchjob")
# a ConfigMap holds at most 1 MiB; keep room for the other keys
MAX_RESULT_BYTES = 900_000
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _namespace(given: str | None) -> str:
    if given:
        return given
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    if SA_NAMESPACE.exists():
        return SA_NAMESPACE.read_text().strip()
    raise SystemExit("vllm_benchjob: no namespace (set --namespace or POD_NAMESPACE)")


def _out_dir(runner_args: list[str]) -> Path:
    """The last --out, the one the runner's argparse keeps (the operator's, placed last)."""
    out = None
    for i, arg in enumerate(runner_args):
        if arg == "--out" and i + 1 < len(runner_args):
            out = Path(runner_args[i + 1])
        elif arg.startswith("--out="):
            out = Path(arg.split("=", 1)[1])
    if out is None:
        raise SystemExit("vllm_benchjob: the runner arguments need --out DIR")
    return out


def fit(result: dict[str, Any]) -> str:
    """The result as JSON, without raw samples when it would not fit a ConfigMap."""
    text = json.dumps(result, separators=(",", ":"))
    if len(text.encode()) <= MAX_RESULT_BYTES:
        return text
    slim = dict(result)
    slim["scenarios"] = {
        name: {k: v for k, v in body.items() if k != "samples"}
        for name, body in (result.get("scenarios") or {}).items()
    }
    slim["truncated"] = "raw samples dropped to fit a ConfigMap; the runner's --out has them"
    return json.dumps(slim, separators=(",", ":"))


def publish(core: client.CoreV1Api, namespace: str, name: str, out: Path, code: int) -> None:
    path = out / "result.json"
    if path.exists():
        result = json.loads(path.read_text())
        ok = result.get("status") in ("ok", "partial")
        errors = "; ".join(str(e.get("message")) for e in (result.get("errors") or [])[:3])
        data = {
            "result.json": fit(result),
            "state": "Complete" if ok else "Failed",
            "message": errors or f"runner exit code {code}",
        }
    else:
        data = {
            "state": "Failed",
            "message": f"the runner exited with code {code} and wrote no result",
        }
    core.patch_namespaced_config_map(name, namespace, {"data": data})


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit(
            "usage: python -m vllm_benchjob --configmap NAME --revision REV -- RUNNER ARGS..."
        )
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="vllm_benchjob")
    parser.add_argument("--configmap", required=True, help="the run's result ConfigMap")
    parser.add_argument("--revision", required=True, help="the revision being measured")
    parser.add_argument("--namespace", help="default: POD_NAMESPACE, or the pod's own")
    args = parser.parse_args(argv[:split])
    runner_args = argv[split + 1 :]
    out = _out_dir(runner_args)
    log.info("measuring revision %s: vllm-bench %s", args.revision, " ".join(runner_args))
    code = bench_main(runner_args)
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    publish(client.CoreV1Api(), _namespace(args.namespace), args.configmap, out, code)
    log.info("result written to configmap/%s (runner exit code %d)", args.configmap, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
