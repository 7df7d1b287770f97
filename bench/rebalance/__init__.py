"""Group rebalance: the classic and KIP-848 consumer protocols' time-to-stable, Kelp beside Kafka (`section.py`),
with members that record what they own and consume (`members.py`)."""
