"""The order `make test`'s two workers get their work in (tests/conftest.py's scheduler).

Why: the suite's wall time is the later worker's; in collection order the
suite ended on tests/transactions' 20-50 s tests, one worker idle while the
other finished them. The scheduler hands out the kube tier first, the Spark
tier (one SparkSession) second, then the SLOW_FIRST modules, then the rest,
so both workers end on short tests. These
tests drive the real scheduler class with stand-in workers, and check that
the list names modules that still exist (a renamed module would silently
fall back to collection order).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests import conftest

REPO = Path(__file__).resolve().parents[2]


class FakeWorker:
    """What xdist's scheduler calls on a worker: records the node ids sent to it, in order."""

    def __init__(self, name: str, collection: list[str]) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.collection = collection
        self.sent: list[str] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += [self.collection[i] for i in indices]

    def shutdown(self) -> None:
        self.shutting_down = True


def _run(collection: list[str]) -> list[str]:
    """Every node id in the order the scheduler hands them out, the two workers finishing tests in turn."""
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=True))
    scheduler = conftest.pytest_xdist_make_scheduler(config, SimpleNamespace(loadscopesched=print))
    workers = [FakeWorker("gw0", collection), FakeWorker("gw1", collection)]
    for w in workers:
        scheduler.add_node(w)
        scheduler.add_node_collection(w, collection)
    scheduler.schedule()
    order: list[str] = [nodeid for w in workers for nodeid in w.sent]
    done = {w.gateway.id: 0 for w in workers}
    while not scheduler.tests_finished:
        for w in workers:
            if done[w.gateway.id] < len(w.sent):
                before = len(w.sent)
                scheduler.mark_test_complete(w, collection.index(w.sent[done[w.gateway.id]]))
                done[w.gateway.id] += 1
                order += w.sent[before:]
    assert sorted(order) == sorted(collection), "every test is handed out exactly once"
    return order


def test_the_kube_and_spark_tiers_go_first_then_the_slow_modules_then_the_rest_in_collection_order() -> None:
    slow_a, slow_b = conftest.SLOW_FIRST[0], conftest.SLOW_FIRST[1]
    collection = ["tests/broker/test_a.py::test_1", "tests/broker/test_a.py::test_2",
                  f"{slow_b}::test_1", "tests/chaos/test_chaos_short.py::test_1",
                  "tests/http/test_b.py::test_1", f"{slow_a}::test_1", f"{slow_a}::test_2",
                  "tests/kube/test_k.py::test_1", "tests/kube/test_k.py::test_2",
                  "tests/spark/test_s.py::test_1", "tests/spark/test_t.py::test_1",
                  "tests/zz/test_last.py::test_1"]
    order = _run(collection)
    kube = ["tests/chaos/test_chaos_short.py::test_1", "tests/kube/test_k.py::test_1", "tests/kube/test_k.py::test_2"]
    spark = ["tests/spark/test_s.py::test_1", "tests/spark/test_t.py::test_1"]
    assert order[:5] == kube + spark, "the kube tier (with the netns modules) first, then the Spark tier, each whole"
    rest = order[5:]
    assert rest == [f"{slow_a}::test_1", f"{slow_a}::test_2", f"{slow_b}::test_1",
                    "tests/broker/test_a.py::test_1", "tests/broker/test_a.py::test_2",
                    "tests/http/test_b.py::test_1", "tests/zz/test_last.py::test_1"]


def test_every_slow_first_module_exists_once() -> None:
    assert len(set(conftest.SLOW_FIRST)) == len(conftest.SLOW_FIRST)
    missing = [m for m in conftest.SLOW_FIRST if not (REPO / m).is_file()]
    assert not missing, f"SLOW_FIRST names modules that no longer exist: {missing}"
