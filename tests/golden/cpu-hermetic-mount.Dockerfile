# Rendered by reprobuild 0.0.0-golden from requirements.lock (sha256 96867f79dc4942bc3a6522cfe08a01b4c3e9ce76134d4573785cd6eef315b4f4).
# Do not edit: change reprobuild.yaml or the lock and run `reprobuild render` again.

# ---- one stage: the image that ships ----
FROM python@sha256:abababababababababababababababababababababababababababababababab
# The layers' time first: buildah's layer cache does not look at --timestamp.
LABEL org.opencontainers.image.created="2023-11-14T22:13:20Z"
# The user (no day in /etc/shadow: the image is the same on any day), /app.
RUN useradd --no-log-init --create-home --uid 10001 --user-group --shell /bin/sh repro \
 && sed -i -E 's/^(repro:[^:]*:)[0-9]*:/\1:/' /etc/shadow \
 && install -d -o 10001 -g 10001 /app \
 && install -d /opt/reprobuild
# The locked wheels, hash-checked, into the venv from a tmpfs: no wheel, lock or pip reaches a
# layer. Then the .pth that runs the runtime's start-up hook in every interpreter.
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=wheels,target=/.reprobuild/wheels \
    --mount=type=bind,source=requirements.lock,target=/.reprobuild/requirements.lock \
    export REPROBUILD_LOCK_SHA256=96867f79dc4942bc3a6522cfe08a01b4c3e9ce76134d4573785cd6eef315b4f4 SOURCE_DATE_EPOCH=1700000000 TMPDIR=/.reprobuild \
      PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1 \
      PIP_HOME="import os, pip; print(os.path.dirname(os.path.dirname(pip.__file__)))" \
      PIP_PYTHON_OK="import pip, sys; v = [int(''.join(filter(str.isdigit, p)) or 0) for p in pip.__version__.split('.')[:2]]; sys.exit(v < [22, 3])" \
      PIP_WHEEL="import ensurepip, glob, os, sys, sysconfig; v = ensurepip.version(); w = [p for d in (sysconfig.get_config_var('WHEEL_PKG_DIR') or '/usr/share/python-wheels', os.path.join(os.path.dirname(ensurepip.__file__), '_bundled')) for p in sorted(glob.glob(os.path.join(d, 'pip-' + v + '-*.whl')))]; n = [int(''.join(filter(str.isdigit, p)) or 0) for p in v.split('.')[:2]]; print(w[0]) if w and n >= [22, 3] else sys.exit(1)" \
 && python3 -m venv --without-pip /opt/venv \
 && if whl=$(python3 -I -c "$PIP_WHEEL" 2>/dev/null) \
       && python3 -I -m zipfile -e "$whl" /.reprobuild/pip; then \
      install="python3 /.reprobuild/pip/pip --python /opt/venv/bin/python install"; \
    else \
      py=/.reprobuild/bootstrap/bin/python; \
      python3 -m venv /.reprobuild/bootstrap || py=python3; \
      install="$py -m pip --python /opt/venv/bin/python install"; \
      $py -c "$PIP_PYTHON_OK" \
        || install="env PYTHONPATH=$($py -c "$PIP_HOME") /opt/venv/bin/python -m pip install --ignore-installed"; \
    fi \
 && $install \
      --no-index --find-links /.reprobuild/wheels \
      --require-hashes --only-binary=:all: \
      -r /.reprobuild/requirements.lock \
 && /opt/venv/bin/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], '_reprobuild_runtime.pth').write_text('/opt/reprobuild/runtime\nimport reprobuild_entrypoint._startup\n')"
COPY runtime/ /opt/reprobuild/runtime/
# The runtime, precompiled as root (the image's user cannot write __pycache__).
RUN /opt/venv/bin/python -I -S -m compileall -q --invalidation-mode unchecked-hash /opt/reprobuild/runtime
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONUNBUFFERED=1 \
    REPROBUILD_IMAGE_SEED=1234 \
    REPROBUILD_IMAGE_DETERMINISM=strict \
    REPROBUILD_VARIANT=cpu
# Determinism environment (reprobuild_entrypoint.envplan.image_env): here so it holds when the
# ENTRYPOINT is bypassed; the entrypoint re-plans it per run (REPRO_SEED, REPRO_DETERMINISM).
ENV MKL_CBWR="AUTO,STRICT" \
    MKL_DYNAMIC="FALSE" \
    MKL_NUM_THREADS="4" \
    OMP_DYNAMIC="FALSE" \
    OMP_NUM_THREADS="4" \
    OPENBLAS_NUM_THREADS="4" \
    PYTHONHASHSEED="1234" \
    TF_DETERMINISTIC_OPS="1" \
    TF_ENABLE_ONEDNN_OPTS="1" \
    TF_NUM_INTEROP_THREADS="4" \
    TF_NUM_INTRAOP_THREADS="4" \
    TORCHINDUCTOR_DETERMINISTIC="1"
WORKDIR /app
USER 10001:10001
ENTRYPOINT ["/opt/venv/bin/python", "-I", "-m", "reprobuild_entrypoint"]
CMD ["python", "hello.py"]
LABEL io.reprobuild.builder.version="0.0.0-golden" \
      io.reprobuild.determinism="strict" \
      io.reprobuild.lock.sha256="96867f79dc4942bc3a6522cfe08a01b4c3e9ce76134d4573785cd6eef315b4f4" \
      io.reprobuild.seed="1234" \
      io.reprobuild.variant="cpu" \
      org.opencontainers.image.base.digest="sha256:abababababababababababababababababababababababababababababababab" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm" \
      org.opencontainers.image.created="2023-11-14T22:13:20Z" \
      org.opencontainers.image.title="example/golden"
# The project's code last: a change to it alone rebuilds this one step (files owned by root,
# read-only to the image's user, whatever USER says: COPY does not follow it).
COPY app/ /app/
