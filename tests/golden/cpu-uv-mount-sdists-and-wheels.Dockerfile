# Rendered by reprobuild 0.0.0-golden from uv.lock (sha256 bd72fbe39e3bee48cf8eecac3df2ad40cded1a2a25263b020b634af10fdfde05).
# Do not edit: change reprobuild.yaml or the lock and run `reprobuild render` again.

# ---- the wheel-build stage: the lock's sdists built into wheels on the pinned base itself ----
# Offline, from hash-checked sdists and a hashed build lock; one build per CPU, each as an
# unprivileged user, stopped after 3600 s. Only the wheels (out/) stay in the layer.
# The build venv and the builds: reprobuild's pinned uv, bind-mounted, never in a layer.
FROM python@sha256:abababababababababababababababababababababababababababababababab AS sdist-build
COPY build/ /.reprobuild-build/
RUN --mount=type=bind,source=bin,target=/.reprobuild-bin \
    export SOURCE_DATE_EPOCH=315532800 PYTHONHASHSEED=0 TZ=UTC LC_ALL=C.UTF-8 \
      REPROBUILD_BUILD_USER=65534 REPROBUILD_SDIST_TIMEOUT=3600 \
      REPROBUILD_UV=/.reprobuild-bin/uv REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef \
      UV_NO_CONFIG=1 UV_OFFLINE=1 UV_NO_PROGRESS=1 UV_PYTHON_DOWNLOADS=never UV_NO_CACHE=1 \
      http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 \
      HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
      CFLAGS="-ffile-prefix-map=/.reprobuild-build/src=." \
      CXXFLAGS="-ffile-prefix-map=/.reprobuild-build/src=." \
 && python3 -m venv --without-pip /.reprobuild-build/venv \
 && /.reprobuild-bin/uv pip install --python /.reprobuild-build/venv/bin/python --no-index \
      --find-links /.reprobuild-build/wheels --require-hashes --only-binary :all: \
      -r /.reprobuild-build/requirements.lock \
 && /.reprobuild-build/venv/bin/python -I /.reprobuild-build/build_sdists.py \
 && rm -rf /.reprobuild-build/venv /.reprobuild-build/src \
      /.reprobuild-build/home /.reprobuild-build/built

# ---- the image's foot: the user, /app, the venv's skeleton, and packages torch, sympy, networkx in place ----
FROM python@sha256:abababababababababababababababababababababababababababababababab AS foot
# The layers' time first: buildah's layer cache does not look at --timestamp.
LABEL org.opencontainers.image.created="2023-11-14T22:13:20Z"
# The user (no day in /etc/shadow), /app, and the venv's skeleton the package layers fill.
RUN useradd --no-log-init --create-home --uid 10001 --user-group --shell /bin/sh repro \
 && sed -i -E 's/^(repro:[^:]*:)[0-9]*:/\1:/' /etc/shadow \
 && install -d -o 10001 -g 10001 /app \
 && install -d /opt/reprobuild \
 && python3 -m venv --without-pip /opt/venv
# Packages torch (1 wheel), from their own pins and wheels alone.
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/torch,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=828cb4dfcd9dae7076c6b16faf04ea781d6d95b063ce57535839cd97371555a5 REPROBUILD_IN_PLACE=1 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt
# Packages sympy (1 wheel), from their own pins and wheels alone.
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/sympy,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=bcc61197c0f60503c7149e513d92cc7ba49430eb37f8ddc58c5f91abf97e6b44 REPROBUILD_IN_PLACE=1 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt
# Packages networkx (1 wheel), from their own pins and wheels alone.
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/networkx,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=79cd09e248a094da2c84b7eb47ce0faebc38a9dc05dc7b68edeb8360f4eb3e3c REPROBUILD_IN_PLACE=1 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt

# ---- packages b00 (2 wheels): installed by uv from their own pins and wheels alone ----
FROM python@sha256:abababababababababababababababababababababababababababababababab AS pkgs-b00
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/b00,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=d3590b24b80015f20db49a848f714951025b82c6b514478ce5a1789ac7bf22b1 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt

# ---- packages b04 (1 wheel): installed by uv from their own pins and wheels alone ----
FROM python@sha256:abababababababababababababababababababababababababababababababab AS pkgs-b04
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/b04,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=cb432b3e73961dcfc0b479df5790763ba1d3f1374d5cab41ebbdb97b684f06f0 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt

# ---- packages b05 (1 wheel): installed by uv from their own pins and wheels alone ----
FROM python@sha256:abababababababababababababababababababababababababababababababab AS pkgs-b05
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/b05,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=30feac5235b93793920413dd51f1e8617b465cf90ce6e3e89cc5eff3faabff46 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt

# ---- packages b09 (1 wheel): installed by uv from their own pins and wheels alone ----
FROM python@sha256:abababababababababababababababababababababababababababababababab AS pkgs-b09
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/b09,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=5249f39c038fcb17e7cb839ba35380a4d7a9d3d7167b81fd9362d74e9d5edf16 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt

# ---- packages b17 (2 wheels): installed by uv from their own pins and wheels alone ----
FROM python@sha256:abababababababababababababababababababababababababababababababab AS pkgs-b17
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    --mount=type=bind,source=groups/b17,target=/.reprobuild/group \
    SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef REPROBUILD_GROUP_SHA256=fbb494d104830028731efb8dd93e7fb25ab582e85bd12da25bdd06b31623c980 \
    sh /.reprobuild/install.sh --find-links /.reprobuild/group/wheels -r /.reprobuild/group/requirements.txt

# ---- packages built: the wheels the wheel-build stage built, installed apart ----
FROM python@sha256:abababababababababababababababababababababababababababababababab AS pkgs-built
COPY --from=sdist-build /.reprobuild-build/out/ /opt/reprobuild/built/
RUN --mount=type=tmpfs,target=/.reprobuild \
    --mount=type=bind,source=groups/install.sh,target=/.reprobuild/install.sh \
    --mount=type=bind,source=bin,target=/.reprobuild/bin \
    export SOURCE_DATE_EPOCH=1700000000 REPROBUILD_INSTALL_SHA256=45f4e77b72d692f90a4882c4e8688f9a2c635b5bc2d81454d089e9ea9fa4ee05 REPROBUILD_UV_SHA256=efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef BUILT_REQUIREMENTS="import json, sys; d = sys.argv[1]; [print(b['name'] + ' @ file://' + d + '/' + b['wheel'] + ' --hash=' + b['wheel_sha256']) for b in json.load(open(d + '/built.json'))]" \
 && python3 -I -c "$BUILT_REQUIREMENTS" /opt/reprobuild/built > /.reprobuild/built.txt \
 && sh /.reprobuild/install.sh -r /.reprobuild/built.txt

# ---- the image that ships: the foot, then each other group's layer ----
FROM foot
COPY --from=pkgs-b00 /opt/venv/ /opt/venv/
COPY --from=pkgs-b04 /opt/venv/ /opt/venv/
COPY --from=pkgs-b05 /opt/venv/ /opt/venv/
COPY --from=pkgs-b09 /opt/venv/ /opt/venv/
COPY --from=pkgs-b17 /opt/venv/ /opt/venv/
# The wheels built from the lock's sdists, with built.json (the record of what was built).
COPY --from=sdist-build /.reprobuild-build/out/ /opt/reprobuild/built/
COPY --from=pkgs-built /opt/venv/ /opt/venv/
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
