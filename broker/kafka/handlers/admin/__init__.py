"""The administration APIs' handlers: what `kafka-topics`, `kafka-configs`, `kafka-acls` and AdminClient ask.

Why a package of its own: these handlers change or describe the cluster (topics, configs, ACLs, SCRAM users,
quotas, reassignments, log directories, records' deletion, producers) through the controller and the metadata
log; none is on a client's produce or fetch path. Importing this package registers them all, plainly, as the
handlers package does for the rest (a module that fails to import fails the broker's start).
"""

from __future__ import annotations

from . import (  # noqa: F401  (imported for their registrations)
    acls,
    configs,
    describe,
    log_admin,
    producers,
    quotas,
    reassignments,
    topics,
    users,
)
