"""Kelp's end-to-end suite: a real Kubernetes cluster (kind, or any kubeconfig).

Not part of `make test` (pyproject's testpaths is tests/); run it with
`make e2e`. See e2e/README.md.
"""
