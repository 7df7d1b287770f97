"""The Kelp broker: one asyncio process serving the Kafka protocol and HTTP.

Sub-packages by role: `storage` (disk logs, no networking), `kafka` (the
Kafka-protocol TCP server and its request handlers), `http` (aiohttp admin,
REST proxy, health and metrics), `groups` (the consumer-group coordinator).
"""
