#!/bin/sh
# zoo.cfg from the environment, as the official image writes it, then the server.
set -e
cat >/tmp/zoo.cfg <<CFG
tickTime=2000
dataDir=/data
clientPort=2181
admin.enableServer=false
4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr,ruok}
CFG
exec java ${JVMFLAGS:--Xmx256m} -Dzookeeper.log.dir=/data \
  -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain /tmp/zoo.cfg
