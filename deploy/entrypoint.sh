#!/bin/sh
# Entry point of the convserve image: turns every non-empty CONVSERVE_<NAME>
# environment variable into the server flag --<name>=<value> (name lower-cased,
# e.g. CONVSERVE_MAX_QUEUED_REQUESTS=512 -> --max_queued_requests=512), appends
# the container's arguments, and execs convserve-server, so the server is the
# container's main process and gets SIGTERM directly (graceful drain, exit 0).
# An unknown name fails loudly: the server rejects the flag at start.
# If the first argument does not start with '-', it is run as a command
# instead (e.g. `docker run IMAGE convserve-load --help`).
set -eu

if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  exec "$@"
fi

flags=""
for name in $(env | sed -n 's/^\(CONVSERVE_[A-Z0-9_]*\)=.*/\1/p' | sort -u); do
  eval "value=\${$name}"
  [ -n "$value" ] || continue
  flag="--$(printf '%s' "${name#CONVSERVE_}" | tr 'A-Z' 'a-z')"
  flags="$flags $flag"
  set -- "$flag=$value" "$@"
done
echo "convserve-entrypoint: flags from the environment:${flags:- none}" >&2
exec convserve-server "$@"
