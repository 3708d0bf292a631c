#!/usr/bin/env bash
# Builds the container image from deploy/Dockerfile fully offline and checks
# that it serves: no Docker engine, no registry, no image pulled.
#   1. a Debian 12 base image made here: debootstrap from the Debian mirror in
#      apt's sources, imported with podman (kept and reused on later runs)
#   2. podman build --isolation=chroot with that base as BUILD_IMAGE,
#      CUDA_DEVEL_IMAGE and BASE_IMAGE, and CONVSERVE_CUDA=OFF
#   3. the image's entry point run with buildah run --isolation=chroot (CPU
#      backend, flags from CONVSERVE_* variables), then: non-root user, the
#      image's own HEALTHCHECK command, convserve-load with an example graph
#      over both protocols, /metrics when this build serves it, and SIGTERM
#      -> drain -> exit 0
# Installs debootstrap, podman, buildah and curl with apt when missing. Run as
# root from anywhere; ~6 minutes on 2 cores (docs/deploy.md).
# Environment:
#   CONTEXT=DIR         build context (default: the repository root)
#   IMAGE=NAME          image to build (default localhost/convserve:check)
#   PORT=N, METRICS_PORT=N   loopback ports for the server (default: free ones)
#   REBUILD_BASE=1      debootstrap the base image again
#   CACHE=1             keep podman's layer cache (faster reruns, ~1 GB per
#                       source change; `podman image prune` frees it)
#   CONVSERVE_DEBIAN_MIRROR=URL   mirror for debootstrap instead of apt's
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
context="${CONTEXT:-$root}"
image="${IMAGE:-localhost/convserve:check}"
base="localhost/convserve-debian-base:12"
work="${WORK_DIR:-/var/tmp/convserve-container-check}"
started=$SECONDS

step() { echo "=== [$((SECONDS - started))s] $*"; }
fail() { echo "container_check: FAILED: $*" >&2; exit 1; }
# A loopback port nothing listens on (chroot isolation shares this machine's
# network, so the container's server must not meet another one's port).
free_port() {
  local candidate
  for _ in $(seq 50); do
    candidate=$((20000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null || { echo "$candidate"; return; }
  done
  fail "no free loopback port found"
}
port="${PORT:-$(free_port)}"
metrics_port="${METRICS_PORT:-$(free_port)}"

# --- tools -----------------------------------------------------------------
missing=()
for package in debootstrap podman buildah curl; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || fail "run as root (to install ${missing[*]} and build images)"
  step "installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
[ "$(id -u)" -eq 0 ] || fail "run as root (debootstrap and chroot isolation need it)"
mkdir -p "$work"

# The first enabled 'deb' source for bookworm in apt's own configuration
# (one-line .list files and deb822 .sources files).
debian_mirror() {
  local file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    case "$file" in
      *.sources)
        awk 'BEGIN { RS = ""; FS = "\n" }
             { uris = ""; suites = ""; types = ""; enabled = "yes"
               for (i = 1; i <= NF; i++) {
                 line = $i; if (line ~ /^[ \t]*#/) continue
                 key = tolower(line); sub(/:.*/, "", key); sub(/^[^:]*:[ \t]*/, "", line)
                 if (key == "uris") uris = line; else if (key == "suites") suites = " " line " "
                 else if (key == "types") types = " " line " "; else if (key == "enabled") enabled = tolower(line)
               }
               if (enabled != "no" && types ~ / deb / && suites ~ / bookworm /) { split(uris, u, /[ \t]+/); print u[1] } }' "$file" ;;
      *)
        awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                           if ($(i + 1) == "bookworm") print $i }' "$file" ;;
    esac
  done | head -n 1
}

# --- 1. base image -----------------------------------------------------------
if [ "${REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$base"; then
  mirror="${CONVSERVE_DEBIAN_MIRROR:-$(debian_mirror)}"
  [ -n "$mirror" ] || fail "no bookworm 'deb' source in /etc/apt/sources.list*; set CONVSERVE_DEBIAN_MIRROR"
  step "debootstrap Debian 12 (minbase) from apt's mirror"
  rootfs="$work/rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" "$mirror" \
    > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
  # The same Debian sources as this machine (security updates included) where
  # it has the standard deb822 file; debootstrap's one line otherwise.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
    : > "$rootfs/etc/apt/sources.list"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  step "importing the root file system as $base"
  tar -C "$rootfs" --numeric-owner -c . |
    podman import --quiet --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["/bin/bash"]' - "$base" > /dev/null
  rm -rf "$rootfs"
else
  step "reusing base image $base (REBUILD_BASE=1 makes it again)"
fi

# --- 2. image ------------------------------------------------------------------
step "podman build --isolation=chroot $image (compiles convserve: minutes)"
# Without CACHE=1 no intermediate image is kept (a build stage is ~1 GB): every
# run compiles anew, and the disk holds only the base and the checked image.
build_flags=(--isolation=chroot --pull=never --format=docker --layers=false)
[ "${CACHE:-0}" = 1 ] && build_flags=(--isolation=chroot --pull=never --format=docker --layers)
podman image exists "$image" && podman rmi -f "$image" > /dev/null
podman build "${build_flags[@]}" -f "$context/deploy/Dockerfile" \
  --build-arg BUILD_IMAGE="$base" --build-arg CUDA_DEVEL_IMAGE="$base" \
  --build-arg BASE_IMAGE="$base" --build-arg CONVSERVE_CUDA=OFF \
  -t "$image" "$context" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; fail "podman build"; }
grep -E "^\[[0-9]+/[0-9]+\] STEP|^bundle: [0-9]" "$work/build.log" | cut -c1-110 | sed 's/^/  /'
[ "${CACHE:-0}" != 1 ] || echo "  $(grep -c '^--> Using cache' "$work/build.log" || true) steps from the layer cache"
echo "  image size: $(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}')"

inspect() { podman image inspect --format "$1" "$image"; }
echo "  user: $(inspect '{{.Config.User}}')  exposed: $(inspect '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}')"
mapfile -t entrypoint < <(inspect '{{range .Config.Entrypoint}}{{println .}}{{end}}' | sed '/^$/d')
mapfile -t healthcheck < <(inspect '{{range $i, $a := .Config.Healthcheck.Test}}{{if $i}}{{println $a}}{{end}}{{end}}' | sed '/^$/d')
[ ${#entrypoint[@]} -gt 0 ] || fail "the image has no ENTRYPOINT"
[ ${#healthcheck[@]} -gt 0 ] || fail "the image has no HEALTHCHECK (built with --format=docker?)"
echo "  entrypoint: ${entrypoint[*]}"
echo "  healthcheck: ${healthcheck[*]}"

# --- 3. run it -------------------------------------------------------------------
container=""
server_run_pid=""
cleanup() {
  if [ -n "$server_run_pid" ] && kill -0 "$server_run_pid" 2>/dev/null; then
    kill -TERM "$(server_pid)" 2>/dev/null || true
    wait "$server_run_pid" 2>/dev/null || true
  fi
  [ -z "$container" ] || buildah rm "$container" > /dev/null 2>&1 || true
}
trap cleanup EXIT
# The convserve-server process under `buildah run` (chroot isolation has no
# PID namespace, so it is an ordinary descendant of the buildah process).
server_pid() {
  ps -e -o pid=,ppid=,comm= | awk -v top="$server_run_pid" '
    { parent[$1] = $2; name[$1] = $3 }
    END { for (p in name) if (name[p] ~ /^convserve-serv/) {
            for (q = p; q in parent && q != 1; q = parent[q]) if (q == top) { print p; exit } } }'
}
in_container() { buildah run --isolation=chroot "$container" -- "$@"; }

container="$(buildah from --pull-never --name "convserve-check-$$" "$image")"
# Flags come from the environment through the entry point, as in production.
# The address list also serves a Unix socket, after the TCP port that the
# image's HEALTHCHECK probes.
env_flags=(--env CONVSERVE_BACKEND=cpu --env "CONVSERVE_LISTEN=127.0.0.1:$port,unix:/tmp/convserve.sock"
           --env CONVSERVE_SHUTDOWN_GRACE_SECONDS=5 --env CONVSERVE_REQUEST_THREADS=2)
metrics_flag="$(in_container convserve-server --helpfull 2>&1 | grep -o -- '--metrics[a-z_]*' | head -n 1 || true)"
# The metrics issue decides the flag's name; a port or an address are
# understood, anything else is left at its default, the image's port 8002.
case "$metrics_flag" in
  "") ;;
  --metrics_port) env_flags+=(--env "CONVSERVE_METRICS_PORT=$metrics_port") ;;
  --metrics_listen|--metrics_address|--metrics_addr)
    name="${metrics_flag#--}"
    env_flags+=(--env "CONVSERVE_${name^^}=127.0.0.1:$metrics_port") ;;
  *) metrics_port=8002 ;;
esac
buildah config "${env_flags[@]}" "$container"

step "starting the server: ${entrypoint[*]} (user $(in_container id -u), loopback port $port)"
[ "$(in_container id -u)" != 0 ] || fail "the image runs as root"
buildah run --isolation=chroot "$container" -- "${entrypoint[@]}" > "$work/server.log" 2>&1 &
server_run_pid=$!
# Its own "listening" line first, so the probes below cannot reach another server.
for _ in $(seq 300); do
  grep -q "listening on 127.0.0.1:$port" "$work/server.log" && break
  kill -0 "$server_run_pid" 2>/dev/null || { cat "$work/server.log"; fail "the server exited at start"; }
  sleep 0.2
done
grep -q "listening on 127.0.0.1:$port" "$work/server.log" ||
  { cat "$work/server.log"; fail "the server did not listen on 127.0.0.1:$port within 60 s"; }
sed 's/^/  server: /' "$work/server.log"
shown_lines="$(wc -l < "$work/server.log")"

step "health: convserve-health (waits for SERVING)"
in_container convserve-health --server="127.0.0.1:$port" --wait_seconds=60 ||
  { cat "$work/server.log"; fail "server never became SERVING"; }
step "health: the image's HEALTHCHECK command"
in_container "${healthcheck[@]}" || fail "HEALTHCHECK command failed"
step "health over the Unix socket of CONVSERVE_LISTEN's list"
in_container convserve-health --server=unix:/tmp/convserve.sock --wait_seconds=10 ||
  fail "no health answer on unix:/tmp/convserve.sock"

step "graph load and inference: convserve-load --graph_file=examples/resnet_block.textproto"
in_container convserve-load --server="127.0.0.1:$port" \
  --graph_file=/opt/convserve/examples/resnet_block.textproto --input_shape=1,3,64,64 \
  --requests=20 || fail "convserve-load (convserve.v1)"
step "inference over KServe v2: convserve-load --protocol=kserve --graph=resnet_block"
in_container convserve-load --server="127.0.0.1:$port" --graph=resnet_block --protocol=kserve \
  --input_shape=1,3,64,64 --requests=5 || fail "convserve-load (kserve)"

if [ -z "$metrics_flag" ]; then
  step "metrics: not served by this build"
else
  step "metrics: GET /metrics on port $metrics_port ($metrics_flag)"
  curl -sf --max-time 5 "http://127.0.0.1:$metrics_port/metrics" > "$work/metrics.txt" ||
    fail "the server has $metrics_flag but /metrics on 127.0.0.1:$metrics_port did not answer"
  series="$(grep -c '^convserve_' "$work/metrics.txt" || true)"
  [ "$series" -gt 0 ] || fail "/metrics has no convserve_ series"
  echo "  $series convserve_ series, e.g. $(grep -m1 '^convserve_' "$work/metrics.txt")"
fi

step "SIGTERM: drain and exit 0"
pid="$(server_pid)"
[ -n "$pid" ] || fail "cannot find the server process under buildah run ($server_run_pid)"
kill -TERM "$pid"
rc=0
wait "$server_run_pid" || rc=$?
server_run_pid=""
tail -n +"$((shown_lines + 1))" "$work/server.log" | sed 's/^/  server: /'
[ "$rc" -eq 0 ] || fail "server exited $rc after SIGTERM"
grep -q "stopped" "$work/server.log" || fail "no 'stopped' line in the server log"
step "container_check: PASSED in $((SECONDS - started))s (image $image)"
