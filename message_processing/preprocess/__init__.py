"""Preprocess: the Kafka intake (``crawlcluster preprocess``)."""
