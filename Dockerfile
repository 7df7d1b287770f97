# Kelp's container image: one image for the broker and the operator.
#   docker build -t kelp:0.1.0 .
#   docker run -p 9092:9092 -p 8080:8080 kelp:0.1.0                 # kelp broker --host 0.0.0.0
#   docker run kelp:0.1.0 broker --host 0.0.0.0 --set num.partitions=3
#   docker run kelp:0.1.0 operator ...                              # `kelp operator` (the operator track)
#
# images/build-image.sh builds the same image without Docker (Debian packages + PyPI,
# umoci); tests/kube/test_kube_broker_pod.py checks that the ENTRYPOINT, CMD, USER,
# WORKDIR, ENV and EXPOSE below match that image, so change both together.

# ---- build: Kelp's wheel and a venv with every pinned dependency ------------------
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Dependencies first, from the lock both images share, so code changes reuse this layer.
COPY images/requirements.txt images/requirements.txt
RUN python -m venv --without-pip /opt/kelp \
 && python -m pip --python /opt/kelp/bin/python install --no-deps --only-binary=:all: \
      --requirement images/requirements.txt \
 && python -m pip --python /opt/kelp/bin/python check
COPY pyproject.toml setup.py README.md ./
COPY kelp kelp
COPY broker broker
COPY operator operator
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && python -m pip --python /opt/kelp/bin/python install --no-deps --no-index /wheels/kelp-*.whl

# ---- runtime: no compilers, no pip cache, no apt lists ----------------------------
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 kelp \
 && useradd --uid 10001 --gid 10001 --home-dir /var/lib/kelp --no-create-home \
      --shell /usr/sbin/nologin --comment "Kelp broker and operator" kelp \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/kelp
COPY --from=build /opt/kelp /opt/kelp
ENV PATH=/opt/kelp/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    KELP_LOG_DIRS=/var/lib/kelp
LABEL org.opencontainers.image.title="kelp" \
      org.opencontainers.image.version="0.1.0"
USER 10001:10001
WORKDIR /var/lib/kelp
EXPOSE 9092/tcp 8080/tcp
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/kelp/bin/kelp"]
CMD ["broker", "--host", "0.0.0.0"]
