"""A broker's certificate rotated under load: new connections get the new one, nothing acknowledged is lost.

cert-manager and the operator rewrite a broker's PEM files in place while it runs. Here a producer
(confluent-kafka, idempotent, acks=all) writes over SASL_SSL the whole time; the test rewrites the keystore
file — first half a file (a rotation caught mid-write, which must leave the current certificate serving),
then a new certificate and key from the same CA — and the broker, looking at its files every
`ssl.reload.interval.ms`, serves the new certificate to the next connections. The producer rides through,
and a consumer reads back every acknowledged record.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import threading
import time
from pathlib import Path

import pytest

from tests.support.secure_clients import ClientAuth, consume
from tests.support.tls_files import PLAIN_JAAS, Pki

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]


def served_certificate(address: str, pki: Pki) -> str:
    """The fingerprint of the certificate a new TLS connection to `address` is served."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def test_rotating_the_certificate_files_reaches_new_connections_and_loses_nothing(broker_factory,
                                                                                  tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    keystore = tmp_path / "live.pem"
    keystore.write_bytes(pki.broker_file.read_bytes())
    broker = broker_factory(settings={
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore),
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.reload.interval.ms": 400, "group.initial.rebalance.delay.ms": 0})
    auth = ClientAuth("SASL_SSL", "PLAIN", "alice", "alice-secret", ca=pki.ca_file)
    first = served_certificate(broker.bootstrap, pki)

    from confluent_kafka import Producer

    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 2, **auth.confluent()})
        i = 0
        while not stop.is_set():
            p.produce("rotating", f"v{i}".encode(), on_delivery=lambda err, msg: errors.append(str(err)) if err
                      else acked.append(msg.value()))
            p.poll(0.002)
            i += 1
        assert p.flush(30) == 0

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(acked) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        whole = pki.server_certificate("next.pem").read_bytes()
        keystore.write_bytes(whole[: len(whole) // 2])  # caught mid-write: the current certificate stays
        broker.wait_for_log("TLS reload failed")
        assert served_certificate(broker.bootstrap, pki) == first
        keystore.write_bytes(whole)
        broker.wait_for_log("TLS certificate reloaded from")
        deadline = time.monotonic() + 10
        while served_certificate(broker.bootstrap, pki) == first and time.monotonic() < deadline:
            time.sleep(0.1)
        assert served_certificate(broker.bootstrap, pki) != first
        count = len(acked)
        deadline = time.monotonic() + 20
        while len(acked) < count + 200 and time.monotonic() < deadline:  # and the producer goes on
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors[:5]
    assert len(acked) > 400
    got = consume("kafka-python", broker.bootstrap, "rotating", auth, len(acked))
    assert set(acked) <= set(got)  # every acknowledged record is there
