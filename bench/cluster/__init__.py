"""The multi-broker sections of `make bench`: replication (acks=all on three replicas, failover), scaling
beyond one core (1, 2 and 4 brokers) and partition scale (10,000 partitions at RF 1, 3,000 at RF 3).

Why a package: each starts several Kelp brokers sharing a cluster directory (`replication.start_kelp_cluster`)
beside as many Kafka brokers; `sides.py` runs one or three brokers of each together for alternating runs, for
these and for the Kafka-tools and transactions sections. Each section runs alone as
`python -m bench.cluster.<module>`.
"""
