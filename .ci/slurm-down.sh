#!/usr/bin/env bash
# Stop the single-node Slurm started by .ci/slurm-up.sh, by the PIDs in the daemons' pid files.
# Leaves packages, config and the accounting database in place so the next slurm-up is quick.
set -uo pipefail

stop_pidfile() {
  local pidfile=$1 pid
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
  echo "slurm-down: stopped $(basename "$pidfile" .pid) ($pid)"
}

stop_pidfile /run/slurmd.pid
stop_pidfile /run/slurmctld.pid
stop_pidfile /run/slurmdbd.pid
stop_pidfile /run/mysqld/mysqld.pid
stop_pidfile /run/munge/munged.pid
exit 0
