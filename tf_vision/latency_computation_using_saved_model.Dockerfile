# The nascli latency calculator: loads a SavedModel and times its serving_default signature on
# the container's device (the GPU with `docker run --gpus all`), as a NAS trial times its export.
#
#   nascli build --project_id P --region R --latency_calculator_docker_id nas-latency
#   docker run --gpus all -v /shared:/shared URI --saved_model_dir /shared/job/0003/export
#
# Arguments go to `python -m tf_vision.serving.latency_main` (--saved_model_dir, --input_type,
# --batch_sizes, --warmup, --runs, --image_size, --output_file); the result is JSON on stdout.
# Build context: the repository root (see .dockerignore).

# The TensorFlow of pyproject.toml (tensorflow~=2.20.0), with CUDA and cuDNN, on Python 3.11.
FROM tensorflow/tensorflow:2.20.0-gpu

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/nascli

# Dependencies first, from pyproject.toml alone (see nas_multi_trial.Dockerfile).
COPY pyproject.toml README.md ./
RUN mkdir -p nascli tf_vision && touch nascli/__init__.py tf_vision/__init__.py \
    && python3 -m pip install . \
    && python3 -m pip uninstall -y nascli \
    && rm -rf nascli tf_vision build *.egg-info

COPY . .
RUN python3 -m pip install --no-deps -e . \
    && (command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python) \
    && python -c "import tf_vision.serving.latency_main"

ENTRYPOINT ["python", "-m", "tf_vision.serving.latency_main"]
