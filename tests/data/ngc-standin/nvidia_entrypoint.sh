#!/bin/sh
# stand-in for /opt/nvidia/nvidia_entrypoint.sh: prints a banner and sets up the environment
echo "== NGC stand-in (fixture) ==" >&2
export NGC_STANDIN_ENTRYPOINT_RAN=1
exec "$@"
