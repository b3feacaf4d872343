"""The Kafka wire protocol front of a broker: a thin adapter over the same core as gRPC.

Every Kafka client, tool and connector talks to Strom through this listener
(``listeners=PLAINTEXT://HOST:PORT``). Layout, as franz-go's kfake: ``listener`` is the only
socket code (frames in, frames out, one request at a time per connection); ``frames`` turns
bytes into kio request objects and responses into bytes, without I/O; ``apis`` is the table of
served APIs and versions (what ApiVersions advertises); one module per API maps a Kafka request
onto the broker-core call the gRPC front makes and the answer back, and opens with what it
supports and what it does not. No semantic lives here: produce, fetch, offsets, groups and admin
are the core's, so both fronts behave the same.
"""

from strom.broker.kafka.listener import KafkaListener

__all__ = ["KafkaListener"]
