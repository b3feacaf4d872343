"""The cluster's certificate authorities, certificates and keys, made with ``cryptography``.

Kubernetes authenticates every component by client certificate: the subject's CN is the user
and O the groups (``system:node:<name>`` in ``system:nodes`` for kubelet, which is what the Node
authorizer and NodeRestriction check). Two CAs, as kubeadm makes them: the cluster CA signs
server and client certificates, the front-proxy CA signs only the API server's client identity
towards aggregated API servers. Keys are ECDSA P-256 (fast to make, accepted everywhere,
including as the ServiceAccount token signing key).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365


@dataclass(frozen=True)
class CertSpec:
    """One certificate to issue: file stem, subject and what it is for."""

    name: str
    common_name: str
    organizations: Sequence[str] = ()
    server: bool = False
    client: bool = False
    dns_names: Sequence[str] = ()
    ip_addresses: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, *,
             ca: bool) -> x509.CertificateBuilder:
    """A fresh certificate for ``key`` valid from now: basic constraints and key usage of a CA
    (signs certificates and CRLs) or of a leaf (digital signatures only), both critical."""
    start, end = _validity()
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(issuer).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False),
                           critical=True))


def make_ca(common_name: str) -> Issued:
    """A self-signed CA certificate and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (_builder(name, name, key, ca=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    return Issued(cert, key)


def issue(ca: Issued, spec: CertSpec) -> Issued:
    """A certificate for ``spec`` signed by ``ca``."""
    if not (spec.server or spec.client):
        raise ValueError(f"certificate {spec.name!r} must be for a server, a client or both")
    key = ec.generate_private_key(ec.SECP256R1())
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if spec.server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if spec.client else [])
    builder = (_builder(_name(spec.common_name, spec.organizations), ca.cert.subject, key,
                        ca=False)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca.key.public_key()), critical=False))
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in spec.dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in spec.ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def cert_pem(issued: Issued) -> bytes:
    return issued.cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write(directory: Path, stem: str, issued: Issued) -> None:
    """``<stem>.crt`` and ``<stem>.key`` (mode 0600) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{stem}.crt").write_bytes(cert_pem(issued))
    key_path = directory / f"{stem}.key"
    key_path.touch(mode=0o600)
    key_path.write_bytes(key_pem(issued.key))


def load(directory: Path, stem: str) -> Issued:
    cert = x509.load_pem_x509_certificate((directory / f"{stem}.crt").read_bytes())
    key = serialization.load_pem_private_key((directory / f"{stem}.key").read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{directory / stem}.key is not an EC key")
    return Issued(cert, key)


def write_cluster_pki(directory: Path, specs: Sequence[CertSpec]) -> None:
    """Both CAs, every certificate in ``specs`` (the front-proxy client from the front-proxy
    CA, the rest from the cluster CA) and the ServiceAccount signing key pair (sa.key/sa.pub)."""
    ca = make_ca("kubestrom-ca")
    front_ca = make_ca("kubestrom-front-proxy-ca")
    write(directory, "ca", ca)
    write(directory, "front-proxy-ca", front_ca)
    for spec in specs:
        signer = front_ca if spec.name == "front-proxy-client" else ca
        write(directory, spec.name, issue(signer, spec))
    sa_key = ec.generate_private_key(ec.SECP256R1())
    (directory / "sa.key").touch(mode=0o600)
    (directory / "sa.key").write_bytes(key_pem(sa_key))
    (directory / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
