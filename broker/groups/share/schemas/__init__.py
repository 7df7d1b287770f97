"""Kafka's ShareSnapshot record schemas (`__share_group_state`), package data read by `state_log`."""
