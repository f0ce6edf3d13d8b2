"""A test PKI made by the tests (Python's ``cryptography``): a CA, a server certificate for
``localhost``, a client certificate (its key also encrypted), and a CA nobody trusts."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEY_PASSWORD = "client-key-secret"


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: str  # the CA that signed the server and client certificates
    other_ca: str  # a CA that signed nothing here
    server_cert: str  # for DNS:localhost only (so 127.0.0.1 is a wrong host name)
    server_key: str
    client_cert: str
    client_key: str
    client_key_encrypted: str  # the same key, encrypted with KEY_PASSWORD


def make_pki(directory: Path) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def certificate(
        subject: str,
        public: ec.EllipticCurvePrivateKey,
        issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
        *,
        ca: bool = False,
        dns: list[str] = (),  # type: ignore[assignment]
        usage: ExtendedKeyUsageOID | None = None,
    ) -> x509.Certificate:
        issuer_name = issuer[0].subject if issuer else name(subject)
        signer = issuer[1] if issuer else public
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(issuer_name)
            .public_key(public.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            builder = builder.add_extension(
                x509.SubjectKeyIdentifier.from_public_key(public.public_key()), critical=False
            )
        else:
            assert issuer is not None
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()),
                critical=False,
            )
        if dns:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False
            )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    def write(file: str, data: bytes) -> str:
        path = directory / file
        path.write_bytes(data)
        os.chmod(path, 0o644)
        return str(path)

    def pem(cert: x509.Certificate) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    def private(k: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        return k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )

    directory.mkdir(parents=True, exist_ok=True)
    ca_key, other_key, server_key, client_key = key(), key(), key(), key()
    ca = certificate("asynclookup test CA", ca_key, None, ca=True)
    other = certificate("a CA nobody trusts", other_key, None, ca=True)
    server = certificate(
        "localhost",
        server_key,
        (ca, ca_key),
        dns=["localhost"],
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client = certificate(
        "postgres", client_key, (ca, ca_key), usage=ExtendedKeyUsageOID.CLIENT_AUTH
    )
    return Pki(
        directory,
        ca=write("ca.pem", pem(ca)),
        other_ca=write("other-ca.pem", pem(other)),
        server_cert=write("server.pem", pem(server)),
        server_key=write("server.key", private(server_key)),
        client_cert=write("client.pem", pem(client)),
        client_key=write("client.key", private(client_key)),
        client_key_encrypted=write("client-encrypted.key", private(client_key, KEY_PASSWORD)),
    )


def lookup_failure(lookup: Callable[[], Any]) -> Any:
    """The error ``lookup`` fails with: a LookupFailedError when a request failed (its
    ``attempts`` say whether it was retried), a PermanentError when the task could not even set
    up TLS (a file, a key password)."""
    import pytest

    from lookup_source.errors import LookupFailedError, PermanentError

    with pytest.raises((LookupFailedError, PermanentError)) as info:
        lookup()
    return info.value
