#!/usr/bin/env bash
# Build upstream Prometheus, with Kubernetes service discovery, from its Go module into a cache
# outside the repository; print the binary's path.
#
#   kube/prometheus.sh           build (or reuse) the pinned version
#   kube/prometheus.sh --print   print the binary's path (builds nothing)
#
# Why: Debian's `prometheus` package (2.42 on bookworm) is built without Kubernetes service
# discovery ("Kubernetes support has been completely removed, due to the insane amount of
# dependencies in their client library", its NEWS.Debian); `promtool check config` on a config
# with kubernetes_sd_configs fails there with "field kubernetes_sd_configs not found in type
# config.ScrapeConfig". The kube test of the documented kubernetes_sd scrape config needs a real
# one. `go install .../cmd/prometheus@v0.307.3` is refused (its go.mod has exclude directives), so
# the module is downloaded and built as the main module. Prometheus 3.7.3 (module v0.307.3)
# requires client-go v0.34.1, next to the Kubernetes 1.34 modules kube/build.sh already fetched.
# Build tags keep only the Kubernetes discovery (no cloud SDKs).
set -euo pipefail

VERSION="3.7.3"
MODULE_VERSION="v0.307.3"
CACHE_ROOT="${STROM_PROMETHEUS_CACHE:-$HOME/.cache/strom/prometheus}"
OUT="$CACHE_ROOT/v$VERSION/prometheus"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'prometheus build: error: %s\n' "$*" >&2; exit 1; }

if [ "${1:-}" = "--print" ]; then echo "$OUT"; exit 0; fi
if [ -x "$OUT" ]; then say "reusing $OUT (delete it to rebuild)"; echo "$OUT"; exit 0; fi
mkdir -p "$(dirname "$OUT")"
exec 9>"$(dirname "$OUT")/.build.lock"
flock 9  # one build at a time; a second caller reuses the first one's binary
if [ -x "$OUT" ]; then say "reusing $OUT"; echo "$OUT"; exit 0; fi
command -v go >/dev/null 2>&1 || die "go is not installed (Go 1.24+ is needed)"
export GOTOOLCHAIN=local
started=$(date +%s)
say "downloading github.com/prometheus/prometheus@$MODULE_VERSION (Go module proxy)"
dir=$(go mod download -json "github.com/prometheus/prometheus@$MODULE_VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$dir" ] && [ -d "$dir" ] || die "go mod download gave no source directory"
mkdir -p "$(dirname "$OUT")"
say "building Prometheus $VERSION (tags remove_all_sd,enable_kubernetes_sd)"
(cd "$dir" && go build -tags remove_all_sd,enable_kubernetes_sd \
    -ldflags "-X github.com/prometheus/common/version.Version=$VERSION" \
    -o "$OUT.tmp" ./cmd/prometheus)
mv "$OUT.tmp" "$OUT"
say "built $OUT in $(( $(date +%s) - started )) s"
echo "$OUT"
