"""The Kelp Kubernetes operator (kopf), importable as `kelp.operator`.

It reconciles Cluster, Topic and ConsumerGroup custom resources into broker
StatefulSets and topics (design §8, docs/operator.md). The layout keeps the
pure parts apart from the parts that talk to the world:

- pure: `objects` and `admin_types` (the types of what the operator reads
  and writes: Kubernetes objects, the CRDs' spec and status, the brokers'
  admin answers), `spec` (a Cluster spec with defaults, validated by the
  broker's own config validator), `builders` (manifests), `status` (status
  and conditions), `plans` (partition moves), `restarts` (the rolling-restart
  rule);
- thin I/O: `kube` (the one Kubernetes client, writes guarded by
  `leadership`), `brokers` (the brokers' admin API), `events` (Events);
- decisions: `reconcile` (one Cluster pass) with `scaling`, `rolling`,
  `storage`; `topics`, `groups`; wiring: `runner` (one pass per object at a
  time), `handlers` (kopf events), `resync` (the periodic pass); process:
  `run` (`kelp operator`, Lease election).
"""
