"""A segment's index files: offsets to file positions, timestamps to offsets, aborted transactions.

Why a package: they are the three sidecar files each `LogSegment` keeps beside its `.log` (Kafka's `.index`,
`.timeindex` and `.txnindex`), read by the segment, the loader and the replica layer's transaction paths, and
nothing else in `broker/storage/` depends on their insides.
"""
