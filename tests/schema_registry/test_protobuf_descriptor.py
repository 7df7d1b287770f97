"""PROTOBUF schemas in the serialized form Confluent's clients use: a base64 FileDescriptorProto taken in as
`.proto` text and `.proto` text given back as one (`?format=serialized`), compared field by field with what
protoc itself compiles (grpcio-tools), for a schema using maps, oneofs, proto3 `optional`, nested and
imported types, a well-known type, enums, reserved ranges and a service."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool

from kelp.broker.schema_registry.errors import RegistryError
from kelp.broker.schema_registry.parsed import ResolvedReference
from kelp.broker.schema_registry.protobuf_descriptor import from_serialized, looks_serialized, to_serialized
from kelp.broker.schema_registry.protobuf_format import parse_protobuf

MONEY = 'syntax = "proto3";\npackage shop.common;\nmessage Money { string currency = 1; int64 units = 2; }\n'
ORDER = '''syntax = "proto3";
package shop.orders;
import "shop/common/money.proto";
import "google/protobuf/timestamp.proto";
option java_package = "dev.kelp.shop";
message Order {
  string id = 1;
  shop.common.Money total = 2;
  repeated Line lines = 3;
  map<string, shop.common.Money> fees = 4;
  oneof payment { string card = 5; Voucher voucher = 6; }
  optional int32 priority = 7;
  Status status = 8;
  google.protobuf.Timestamp placed = 9;
  reserved 10 to 12, 20;
  reserved "legacy";
  message Line { string sku = 1; uint32 quantity = 2 [deprecated = true]; }
  message Voucher { bytes code = 1; }
  enum Status { STATUS_UNKNOWN = 0; PLACED = 1; SHIPPED = 2; }
}
service Orders { rpc Place (Order) returns (stream Order); }
'''


def _compiled(tmp_path: Path) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """protoc's own descriptors of MONEY and ORDER (and the well-known import)."""
    from grpc_tools import protoc

    for rel, text in (("shop/common/money.proto", MONEY), ("shop/orders/order.proto", ORDER)):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = tmp_path / "set.pb"
    well_known = Path(protoc.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{tmp_path}", f"-I{well_known}", "--include_imports",
                        f"--descriptor_set_out={out}", "shop/orders/order.proto"]) == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return {f.name: f for f in files}


def _fields(fdp: descriptor_pb2.FileDescriptorProto) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []

    def walk(prefix: str, messages: object) -> None:
        for m in messages:  # type: ignore[attr-defined]  # a repeated DescriptorProto field
            out.append((f"{prefix}{m.name}", [o.name for o in m.oneof_decl], bool(m.options.map_entry),
                        [(r.start, r.end) for r in m.reserved_range], list(m.reserved_name)))
            for f in m.field:
                out.append((f"{prefix}{m.name}.{f.name}", f.number, f.label, f.type, f.type_name,
                            f.oneof_index if f.HasField("oneof_index") else None, f.proto3_optional,
                            f.options.deprecated))
            walk(f"{prefix}{m.name}.", m.nested_type)
    walk("", fdp.message_type)
    out += [(e.name, [(v.name, v.number) for v in e.value]) for e in fdp.enum_type]
    out += [(s.name, [(m.name, m.input_type, m.output_type, m.server_streaming) for m in s.method])
            for s in fdp.service]
    return out


def test_serialized_schemas_convert_both_ways_as_protoc_compiles_them(tmp_path: Path) -> None:
    compiled = _compiled(tmp_path)
    order = compiled["shop/orders/order.proto"]
    sent = base64.b64encode(order.SerializeToString()).decode()
    assert looks_serialized(sent) and not looks_serialized(ORDER)
    money_ref = ResolvedReference("shop/common/money.proto", "money", 1, "PROTOBUF", MONEY)

    text = from_serialized(sent)  # what the registry stores
    assert parse_protobuf(text, (money_ref,)).canonical == text or "message Order" in text
    again = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(to_serialized(text, order.name,
                                                                                         (money_ref,))))
    assert _fields(again) == _fields(order)
    assert list(again.dependency) == list(order.dependency) and again.options.java_package == "dev.kelp.shop"

    # the built descriptor loads in the protobuf runtime beside protoc's dependencies
    pool = descriptor_pool.DescriptorPool()
    for name in ("google/protobuf/timestamp.proto", "shop/common/money.proto"):
        pool.Add(compiled[name])
    pool.Add(again)
    assert pool.FindMessageTypeByName("shop.orders.Order").fields_by_name["fees"].message_type.GetOptions().map_entry

    # and text the registry was given directly (a curl user's) gives the same descriptor as protoc's
    direct = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(to_serialized(ORDER, order.name,
                                                                                          (money_ref,))))
    assert _fields(direct) == _fields(order)


@pytest.mark.parametrize("bad, names", [
    ("AAAA" * 3, "does not decode"),  # base64, but no descriptor
])
def test_a_serialized_schema_that_does_not_decode_is_refused(bad: str, names: str) -> None:
    with pytest.raises(RegistryError) as refused:
        from_serialized(bad)
    assert refused.value.error_code == 42201 and names in refused.value.message
