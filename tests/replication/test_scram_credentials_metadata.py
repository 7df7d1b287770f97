"""SCRAM credentials in the cluster metadata log (docs/metadata.md): set by the controller, replayed by every broker.

The image folds `scram_credential` and `remove_scram_credential` records into `scram_credentials` and keeps them
in snapshots; a record that is not a whole, valid credential, or removes one the image lacks, is MetadataCorrupt.
No record ever holds a password or a salted password. The controller's `alter_scram_credentials` follows Kafka's
ScramControlManager: per user, a duplicate is DUPLICATE_RESOURCE, an unknown mechanism
UNSUPPORTED_SASL_MECHANISM, bad iterations or an empty name UNACCEPTABLE_CREDENTIAL, deleting what is not there
RESOURCE_NOT_FOUND; a user with an error changes nothing, the others' changes are one entry.
"""

from __future__ import annotations

import json

import pytest

from kelp.broker.metadata.image import (
    MetadataCorrupt,
    MetadataImage,
    apply_entry,
    image_from_log,
    snapshot_to_json,
)
from kelp.broker.metadata.records import remove_scram_credential_record
from kelp.broker.metadata.scram_credentials import record_of
from kelp.security.scram import ScramMechanism, make_credential
from kelp.security.scram_exchange import ScramClient as CoreScramClient
from kelp.security.scram_exchange import ScramServer
from tests.replication.test_controller import Harness

SHA512 = ScramMechanism.SCRAM_SHA_512
SHA256 = ScramMechanism.SCRAM_SHA_256


def entry(offset: int, *records: dict) -> dict:
    return {"offset": offset, "epoch": 1, "records": list(records)}


def upsertion(name: str, password: str, mechanism: ScramMechanism = SHA512, iterations: int = 4096) -> dict:
    """What a broker sends the controller: the credential derived from the salted password (iterations as asked)."""
    record = record_of(name or "-", make_credential(password, mechanism, 4096))
    return {"name": name, "mechanism": mechanism.mechanism_name, "salt": record["salt"],
            "stored_key": record["stored_key"], "server_key": record["server_key"], "iterations": iterations}


def record_upsertion(name: str, password: str, iterations: int) -> dict:
    record = record_of(name, make_credential(password, SHA512, iterations))
    return {"name": name, "mechanism": "SCRAM-SHA-512", "salt": record["salt"], "stored_key": record["stored_key"],
            "server_key": record["server_key"], "iterations": iterations}


def authenticates(image: MetadataImage, user: str, password: str, mechanism: ScramMechanism = SHA512) -> bool:
    server = ScramServer(mechanism, lambda name: image.scram_credentials.get((name, mechanism.mechanism_name)))
    client = CoreScramClient(mechanism, user, password)
    try:
        final = server.evaluate(client.final_message(server.evaluate(client.first_message())))
        client.verify_server_final(final)
    except Exception:
        return False
    return server.complete


def test_records_fold_into_the_image_delete_and_survive_a_snapshot() -> None:
    alice = record_of("alice", make_credential("alice-secret", SHA512, 8192))
    image, _ = apply_entry(MetadataImage(), entry(0, alice, record_of("alice", make_credential("x", SHA256))))
    assert set(image.scram_credentials) == {("alice", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-256")}
    assert authenticates(image, "alice", "alice-secret") and not authenticates(image, "alice", "wrong")
    assert image_from_log(snapshot_to_json(image), []) == image
    assert "alice-secret" not in json.dumps(snapshot_to_json(image))
    image, _ = apply_entry(image, entry(1, remove_scram_credential_record("alice", "SCRAM-SHA-512")))
    assert set(image.scram_credentials) == {("alice", "SCRAM-SHA-256")}
    assert not authenticates(image, "alice", "alice-secret")


@pytest.mark.parametrize(("change", "named"), [
    (lambda r: r.update(user=""), "without a user name"),
    (lambda r: r.update(mechanism="SCRAM-SHA-1"), "unknown mechanism"),
    (lambda r: r.update(iterations=1000), "iterations 1000"),
    (lambda r: r.update(iterations=20000), "iterations 20000"),
    (lambda r: r.update(salt="not base64!"), "the salt is not valid base64"),
    (lambda r: r.update(stored_key="AAAA"), "not 64 bytes"),
    (lambda r: r.pop("server_key"), "malformed 'scram_credential' record"),
])
def test_the_image_refuses_a_record_that_is_not_a_whole_valid_credential(change, named: str) -> None:
    record = dict(record_of("alice", make_credential("pw", SHA512)))
    change(record)
    with pytest.raises(MetadataCorrupt, match=named):
        apply_entry(MetadataImage(), entry(0, record))


def test_removing_a_credential_the_image_lacks_is_corrupt() -> None:
    with pytest.raises(MetadataCorrupt, match="no such credential"):
        apply_entry(MetadataImage(), entry(0, remove_scram_credential_record("bob", "SCRAM-SHA-512")))


async def test_the_controller_writes_one_entry_per_request_with_kafka_per_user_errors() -> None:
    h = Harness()
    c = await h.start()
    before = c.state.image.offset
    answer = await c.scram_admin.alter_scram_credentials(
        upsertions=[upsertion("alice", "alice-pass-1"), upsertion("bob", "b1", SHA256),
                    upsertion("carol", "c", iterations=100)],
        deletions=[{"name": "dave", "mechanism": "SCRAM-SHA-512"}])
    assert answer == {"results": [
        {"user": "dave", "error_code": 91, "error_message": "Attempt to delete a user credential that does not exist"},
        {"user": "alice", "error_code": 0, "error_message": None},
        {"user": "bob", "error_code": 0, "error_message": None},
        {"user": "carol", "error_code": 93, "error_message": "Too few iterations"}],
        "metadata_offset": before + 1}
    assert [r["type"] for r in h.store.entries[before + 1]["records"]] == ["scram_credential", "scram_credential"]
    # the password never reaches the log (a distinctive one: two characters turn up in random base64 and hex)
    assert "alice-pass-1" not in json.dumps(h.store.entries[before + 1])
    assert authenticates(c.state.image, "alice", "alice-pass-1") and authenticates(c.state.image, "bob", "b1", SHA256)

    # one user, two changes of one mechanism: DUPLICATE_RESOURCE, and none of its changes apply
    answer = await c.scram_admin.alter_scram_credentials(
        upsertions=[upsertion("alice", "a2")], deletions=[{"name": "alice", "mechanism": "SCRAM-SHA-512"}])
    assert answer["results"] == [{"user": "alice", "error_code": 92, "error_message":
                                  "A user credential cannot be altered twice in the same request"}]
    assert c.state.image.offset == before + 1 and authenticates(c.state.image, "alice", "alice-pass-1")
    # an unknown mechanism, an empty name, too many iterations
    answer = await c.scram_admin.alter_scram_credentials(upsertions=[
        {**upsertion("erin", "e"), "mechanism": "SCRAM-SHA-1"}, upsertion("", "x"),
        upsertion("frank", "f", iterations=16385)])
    assert [(r["user"], r["error_code"]) for r in answer["results"]] == [("erin", 33), ("", 93), ("frank", 93)]
    # replacing and deleting
    await c.scram_admin.alter_scram_credentials(upsertions=[{**record_upsertion("alice", "a3", 8192)}])
    assert authenticates(c.state.image, "alice", "a3")
    assert c.state.image.scram_credentials[("alice", "SCRAM-SHA-512")].iterations == 8192
    answer = await c.scram_admin.alter_scram_credentials(deletions=[{"name": "bob", "mechanism": "SCRAM-SHA-256"}])
    assert answer["results"] == [{"user": "bob", "error_code": 0, "error_message": None}]
    assert ("bob", "SCRAM-SHA-256") not in c.state.image.scram_credentials
