# The gpuprov image the emitted CronJob runs: `gpuprov rebalance --emit cronjob --image <this, pinned>`.
#   docker build --build-arg EXTRAS=aws,postgres -t ghcr.io/acme/gpuprov:0.1.0 .
#   docker run --rm -e GPUPROV_DATABASE_URL=postgresql+psycopg://... ghcr.io/acme/gpuprov:0.1.0 plans
FROM python:3.12-slim

# only the extras asked for: the cloud SDKs of the clouds the fleet uses, and the PostgreSQL driver
ARG EXTRAS=aws,postgres

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 HOME=/tmp

WORKDIR /opt/gpuprov
COPY pyproject.toml README.md ./
COPY gpuprov ./gpuprov
COPY pricing ./pricing
COPY policies ./policies
COPY provisioner ./provisioner
COPY terraform ./terraform
COPY k8s ./k8s
RUN pip install --no-compile ".[${EXTRAS}]" \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin gpuprov

USER 10001:10001
ENTRYPOINT ["gpuprov"]
CMD ["--help"]
