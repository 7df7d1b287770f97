"""Kubernetes access shared by the broker and the operator (`kelp.kube`).

Why a package of its own: the broker's Kubernetes backends (Leases, the
metadata log's ConfigMaps, the node's rack label) and the operator talk to the
same API server through the same JSON helper, and the operator must not reach
into the broker's internals to do it. So the helper (`api`) and the Lease
backend both elect through (`leases`, over `kelp.leases`) live here, beside
both and importing neither: tests/layout/test_layers.py keeps `kelp.kube`
free of `kelp.broker` and `kelp.operator`.
"""
