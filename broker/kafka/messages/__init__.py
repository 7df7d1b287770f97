"""Kafka message classes kafka-python (the project's codec library) does not ship, from Kafka's own schemas.

Why: kafka-python 3 builds each message class from Kafka's JSON schema (`ApiMessage`'s `load_json`); its
package lacks the KIP-848 messages, ConsumerGroupHeartbeat (API key 68) and ConsumerGroupDescribe (69), and
KIP-932's share-group messages, ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78),
ShareAcknowledge (79), DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets
(92), whose JSON files are
Kafka 4.4.0's (from kafka-clients-4.4.0.jar). The other JSON files beside this module are Kafka 4.3.1's
(`clients/src/main/resources/common/message`, Apache License 2.0, header kept), so the codec is kafka-python's
and the layout Kafka's. They ship as package data.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

__all__ = ["ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse", "ConsumerGroupDescribeRequest",
           "ConsumerGroupDescribeResponse", "ShareGroupHeartbeatRequest", "ShareGroupHeartbeatResponse",
           "ShareGroupDescribeRequest", "ShareGroupDescribeResponse", "ShareFetchRequest", "ShareFetchResponse",
           "ShareAcknowledgeRequest", "ShareAcknowledgeResponse", "DescribeShareGroupOffsetsRequest",
           "DescribeShareGroupOffsetsResponse", "AlterShareGroupOffsetsRequest", "AlterShareGroupOffsetsResponse",
           "DeleteShareGroupOffsetsRequest", "DeleteShareGroupOffsetsResponse"]


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=__name__):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=__name__):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=__name__):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=__name__):
    pass


class ShareGroupHeartbeatRequest(ApiMessage, load_json=__name__):
    pass


class ShareGroupHeartbeatResponse(ApiMessage, load_json=__name__):
    pass


class ShareGroupDescribeRequest(ApiMessage, load_json=__name__):
    pass


class ShareGroupDescribeResponse(ApiMessage, load_json=__name__):
    pass


class ShareFetchRequest(ApiMessage, load_json=__name__):
    pass


class ShareFetchResponse(ApiMessage, load_json=__name__):
    pass


class ShareAcknowledgeRequest(ApiMessage, load_json=__name__):
    pass


class ShareAcknowledgeResponse(ApiMessage, load_json=__name__):
    pass


class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=__name__):
    pass


class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=__name__):
    pass


class AlterShareGroupOffsetsRequest(ApiMessage, load_json=__name__):
    pass


class AlterShareGroupOffsetsResponse(ApiMessage, load_json=__name__):
    pass


class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=__name__):
    pass


class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=__name__):
    pass
