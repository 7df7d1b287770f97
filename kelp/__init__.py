"""Kelp: a Kafka-compatible streaming platform in Python.

The `kelp` import root holds the user-facing library (CLI, config, the
RecordBatch codec); the broker server is `kelp.broker` (directory `broker/`)
and the Kubernetes operator is `kelp.operator` (directory `operator/`).
"""

__version__ = "0.1.0"
