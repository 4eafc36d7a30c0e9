# autotrain for GPU hosts (NVIDIA driver + NVIDIA Container Toolkit on the host):
#   docker build -t autotrain .
#   docker run --rm --gpus all --ipc=host --stop-timeout 300 -v "$PWD":/workspace -v autotrain-hf:/cache/huggingface \
#     autotrain llm --config configs/llm/sft.yml
#   docker run --rm --gpus all --stop-timeout 300 -p 7860:7860 -e AUTOTRAIN_APP_URL=http://localhost:7860 \
#     -v "$PWD":/workspace -v autotrain-hf:/cache/huggingface autotrain app      # then open the address it prints
# Another CUDA/PyTorch base: --build-arg BASE_IMAGE=pytorch/pytorch:<version>-cuda<x.y>-cudnn9-runtime
# More packages (the environment belongs to root: a container cannot add any), e.g. DeepSpeed, wandb:
#   --build-arg EXTRA_PACKAGES="deepspeed wandb"
# Without the C compiler (~200 MB; compiled CAME steps then fall back to eager): --build-arg COMPILER=0
# Checked by .ci/docker-check (docs/docker.md).
ARG BASE_IMAGE=pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ARG EXTRA_PACKAGES=""
ARG COMPILER=1

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/opt/autotrain/base-constraints.txt \
    PIP_USE_PEP517=1 \
    HF_HOME=/cache/huggingface \
    AUTOTRAIN_CONTAINER=docker \
    AUTOTRAIN_IMAGE=1

# PIP_USE_PEP517: a base whose pip predates 23.1 (Debian's) builds a package without pyproject.toml the old way,
# fetching its setup_requires without their dependencies: seqeval (token classification) then fails on
# setuptools_scm 10, which needs vcs-versioning. The PEP 517 build installs them properly, with any pip.
# tini reaps the processes a multi-GPU launch leaves and passes SIGTERM on (docker stop saves a checkpoint).
# The runtime images have no C compiler, without which torch.compile (CAME's compiled steps; Triton's
# launchers on a GPU) cannot build anything: gcc and g++ come in unless COMPILER=0.
# AUTOTRAIN_IMAGE: autotrain's hints name the build arguments (EXTRA_PACKAGES, COMPILER) instead of pip or apt,
# and the container's own fixes (-v "$PWD":/workspace, --user) where a folder is missing or not writable.
# The lists, the downloaded .deb files and apt's binary caches go in the layer that made them (~130 MB): not
# every base has a hook that drops them (Debian's debootstrap has none).
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends tini $([ "$COMPILER" = 1 ] && echo gcc g++ libc6-dev) >/dev/null \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb

WORKDIR /opt/autotrain

# The base's torch (a CUDA build) is kept: every later pip install of the build (EXTRA_PACKAGES' included)
# is constrained to it, so no dependency can swap it for another build. Dependencies first, read from pyproject.toml, so
# editing the code does not re-download them: the package's, the app's, export's, every task's and
# tensorboard (the extras the README's commands reach for), and bitsandbytes (4/8-bit loading, 8-bit optimizers) where
# torch has CUDA.
COPY pyproject.toml ./
RUN python -c "import re; from importlib import metadata; \
found = {d.metadata['Name'].lower(): d.version for d in metadata.distributions()}; \
kept = [f'{n}=={v}' for n, v in sorted(found.items()) if re.fullmatch(r'torch|torchvision|torchaudio|triton|nvidia-[a-z0-9-]+', n)]; \
open('base-constraints.txt', 'w').write(''.join(line + chr(10) for line in kept))" \
 && grep -i '^torch==' base-constraints.txt \
 && python -c "import re, subprocess, sys, tomllib, torch; \
project = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
extras = project['optional-dependencies']; \
tasks = re.search(r'\\[(.*)\\]', extras['tasks'][0]).group(1).split(','); \
deps = [*project['dependencies'], *extras['app'], *extras['export'], 'tensorboard']; \
deps += [dep for name in tasks for dep in extras[name]]; \
deps += ['bitsandbytes'] if torch.version.cuda else []; \
subprocess.check_call([sys.executable, '-m', 'pip', 'install', '--quiet', *deps])" \
 && if [ -n "$EXTRA_PACKAGES" ]; then pip install --quiet $EXTRA_PACKAGES; fi

COPY . .
# The user is uid 1000 (most hosts' first user), so a mounted clone owned by it is writable as it is; any
# other uid works with --user "$(id -u):$(id -g)": the entrypoint then finds a writable home and caches.
RUN pip install --quiet --no-deps . \
 && install -m 0755 docker/entrypoint.sh /usr/local/bin/autotrain-entrypoint \
 && useradd --create-home --uid 1000 --shell /bin/bash autotrain \
 && mkdir -p /workspace "$HF_HOME" \
 && chown autotrain:autotrain /workspace "$HF_HOME" \
 && chmod 1777 "$HF_HOME"

USER autotrain
WORKDIR /workspace
# No VOLUME: each container would leave an anonymous volume behind. The documented commands mount a named
# one (-v autotrain-hf:/cache/huggingface), which keeps downloads between containers; a fresh volume takes the
# folder's mode 1777, so any uid can write to it.
# `autotrain app` listens here in a container (on every interface, with a token): publish it with -p 7860:7860.
EXPOSE 7860
# docker stop sends SIGTERM: the run saves a checkpoint and exits 143. Saving a large model takes longer
# than docker's default 10 s before SIGKILL: run with --stop-timeout 300 (docs/docker.md).
STOPSIGNAL SIGTERM

ENTRYPOINT ["tini", "--", "autotrain-entrypoint"]
CMD ["--help"]
