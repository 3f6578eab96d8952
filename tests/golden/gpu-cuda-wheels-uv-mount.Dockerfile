# Rendered by reprobuild 0.0.0-golden from requirements.lock (sha256 33a8be0bc819f95fc138da688ff5c44bdd23347363f0fe2eaee1970a7d0fb02b).
# Do not edit: change reprobuild.yaml or the lock and run `reprobuild render` again.

# ---- the image's foot: the user, /app, the venv's skeleton, and packages cuda, numpy in place ----
FROM python@sha256:abababababababababababababababababababababababababababababababab AS foot
# The layers' time first: buildah's layer cache does not look at --timestamp.
LABEL org.opencontainers.image.created="2023-11-14T22:13:20Z"
# The user (no day in /etc/shadow), /app, and the venv's skeleton the package layers fill.
RUN useradd --no-log-init --create-home --uid 10001 --user-group --shell /bin/sh repro \
 && sed -i -E 's/^(repro:[^:]*:)[0-9]*:/\1:/' /etc/shadow \
 && install -d -o 10001 -g 10001 /app \
 && install -d /opt/reprobuild \
 && python3 -m venv --system-site-packages --without-pip /opt/venv
# Packages cuda (2 wheels), from their own pins and wheels alone.
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/cuda,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=de86299478289ae2aa36e7471d79af844215977e6eb7bd0de3ee588b39126528 REPROBUILD_IN_PLACE=1 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt
# Packages numpy (1 wheel), from their own pins and wheels alone.
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/numpy,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=4644ecce139a02ab2cc2932ab0a81c15b7fe7e23c537243095dd35cc11344bed REPROBUILD_IN_PLACE=1 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt

# ---- the image that ships: the foot, then each other group's layer ----
FROM foot
COPY runtime/ /opt/reprobuild/runtime/
# The runtime, precompiled as root (the image's user cannot write __pycache__).
# With the .pth that runs its start-up hook (-B: no bytecode into another layer's folders).
RUN /opt/venv/bin/python -I -B -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], '_reprobuild_runtime.pth').write_text('/opt/reprobuild/runtime\nimport reprobuild_entrypoint._startup\n')" \
 && /opt/venv/bin/python -I -S -m compileall -q --invalidation-mode unchecked-hash /opt/reprobuild/runtime
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONUNBUFFERED=1 \
    REPROBUILD_IMAGE_SEED=1234 \
    REPROBUILD_IMAGE_DETERMINISM=strict \
    REPROBUILD_VARIANT=gpu
# Determinism environment (reprobuild_entrypoint.envplan.image_env): here so it holds when the
# ENTRYPOINT is bypassed; the entrypoint re-plans it per run (REPRO_SEED, REPRO_DETERMINISM).
ENV CUBLAS_WORKSPACE_CONFIG=":4096:8" \
    MKL_CBWR="AUTO,STRICT" \
    MKL_DYNAMIC="FALSE" \
    MKL_NUM_THREADS="4" \
    NCCL_ALGO="Ring" \
    NCCL_NVLS_ENABLE="0" \
    NVIDIA_TF32_OVERRIDE="0" \
    OMP_DYNAMIC="FALSE" \
    OMP_NUM_THREADS="4" \
    OPENBLAS_NUM_THREADS="4" \
    PYTHONHASHSEED="1234" \
    TF_CUDNN_DETERMINISTIC="1" \
    TF_DETERMINISTIC_OPS="1" \
    TF_ENABLE_ONEDNN_OPTS="1" \
    TF_NUM_INTEROP_THREADS="4" \
    TF_NUM_INTRAOP_THREADS="4" \
    TORCHINDUCTOR_DETERMINISTIC="1" \
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="0"
WORKDIR /app
USER 10001:10001
ENTRYPOINT ["/opt/venv/bin/python", "-I", "-m", "reprobuild_entrypoint"]
CMD ["python", "hello.py"]
LABEL io.reprobuild.builder.version="0.0.0-golden" \
      io.reprobuild.determinism="strict" \
      io.reprobuild.lock.sha256="33a8be0bc819f95fc138da688ff5c44bdd23347363f0fe2eaee1970a7d0fb02b" \
      io.reprobuild.seed="1234" \
      io.reprobuild.variant="gpu" \
      org.opencontainers.image.base.digest="sha256:abababababababababababababababababababababababababababababababab" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm" \
      org.opencontainers.image.created="2023-11-14T22:13:20Z" \
      org.opencontainers.image.title="example/golden"
# The project's code last: a change to it alone rebuilds this one step (files owned by root,
# read-only to the image's user, whatever USER says: COPY does not follow it).
COPY app/ /app/
