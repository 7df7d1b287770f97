"""The operator's one door to the Kubernetes API, and the claim that lets it through.

`client` (`KubeClient`: server-side apply, get, list, delete, each answer typed; over `kelp.kube.api`,
shared with the brokers), `leadership` (the active replica's Lease, asked before every write) and
`events` (the Events each decision leaves). The rest of the operator reaches Kubernetes only here.
"""
