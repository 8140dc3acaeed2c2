# The crawlcluster image every role of docker-compose.yml runs (one role per container).
FROM python:3.11-slim
WORKDIR /src
COPY . /src
RUN pip install --no-cache-dir . \
 && useradd --create-home crawler \
 && mkdir -p /var/lib/crawlcluster && chown crawler /var/lib/crawlcluster
USER crawler
ENV CRAWLCLUSTER_STATE_DIR=/var/lib/crawlcluster \
    CRAWLCLUSTER_SERVICES_INSTALL=false
