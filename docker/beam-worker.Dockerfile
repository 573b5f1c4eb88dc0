# syntax=docker/dockerfile:1
# The Beam SDK worker image for the portable runners (Flink, Spark, Dataflow): Beam's own
# Python 3.11 SDK image of the locked Beam version, plus what the repo's pipelines import on
# the workers -- tf.Transform and TensorFlow (beam_jobs.preprocess_ctr), google-crc32c and
# isal (its TFRecord shard writer), keras-hub and tensorflow-text (beam_jobs.score_text),
# pyarrow, pandas -- at the versions of
# requirements.lock, and this repo (beam_jobs, components, their feature/task configs).
# A pipeline uses it with
#
#   python -m beam_jobs.preprocess_ctr --runner=FlinkRunner --flink_master=HOST:8081 \
#       --environment_type=DOCKER --sdk_container_image=retrain/beam-worker:dev ...
#   (Dataflow / Spark: the same --sdk_container_image)
#
# so the workers need no --setup_file or --requirements_file staging. The ENTRYPOINT stays
# Beam's boot program (/opt/apache/beam/boot), which the runner starts.
# Build from the repo root:  docker build -f docker/beam-worker.Dockerfile -t retrain/beam-worker:dev .
FROM apache/beam_python3.11_sdk:2.77.0

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 TF_CPP_MIN_LOG_LEVEL=2
COPY requirements.lock /tmp/retrain-src/requirements.lock
# The lock as constraints: only what the pipelines need is installed, each at its locked
# version (the lock was resolved with apache-beam 2.77.0, so Beam's own pins agree).
RUN pip install -c /tmp/retrain-src/requirements.lock \
        apache-beam==2.77.0 tensorflow-transform tensorflow-text keras-hub pyarrow pandas numpy \
        google-crc32c isal
COPY pyproject.toml README.md /tmp/retrain-src/
COPY retrain /tmp/retrain-src/retrain
COPY components /tmp/retrain-src/components
COPY beam_jobs /tmp/retrain-src/beam_jobs
RUN pip install --no-deps /tmp/retrain-src \
    && rm -rf /tmp/retrain-src \
    && python -c "import tensorflow_transform, isal, beam_jobs.preprocess_ctr, beam_jobs.score_text"
