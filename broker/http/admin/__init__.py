"""The admin API, `/admin/v1`: what the CLI and the operator manage a cluster with, as JSON.

`topics.py` topics, partitions, their configs, the brokers and their dynamic configs; `groups.py`
consumer groups; `transactions.py` transactions and partitions' producers; `users.py` SCRAM users;
`acls.py` ACLs. The replication admin (reassignments, elections, decommissioning) is served with the
control plane it drives, in `cluster/routes.py`.
"""
