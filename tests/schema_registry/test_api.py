"""The registry's HTTP API as Confluent answers it: shapes, Content-Type, modes, levels, deletes, bad input."""

from __future__ import annotations

import json
import uuid

import pytest

pytestmark = pytest.mark.timeout(60)

def _avro(fields: list[dict], name: str = "R") -> str:
    """Compact, as the registry stores an Avro schema."""
    return json.dumps({"type": "record", "name": name, "fields": fields}, separators=(",", ":"))


A1 = _avro([{"name": "a", "type": "int"}])
A2 = _avro([{"name": "a", "type": "int"}, {"name": "b", "type": "string", "default": ""}])
A_BAD = _avro([{"name": "a", "type": "string"}])


def _subject(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_register_read_and_lookup(sr) -> None:
    s = _subject("basic")
    status, body, ctype = sr(f"/subjects/{s}/versions", "POST", {"schema": A1})
    assert status == 200 and ctype.startswith("application/vnd.schemaregistry.v1+json")
    sid = body["id"]
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A1})[1]["id"] == sid  # the same id, no new version
    other = _subject("basic-other")
    assert sr(f"/subjects/{other}/versions", "POST", {"schema": A1})[1]["id"] == sid  # ids are global
    assert sr(f"/subjects/{s}/versions")[1] == [1]
    assert s in sr("/subjects")[1]
    assert sr(f"/subjects/{s}/versions/latest")[1] == {"subject": s, "version": 1, "id": sid, "schema": A1}
    assert sr(f"/subjects/{s}/versions/1/schema")[1] == json.loads(A1)
    assert sr(f"/schemas/ids/{sid}")[1] == {"schema": A1}
    assert sorted(sr(f"/schemas/ids/{sid}/versions")[1], key=lambda x: x["subject"]) == sorted(
        [{"subject": s, "version": 1}, {"subject": other, "version": 1}], key=lambda x: x["subject"])
    assert sr("/schemas/types")[1] == ["AVRO", "JSON", "PROTOBUF"]
    assert sr(f"/subjects/{s}", "POST", {"schema": A1})[1]["version"] == 1
    status, body, _ = sr(f"/subjects/{s}", "POST", {"schema": A2})
    assert (status, body["error_code"]) == (404, 40403)
    status, body, _ = sr(f"/compatibility/subjects/{s}/versions/latest?verbose=true", "POST", {"schema": A_BAD})
    assert status == 200 and body["is_compatible"] is False and body["messages"]


def test_config_levels(sr) -> None:
    s = _subject("config")
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A1})[0] == 200
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A_BAD})[0] == 409
    status, body, _ = sr(f"/config/{s}")
    assert (status, body["error_code"]) == (404, 40408)
    assert sr(f"/config/{s}?defaultToGlobal=true")[1] == {"compatibilityLevel": "BACKWARD"}
    assert sr(f"/config/{s}", "PUT", {"compatibility": "NONE"})[1] == {"compatibility": "NONE"}
    assert sr(f"/config/{s}")[1] == {"compatibilityLevel": "NONE"}
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A_BAD})[1]["id"] > 0  # NONE: anything goes
    status, body, _ = sr(f"/config/{s}", "PUT", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203) and "SIDEWAYS" in body["message"]
    assert sr(f"/config/{s}", "DELETE")[1] == {"compatibilityLevel": "NONE"}
    assert sr("/config")[1] == {"compatibilityLevel": "BACKWARD"}
    # FULL_TRANSITIVE checks every version, both ways
    t = _subject("full")
    assert sr(f"/config/{t}", "PUT", {"compatibility": "FULL_TRANSITIVE"})[0] == 200
    assert sr(f"/subjects/{t}/versions", "POST", {"schema": A1})[0] == 200
    assert sr(f"/subjects/{t}/versions", "POST", {"schema": A2})[0] == 200  # a field with a default: both ways
    status, body, _ = sr(f"/subjects/{t}/versions", "POST", {"schema": A_BAD})
    assert status == 409 and "FULL_TRANSITIVE" in body["message"]


def test_modes_readonly_and_import(sr) -> None:
    s = _subject("mode")
    assert sr(f"/mode/{s}", "PUT", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    status, body, _ = sr(f"/subjects/{s}/versions", "POST", {"schema": A1})
    assert (status, body["error_code"]) == (422, 42205) and "read-only" in body["message"]
    assert sr(f"/mode/{s}", "PUT", {"mode": "IMPORT"})[1] == {"mode": "IMPORT"}
    assert sr(f"/mode/{s}")[1] == {"mode": "IMPORT"}
    sid = 50_000 + int(uuid.uuid4().hex[:4], 16)
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A_BAD, "id": sid, "version": 7})[1]["id"] == sid
    assert sr(f"/subjects/{s}/versions/7")[1]["id"] == sid
    assert sr(f"/schemas/ids/{sid}")[1] == {"schema": A_BAD}
    # the id belongs to that schema now: importing another schema with it is refused
    status, body, _ = sr(f"/subjects/{s}/versions", "POST", {"schema": A1, "id": sid, "version": 8})
    assert (status, body["error_code"]) == (422, 42207)
    assert sr(f"/mode/{s}", "DELETE")[1] == {"mode": "IMPORT"}
    status, body, _ = sr(f"/subjects/{s}/versions", "POST", {"schema": A1, "id": sid + 1})
    assert (status, body["error_code"]) == (422, 42205) and "import mode" in body["message"]
    # IMPORT on a subject that has versions needs force=true
    status, body, _ = sr(f"/mode/{s}", "PUT", {"mode": "IMPORT"})
    assert (status, body["error_code"]) == (422, 42205)
    assert sr(f"/mode/{s}?force=true", "PUT", {"mode": "IMPORT"})[0] == 200
    status, body, _ = sr("/mode", "PUT", {"mode": "SOMETIMES"})
    assert (status, body["error_code"]) == (422, 42204)
    assert sr("/mode")[1] == {"mode": "READWRITE"}


def test_readonly_override_freezes_every_subject_whatever_its_own_mode(sr) -> None:
    """A global READONLY_OVERRIDE is read-only that a subject's own READWRITE or IMPORT does not lift (Confluent's
    getModeInScope); a global READONLY is lifted by a subject's own mode. Mode changes stay allowed."""
    s, t = _subject("frozen"), _subject("open")
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A1})[0] == 200
    assert sr(f"/mode/{t}", "PUT", {"mode": "READWRITE"})[1] == {"mode": "READWRITE"}
    assert sr("/mode", "PUT", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    try:
        assert sr(f"/subjects/{t}/versions", "POST", {"schema": A1})[0] == 200  # its own READWRITE wins
        status, body, _ = sr(f"/subjects/{s}/versions", "POST", {"schema": A2})
        assert (status, body["error_code"]) == (422, 42205), body
        assert sr("/mode", "PUT", {"mode": "readonly_override"})[1] == {"mode": "READONLY_OVERRIDE"}
        for subject in (s, t):
            status, body, _ = sr(f"/subjects/{subject}/versions", "POST", {"schema": A2})
            assert (status, body["error_code"]) == (422, 42205) and "READONLY_OVERRIDE" in body["message"], body
            status, body, _ = sr(f"/subjects/{subject}/versions/1", "DELETE")
            assert (status, body["error_code"]) == (422, 42205), body
        assert sr(f"/subjects/{t}/versions")[1] == [1]  # nothing was half-done
        assert sr(f"/mode/{t}")[1] == {"mode": "READWRITE"}  # its own mode, kept for when the override goes
    finally:
        assert sr("/mode", "PUT", {"mode": "READWRITE"})[0] == 200
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A2})[0] == 200


def test_soft_and_permanent_deletes(sr) -> None:
    s = _subject("del")
    d1, d2 = _avro([{"name": "a", "type": "int"}], "Del"), _avro([], "Del")  # this test's own: ids are global
    sid1 = sr(f"/subjects/{s}/versions", "POST", {"schema": d1})[1]["id"]
    sr(f"/subjects/{s}/versions", "POST", {"schema": d2})
    status, body, _ = sr(f"/subjects/{s}/versions/1?permanent=true", "DELETE")
    assert (status, body["error_code"]) == (404, 40407)
    assert sr(f"/subjects/{s}/versions/1", "DELETE")[1] == 1
    status, body, _ = sr(f"/subjects/{s}/versions/1", "DELETE")
    assert (status, body["error_code"]) == (404, 40406)
    assert sr(f"/subjects/{s}/versions")[1] == [2]
    assert sr(f"/subjects/{s}/versions?deleted=true")[1] == [1, 2]
    assert sr(f"/subjects/{s}/versions/1")[1]["error_code"] == 40402
    assert sr(f"/subjects/{s}/versions/1?deleted=true")[1]["id"] == sid1
    assert sr(f"/schemas/ids/{sid1}")[0] == 200  # a soft-deleted version's id still decodes data
    assert sr(f"/subjects/{s}/versions/1?permanent=true", "DELETE")[1] == 1
    assert sr(f"/schemas/ids/{sid1}")[1]["error_code"] == 40403
    status, body, _ = sr(f"/subjects/{s}?permanent=true", "DELETE")
    assert (status, body["error_code"]) == (404, 40405)
    assert sr(f"/subjects/{s}", "DELETE")[1] == [2]
    assert s not in sr("/subjects")[1] and s in sr("/subjects?deleted=true")[1]
    status, body, _ = sr(f"/subjects/{s}", "DELETE")
    assert (status, body["error_code"]) == (404, 40404)
    assert sr(f"/subjects/{s}?permanent=true", "DELETE")[1] == [2]
    assert sr(f"/subjects/{s}/versions?deleted=true")[1]["error_code"] == 40401
    # gone for good: a registration starts the subject anew, and the schema gets a new id (ids are never reused)
    again = sr(f"/subjects/{s}/versions", "POST", {"schema": d1})[1]
    assert again["version"] == 1 and again["id"] > sid1


@pytest.mark.parametrize("path, method, body, status, code, names", [
    ("/subjects/{s}/versions", "POST", {"schema": "{not json"}, 422, 42201, "not JSON"),
    ("/subjects/{s}/versions", "POST", {"schema": '{"type": "record", "name": "R"}'}, 422, 42201, "fields"),
    ("/subjects/{s}/versions", "POST", {"schema": "{}", "schemaType": "XML"}, 422, 42201, "XML"),
    ("/subjects/{s}/versions", "POST", {"schemaType": "AVRO"}, 422, 42201, "'schema'"),
    ("/subjects/{s}/versions", "POST", {"schema": '{"type": 5}', "schemaType": "JSON"}, 422, 42201, "type"),
    ("/subjects/{s}/versions", "POST", {"schema": "message {", "schemaType": "PROTOBUF"}, 422, 42201, "line 1"),
    ("/subjects/{s}/versions", "POST", {"schema": A1, "references": [{"name": "x"}]}, 422, 42201, "references[0]"),
    ("/subjects/{s}/versions", "POST", {"schema": '{"$ref": "other.json"}', "schemaType": "JSON",
                                        "references": [{"name": "other.json", "subject": "gone", "version": 1}]},
     422, 42201, "gone"),
    ("/subjects/{s}/versions", "POST", {"schema": '{"$ref": "elsewhere.json"}', "schemaType": "JSON"},
     422, 42201, "elsewhere.json"),
    ("/subjects/a%5Cb/versions", "POST", {"schema": A1}, 422, 42208, "a\\b"),
    ("/subjects/%2E%2E/versions", "POST", {"schema": A1}, 422, 42208, ".."),
    ("/subjects/{s}/versions", "GET", None, 404, 40401, "not found"),
    ("/subjects/{s}/versions/abc", "GET", None, 422, 42202, "abc"),
    ("/subjects/{s}/versions/0", "GET", None, 422, 42202, "'0'"),
    ("/schemas/ids/999999", "GET", None, 404, 40403, "999999"),
    ("/config", "PUT", {"compatibility": 3}, 422, 42203, "3"),
])
def test_bad_input(sr, path, method, body, status, code, names) -> None:
    got_status, got, _ = sr(path.replace("{s}", _subject("bad")), method, body)
    assert (got_status, got["error_code"]) == (status, code), got
    assert names in got["message"]


def test_malformed_body(sr) -> None:
    status, body, _ = sr(f"/subjects/{_subject('raw')}/versions", "POST", raw=b"{nope")
    assert status == 400 and "not JSON" in body["message"]


def _nested_body(depth: int) -> bytes:
    return b'{"schema": "x", "a": ' + b"[" * depth + b"]" * depth + b"}"


def _nested_json_schema(depth: int) -> str:
    return '{"type": "object", "properties": {"n": ' * depth + '{"type": "string"}' + "}}" * depth


def _nested_avro(depth: int) -> str:
    opened = "".join(f'{{"type": "record", "name": "R{i}", "fields": [{{"name": "n", "type": ' for i in range(depth))
    return opened + '"string"' + "}]}" * depth


@pytest.mark.parametrize("path", ["/subjects/{s}/versions", "/subjects/{s}", "/compatibility/subjects/{s}/versions",
                                  "/config/{s}", "/mode/{s}"])
def test_a_body_nested_thousands_deep_is_400_never_500(sr, path: str) -> None:
    """Issue 37, item 4: registry routes parsed bodies with `json.loads`; 5,000 levels answered 500 RecursionError
    (the forwarded write too). The bounded decoder the other routes use answers 400 naming the nesting."""
    subject = _subject("deep")
    method = "PUT" if path.startswith(("/config", "/mode")) else "POST"
    status, body, _ = sr(path.format(s=subject), method, raw=_nested_body(5000))
    assert status == 400, (status, body)
    assert "nested deeper" in body["message"], body


@pytest.mark.parametrize("schema_type, schema", [("JSON", _nested_json_schema(3000)), ("AVRO", _nested_avro(3000))])
def test_a_schema_text_nested_thousands_deep_is_refused_as_invalid_never_500(sr, schema_type: str,
                                                                               schema: str) -> None:
    """Item 4's schema half: a schema text (a string inside the body) nested thousands deep was parsed with
    `json.loads` and answered 500; it is an invalid schema (422, 42201), and the registry goes on serving."""
    subject = _subject("deep-schema")
    status, body, _ = sr(f"/subjects/{subject}/versions", "POST", {"schemaType": schema_type, "schema": schema})
    assert status == 422 and body["error_code"] == 42201 and "nested deeper than 128" in body["message"], body
    status, body, _ = sr(f"/subjects/{subject}/versions", "POST", {"schema": _avro([{"name": "a", "type": "int"}])})
    assert status == 200, (status, body)


def test_a_json_schema_at_the_depth_bound_registers_and_is_checked_for_compatibility(sr) -> None:
    """Just under the schema depth bound (60 nested objects: 121 levels of JSON), registration and the
    compatibility check (both walk the schema recursively) answer, never 500."""
    subject = _subject("deep-ok")
    deep = _nested_json_schema(60)
    status, body, _ = sr(f"/subjects/{subject}/versions", "POST", {"schemaType": "JSON", "schema": deep})
    assert status == 200, (status, body)
    changed = deep.replace('{"type": "string"}', '{"type": "number"}')
    status, body, _ = sr(f"/compatibility/subjects/{subject}/versions/latest", "POST",
                         {"schemaType": "JSON", "schema": changed})
    assert status == 200 and body["is_compatible"] is False, (status, body)


def _record_with(field: dict) -> str:
    return json.dumps({"type": "record", "name": "D", "fields": [field]})


@pytest.mark.parametrize("field", [
    {"name": "a", "type": "string", "default": None},
    {"name": "a", "type": "int", "default": "abc"},
    {"name": "a", "type": ["null", "string"], "default": "x"},  # a union's default is of its first branch
    {"name": "a", "type": "int", "default": 2 ** 31},
    {"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}, "default": "C"},
    {"name": "a", "type": {"type": "array", "items": "long"}, "default": [1, "2"]},
    {"name": "a", "type": {"type": "record", "name": "In", "fields": [{"name": "b", "type": "boolean"}]},
     "default": {}},  # a record default must give every field without a default of its own
    {"name": "a", "type": {"type": "record", "name": "Deep", "fields": [  # a nested record's field default
        {"name": "b", "type": "double", "default": "NaN"}]}},
])
def test_an_avro_default_that_does_not_fit_its_field_is_an_invalid_schema(sr, field: dict) -> None:
    """Issue 37, item 3: such schemas were registered (200 with an id) where Confluent answers 42201, and a Java
    client then cannot parse the schema of that id (Avro's parser validates defaults)."""
    status, body, _ = sr(f"/subjects/{_subject('default')}/versions", "POST", {"schema": _record_with(field)})
    assert status == 422 and body["error_code"] == 42201, (status, body)
    assert "Invalid default for field" in body["message"], body


@pytest.mark.parametrize("field", [
    {"name": "a", "type": ["null", "string"], "default": None},
    {"name": "a", "type": ["string", "null"], "default": "x"},
    {"name": "a", "type": "long", "default": 2 ** 40},
    {"name": "a", "type": "double", "default": 1},
    {"name": "a", "type": "bytes", "default": "\u00ff"},
    {"name": "a", "type": {"type": "map", "values": "int"}, "default": {"k": 1}},
    {"name": "a", "type": {"type": "record", "name": "In2", "fields": [
        {"name": "b", "type": "boolean"}, {"name": "c", "type": "int", "default": 0}]}, "default": {"b": True}},
])
def test_an_avro_default_that_fits_registers(sr, field: dict) -> None:
    status, body, _ = sr(f"/subjects/{_subject('default-ok')}/versions", "POST", {"schema": _record_with(field)})
    assert status == 200, (status, body)


def test_listing_filters_pages_and_the_routes_confluents_clients_call(sr) -> None:
    """Issue 37, item 8: `subjectPrefix`, `deletedOnly`, `offset`/`limit` were ignored, and `GET /`, `/contexts`
    (the Python client's `get_contexts()`), `/v1/metadata/id` and `GET /schemas` were missing."""
    prefix = _subject("listing")
    for name in ("a", "b", "c"):
        status, _, _ = sr(f"/subjects/{prefix}-{name}/versions", "POST",
                          {"schema": _avro([{"name": name, "type": "int"}])})
        assert status == 200
    second = _avro([{"name": "b", "type": "int"}, {"name": "b2", "type": "long", "default": 0}])
    status, _, _ = sr(f"/subjects/{prefix}-b/versions", "POST", {"schema": second})
    assert status == 200
    assert sr(f"/subjects/{prefix}-c", "DELETE")[0] == 200  # soft-deleted
    status, names, _ = sr(f"/subjects?subjectPrefix={prefix}")
    assert status == 200 and names == [f"{prefix}-a", f"{prefix}-b"]
    assert sr(f"/subjects?subjectPrefix={prefix}&deleted=true")[1] == [f"{prefix}-{n}" for n in "abc"]
    assert sr(f"/subjects?subjectPrefix={prefix}&deletedOnly=true")[1] == [f"{prefix}-c"]
    assert sr(f"/subjects?subjectPrefix={prefix}&offset=1&limit=1")[1] == [f"{prefix}-b"]
    assert sr("/subjects?limit=-5")[0] == 400 and sr("/subjects?offset=x")[0] == 400
    status, schemas, _ = sr(f"/schemas?subjectPrefix={prefix}")
    assert status == 200 and [(s["subject"], s["version"]) for s in schemas] == [
        (f"{prefix}-a", 1), (f"{prefix}-b", 1), (f"{prefix}-b", 2)]
    assert all("schema" in s and "id" in s for s in schemas)
    latest = sr(f"/schemas?subjectPrefix={prefix}&latestOnly=true")[1]
    assert [(s["subject"], s["version"]) for s in latest] == [(f"{prefix}-a", 1), (f"{prefix}-b", 2)]
    assert sr("/")[:2] == (200, {})
    assert sr("/contexts")[:2] == (200, ["."])
    status, meta, _ = sr("/v1/metadata/id")
    assert status == 200 and meta["scope"]["clusters"]["kafka-cluster"] and meta["scope"]["path"] == []


def test_a_soft_deleted_subject_loses_its_own_level_and_mode(sr) -> None:
    """Issue 37, item 8: a soft-deleted subject kept its compatibility level (and mode); Confluent's deleteSubject
    removes them, so the subject's config answers 40408 and a re-registered subject starts from the global level."""
    s = _subject("soft-config")
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A1})[0] == 200
    assert sr(f"/config/{s}", "PUT", {"compatibility": "NONE"})[0] == 200
    assert sr(f"/mode/{s}", "PUT", {"mode": "READWRITE"})[0] == 200
    assert sr(f"/subjects/{s}", "DELETE")[0] == 200
    status, body, _ = sr(f"/config/{s}")
    assert (status, body["error_code"]) == (404, 40408), body
    assert sr(f"/mode/{s}")[0] == 404
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A1})[0] == 200
    assert sr(f"/subjects/{s}/versions", "POST", {"schema": A_BAD})[0] == 409  # BACKWARD again, not NONE


def test_a_body_of_a_media_type_the_registry_does_not_consume_is_415(kelp) -> None:
    """Issue 37, item 8: text/plain bodies were accepted; Confluent's registry consumes its own media types,
    application/json and application/octet-stream, and answers anything else 415."""
    import urllib.error
    import urllib.request

    subject = _subject("media")
    body = json.dumps({"schema": _avro([{"name": "m", "type": "int"}])}).encode()
    for ctype, status in (("text/plain", 415), ("application/x-www-form-urlencoded", 415),
                          ("application/json", 200), ("application/vnd.schemaregistry.v1+json", 200)):
        req = urllib.request.Request(f"{kelp.http_url}/subjects/{subject}/versions", data=body, method="POST",
                                     headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                got, answer = resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            got, answer = exc.code, json.loads(exc.read())
        assert got == status, (ctype, got, answer)
        if status == 415:
            assert answer["error_code"] == 415 and ctype in answer["message"]
