"""The cluster layer (`kelp.broker.cluster`): what turns one broker into a replicated cluster.

Leases (broker liveness and controller election), the metadata store, the
controller, partition placement, and replica fetching live here, each in a
module named for its role. Two backends for leases and the store: files in a
shared directory (clusters on one machine, `make run`) and Kubernetes objects
(Lease, ConfigMap). This package must never import `kelp.broker.kafka` or
`kelp.broker.http` handlers: they call into it, not the other way round.
"""
