#!/usr/bin/env bash
# Run a command with TICKETQ_TEST_REDIS_URL naming a Redis that the tests may write to and flush.
#
#   scripts/with-redis.sh python -m pytest -q
#
# Which Redis, first match wins:
#   1. TICKETQ_TEST_REDIS_URL, when it is already set: used as it is.
#   2. A Redis answering PING on 127.0.0.1:6379 (database 15, to stay clear of anything in database 0).
#   3. A throwaway redis-server on a free local port: no persistence, its files under a temporary
#      directory, stopped and removed when the command ends, however it ends.
#   4. None: with CI=true that is an error (the Redis tier must run in CI); otherwise the command runs
#      without the variable and the Redis tests skip, saying why.
# The command's exit status is this script's exit status.
set -euo pipefail

readonly DEFAULT_HOST=127.0.0.1 DEFAULT_PORT=6379 TEST_DB=15

log() { printf 'with-redis: %s\n' "$*" >&2; }

if [[ $# -eq 0 ]]; then
  log "usage: $0 COMMAND [ARG...]"
  exit 2
fi

# PING over bash's /dev/tcp: needs no redis-cli. A Redis that wants a password answers -NOAUTH: not ours to use.
redis_answers() {
  local host=$1 port=$2 reply=""
  # The subshell owns the socket, so nothing leaks into the command we run later.
  reply=$(
    exec 2>/dev/null
    exec 3<>"/dev/tcp/$host/$port" || exit 1
    printf 'PING\r\n' >&3
    IFS= read -r -t 2 line <&3 || exit 1
    printf '%s' "$line"
  ) || return 1
  [[ $reply == "+PONG"* ]]
}

tmpdir=""
server_pid=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    # Wait (briefly) for it to go, so no server outlives the run.
    for ((i = 0; i < 50; i++)); do
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  if [[ -n $tmpdir ]]; then
    rm -rf "$tmpdir"
  fi
}

start_private_server() {
  tmpdir=$(mktemp -d "${TMPDIR:-/tmp}/ticketq-redis.XXXXXX")
  local attempt port
  for attempt in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 20000))
    redis_answers "$DEFAULT_HOST" "$port" && continue # taken by another Redis
    redis-server --daemonize yes --bind "$DEFAULT_HOST" --port "$port" --save "" --appendonly no \
      --dir "$tmpdir" --pidfile "$tmpdir/redis.pid" --logfile "$tmpdir/redis.log" >/dev/null
    for ((i = 0; i < 50; i++)); do
      if redis_answers "$DEFAULT_HOST" "$port"; then
        server_pid=$(<"$tmpdir/redis.pid")
        export TICKETQ_TEST_REDIS_URL="redis://$DEFAULT_HOST:$port/0"
        log "started redis-server (pid $server_pid) at $TICKETQ_TEST_REDIS_URL; stopped when the command ends"
        return 0
      fi
      sleep 0.1
    done
    # Most likely the port was taken by something that is not Redis; the log says.
    if [[ -s $tmpdir/redis.pid ]]; then
      kill "$(<"$tmpdir/redis.pid")" 2>/dev/null || true
    fi
    log "redis-server did not come up on port $port (attempt $attempt): $(tail -n 1 "$tmpdir/redis.log" 2>/dev/null)"
    rm -f "$tmpdir/redis.pid"
  done
  return 1
}

if [[ -n ${TICKETQ_TEST_REDIS_URL:-} ]]; then
  log "using TICKETQ_TEST_REDIS_URL from the environment"
elif redis_answers "$DEFAULT_HOST" "$DEFAULT_PORT"; then
  export TICKETQ_TEST_REDIS_URL="redis://$DEFAULT_HOST:$DEFAULT_PORT/$TEST_DB"
  log "using the Redis at $TICKETQ_TEST_REDIS_URL"
elif command -v redis-server >/dev/null; then
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  if ! start_private_server; then
    log "could not start redis-server"
    exit 1
  fi
elif [[ ${CI:-} == true ]]; then
  log "CI=true and no Redis for the tests: nothing answers on $DEFAULT_HOST:$DEFAULT_PORT, there is no"
  log "redis-server on PATH, and TICKETQ_TEST_REDIS_URL is not set. Start Redis, install redis-server"
  log "(apt-get install redis-server) or set TICKETQ_TEST_REDIS_URL=redis://HOST:PORT/DB."
  exit 1
else
  log "no Redis found (nothing on $DEFAULT_HOST:$DEFAULT_PORT, no redis-server, no TICKETQ_TEST_REDIS_URL):"
  log "running anyway; the tests that need a real Redis will skip"
fi

if [[ -z $server_pid ]]; then
  exec "$@"
fi
# Not exec: the EXIT trap must run after the command to stop the server.
status=0
"$@" || status=$?
exit "$status"
