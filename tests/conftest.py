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


def _work_unit(nodeid: str) -> str:
    """The unit pytest-xdist hands to one worker: the kube tier (with NETNS_MODULES), a module of
    ONE_WORKER_MODULES, or one test."""
    if nodeid.startswith(KUBE_TIER) or nodeid.split("::", 1)[0] in NETNS_MODULES:
        return KUBE_TIER
    module = nodeid.split("::", 1)[0]
    return module if module in ONE_WORKER_MODULES else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`make test` runs two pytest-xdist workers; this decides what goes to one worker together.

    Why: tests/kube shares one control plane per session (one kubelet, one CNI bridge), so the tier must not be
    split between workers; it is the largest unit (the scheduler sends the largest first) and mostly waits on the
    kubelet, so the other worker works through the rest of the suite meanwhile, test by test. (xdist's own
    `--dist loadgroup` cannot be used: it tags node ids, which pytest 9's structured node ids ignore.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class KelpScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    return KelpScheduling(config, log)  # type: ignore[arg-type]  # xdist's Producer
