# Rendered by sglstack for stack 'pypi-cu130' from images/Dockerfile.j2: do not edit by hand.
# SGLang 0.5.23 from PyPI alone (PyTorch 2.14.1 with NVIDIA's CUDA 13.0 wheels, sglang-kernel 0.4.10, FlashInfer 0.7.2) on Debian 12
#
# No `# syntax=` line on purpose: BuildKit's built-in Dockerfile frontend is used, so that a build needs
# no registry to fetch a frontend image from.

# ---- stage 1: fetch the pinned SGLang, apply and verify this stack's patches -----------------------
FROM debian:bookworm-slim AS sglang-src
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG TARGETARCH
# The src stage only runs stdlib Python to fetch and patch a wheel; its apt packages are not shipped,
# and Debian drops superseded versions from its archive, so exact apt pins would only break rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-pip ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY tools/pip-env.sh tools/wheelkit.py /opt/sglstack/tools/
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=secret,id=hf_token,required=false \
    --mount=type=tmpfs,target=/run/sglstack \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-src \
    . /opt/sglstack/tools/pip-env.sh \
 && case "${TARGETARCH:-amd64}" in amd64) arch=x86_64 ;; arm64) arch=aarch64 ;; *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; esac \
 && set -- --platform "manylinux2014_${arch}" --platform any \
 && for v in 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39; do set -- "$@" --platform "manylinux_2_${v}_${arch}"; done \
 && python3 -m pip download --no-deps --only-binary=:all: --dest /src/dist \
      --python-version 3.11 --implementation cp \
      --abi cp311 --abi abi3 --abi none "$@" \
      "sglang==0.5.23"
COPY stack.json /opt/sglstack/stack.json
RUN python3 /opt/sglstack/tools/wheelkit.py unpack /src/dist/sglang-*.whl /src/tree \
 && mkdir -p /out \
 && python3 /opt/sglstack/tools/wheelkit.py requirements /src/dist/sglang-*.whl /opt/sglstack/stack.json /out/sglang-requirements.txt
# Patches come last in this stage: editing one re-runs only the steps below.
COPY tools/patchkit /opt/sglstack/tools/patchkit
COPY patches/ /opt/sglstack/patches/
ENV PYTHONPATH=/opt/sglstack/tools
RUN python3 -m patchkit apply --root /src/tree --patches-dir /opt/sglstack/patches \
      --sglang-version "$(python3 /opt/sglstack/tools/wheelkit.py version /src/tree)" \
      --policy notice --manifest /out/patches.json \
      kimi-k25-eagle3 \
 && python3 /opt/sglstack/tools/wheelkit.py overlay /src/tree /src/dist/sglang-*.whl /out/overlay

# ---- stage 2: the serving image --------------------------------------------------------------------
FROM sglstack/base:debian12-slim-amd64 AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH}
ENV TORCH_CUDA_ARCH_LIST="9.0 10.0 10.3 12.0" \
    CUDA_HOME=/opt/venv/lib/python3.11/site-packages/nvidia/cu13
# The base image is pinned; apt versions float within its release and superseded ones leave the archive.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev g++ ca-certificates libnuma1 numactl \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv
COPY tools/pip-env.sh /opt/sglstack/tools/pip-env.sh
# torch 2.14.1: the heaviest layer, first, so later changes keep it
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=tmpfs,target=/run/sglstack \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    . /opt/sglstack/tools/pip-env.sh \
 && pip list --format=freeze > /run/sglstack/installed.txt \
 && pip install --constraint /run/sglstack/installed.txt torch==2.14.1 torchvision==0.29.1
# sglang-kernel 0.4.10
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=tmpfs,target=/run/sglstack \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    . /opt/sglstack/tools/pip-env.sh \
 && pip list --format=freeze > /run/sglstack/installed.txt \
 && pip install --constraint /run/sglstack/installed.txt sglang-kernel==0.4.10
# FlashInfer 0.7.2
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=tmpfs,target=/run/sglstack \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    . /opt/sglstack/tools/pip-env.sh \
 && pip list --format=freeze > /run/sglstack/installed.txt \
 && pip install --constraint /run/sglstack/installed.txt flashinfer-python==0.7.2
# cuda-jit: cuda-toolkit[nvcc,cccl]==13.0.3
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=tmpfs,target=/run/sglstack \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    . /opt/sglstack/tools/pip-env.sh \
 && pip list --format=freeze > /run/sglstack/installed.txt \
 && pip install --constraint /run/sglstack/installed.txt 'cuda-toolkit[nvcc,cccl]==13.0.3'
# SGLang's own requirements, with this stack's declared overrides applied in the open (see the file).
COPY --from=sglang-src /out/sglang-requirements.txt /opt/sglstack/sglang-requirements.txt
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=tmpfs,target=/run/sglstack \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    . /opt/sglstack/tools/pip-env.sh \
 && pip list --format=freeze > /run/sglstack/installed.txt \
 && pip install --constraint /run/sglstack/installed.txt -r /opt/sglstack/sglang-requirements.txt
# The JIT compilers (FlashInfer, DeepGEMM, torch's cpp_extension) link as against a CUDA install:
# -L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda. NVIDIA's wheels ship lib/ and only the versioned
# libcudart.so.N; -lcuda is the driver's libcuda.so.1, which the NVIDIA runtime mounts at start (where a
# CUDA toolkit has a stand-in stub, this links to it: dangling until then, on no loader path).
RUN cudart="$(find "$CUDA_HOME/lib" -maxdepth 1 -name 'libcudart.so.[0-9]*' -printf '%f\n' | sort | head -n 1)" \
 && test -n "$cudart" \
 && ln -sfn lib "$CUDA_HOME/lib64" \
 && ln -sfn "$cudart" "$CUDA_HOME/lib/libcudart.so" \
 && mkdir -p "$CUDA_HOME/lib/stubs" \
 && ln -sfn "/usr/lib/$(gcc -print-multiarch)/libcuda.so.1" "$CUDA_HOME/lib/stubs/libcuda.so"
# The pristine SGLang wheel gets its own layer (installed and byte-compiled once per SGLang version);
# the patched files come as a small overlay after it, so a patch change rebuilds only kilobytes.
RUN --mount=type=bind,from=sglang-src,source=/src/dist,target=/run/sglang-dist \
    pip install --no-deps --no-cache-dir /run/sglang-dist/sglang-*.whl
COPY --from=sglang-src /out/patches.json /opt/sglstack/patches.json
COPY stack.json /opt/sglstack/stack.json
COPY tools/ /opt/sglstack/tools/
COPY patches/ /opt/sglstack/patches/
COPY --from=sglang-src /out/overlay/ /opt/venv/lib/python3.11/site-packages/
# RECORD is brought up to date for the patched files (pip uninstall and `pip show -f` stay truthful),
# only the changed modules are recompiled, the patches are verified where they will run (the installed
# tree), and what is really installed is written down once: `invoke build` reads patches.json and
# installed.json back from the image and compares them with the stack's pins, without running it again.
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && python /opt/sglstack/tools/wheelkit.py refresh-record "$site" sglang \
 && python -m compileall -q "$site/sglang" \
 && PYTHONPATH=/opt/sglstack/tools python -m patchkit verify --root "$site" --patches-dir /opt/sglstack/patches \
      --manifest /opt/sglstack/patches.json kimi-k25-eagle3 \
 && python /opt/sglstack/tools/imageinfo.py > /opt/sglstack/installed.json
# What an nvidia/cuda base sets for the NVIDIA container runtime: which GPUs and driver parts to mount,
# and the driver this CUDA needs (an older one is refused at start, by name, not at the first kernel).
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0"
WORKDIR /sgl-workspace
EXPOSE 30000
LABEL io.sglstack.cuda="13.0" \
      io.sglstack.cuda-arch-list="9.0 10.0 10.3 12.0" \
      io.sglstack.patches="kimi-k25-eagle3" \
      io.sglstack.pin.cuda-toolkit="13.0.3" \
      io.sglstack.pin.flashinfer-python="0.7.2" \
      io.sglstack.pin.sglang="0.5.23" \
      io.sglstack.pin.sglang-kernel="0.4.10" \
      io.sglstack.pin.torch="2.14.1" \
      io.sglstack.pin.torchvision="0.29.1" \
      io.sglstack.python="3.11" \
      io.sglstack.sglang="0.5.23" \
      io.sglstack.stack="pypi-cu130" \
      org.opencontainers.image.base.name="sglstack/base:debian12-slim-amd64" \
      org.opencontainers.image.description="SGLang 0.5.23 from PyPI alone (PyTorch 2.14.1 with NVIDIA's CUDA 13.0 wheels, sglang-kernel 0.4.10, FlashInfer 0.7.2) on Debian 12" \
      org.opencontainers.image.title="sglstack pypi-cu130" \
      org.opencontainers.image.vendor="sglstack" \
      org.opencontainers.image.version="0.5.23"
