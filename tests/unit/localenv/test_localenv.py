"""Pure pieces of the local environment: PKI, process identity, pins."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtensionOID, NameOID

from vllm_localenv import pki
from vllm_localenv.cluster import (
    LocalCluster,
    Ports,
    _is_ours,
    _Proc,
    _start_ticks,
    _State,
    pinned_versions,
)


def test_pki_issues_certificates_signed_by_the_ca(tmp_path: Path) -> None:
    pki.generate(tmp_path)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    serving = x509.load_pem_x509_certificate((tmp_path / "apiserver.crt").read_bytes())
    admin = x509.load_pem_x509_certificate((tmp_path / "admin.crt").read_bytes())
    serving.verify_directly_issued_by(ca)
    admin.verify_directly_issued_by(ca)
    sans = serving.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == [
        "127.0.0.1",
        "10.0.0.1",
        pki.BRIDGE_IP,  # pods reach the apiserver on the real node's bridge
    ]
    orgs = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [o.value for o in orgs] == ["system:masters"]
    assert oct((tmp_path / "ca.key").stat().st_mode & 0o777) == "0o600"
    node = x509.load_pem_x509_certificate((tmp_path / "node.crt").read_bytes())
    node.verify_directly_issued_by(ca)
    assert node.subject.rfc4514_string() == f"O=system:nodes,CN=system:node:{pki.NODE_NAME}"
    front = x509.load_pem_x509_certificate((tmp_path / "front-proxy-ca.crt").read_bytes())
    x509.load_pem_x509_certificate(
        (tmp_path / "front-proxy-client.crt").read_bytes()
    ).verify_directly_issued_by(front)
    # a second run keeps what exists (an older state directory only gains what is missing)
    before = (tmp_path / "ca.crt").read_bytes()
    pki.generate(tmp_path)
    assert (tmp_path / "ca.crt").read_bytes() == before


def test_process_identity_needs_pid_start_time_and_binary() -> None:
    me = _Proc("me", os.getpid(), _start_ticks(os.getpid()) or -1, os.path.realpath(sys.executable))
    assert _is_ours(me)
    assert not _is_ours(_Proc("me", me.pid, me.start_ticks + 1, me.exe))  # pid reused
    assert not _is_ours(_Proc("me", me.pid, me.start_ticks, "/usr/bin/other"))
    assert _start_ticks(2**22 + 12345) is None


def test_free_ports_are_distinct() -> None:
    ports = Ports.free()
    # etcd client and peer, apiserver, kwok, Prometheus, prometheus-adapter
    assert len(set(ports.named().values())) == 6


def test_a_state_file_from_before_the_metrics_pipeline_still_loads() -> None:
    old = '{"ports": {"etcd_client": 1, "etcd_peer": 2, "apiserver": 3, "kwok": 4}, "procs": []}'
    assert _State.load(old).ports == Ports(1, 2, 3, 4, prometheus=19090, adapter=16444)


def test_pins() -> None:
    pins = pinned_versions()
    assert pins["K8S_VERSION"].startswith("1.")
    assert int(pins["K8S_VERSION"].split(".")[1]) >= 36
    assert pins["ETCD_VERSION"].startswith("3.6.")


def test_extra_args_follow_a_components_own_flags_and_audit_rules_replace_the_default(
    tmp_path: Path,
) -> None:
    """The hooks a benchmark sizes its cluster with (operator_scale.bench_cluster)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("kube-apiserver", "kube-scheduler"):
        exe = bin_dir / name
        exe.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/{name}.args\n')
        exe.chmod(0o755)
    rules: list[dict[str, object]] = [{"level": "Metadata", "verbs": ["get"]}, {"level": "None"}]
    lc = LocalCluster(
        state_dir=tmp_path,
        bin_dir=bin_dir,
        extra_args={"kube-apiserver": ["--service-cluster-ip-range=10.0.0.0/16"]},
        audit_rules=rules,
    )
    lc.log_dir.mkdir()
    state = _State(Ports.free())
    for name in ("kube-apiserver", "kube-scheduler"):
        lc._spawn(state, name, ["--service-cluster-ip-range=10.0.0.0/24"]).wait(timeout=10)
    # given twice, the later flag wins in the components' flag parser
    assert (tmp_path / "kube-apiserver.args").read_text().split() == [
        "--service-cluster-ip-range=10.0.0.0/24",
        "--service-cluster-ip-range=10.0.0.0/16",
    ]
    assert (tmp_path / "kube-scheduler.args").read_text().split() == [
        "--service-cluster-ip-range=10.0.0.0/24"
    ]
    assert json.loads(lc._audit_policy().read_text())["rules"] == rules
    default = LocalCluster(state_dir=tmp_path / "other", bin_dir=bin_dir)
    default.state_dir.mkdir()
    assert json.loads(default._audit_policy().read_text())["rules"][-1] == {"level": "None"}
    assert json.loads(default._audit_policy().read_text())["rules"] != rules
