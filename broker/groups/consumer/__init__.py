"""KIP-848 consumer groups (`group.protocol=consumer`): the broker assigns partitions and members reconcile.

Why a subpackage: the consumer protocol shares only the ownership of `__consumer_offsets` partitions and the
offsets store with the classic protocol (`..membership`); its state (member and group epochs, target and
current assignments), its assignors and its reconciliation rules are its own. `assignors` (uniform, range),
`model` (the group, its members and the reconciliation step), `heartbeat` (the request, its answer and
validation) and `coordinator` (`ConsumerGroups`, attached to the classic coordinator as `.consumer`).
"""
