#!/usr/bin/env bash
# install-prometheus.sh: build the Prometheus server the metrics e2e test
# scrapes the agent with, into $GPUEXT_LAB_BIN (default $REPO/.cache/bin).
# Idempotent: a version stamp skips the build next time.
#
#   test/lab/install-prometheus.sh
#
# The server comes from its own Go module with `go install`, never from the
# gpuext module (go.mod does not require it). Built with the remove_all_sd
# tag (Prometheus' own build tags: no cloud or Kubernetes service discovery,
# static_configs and file_sd stay) and without builtinassets (no web UI):
# the HTTP API the tests query is all there, and the cold build takes a
# fraction of the full one (docs/metrics.md has both times).
#
# Env: GPUEXT_LAB_BIN, GPUEXT_PROMETHEUS_VERSION (default below).
set -euo pipefail
# shellcheck source=test/lab/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VERSION="${GPUEXT_PROMETHEUS_VERSION:-v0.316.0}"
TAGS="remove_all_sd"
STAMP="$LAB_BIN/.gpuext-prometheus-version"

command -v go >/dev/null || lab_die "go toolchain not found in PATH"
mkdir -p "$LAB_BIN"
if [[ -x "$LAB_BIN/prometheus" && -f "$STAMP" ]] && grep -qxF "prometheus $VERSION $TAGS" "$STAMP"; then
	lab_log "prometheus $VERSION present in $LAB_BIN"
	exit 0
fi
start=$SECONDS
lab_log "building prometheus $VERSION (cached after first run, several minutes cold)"
# Outside the repo module, and without a caller's GOFLAGS (-mod=... breaks go install pkg@version).
(cd "$LAB_BIN" && GOFLAGS='' GOBIN="$LAB_BIN" CGO_ENABLED=0 go install -tags "$TAGS" \
	"github.com/prometheus/prometheus/cmd/prometheus@$VERSION")
printf 'prometheus %s %s\n' "$VERSION" "$TAGS" > "$STAMP.tmp"
mv "$STAMP.tmp" "$STAMP"
lab_log "prometheus $VERSION built in $(( SECONDS - start ))s"
