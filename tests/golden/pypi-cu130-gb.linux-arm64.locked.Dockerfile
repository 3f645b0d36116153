# Rendered by sglstack for stack 'pypi-cu130-gb' from images/Dockerfile.j2: do not edit by hand.
# pypi-cu130 for Grace hosts too - one release of linux/amd64 and linux/arm64 (GH200, GB200, GB300) from PyPI alone
#
# No `# syntax=` line on purpose: BuildKit's built-in Dockerfile frontend is used, so that a build needs
# no registry to fetch a frontend image from.

# ---- stage 1: fetch the pinned SGLang, apply and verify this stack's patches -----------------------
# The src stage's output is Python source, the same for every platform: it runs natively on the build
# machine (and its image is the build machine's), never under emulation.
FROM --platform=$BUILDPLATFORM debian:bookworm-slim AS sglang-src
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
    --mount=type=bind,source=lock/sglang.txt,target=/run/sglstack-lock/sglang.txt \
    . /opt/sglstack/tools/pip-env.sh \
 && case "${TARGETARCH:-amd64}" in amd64) arch=x86_64 ;; arm64) arch=aarch64 ;; *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; esac \
 && set -- --platform "manylinux2014_${arch}" --platform any \
 && for v in 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39; do set -- "$@" --platform "manylinux_2_${v}_${arch}"; done \
 && python3 -m pip download --no-deps --only-binary=:all: --dest /src/dist \
      --python-version 3.11 --implementation cp \
      --abi cp311 --abi abi3 --abi none "$@" \
      --require-hashes -r /run/sglstack-lock/sglang.txt
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

# ---- stage 2: the locked wheels, unpacked for the target on the build machine ---------------------
# Installing a wheel runs none of its code: pip downloads each locked file for the target's platform tags
# (hash-checked against the lock, nothing resolved) and pypa's installer writes it out as into the serving
# stage's venv (/opt/venv: RECORD, scripts, bytecode, which one Python version writes the same on every
# platform). So this stage runs natively on the build machine, never under emulation; the serving stage
# copies each layer's tree, and runs the target's code only to check it.
FROM --platform=$BUILDPLATFORM debian:bookworm-slim AS wheels
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Build tools, not shipped (as the src stage's apt packages).
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3.11 python3.11-venv python3-installer ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv --system-site-packages /opt/venv
COPY tools/pip-env.sh /opt/sglstack/tools/pip-env.sh
# torch 2.14.1: the heaviest layer, first, so later changes keep it
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    --mount=type=bind,source=lock/torch.txt,target=/run/sglstack-lock/torch.txt \
    . /opt/sglstack/tools/pip-env.sh \
 && set -- \
 && for tag in manylinux_2_36_aarch64 manylinux_2_35_aarch64 manylinux_2_34_aarch64 manylinux_2_33_aarch64 manylinux_2_32_aarch64 manylinux_2_31_aarch64 manylinux_2_30_aarch64 manylinux_2_29_aarch64 manylinux_2_28_aarch64 manylinux_2_27_aarch64 manylinux_2_26_aarch64 manylinux_2_25_aarch64 manylinux_2_24_aarch64 manylinux_2_23_aarch64 manylinux_2_22_aarch64 manylinux_2_21_aarch64 manylinux_2_20_aarch64 manylinux_2_19_aarch64 manylinux_2_18_aarch64 manylinux_2_17_aarch64 manylinux2014_aarch64 any; do set -- "$@" --platform "$tag"; done \
 && /opt/venv/bin/python -m pip download --no-deps --only-binary=:all: --dest /tmp/wheels \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "$@" \
      --require-hashes -r /run/sglstack-lock/torch.txt \
 && for wheel in /tmp/wheels/*.whl; do /opt/venv/bin/python -m installer --compile-bytecode 0 --destdir /stage/torch "$wheel" || exit 1; done \
 && rm -rf /tmp/wheels
# sglang-kernel 0.4.10
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    --mount=type=bind,source=lock/sglang-kernel.txt,target=/run/sglstack-lock/sglang-kernel.txt \
    . /opt/sglstack/tools/pip-env.sh \
 && set -- \
 && for tag in manylinux_2_36_aarch64 manylinux_2_35_aarch64 manylinux_2_34_aarch64 manylinux_2_33_aarch64 manylinux_2_32_aarch64 manylinux_2_31_aarch64 manylinux_2_30_aarch64 manylinux_2_29_aarch64 manylinux_2_28_aarch64 manylinux_2_27_aarch64 manylinux_2_26_aarch64 manylinux_2_25_aarch64 manylinux_2_24_aarch64 manylinux_2_23_aarch64 manylinux_2_22_aarch64 manylinux_2_21_aarch64 manylinux_2_20_aarch64 manylinux_2_19_aarch64 manylinux_2_18_aarch64 manylinux_2_17_aarch64 manylinux2014_aarch64 any; do set -- "$@" --platform "$tag"; done \
 && /opt/venv/bin/python -m pip download --no-deps --only-binary=:all: --dest /tmp/wheels \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "$@" \
      --require-hashes -r /run/sglstack-lock/sglang-kernel.txt \
 && for wheel in /tmp/wheels/*.whl; do /opt/venv/bin/python -m installer --compile-bytecode 0 --destdir /stage/sglang-kernel "$wheel" || exit 1; done \
 && rm -rf /tmp/wheels
# FlashInfer 0.7.2
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    --mount=type=bind,source=lock/flashinfer.txt,target=/run/sglstack-lock/flashinfer.txt \
    . /opt/sglstack/tools/pip-env.sh \
 && set -- \
 && for tag in manylinux_2_36_aarch64 manylinux_2_35_aarch64 manylinux_2_34_aarch64 manylinux_2_33_aarch64 manylinux_2_32_aarch64 manylinux_2_31_aarch64 manylinux_2_30_aarch64 manylinux_2_29_aarch64 manylinux_2_28_aarch64 manylinux_2_27_aarch64 manylinux_2_26_aarch64 manylinux_2_25_aarch64 manylinux_2_24_aarch64 manylinux_2_23_aarch64 manylinux_2_22_aarch64 manylinux_2_21_aarch64 manylinux_2_20_aarch64 manylinux_2_19_aarch64 manylinux_2_18_aarch64 manylinux_2_17_aarch64 manylinux2014_aarch64 any; do set -- "$@" --platform "$tag"; done \
 && /opt/venv/bin/python -m pip download --no-deps --only-binary=:all: --dest /tmp/wheels \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "$@" \
      --require-hashes -r /run/sglstack-lock/flashinfer.txt \
 && for wheel in /tmp/wheels/*.whl; do /opt/venv/bin/python -m installer --compile-bytecode 0 --destdir /stage/flashinfer "$wheel" || exit 1; done \
 && rm -rf /tmp/wheels
# cuda-jit: cuda-toolkit[nvcc,cccl]==13.0.3
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    --mount=type=bind,source=lock/cuda-jit.txt,target=/run/sglstack-lock/cuda-jit.txt \
    . /opt/sglstack/tools/pip-env.sh \
 && set -- \
 && for tag in manylinux_2_36_aarch64 manylinux_2_35_aarch64 manylinux_2_34_aarch64 manylinux_2_33_aarch64 manylinux_2_32_aarch64 manylinux_2_31_aarch64 manylinux_2_30_aarch64 manylinux_2_29_aarch64 manylinux_2_28_aarch64 manylinux_2_27_aarch64 manylinux_2_26_aarch64 manylinux_2_25_aarch64 manylinux_2_24_aarch64 manylinux_2_23_aarch64 manylinux_2_22_aarch64 manylinux_2_21_aarch64 manylinux_2_20_aarch64 manylinux_2_19_aarch64 manylinux_2_18_aarch64 manylinux_2_17_aarch64 manylinux2014_aarch64 any; do set -- "$@" --platform "$tag"; done \
 && /opt/venv/bin/python -m pip download --no-deps --only-binary=:all: --dest /tmp/wheels \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "$@" \
      --require-hashes -r /run/sglstack-lock/cuda-jit.txt \
 && for wheel in /tmp/wheels/*.whl; do /opt/venv/bin/python -m installer --compile-bytecode 0 --destdir /stage/cuda-jit "$wheel" || exit 1; done \
 && rm -rf /tmp/wheels
# SGLang's own requirements, as resolved into the lock
RUN --mount=type=secret,id=ca_bundle,required=false \
    --mount=type=cache,target=/root/.cache/pip,id=sglstack-pip-3.11 \
    --mount=type=bind,source=lock/sglang-requirements.txt,target=/run/sglstack-lock/sglang-requirements.txt \
    . /opt/sglstack/tools/pip-env.sh \
 && set -- \
 && for tag in manylinux_2_36_aarch64 manylinux_2_35_aarch64 manylinux_2_34_aarch64 manylinux_2_33_aarch64 manylinux_2_32_aarch64 manylinux_2_31_aarch64 manylinux_2_30_aarch64 manylinux_2_29_aarch64 manylinux_2_28_aarch64 manylinux_2_27_aarch64 manylinux_2_26_aarch64 manylinux_2_25_aarch64 manylinux_2_24_aarch64 manylinux_2_23_aarch64 manylinux_2_22_aarch64 manylinux_2_21_aarch64 manylinux_2_20_aarch64 manylinux_2_19_aarch64 manylinux_2_18_aarch64 manylinux_2_17_aarch64 manylinux2014_aarch64 any; do set -- "$@" --platform "$tag"; done \
 && /opt/venv/bin/python -m pip download --no-deps --only-binary=:all: --dest /tmp/wheels \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "$@" \
      --require-hashes -r /run/sglstack-lock/sglang-requirements.txt \
 && for wheel in /tmp/wheels/*.whl; do /opt/venv/bin/python -m installer --compile-bytecode 0 --destdir /stage/sglang-requirements "$wheel" || exit 1; done \
 && rm -rf /tmp/wheels
# The SGLang wheel the src stage fetched (pure Python), last: it changes more often than its requirements.
RUN --mount=type=bind,from=sglang-src,source=/src/dist,target=/run/sglang-dist \
    for wheel in /run/sglang-dist/sglang-*.whl; do /opt/venv/bin/python -m installer --compile-bytecode 0 --destdir /stage/sglang "$wheel" || exit 1; done

# ---- stage 3: the serving image --------------------------------------------------------------------
FROM sglstack/base:debian12-slim-arm64 AS runtime
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
# torch 2.14.1: the heaviest layer, first, so later changes keep it (unpacked in the wheels stage)
COPY --from=wheels /stage/torch/opt/venv/ /opt/venv/
# sglang-kernel 0.4.10 (unpacked in the wheels stage)
COPY --from=wheels /stage/sglang-kernel/opt/venv/ /opt/venv/
# FlashInfer 0.7.2 (unpacked in the wheels stage)
COPY --from=wheels /stage/flashinfer/opt/venv/ /opt/venv/
# cuda-jit: cuda-toolkit[nvcc,cccl]==13.0.3 (unpacked in the wheels stage)
COPY --from=wheels /stage/cuda-jit/opt/venv/ /opt/venv/
# SGLang's own requirements, with this stack's declared overrides applied in the open (see the file).
COPY --from=sglang-src /out/sglang-requirements.txt /opt/sglstack/sglang-requirements.txt
# ... as resolved into the lock: installed exactly, hash-checked, unpacked in the wheels stage.
COPY --from=wheels /stage/sglang-requirements/opt/venv/ /opt/venv/
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
COPY --from=wheels /stage/sglang/opt/venv/ /opt/venv/
COPY --from=sglang-src /out/patches.json /opt/sglstack/patches.json
COPY stack.json /opt/sglstack/stack.json
COPY tools/ /opt/sglstack/tools/
COPY patches/ /opt/sglstack/patches/
COPY --from=sglang-src /out/overlay/ /opt/venv/lib/python3.11/site-packages/
# The venv's own copies of what a copied part brings again go first (pip would have replaced them; a copy cannot),
# RECORD is brought up to date for the patched files (pip uninstall and `pip show -f` stay truthful),
# only the changed modules are recompiled, the patches are verified where they will run (the installed
# tree), and what is really installed is written down once: `invoke build` reads patches.json and
# installed.json back from the image and compares them with the stack's pins, without running it again.
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && python /opt/sglstack/tools/wheelkit.py keep-only "$site" setuptools==84.2.1 \
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
      io.sglstack.stack="pypi-cu130-gb" \
      org.opencontainers.image.base.name="sglstack/base:debian12-slim-arm64" \
      org.opencontainers.image.description="pypi-cu130 for Grace hosts too - one release of linux/amd64 and linux/arm64 (GH200, GB200, GB300) from PyPI alone" \
      org.opencontainers.image.title="sglstack pypi-cu130-gb" \
      org.opencontainers.image.vendor="sglstack" \
      org.opencontainers.image.version="0.5.23"
