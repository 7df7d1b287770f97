"""ACLs in the cluster metadata log: the controller writes `acl`/`remove_acl` records, images replay them,
snapshots carry them, a broker's AclManager follows every delta into its authorizer (cache included), and a
new controller (failover) or a broker reading the log anew (restart) sees the same ACLs."""

from __future__ import annotations

import pytest

from kelp.broker.acl_manager import AclManager, host_of
from kelp.broker.cluster.controller import Controller, ControllerSettings
from kelp.broker.metadata.image import (
    MetadataCorrupt,
    MetadataDelta,
    MetadataImage,
    apply_entry,
    diff_images,
    image_from_log,
    image_from_snapshot,
    snapshot_to_json,
)
from kelp.broker.metadata.model import BrokerEndpoint
from kelp.broker.metadata.records import acl_record, remove_acl_record
from kelp.config.broker import BrokerConfig
from kelp.config.keys import KELP_AUTHORIZER
from kelp.errors import ErrorCode, NotControllerError, SecurityDisabledError
from kelp.security.acl import AclOperation, ResourceType
from kelp.security.acl_json import binding_from_json, binding_to_json
from kelp.security.principal import KafkaPrincipal
from tests.support.memory_metadata_log import MemoryMetadataLog

ALICE = KafkaPrincipal.user("alice")


def acl(name: str = "orders", *, principal: str = "User:alice", op: str = "READ", permission: str = "ALLOW",
        pattern: str = "LITERAL", rtype: str = "TOPIC", host: str = "*") -> dict:
    return {"resourceType": rtype, "resourceName": name, "patternType": pattern, "principal": principal,
            "host": host, "operation": op, "permission": permission}


def entry(offset: int, *records: dict) -> dict:
    return {"offset": offset, "epoch": 1, "records": list(records)}


# -- the image ----------------------------------------------------------------------------------
def test_acl_records_replay_into_the_image_and_its_delta() -> None:
    image, delta = apply_entry(MetadataImage(), entry(0, acl_record("a1", acl()), acl_record("a2", acl("x"))))
    assert list(image.acls) == ["a1", "a2"]
    assert image.acls["a1"] == binding_from_json(acl())
    assert set(delta.acls_added) == {"a1", "a2"} and not delta.acls_removed
    image2, delta2 = apply_entry(image, entry(1, remove_acl_record("a1")))
    assert list(image2.acls) == ["a2"] and delta2.acls_removed == {"a1": binding_from_json(acl())}
    assert image.acls.keys() == {"a1", "a2"}  # images are values: the older one is untouched


@pytest.mark.parametrize(("records", "why"), [
    ([acl_record("a1", acl()), acl_record("a1", acl("other"))], "already in the image"),
    ([acl_record("a1", acl()), acl_record("a2", acl())], "repeats"),
    ([acl_record("a1", acl(rtype="CLUSTER", name="other"))], "only valid name for the CLUSTER resource"),
    ([acl_record("a1", acl(principal="alice"))], "no colon"),
    ([acl_record("a1", {"resourceType": "TOPIC"})], "required"),
    ([remove_acl_record("nope")], "not in the image"),
])
def test_an_acl_record_that_breaks_a_rule_is_never_applied(records: list[dict], why: str) -> None:
    with pytest.raises(MetadataCorrupt, match=why):
        apply_entry(MetadataImage(), entry(0, *records))


def test_snapshots_carry_the_acls_and_a_load_tells_what_changed() -> None:
    prefixed = acl("p", pattern="PREFIXED")
    image, _ = apply_entry(MetadataImage(), entry(0, acl_record("a1", acl()), acl_record("a2", prefixed)))
    snap = snapshot_to_json(image)
    assert snap["acls"] == [{"id": "a1", "acl": acl()}, {"id": "a2", "acl": acl("p", pattern="PREFIXED")}]
    assert image_from_snapshot(snap).acls == image.acls
    later, _ = apply_entry(image, entry(1, remove_acl_record("a1"), acl_record("a3", acl("z"))))
    delta = diff_images(image, later)
    assert set(delta.acls_removed) == {"a1"} and set(delta.acls_added) == {"a3"}
    assert image_from_snapshot({"offset": 0, "epoch": 0, "topics": []}).acls == {}  # older snapshots: none


def test_a_delivery_that_creates_and_deletes_an_acl_hands_on_neither() -> None:
    image, d1 = apply_entry(MetadataImage(), entry(0, acl_record("a1", acl()), acl_record("keep", acl("k"))))
    _, d2 = apply_entry(image, entry(1, remove_acl_record("a1")))
    merged = MetadataDelta()
    merged.merge(d1)
    merged.merge(d2)
    assert set(merged.acls_added) == {"keep"} and not merged.acls_removed


# -- the controller -----------------------------------------------------------------------------
class Harness:
    def __init__(self) -> None:
        self.store = MemoryMetadataLog()
        self.config = BrokerConfig.load(env={}, overrides={"log.dirs": "/tmp/unused"})
        self.fresh = True
        self.controller = self.make()

    def make(self) -> Controller:
        async def live() -> dict[int, BrokerEndpoint]:
            return {0: BrokerEndpoint(0, "127.0.0.1", 9092, "127.0.0.1", 8080)}

        async def send(broker: BrokerEndpoint, payload: dict) -> int:
            return int(payload["end_offset"])

        return Controller(broker_id=0, settings=ControllerSettings(self.config), log=self.store, live_brokers=live,
                          send=send, lease_fresh=lambda: self.fresh)

    async def start(self, controller: Controller | None = None) -> Controller:
        c = controller or self.controller
        await c.start()
        assert c._task is not None
        c._task.cancel()
        return c

    def image(self) -> MetadataImage:
        base = max(self.store.snapshots) if self.store.snapshots else -1
        return image_from_log(self.store.snapshots.get(base), [self.store.entries[o] for o in sorted(self.store.entries)
                                                                  if o > base])


async def test_the_controller_creates_each_acl_once_and_answers_kafkas_errors_in_order() -> None:
    h = Harness()
    c = await h.start()
    answer = await c.acl_admin.create_acls(acls=[acl(), acl(rtype="CLUSTER", name="x", op="ALTER"), acl(),
                                                  acl("", op="WRITE"),
                                       acl(op="ANY")])
    results = answer["results"]
    assert results[0] is None and results[2] is None  # the same binding twice: created once, both succeed
    assert results[1] == {"error_code": ErrorCode.INVALID_REQUEST,
                          "message": "The only valid name for the CLUSTER resource is kafka-cluster"}
    assert results[3] is not None and results[3]["message"] == "Invalid empty resource name"
    assert results[4] is not None and "operation" in results[4]["message"]
    assert list(h.image().acls.values()) == [binding_from_json(acl())]
    before = len(h.store.entries)
    again = await c.acl_admin.create_acls(acls=[acl()])
    assert again["results"] == [None] and len(h.store.entries) == before  # already there: no record


async def test_the_controller_deletes_by_filters_matched_against_the_acls_before_the_request() -> None:
    h = Harness()
    c = await h.start()
    await c.acl_admin.create_acls(acls=[acl("a"), acl("b", op="WRITE"), acl("p-", pattern="PREFIXED"),
                              acl("a", principal="User:bob")])
    answer = await c.acl_admin.delete_acls(filters=[{"principal": "User:alice", "operation": "READ"},
                                          {"resourceName": "a"},
                                          {"resourceType": "UNKNOWN"}])
    first, second, third = answer["results"]
    assert sorted(b["resourceName"] for b in first["deleted"]) == ["a", "p-"] and first["error"] is None
    assert sorted(b["principal"] for b in second["deleted"]) == ["User:alice", "User:bob"]
    assert third["deleted"] == [] and third["error"] is not None
    assert third["error"]["error_code"] == ErrorCode.INVALID_REQUEST
    assert [b.pattern.name for b in h.image().acls.values()] == ["b"]


async def test_acls_survive_a_controller_failover_and_a_snapshot() -> None:
    h = Harness()
    c = await h.start()
    await c.acl_admin.create_acls(acls=[acl("a"), acl("b")])
    await c.writer.snapshot(c.state.image)  # what the controller writes after enough bytes of entries
    await c.acl_admin.delete_acls(filters=[{"resourceName": "a"}])
    await c.stop()
    successor = await h.start(h.make())  # a new incarnation reads the snapshot and the entries after it
    assert [b.pattern.name for b in successor.state.image.acls.values()] == ["b"]
    await successor.acl_admin.create_acls(acls=[acl("c")])
    assert [b.pattern.name for b in h.image().acls.values()] == ["b", "c"]


async def test_a_deposed_controller_writes_no_acl() -> None:
    h = Harness()
    c = await h.start()
    h.fresh = False
    with pytest.raises(NotControllerError):
        await c.acl_admin.create_acls(acls=[acl()])
    assert h.image().acls == {}


# -- a broker's AclManager ------------------------------------------------------------------------
def manager(**cfg: object) -> AclManager:
    return AclManager(BrokerConfig.load(env={}, overrides={"authorizer.class.name": KELP_AUTHORIZER, **cfg}))


def test_the_authorizer_follows_the_deltas_and_forgets_cached_decisions() -> None:
    m = manager()
    assert not m.authorize(ALICE, "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")
    image, delta = apply_entry(MetadataImage(), entry(0, acl_record("a1", acl())))
    m.apply_delta(delta)
    assert m.authorize(ALICE, "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert m.authorize(ALICE, "10.0.0.1", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders")  # READ implies it
    _, delta = apply_entry(image, entry(1, remove_acl_record("a1")))
    m.apply_delta(delta)
    assert not m.authorize(ALICE, "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")


def test_without_an_authorizer_everything_is_allowed_and_acl_operations_say_security_is_disabled() -> None:
    m = AclManager(BrokerConfig.load(env={}))
    assert m.authorize(ALICE, "h", AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
    with pytest.raises(SecurityDisabledError):
        m.describe(binding_from_json(acl()).to_filter())


def test_super_users_and_the_no_acl_default_come_from_the_config() -> None:
    m = manager(**{"super.users": "User:admin", "allow.everyone.if.no.acl.found": "true"})
    assert m.authorize(KafkaPrincipal.user("admin"), "h", AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
    assert m.authorize(ALICE, "h", AclOperation.WRITE, ResourceType.TOPIC, "nobody-has-acls")
    _, delta = apply_entry(MetadataImage(), entry(0, acl_record("a1", acl("guarded", principal="User:bob"))))
    m.apply_delta(delta)
    assert not m.authorize(ALICE, "h", AclOperation.WRITE, ResourceType.TOPIC, "guarded")


def test_authorized_operations_is_kafkas_bit_field() -> None:
    m = manager()
    _, delta = apply_entry(MetadataImage(), entry(0, acl_record("a1", acl(op="WRITE"))))
    m.apply_delta(delta)
    bits = m.authorized_operations(ALICE, "h", ResourceType.TOPIC, "orders")
    assert bits == (1 << AclOperation.WRITE) | (1 << AclOperation.DESCRIBE)


@pytest.mark.parametrize(("peer", "host"), [("127.0.0.1:5555", "127.0.0.1"), ("::1:5555", "0:0:0:0:0:0:0:1"),
                                            ("::ffff:10.1.2.3:9", "10.1.2.3"), ("[fe80::1]:9", "fe80:0:0:0:0:0:0:1")])
def test_the_host_an_acl_compares_with_is_javas_form_of_the_peer_address(peer: str, host: str) -> None:
    assert host_of(peer) == host


def test_bindings_round_trip_through_json() -> None:
    doc = acl("t-", pattern="PREFIXED", op="DESCRIBE_CONFIGS", permission="DENY", host="10.0.0.1")
    assert binding_to_json(binding_from_json(doc)) == doc
    assert binding_to_json(binding_from_json({**doc, "resourceType": "Topic", "operation": "DescribeConfigs"})) == doc


def test_a_broker_follows_the_acls_before_it_is_registered(tmp_path) -> None:
    """ACLs reach the AclManager with every delivery, also before the controller registered this process (its
    topic manager waits for that; the deliveries that register it must be authorized with the ACLs)."""
    from types import SimpleNamespace

    from kelp.broker.cluster.member import ClusterMember

    config = BrokerConfig.load(env={}, overrides={"log.dirs": str(tmp_path), "broker.id": 1,
                                                  "authorizer.class.name": KELP_AUTHORIZER})
    applied: list[MetadataDelta] = []
    member = ClusterMember(SimpleNamespace(config=config, topics=SimpleNamespace(apply_delta=applied.append)))
    acls = AclManager(config)
    member.metadata.delta_listeners.append(acls.apply_delta)
    push = {"controller_id": 0, "controller_epoch": 1, "brokers": [], "end_offset": 0,
            "entries": [entry(0, acl_record("a1", acl()))]}
    assert member.metadata.apply(push) == 0  # type: ignore[arg-type]
    assert not member.state.registered and applied == []  # the topic manager waits for the registration
    assert acls.authorize(ALICE, "h", AclOperation.READ, ResourceType.TOPIC, "orders")
