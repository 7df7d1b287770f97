"""Confluent REST Proxy v2: produce and partition reads at `/topics`, consumer instances at `/consumers`.

`topics.py` produce and stateless reads; `consumers.py` the consumer instances' routes, over
`consumer_instance.py` (an instance's state), `consumer_client.py` (what it says to the cluster over the
Kafka protocol) and `consumer_formats.py` (records as JSON by format), `subscriptions.py` (topic patterns and the
leader's range assignment); `forwarding.py` sends a request for
an instance another broker holds to that broker.
"""
