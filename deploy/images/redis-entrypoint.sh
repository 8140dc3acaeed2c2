#!/bin/sh
# As the official image's entrypoint: a redis-server with no config file listens on
# every interface of the container without protected mode, its data in /data.
if [ "${1:-}" = "redis-server" ]; then
  shift
  set -- redis-server --protected-mode no --dir /data "$@"
fi
exec "$@"
