#!/usr/bin/env bash
# A two-node Slurm on this one machine, beside the single-node CI cluster of .ci/slurm-up.sh (run that
# first: it installs the packages and starts munged). Each node is a slurmd in its own network namespace:
#
#   root namespace: bridge pcfg2n0 10.77.0.1/24 <- slurmctld of cluster "packcfg2n" (ports 6917/6918)
#   netns pcfg2n-node1: eth0 10.77.0.11, hostname node1 <- slurmd -N node1
#   netns pcfg2n-node2: eth0 10.77.0.12, hostname node2 <- slurmd -N node2
#
# Its own config (/etc/slurm-2n/slurm.conf; use it with SLURM_CONF=/etc/slurm-2n/slurm.conf), ports, state,
# pid and log files, so the single-node cluster that CI's `.ci/run` uses is left alone. No accounting
# (packcfg then reads job states from squeue/scontrol). node1/node2 are added to /etc/hosts (marked lines),
# because torchrun's rendezvous names the first node of the allocation. Each node also has its own UTS
# namespace (hostname node1/node2): torchrun's c10d rendezvous starts its store only on the node whose
# hostname or address matches the endpoint, and gloo binds to the address the hostname resolves to.
#
#   bash .ci/slurm-two-node.sh          # start (idempotent)
#   bash .ci/slurm-two-node.sh down     # stop the daemons, remove the namespaces and /etc/hosts lines
set -euo pipefail

ETC=/etc/slurm-2n
CONF=$ETC/slurm.conf
LOG=/var/log/slurm
SPOOL=/var/spool/slurm-2n
NET=10.77.0
BRIDGE=pcfg2n0
HOSTS_MARK="# packcfg .ci/slurm-two-node.sh"
t0=$(date +%s)
die() { echo "slurm-two-node: $*" >&2; exit 1; }
say() { echo "slurm-two-node: [$(( $(date +%s) - t0 ))s] $*"; }
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

[ "$(id -u)" = 0 ] || die "must run as root (network namespaces, daemons)"

if [ "${1:-up}" = down ]; then
  for n in 1 2; do
    stop_pidfile "/run/slurmd-2n-node$n.pid"
    ip netns del "pcfg2n-node$n" 2>/dev/null || true
    umount "/run/pcfg2n/uts-node$n" 2>/dev/null || true
    rm -f "/run/pcfg2n/uts-node$n"
  done
  stop_pidfile /run/slurmctld-2n.pid
  ip link del "$BRIDGE" 2>/dev/null || true
  sed -i "\|$HOSTS_MARK|d" /etc/hosts
  say "down"
  exit 0
fi

command -v slurmd >/dev/null || die "slurmd not installed: run .ci/slurm-up.sh first"
munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || die "munge is not working: run .ci/slurm-up.sh first"

# ---- network: a bridge in the root namespace, one namespace per node -----------------------------------
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
fi
ip link set "$BRIDGE" up
for n in 1 2; do
  ns=pcfg2n-node$n
  if ! ip netns list | grep -qw "$ns"; then
    ip netns add "$ns"
    ip link add "pcfg2n-v$n" type veth peer name eth0 netns "$ns"
    ip link set "pcfg2n-v$n" master "$BRIDGE" up
    ip -n "$ns" addr add "$NET.1$n/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  fi
  if ! [ "$(nsenter --uts="/run/pcfg2n/uts-node$n" hostname 2>/dev/null)" = "node$n" ]; then
    mkdir -p /run/pcfg2n && touch "/run/pcfg2n/uts-node$n"
    unshare --uts="/run/pcfg2n/uts-node$n" hostname "node$n"
  fi
  grep -q "^$NET.1$n node$n " /etc/hosts || echo "$NET.1$n node$n $HOSTS_MARK" >>/etc/hosts
done
say "network ok (node1 $NET.11, node2 $NET.12, controller $NET.1)"

# ---- config -------------------------------------------------------------------------------------------
mkdir -p "$ETC" "$LOG" "$SPOOL/ctld" "$SPOOL/node1" "$SPOOL/node2"
mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
real_mb=$(( mem_mb * 40 / 100 ))  # two nodes share this machine's memory
[ "$real_mb" -gt 8000 ] && real_mb=8000
conf=$(cat <<EOF
# Written by packcfg .ci/slurm-two-node.sh: two nodes in network namespaces on one machine.
ClusterName=packcfg2n
SlurmctldHost=$(hostname -s)($NET.1)
SlurmctldPort=6917
SlurmdPort=6918
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=/run/slurmctld-2n.pid
SlurmdPidFile=/run/slurmd-2n-%n.pid
SlurmctldLogFile=$LOG/slurmctld-2n.log
SlurmdLogFile=$LOG/slurmd-2n-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
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
MinJobAge=600
KillWait=10
NodeName=node1 NodeAddr=$NET.11 CPUs=2 RealMemory=$real_mb State=UNKNOWN
NodeName=node2 NodeAddr=$NET.12 CPUs=2 RealMemory=$real_mb State=UNKNOWN
PartitionName=two Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
EOF
)
changed=0
if [ "$(cat "$CONF" 2>/dev/null)" != "$conf" ]; then
  printf '%s\n' "$conf" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF"
  changed=1
fi
export SLURM_CONF=$CONF

# ---- daemons ------------------------------------------------------------------------------------------
if [ "$changed" = 1 ] || ! alive /run/slurmctld-2n.pid; then
  stop_pidfile /run/slurmctld-2n.pid
  /usr/sbin/slurmctld -i -f "$CONF" || die "slurmctld did not start (see $LOG/slurmctld-2n.log)"
  for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.2; done
  scontrol ping 2>/dev/null | grep -q 'is UP' || die "slurmctld not answering (see $LOG/slurmctld-2n.log)"
fi
for n in 1 2; do
  if [ "$changed" = 1 ] || ! alive "/run/slurmd-2n-node$n.pid"; then
    stop_pidfile "/run/slurmd-2n-node$n.pid"
    # nsenter switches the network and UTS namespaces only: `ip netns exec` also remounts /sys, which
    # hides /sys/fs/cgroup from slurmd ("Unable to initialize cgroup plugin").
    nsenter --net="/run/netns/pcfg2n-node$n" --uts="/run/pcfg2n/uts-node$n" /usr/sbin/slurmd -f "$CONF" -N "node$n" \
      || die "slurmd node$n did not start (see $LOG/slurmd-2n-node$n.log)"
  fi
done

state=""
for _ in $(seq 150); do
  state=$(sinfo -h -o '%T %D' 2>/dev/null | tr '\n' ' ' || true)
  case "$state" in "idle 2 ") break ;; esac
  for n in 1 2; do
    case "$(sinfo -h -N -n "node$n" -o '%T' 2>/dev/null)" in
      drain*|down*) scontrol update NodeName="node$n" State=RESUME >/dev/null 2>&1 || true ;;
    esac
  done
  sleep 0.2
done
[ "$state" = "idle 2 " ] || die "nodes not idle: '$state' (see $LOG/slurmd-2n-node*.log)"

# Smoke test: one task on each node, each in its own namespace.
out=$(timeout 60 srun -N2 -n2 --time=1 sh -c 'echo "$(hostname)=$(ip -4 -o addr show eth0 | awk "{print \$4}")"' \
  | sort | tr '\n' ' ') || die "srun across the two nodes failed"
[ "$out" = "node1=$NET.11/24 node2=$NET.12/24 " ] || die "srun -N2 ran on '$out', expected both namespaces"
say "two-node Slurm up (SLURM_CONF=$CONF, partition two: node1 node2)"
