"""DescribeAcls, CreateAcls, DeleteAcls: Kafka's ACL administration, so `kafka-acls --bootstrap-server` works.

Why: ACLs are changed and listed with these APIs by kafka-acls, AdminClient.create_acls/describe_acls/
delete_acls and every tool built on them. They follow Kafka's AclApis: DescribeAcls needs DESCRIBE on the
cluster, CreateAcls and DeleteAcls ALTER on the cluster (refused: CLUSTER_AUTHORIZATION_FAILED for every
item); without an authorizer they answer SECURITY_DISABLED. A request naming UNKNOWN enum values is
answered INVALID_REQUEST (Kafka refuses to parse it and drops the connection; the answer says why instead).
Each binding is checked with Kafka's rules and messages (`validate_acl_binding`), then created or deleted
by the controller in the metadata log (`AclManager.create`/`delete`); the answer comes once this broker has
applied the change, so a DescribeAcls right after sees it. DescribeAcls reads the ACLs this broker applied,
grouped by resource pattern as Kafka answers.

Versions: 1-3 (v1 added pattern types; Kafka 4 serves no v0).
"""

from __future__ import annotations

import logging

from kafka.protocol.admin import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

from kelp.errors import ErrorCode, KelpError
from kelp.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    validate_acl_binding,
    validate_acl_filter,
)
from kelp.security.acl_json import binding_from_json

from ....loop_budget import LoopBudget
from ...access import access, denied_message
from ..registry import RequestContext, handles

log = logging.getLogger("kelp.broker.kafka")

_Creation = CreateAclsRequest.AclCreation
_Filter = DeleteAclsRequest.DeleteAclsFilter
_Resource = DescribeAclsResponse.DescribeAclsResource
_Matching = DeleteAclsResponse.DeleteAclsFilterResult.DeleteAclsMatchingAcl
_CreationResult = CreateAclsResponse.AclCreationResult
_FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
_NO_AUTHORIZER = "No Authorizer is configured on the broker"


# -- authorization: what Kafka's AclApis checks -----------------------------------------------------------
def _may_describe_acls(ctx: RequestContext) -> bool:
    return access(ctx).allows_cluster(AclOperation.DESCRIBE)


def _may_alter_acls(ctx: RequestContext) -> bool:
    return access(ctx).allows_cluster(AclOperation.ALTER)


# -- conversions ---------------------------------------------------------------------------------------------
def _binding(c: _Creation) -> AclBinding:
    """A CreateAcls creation as a binding; InvalidAclError for ANY/MATCH where a binding cannot have them."""
    return AclBinding(ResourcePattern(ResourceType.from_code(c.resource_type), c.resource_name,
                                      PatternType.from_code(c.resource_pattern_type)),
                      AccessControlEntry(c.principal, c.host, AclOperation.from_code(c.operation),
                                         AclPermissionType.from_code(c.permission_type)))


def _acl_filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
                operation: int, permission: int) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType.from_code(resource_type), name, PatternType.from_code(pattern_type)),
        AccessControlEntryFilter(principal, host, AclOperation.from_code(operation),
                                 AclPermissionType.from_code(permission)))


def _unknown_elements(f: AclBindingFilter) -> bool:
    return f.pattern_filter.is_unknown or f.entry_filter.is_unknown


# -- DescribeAcls ----------------------------------------------------------------------------------------------
@handles(DescribeAclsRequest, min_version=1, max_version=3)
async def handle_describe_acls(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    def error(code: int, message: str) -> DescribeAclsResponse:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=code, error_message=message, resources=[])

    if not _may_describe_acls(ctx):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, denied_message(ctx, "DescribeAcls"))
    acls = ctx.broker.acls
    if not acls.enabled:
        return error(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    acl_filter = _acl_filter(request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
                             request.principal_filter, request.host_filter, request.operation, request.permission_type)
    if _unknown_elements(acl_filter):
        return error(ErrorCode.INVALID_REQUEST, "DescribeAclsRequest contains UNKNOWN elements")
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in acls.describe(acl_filter):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    A = _Resource.AclDescription
    return DescribeAclsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=[
        _Resource(resource_type=int(p.resource_type), resource_name=p.name, pattern_type=int(p.pattern_type), acls=[
            A(principal=e.principal, host=e.host, operation=int(e.operation), permission_type=int(e.permission_type))
            for e in entries])
        for p, entries in by_pattern.items()])


# -- CreateAcls ------------------------------------------------------------------------------------------------
@handles(CreateAclsRequest, min_version=1, max_version=3)
async def handle_create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    R = _CreationResult
    creations = list(request.creations or [])

    def every(code: int, message: str) -> CreateAclsResponse:
        return CreateAclsResponse(throttle_time_ms=0, results=[R(error_code=code, error_message=message)
                                                               for _ in creations])

    if not _may_alter_acls(ctx):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, denied_message(ctx, "CreateAcls"))
    if not ctx.broker.acls.enabled:
        return every(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    if any(c.resource_pattern_type == PatternType.UNKNOWN or c.resource_type == ResourceType.UNKNOWN
           or c.permission_type == AclPermissionType.UNKNOWN or c.operation == AclOperation.UNKNOWN
           for c in creations):
        return every(ErrorCode.INVALID_REQUEST, "CreatableAcls contain unknown elements")
    results: list[_CreationResult] = []
    valid: list[tuple[int, AclBinding]] = []
    for i, c in enumerate(creations):
        try:
            binding = _binding(c)
            validate_acl_binding(binding)
            valid.append((i, binding))
            results.append(R(error_code=ErrorCode.NONE, error_message=None))
        except InvalidAclError as exc:
            log.info("CreateAcls from %s (%s): ACL %d refused: %s", ctx.client, ctx.principal, i, exc)
            results.append(R(error_code=exc.code, error_message=str(exc)))
    if valid:
        try:
            answer = await ctx.broker.acls.create_bindings([b for _, b in valid])
            for (i, _), outcome in zip(valid, answer["results"], strict=True):
                if outcome is not None:
                    results[i] = R(error_code=outcome["error_code"], error_message=outcome["message"])
        except KelpError as exc:
            log.warning("CreateAcls from %s (%s) failed: %s", ctx.client, ctx.principal, exc)
            for i, _ in valid:
                results[i] = R(error_code=exc.code, error_message=str(exc))
    return CreateAclsResponse(throttle_time_ms=0, results=results)


# -- DeleteAcls ------------------------------------------------------------------------------------------------
@handles(DeleteAclsRequest, min_version=1, max_version=3)
async def handle_delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    FR = _FilterResult
    filters = list(request.filters or [])

    def every(code: int, message: str) -> DeleteAclsResponse:
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            FR(error_code=code, error_message=message, matching_acls=[]) for _ in filters])

    if not _may_alter_acls(ctx):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, denied_message(ctx, "DeleteAcls"))
    if not ctx.broker.acls.enabled:
        return every(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    results: list[_FilterResult] = []
    valid: list[tuple[int, AclBindingFilter]] = []
    for i, f in enumerate(filters):
        acl_filter = _acl_filter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                 f.principal_filter, f.host_filter, f.operation, f.permission_type)
        try:
            validate_acl_filter(acl_filter)
            valid.append((i, acl_filter))
            results.append(FR(error_code=ErrorCode.NONE, error_message=None, matching_acls=[]))
        except InvalidAclError as exc:
            results.append(FR(error_code=exc.code, error_message=str(exc), matching_acls=[]))
    if valid:
        try:
            answer = await ctx.broker.acls.delete_filters([f for _, f in valid])
            budget = LoopBudget()  # a thousand filters each answered with the bindings it deleted
            for (i, _), outcome in zip(valid, answer["results"], strict=True):
                await budget.tick()
                err = outcome["error"]
                if err is not None:
                    results[i] = FR(error_code=err["error_code"], error_message=err["message"], matching_acls=[])
                    continue
                matching = [binding_from_json(doc) for doc in outcome["deleted"]]
                results[i] = FR(error_code=ErrorCode.NONE, error_message=None, matching_acls=[
                    _Matching(error_code=ErrorCode.NONE, error_message=None,
                              resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
                              pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal,
                              host=b.entry.host, operation=int(b.entry.operation),
                              permission_type=int(b.entry.permission_type))
                    for b in matching])
        except KelpError as exc:
            log.warning("DeleteAcls from %s (%s) failed: %s", ctx.client, ctx.principal, exc)
            for i, _ in valid:
                results[i] = FR(error_code=exc.code, error_message=str(exc), matching_acls=[])
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)
