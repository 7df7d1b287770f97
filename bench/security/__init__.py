"""The security section of `make bench` (issue 20): secured listeners and the authorizer, Kelp beside Kafka.

Why a package: the section (`section.py`), its printed report (`report.py`) and the throwaway CA it secures the
brokers with (`pki.py`, which the loop-lag guard and the attack bench use too) belong together.
`python -m bench.security` runs the section alone (`__main__.py`).
"""
