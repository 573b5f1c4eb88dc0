# syntax=docker/dockerfile:1
# The Airflow components' image: api-server, scheduler, dag-processor, triggerer and the
# `airflow db migrate` job (docker/compose.yaml; `images.airflow` of docker/helm/values.yaml).
# Airflow and its providers only, from requirements-airflow.lock: no TensorFlow, Beam or
# great-expectations (tests/unit/test_docker_files.py checks the lock). Tasks hand their
# steps to the ML environment (RETRAIN_STEP_PYTHON): the Celery workers run the `worker`
# target of docker/ml.Dockerfile, which carries both environments.
# This repo is installed without its dependencies so that the DAG files (stdlib-only specs),
# the Retrain UI plugin, the cluster policy and retrain.orchestration.hostname import.
#
# Build from the repo root:  docker build -f docker/airflow.Dockerfile -t retrain/airflow:dev .
# Keep PYTHON_IMAGE the same as docker/ml.Dockerfile's: the Helm values copy the ML image's
# venv into this image's containers, and a venv needs the same base interpreter.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS airflow-build
ENV PIP_NO_CACHE_DIR=1 UV_NO_CACHE=1
RUN pip install uv==0.13.9 && uv venv --python /usr/local/bin/python3.11 /opt/airflow-venv
WORKDIR /src
COPY requirements-airflow.lock ./
RUN uv pip install --python /opt/airflow-venv/bin/python --compile-bytecode \
        -r requirements-airflow.lock
COPY pyproject.toml README.md ./
COPY retrain retrain
COPY components components
COPY beam_jobs beam_jobs
RUN uv pip install --python /opt/airflow-venv/bin/python --compile-bytecode --no-deps .

FROM ${PYTHON_IMAGE} AS airflow
# Settings every Airflow process needs whatever the deployment (the rest comes from
# compose.yaml / the Helm values; secrets never from here). PYTHONDONTWRITEBYTECODE: the
# venv was compiled at build time.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/airflow-venv/bin:$PATH \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/retrain/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    AIRFLOW__CORE__HOSTNAME_CALLABLE=retrain.orchestration.hostname.task_host \
    RETRAIN_HOME=/data
# uid 50000, gid 0: what the official Helm chart runs Airflow pods as.
RUN useradd --uid 50000 --gid 0 --home-dir /opt/airflow --create-home --shell /bin/bash airflow \
    && mkdir -p /data /opt/airflow/config \
    && chown -R 50000:0 /data /opt/airflow && chmod -R g+rwX /data /opt/airflow
COPY --from=airflow-build /opt/airflow-venv /opt/airflow-venv
COPY dags /opt/retrain/dags
COPY scripts /opt/retrain/scripts
# The cluster policy (backfills' heavy tasks in their own pool): Airflow imports
# airflow_local_settings from $AIRFLOW_HOME/config, as scripts/airflow-env.sh links it.
RUN ln -s /opt/retrain/scripts/airflow_local_settings.py /opt/airflow/config/airflow_local_settings.py
USER 50000
WORKDIR /opt/airflow
CMD ["airflow", "version"]
