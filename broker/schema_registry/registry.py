"""`SchemaRegistry`: Confluent's registry operations over `_schemas`, one per broker.

Why: the routes are thin; what an operation means — which version "latest" is, when a schema gets a new id,
what a soft and a permanent delete do, what each mode allows, which earlier versions a compatibility level
checks — is decided here, against the state `store.SchemaLog` read from `_schemas`.

Reads run on any broker, after reading `_schemas` to its end. Writes (register, deletes, levels, modes) are
decided by one broker at a time — the leader of `_schemas` partition 0, as Confluent's registry has one
elected primary — one after another (a lock), each after the leader caught up with its log, and appended
with acks=all; the routes forward a write received elsewhere to that leader (`kelp.broker.http.schema_registry_routes`).

Compatibility: `level` BACKWARD: the new schema reads data of the latest version; FORWARD: the latest
reads the new one's; FULL: both; the _TRANSITIVE levels against every live version, not only the latest;
NONE: no check. IMPORT mode registers with the given id and version and checks nothing; READONLY refuses
every change to schemas (levels and modes may still change, to leave it).

This module must never write to `_schemas` except through `SchemaLog.append`.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from kelp.json_types import JsonData, JsonObject

from ..cpu_work import run_cpu
from . import errors
from .compat import first_incompatible
from .errors import RegistryError, incompatible, not_permitted, schema_not_found, subject_not_found, version_not_found
from .formats import parse
from .model import READ_ONLY_MODES, Reference, SchemaVersion, config_key, encode, mode_key, schema_key
from .parsed import ParsedSchema, ResolvedReference
from .requests import LATEST, SchemaRequest, check_subject
from .state import Identity, RegistryState
from .store import SchemaLog

__all__ = ["SchemaRegistry", "WRITE_OPS"]

MAX_REFERENCE_DEPTH = 32
WRITE_OPS = ("register", "delete_version", "delete_subject", "set_config", "delete_config", "set_mode",
             "delete_mode")

class SchemaRegistry:
    def __init__(self, log: SchemaLog) -> None:
        self.log = log
        self._write_lock = asyncio.Lock()
        self._parsed: dict[tuple[str, str, tuple[Reference, ...]], ParsedSchema] = {}

    # -- helpers ------------------------------------------------------------------------------------------
    def resolve(self, state: RegistryState, refs: tuple[Reference, ...], schema_type: str, depth: int = 0
                ) -> tuple[ResolvedReference, ...]:
        """The schemas `refs` name, with theirs, transitively; 42201 naming one that does not resolve."""
        if depth > MAX_REFERENCE_DEPTH:
            raise errors.invalid_schema(schema_type, f"references nest deeper than {MAX_REFERENCE_DEPTH} levels "
                                                     "(a cycle?)")
        out: list[ResolvedReference] = []
        for ref in refs:
            versions = state.versions(ref.subject, deleted=True)
            found = versions[-1] if ref.version == LATEST and versions else \
                next((sv for sv in versions if sv.version == ref.version), None)
            if found is None:
                raise errors.invalid_schema(schema_type, f"reference '{ref.name}' does not resolve: no schema "
                                                         f"for subject '{ref.subject}' version {ref.version}")
            out.append(ResolvedReference(ref.name, found.subject, found.version, found.schema_type, found.schema,
                                         self.resolve(state, found.references, schema_type, depth + 1)))
        return tuple(out)

    def serialized(self, state: RegistryState, schema: str, refs: tuple[Reference, ...]) -> str:
        """A PROTOBUF schema as the base64 FileDescriptorProto Confluent's Protobuf clients read
        (`?format=serialized`), its types resolved against its references. protobuf is imported here, on
        first use (not at start: issue 38)."""
        from .protobuf_descriptor import to_serialized

        return to_serialized(schema, "default", self.resolve(state, refs, "PROTOBUF"))

    def parse_schema(self, state: RegistryState, schema: str, schema_type: str, refs: tuple[Reference, ...]
                     ) -> ParsedSchema:
        """The parsed schema (remembered: parsing is the costly part of every request). Blocking."""
        return self.parse_resolved(schema_type, schema, refs, self.resolve(state, refs, schema_type))

    def parse_resolved(self, schema_type: str, schema: str, refs: tuple[Reference, ...],
                        resolved: tuple[ResolvedReference, ...]) -> ParsedSchema:
        """`parse_schema` with the references already resolved: it touches no `RegistryState`, which the loop
        changes while `_schemas` is read, so it may run on the CPU pool."""
        key = (schema_type, schema, refs)
        cached = self._parsed.get(key)
        if cached is None:
            cached = parse(schema_type, schema, resolved)
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            self._parsed[key] = cached
            # and under its canonical text, which is what a registered version stores: the compatibility check
            # of the next version finds it parsed (a 1 MB Avro schema parses for tens of seconds)
            self._parsed.setdefault((schema_type, cached.canonical, refs), cached)
        return cached

    async def parsed(self, state: RegistryState, schema: str, schema_type: str, refs: tuple[Reference, ...]
                     ) -> ParsedSchema:
        """`parse_schema` for a client's schema, on the CPU pool unless it was parsed before (a schema of
        thousands of fields parses for tens of milliseconds to seconds, which the event loop must not spend:
        issue 33's loop-lag guard, issue 37). Its references are resolved here, on the loop, against `state`."""
        cached = self._parsed.get((schema_type, schema, refs))
        if cached is not None:
            return cached
        resolved = self.resolve(state, refs, schema_type)
        return await run_cpu(self.parse_resolved, schema_type, schema, refs, resolved)

    def _pinned(self, state: RegistryState, refs: tuple[Reference, ...]) -> tuple[Reference, ...]:
        """References with `latest` (-1) replaced by the version it is now, as stored."""
        out = []
        for ref in refs:
            if ref.version == LATEST:
                versions = state.versions(ref.subject, deleted=True)
                if versions:
                    ref = Reference(ref.name, ref.subject, versions[-1].version)
            out.append(ref)
        return tuple(out)

    @staticmethod
    def find(state: RegistryState, subject: str, version: int, *, deleted: bool) -> SchemaVersion:
        versions = state.versions(subject, deleted=deleted)
        if not versions:
            raise subject_not_found(subject)
        if version == LATEST:
            return versions[-1]
        for sv in versions:
            if sv.version == version:
                return sv
        raise version_not_found(subject, version)

    async def compatibility_errors(self, state: RegistryState, level: str, new: ParsedSchema,
                                   previous: list[SchemaVersion]) -> list[str]:
        """Why `new` may not follow `previous` at `level` (`compat.first_incompatible`): the earlier versions'
        references resolved here, on the loop; their parsing and the comparisons on the CPU pool (a large or
        deeply combined schema compares for as long as parsing it takes)."""
        if level == "NONE" or not previous:
            return []
        targets = previous if level.endswith("_TRANSITIVE") else previous[-1:]
        resolved = [(sv, self.resolve(state, sv.references, sv.schema_type)) for sv in targets]
        return await run_cpu(self._level_errors, level, new, resolved)

    def _level_errors(self, level: str, new: ParsedSchema,
                      targets: list[tuple[SchemaVersion, tuple[ResolvedReference, ...]]]) -> list[str]:
        parsed = [self.parse_resolved(sv.schema_type, sv.schema, sv.references, refs) for sv, refs in targets]
        failed = first_incompatible(level, new, parsed)
        if failed is None:
            return []
        sv = targets[failed[0]][0]
        return failed[1] + [f"{{oldSchemaVersion: {sv.version}}}", f"{{oldSchema: '{sv.schema}'}}",
                            f"{{compatibility: '{level}'}}"]

    # -- reads (any broker) ---------------------------------------------------------------------------------
    async def state(self) -> RegistryState:
        return await self.log.sync()

    async def lookup(self, subject: str, request: SchemaRequest, *, deleted: bool) -> JsonObject:
        state = await self.state()
        versions = state.versions(subject, deleted=deleted)
        if not versions:
            raise subject_not_found(subject)
        refs = self._pinned(state, request.references)
        parsed = await self.parsed(state, request.schema, request.schema_type, refs)
        for sv in reversed(versions):
            if (sv.schema_type, sv.schema, sv.references) == (parsed.schema_type, parsed.canonical, refs) \
                    and request.metadata in (None, sv.metadata) and request.rule_set in (None, sv.rule_set):
                return sv.to_api()  # a lookup without a data contract finds the schema whatever its contract
        raise schema_not_found(detail=f": subject '{subject}' has no version with this schema")

    async def check(self, subject: str, version: int | None, request: SchemaRequest, *, verbose: bool
                    ) -> JsonObject:
        state = await self.state()
        refs = self._pinned(state, request.references)
        parsed = await self.parsed(state, request.schema, request.schema_type, refs)
        level = state.level(subject)
        if version is None:
            previous = state.versions(subject)
        elif not state.versions(subject) and version == LATEST:
            previous = []
        else:
            previous = [self.find(state, subject, version, deleted=False)]
            level = level.removesuffix("_TRANSITIVE")
        found = await self.compatibility_errors(state, level, parsed, previous)
        out: JsonObject = {"is_compatible": not found}
        if verbose:
            out["messages"] = list(found)
        return out

    # -- writes (the leader of _schemas partition 0) ----------------------------------------------------------
    async def write(self, op: str, args: JsonObject) -> JsonData:
        """Run write `op` here, the registry's leader (the routes forward it here)."""
        if op not in WRITE_OPS:
            raise RegistryError(404, 404, f"no registry write operation '{op}'")
        if not self.log.is_leader():
            raise RegistryError(500, errors.Code.UNKNOWN_LEADER, f"broker {self.log.parts.config.broker_id} is not the "
                                f"leader of '_schemas' partition 0 (the registry's writer); retry")
        async with self._write_lock:
            await self.log.wait_committed()
            state = await self.log.sync()
            try:
                result: JsonData = await getattr(self, f"_{op}")(state, **args)
            except TypeError as exc:  # a forwarded call with other arguments (brokers of another version)
                raise RegistryError(400, 400, f"registry write '{op}' cannot take {sorted(args)}: {exc}") from None
            return result

    def _writable(self, state: RegistryState, subject: str) -> None:
        if state.mode(subject) in READ_ONLY_MODES:
            raise not_permitted(f"Subject {subject} is in read-only mode ({state.mode(subject)})")

    async def _register(self, state: RegistryState, subject: str, body: JsonObject) -> JsonObject:
        from .requests import schema_request

        check_subject(subject)
        request = schema_request(body)
        mode = state.mode(subject)
        self._writable(state, subject)
        if (request.schema_id is not None or request.version is not None) and mode != "IMPORT":
            raise not_permitted(f"Subject {subject} is not in import mode: a schema is registered with a given "
                                "id or version only in IMPORT mode (PUT /mode/{subject})")
        refs = self._pinned(state, request.references)
        parsed = await self.parsed(state, request.schema, request.schema_type, refs)
        all_versions = state.versions(subject, deleted=True)
        live = [sv for sv in all_versions if not sv.deleted]
        # A registration without a data contract keeps the latest version's (Confluent's
        # maybePopulateFromPrevious): re-registering a schema does not drop its rules.
        metadata = request.metadata if request.metadata is not None else live[-1].metadata if live else None
        rule_set = request.rule_set if request.rule_set is not None else live[-1].rule_set if live else None
        identity: Identity = (parsed.schema_type, parsed.canonical, refs, metadata, rule_set)
        for sv in live:
            if (sv.schema_type, sv.schema, sv.references, sv.metadata, sv.rule_set) == identity:
                if request.schema_id is not None and request.schema_id != sv.schema_id:
                    raise RegistryError(422, errors.Code.ID_DOES_NOT_MATCH, f"Schema already registered with id "
                                        f"{sv.schema_id} instead of input id {request.schema_id}")
                return {"id": sv.schema_id, "version": sv.version}
        if mode == "IMPORT":
            schema_id = request.schema_id if request.schema_id is not None else \
                state.id_of.get(identity, state.max_id + 1)
            holder = state.ids.get(schema_id)
            if holder is not None and holder != identity:
                raise RegistryError(422, errors.Code.ID_DOES_NOT_MATCH, f"Overwrite new schema with id {schema_id} is "
                                    "not permitted: that id belongs to another schema")
            version = request.version or (all_versions[-1].version + 1 if all_versions else 1)
            taken = next((sv for sv in all_versions if sv.version == version), None)
            if taken is not None and not taken.deleted:
                raise RegistryError(422, errors.Code.ID_DOES_NOT_MATCH, f"Version {version} of subject '{subject}' "
                                    f"already holds another schema (id {taken.schema_id})")
        else:
            found = await self.compatibility_errors(state, state.level(subject), parsed, live)
            if found:
                raise incompatible(subject, found)
            schema_id = state.id_of.get(identity, state.max_id + 1)
            version = all_versions[-1].version + 1 if all_versions else 1
        sv = SchemaVersion(subject, version, schema_id, parsed.canonical, parsed.schema_type, refs,
                           metadata=metadata, rule_set=rule_set)
        await self.log.append([(schema_key(subject, version), encode(sv.value_json()))])
        return {"id": schema_id, "version": version}

    def _referenced(self, state: RegistryState, sv: SchemaVersion) -> None:
        users = state.referenced_by(sv.subject, sv.version)
        if users:
            raise RegistryError(422, errors.Code.REFERENCE_EXISTS, f"One or more references exist to the schema "
                                f"{{magic=1,keytype=SCHEMA,subject={sv.subject},version={sv.version}}}: "
                                + ", ".join(f"subject '{u.subject}' version {u.version}" for u in users))

    async def _delete_version(self, state: RegistryState, subject: str, version: int, permanent: bool) -> int:
        self._writable(state, subject)
        sv = self.find(state, subject, version, deleted=permanent or version != LATEST)
        if permanent and not sv.deleted:
            raise RegistryError(404, errors.Code.SCHEMAVERSION_NOT_SOFT_DELETED,
                                f"Subject '{subject}' Version {sv.version} "
                                "was not deleted first before being permanently deleted")
        if not permanent and sv.deleted:
            raise RegistryError(404, errors.Code.SCHEMAVERSION_SOFT_DELETED,
                                f"Subject '{subject}' Version {sv.version} was "
                                "soft deleted. Set permanent=true to delete permanently")
        self._referenced(state, sv)
        value = None if permanent else encode(replace(sv, deleted=True).value_json())
        await self.log.append([(schema_key(subject, sv.version), value)])
        return sv.version

    async def _delete_subject(self, state: RegistryState, subject: str, permanent: bool) -> list[int]:
        self._writable(state, subject)
        every = state.versions(subject, deleted=True)
        live = [sv for sv in every if not sv.deleted]
        if not every:
            raise subject_not_found(subject)
        if permanent and live:
            raise RegistryError(404, errors.Code.SUBJECT_NOT_SOFT_DELETED, f"Subject '{subject}' was not deleted first "
                                "before being permanently deleted")
        if not permanent and not live:
            raise RegistryError(404, errors.Code.SUBJECT_SOFT_DELETED, f"Subject '{subject}' was soft deleted. Set "
                                "permanent=true to delete permanently")
        for sv in every:
            self._referenced(state, sv)
        # The subject's own compatibility level and mode go with it, soft or permanent, as Confluent's
        # deleteSubject removes them (a later GET /config/{subject} is 40408, not the old level).
        settings: list[tuple[bytes, bytes | None]] = [
            (key, None) for key, table in ((config_key(subject), state.configs), (mode_key(subject), state.modes))
            if subject in table]
        if permanent:
            await self.log.append([(schema_key(subject, sv.version), None) for sv in every] + settings)
            return [sv.version for sv in every]
        marked: list[tuple[bytes, bytes | None]] = [
            (schema_key(subject, sv.version), encode(replace(sv, deleted=True).value_json())) for sv in live]
        await self.log.append(marked + settings)
        return [sv.version for sv in live]

    async def _set_config(self, state: RegistryState, subject: str | None, level: str) -> JsonObject:
        if subject is not None:
            check_subject(subject)
        await self.log.append([(config_key(subject), encode({"compatibilityLevel": level}))])
        return {"compatibility": level}

    async def _delete_config(self, state: RegistryState, subject: str | None) -> JsonObject:
        if subject is not None and subject not in state.configs:
            raise RegistryError(404, errors.Code.SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED,
                                f"Subject '{subject}' does not "
                                "have subject-level compatibility configured")
        previous = state.level(subject)
        await self.log.append([(config_key(subject), None)])
        return {"compatibilityLevel": previous}

    async def _set_mode(self, state: RegistryState, subject: str | None, mode: str, force: bool) -> JsonObject:
        if subject is not None:
            check_subject(subject)
        if mode == "IMPORT" and not force:
            existing = state.subject_names() if subject is None else \
                ([subject] if state.versions(subject) else [])
            if existing:
                raise not_permitted(f"Cannot import since found existing subjects ({', '.join(existing[:10])}); "
                                    "set force=true to switch to IMPORT mode anyway")
        await self.log.append([(mode_key(subject), encode({"mode": mode}))])
        return {"mode": mode}

    async def _delete_mode(self, state: RegistryState, subject: str | None) -> JsonObject:
        if subject is not None and subject not in state.modes:
            raise RegistryError(404, errors.Code.SUBJECT_LEVEL_MODE_NOT_CONFIGURED,
                                f"Subject '{subject}' does not have "
                                "subject-level mode configured")
        previous = state.own_mode(subject)
        await self.log.append([(mode_key(subject), None)])
        return {"mode": previous}
