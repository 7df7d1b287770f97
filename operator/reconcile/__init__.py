"""Reconciliation: each resource brought to its spec, one pass at a time, and its status written.

`runner` runs one pass per object on the freshest view, `resync` the periodic pass over all of them;
`cluster` is one pass over a Cluster, calling `cluster_tls`, `listeners`, `dynamic_config`,
`storage`, `scaling`, `throttles` and `rolling`; `topics`, `groups` and `users` reconcile the other
resources; `resources` is what they share and `brokers` reaches the brokers' admin API. They decide
with `manifests/`, `plans/` and `security/`, and act through `kube/`.
"""
