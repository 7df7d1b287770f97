"""A secured Cluster's rules, pure: its listeners' Kafka security keys, its CAs, KelpUsers' parts.

`listener_security` turns `spec.listeners.kafka` and `spec.authorization` into the brokers' keys;
`certificates` makes and reads X.509; `pki` decides from the Secrets and the clock which CA or leaf
to issue, keep or rotate; `user_builders` turns a KelpUser into its name, principal, ACLs and SCRAM
credential. No Kubernetes client, no network: the reconcilers that apply them are in `reconcile/`
(`cluster_tls`, `users`).
"""
