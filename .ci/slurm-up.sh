#!/usr/bin/env bash
# Start a real single-node Slurm on localhost for the integration tests (Debian 12, root, no systemd).
#
# Follows the tested recipe in the spec (environment.md): Debian's slurm + munge, munged as user munge,
# slurmctld -i, slurmd -N localhost; CPUs=2, RealMemory below physical, DefMemPerCPU so jobs do not serialise.
# Accounting (slurmdbd + MariaDB, so `sacct` works) is added unless PACKCFG_SLURM_ACCOUNTING=0; if it
# cannot be set up the cluster still starts without it (the launcher then reads state from squeue/scontrol).
#
# Idempotent: a healthy cluster with the same config is left alone; a changed config or a dead daemon is
# restarted. Exits non-zero with a one-line reason when it cannot start a cluster.
set -euo pipefail

ACCOUNTING="${PACKCFG_SLURM_ACCOUNTING:-1}"
CLUSTER=packcfg
ETC=/etc/slurm
LOG=/var/log/slurm
DB_PASS=packcfg-ci  # local CI database on 127.0.0.1 only; not a secret worth protecting
t0=$(date +%s)

die() { echo "slurm-up: $*" >&2; exit 1; }
say() { echo "slurm-up: [$(( $(date +%s) - t0 ))s] $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (installs packages and starts daemons)"
command -v apt-get >/dev/null || die "apt-get not found: this recipe is for Debian"

# A daemon is alive when its pid file names a running process.
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop_pidfile() {
  local pidfile=$1 pid
  alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

# ---- packages --------------------------------------------------------------------------------------
pkgs=(slurmctld slurmd slurm-client munge)
[ "$ACCOUNTING" = 1 ] && pkgs+=(slurmdbd mariadb-server)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -qq >/dev/null || die "apt-get update failed"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    if [ "$ACCOUNTING" = 1 ]; then
      say "accounting packages failed to install; continuing without accounting"
      ACCOUNTING=0
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null || die "apt-get install slurm/munge failed"
    else
      die "apt-get install ${missing[*]} failed"
    fi
  fi
fi

# ---- munge -----------------------------------------------------------------------------------------
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
[ -s /etc/munge/munge.key ] || die "/etc/munge/munge.key missing (munge package did not create it)"
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  stop_pidfile /run/munge/munged.pid
  su -s /bin/sh munge -c /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null 2>&1 || die "munge -n | unmunge fails"
fi
say "munge ok"

mkdir -p "$ETC" "$LOG" /var/spool/slurmctld /var/spool/slurmd

# ---- slurm.conf ------------------------------------------------------------------------------------
# Written before accounting is registered: sacctmgr reads slurm.conf and refuses without the slurmdbd plugin.
changed=0
write_slurm_conf() {
  local mem_mb real_mb acct conf
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  real_mb=$(( mem_mb * 85 / 100 ))  # at or below physical memory, else the node drains
  [ "$real_mb" -gt 20000 ] && real_mb=20000
  if [ "$1" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost"
  else
    acct="AccountingStorageType=accounting_storage/none"
  fi
  conf=$(cat <<EOF
# Written by packcfg .ci/slurm-up.sh: a single-node cluster for the integration tests.
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$acct
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 RealMemory=$real_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
)
  if [ "$(cat "$ETC/slurm.conf" 2>/dev/null)" != "$conf" ]; then
    printf '%s\n' "$conf" >"$ETC/slurm.conf.tmp" && mv "$ETC/slurm.conf.tmp" "$ETC/slurm.conf"
    changed=1
  fi
}

# ---- accounting: MariaDB + slurmdbd ------------------------------------------------------------------
setup_accounting() {
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
  if ! mariadb-admin ping >/dev/null 2>&1; then
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null 2>&1 \
      || { say "mariadb-install-db failed"; return 1; }
    (setsid /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 --pid-file=/run/mysqld/mysqld.pid \
      --log-error=/var/log/slurm/mariadb.log </dev/null >/dev/null 2>&1 &)
    for _ in $(seq 100); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.2; done
    mariadb-admin ping >/dev/null 2>&1 || { say "mariadbd did not start"; return 1; }
  fi
  mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;" || { say "database setup failed"; return 1; }
  local conf
  conf=$(cat <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=/run/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
)
  if [ "$(cat "$ETC/slurmdbd.conf" 2>/dev/null)" != "$conf" ]; then
    (umask 077; printf '%s\n' "$conf" >"$ETC/slurmdbd.conf")
    stop_pidfile /run/slurmdbd.pid
  fi
  chmod 600 "$ETC/slurmdbd.conf"
  if ! alive /run/slurmdbd.pid; then
    /usr/sbin/slurmdbd || { say "slurmdbd did not start"; return 1; }
  fi
  for _ in $(seq 150); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
  sacctmgr -n list cluster >/dev/null 2>&1 || { say "slurmdbd not answering"; return 1; }
  sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
  sacctmgr -n -P list account format=account | grep -qx ci || sacctmgr -i add account ci Cluster="$CLUSTER" >/dev/null
  sacctmgr -n -P list user format=user | grep -qx root || sacctmgr -i add user root Account=ci Cluster="$CLUSTER" >/dev/null
  return 0
}
write_slurm_conf "$ACCOUNTING"
if [ "$ACCOUNTING" = 1 ]; then
  if setup_accounting; then say "accounting ok (slurmdbd + MariaDB)"; else
    say "accounting unavailable; continuing without sacct"; ACCOUNTING=0; stop_pidfile /run/slurmdbd.pid
    write_slurm_conf 0
  fi
fi

# ---- daemons -----------------------------------------------------------------------------------------
if [ "$changed" = 1 ] || ! alive /run/slurmctld.pid || ! alive /run/slurmd.pid; then
  say "starting slurmctld and slurmd (config changed: $changed)"
  stop_pidfile /run/slurmd.pid
  stop_pidfile /run/slurmctld.pid
  /usr/sbin/slurmctld -i || die "slurmctld did not start (see $LOG/slurmctld.log)"
  for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.2; done
  scontrol ping 2>/dev/null | grep -q 'is UP' || die "slurmctld not answering (see $LOG/slurmctld.log)"
  /usr/sbin/slurmd -N localhost || die "slurmd did not start (see $LOG/slurmd.log)"
fi

# The node must come up idle; a node drained by an earlier run is resumed.
state=""
for _ in $(seq 100); do
  state=$(sinfo -h -N -n localhost -o '%T' 2>/dev/null || true)
  case "$state" in
    idle*|mixed*|allocated*) break ;;
    drain*|down*) scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.2
done
case "$state" in idle*|mixed*|allocated*) ;; *) die "node localhost is '$state' (see $LOG/slurmd.log)" ;; esac

# Smoke test: a real job through the scheduler.
timeout 60 srun -N1 -n1 --time=1 true || die "srun smoke test failed"
say "single-node Slurm up (cluster $CLUSTER, accounting: $([ "$ACCOUNTING" = 1 ] && echo slurmdbd || echo none))"
