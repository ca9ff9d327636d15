"""Certificates for the test cluster's secured listener, made at test time with ``openssl``.

:func:`make_certificates` writes, under one directory, a CA (``ca.pem``, its key beside it) and a
broker certificate it signed for ``127.0.0.1`` / ``localhost``, as PEM files (for Python clients)
and as a PKCS#12 keystore (for the brokers, whose PEM keystore from a file needs an encrypted
PKCS#8 key). Everything lives two days: they are for one test run, never for a real cluster.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from linkwatch.errors import SetupError

DAYS = "2"


@dataclass(frozen=True)
class Certificates:
    ca_file: Path  # PEM: what clients trust
    broker_cert: Path  # PEM, signed by the CA, SAN IP:127.0.0.1, DNS:localhost
    broker_key: Path  # PEM, unencrypted
    keystore: Path  # PKCS#12: broker key and certificate chain
    keystore_password: str


def make_certificates(directory: Path) -> Certificates:
    """A fresh CA and broker certificate under ``directory`` (created); SetupError naming the
    step if ``openssl`` is missing or fails."""
    if shutil.which("openssl") is None:
        raise SetupError(
            "openssl is not installed: the secured test listener needs it (apt-get install openssl)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    password = secrets.token_hex(12)
    ext = d / "broker.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _run("the CA", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS, "-subj", "/CN=linkwatch-test-ca",
         "-keyout", d / "ca.key", "-out", d / "ca.pem",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    _run("the broker key", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", d / "broker.key", "-out", d / "broker.csr")  # fmt: skip
    _run("the broker certificate", "x509", "-req", "-in", d / "broker.csr", "-CA", d / "ca.pem",
         "-CAkey", d / "ca.key", "-CAcreateserial", "-days", DAYS, "-extfile", ext, "-out", d / "broker.pem")  # fmt: skip
    _run("the broker keystore", "pkcs12", "-export", "-in", d / "broker.pem", "-inkey", d / "broker.key",
         "-certfile", d / "ca.pem", "-name", "broker", "-passout", f"pass:{password}", "-out", d / "broker.p12")  # fmt: skip
    return Certificates(d / "ca.pem", d / "broker.pem", d / "broker.key", d / "broker.p12", password)


def _run(what: str, *args: str | Path) -> None:
    proc = subprocess.run(
        ["openssl", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60
    )
    if proc.returncode != 0:
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "no output"
        raise SetupError(f"openssl could not make {what}: {last}")
