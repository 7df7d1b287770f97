"""The transactions section of `make bench` (issue 21): transactional produce, read_committed consume,
and consume-transform-produce sessions through rebalances, Kelp beside Kafka.

Why a package: the section (`section.py`) and its rebalancing case's runners (`group_transact.py`, with the
Java client `GroupTransact.java`, which tests/transactions uses too) belong together.
`python -m bench.transactions` runs the section alone (`__main__.py`).
"""
