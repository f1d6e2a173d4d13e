#!/bin/bash
# bench/cold_demo.sh [REPO]: time `make demo` as a new machine runs it. Clones REPO (default:
# this checkout) into /tmp/cold, empties pip's, uv's, Maven's and Go's caches (their own
# folders under /tmp/cold-cache), gives the clone its own ports (devstack's beside it keep
# running), runs `make demo` with each output line stamped with its second, and prints the time
# until the operator console is up. The demo keeps serving afterwards, and Jaeger's build goes
# on in the background: stop it with Ctrl-C on `make demo` (SIGINT to `examples.demo`), then
# `cd /tmp/cold && <the same port variables> .venv/bin/python -m devstack down all`.
set -u
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
rm -rf /tmp/cold /tmp/cold-cache && mkdir -p /tmp/cold-cache
git clone -q "$SRC" /tmp/cold && cd /tmp/cold || exit 1
export PIP_CACHE_DIR=/tmp/cold-cache/pip UV_CACHE_DIR=/tmp/cold-cache/uv
export MAVEN_OPTS=-Dmaven.repo.local=/tmp/cold-cache/m2
export GOMODCACHE=/tmp/cold-cache/gomod GOCACHE=/tmp/cold-cache/gobuild GOPATH=/tmp/cold-cache/gopath
export SAGAFLOW_PG_PORT=57432 SAGAFLOW_KAFKA_PORT=29092 SAGAFLOW_KAFKA_CONTROLLER_PORT=29093
export SAGAFLOW_KAFKA_JMX_PORT=29098 SAGAFLOW_JAEGER_OTLP_GRPC_PORT=24317
export SAGAFLOW_JAEGER_OTLP_HTTP_PORT=24318 SAGAFLOW_JAEGER_QUERY_PORT=26686
export SAGAFLOW_JAEGER_QUERY_GRPC_PORT=26685 SAGAFLOW_JAEGER_OTLP_HTTP_BEHIND_PORT=24319
OUT=/tmp/cold-demo.out
start=$(date +%s.%N)
make demo 2>&1 | python3 -u -c '
import sys, time
t = time.time()
for line in sys.stdin:
    print(f"{time.time() - t:6.1f} {line}", end="", flush=True)' > "$OUT" &
while sleep 0.5; do
  if grep -q "operator console is up" "$OUT"; then
    echo "console up after $(python3 -c "import time; print(round(time.time() - $start, 1))") s" \
         "(load average $(cut -d' ' -f1-3 /proc/loadavg); every line: $OUT)"
    break
  fi
  if ! jobs %1 >/dev/null 2>&1; then echo "make demo exited:"; tail -30 "$OUT"; exit 1; fi
done
