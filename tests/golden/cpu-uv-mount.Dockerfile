# Rendered by reprobuild 0.0.0-golden from requirements.lock (sha256 96867f79dc4942bc3a6522cfe08a01b4c3e9ce76134d4573785cd6eef315b4f4).
# Do not edit: change reprobuild.yaml or the lock and run `reprobuild render` again.

# ---- one stage: the image that ships ----
FROM python@sha256:abababababababababababababababababababababababababababababababab
# The build's time (SOURCE_DATE_EPOCH) in the first step: buildah's layer cache does not look
# at --timestamp, so a step cached for another epoch would be reused with that epoch's file
# times. This way every later step's cache is the epoch's own.
LABEL org.opencontainers.image.created="2023-11-14T22:13:20Z"
# useradd writes the day of the build into /etc/shadow (last password change, field 3): empty
# it (no password aging; the account has no password), so the image is the same on any day.
RUN useradd --no-log-init --create-home --uid 10001 --user-group --shell /bin/sh repro \
 && sed -i -E 's/^(repro:[^:]*:)[0-9]*:/\1:/' /etc/shadow \
 && install -d -o 10001 -g 10001 /app \
 && install -d /opt/reprobuild
# The locked wheels go straight into this stage (RUN --mount: buildah, BuildKit), installed by
# uv: reprobuild's own pinned uv (sha256 in the step's text), bind-mounted, never in a layer.
# A tmpfs on /.reprobuild holds the wheelhouse and the lock (bind-mounted from the context)
# and uv's temp files: none of them reach a layer. uv unpacks each wheel into its cache on the
# image's own disk and hardlinks the files into the venv; the cache goes in the same step, so
# the layer holds each file once, the bytes a copy gives (one diff ID for torch's wheels
# either way). A cache on the tmpfs, copied from, took 1.5 s more for torch's install on a
# 2-core host and its commit no less (docs/benchmarks.md), and needs the memory for it.
# uv unpacks and compiles on every CPU, where pip takes one file after another: install and
# commit of those wheels took 17 s with uv and 38 s with pip there (docs/benchmarks.md).
# No index, no config file, no network (--offline), no build (--only-binary), every hash
# checked (--require-hashes). SOURCE_DATE_EPOCH makes it write hash-based .pyc files, the same
# bytes whatever the worker count; UV_RECORD drops the one file uv writes with the install's
# wall clock (uv_cache.json) and its RECORD line. buildah's layer cache does not look into
# mounted files, so the lock's sha256 is part of the step's text: another lock, another step.
# The .pth puts the in-image runtime on the venv's path and imports its start-up hook at every
# interpreter start, so determinism holds even without the ENTRYPOINT.
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=wheels,target=/.reprobuild/wheels \
    --mount=type=bind,source=requirements.lock,target=/.reprobuild/requirements.lock \
    --mount=type=bind,source=uv,target=/.reprobuild/uv \
    export REPROBUILD_LOCK_SHA256=96867f79dc4942bc3a6522cfe08a01b4c3e9ce76134d4573785cd6eef315b4f4 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef SOURCE_DATE_EPOCH=1700000000 TMPDIR=/.reprobuild \
      UV_CACHE_DIR=/.reprobuild-uv-cache UV_LINK_MODE=hardlink \
      UV_NO_CONFIG=1 UV_OFFLINE=1 UV_NO_PROGRESS=1 UV_PYTHON_DOWNLOADS=never \
      UV_RECORD="import pathlib, sysconfig; p = pathlib.Path(sysconfig.get_paths()['purelib']); [(r.write_bytes(b''.join(line for line in r.read_bytes().splitlines(True) if not line.startswith(f.parent.name.encode() + b'/uv_cache.json,'))), f.unlink()) for f in sorted(p.glob('*.dist-info/uv_cache.json')) for r in [f.parent / 'RECORD']]" \
 && python3 -m venv --without-pip /opt/venv \
 && /.reprobuild/uv pip install --python /opt/venv/bin/python \
      --no-index --find-links /.reprobuild/wheels \
      --require-hashes --only-binary :all: --compile-bytecode \
      -r /.reprobuild/requirements.lock \
 && rm -rf /.reprobuild-uv-cache \
 && /opt/venv/bin/python -I -c "$UV_RECORD" \
 && /opt/venv/bin/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], '_reprobuild_runtime.pth').write_text('/opt/reprobuild/runtime\nimport reprobuild_entrypoint._startup\n')"
COPY runtime/ /opt/reprobuild/runtime/
# Precompiled as root: the image user cannot write __pycache__, and the start-up hook runs in
# every interpreter, so its modules must load from bytecode. -S: without site the hook does
# not run here, which would first write timestamp-based .pyc files that compileall keeps.
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
