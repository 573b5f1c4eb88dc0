# syntax=docker/dockerfile:1
# The ML step image: TensorFlow, tf.Transform, Beam and great-expectations from
# requirements.lock, the data packages of requirements-nodeps.txt, this repo, and the Data
# Docs assets (the same stack as `make venv`), in a venv at /opt/ml-venv that is first on
# PATH. No ENTRYPOINT: a step runs as its own entry point, the same way everywhere:
#
#   docker run --rm -v retrain_artifacts:/data retrain/ml:dev \
#       python -m components.<step> --spec '<json>' [--result-file /path/result.json]
#
# KubernetesPodOperator: image="retrain/ml:dev", cmds=["python", "-m", "components.<step>"],
# arguments=["--spec", "<json>", "--result-file", "/airflow/xcom/return.json"],
# do_xcom_push=True (@task.docker likewise). The PS-training manifests in docker/k8s/ run
# `python -m components.ctr.ps_train` in it (their `image:` is K8sSpec.image).
#
# Targets (build from the repo root):
#   docker build -f docker/ml.Dockerfile -t retrain/ml:dev .                    # the ML image
#   docker build -f docker/ml.Dockerfile --target worker -t retrain/worker:dev .
# `worker` is the Celery worker of docker/compose.yaml (and the KubernetesExecutor pod image
# of docker/helm/values.yaml): this image plus Airflow's own environment at
# /opt/airflow-venv, built from requirements-airflow.lock exactly as docker/airflow.Dockerfile
# builds it. Airflow runs from that venv; each task hands its step to RETRAIN_STEP_PYTHON,
# /opt/ml-venv/bin/python.
#
# WITH_CUDA=1 adds TensorFlow's CUDA libraries (`tensorflow[and-cuda]`) for the GPU node
# pool. requirements.lock has no pins for them (its TensorFlow is the CPU build), so they are
# resolved at build time against the lock as constraints: not reproducible until pinned.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- the ML environment, with compilers around for any sdist in the lock
FROM ${PYTHON_IMAGE} AS ml-build
ARG WITH_CUDA=0
ENV PIP_NO_CACHE_DIR=1 UV_NO_CACHE=1
RUN apt-get update && apt-get install -y --no-install-recommends gcc git \
    && rm -rf /var/lib/apt/lists/*
RUN pip install uv==0.13.9 && uv venv --python /usr/local/bin/python3.11 /opt/ml-venv
WORKDIR /src
COPY requirements.lock requirements-nodeps.txt ./
# requirements-nodeps.txt lines marked `lint-only` are schema data for the unit tests of
# docker/, those marked `bench-only` a benchmark's data (nothing a step uses): left out.
RUN uv pip install --python /opt/ml-venv/bin/python --compile-bytecode -r requirements.lock \
    && grep -v -e 'lint-only' -e 'bench-only' requirements-nodeps.txt > /tmp/nodeps.txt \
    && uv pip install --python /opt/ml-venv/bin/python --no-deps -r /tmp/nodeps.txt \
    && if [ "$WITH_CUDA" = 1 ]; then \
         uv pip install --python /opt/ml-venv/bin/python -c requirements.lock \
             "tensorflow[and-cuda]==2.21.0"; fi
COPY pyproject.toml README.md ./
COPY retrain retrain
COPY components components
COPY beam_jobs beam_jobs
# Data Docs render without the network: the CSS/JS their pages need, from the npm registry
# (sha512-pinned), into /opt/ml-venv/share/retrain/docs-assets, as `make venv` does.
RUN uv pip install --python /opt/ml-venv/bin/python --compile-bytecode --no-deps . \
    && /opt/ml-venv/bin/python -m retrain.common.docs_assets fetch

# ---- Airflow's own environment, for the worker target only (as docker/airflow.Dockerfile)
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

# ---- what both images share: the ML venv, the user, the artifact root
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/ml-venv/bin:$PATH \
    RETRAIN_HOME=/data \
    TF_CPP_MIN_LOG_LEVEL=2
# uid 50000, gid 0: the official Airflow Helm chart's pod user, so files on the shared
# artifact volume have one owner whichever image wrote them.
RUN useradd --uid 50000 --gid 0 --home-dir /opt/airflow --create-home --shell /bin/bash airflow \
    && mkdir -p /data && chown 50000:0 /data && chmod g+rwX /data
COPY --from=ml-build /opt/ml-venv /opt/ml-venv

# ---- the Celery worker: Airflow from /opt/airflow-venv, steps in /opt/ml-venv
FROM runtime AS worker
ENV PATH=/opt/airflow-venv/bin:$PATH \
    RETRAIN_STEP_PYTHON=/opt/ml-venv/bin/python \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/retrain/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False \
    AIRFLOW__CORE__HOSTNAME_CALLABLE=retrain.orchestration.hostname.task_host
COPY --from=airflow-build /opt/airflow-venv /opt/airflow-venv
COPY dags /opt/retrain/dags
COPY scripts /opt/retrain/scripts
RUN mkdir -p /opt/airflow/config \
    && ln -s /opt/retrain/scripts/airflow_local_settings.py /opt/airflow/config/airflow_local_settings.py \
    && chown -R 50000:0 /opt/airflow && chmod -R g+rwX /opt/airflow
USER 50000
WORKDIR /opt/airflow
CMD ["airflow", "celery", "worker"]

# ---- the ML image (the default target: last)
FROM runtime AS ml
USER 50000
WORKDIR /opt/airflow
CMD ["retrain", "--help"]
