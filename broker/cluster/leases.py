"""Leases: broker liveness and controller election, one interface, two backends.

Why: a broker proves it is alive by renewing its own lease
(`kelp-<cluster>-broker-<id>`, the counterpart of ZooKeeper's ephemeral
`/brokers/ids/N`); brokers compete for `kelp-<cluster>-controller`, and the
holder is the controller. The number of holder changes (`transitions`) is the
controller epoch that fences a deposed controller.

CONTRACT (implemented by FileLeaseBackend here and KubeLeaseBackend in
`kube_leases.py`; the elector logic is backend-independent):

- `LeaseRecord` is what a backend read: holder identity (None = released),
  times in epoch milliseconds, duration, transitions, free-form string
  annotations (brokers publish their endpoints there), and an opaque
  `version` used as the write precondition.
- `LeaseBackend.get(name) -> LeaseRecord | None`, `list(prefix) ->
  [LeaseRecord]`, `create(record) -> LeaseRecord` (raises LeaseConflict if it
  exists), `update(record) -> LeaseRecord` (precondition: record.version is
  the stored version, else LeaseConflict), `delete(name)`. All async; file and
  network I/O never run on the event loop.
- `LeaseElector` implements client-go's tryAcquireOrRenew on top of a
  backend with *observed-time* expiry (a record counts as expired when it has
  not changed for its duration as seen by this process's monotonic clock), so
  clock skew between machines never hands a lease to two holders.
"""
