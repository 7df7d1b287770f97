"""The Kelp Kubernetes operator (kopf), importable as `kelp.operator`.

It reconciles Cluster, Topic and ConsumerGroup custom resources into broker
StatefulSets (design §8). Pure manifest builders live apart from the thin
layer that talks to the Kubernetes API. Not built yet: this package only
reserves the name so the layout is honest from the first commit.
"""
