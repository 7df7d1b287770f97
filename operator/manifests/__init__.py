"""Spec in, manifests out: a Cluster's spec read once, and the children it needs built from it.

`spec` reads a Cluster (the CRD's defaults, the broker's own config validator); `builders` builds the
StatefulSet, Services, ConfigMap, RBAC and disruption budget; `rack`, `network_policy` and
`tls_builders` the parts for rack awareness, the NetworkPolicy and the certificates' Secrets. Pure:
the same spec gives the same manifests; applying them is `reconcile/`'s, through `kube/`.
"""
