# The nascli trainer image: one NAS trial per container, as Vertex AI NAS's trainer image.
#
#   nascli build --project_id P --region R --trainer_docker_id nas-trainer
#   docker run --gpus all -v /shared:/shared URI /shared/job/0003/trial_spec.json
#
# The entry point is the trial process the local search starts for every trial
# (`python -m nascli.search.trial SPEC.json`, nascli/search/executors.py), so a trial in this
# image behaves as a local one. Ray is installed too (the `ray` extra): `nascli search
# --container_image URI` runs its trials in this image on a Ray cluster. Build context: the
# repository root (see .dockerignore).

# The TensorFlow of pyproject.toml (tensorflow~=2.20.0), with CUDA and cuDNN, on Python 3.11.
FROM tensorflow/tensorflow:2.20.0-gpu

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/nascli

# `ray up` (deploy/ray/cluster-gpu.yaml) runs the Ray nodes in this image: Ray copies files into
# the head's container with rsync, and the head's autoscaler reaches new workers over ssh.
RUN apt-get update && apt-get install -y --no-install-recommends rsync openssh-client \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first, from pyproject.toml alone, so a code change does not reinstall the
# TensorFlow stack: install the project with empty packages, then drop it (keeping its deps).
COPY pyproject.toml README.md ./
RUN mkdir -p nascli tf_vision && touch nascli/__init__.py tf_vision/__init__.py \
    && python3 -m pip install ".[ray]" \
    && python3 -m pip uninstall -y nascli \
    && rm -rf nascli tf_vision build *.egg-info

# The project, installed editable as scripts/setup.sh does: its YAML recipes and testing files
# are read from the source tree (tf_vision/configs/experiments, tf_vision/test_files).
COPY . .
RUN python3 -m pip install --no-deps -e . \
    && (command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python) \
    && python -c "import nascli.search.trial, ray, tf_keras, official.vision"

ENTRYPOINT ["python", "-m", "nascli.search.trial"]
