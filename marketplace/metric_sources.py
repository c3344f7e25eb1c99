"""What the sources behind ``/metrics`` share, in a leaf of its own so that the collectors
(marketplace/http/) and the readers they collect from (marketplace/deployment_figures.py,
the job queue's) import it without importing each other."""

from __future__ import annotations

# Every read behind a scrape (the job queue's depth, the deployment-wide figures) gives up after
# this long and the last values stay: a pool waiting on a dead or locked server would otherwise
# hold the scrape past Prometheus' own 10 s timeout.
SOURCE_READ_TIMEOUT_SECONDS = 5.0

# The Redis hash of actor restarts by kind, written by marketplace/actors/restarts.py and read by
# the deployment-wide figures.
ACTOR_RESTARTS_KEY = "marketplace:actors:restarts"
