"""Benchmarks that print Kelp's throughput beside this machine's reference rates.

`make bench` (= `python -m bench`) starts a broker as a separate process,
produces and consumes with confluent-kafka, and measures in the same run
what the machine does without Kelp: sequential file writes (page cache, no
fsync) and reading a file over loopback TCP.
"""
