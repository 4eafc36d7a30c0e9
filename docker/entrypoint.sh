#!/bin/sh
# The image's entrypoint: make the container's environment one autotrain can write in, say what the
# container cannot see, then run `autotrain ARGS...` in its place.
set -eu

# `docker run --user UID:GID` with a uid the image does not know: HOME is / (not writable), so matplotlib,
# Triton and inductor would each warn or fail on their caches. Give that user a home of its own.
if [ ! -w "${HOME:-/}" ] || [ "${HOME:-/}" = / ]; then
  HOME="/tmp/home-$(id -u)"
  mkdir -p "$HOME"
  export HOME
fi
# inductor names its cache after the user name, which a uid without a passwd entry lacks.
if ! id -un >/dev/null 2>&1; then
  export USER="uid$(id -u)" LOGNAME="uid$(id -u)"
fi
export MPLCONFIGDIR="${MPLCONFIGDIR:-$HOME/.cache/matplotlib}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$HOME/.cache/triton}"
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$HOME/.cache/torchinductor}"

# The Hugging Face cache volume belongs to whoever first wrote into it: another uid cannot add to it, and
# every download would fail with a message about the data. Say so, and use a cache in HOME instead.
hf_home="${HF_HOME:-$HOME/.cache/huggingface}"
for part in "$hf_home" "$hf_home/hub" "$hf_home/datasets" "$hf_home/xet"; do
  if [ -e "$part" ] && [ ! -w "$part" ]; then
    owner=$(stat -c %u "$part" 2>/dev/null || echo "?")
    echo "note: the Hugging Face cache $part belongs to uid $owner, not to this container's uid $(id -u):" \
      "downloads go to $HOME/.cache/huggingface for this run (mount a cache volume of this uid's own:" \
      "-v autotrain-hf-$(id -u):$hf_home)" >&2
    export HF_HOME="$HOME/.cache/huggingface"
    break
  fi
done

# A CUDA build of torch in a container started without --gpus sees no GPU and would train on the CPU.
case "${1:-}" in
  llm | text-classification | image-classification | --config | -c)
    if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1 && python -c 'import importlib.util as u, os, sys; t = u.find_spec("torch"); sys.exit(0 if t and os.path.exists(os.path.join(t.submodule_search_locations[0], "lib", "libtorch_cuda.so")) else 1)' 2>/dev/null; then
      echo "note: this container sees no GPU: start it with \`docker run --gpus all ...\` (NVIDIA Container" \
        "Toolkit on the host) to train on the host's GPUs; without, the run uses the CPU" >&2
    fi
    ;;
esac

exec autotrain "$@"
