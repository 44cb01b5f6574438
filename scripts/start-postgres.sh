#!/usr/bin/env bash
# Starts a local PostgreSQL server from Debian's packages for the tests (installing it if
# needed) and prints the URL of a database the tests may use. Idempotent.
set -euo pipefail

# Only the URL goes to stdout (callers capture it); everything the tools print goes to stderr.
exec 3>&1 1>&2

if ! command -v pg_lsclusters >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq postgresql >/dev/null
fi
read -r version cluster _ < <(pg_lsclusters -h | head -n 1) || true
if [ -z "${version:-}" ]; then
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  cluster=main
  pg_createcluster "$version" "$cluster" >/dev/null
fi
port=$(pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c { print $3 }')
start() { pg_ctlcluster "$version" "$cluster" start 3>&-; }  # the server must not hold the URL pipe open
if ! pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c && $4 == "online" { found = 1 } END { exit !found }'; then
  # A machine restored from a snapshot may keep the socket lock of a server that no longer
  # runs (its PID now another process's): the cluster is down, so the lock is stale.
  start || { rm -f "/var/run/postgresql/.s.PGSQL.$port.lock"; start; }
fi

as_postgres() { runuser -u postgres -- "$@"; }
as_postgres psql -p "$port" -qtAc "SELECT 1 FROM pg_roles WHERE rolname = 'hptune'" | grep -q 1 \
  || as_postgres psql -p "$port" -qc "CREATE ROLE hptune LOGIN PASSWORD 'hptune'"
as_postgres psql -p "$port" -qtAc "SELECT 1 FROM pg_database WHERE datname = 'hptune_test'" | grep -q 1 \
  || as_postgres createdb -p "$port" -O hptune hptune_test
echo "postgres://hptune:hptune@127.0.0.1:$port/hptune_test" >&3
