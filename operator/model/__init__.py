"""The shapes the operator reads and writes, and the status it computes from what it observed.

Kubernetes kinds (`objects`), Kelp's custom resources (`objects_kelp`) and a Cluster's spec settings
(`objects_cluster_spec`) as the CRDs define them, the NetworkPolicy (`objects_network`), the brokers'
admin API answers (`admin_types`), and `status`, which turns observations into those resources' status.
Pure: types and functions of their arguments; the floor every other part of the operator stands on.
"""
