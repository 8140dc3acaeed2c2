#!/bin/sh
# The broker has one listener (LISTENER_URL). Where the official image has a second one
# for clients outside the network (port 9092 in the container, where docker-compose.yml
# publishes KAFKA_PORT), socat relays that port to it: the broker advertises one address
# (ADVERTISED_LISTENER_URL) that the host and the containers both reach.
if [ -n "${RELAY_PORT:-}" ]; then
  socat "TCP-LISTEN:$RELAY_PORT,fork,reuseaddr" "TCP:127.0.0.1:${LISTENER_URL##*:}" &
fi
exec tansu broker "$@"
