"""The RecordBatch v2 codec: pure functions on bytes, shared by broker and clients, one module per role.

Why it exists: every byte a producer sends is checked once (sizes, magic, CRC32C) and then stored and
served unchanged, so the broker's hot path works per *batch*, on the 61-byte headers; only the HTTP
API, the CLI, the log cleaner, compacted-topic validation and a topic's `compression.type` decode
records. The roles, each imported from its own module (this package re-exports nothing):

- `header`: the header's layout, `BatchInfo` (one batch's header, read once), header walks that check
  nothing, and in-place rewrites of header fields (offsets, leader epoch, LogAppendTime, the cleaner's).
- `validation`: the checking walk of a produce request's batches (`parse_batches`) and recovery's
  never-raising one (`scan_valid_prefix`).
- `compression`: the codec table and which codecs this installation can read and write.
- `record`: `Record` and reading records out of batches.
- `build`: writing records into batches, and rebuilding batches in another codec.

What it must never do: import networking or anything from `kelp.broker`, keep state between calls, or
touch records one by one on the produce/fetch path.
"""
