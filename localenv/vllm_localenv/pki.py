"""Self-generated PKI for the local control plane: a CA, the apiserver's serving certificate,
an admin client certificate (group system:masters), the service-account signing key, the real
node's kubelet and kube-proxy identities, and the aggregation layer's front-proxy CA."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=365)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(path: Path, key: rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name,
    *,
    key: rsa.RSAPrivateKey,
    ca_cert: x509.Certificate,
    ca_key: rsa.RSAPrivateKey,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _load(pki_dir: Path, name: str) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    cert = x509.load_pem_x509_certificate((pki_dir / f"{name}.crt").read_bytes())
    key = serialization.load_pem_private_key((pki_dir / f"{name}.key").read_bytes(), None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return cert, key


def _make_ca(pki_dir: Path, name: str, common_name: str) -> None:
    ca_key = _key()
    now = dt.datetime.now(dt.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki_dir / f"{name}.key", ca_key)
    _write_cert(pki_dir / f"{name}.crt", ca_cert)


# The bridge the real node lives on (node.py); the apiserver serves pods there too.
BRIDGE_IP = "10.85.0.1"
NODE_NAME = "cpu-node-0"

# name -> (subject CN, organisation, usage, IP SANs, DNS SANs, issuing CA)
_LEAVES: dict[str, tuple[str, str | None, x509.ObjectIdentifier, list[str], list[str], str]] = {
    "apiserver": (
        "kube-apiserver",
        None,
        ExtendedKeyUsageOID.SERVER_AUTH,
        # 10.0.0.1: the first service IP (kubernetes.default); the bridge: pods' route to it
        ["127.0.0.1", "10.0.0.1", BRIDGE_IP],
        [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        "ca",
    ),
    "admin": ("local-admin", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH, [], [], "ca"),
    # the real node's kubelet (Node authorizer: system:node:<name> in system:nodes)
    "node": (
        f"system:node:{NODE_NAME}",
        "system:nodes",
        ExtendedKeyUsageOID.CLIENT_AUTH,
        [],
        [],
        "ca",
    ),
    "kubelet-serving": (
        NODE_NAME,
        None,
        ExtendedKeyUsageOID.SERVER_AUTH,
        [BRIDGE_IP],
        [NODE_NAME],
        "ca",
    ),
    # the apiserver's client identity towards kubelets (logs, exec)
    "apiserver-kubelet-client": (
        "kube-apiserver-kubelet-client",
        "system:masters",
        ExtendedKeyUsageOID.CLIENT_AUTH,
        [],
        [],
        "ca",
    ),
    "kube-proxy": ("system:kube-proxy", None, ExtendedKeyUsageOID.CLIENT_AUTH, [], [], "ca"),
    # the aggregation layer (custom.metrics.k8s.io through prometheus-adapter)
    "front-proxy-client": (
        "front-proxy-client",
        None,
        ExtendedKeyUsageOID.CLIENT_AUTH,
        [],
        [],
        "front-proxy-ca",
    ),
}


def _has_sans(path: Path, ips: list[str]) -> bool:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        got = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return not ips
    have = {str(a) for a in got.get_values_for_type(x509.IPAddress)}
    return set(ips) <= have


def generate(pki_dir: Path) -> None:
    """Writes every missing piece into pki_dir: ca, front-proxy-ca, sa.{key,pub} and the leaf
    certificates of _LEAVES (NAME.crt/NAME.key). Existing files are kept, so a state directory
    made by an older version gains the new certificates without invalidating the old ones; a
    serving certificate that lacks a required address is reissued."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    for ca, cn in (
        ("ca", "vllm-operator-local-ca"),
        ("front-proxy-ca", "vllm-operator-front-proxy"),
    ):
        if not (pki_dir / f"{ca}.crt").exists():
            _make_ca(pki_dir, ca, cn)
    for name, (cn, org, usage, ips, dns, issuer) in _LEAVES.items():
        crt = pki_dir / f"{name}.crt"
        if crt.exists() and _has_sans(crt, ips):
            continue
        ca_cert, ca_key = _load(pki_dir, issuer)
        key = _key()
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        sans += [x509.DNSName(d) for d in dns]
        cert = _issue(
            _name(cn, org), key=key, ca_cert=ca_cert, ca_key=ca_key, usage=usage, sans=sans or None
        )
        _write_key(pki_dir / f"{name}.key", key)
        _write_cert(crt, cert)
    if not (pki_dir / "sa.key").exists():
        sa_key = _key()
        _write_key(pki_dir / "sa.key", sa_key)
        (pki_dir / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
