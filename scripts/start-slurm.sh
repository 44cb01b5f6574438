#!/usr/bin/env bash
# Starts a one-machine Slurm cluster from Debian's packages for the tests (installing them if
# needed), as root, and prints where its configuration is and the name of its partition:
#   SLURM_CONF=/etc/slurm/slurm.conf
#   SLURM_PARTITION=hptune
# Idempotent: a second run finds the cluster up and changes nothing. A machine restored from
# a snapshot (stale pid files, jobs of processes that no longer exist, another host name)
# comes up too: the configuration is written again when it differs, and the daemons are
# started afresh when they do not answer.
set -euo pipefail

# Only the result goes to stdout (callers capture it); everything the tools print goes to
# stderr.
exec 3>&1 1>&2

conf_dir=/etc/slurm
conf="$conf_dir/slurm.conf"
partition=hptune
state=/var/lib/slurm
run=/run/slurm
logs=/var/log/slurm
# Placeholder device files of four fake GPUs: Slurm hands them out as `gpu` GRES and sets
# CUDA_VISIBLE_DEVICES for each job that asks for some, which is all the tests need. slurmd
# takes only character or block devices: each is a node of /dev/null's kind (1, 3). Each GPU
# is also cut into 16 `shard` GRES (Slurm's GPU sharding, 22.05 and later), as hptune
# assumes a cluster does for `executor.gpus: 1/K` (docs/study-file.md): a GPU is given as
# `gpu` or as shards, never both at once.
shards_per_gpu=16
fake_gpus=$state/fake-gpu

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
  || ! command -v sbatch >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client >/dev/null
fi

host=$(hostname -s)

# Memory limits through cgroup v1's memory controller where this machine lets root create a
# group in it (a job over its --mem then ends OUT_OF_MEMORY, as on a real cluster); else none.
if mkdir /sys/fs/cgroup/memory/hptune-probe 2>/dev/null \
  && rmdir /sys/fs/cgroup/memory/hptune-probe; then
  task_plugin=task/cgroup
else
  task_plugin=task/none
fi
mkdir -p "$conf_dir" "$state/slurmctld" "$state/slurmd" "$run" "$logs"
for i in 0 1 2 3; do
  [ -c "$fake_gpus$i" ] || { rm -f "$fake_gpus$i"; mknod "$fake_gpus$i" c 1 3; }
done

# The node claims more CPUs and memory than a small test machine may have
# (SlurmdParameters=config_overrides keeps slurmd from draining it for that): trials are
# short scripts, and a study with parallel_trial_count 3 must find room for three jobs.
#
# The plugins are those that work in a container without systemd or a writable cgroup tree:
# - AuthType=auth/none, CredType=cred/none: no munge daemon and key; everything runs as root
#   on one machine, so there is nobody to authenticate against.
# - ProctrackType=proctrack/linuxproc: a job's processes are found through their parent pids
#   (proctrack/cgroup needs cgroups Slurm can create, which a container does not give).
# - TaskPlugin=task/cgroup with cgroup.conf's ConstrainRAMSpace (cgroup v1, where the memory
#   controller is writable; else task/none): each job is held to its memory (--mem, else
#   DefMemPerCPU; memory is a consumable resource, CR_CPU_Memory), and one that exceeds it
#   ends OUT_OF_MEMORY. No binding to CPUs (ConstrainCores=no): the node claims CPUs the
#   machine may not have.
# - PreemptType=preempt/partition_prio, PreemptMode=CANCEL: a job of the partition
#   $partition-urgent cancels jobs of $partition-preemptible that hold what it needs (they end
#   PREEMPTED); jobs of $partition, the default, are never preempted.
# - JobAcctGatherType=jobacct_gather/none, AccountingStorageType=accounting_storage/none:
#   no slurmdbd. Slurm 22.05's only other accounting storage is slurmdbd, which needs a
#   MySQL/MariaDB server, and its sacct reads nothing else (no --completion, no filetxt).
#   `sacct` therefore does not answer here; hptune reads a job's state from `scontrol show
#   job` and its exit code from the file the job writes (docs/ARCHITECTURE.md), and uses
#   `sacct` only where it answers.
# - MinJobAge=300: a finished job stays visible to `scontrol show job` for five minutes.
desired=$(cat <<EOF
# Written by hptune's scripts/start-slurm.sh: a one-machine cluster for the tests.
ClusterName=hptune
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=$task_plugin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=512
SchedulerType=sched/backfill
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=300
KillWait=5
StateSaveLocation=$state/slurmctld
SlurmdSpoolDir=$state/slurmd
SlurmctldPidFile=$run/slurmctld.pid
SlurmdPidFile=$run/slurmd.pid
SlurmctldLogFile=$logs/slurmctld.log
SlurmdLogFile=$logs/slurmd.log
GresTypes=gpu,shard
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=8192 Gres=gpu:4,shard:$((4 * shards_per_gpu)) State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=$partition Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=$partition-preemptible Nodes=$host MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=$partition-urgent Nodes=$host MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
)
cgroup=$(cat <<EOF
# Written by hptune's scripts/start-slurm.sh: jobs held to their memory, nothing else.
CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainCores=no
ConstrainDevices=no
EOF
)
gres=$(cat <<EOF
# Written by hptune's scripts/start-slurm.sh: four placeholder GPUs, each in $shards_per_gpu shards.
AutoDetect=off
Name=gpu File=${fake_gpus}[0-3]
$(for i in 0 1 2 3; do echo "Name=shard Count=$shards_per_gpu File=$fake_gpus$i"; done)
EOF
)

changed=
if [ "$(cat "$conf" 2>/dev/null)" != "$desired" ]; then
  printf '%s\n' "$desired" >"$conf"
  changed=1
fi
if [ "$(cat "$conf_dir/gres.conf" 2>/dev/null)" != "$gres" ]; then
  printf '%s\n' "$gres" >"$conf_dir/gres.conf"
  changed=1
fi
if [ "$(cat "$conf_dir/cgroup.conf" 2>/dev/null)" != "$cgroup" ]; then
  printf '%s\n' "$cgroup" >"$conf_dir/cgroup.conf"
  changed=1
fi

# The pid of a daemon whose pid file names a live process of that name, else nothing.
running() {
  local pid
  pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ] && echo "$pid"
}

# Stops a daemon this script started (by the pid in its pid file) and waits for it to go.
stop() {
  local pid
  pid=$(running "$1") || return 0
  kill "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
}

if [ -n "$changed" ]; then
  stop slurmd
  stop slurmctld
fi

if ! running slurmctld >/dev/null || ! scontrol ping >/dev/null 2>&1; then
  stop slurmctld
  # A pid file of a daemon that is gone (a snapshot's) must not make slurmctld signal
  # whichever process has that pid now; -c drops the jobs of the state saved with it, whose
  # processes are gone too.
  rm -f "$run/slurmctld.pid"
  slurmctld -c 3>&-
fi
if ! running slurmd >/dev/null; then
  rm -f "$run/slurmd.pid"
  slurmd 3>&-
fi

# Wait for the controller to answer and the node to be ready for jobs.
for _ in $(seq 1 150); do
  node_state=$(sinfo -h -n "$host" -o '%T' 2>/dev/null || true)
  case "$node_state" in
    idle* | mixed* | allocated*) break ;;
    down* | drain*) scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.2
done
case "$node_state" in
  idle* | mixed* | allocated*) ;;
  *)
    echo "error: the Slurm node $host is '${node_state:-unknown}' (see $logs/slurmctld.log and $logs/slurmd.log)"
    exit 1
    ;;
esac

echo "SLURM_CONF=$conf" >&3
echo "SLURM_PARTITION=$partition" >&3
