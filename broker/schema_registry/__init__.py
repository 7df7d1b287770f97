"""Kelp's Schema Registry: Confluent's Schema Registry API served by every broker, stored in `_schemas`.

Why a package of its own: the registry is a client of the broker (it produces to and reads a topic, like
Confluent's registry does) with its own data model, three schema formats and their compatibility rules;
none of that belongs to the HTTP layer or the replica layer. The modules:

- `errors`: Confluent's error codes and messages (40401, 42201, 409...).
- `model`: subjects, versions, references, and the JSON keys and values of `_schemas` records.
- `state`: the registry as the records of `_schemas` build it, in memory (pure).
- `parsed` (what every format shares), `formats` (the one door), `avro_format`, `json_format`,
  `protobuf_format` (+ `json_model`, `json_diff`, `json_object_diff`, `protobuf_diff`): parsing, reference
  resolution and compatibility; `compat`: which earlier versions a level checks, in which direction.
- `requests`: subject names, versions, schema bodies, levels and modes as requests carry them.
- `store`: reading `_schemas` to its end and appending to it with acks=all.
- `registry`: the operations, writes serialized on the leader of `_schemas`
  partition 0.
The HTTP routes (Confluent's API, and the forwarding of writes to the registry's leader) are the HTTP
layer's: `kelp.broker.http.schema_registry_routes`.

docs/schema-registry.md describes the storage and the leadership design.
"""
