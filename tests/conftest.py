"""Fixtures shared by every test tier live in their tier's conftest; this file
only makes the repository root importable for helpers under tests/ and
registers the shared broker-process fixtures (`broker`, `broker_factory`,
`cluster_factory`)."""

import pytest

pytest_plugins = ["tests.support.broker_process", "tests.support.cluster"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Expose each phase's report on the item (`item.rep_call`) so fixtures can dump logs on failure."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


KUBE_TIER = "tests/kube/"
# Modules whose tests must run on one worker, in file order: test_zz_every_v3_route_was_validated checks what the
# tests before it validated.
ONE_WORKER_MODULES = ("tests/http/test_rest_v3.py",)


# Modules that make network namespaces (`ip netns add` / `ip netns exec`) run in the kube tier's unit, before it:
# run beside the kubelet they broke its pod teardown. `ip netns add` bind-mounts /run/netns over itself, hiding
# the CNI namespaces containerd had mounted there, and containerd's unlink of such a pod's namespace then failed
# with EBUSY for as long as the chaos brokers lived (a pod stuck deleting; a kube churn test timed out at 300 s).
NETNS_MODULES = ("tests/chaos/test_chaos_short.py", "tests/chaos/test_topology.py")


# The Spark tier runs on one worker too: one SparkSession (a JVM whose start costs more than most tests) and one
# broker per module, where split between the workers it started both twice.
SPARK_TIER = "tests/spark/"


def _work_unit(nodeid: str) -> str:
    """The unit pytest-xdist hands to one worker: the kube tier (with NETNS_MODULES), the Spark tier, a module
    of ONE_WORKER_MODULES, or one test."""
    if nodeid.startswith(KUBE_TIER) or nodeid.split("::", 1)[0] in NETNS_MODULES:
        return KUBE_TIER
    if nodeid.startswith(SPARK_TIER):
        return SPARK_TIER
    module = nodeid.split("::", 1)[0]
    return module if module in ONE_WORKER_MODULES else nodeid


# Modules that hold the suite's longest tests (JVMs, three-broker clusters, broker kills), longest first, from
# `--durations` of full `make test` runs. The scheduler hands their tests out before all others so that the two
# workers end on short tests and finish together: in collection order the suite ended on tests/transactions'
# 20-50 s tests, one worker idle meanwhile. A module missing here only runs later; none is left out.
SLOW_FIRST = (
    "tests/transactions/test_coordinator_failover.py", "tests/tools/test_kafka_tools.py",
    "tests/transactions/test_group_transact.py", "tests/transactions/test_exactly_once_system.py",
    "tests/replication/test_cluster_replication.py",
    "tests/connect/test_connect_exactly_once.py", "tests/bench/test_sections_bench.py",
    "tests/schema_registry/test_large_schema.py", "tests/tools/test_java_codecs.py",
    "tests/bench/test_rebalance_bench.py", "tests/groups/test_offsets_topic_bounded.py",
    "tests/cli/test_dev_cluster.py", "tests/tools/test_kafka_tools_scram.py",
    "tests/broker/test_client_quotas_wire.py", "tests/tools/test_kafka_reassign_throttle.py",
    "tests/tools/test_kafka_acls.py", "tests/tools/test_kafka_transactions.py", "tests/connect/test_mirror_maker.py",
    "tests/replication/test_cluster_acls.py",
    "tests/groups/test_offsets_v10_java.py", "tests/groups/test_share_clients.py",
    "tests/authorization/test_authenticated_acls.py", "tests/groups/test_consumer_protocol_clients.py",
    "tests/groups/test_committed_offsets.py", "tests/replication/test_secure_cluster.py",
    "tests/replication/test_partition_memory.py",
)


def _unit_rank(unit: str) -> int:
    """Where a work unit goes in the queue: the kube tier first (the longest unit), the Spark tier second (the
    next longest: the other worker takes it while the first runs the kube tier), then the SLOW_FIRST modules in
    their order, then every other unit in collection order (the sort is stable)."""
    if unit in (KUBE_TIER, SPARK_TIER):
        return -2 if unit == KUBE_TIER else -1
    module = unit.split("::", 1)[0]
    return SLOW_FIRST.index(module) if module in SLOW_FIRST else len(SLOW_FIRST)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`make test` runs two pytest-xdist workers; this decides what goes to one worker together.

    Why: tests/kube shares one control plane per session (one kubelet, one CNI bridge), so the tier must not be
    split between workers; it is the largest unit (sent first) and mostly waits on the kubelet, so the other
    worker works through the rest of the suite meanwhile: the Spark tier (one unit, one SparkSession), then test
    by test, the SLOW_FIRST modules first. (xdist's own
    `--dist loadgroup` cannot be used: it tags node ids, which pytest 9's structured node ids ignore.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class KelpScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            if not self.ordered:  # the queue is complete before the first unit leaves it
                self.ordered = True
                units = sorted(self.workqueue.items(), key=lambda unit: _unit_rank(unit[0]))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)  # type: ignore[arg-type]  # xdist's WorkerController

    return KelpScheduling(config, log)  # type: ignore[arg-type]  # xdist's Producer
