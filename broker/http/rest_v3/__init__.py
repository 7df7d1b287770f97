"""Confluent REST v3, `/v3/clusters/...`: the cluster, brokers, topics and partitions, configs, replicas,
consumer groups, records (produce) and ACLs, in the resource shapes of `views.py`.
"""
