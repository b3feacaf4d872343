"""The admission webhook's TLS: a private CA and the serving certificate for the operator's
Service, made with ``cryptography`` so no user has to bring cert-manager or openssl.

The API server calls the webhook at ``https://<service>.<namespace>.svc:<port>/<path>`` and
trusts only the ``caBundle`` of the ValidatingWebhookConfiguration. The operator keeps the CA and
the serving pair in a Secret (so a restarted pod serves the same certificate and the registered
``caBundle`` stays right) and makes new ones when the Secret is missing, does not cover the
Service's names, or expires within :data:`RENEW_BEFORE`. Pure: PEM bytes in, PEM bytes out.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = datetime.timedelta(days=3650)
RENEW_BEFORE = datetime.timedelta(days=30)
#: Keys of the Secret (the usual names of a kubernetes.io/tls Secret plus the CA).
CA_KEY, CERT_KEY, PKEY_KEY = "ca.crt", "tls.crt", "tls.key"


@dataclasses.dataclass(frozen=True)
class ServingPair:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def as_secret_data(self) -> dict[str, bytes]:
        return {CA_KEY: self.ca_pem, CERT_KEY: self.cert_pem, PKEY_KEY: self.key_pem}


def service_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use for a Service (it uses ``<svc>.<ns>.svc``)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "strom-operator"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make(dns_names: Sequence[str], now: datetime.datetime | None = None) -> ServingPair:
    """A new CA and a serving certificate for ``dns_names`` (the first is the CN)."""
    now = now or datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + VALID
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("strom-operator webhook CA")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(dns_names[0])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return ServingPair(_pem(ca), _pem(cert), key_pem)


def still_good(pair: ServingPair, dns_names: Sequence[str],
               now: datetime.datetime | None = None) -> bool:
    """The stored pair covers ``dns_names``, was signed by its CA and is not about to expire."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
        ca = x509.load_pem_x509_certificate(pair.ca_pem)
        serialization.load_pem_private_key(pair.key_pem, password=None)
        cert.verify_directly_issued_by(ca)
        names = cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    if not set(dns_names) <= set(names):
        return False
    return min(cert.not_valid_after_utc, ca.not_valid_after_utc) - now > RENEW_BEFORE
