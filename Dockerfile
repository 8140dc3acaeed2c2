# The crawlcluster image every role of docker-compose.yml runs (one role per container).
# BASE is any image with Python 3.10+ whose `pip` and `python` are on PATH: the official
# one by default; deploy/images.sh builds one from Debian's packages for a site without an
# image registry, and puts wheels in deploy/wheels, installed then with no index.
ARG BASE=python:3.11-slim
FROM ${BASE}
WORKDIR /src
# The dependencies first, a layer of their own, built again only when pyproject.toml or the
# wheels change (a change to the code reinstalls crawlcluster alone).
COPY pyproject.toml setup.py README.md /src/
COPY deploy/wheels /src/deploy/wheels
RUN if ls deploy/wheels/*.whl >/dev/null 2>&1; then \
      pip install --no-cache-dir --no-index --find-links deploy/wheels . ; \
    else \
      pip install --no-cache-dir . ; \
    fi \
 && rm -rf deploy build ./*.egg-info
COPY . /src
RUN pip install --no-cache-dir --no-deps . \
 && rm -rf deploy/wheels build \
 && useradd --create-home crawler \
 && mkdir -p /var/lib/crawlcluster && chown crawler /var/lib/crawlcluster
USER crawler
ENV CRAWLCLUSTER_STATE_DIR=/var/lib/crawlcluster \
    CRAWLCLUSTER_SERVICES_INSTALL=false
