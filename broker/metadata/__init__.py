"""The cluster metadata as a pure model (`kelp.broker.metadata`): the records, the image, and the rules over them.

Why a package of its own: every broker replays the same metadata log into the same image, and the controller
decides over that image; both must agree on one model that can be read, tested and reasoned about without a
lease, a store, a socket or an event loop — KRaft keeps its image, delta and records apart in the same way.
Here: the model's values (`model`), the log's documents (`records`), the image and the delta a step makes
(`image`), SCRAM credentials and client quotas as the image holds them (`scram_credentials`, `client_quotas`),
the controller's pure decisions (`elections`, `placement`) and the shapes of its answers (`controller_answers`).
The runtime that writes, stores, delivers and fetches is `kelp.broker.cluster`'s. This package does no I/O and
imports nothing of that runtime (tests/layout/test_layers.py checks it).
"""
