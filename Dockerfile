# The one image every Magnetar process runs from (docker-compose.yml): `magnetar zookeeper|bookie|broker|proxy`.
# Debian bookworm, because magnetar/zookeeper.py runs ZooKeeper from the jars of bookworm's `zookeeper`
# package (/usr/share/java), with Java from default-jre-headless.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends default-jre-headless zookeeper \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/magnetar
# Only what the package needs (see .dockerignore), so editing tests or docs does not invalidate this layer.
COPY pyproject.toml README.md ./
COPY magnetar ./magnetar
COPY config_store ./config_store
COPY bookie ./bookie
COPY broker ./broker
COPY replicator ./replicator
COPY clusters ./clusters
COPY observability ./observability
COPY proxy ./proxy
COPY spark ./spark
RUN pip install --no-cache-dir . && rm -rf build

# Configuration files are mounted here by docker-compose.yml; data goes to a volume under /var/lib/magnetar.
VOLUME ["/var/lib/magnetar"]
EXPOSE 2181 3181 3182 6650 6651 8000 8080 8443
CMD ["magnetar", "--help"]
