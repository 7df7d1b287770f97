"""Consumer-protocol (KIP-848) groups are visible through every door (issue 36): the classic DescribeGroups
answers for them as Kafka 4 does (`Dead` without error below v6; from v6 GROUP_ID_NOT_FOUND "Group G is not a
classic group.", and "Group G not found." for a group that does not exist), and `kelp groups list|describe`,
`/admin/v1/groups` and REST v3 `consumer-groups` show them with their type, members, epochs and assignments;
resetting offsets is refused while they have members."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from kelp.broker.kafka.messages import ConsumerGroupHeartbeatRequest
from kelp.cli.main import main
from tests.authorization.harness import InProcessBroker

from .test_clients_share_partitions import create_topic

G = "cg-visible"


async def test_classic_describe_of_a_consumer_group_answers_as_kafka_4(tmp_path: Path) -> None:
    async with InProcessBroker(tmp_path, **{"offsets.topic.num.partitions": 1}) as b:
        await b.parts.topics.create_topic("vis", 2, 1)
        for _ in range(250):
            await b.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[G]), 4)
            if b.parts.groups.check_group(G) == 0:
                break
            await asyncio.sleep(0.02)
        hb = ConsumerGroupHeartbeatRequest(group_id=G, member_id="m1", member_epoch=0, rebalance_timeout_ms=30000,
                                           subscribed_topic_names=["vis"], topic_partitions=[])
        assert (await b.call(hb, 1)).error_code == 0
        req = DescribeGroupsRequest(groups=[G, "nobody"], include_authorized_operations=False)
        old = await b.call(req, 5)
        assert [(g.error_code, g.group_state, g.protocol_type, g.members) for g in old.groups] == [
            (0, "Dead", "", []), (0, "Dead", "", [])]
        new = await b.call(req, 6)
        assert [(g.error_code, g.error_message, g.group_state) for g in new.groups] == [
            (69, f"Group {G} is not a classic group.", "Dead"), (69, "Group nobody not found.", "Dead")]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.mark.timeout(120)
def test_kelp_groups_and_rest_v3_show_consumer_protocol_groups(group_broker, capsys) -> None:
    from confluent_kafka import Consumer, Producer

    bs, url = group_broker.bootstrap, group_broker.http_url
    create_topic(bs, "vis", 2)
    p = Producer({"bootstrap.servers": bs})
    for i in range(6):
        p.produce("vis", value=b"x", partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bs, "group.id": G, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["vis"])
    try:
        got, deadline = 0, time.monotonic() + 60
        while got < 6:
            assert time.monotonic() < deadline, f"consumed {got}"
            msg = c.poll(0.2)
            got += msg is not None and not msg.error()
        c.commit(asynchronous=False)

        assert main(["groups", "list", "--http", url, "--json"]) == 0
        listed = {g["group_id"]: g for g in json.loads(capsys.readouterr().out)}
        assert {"group_type": "consumer", "protocol_type": "consumer", "members": 1,
                "state": "Stable"}.items() <= listed[G].items()
        assert main(["groups", "describe", G, "--http", url, "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert (d["group_type"], d["state"], d["protocol"], len(d["members"])) == ("consumer", "Stable", "uniform", 1)
        m = d["members"][0]
        assert m["assignment"] == m["target_assignment"] == [{"topic": "vis", "partitions": [0, 1]}]
        assert m["member_epoch"] >= 1 and m["subscribed_topics"] == ["vis"]
        assert [(o["partition"], o["committed_offset"], o["member_id"]) for o in d["offsets"]] == [
            (0, 3, m["member_id"]), (1, 3, m["member_id"])]
        assert main(["groups", "describe", G, "--http", url]) == 0
        assert "Type: consumer" in capsys.readouterr().out
        code = main(["groups", "reset-offsets", G, "--http", url, "--topic", "vis", "--to-earliest", "--execute"])
        assert code == 1 and "active member" in capsys.readouterr().err

        cid = _get(url + "/v3/clusters")["data"][0]["cluster_id"]
        v3 = _get(f"{url}/v3/clusters/{cid}/consumer-groups/{G}")
        assert (v3["type"], v3["state"], v3["is_simple"], v3["partition_assignor"]) == (
            "CONSUMER", "STABLE", False, "uniform")
        consumers = _get(f"{url}/v3/clusters/{cid}/consumer-groups/{G}/consumers")["data"]
        assert [x["consumer_id"] for x in consumers] == [m["member_id"]]
        # a member id is any string (librdkafka's carry "/" at times): it is a path segment only percent-encoded
        member = urllib.parse.quote(m["member_id"], safe="")
        assert consumers[0]["assignments"]["related"].endswith(f"/consumers/{member}/assignments")
        assigned = _get(f"{url}/v3/clusters/{cid}/consumer-groups/{G}/consumers/{member}/assignments")
        assert sorted((a["topic_name"], a["partition_id"]) for a in assigned["data"]) == [("vis", 0), ("vis", 1)]
    finally:
        c.close()
