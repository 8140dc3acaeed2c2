"""Per-node management: the crawlcluster CLI and the local servers harness."""
