"""Kelp's own Kafka-protocol client core: framing, connections, leader- and coordinator-following, retries.

Why it exists: Kelp speaks the Kafka protocol as a client in three places —
the Spark source and sink (`kelp.spark.wire`, blocking, in Spark's Python
workers), the replica fetcher (`kelp.broker.cluster.replica_fetcher`, asyncio,
on the broker's loop) and, with issue 22, REST consumers that are members of
groups other brokers coordinate (asyncio). Each had its own framing, timeouts
and retries; they now share this package:

- `framing`: a request to bytes, a reply's bytes to a response, both with
  kafka-python's schema classes (no codec is written here); the reply's size
  bound and correlation id checked first. Pure.
- `protocol`: `ClientProtocol`, the protocol of one connection with no I/O
  (the sans-I/O style of h11 and hyper's h2): requests and received bytes
  in, bytes to write and completed replies out — correlation ids and the
  requests in flight, framing, the SASL exchange, ApiVersions, and the name
  of every failure. Pure, tested with bytes alone.
- `BlockingConnection`, `AsyncConnection`: thin drivers over it (a socket
  with deadlines; an asyncio stream): one broker, one request in flight,
  connect and every request bounded by a deadline; any failure drops the
  connection and raises a `BrokerUnavailable` naming the broker.
- `ConnectionSecurity` (`security.py`, from Kafka's client properties with
  `connection_security`, read from a file by `read_client_properties`):
  TLS and SASL for a connection; the SASL exchange after connecting, PLAIN,
  SCRAM-SHA-256/512 and OAUTHBEARER, is `sasl.py`'s (pure), run by the
  protocol core for both connections, re-authenticating before the session
  the broker announced runs out (KIP-368).
- `ClusterMetadata` (pure), `RetryPolicy`/`Attempts` (pure): what a client
  knows of brokers, leaders and coordinators, and when to retry what.
- `BlockingClient`, `AsyncClient`: a cluster from bootstrap servers, requests
  to a partition's leader with metadata refresh on `LEADER_MOVED` answers,
  bounded; `AsyncClient.with_coordinator` follows a group's coordinator.

Why not a client library for these paths (checked against kafka-python
3.0.12, aiokafka 0.14.0 and confluent-kafka 2.16.1 / librdkafka):

- Replica fetching sends Fetch and OffsetForLeaderEpoch with `replica_id` set
  to this broker's id and appends the leader's record batches byte for byte.
  No consumer sets a replica id: kafka-python's fetcher leaves Fetch's at the
  schema default -1 and writes `replica_id=-1` in OffsetForLeaderEpoch,
  aiokafka writes -1 into its FetchRequest, librdkafka writes ReplicaId -1;
  and all of them unpack batches into one object per record (kafka-python's
  `ConsumerRecord`, confluent-kafka's `Message`). kafka-python's lower layer
  (`kafka.net`, new in 3.0 as internals) could carry a raw request, but it
  runs its own selector loop and I/O thread, not asyncio: the broker would
  bridge two event loops for one request at a time.
- The Spark source reads one exact offset range [start, end) of one
  partition per task and decodes whole batches straight into columns
  (`kelp.spark.codec`); a consumer prefetches past `end` and builds an
  object per record first. confluent-kafka is a C extension Kelp ships only
  for its tests, not to Spark executors.
- REST consumers (issue 22) are ordinary group members, where a consumer
  library fits best (Confluent's REST Proxy runs a Java consumer per
  instance). aiokafka would bring a second copy of the protocol codecs (its
  own `aiokafka.protocol`, independent of kafka-python) and its own
  connections and prefetching per instance; `broker/http/rest_v2/consumer_instance.py`
  drives join, sync, heartbeat and commits itself, and issue 22 chose this
  package for the wire: `broker/http/rest_v2/consumer_client.py` sends them with
  `AsyncClient.with_coordinator` and fetches from leaders with `AsyncClient`.

What it must never do: import the broker, the operator or Spark (a client
depends on the protocol, not on a server; `tests/layout` checks it), use a
client library's networking, wait without a timeout, or retry without bound.
"""

from .async_client import AsyncClient
from .async_connection import AsyncConnection
from .blocking_client import BlockingClient
from .blocking_connection import BlockingConnection
from .errors import (
    AuthenticationFailed,
    BadResponse,
    BrokerTimeout,
    BrokerUnavailable,
    ErrorResponse,
    KafkaClientError,
    RetriesExhausted,
)
from .metadata import ClusterMetadata, Node, PartitionInfo
from .retry import COORDINATOR_MOVED, LEADER_MOVED, Attempts, RetryPolicy
from .sasl import SaslCredentials
from .security import ConnectionSecurity, connection_security, read_client_properties

__all__ = [
    "AsyncClient", "AsyncConnection", "BlockingClient", "BlockingConnection",
    "KafkaClientError", "BrokerUnavailable", "BrokerTimeout", "BadResponse", "ErrorResponse", "RetriesExhausted",
    "ClusterMetadata", "Node", "PartitionInfo", "RetryPolicy", "Attempts", "LEADER_MOVED", "COORDINATOR_MOVED",
    "AuthenticationFailed", "SaslCredentials", "ConnectionSecurity", "connection_security",
    "read_client_properties",
]
