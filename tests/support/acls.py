"""An `AclManager` without an authorizer, for broker doubles that call Kafka handlers directly.

Every handler asks `ctx.broker.acls` what the request's principal may do; a broker without
`authorizer.class.name` allows everything, which is what handler tests of other behaviour need.
"""

from __future__ import annotations

from kelp.broker.acl_manager import AclManager
from kelp.config.broker import BrokerConfig


def open_acls() -> AclManager:
    return AclManager(BrokerConfig.load(env={}))
