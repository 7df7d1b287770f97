"""A KelpUser in, what it means out: its Kafka name and principal, its ACLs as the brokers store them, its
SCRAM credential as AlterUserScramCredentials carries it, and its Secret with a ready client config.

Why: the user reconciler (`users.py`) only diffs and applies; everything it compares is built here, pure,
from the resource and its Cluster's spec, and uses the security core for Kafka's own rules:

- names: a `scram-sha-512` user is `User:<name>`; a `tls` user's certificate subject is `CN=<name>`, so its
  principal is `User:CN=<name>` under Kafka's default `ssl.principal.mapping.rules` (or what the Cluster's
  rules make of it) — Strimzi's naming;
- ACLs: Strimzi's shape (`resource {type, name, patternType}`, `operations[]`, `host`, `type`) in Kafka's
  names, each checked by `kelp.security.acl.validate_acl_binding` and `supported_operations` (an
  operation that means nothing on the resource type is refused, as `kafka-acls` refuses it);
- SCRAM: the password is salted here (`kelp.security.scram`: a Kafka-shaped salt, PBKDF2 with
  SHA-512, 8192 iterations) and only the salt and salted password are sent, never the password;
- the Secret (named like the user, owned by it): `password` and `sasl.jaas.config`, or `user.crt`,
  `user.key` and `user.pem` (the key and chain, Kafka's PEM keystore); `ca.crt` (the cluster CA bundle, to
  trust the brokers); `client.properties` for Kafka's Java clients and tools, with librdkafka's names in
  comments, paths under MOUNT_DIR (where docs/operator.md mounts the Secret).

Pure: no Kubernetes client, no network (the password and salt are the only random inputs).
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import string
from dataclasses import dataclass
from typing import Mapping

from kelp.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    supported_operations,
    validate_acl_binding,
)
from kelp.security.acl import AclBinding as CoreBinding
from kelp.security.scram import ScramMechanism, make_credential, salted_password

from ..model.admin_types import AclBinding, AclFilter, ScramCredentialUpsert
from ..model.objects import OwnerReference, Secret
from ..model.objects_kelp import AclRule, KelpUserResource
from .listener_security import KafkaListener, ListenerError, Security, principal_of

__all__ = ["USER_FINALIZER", "SCRAM_MECHANISM", "SCRAM_ITERATIONS", "FINGERPRINT_ANNOTATION", "MOUNT_DIR",
           "UserIdentity", "identity_of", "acl_bindings", "binding_key", "acl_diff", "principal_filter",
           "new_password", "scram_upsert", "credential_fingerprint", "jaas_config", "client_properties",
           "user_secret", "AclSpecError", "bootstrap_for", "listener_of"]

USER_FINALIZER = "kelp.dev/user-cleanup"
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
PASSWORD_LENGTH = 32
FINGERPRINT_ANNOTATION = "kelp.dev/scram-credential"
MOUNT_DIR = "/etc/kelp-user"
_RESOURCE = {"topic": "TOPIC", "group": "GROUP", "cluster": "CLUSTER", "transactionalId": "TRANSACTIONAL_ID"}
_PATTERN = {"literal": "LITERAL", "prefix": "PREFIXED"}
_OPERATION = {"Read": "READ", "Write": "WRITE", "Create": "CREATE", "Delete": "DELETE", "Alter": "ALTER",
              "Describe": "DESCRIBE", "ClusterAction": "CLUSTER_ACTION", "AlterConfigs": "ALTER_CONFIGS",
              "DescribeConfigs": "DESCRIBE_CONFIGS", "IdempotentWrite": "IDEMPOTENT_WRITE", "All": "ALL"}


class AclSpecError(ValueError):
    """An ACL rule the brokers would refuse or that means nothing; names the rule."""


@dataclass(frozen=True)
class UserIdentity:
    """Who a KelpUser is to the brokers."""

    name: str  # metadata.name: the SCRAM user name, the certificate's CN, the Secret's name
    authentication: str  # scram-sha-512 | tls
    username: str  # the principal's name: `alice`, or `CN=alice` for a tls user (default mapping)
    principal: str  # `User:alice` / `User:CN=alice`


def identity_of(body: KelpUserResource, *, mapping_rules: str | None) -> UserIdentity:
    name = body["metadata"]["name"]
    spec = body.get("spec")
    given = spec.get("authentication") if spec else None
    auth = str(given["type"] if given else "scram-sha-512")
    if auth == "tls":
        try:
            principal = principal_of(f"CN={name}", mapping_rules)
        except ListenerError as exc:
            raise AclSpecError(f"the Cluster's {exc}") from None
    else:
        principal = f"User:{name}"
    return UserIdentity(name, auth, principal.removeprefix("User:"), principal)


def _core(binding: AclBinding) -> CoreBinding:
    return CoreBinding(
        ResourcePattern(ResourceType[binding["resourceType"]], binding["resourceName"],
                        PatternType[binding["patternType"]]),
        AccessControlEntry(binding["principal"], binding["host"], AclOperation[binding["operation"]],
                           AclPermissionType[binding["permission"]]))


def acl_bindings(rules: list[AclRule], principal: str) -> list[AclBinding]:
    """Every binding the rules ask for (one per operation), in Kafka's names, each as CreateAcls would accept it."""
    out: list[AclBinding] = []
    for n, rule in enumerate(rules):
        where = f"spec.authorization.acls[{n}]"
        resource = rule["resource"]
        kind = _RESOURCE[resource["type"]]
        name = CLUSTER_NAME if kind == "CLUSTER" else resource.get("name")
        if not name:
            raise AclSpecError(f"{where}.resource.name is required for a {resource['type']} resource")
        pattern = "LITERAL" if kind == "CLUSTER" else _PATTERN[resource.get("patternType") or "literal"]
        for op in rule["operations"]:
            binding: AclBinding = {"resourceType": kind, "resourceName": name, "patternType": pattern,
                                   "principal": principal, "host": rule.get("host") or "*",
                                   "operation": _OPERATION[op], "permission": (rule.get("type") or "allow").upper()}
            core = _core(binding)
            try:
                validate_acl_binding(core)
            except InvalidAclError as exc:
                raise AclSpecError(f"{where}: {exc}") from None
            if core.entry.operation is not AclOperation.ALL and \
                    core.entry.operation not in supported_operations(core.pattern.resource_type):
                allowed = sorted(k for k, v in _OPERATION.items() if v != "ALL" and AclOperation[v]
                                 in supported_operations(core.pattern.resource_type))
                raise AclSpecError(f"{where}: operation {op} means nothing on a {resource['type']} resource; use "
                                   f"{', '.join(allowed)} or All")
            if binding not in out:
                out.append(binding)
    return out


def binding_key(binding: AclBinding) -> tuple[str, str, str, str, str, str, str]:
    return (binding["resourceType"], binding["resourceName"], binding["patternType"], binding["principal"],
            binding["host"], binding["operation"], binding["permission"])


def acl_diff(desired: list[AclBinding], current: list[AclBinding]) -> tuple[list[AclBinding], list[AclBinding]]:
    """(bindings to create, bindings to delete) to make `current` exactly `desired`."""
    have = {binding_key(b) for b in current}
    want = {binding_key(b) for b in desired}
    return [b for b in desired if binding_key(b) not in have], [b for b in current if binding_key(b) not in want]


def principal_filter(principal: str) -> AclFilter:
    """Every ACL of one principal, on any resource, from any host."""
    return {"resourceType": "ANY", "patternType": "ANY", "principal": principal, "operation": "ANY",
            "permission": "ANY"}


def new_password() -> str:
    """32 letters and digits: safe in a JAAS string and a properties file without escaping."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(PASSWORD_LENGTH))


def scram_upsert(password: str, *, iterations: int = SCRAM_ITERATIONS) -> ScramCredentialUpsert:
    """What `PUT /admin/v1/users/{name}/scram-credentials` carries: a Kafka-shaped salt and the salted password
    (the security core's `make_credential` and `salted_password`), never the password."""
    mechanism = ScramMechanism.SCRAM_SHA_512
    salt = make_credential(password, mechanism, iterations).salt
    salted = salted_password(password, salt, iterations, mechanism)
    return {"mechanism": SCRAM_MECHANISM, "iterations": iterations,
            "salt": base64.b64encode(salt).decode("ascii"), "saltedPassword": base64.b64encode(salted).decode("ascii")}


def credential_fingerprint(password: str, *, iterations: int = SCRAM_ITERATIONS) -> str:
    """Which password and iterations the brokers were last given (an annotation on the user's Secret)."""
    return hashlib.sha256(f"{SCRAM_MECHANISM}:{iterations}:{password}".encode()).hexdigest()[:32]


def jaas_config(username: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{username}" ' \
           f'password="{password}";'


def client_properties(*, user: UserIdentity, cluster: str, listener: KafkaListener | None, bootstrap: str | None,
                      password: str | None) -> str:
    """A Kafka client config for this user (Java clients and tools read it; librdkafka's names in comments)."""
    lines = [f"# Kelp: KelpUser {user.name} of Cluster {cluster}, principal {user.principal}.",
             f"# Mount this Secret at {MOUNT_DIR}, then for example:",
             f"#   kafka-console-consumer --consumer.config {MOUNT_DIR}/client.properties --topic T --bootstrap-server "
             f"{bootstrap or '<bootstrap>'}"]
    if listener is None:
        lines.append(f"# No listener of Cluster {cluster} authenticates with {user.authentication} yet.")
        return "\n".join(lines) + "\n"
    lines.append(f"# Listener {listener.name} ({listener.security_protocol}).")
    if bootstrap:
        lines.append(f"bootstrap.servers={bootstrap}")
    else:
        lines.append("# bootstrap.servers: the external addresses are not known yet (status.externalAddresses)")
    lines.append(f"security.protocol={listener.security_protocol}")
    rdkafka: list[str] = []
    if user.authentication == "scram-sha-512" and password is not None:
        lines += [f"sasl.mechanism={SCRAM_MECHANISM}", f"sasl.jaas.config={jaas_config(user.name, password)}"]
        rdkafka += [f"sasl.mechanism={SCRAM_MECHANISM}", f"sasl.username={user.name}",
                    f"sasl.password=<the password key of this Secret, {MOUNT_DIR}/password>"]
    if user.authentication == "tls":
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={MOUNT_DIR}/user.pem"]
        rdkafka += [f"ssl.certificate.location={MOUNT_DIR}/user.crt", f"ssl.key.location={MOUNT_DIR}/user.key"]
    if listener.tls:
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={MOUNT_DIR}/ca.crt"]
        rdkafka.append(f"ssl.ca.location={MOUNT_DIR}/ca.crt")
    lines.append("# librdkafka (confluent-kafka, kcat) names the same settings: "
                 + (", ".join([f"security.protocol={listener.security_protocol}", *rdkafka])))
    return "\n".join(lines) + "\n"


def bootstrap_for(listener: KafkaListener | None, *, cluster: str, namespace: str,
                  external: list[str]) -> str | None:
    if listener is None:
        return None
    if listener.type == "external":
        return ",".join(external) or None
    return f"{cluster}.{namespace}.svc:{listener.port}"


def user_secret(body: KelpUserResource, *, user: UserIdentity, values: Mapping[str, bytes],
                labels: Mapping[str, str], annotations: Mapping[str, str] | None = None) -> Secret:
    """The user's Secret, owned by the KelpUser (deleted with it)."""
    meta = body["metadata"]
    owner: OwnerReference = {"apiVersion": body.get("apiVersion") or "kelp.dev/v1alpha1", "kind": "KelpUser",
                             "name": meta["name"], "uid": meta.get("uid", ""), "controller": True,
                             "blockOwnerDeletion": True}
    secret: Secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                      "metadata": {"name": user.name, "namespace": meta.get("namespace", ""), "labels": dict(labels),
                                   "ownerReferences": [owner]},
                      "data": {k: base64.b64encode(v).decode("ascii") for k, v in sorted(values.items())}}
    if annotations:
        secret["metadata"]["annotations"] = dict(annotations)
    return secret


def listener_of(security: Security, user: UserIdentity) -> KafkaListener | None:
    return security.listener_for(user.authentication)
