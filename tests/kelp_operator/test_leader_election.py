"""After a roll, leadership goes back to the preferred replicas, and status reports leader skew (finding 8).

What a user relies on: a rolling restart leaves leadership piled on the
brokers that stayed up; once no pod is outdated any more the operator runs a
preferred-leader election (Kafka's auto.leader.rebalance.enable), waits for
preferred replicas still catching up, then stops; an election the
controller refuses is a Warning Event and is retried on the next pass;
`status.leaderSkew` and `status.preferredLeaderImbalance` show where
leadership stands.
"""

from __future__ import annotations

import asyncio

from kelp.operator.reconcile.brokers import AdminError
from kelp.operator.reconcile.cluster import reconcile_cluster
from kelp.operator.reconcile.resync import status_patch
from tests.kelp_operator.fakes import FakeAdmin, FakeKube, admin_of, broker_pod, resource, statefulset


def rolled_cluster(last_reason: str = "RollingRestart") -> tuple[dict, FakeKube, FakeAdmin]:
    """Every pod on the new revision; during the roll, brokers 0 and 1 took over broker 2's leaderships."""
    body = resource("Cluster", "demo", {"brokers": 3}, status={"conditions": [
        {"type": "Progressing", "status": "True", "reason": last_reason, "message": "restarting demo-0",
         "lastTransitionTime": "2026-11-01T00:00:00Z", "observedGeneration": 1}]})
    kube = FakeKube(body, statefulset("demo", 3, revision="rev-2"),
                    *(broker_pod("demo", n, revision="rev-2") for n in range(3)))
    admin = FakeAdmin(brokers=[0, 1, 2], controller=0, topics={"orders": [
        {"replicas": [0, 1, 2], "isr": [0, 1, 2], "leader": 0},
        {"replicas": [1, 2, 0], "isr": [1, 2, 0], "leader": 1},
        {"replicas": [2, 0, 1], "isr": [2, 0, 1], "leader": 0},
        {"replicas": [2, 1, 0], "isr": [1, 0], "leader": 1},  # broker 2 still catching up here
    ]})
    return body, kube, admin


def run(body: dict, kube: FakeKube, admin: FakeAdmin) -> tuple[dict, list[dict]]:
    status, conds = asyncio.run(reconcile_cluster(body, kube, admin_of(admin)))
    body["status"] = {**body["status"], **status_patch(body, (status, conds))}
    return status, conds


def progressing(conds: list[dict]) -> dict:
    return next(c for c in conds if c["type"] == "Progressing")


def elections(admin: FakeAdmin) -> int:
    return sum(1 for m, p, _ in admin.requests if (m, p) == ("POST", "/admin/v1/partitions/elect-leaders"))


def test_preferred_leaders_are_elected_once_the_roll_is_done() -> None:
    body, kube, admin = rolled_cluster()
    status, conds = run(body, kube, admin)
    # Seen before the election: broker 0 leads 2, broker 1 leads 2, broker 2 none.
    assert (status["leaderSkew"], status["preferredLeaderImbalance"]) == (2, 2)
    assert elections(admin) == 1 and admin.topics["orders"][2]["leader"] == 2
    p = progressing(conds)
    assert (p["reason"], p["status"]) == ("ElectingLeaders", "True") and "1 partition(s) wait" in p["message"]
    assert "leadership of 1 partition(s) moved back" in kube.events("PreferredLeaderElection")[0]["message"]

    # Broker 2 rejoins the ISR of orders-3: the next pass elects it, the one after is done.
    admin.topics["orders"][3]["isr"] = [1, 0, 2]
    status, conds = run(body, kube, admin)
    assert elections(admin) == 2 and admin.topics["orders"][3]["leader"] == 2
    assert progressing(conds)["reason"] == "ElectingLeaders"
    status, conds = run(body, kube, admin)
    assert elections(admin) == 2 and progressing(conds)["reason"] == "Reconciled"
    assert (status["leaderSkew"], status["preferredLeaderImbalance"]) == (1, 0)


def test_no_election_without_a_roll() -> None:
    body, kube, admin = rolled_cluster(last_reason="Reconciled")
    status, conds = run(body, kube, admin)
    assert elections(admin) == 0 and progressing(conds)["reason"] == "Reconciled"
    assert status["preferredLeaderImbalance"] == 2  # reported, not acted on


def test_the_election_waits_for_the_last_restarted_broker_to_come_back() -> None:
    # Found on the real kubelet: the last pod of the roll is on the new revision (so nothing is outdated) but its
    # broker has not registered yet; the election must wait for it rather than consider the roll settled.
    body, kube, admin = rolled_cluster()
    kube.put(broker_pod("demo", 2, revision="rev-2", ready=False))
    admin.brokers = [0, 1]
    for p in admin.topics["orders"]:
        p["isr"] = [r for r in p["isr"] if r != 2] or p["isr"]
    _, conds = run(body, kube, admin)
    assert progressing(conds)["reason"] == "ElectingLeaders" and elections(admin) == 0
    # Broker 2 is back and in sync: leadership returns to it.
    kube.put(broker_pod("demo", 2, revision="rev-2"))
    admin.brokers = [0, 1, 2]
    for p in admin.topics["orders"]:
        p["isr"] = list(p["replicas"])
    _, conds = run(body, kube, admin)
    assert elections(admin) == 1 and admin.topics["orders"][2]["leader"] == 2
    assert admin.topics["orders"][3]["leader"] == 2


def test_the_election_owed_by_a_roll_survives_a_pass_that_reported_something_else() -> None:
    # The roll's last restart marks the Cluster; a pass in between then reports another condition (here an
    # apply the API server refused) and the operator restarts: the election still runs once the roll is done.
    body, kube, admin = rolled_cluster(last_reason="ApplyRefused")
    assert elections(admin) == 0
    run(body, kube, admin)
    assert elections(admin) == 0, "no roll happened and nothing asked for an election"

    body, kube, admin = rolled_cluster(last_reason="RestartWaiting")
    kube.put(statefulset("demo", 3, revision="rev-3"))
    kube.put(broker_pod("demo", 2, revision="rev-2"))
    _, conds = run(body, kube, admin)  # the roll restarts demo-2 (highest ordinal, not the controller) and marks
    assert ("Pod", "demo-2") in kube.deleted
    marked = kube.objects[("Cluster", "ns", "demo")]["metadata"]["annotations"]
    assert marked.get("kelp.dev/elect-leaders") == "pending"
    body["metadata"]["annotations"] = dict(marked)
    body["status"]["conditions"] = [{**c, "reason": "ApplyRefused"} if c["type"] == "Progressing" else c
                                    for c in body["status"]["conditions"]]
    for n in range(3):
        kube.put(broker_pod("demo", n, revision="rev-3"))
    run(body, kube, admin)
    assert elections(admin) == 1 and admin.topics["orders"][2]["leader"] == 2


def test_the_mark_goes_once_no_election_can_help_and_a_user_may_set_it() -> None:
    body, kube, admin = rolled_cluster(last_reason="Reconciled")
    body["metadata"]["annotations"]["kelp.dev/elect-leaders"] = "pending"
    kube.put(body)
    for p in admin.topics["orders"]:
        p["isr"] = list(p["replicas"])
    _, conds = run(body, kube, admin)
    assert elections(admin) == 1 and admin.topics["orders"][3]["leader"] == 2
    body["metadata"]["annotations"] = dict(kube.objects[("Cluster", "ns", "demo")]["metadata"]["annotations"])
    _, conds = run(body, kube, admin)  # every partition on its preferred leader: the mark goes
    assert elections(admin) == 1 and progressing(conds)["reason"] == "Reconciled"
    assert "kelp.dev/elect-leaders" not in kube.objects[("Cluster", "ns", "demo")]["metadata"]["annotations"]


def test_a_refused_election_is_reported_and_retried() -> None:
    body, kube, admin = rolled_cluster()

    def refuse(method, path, body):
        if path == "/admin/v1/partitions/elect-leaders":
            raise AdminError(503, "POST /admin/v1/partitions/elect-leaders: the controller is moving")
    admin.fail = refuse
    _, conds = run(body, kube, admin)
    p = progressing(conds)
    assert (p["status"], p["reason"]) == ("True", "ElectingLeaders")
    assert "refused: POST /admin/v1/partitions/elect-leaders: the controller is moving" in p["message"]
    (event,) = kube.events("LeaderElectionFailed")
    assert event["type"] == "Warning" and "retried next pass" in event["message"]
    assert admin.topics["orders"][2]["leader"] == 0 and not kube.events("PreferredLeaderElection")
    # The controller answers again: the next pass elects.
    admin.fail = lambda method, path, body: None
    _, conds = run(body, kube, admin)
    assert elections(admin) == 2 and admin.topics["orders"][2]["leader"] == 2
    assert kube.events("PreferredLeaderElection")
