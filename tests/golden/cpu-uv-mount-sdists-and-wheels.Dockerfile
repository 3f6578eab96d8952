# Rendered by reprobuild 0.0.0-golden from uv.lock (sha256 bd72fbe39e3bee48cf8eecac3df2ad40cded1a2a25263b020b634af10fdfde05).
# Do not edit: change reprobuild.yaml or the lock and run `reprobuild render` again.

# ---- the wheel-build stage: the lock's sdists built into wheels on the pinned base itself ----
# Same CPython, libc and ABI as the image. Its inputs are COPYed, so the layer cache keys on
# them and on the base digest: the build lock and its wheels (host-fetched, sha256-checked),
# the sdists (sha256-checked on the host and again here), the build script. Its own
# SOURCE_DATE_EPOCH (315532800, not the project's) keeps a code-only rebuild on the
# cached wheels. The build frontend never reaches an index here (--no-index, a dead proxy),
# and a hermetic build runs with no network at all. Fixed build paths and -ffile-prefix-map
# keep the build folder out of compiled extensions. The build venv holds the build lock's
# wheels and nothing else (no pip, no ensurepip setuptools).
# reprobuild's pinned uv (the image's installer, its sha256 in the step's text), bind-mounted
# and never in a layer, installs that venv (--require-hashes, offline, no config file) and is
# the build frontend (uv build --wheel --no-build-isolation): the wheels are the bytes pip's
# frontend gives, and the stage takes a third of pip's time (2-core host: pip's install of
# the build lock took 2.2 s, uv's 0.5 s; docs/benchmarks.md).
# The sdists build side by side, one per CPU. Each build runs as an unprivileged user (65534,
# HOME and TMPDIR its own folder): one that writes outside its tree fails, in one line; one
# that runs past build_timeout (3600 s) is stopped, in one line. The build
# venv and the unpacked trees are removed once the wheels are in out/, so the RUN's layer holds
# out/ alone: a second less to commit (2-core host, benchmarks/sdist_bench.py) and less kept
# in the layer cache.
FROM python@sha256:abababababababababababababababababababababababababababababababab AS sdist-build
COPY build/ /.reprobuild-build/
RUN --mount=type=bind,source=uv,target=/.reprobuild-uv \
    export SOURCE_DATE_EPOCH=315532800 PYTHONHASHSEED=0 TZ=UTC LC_ALL=C.UTF-8 \
      REPROBUILD_BUILD_USER=65534 REPROBUILD_SDIST_TIMEOUT=3600 \
      REPROBUILD_UV=/.reprobuild-uv REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef \
      UV_NO_CONFIG=1 UV_OFFLINE=1 UV_NO_PROGRESS=1 UV_PYTHON_DOWNLOADS=never UV_NO_CACHE=1 \
      http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
      HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
      CFLAGS="-ffile-prefix-map=/.reprobuild-build/src=." \
      CXXFLAGS="-ffile-prefix-map=/.reprobuild-build/src=." \
 && python3 -m venv --without-pip /.reprobuild-build/venv \
 && /.reprobuild-uv pip install --python /.reprobuild-build/venv/bin/python --no-index \
      --find-links /.reprobuild-build/wheels --require-hashes --only-binary :all: \
      -r /.reprobuild-build/requirements.lock \
 && /.reprobuild-build/venv/bin/python -I /.reprobuild-build/build_sdists.py \
 && rm -rf /.reprobuild-build/venv /.reprobuild-build/src \
      /.reprobuild-build/home /.reprobuild-build/built

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
# The wheels built from the lock's sdists, with built.json (each wheel's sha256 beside its
# sdist's): kept in the image as the record of what was built.
COPY --from=sdist-build /.reprobuild-build/out/ /opt/reprobuild/built/
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
    export REPROBUILD_LOCK_SHA256=bd72fbe39e3bee48cf8eecac3df2ad40cded1a2a25263b020b634af10fdfde05 REPROBUILD_REQUIREMENTS_SHA256=f1a1d3968f456338dd79db0212fc4348eb0cbe4a6e8c977826245473eb1b6944 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef SOURCE_DATE_EPOCH=1700000000 TMPDIR=/.reprobuild \
      UV_CACHE_DIR=/.reprobuild-uv-cache UV_LINK_MODE=hardlink \
      UV_NO_CONFIG=1 UV_OFFLINE=1 UV_NO_PROGRESS=1 UV_PYTHON_DOWNLOADS=never \
      UV_RECORD="import pathlib, sysconfig; p = pathlib.Path(sysconfig.get_paths()['purelib']); [(r.write_bytes(b''.join(line for line in r.read_bytes().splitlines(True) if not line.startswith(f.parent.name.encode() + b'/uv_cache.json,'))), f.unlink()) for f in sorted(p.glob('*.dist-info/uv_cache.json')) for r in [f.parent / 'RECORD']]" \
      BUILT_REQUIREMENTS="import json, sys; d = sys.argv[1]; [print(b['name'] + ' @ file://' + d + '/' + b['wheel'] + ' --hash=' + b['wheel_sha256']) for b in json.load(open(d + '/built.json'))]" \
 && python3 -m venv --without-pip /opt/venv \
 && python3 -I -c "$BUILT_REQUIREMENTS" /opt/reprobuild/built > /.reprobuild/built.txt \
 && /.reprobuild/uv pip install --python /opt/venv/bin/python \
      --no-index --find-links /.reprobuild/wheels \
      --require-hashes --only-binary :all: --compile-bytecode \
      -r /.reprobuild/requirements.lock -r /.reprobuild/built.txt \
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
      io.reprobuild.lock.sha256="bd72fbe39e3bee48cf8eecac3df2ad40cded1a2a25263b020b634af10fdfde05" \
      io.reprobuild.seed="1234" \
      io.reprobuild.variant="cpu" \
      org.opencontainers.image.base.digest="sha256:abababababababababababababababababababababababababababababababab" \
      org.opencontainers.image.base.name="python:3.11-slim-bookworm" \
      org.opencontainers.image.created="2023-11-14T22:13:20Z" \
      org.opencontainers.image.title="example/golden"
# The project's code last: a change to it alone rebuilds this one step (files owned by root,
# read-only to the image's user, whatever USER says: COPY does not follow it).
COPY app/ /app/
