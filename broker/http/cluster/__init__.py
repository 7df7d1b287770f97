"""The brokers' control plane over HTTP, `/cluster/v1`, and who may call it.

`routes.py` serves the controller's metadata deliveries and operations, and the replication admin they
drive; `trust.py` says which callers are this cluster's brokers.
"""
