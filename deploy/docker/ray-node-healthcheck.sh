#!/bin/sh
# Health of a Ray node container (the image's own HEALTHCHECK probes the HTTP service, which Ray
# containers do not run): this container's raylet runs and, when GCS_ADDRESS is given, the
# head's GCS answers. Liveness probes of workers pass no address: a worker must survive the
# head's restart (GCS fault tolerance), not be killed while the GCS is away.
# Usage: ray-node-healthcheck [GCS_ADDRESS]
set -eu
# /proc/<pid>/comm is the process name; the slim image has no pgrep.
cat /proc/[0-9]*/comm 2>/dev/null | grep -qx raylet
if [ "$#" -ge 1 ]; then
    exec ray health-check --address "$1"
fi
