"""The Kelp Kubernetes operator (kopf), importable as `kelp.operator`.

It reconciles Cluster, Topic and ConsumerGroup custom resources into broker
StatefulSets and topics (design §8, docs/operator.md). The layout keeps the
pure parts apart from the parts that talk to the world:

- pure: `spec` (a Cluster spec with defaults, validated by the broker's own
  config validator), `builders` (manifests), `status` (status and conditions);
- thin I/O: `kube` (the one Kubernetes client), `brokers` (the brokers'
  admin API);
- decisions: `reconcile`; wiring: `handlers` (kopf events), `resync` (the
  periodic pass); process: `run` (`kelp operator`, Lease election).
"""
