"""The Kelp Kubernetes operator (kopf), importable as `kelp.operator`.

It reconciles Cluster, Topic, ConsumerGroup and KelpUser custom resources
into broker StatefulSets, topics, groups and users (design §8,
docs/operator.md). Its subpackages are its roles, each importing only those
listed before it:

- `model/`: the types of what it reads and writes (Kubernetes objects, the
  CRDs' spec and status, the brokers' admin answers) and `status`;
- `security/`: the listeners' Kafka security keys, the CAs and their
  rotation, KelpUsers' credentials and ACLs (pure);
- `manifests/`: `spec` (a Cluster spec with defaults, validated by the
  broker's own config validator) and the builders of every child (pure);
- `plans/`: partition moves and the rolling-restart rule (pure);
- `kube/`: the one Kubernetes client (over `kelp.kube`), writes guarded by
  `leadership`, and Events;
- `reconcile/`: one pass per resource (`cluster`, `topics`, `groups`,
  `users`, with `scaling`, `rolling`, `storage`...), `brokers` (the brokers'
  admin API), `runner` (one pass per object at a time), `resync`;
- `handlers` (kopf's events) and `run` (`kelp operator`, Lease election).
"""
