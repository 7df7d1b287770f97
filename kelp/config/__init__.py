"""The broker's configuration (`kelp.config`): Kafka's keys, their parsers, the one validator, the listeners.

Why a package of the shared `kelp` root and not of `kelp.broker` (issue 35): the brokers load their config with
it, and the operator checks a Cluster's config with the very same rules before any pod starts, without
importing anything of the broker. It is pure: it reads the config file it is given and the files its values
name, never a socket.

- `broker`: `BrokerConfig` and the validators of dynamic broker configs and topic configs.
- `keys`, `listener_keys`: every key with its parser and default; the listener and security keys.
- `file`, `providers`: the config file in YAML or Java properties, and `${env:...}`/`${file:...}` values.
- `listeners`: the listeners resolved from the keys (`ListenerSetup`).
- `entries`: a described config's value, source and synonyms (DescribeConfigs, REST v3).
- `log_config`: a partition log's settings (`LogConfig`) from Kafka's topic keys.
"""
