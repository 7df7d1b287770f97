"""A package whose `__init__` is deferred (`kelp.lazy_packages`) still gives every name it gave (issue 38).

Each case runs in a fresh interpreter (the test process has imported these packages long before). What must
hold: the protocol modules a broker uses import without kafka-python's clients; the first name asked of the
package that only its `__init__` defines runs it, once, in the same module object (a module holding
`import kafka` sees it), after submodules were imported and even while other threads ask at the same time;
`from kafka import codec` (a submodule) imports that submodule alone; an unknown name is an AttributeError; a
package imported already is left alone.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_kafka_protocol_without_its_clients_then_every_name_of_its_init() -> None:
    out = _run("""
        import sys, threading
        from kelp.lazy_packages import defer_init
        assert defer_init("kafka")
        import kafka
        from kafka.protocol.metadata import MetadataRequest
        from kafka import codec
        assert codec is sys.modules["kafka.codec"]
        assert "kafka.consumer" not in sys.modules and "kafka.admin" not in sys.modules, "init ran"
        got = []
        def ask():
            from kafka import KafkaConsumer, TopicPartition
            got.append((KafkaConsumer, TopicPartition))
        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads: t.start()
        for t in threads: t.join(60)
        assert len(got) == 4 and len({id(g[0]) for g in got}) == 1, got
        assert sys.modules["kafka"] is kafka and kafka.KafkaProducer.__module__ == "kafka.producer.kafka"
        assert kafka.__version__ and "__getattr__" not in vars(kafka)
        assert kafka.protocol.metadata.MetadataRequest is MetadataRequest
        try:
            kafka.no_such_name
        except AttributeError as exc:
            assert "no_such_name" in str(exc)
        else:
            raise AssertionError("an unknown name was found")
        print("ok")
    """)
    assert out.strip() == "ok"


@pytest.mark.parametrize("name, asked", [("prometheus_client", "REGISTRY"), ("crc32c", "__version__")])
def test_other_deferred_packages_answer_their_init_names(name: str, asked: str) -> None:
    out = _run(f"""
        import sys
        from kelp.lazy_packages import defer_init
        assert defer_init("{name}")
        import {name}
        assert getattr({name}, "{asked}") is not None
        assert not defer_init("{name}")  # imported: left as it is
        print("ok")
    """)
    assert out.strip() == "ok"
