"""What crosses the wire between master and slaves: records, framing, the conversation, the codec. No sockets."""
