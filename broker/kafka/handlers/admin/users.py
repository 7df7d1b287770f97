"""AlterUserScramCredentials (v0) and DescribeUserScramCredentials (v0).

Why: `kafka-configs --bootstrap-server ... --entity-type users --entity-name alice --alter --add-config
'SCRAM-SHA-512=[password=...]'` sends AlterUserScramCredentials (the admin client salts the password; the
request carries salt and salted password), `--describe` sends DescribeClientQuotas and then
DescribeUserScramCredentials. The rules are `kelp.broker.cluster.scram_users`' (shared with the admin API's
`/admin/v1/users`); these handlers translate Kafka's requests and answers. DescribeClientQuotas is `quotas`'.

Authorization (Kafka's KafkaApis/ControllerApis): AlterUserScramCredentials needs ALTER on the cluster,
DescribeUserScramCredentials DESCRIBE; refused, each answers
CLUSTER_AUTHORIZATION_FAILED as Kafka's error responses do (every user named, or the whole request).
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)

from kelp.errors import ErrorCode
from kelp.security.scram import ScramError, ScramMechanism

from ....cluster.scram_users import SaltedUpsertion, alter_user_scram_credentials, describe_user_scram_credentials
from ...access import AclOperation, access, denied_message
from ..registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")


def _mechanism_name(code: int) -> str:
    """The mechanism of a type code (1: SCRAM-SHA-256, 2: SCRAM-SHA-512); an unknown one keeps its number."""
    try:
        return ScramMechanism.from_type(code).mechanism_name
    except ScramError:
        return f"UNKNOWN-{code}"


DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


# -- authorization: what Kafka checks for these APIs --------------------------------------------------------
def _may(ctx: RequestContext, operation: AclOperation) -> bool:
    return access(ctx).allows_cluster(operation)


@handles(AlterUserScramCredentialsRequest, min_version=0, max_version=0)
async def handle_alter_user_scram_credentials(ctx: RequestContext, request: AlterUserScramCredentialsRequest,
                                              ) -> AlterUserScramCredentialsResponse:
    R = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    if not _may(ctx, AclOperation.ALTER):
        why = denied_message(ctx, "AlterUserScramCredentials")
        users = sorted({u.name for u in request.upsertions or []} | {d.name for d in request.deletions or []})
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            R(user=u, error_code=DENIED, error_message=why) for u in users])
    upsertions = [SaltedUpsertion(u.name, _mechanism_name(u.mechanism), u.iterations, bytes(u.salt or b""),
                                  bytes(u.salted_password or b"")) for u in request.upsertions or []]
    deletions = [(d.name, _mechanism_name(d.mechanism)) for d in request.deletions or []]
    results = await alter_user_scram_credentials(ctx.broker.cluster, upsertions=upsertions, deletions=deletions)
    for result in results:
        if result["error_code"]:
            log.info("AlterUserScramCredentials for user %r from %s: error %d: %s", result["user"], ctx.client,
                     result["error_code"], result["error_message"])
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        R(user=r["user"], error_code=r["error_code"], error_message=r["error_message"]) for r in results])


@handles(DescribeUserScramCredentialsRequest, min_version=0, max_version=0)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request: DescribeUserScramCredentialsRequest,
                                                 ) -> DescribeUserScramCredentialsResponse:
    if not _may(ctx, AclOperation.DESCRIBE):
        why = denied_message(ctx, "DescribeUserScramCredentials")
        Refused = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
        return DescribeUserScramCredentialsResponse(
            throttle_time_ms=0, error_code=DENIED, error_message=why,
            results=[Refused(user="", error_code=DENIED, error_message=why, credential_infos=[])
                     for _ in request.users or []])
    names = None if request.users is None else [u.name for u in request.users]
    found = describe_user_scram_credentials(ctx.broker.cluster.state.image, names)
    R = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
    Info = R.CredentialInfo
    return DescribeUserScramCredentialsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
        results=[R(user=u.name, error_code=u.error_code, error_message=u.error_message,
                   credential_infos=[Info(mechanism=m.type_code, iterations=i) for m, i in u.credentials])
                 for u in found])
