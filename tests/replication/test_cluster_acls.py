"""ACLs in a 3-broker cluster: a change made through any broker is applied by every broker (each lists it from
its own authorizer), survives a controller failover and a restart (from the log or a snapshot), and brokers
whose only right is an ACL granting CLUSTER_ACTION replicate, and register again after a restart.

The brokers and this test speak PLAINTEXT, so every principal is User:ANONYMOUS: the first cluster names it a
super user (Kafka's rule for an unauthenticated inter-broker listener); the second gives it its rights by ACLs
only, bootstrapped by `allow.everyone.if.no.acl.found` (the cluster resource has no ACL until the first), and one
broker restarts without that default.
"""

from __future__ import annotations

import pytest

from kelp.config.keys import KELP_AUTHORIZER
from tests.support.cluster import Cluster

pytestmark = pytest.mark.timeout(240)


def acl(rtype: str, name: str, op: str, principal: str = "User:alice", pattern: str = "LITERAL") -> dict:
    return {"resourceType": rtype, "resourceName": name, "patternType": pattern, "principal": principal,
            "host": "*", "operation": op, "permission": "ALLOW"}


def listed(cluster: Cluster, broker_id: int) -> list[dict]:
    return cluster.admin("/admin/v1/acls", via=cluster[broker_id])["acls"]


def everywhere(cluster: Cluster, want: list[dict], brokers: list[int], what: str) -> None:
    def same() -> bool:
        return all(sorted(map(str, listed(cluster, b))) == sorted(map(str, want)) for b in brokers)
    cluster.wait_for(f"{what} on brokers {brokers}", same, timeout=30)


def test_acls_reach_every_broker_and_survive_a_failover_and_a_restart(cluster_factory) -> None:
    cluster = cluster_factory(3, settings={
        "authorizer.class.name": KELP_AUTHORIZER, "super.users": "User:ANONYMOUS",
        "metadata.log.max.record.bytes.between.snapshots": 2048})  # snapshots carry the ACLs too
    a, b = acl("TOPIC", "orders", "READ"), acl("GROUP", "app-", "READ", pattern="PREFIXED")
    results = cluster.admin("/admin/v1/acls", "POST", {"acls": [a, b]}, via=cluster[1])["results"]
    assert results == [{"error": None}, {"error": None}]
    everywhere(cluster, [a, b], [0, 1, 2], "two ACLs")

    controller = cluster.controller()
    cluster[controller].kill()
    survivors = [i for i in range(3) if i != controller]
    cluster.wait_for("a new controller", lambda: cluster.controller(via=cluster[survivors[0]]) not in (controller, -1))
    c = acl("TRANSACTIONAL_ID", "tx", "WRITE", "User:bob")
    cluster.admin("/admin/v1/acls", "POST", {"acls": [c]}, via=cluster[survivors[0]])
    deleted = cluster.admin("/admin/v1/acls/delete", "POST", {"filters": [{"resourceName": "orders"}]},
                            via=cluster[survivors[1]])["results"]
    assert deleted == [{"error": None, "deleted": [a]}]
    everywhere(cluster, [b, c], survivors, "the ACLs changed after the failover")

    cluster[controller].start()  # the broker that was controller, restarted: it reads the ACLs from the log
    everywhere(cluster, [b, c], [0, 1, 2], "the ACLs on the restarted broker")


def test_brokers_whose_right_is_an_acl_replicate_and_register_after_a_restart(cluster_factory) -> None:
    cluster = cluster_factory(3, settings={
        "authorizer.class.name": KELP_AUTHORIZER, "allow.everyone.if.no.acl.found": True})
    anonymous = "User:ANONYMOUS"
    grants = [acl("CLUSTER", "kafka-cluster", op, anonymous) for op in ("CLUSTER_ACTION", "ALTER", "CREATE")]
    grants += [acl("TOPIC", "*", "ALL", anonymous), acl("GROUP", "*", "ALL", anonymous)]
    results = cluster.admin("/admin/v1/acls", "POST", {"acls": grants})["results"]
    assert all(r == {"error": None} for r in results)
    everywhere(cluster, grants, [0, 1, 2], "the brokers' ACLs")
    cluster.admin("/admin/v1/topics", "POST", {"name": "replicated", "partitions": 2, "replication_factor": 3})
    cluster.admin("/topics/replicated", "POST", {"records": [{"value": i} for i in range(20)]})
    cluster.wait_fully_replicated("replicated")
    follower = next(i for i in range(3) if i != cluster.controller())
    cluster[follower].kill()
    cluster.admin("/topics/replicated", "POST", {"records": [{"value": i} for i in range(20)]})
    # Restarted without the bootstrap default: the controller's /cluster/v1 deliveries that register it are
    # authorized only by the ACLs it loads from the log at start (an empty authorizer would refuse them).
    cluster[follower].settings["allow.everyone.if.no.acl.found"] = False
    cluster[follower].start()
    cluster.wait_fully_replicated("replicated", timeout=60)
    # taking the right away stops what needs it: a user without ALTER on the cluster can no longer add ACLs
    cluster.admin("/admin/v1/acls/delete", "POST", {"filters": [{"resourceType": "CLUSTER", "operation": "ALTER"}]})
    refused = cluster.wait_for("ALTER on the cluster to be gone", lambda: _status(cluster, grants[0]) == 403)
    assert refused


def _status(cluster: Cluster, body: dict) -> int:
    import urllib.error

    from tests.support.cluster import http_json

    try:
        http_json(cluster.any_http() + "/admin/v1/acls", "POST", {"acls": [body]})
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code
