"""The Kafka-facing side: request intake (preprocess) and the Redis monitor."""
