# Rendered by reprobuild 0.0.0-golden from requirements-gpu.lock (sha256 fec1c10bb781e085d8d03fce4e8fc772a37577861d86b751d13294ac9aff1e6d).
# Do not edit: change reprobuild.yaml or the lock and run `reprobuild render` again.

# ---- stage 1: install the locked distributions into a virtual environment ----
FROM nvcr.io/nvidia/pytorch@sha256:96990c82825613c3bdeebb66675c7c91b0123f64a5895623316dc5b824e0d7a9 AS deps
ENV SOURCE_DATE_EPOCH=1700000000 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_NO_INPUT=1 \
    PIP_HOME="import os, pip; print(os.path.dirname(os.path.dirname(pip.__file__)))" \
    PIP_PYTHON_OK="import pip, sys; v = [int(''.join(filter(str.isdigit, p)) or 0) for p in pip.__version__.split('.')[:2]]; sys.exit(v < [22, 3])" \
    PIP_WHEEL="import ensurepip, glob, os, sys, sysconfig; v = ensurepip.version(); w = [p for d in (sysconfig.get_config_var('WHEEL_PKG_DIR') or '/usr/share/python-wheels', os.path.join(os.path.dirname(ensurepip.__file__), '_bundled')) for p in sorted(glob.glob(os.path.join(d, 'pip-' + v + '-*.whl')))]; n = [int(''.join(filter(str.isdigit, p)) or 0) for p in v.split('.')[:2]]; print(w[0]) if w and n >= [22, 3] else sys.exit(1)"
# The venv, with no pip of its own: pip is the wheel ensurepip would install, run where it lies.
# It sees the base's frameworks (NGC's torch or TensorFlow, CUDA); pip keeps its PIP_CONSTRAINT.
RUN python3 -m venv --system-site-packages --without-pip /opt/venv \
 && { { whl=$(python3 -I -c "$PIP_WHEEL" 2>/dev/null) \
        && python3 -I -m zipfile -e "$whl" /tmp/reprobuild/pip.part \
        && mv /tmp/reprobuild/pip.part /tmp/reprobuild/pip; } \
      || python3 -m venv /tmp/reprobuild/bootstrap || python3 -m pip --version; }
COPY requirements.lock /tmp/reprobuild/requirements.lock
COPY wheels/ /tmp/reprobuild/wheels/
# The locked wheels, hash-checked (hash-based .pyc files), then the .pth that runs the
# runtime's start-up hook in every interpreter.
RUN py=/tmp/reprobuild/bootstrap/bin/python; [ -x "$py" ] || py=python3; \
    install="$py -m pip --python /opt/venv/bin/python install"; \
    if [ -d /tmp/reprobuild/pip ]; then \
      install="python3 /tmp/reprobuild/pip/pip --python /opt/venv/bin/python install"; \
    else \
      $py -c "$PIP_PYTHON_OK" \
        || install="env PYTHONPATH=$($py -c "$PIP_HOME") /opt/venv/bin/python -m pip install --ignore-installed"; \
    fi; \
    $install \
      --no-index --find-links /tmp/reprobuild/wheels \
      --require-hashes --only-binary=:all: \
      -r /tmp/reprobuild/requirements.lock \
 && /opt/venv/bin/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], '_reprobuild_runtime.pth').write_text('/opt/reprobuild/runtime\nimport reprobuild_entrypoint._startup\n')"

# ---- stage 2: the image that ships ----
FROM nvcr.io/nvidia/pytorch@sha256:96990c82825613c3bdeebb66675c7c91b0123f64a5895623316dc5b824e0d7a9
# The user (no day in /etc/shadow: the image is the same on any day), /app.
RUN useradd --no-log-init --create-home --uid 10001 --user-group --shell /bin/sh repro \
 && sed -i -E 's/^(repro:[^:]*:)[0-9]*:/\1:/' /etc/shadow \
 && install -d -o 10001 -g 10001 /app \
 && install -d /opt/reprobuild
COPY --from=deps /opt/venv /opt/venv
COPY runtime/ /opt/reprobuild/runtime/
# The runtime, precompiled as root (the image's user cannot write __pycache__).
RUN /opt/venv/bin/python -I -S -m compileall -q --invalidation-mode unchecked-hash /opt/reprobuild/runtime
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONUNBUFFERED=1 \
    REPROBUILD_IMAGE_SEED=1234 \
    REPROBUILD_IMAGE_DETERMINISM=strict \
    REPROBUILD_VARIANT=gpu
# The base's own entrypoint, run by ours before the command (see reprobuild_entrypoint.launch).
ENV REPROBUILD_BASE_ENTRYPOINT="[\"/opt/nvidia/nvidia_entrypoint.sh\"]"
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
      io.reprobuild.lock.sha256="fec1c10bb781e085d8d03fce4e8fc772a37577861d86b751d13294ac9aff1e6d" \
      io.reprobuild.seed="1234" \
      io.reprobuild.variant="gpu" \
      org.opencontainers.image.base.digest="sha256:96990c82825613c3bdeebb66675c7c91b0123f64a5895623316dc5b824e0d7a9" \
      org.opencontainers.image.base.name="nvcr.io/nvidia/pytorch:25.01-py3" \
      org.opencontainers.image.created="2023-11-14T22:13:20Z" \
      org.opencontainers.image.title="example/golden"
# The project's code last: a change to it alone rebuilds this one step (files owned by root,
# read-only to the image's user, whatever USER says: COPY does not follow it).
COPY app/ /app/
