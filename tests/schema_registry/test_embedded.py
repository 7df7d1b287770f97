"""JSON data written with a registered schema, as REST produce writes it: Avro's JSON encoding (unions,
defaults, bytes, logical types), and the message naming the field that does not fit."""

from __future__ import annotations

import io
import json

import avro.io
import avro.schema
import pytest

from kelp.broker.schema_registry.embedded import NotEncodable
from kelp.broker.schema_registry.embedded_codecs import _avro_encoder

SCHEMA = avro.schema.parse(json.dumps({
    "type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "string"},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 2}},
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
            {"name": "qty", "type": "int", "default": 1}]}}},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}}]}))


def _read(raw: bytes) -> object:
    return avro.io.DatumReader(SCHEMA).read(avro.io.BinaryDecoder(io.BytesIO(raw)))


def test_avro_json_encoding_is_written_as_avro_binary() -> None:
    encode = _avro_encoder(SCHEMA)
    raw = encode({"id": "o-1", "day": 19000, "note": {"string": "gift"}, "tag": "\u00ffA", "lines": [{}, {"qty": 3}],
                  "state": "PAID"})
    got = _read(raw)
    assert isinstance(got, dict)
    assert (got["id"], got["day"].toordinal(), got["note"], got["tag"], got["lines"], got["state"]) == (
        "o-1", 719163 + 19000, "gift", b"\xffA", [{"qty": 1}, {"qty": 3}], "PAID")


@pytest.mark.parametrize("data, names", [
    ({"day": 1, "tag": "ab", "lines": [], "state": "NEW"}, "field 'id' of record 'shop.Order' is missing"),
    ({"id": "x", "day": 1, "tag": "ab", "lines": [], "state": "NEW", "note": "plain"}, "data.note: a union's value"),
    ({"id": "x", "day": 1, "tag": "abc", "lines": [], "state": "NEW"}, "data.tag: fixed 'shop.Tag' is 2 bytes"),
    ({"id": "x", "day": 1, "tag": "ab", "lines": [{"qty": "2"}], "state": "NEW"}, "data.lines[0].qty: expected"),
    ({"id": "x", "day": 1, "tag": "ab", "lines": [], "state": "LOST"}, "'LOST' is not a symbol of enum"),
    ({"id": "x", "day": 1, "tag": "ab", "lines": [], "state": "NEW", "extra": 1}, "has no field(s) extra"),
])
def test_data_that_does_not_fit_names_the_field(data: dict[str, object], names: str) -> None:
    with pytest.raises(NotEncodable) as refused:
        _avro_encoder(SCHEMA)(data)  # type: ignore[arg-type]  # test data: plain dicts of JSON values
    assert names in str(refused.value)
