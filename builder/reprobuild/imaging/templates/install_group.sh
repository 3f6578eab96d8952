# One group's install (reprobuild.imaging.layers): the group's locked wheels into /opt/venv
# by reprobuild's pinned uv (its folder mounted at /.reprobuild/bin). In a pkgs-* stage,
# /opt/venv is then left with the group's own files alone, to be copied into the image as one
# layer; with REPROBUILD_IN_PLACE=1 (the image's big groups, one on another) the install goes
# into the venv the layers below made and removes nothing. Arguments: uv's requirement
# options (-r FILE, --find-links DIR).
# Run with sh from a tmpfs on /.reprobuild.
set -eu
export TMPDIR=/.reprobuild UV_CACHE_DIR=/.reprobuild-uv-cache UV_LINK_MODE=hardlink \
  UV_NO_CONFIG=1 UV_OFFLINE=1 UV_NO_PROGRESS=1 UV_PYTHON_DOWNLOADS=never
if [ "${REPROBUILD_IN_PLACE:-0}" = 1 ]; then
  : > /.reprobuild/skeleton
else
  python3 -m venv --without-pip /opt/venv
  find /opt/venv ! -type d > /.reprobuild/skeleton
fi
# --no-deps: each group alone; every hash checked, no index, no build, hash-based .pyc files
# (SOURCE_DATE_EPOCH), compiled here, in the layer of the package they belong to.
/.reprobuild/bin/uv pip install --python /opt/venv/bin/python --no-deps --no-index \
  --require-hashes --only-binary :all: --compile-bytecode "$@"
rm -rf /.reprobuild-uv-cache /opt/venv/.lock
# uv writes the install's wall clock into each dist-info (uv_cache.json, and a RECORD line):
# both go, or no two builds would give the same layer.
/opt/venv/bin/python -I - <<'PY'
import pathlib
import sysconfig

site = pathlib.Path(sysconfig.get_paths()["purelib"])
for stamp in sorted(site.glob("*.dist-info/uv_cache.json")):
    record = stamp.parent / "RECORD"
    line = stamp.parent.name.encode() + b"/uv_cache.json,"
    kept = [x for x in record.read_bytes().splitlines(True) if not x.startswith(line)]
    record.write_bytes(b"".join(kept))
    stamp.unlink()
PY
# The venv's skeleton is the image's own, a layer below: this layer holds the group's files only.
xargs rm -f -- < /.reprobuild/skeleton
