"""The secured test listener's certificates: a CA, and a broker certificate it signed that a
Python client accepts for 127.0.0.1 (hostname checked) and a Java keystore can hold."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from testbed.tls import make_certificates

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl missing")


def test_the_broker_certificate_verifies_against_the_ca_for_loopback(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "tls")
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", certs.ca_file, "-verify_ip", "127.0.0.1", certs.broker_cert],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    context = ssl.create_default_context(cafile=str(certs.ca_file))
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    context.load_verify_locations(cafile=str(certs.ca_file))  # a valid PEM CA
    listed = subprocess.run(
        ["openssl", "pkcs12", "-in", certs.keystore, "-nokeys", "-passin", f"pass:{certs.keystore_password}"],
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0 and listed.stdout.count("BEGIN CERTIFICATE") == 2  # broker + CA


def test_each_call_makes_a_fresh_ca(tmp_path: Path) -> None:
    a, b = make_certificates(tmp_path / "a"), make_certificates(tmp_path / "b")
    assert a.ca_file.read_text() != b.ca_file.read_text()
    assert a.keystore_password != b.keystore_password
