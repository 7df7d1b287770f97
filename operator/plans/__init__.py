"""What to do next, decided from what was observed: partition moves and rolling restarts.

`moves` plans the drain before a scale-down and the spread after a scale-up; `restarts` picks the
broker pod that restarts next (Strimzi's KafkaRoller rule). Pure: the reconcilers carry them out
(`reconcile/scaling`, `reconcile/rolling`).
"""
