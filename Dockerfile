# autotrain for GPU hosts (NVIDIA driver + NVIDIA Container Toolkit on the host):
#   docker build -t autotrain .
#   docker run --gpus all --ipc=host -v "$PWD":/workspace -v autotrain-hf:/cache/huggingface \
#     autotrain llm --config configs/llm/sft.yml
# Another CUDA/PyTorch base: --build-arg BASE_IMAGE=pytorch/pytorch:<version>-cuda<x.y>-cudnn9-runtime
# DeepSpeed (strategy: deepspeed): --build-arg EXTRA_PACKAGES=deepspeed
ARG BASE_IMAGE=pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ARG EXTRA_PACKAGES=""

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/cache/huggingface

WORKDIR /opt/autotrain

# Dependencies first, read from pyproject.toml, so editing the code does not re-download them. The base
# image's CUDA build of torch already satisfies the torch requirement and is kept.
COPY pyproject.toml ./
RUN python -c "import subprocess, sys, tomllib; \
deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
subprocess.check_call([sys.executable, '-m', 'pip', 'install', *deps])" \
 && if [ -n "$EXTRA_PACKAGES" ]; then pip install $EXTRA_PACKAGES; fi

COPY . .
RUN pip install --no-deps . \
 && useradd --create-home --uid 1000 --shell /bin/bash autotrain \
 && mkdir -p /workspace "$HF_HOME" \
 && chown autotrain:autotrain /workspace "$HF_HOME"

USER autotrain
WORKDIR /workspace
# Models and datasets downloaded from the Hub survive the container (and are shared between runs).
VOLUME ["/cache/huggingface"]

ENTRYPOINT ["autotrain"]
CMD ["--help"]
