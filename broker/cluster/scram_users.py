"""SCRAM users as both doors see them: AlterUserScramCredentials / DescribeUserScramCredentials and `/admin/v1/users`.

Why: `kafka-configs --entity-type users` (the Kafka API) and the admin API's user routes (the operator's door)
change and describe the same credentials, with the same rules; each door only translates its request into
these calls. A change arrives as Kafka's AlterUserScramCredentials carries it — salt and salted password —
and is turned here, on the broker that received it, into the stored credential (ScramControlManager
.finishUpsertion's StoredKey and ServerKey), so only the credential goes to the controller
(`controller.scram_admin.alter_scram_credentials`), and the caller gets its answer once this broker applied it. What the
controller would refuse per user (an unknown mechanism, iterations out of range, an empty name or salt, a
(user, mechanism) named twice) is answered here first with Kafka's codes and messages; the rest the
controller decides. Describing reads this broker's image, as Kafka's brokers answer from theirs.

Nothing here keeps a salted password beyond deriving the keys, or logs one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from kelp.errors import ErrorCode
from kelp.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramError,
    ScramMechanism,
    credential_from_salted_password,
)

from ..metadata.image import MetadataImage
from ..metadata.scram_credentials import record_of
from .controller.scram_admin import ScramAnswer, ScramUserResult
from .member import ClusterMember

__all__ = ["SaltedUpsertion", "UserCredentials", "alter_user_scram_credentials", "describe_user_scram_credentials"]


@dataclass(frozen=True)
class SaltedUpsertion:
    """One credential to set, as AlterUserScramCredentials sends it. The salted password is not in the repr."""

    name: str
    mechanism: str
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True)
class UserCredentials:
    """DescribeUserScramCredentials' result for one user: (mechanism, iterations) pairs, or an error."""

    name: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    credentials: tuple[tuple[ScramMechanism, int], ...] = ()


def _local_error(upsertion: SaltedUpsertion) -> tuple[int, str] | None:
    try:
        ScramMechanism.from_name(upsertion.mechanism)
    except ScramError:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {upsertion.mechanism[:64]}"
    if not upsertion.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not upsertion.salt or not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "An empty salt or salted password is not a credential"
    return None


async def alter_user_scram_credentials(cluster: ClusterMember, *, upsertions: Sequence[SaltedUpsertion] = (),
                                       deletions: Sequence[tuple[str, str]] = ()) -> list[ScramUserResult]:
    """Set and delete credentials (deletions are (user, mechanism)); one result per user, in the order first named."""
    order: list[str] = []
    errors: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, str]] = set()
    for user, mechanism in [*deletions, *((u.name, u.mechanism) for u in upsertions)]:
        if user not in order:
            order.append(user)
        if (user, mechanism) in seen:
            errors.setdefault(user, (ErrorCode.DUPLICATE_RESOURCE,
                                     "A user credential cannot be altered twice in the same request"))
        seen.add((user, mechanism))
    for upsertion in upsertions:
        problem = _local_error(upsertion)
        if problem is not None:
            errors.setdefault(upsertion.name, problem)
    for user, mechanism in deletions:
        try:
            ScramMechanism.from_name(mechanism)
        except ScramError:
            errors.setdefault(user, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mechanism[:64]}"))
    send_upsertions: list[dict[str, str | int]] = []
    for u in upsertions:
        if u.name in errors:
            continue
        credential = credential_from_salted_password(ScramMechanism.from_name(u.mechanism), u.salt,
                                                     u.salted_password, u.iterations)
        record = record_of(u.name, credential)
        send_upsertions.append({"name": u.name, "mechanism": u.mechanism, "salt": record["salt"],
                                "stored_key": record["stored_key"], "server_key": record["server_key"],
                                "iterations": u.iterations})
    send_deletions = [{"name": user, "mechanism": mechanism} for user, mechanism in deletions if user not in errors]
    decided: dict[str, ScramUserResult] = {}
    if send_upsertions or send_deletions:
        answer = cast(ScramAnswer, await cluster.routing.call("alter_scram_credentials", upsertions=send_upsertions,
                                                      deletions=send_deletions))
        decided = {result["user"]: result for result in answer["results"]}
    out: list[ScramUserResult] = []
    for user in order:
        if user in errors:
            out.append({"user": user, "error_code": errors[user][0], "error_message": errors[user][1]})
        else:
            out.append(decided.get(user, {"user": user, "error_code": ErrorCode.NONE, "error_message": None}))
    return out


def describe_user_scram_credentials(image: MetadataImage, users: Sequence[str] | None) -> list[UserCredentials]:
    """Every user with a credential (None or no names), else the users named, as Kafka answers: a user without
    credentials is RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE."""
    table: dict[str, list[tuple[ScramMechanism, int]]] = {}
    for (user, _mechanism), credential in sorted(image.scram_credentials.items()):
        table.setdefault(user, []).append((credential.mechanism, credential.iterations))
    if not users:
        return [UserCredentials(user, credentials=tuple(found)) for user, found in sorted(table.items())]
    out: list[UserCredentials] = []
    counted = {name: list(users).count(name) for name in users}
    for name in dict.fromkeys(users):
        if counted[name] > 1:
            out.append(UserCredentials(name, ErrorCode.DUPLICATE_RESOURCE,
                                       "Cannot describe SCRAM credentials for the same user twice in a single "
                                       "request"))
        elif name not in table:
            out.append(UserCredentials(name, ErrorCode.RESOURCE_NOT_FOUND,
                                       "Attempt to describe a user credential that does not exist"))
        else:
            out.append(UserCredentials(name, credentials=tuple(table[name])))
    return out
