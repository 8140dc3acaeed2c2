# The crawlcluster image every role of docker-compose.yml runs (one role per container).
# BASE is any image with Python 3.10+ whose `pip` and `python` are on PATH: the official
# one by default; deploy/images.sh builds one from Debian's packages for a site without an
# image registry, and puts wheels in deploy/wheels, installed then with no index.
ARG BASE=python:3.11-slim
FROM ${BASE}
WORKDIR /src
# Chromium for a rule's render (crawler/render/browser.py): Debian's headless shell, which
# Playwright (the [render] extra) drives with its Node.js driver (which needs libatomic1);
# no browser is downloaded at run time. A browser
# needs Debian's security updates: their source is added where the base lacks it.
ARG DEBIAN_SECURITY=http://deb.debian.org/debian-security
RUN if ! grep -rqs -- -security /etc/apt/sources.list /etc/apt/sources.list.d/; then \
      . /etc/os-release \
      && echo "deb $DEBIAN_SECURITY $VERSION_CODENAME-security main" \
         >/etc/apt/sources.list.d/security.list; \
    fi \
 && apt-get update -q \
 && apt-get install -y -q --no-install-recommends chromium-headless-shell libatomic1 \
 && rm -rf /var/lib/apt/lists/*
# The dependencies first, a layer of their own, built again only when pyproject.toml or the
# wheels change (a change to the code reinstalls crawlcluster alone).
COPY pyproject.toml setup.py README.md /src/
COPY deploy/wheels /src/deploy/wheels
RUN if ls deploy/wheels/*.whl >/dev/null 2>&1; then \
      pip install --no-cache-dir --no-index --find-links deploy/wheels '.[render]' ; \
    else \
      pip install --no-cache-dir '.[render]' ; \
    fi \
 && rm -rf deploy build ./*.egg-info
COPY . /src
# its build environment (setuptools) from the wheels too, where they are
RUN if ls deploy/wheels/*.whl >/dev/null 2>&1; then \
      pip install --no-cache-dir --no-deps --no-index --find-links deploy/wheels . ; \
    else \
      pip install --no-cache-dir --no-deps . ; \
    fi \
 && rm -rf deploy/wheels build \
 && useradd --create-home crawler \
 && mkdir -p /var/lib/crawlcluster && chown crawler /var/lib/crawlcluster
# Not root: Chromium's sandbox (user namespaces) stays on (crawler/render/browser.py).
USER crawler
ENV CRAWLCLUSTER_STATE_DIR=/var/lib/crawlcluster \
    CRAWLCLUSTER_SERVICES_INSTALL=false
