# The gpuprov image the emitted CronJob runs: `gpuprov rebalance --emit cronjob --image <this, pinned>`.
#   docker build --build-arg EXTRAS=aws,postgres -t ghcr.io/acme/gpuprov:0.1.0 .
#   docker run --rm -e GPUPROV_DATABASE_URL=postgresql+psycopg://... ghcr.io/acme/gpuprov:0.1.0 plans
# Service mode (`rebalance --every 15m --yes`) has a probe, for docker's --health-cmd or a Kubernetes
# exec liveness probe: `gpuprov rebalance health --max-age 30m` (exit 0 when a pass ended that recently).
# The base image is pinned by its exact tag; pin it by digest too where your registry policy asks for it.
ARG PYTHON_IMAGE=python:3.12.11-slim-bookworm

# --- build: the wheels of gpuprov and of everything it needs, nothing else goes on ------------------
FROM ${PYTHON_IMAGE} AS build
ARG EXTRAS=aws,postgres
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# the whole build context: .dockerignore leaves out what is not packaged (tests, data sources,
# benchmarks, caches), so what pyproject.toml packages is exactly what this copies
COPY . .
RUN pip wheel --wheel-dir /wheels ".[${EXTRAS}]"

# --- run: the wheels installed, no compiler, no source tree, not root --------------------------------
FROM ${PYTHON_IMAGE}
ARG EXTRAS=aws,postgres
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HOME=/tmp
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels "gpuprov[${EXTRAS}]" \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin gpuprov
USER 10001:10001
ENTRYPOINT ["gpuprov"]
CMD ["--help"]
