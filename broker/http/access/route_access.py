"""What an HTTP request's principal may do: one table, route by route, with the ACLs the Kafka listeners use.

Why: the admin API and the REST proxy do what Kafka APIs do (create a topic, read records, reset a group's
offsets), so they need what those APIs need, in Kafka's terms; the brokers' `/cluster/v1` control plane is
for brokers only. `RULES` says, for every route, the operations and the resource its path names (a topic, a
group, a transactional id, or the cluster), checked by `security_middleware` before the route runs — after
authentication (`authentication.HttpAuthenticator`, 401 when it fails), and answered 403 with Kafka's error
code and a message when refused. Where the resource is in the body or the answer is a list, the route asks itself with
the helpers here (`require`, `access_of`), and the table says so (`IN_ROUTE`): creating a topic (CREATE on the
cluster or the topic), listing topics, groups or transactions (only those the principal may DESCRIBE; every
group to DESCRIBE on the cluster), a group's offsets (only describable topics), a reset (READ on its topic), a
REST consumer's subscription, assignment and commits (READ on their topics). `/cluster/v1/...` is for brokers
only, with or without an authorizer (`cluster.trust`: the brokers' own identity, a super user, or CLUSTER_ACTION
on the cluster); a client, even a valid user, gets 403, and its caller is identified whenever it presents HTTP
Basic or a client certificate, whatever `http.authentication.methods` says. The Schema Registry's routes need
DESCRIBE on the cluster to read and ALTER on it to write. Without an authorizer every other authenticated
request is allowed, as in Kafka.

A route missing from the table is refused to everyone but super users once authorization is on (and
`tests/authorization` fails on it): a new route must say what it needs.

This module must never hold a decision of its own: they are the AclManager's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

from aiohttp import web
from aiohttp.typedefs import Handler

from kelp.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KelpError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from kelp.security.acl import AclOperation, ResourceType
from kelp.security.principal import ANONYMOUS, KafkaPrincipal, PrincipalMappingError

from ...acl_manager import Access, host_of_ip
from ..cluster.trust import ClusterTrust
from ..keys import BROKER
from ..problems import HttpProblem, error_response
from ..serving import still_starting
from .authentication import HttpAuthenticator, Unauthenticated

__all__ = ["security_middleware", "AUTHENTICATOR", "CLUSTER_TRUST", "PRINCIPAL", "FORWARDED_BY", "FORWARDED_PRINCIPAL",
           "forwarded_principal", "RULES", "Rule", "principal_of", "access_of",
           "require", "rule_for", "describable", "may_create_topic", "READ", "DESCRIBE", "DC", "TOPIC", "GROUP",
           "CLUSTER"]

AUTHENTICATOR = web.AppKey("kelp_http_authenticator", HttpAuthenticator)
CLUSTER_TRUST = web.AppKey("kelp_cluster_trust", ClusterTrust)
PRINCIPAL = web.RequestKey("kelp_principal", KafkaPrincipal)
# A REST consumer request another broker forwarded (`rest_v2.forwarding`): the forwarding broker's id, and the
# principal of a client it authenticated by certificate (percent-encoded), which only a broker may name.
FORWARDED_BY = "X-Kelp-Forwarded-By"
FORWARDED_PRINCIPAL = "X-Kelp-Forwarded-Principal"

READ = AclOperation.READ
R, W, C, D = READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE
A, DESCRIBE, CA = AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION
DC, AC = AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TXN_ID = ResourceType.TRANSACTIONAL_ID


@dataclass(frozen=True)
class Rule:
    """What a route needs: every one of `operations` on the resource its path names (`name_from`, a match_info
    key; the cluster when the type is CLUSTER). No operation: any authenticated principal (the route itself may
    check more). `creates`: a missing topic is created by the route, which then also needs CREATE."""

    operations: tuple[AclOperation, ...] = ()
    resource_type: ResourceType | None = None
    name_from: str | None = None
    creates: bool = False
    why: str = ""


def _topic(*ops: AclOperation, creates: bool = False) -> Rule:
    return Rule(ops, TOPIC, "topic", creates)


def _group(*ops: AclOperation) -> Rule:
    return Rule(ops, GROUP, "group")


def _txn(*ops: AclOperation) -> Rule:
    return Rule(ops, TXN_ID, "transactional_id")


def _cluster(*ops: AclOperation) -> Rule:
    return Rule(ops, CLUSTER)


OPEN = Rule(why="any authenticated principal (Kafka's Metadata and DescribeCluster need no ACL either)")


def _in_route(why: str) -> Rule:
    return Rule(why=why)


ADMIN, TOPICS, GROUPS, CONSUMER = "/admin/v1", "/admin/v1/topics/{topic}", "/admin/v1/groups", \
    "/consumers/{group}/instances/{instance}"
SUBJECT = "/subjects/{subject}"
V3 = "/v3/clusters/{cluster_id}"
V3_TOPIC, V3_GROUP = f"{V3}/topics/{{topic}}", f"{V3}/consumer-groups/{{group}}"
RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): OPEN, ("GET", "/readyz"): OPEN,
    ("GET", "/metrics"): _in_route("with an authorizer: a super user or a principal of http.metrics.principals"),
    # admin API: topics
    ("GET", f"{ADMIN}/topics"): _in_route("lists the topics the principal may DESCRIBE"),
    ("POST", f"{ADMIN}/topics"): _in_route("CREATE on the cluster or on the topic named in the body"),
    ("GET", TOPICS): _topic(DESCRIBE),
    ("DELETE", TOPICS): _topic(DESCRIBE, D),
    ("POST", f"{TOPICS}/partitions"): _topic(A),
    ("GET", f"{TOPICS}/configs"): _topic(DC),
    ("PUT", f"{TOPICS}/configs"): _topic(AC),
    ("PATCH", f"{TOPICS}/configs"): _topic(AC),
    ("POST", f"{TOPICS}/delete-records"): _topic(D),
    ("GET", f"{TOPICS}/partitions/{{partition}}/producers"): _topic(R),  # Kafka's DescribeProducers
    # admin API: transactions (Kafka's ListTransactions, DescribeTransactions)
    ("GET", f"{ADMIN}/transactions"): _in_route("lists the transactional ids the principal may DESCRIBE"),
    ("GET", f"{ADMIN}/transactions/{{transactional_id}}"): _txn(DESCRIBE),
    # admin API: brokers and the cluster
    ("GET", f"{ADMIN}/brokers"): OPEN,
    ("GET", f"{ADMIN}/cluster"): OPEN,
    ("GET", f"{ADMIN}/brokers/configs"): _cluster(DC),
    ("GET", f"{ADMIN}/brokers/{{broker_id}}/configs"): _cluster(DC),
    ("PATCH", f"{ADMIN}/brokers/configs"): _cluster(AC),
    ("PATCH", f"{ADMIN}/brokers/{{broker_id}}/configs"): _cluster(AC),
    ("POST", f"{ADMIN}/partitions/reassign"): _cluster(A),
    ("GET", f"{ADMIN}/partitions/reassignments"): _cluster(DESCRIBE),
    ("POST", f"{ADMIN}/partitions/elect-leaders"): _cluster(A),
    ("POST", f"{ADMIN}/controlled-shutdown"): _cluster(CA),
    ("GET", f"{ADMIN}/brokers/{{broker_id}}/decommission"): _cluster(DESCRIBE),
    ("POST", f"{ADMIN}/brokers/{{broker_id}}/decommission"): _cluster(A),
    ("DELETE", f"{ADMIN}/brokers/{{broker_id}}/decommission"): _cluster(A),
    # admin API: ACLs (Kafka's DescribeAcls, CreateAcls, DeleteAcls)
    ("GET", f"{ADMIN}/acls"): _cluster(DESCRIBE),
    ("POST", f"{ADMIN}/acls"): _cluster(A),
    ("POST", f"{ADMIN}/acls/delete"): _cluster(A),
    # admin API: SCRAM users (Kafka's DescribeUserScramCredentials DESCRIBE, AlterUserScramCredentials ALTER)
    ("GET", f"{ADMIN}/users"): _cluster(DESCRIBE),
    ("PUT", f"{ADMIN}/users/{{name}}/scram-credentials"): _cluster(A),
    ("DELETE", f"{ADMIN}/users/{{name}}/scram-credentials"): _cluster(A),
    # admin API: groups
    ("GET", GROUPS): _in_route("every group to DESCRIBE on the cluster, else those the principal may DESCRIBE"),
    ("GET", f"{GROUPS}/{{group}}"): _group(DESCRIBE),  # its offsets: only of topics the principal may DESCRIBE
    ("POST", f"{GROUPS}/{{group}}/reset-offsets"): _group(R),  # and READ on the topic (in the route)
    ("DELETE", f"{GROUPS}/{{group}}"): _group(D),
    # REST proxy v2
    ("POST", "/topics/{topic}"): _topic(W, creates=True),
    ("POST", "/topics/{topic}/partitions/{partition}"): _topic(W),
    ("GET", "/brokers"): OPEN,
    ("GET", "/topics"): _in_route("lists the topics the principal may DESCRIBE"),
    ("GET", "/topics/{topic}"): _topic(DESCRIBE),
    ("GET", "/topics/{topic}/partitions"): _topic(DESCRIBE),
    ("GET", "/topics/{topic}/partitions/{partition}"): _topic(DESCRIBE),
    ("GET", "/topics/{topic}/partitions/{partition}/records"): _topic(R),
    # REST consumers: a member of the group (READ on it); the topics it reads or commits need READ (in the route)
    ("POST", "/consumers/{group}"): _group(R),
    ("DELETE", CONSUMER): _group(R),
    ("POST", f"{CONSUMER}/subscription"): _group(R),
    ("GET", f"{CONSUMER}/subscription"): _group(R),
    ("DELETE", f"{CONSUMER}/subscription"): _group(R),
    ("GET", f"{CONSUMER}/records"): _group(R),
    ("POST", f"{CONSUMER}/offsets"): _group(R),
    ("GET", f"{CONSUMER}/offsets"): _group(R),
    ("POST", f"{CONSUMER}/assignments"): _group(R),
    ("GET", f"{CONSUMER}/assignments"): _group(R),
    ("POST", f"{CONSUMER}/positions"): _group(R),
    ("POST", f"{CONSUMER}/positions/beginning"): _group(R),
    ("POST", f"{CONSUMER}/positions/end"): _group(R),
    # Schema Registry (Confluent's API; Confluent authorizes it with its own RBAC, Kelp with Kafka's cluster ACLs):
    # reading schemas, levels and modes, and checking a schema (lookup, compatibility), needs DESCRIBE on the
    # cluster; registering, deleting and changing levels or modes needs ALTER on the cluster (super users may).
    **{("GET", path): _cluster(DESCRIBE) for path in (
        "/subjects", f"{SUBJECT}/versions", f"{SUBJECT}/versions/{{version}}", f"{SUBJECT}/versions/{{version}}/schema",
        f"{SUBJECT}/versions/{{version}}/referencedby", "/schemas/ids/{id}", "/schemas/ids/{id}/schema",
        "/schemas/ids/{id}/versions", "/schemas/ids/{id}/subjects", "/schemas/types", "/config",
        "/config/{subject}", "/mode", "/mode/{subject}", "/schemas", "/contexts", "/v1/metadata/id",
        f"{SUBJECT}/metadata")},
    ("GET", "/"): OPEN,  # the registry's root: an empty object, no schema data
    ("POST", SUBJECT): _cluster(DESCRIBE),
    ("POST", "/compatibility/subjects/{subject}/versions"): _cluster(DESCRIBE),
    ("POST", "/compatibility/subjects/{subject}/versions/{version}"): _cluster(DESCRIBE),
    ("POST", f"{SUBJECT}/versions"): _cluster(A),
    ("DELETE", f"{SUBJECT}/versions/{{version}}"): _cluster(A),
    ("DELETE", SUBJECT): _cluster(A),
    **{(method, path): _cluster(A) for method in ("PUT", "DELETE")
       for path in ("/config", "/config/{subject}", "/mode", "/mode/{subject}")},
    # Confluent REST v3: what the v2 and admin routes doing the same need
    ("GET", "/v3/clusters"): OPEN,
    ("GET", V3): OPEN,
    ("GET", f"{V3}/brokers"): OPEN,
    ("GET", f"{V3}/brokers/{{broker_id}}"): OPEN,
    ("GET", f"{V3}/topics"): _in_route("lists the topics the principal may DESCRIBE"),
    ("POST", f"{V3}/topics"): _in_route("CREATE on the cluster or on the topic named in the body"),
    ("GET", V3_TOPIC): _topic(DESCRIBE),
    ("DELETE", V3_TOPIC): _topic(DESCRIBE, D),
    ("PATCH", V3_TOPIC): _topic(A),  # Kafka's CreatePartitions
    ("GET", f"{V3_TOPIC}/configs"): _topic(DC),
    ("GET", f"{V3_TOPIC}/configs/{{name}}"): _topic(DC),
    ("PUT", f"{V3_TOPIC}/configs/{{name}}"): _topic(AC),
    ("DELETE", f"{V3_TOPIC}/configs/{{name}}"): _topic(AC),
    ("POST", f"{V3_TOPIC}/configs:alter"): _topic(AC),
    ("GET", f"{V3}/topics/-/configs"): _in_route("the configs of the topics the principal may DESCRIBE_CONFIGS"),
    ("GET", f"{V3_TOPIC}/partitions"): _topic(DESCRIBE),
    ("GET", f"{V3_TOPIC}/partitions/{{partition}}"): _topic(DESCRIBE),
    ("GET", f"{V3_TOPIC}/partitions/{{partition}}/replicas"): _topic(DESCRIBE),
    ("GET", f"{V3_TOPIC}/partitions/{{partition}}/replicas/{{broker_id}}"): _topic(DESCRIBE),
    ("GET", f"{V3_TOPIC}/partitions/{{partition}}/offset"): _topic(DESCRIBE),  # Kafka's ListOffsets
    # ongoing reassignments: Kafka's ListPartitionReassignments, DESCRIBE on the cluster
    ("GET", f"{V3}/topics/-/partitions/-/reassignment"): _cluster(DESCRIBE),
    ("GET", f"{V3_TOPIC}/partitions/-/reassignment"): _cluster(DESCRIBE),
    ("GET", f"{V3_TOPIC}/partitions/{{partition}}/reassignment"): _cluster(DESCRIBE),
    ("GET", f"{V3}/brokers/{{broker_id}}/partition-replicas"): _in_route(
        "the replicas of the topics the principal may DESCRIBE"),
    # broker configs: Kafka's DescribeConfigs / IncrementalAlterConfigs of a BROKER resource, on the cluster
    **{("GET", path): _cluster(DC) for path in (
        f"{V3}/broker-configs", f"{V3}/broker-configs/{{name}}", f"{V3}/brokers/-/configs",
        f"{V3}/brokers/{{broker_id}}/configs", f"{V3}/brokers/{{broker_id}}/configs/{{name}}")},
    **{(method, path): _cluster(AC) for method, path in (
        ("PUT", f"{V3}/broker-configs/{{name}}"), ("DELETE", f"{V3}/broker-configs/{{name}}"),
        ("POST", f"{V3}/broker-configs:alter"), ("PUT", f"{V3}/brokers/{{broker_id}}/configs/{{name}}"),
        ("DELETE", f"{V3}/brokers/{{broker_id}}/configs/{{name}}"),
        ("POST", f"{V3}/brokers/{{broker_id}}/configs:alter"))},
    ("POST", f"{V3_TOPIC}/records"): _topic(W),
    ("POST", f"{V3_TOPIC}/records:batch"): _topic(W),
    ("GET", f"{V3}/consumer-groups"): _in_route("every group to DESCRIBE on the cluster, else those the principal "
                                                "may DESCRIBE"),
    ("GET", V3_GROUP): _group(DESCRIBE),
    ("GET", f"{V3_GROUP}/consumers"): _group(DESCRIBE),
    ("GET", f"{V3_GROUP}/consumers/{{consumer}}"): _group(DESCRIBE),
    ("GET", f"{V3_GROUP}/consumers/{{consumer}}/assignments"): _group(DESCRIBE),  # of topics it may DESCRIBE
    ("GET", f"{V3_GROUP}/consumers/{{consumer}}/assignments/{{topic}}/partitions/{{partition}}"): _group(DESCRIBE),
    ("GET", f"{V3_GROUP}/lags"): _group(DESCRIBE),  # only of topics the principal may DESCRIBE
    ("GET", f"{V3_GROUP}/lags/{{topic}}/partitions/{{partition}}"): _group(DESCRIBE),  # likewise
    ("GET", f"{V3_GROUP}/lag-summary"): _group(DESCRIBE),  # likewise
    ("GET", f"{V3}/acls"): _cluster(DESCRIBE),
    ("POST", f"{V3}/acls"): _cluster(A),
    ("POST", f"{V3}/acls:batch"): _cluster(A),
    ("DELETE", f"{V3}/acls"): _cluster(A),
}
METRICS_RULE = RULES[("GET", "/metrics")]
CLUSTER_PLANE = "/cluster/v1/"
BROKERS_ONLY = _cluster(CA)
UNLISTED = Rule(why="a route without a rule: super users only")


def rule_for(method: str, canonical: str) -> Rule:
    if canonical.startswith(CLUSTER_PLANE):
        return BROKERS_ONLY
    return RULES.get(("GET" if method == "HEAD" else method, canonical), UNLISTED)


# -- what routes ask -----------------------------------------------------------------------------------------
def principal_of(request: web.Request) -> KafkaPrincipal:
    """The principal the security middleware found (ANONYMOUS on a public path)."""
    return request[PRINCIPAL] if PRINCIPAL in request else ANONYMOUS


def access_of(request: web.Request) -> Access:
    """The request's principal and address against the broker's ACLs (everything allowed without an authorizer)."""
    acls = request.app[BROKER].acls
    if acls is None:
        raise still_starting(request.app[BROKER].config.broker_id)
    return Access(acls, principal_of(request), host_of_ip(request.remote or ""))


def _refusal(principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType, name: str
             ) -> KelpError:
    if resource_type is TOPIC:
        return TopicAuthorizationFailedError(f"{principal} is not authorized to {operation.name} topic '{name}'")
    if resource_type is GROUP:
        return GroupAuthorizationFailedError(f"{principal} is not authorized to {operation.name} group '{name}'")
    if resource_type is TXN_ID:
        return TransactionalIdAuthorizationFailedError(
            f"{principal} is not authorized to {operation.name} transactional id '{name}'")
    return ClusterAuthorizationFailedError(f"{principal} is not authorized to {operation.name} the cluster")


def require(request: web.Request, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
    """403 with Kafka's code unless the principal may do `operation` on the resource."""
    acc = access_of(request)
    if not acc.allows(operation, resource_type, name):
        raise _refusal(acc.principal, operation, resource_type, name)


def describable(request: web.Request, resource_type: ResourceType, names: Iterable[str]) -> set[str]:
    return access_of(request).allowed(DESCRIBE, resource_type, names)


def may_create_topic(acc: Access, name: str) -> bool:
    return acc.allows_cluster(C) or acc.allows(C, TOPIC, name)


# -- the middleware ------------------------------------------------------------------------------------------
def _enforce(request: web.Request, rule: Rule) -> None:
    acc = access_of(request)
    if rule is BROKERS_ONLY:  # with or without an authorizer
        refusal = request.app[CLUSTER_TRUST].refusal(acc, request.remote, request.path)
        if refusal is not None:
            raise ClusterAuthorizationFailedError(refusal)
        return
    if not acc.enabled:
        return
    if rule is UNLISTED:
        if not acc.acls.is_super_user(acc.principal):
            raise ClusterAuthorizationFailedError(f"{acc.principal} is not authorized: {request.method} "
                                                  f"{request.path} is for super users only")
        return
    if rule is METRICS_RULE and not _may_scrape(request, acc):
        raise ClusterAuthorizationFailedError(
            f"{acc.principal} is not authorized to read /metrics: a super user or a principal listed in "
            "http.metrics.principals may (the metrics name topics, groups and their lag)")
    if rule.resource_type is None:
        return
    name = "kafka-cluster" if rule.resource_type is CLUSTER else request.match_info.get(rule.name_from or "", "")
    for op in rule.operations:
        if not acc.allows(op, rule.resource_type, name):
            raise _refusal(acc.principal, op, rule.resource_type, name)
    if rule.creates:
        parts = request.app[BROKER].parts
        if parts is not None and not parts.topics.exists(name) and not may_create_topic(acc, name):
            raise UnknownTopicOrPartitionError(f"topic '{name}' does not exist")


def _may_scrape(request: web.Request, acc: Access) -> bool:
    if acc.acls.is_super_user(acc.principal):
        return True
    listed = str(request.app[BROKER].config.get("http.metrics.principals") or "")
    return str(acc.principal) in {p.strip() for p in listed.split(";") if p.strip()}


def forwarded_principal(request: web.Request, forwarder: KafkaPrincipal, named: str) -> KafkaPrincipal:
    """The client principal a forwarding broker names (`FORWARDED_PRINCIPAL`), trusted as `/cluster/v1` trusts
    a caller: the forwarder is a broker's identity (`cluster.trust`) or holds CLUSTER_ACTION on the cluster (a super
    user, or a broker principal granted it); without an authorizer, it is listed in `super.users`. Only on a REST
    consumer instance's routes, marked forwarded; anything else is 403 (or 400 for a name that is no principal)."""
    if request.headers.get(FORWARDED_BY) is None or not request.path.startswith("/consumers/"):
        raise ClusterAuthorizationFailedError(f"{FORWARDED_PRINCIPAL} is only taken on a REST consumer instance's "
                                              f"routes, in a request another broker forwarded ({FORWARDED_BY})")
    acc = access_of(request)
    trusted = forwarder in request.app[CLUSTER_TRUST].brokers or (
        acc.allows_cluster(CA) if acc.enabled else acc.acls.is_listed_super_user(forwarder))
    if not trusted:
        raise ClusterAuthorizationFailedError(
            f"{forwarder} may not name another principal in {FORWARDED_PRINCIPAL}: only brokers may (CLUSTER_ACTION "
            "on the cluster; without an authorizer, a principal listed in super.users). List the brokers' "
            "principal in super.users so certificate-authenticated REST consumers can be reached through any "
            "broker")
    try:
        return KafkaPrincipal.parse(unquote(named))
    except PrincipalMappingError as exc:
        raise HttpProblem(400, f"{FORWARDED_PRINCIPAL}: {exc}") from None


@web.middleware
async def security_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate (401), then authorize by the route table (403); public health and metrics paths skip both."""
    authenticator = request.app[AUTHENTICATOR]
    if authenticator.is_public(request.path):
        return await handler(request)
    control_plane = request.path.startswith(CLUSTER_PLANE)
    try:
        request[PRINCIPAL] = await (authenticator.control_plane_principal(request) if control_plane
                                    else authenticator.principal(request))
    except Unauthenticated as exc:
        response = error_response(401, 401, exc.message)
        response.headers["WWW-Authenticate"] = exc.challenge
        return await _after_failed_identity(authenticator, response, waited=exc.waited)
    named = request.headers.get(FORWARDED_PRINCIPAL)
    if named is not None:
        request[PRINCIPAL] = forwarded_principal(request, request[PRINCIPAL], named)
    resource = request.match_info.route.resource
    if resource is not None:  # an unknown path is answered 404 by the router, with nothing to authorize
        rule = rule_for(request.method, resource.canonical)
        try:
            _enforce(request, rule)
        except ClusterAuthorizationFailedError as exc:
            if rule is not BROKERS_ONLY:
                raise
            return await _after_failed_identity(authenticator, error_response(exc.http_status, exc.code, str(exc)))
    return await handler(request)


async def _after_failed_identity(authenticator: HttpAuthenticator, response: web.Response, *,
                                 waited: bool = False) -> web.Response:
    """A caller that did not prove who it is (401), or is no broker on `/cluster/v1` (403): answered after
    `connection.failed.authentication.delay.ms` on a connection then closed, as a Kafka listener answers a failed
    authentication. A flood of such calls on keep-alive connections cost the loop a request's parsing each and
    five times the honest clients' p99 (issue 33's attack bench); delayed and closed, a connection makes at most
    one every delay, and a new one costs the caller a handshake."""
    if authenticator.failed_delay_s > 0 and not waited:
        await asyncio.sleep(authenticator.failed_delay_s)
    response.force_close()
    return response
