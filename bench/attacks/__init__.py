"""The attack bench of `make bench` (issue 33): honest clients beside each attack, Kelp beside Kafka.

Why a package: the section (`section.py`) runs the honest clients (`honest.py`) beside one attacker at a time
(`attackers.py`, in a process of its own); the three belong together. `python -m bench.attacks` runs the section
alone (`__main__.py`).
"""
