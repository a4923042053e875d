#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# make check-slurm: a real Slurm cluster on this machine, each node's GPU a
# devqd, jobs sharing it through the SPANK plugin; then podman with devq's
# CDI specs.  Root only (munged, slurmctld, slurmd, podman): skips otherwise.
#
# Two slurmd (-N n1, -N n2, own ports) under one slurmctld and munged of
# their own (own key, own socket: a site's munge and Slurm are not
# touched); each node's GPUs are stand-in device files in gres.conf (n1:
# gpu:1 and shard:4, n2: gpu:2 and shard:8), each with a devqd of its own
# (CPU backend, its own socket and tenant directory, run as root: the
# units' socket activation is not what is tested here).  Jobs run as
# nobody.  Usage: check.sh BUILD
set -euo pipefail

TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-build}" && pwd)
JOBUSER=${DEVQ_SLURM_USER:-nobody}
T0=$(date +%s.%N)

# The plugin's readers of slurmctld's answers, without a cluster (any user).
"$BUILD/slurm/parse_check" || { echo "check-slurm: FAILED: the plugin's parsers (tests/slurm/parse_check.c)"; exit 1; }
if [ "$(id -u)" != 0 ]; then
	echo "check-slurm: SKIPPED: needs root (munged, slurmctld, slurmd, podman)"
	exit 0
fi
missing=
for t in munged slurmctld slurmd srun sbatch scontrol scancel sinfo squeue podman runc; do
	command -v $t >/dev/null || missing="$missing $t"
done
if [ -n "$missing" ]; then
	echo "check-slurm: missing:$missing; apt-get install slurmctld slurmd slurm-client munge libslurm-dev podman runc"
	exit 1
fi
for f in devqd devctl libdevq.so.0 slurm/spank_devq.so python/devq/__init__.py; do
	[ -e "$BUILD/$f" ] || { echo "check-slurm: $BUILD/$f missing: make check-slurm builds it"; exit 1; }
done

D=$(mktemp -d /tmp/devq-slurm.XXXXXX)
chmod 0755 "$D"
PIDS=()
CDI_SAVED=
IMAGE=localhost/devq-slurm-check:$$

log() { printf '%s check-slurm: %s\n' "$(date +%T.%N | cut -c1-12)" "$*"; }
elapsed() { echo "$(date +%s.%N) $1" | awk '{ printf "%.1f", $1 - $2 }'; }

cleanup() {
	local rc=$?
	set +e
	if [ $rc != 0 ]; then
		for f in "$D"/log/*.log "$D"/n*/devqd*.log; do
			[ -f "$f" ] && { echo "---- tail of $f"; tail -n 25 "$f"; }
		done
		for f in "$D"/out/*; do
			[ -f "$f" ] && { echo "---- $f"; tail -n 10 "$f"; }
		done
	fi
	# Jobs first, so that no slurmstepd outlives its slurmd; then only
	# what this script started, by pid (slurmd and slurmctld by their pid
	# files; jobs' leftovers by the pids they wrote).
	if [ -f "$D/slurmctld.pid" ]; then
		squeue -h -o %i | xargs -r scancel
		for _ in $(seq 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
	fi
	for p in "$D"/slurmd.n1.pid "$D"/slurmd.n2.pid "$D"/slurmctld.pid; do
		[ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null
	done
	[ -f "$D/out/orphan" ] && kill "$(sed -n 's/^pid //p' "$D/out/orphan")" 2>/dev/null
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.5
	[ -f "$D/munged.pid" ] && kill "$(cat "$D/munged.pid")" 2>/dev/null
	podman rmi -f "$IMAGE" >/dev/null 2>&1
	rm -f /var/run/cdi/devq.dev-tenant_ctr_$$.json
	rm -f /etc/cdi/devq.yaml
	[ -n "$CDI_SAVED" ] && mv "$CDI_SAVED" /etc/cdi/devq.yaml
	if [ $rc = 0 ] || [ -z "${KEEP:-}" ]; then rm -rf "$D"; else echo "kept $D"; fi
	[ $rc = 0 ] || echo "check-slurm: FAILED"
	exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "check-slurm: FAIL: $*" >&2; exit 1; }

# wait_for SECONDS COMMAND...: until COMMAND succeeds, polling every 50 ms.
wait_for() {
	local end
	end=$(echo "$(date +%s.%N) $1" | awk '{ printf "%.3f", $1 + $2 }')
	shift
	while ! "$@" >/dev/null 2>&1; do
		awk -v e="$end" -v n="$(date +%s.%N)" 'BEGIN { exit !(n < e) }' || return 1
		sleep 0.05
	done
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- what the jobs and nodes use, readable by the job's user -------------
mkdir -p "$D/bin" "$D/py" "$D/log" "$D/out" "$D/dev" "$D/ctld" "$D/spool"
cp "$BUILD/devqd" "$BUILD/devctl" "$BUILD/slurm/spank_devq.so" "$D/bin/"
cp -r "$BUILD/python/devq" "$D/py/"
cp -L "$BUILD/libdevq.so.0" "$D/py/"
cp "$TOP/tests/slurm/job.py" "$D/"
chmod -R a+rX "$D"
chown "$JOBUSER" "$D/out"
DEVCTL=$D/bin/devctl
JOBENV="PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTHONPATH=$D/py DEVQ_LIBRARY=$D/py/libdevq.so.0"

# ---- a devqd per node ----------------------------------------------------
start_devqd() { # NODE [GPU]
	local g=${2:-0}
	mkdir -p "$D/$1/state"
	"$D/bin/devqd" --backend cpu --streams 2 --socket "$D/$1/gpu$g.sock" \
		--state-dir "$D/$1/state" >>"$D/$1/devqd$g.log" 2>&1 &
	echo $! >"$D/$1/devqd$g.pid"
	PIDS+=($!)
	wait_for 10 "$DEVCTL" --socket "$D/$1/gpu$g.sock" status ||
		fail "devqd of $1 GPU $g did not start: $("$DEVCTL" --socket "$D/$1/gpu$g.sock" status 2>&1)"
}
stop_devqd() { # NODE [GPU]
	local p
	p=$(cat "$D/$1/devqd${2:-0}.pid")
	kill "$p"
	while kill -0 "$p" 2>/dev/null; do sleep 0.05; done
}
dq() { local n=$1; shift; "$DEVCTL" --socket "$D/$n/gpu0.sock" "$@"; }

# ---- munge and Slurm -----------------------------------------------------
dd if=/dev/urandom of="$D/munge.key" bs=1024 count=1 2>/dev/null
chmod 0400 "$D/munge.key"
munged -f --socket="$D/munge.sock" --key-file="$D/munge.key" --pid-file="$D/munged.pid" \
	--log-file="$D/log/munged.log" --seed-file="$D/munged.seed"
for g in n1-gpu0 n2-gpu0 n2-gpu1; do
	mknod "$D/dev/$g" c 1 3 # a stand-in GPU for gres.conf (/dev/null's numbers)
done
CTLD_PORT=$(free_port); N1_PORT=$(free_port); N2_PORT=$(free_port)
cat >"$D/plugstack.conf" <<EOF
required $D/bin/spank_devq.so shards_per_gpu=4 socket=$D/%n/gpu%g.sock devctl=$DEVCTL scontrol=$(command -v scontrol) state_dir=$D/state memory_per_shard=32M max_memory=96M fail_closed=yes grace_ms=5000
EOF
cat >"$D/health.conf" <<EOF
export SLURM_CONF=$D/slurm.conf
DEVCTL=$DEVCTL
SOCKETS="$D/%n/gpu0.sock"
LOGGER=
EOF
# A Slurm that cannot be asked: no configuration squeue can use.
: >"$D/empty.conf"
cat >"$D/health-noslurm.conf" <<EOF
. $D/health.conf
export SLURM_CONF=$D/empty.conf
EOF
cat >"$D/healthcheck" <<EOF
#!/bin/sh
DEVQ_HEALTHCHECK_CONF=$D/health.conf exec $TOP/slurm/devq-healthcheck
EOF
chmod 0755 "$D/healthcheck"
cat >"$D/slurm.conf" <<EOF
ClusterName=devqcheck
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/ctld
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.%n.log
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
GresTypes=gpu,shard
PlugStackConfig=$D/plugstack.conf
HealthCheckProgram=$D/healthcheck
HealthCheckInterval=3600
ReturnToService=2
KillWait=2
NodeName=n1 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$N1_PORT CPUs=$(nproc) Gres=gpu:1,shard:4
NodeName=n2 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$N2_PORT CPUs=$(nproc) Gres=gpu:2,shard:8
PartitionName=devq Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
cat >"$D/gres.conf" <<EOF
NodeName=n1 Name=gpu File=$D/dev/n1-gpu0
NodeName=n2 Name=gpu File=$D/dev/n2-gpu[0-1]
NodeName=n1 Name=shard Count=4
NodeName=n2 Name=shard Count=8
EOF
export SLURM_CONF=$D/slurm.conf
start_slurmd() { slurmd -f "$D/slurm.conf" -N "$1"; }
node_state() { sinfo -h -N -n "$1" -o %T; }
# Idle by slurmctld's node record: sinfo's CPU counts of a node stay those of
# a job that has ended when node information was asked for while it ran
# (sinfo, or scontrol show job -d, as the plugin's prolog does), until the
# node's record next changes (Slurm 22.05), so sinfo may say "mixed" here.
node_idle() { [ "$(scontrol show node "$1" | sed -n 's/.* State=\([^ ]*\).*/\1/p')" = IDLE ]; }

t=$(date +%s.%N)
start_devqd n1
start_devqd n2
start_devqd n2 1
slurmctld -f "$D/slurm.conf"
start_slurmd n1
start_slurmd n2
wait_for 30 node_idle n1 && wait_for 30 node_idle n2 || fail "nodes not idle: $(sinfo -N)"
log "(1) munged, slurmctld, slurmd n1 and n2, a devqd per GPU (n1: 1, n2: 2): up in $(elapsed "$t") s"

# asuser CMD...: as the job's user, from a directory it may enter.
asuser() { (cd "$D/out" && runuser -u "$JOBUSER" -- env $JOBENV "$@"); }
# tenant NODE TENANT EXPR: EXPR (Python, t the tenant's object from
# devctl admin tenants --json) printed; fails when the tenant is not listed.
tenant() {
	dq "$1" admin tenants --json | python3 -c '
import json, sys
t = [x for x in json.load(sys.stdin) if x["tenant"] == sys.argv[1]]
if not t:
    sys.exit(1)
t = t[0]
print(eval(sys.argv[2]))' "$2" "$3"
}
no_tenant() { ! tenant "$1" "$2" 1; }
job_line() { grep -m1 "$2" "$D/out/$1" 2>/dev/null; }
has_line() { grep -q "$2" "$D/out/$1" 2>/dev/null; }

# ---- (2) a job's work goes through its tenant socket; two jobs of one user
# are two tenants; the one over its cap is refused, the other goes on ------
t=$(date +%s.%N)
out=$(asuser srun -w n1 --gres=shard:2 python3 -c '
import os, numpy as np, devq
with devq.connect() as c:
    x = c.array(np.arange(8, dtype=np.float32)); y = c.zeros((8,), np.float32)
    c.submit("saxpy_f32", a=3.0, x=x, y=y).result(timeout=30)
    print(os.environ["SLURM_JOB_ID"], os.environ["DEVQ_SOCKET"], list(y))
') || fail "(2) srun --gres=shard:2 python3: $out"
set -- $out
[ "$2" = "$D/n1/gpu0.tenants/job_$1.sock" ] || fail "(2) DEVQ_SOCKET is '$2', not job_$1's tenant socket"
case "$out" in *"[0.0, 3.0, 6.0, 9.0, 12.0, 15.0, 18.0, 21.0]"*) ;; *) fail "(2) wrong result: $out" ;; esac
wait_for 10 no_tenant n1 "job_$1" || fail "(2) job_$1 still a tenant after the job ended"
[ ! -e "$2" ] || fail "(2) $2 left behind"
wait_for 10 grep -q "devq: job $1 GPU 0 usage: .*\"tenant\":\"job_$1\"" "$D/log/slurmd.n1.log" || fail "(2) no usage line of job $1"

asuser srun -w n1 -J A --gres=shard:2 --devq-memory=64M python3 "$D/job.py" hold "$D/out/A.go" >"$D/out/A" 2>&1 &
PIDS+=($!)
asuser srun -w n1 -J B --gres=shard:1 --devq-memory=32M python3 "$D/job.py" hold "$D/out/B.go" $((40 << 20)) >"$D/out/B" 2>&1 &
PIDS+=($!)
wait_for 30 has_line A READY && wait_for 30 has_line B READY || fail "(2) jobs A and B not both running"
A=$(job_line A READY | awk '{ print $3 }'); B=$(job_line B READY | awk '{ print $3 }')
[ "$(tenant n1 "job_$A" '(t["shares"], t["of"], t["memory_bytes"], t["uid"], t["sessions"])')" = \
  "(2, 4, 67108864, $(id -u "$JOBUSER"), 1)" ] || fail "(2) job_$A: $(dq n1 admin tenants --json)"
[ "$(tenant n1 "job_$B" '(t["shares"], t["of"], t["memory_bytes"], t["sessions"])')" = "(1, 4, 33554432, 1)" ] ||
	fail "(2) job_$B: $(dq n1 admin tenants --json)"
# B over its cap first, then A: A goes on after B's refusal, and so does B.
touch "$D/out/B.go"
wait_for 30 has_line B OK-AFTER || fail "(2) job B did not go on"
job_line B REFUSED | grep -q "REFUSED resource_exhausted" || fail "(2) job B's 40 MiB over its 32 MiB cap: $(cat "$D/out/B")"
touch "$D/out/A.go"
wait_for 30 has_line A OK-AFTER || fail "(2) job A did not go on after B was refused"
has_line A REFUSED && fail "(2) job A refused: $(cat "$D/out/A")"
log "(2) jobs through tenant sockets, two tenants of one user, the cap refused: $(elapsed "$t") s"

# ---- (3) scancel with ops in flight --------------------------------------
t=$(date +%s.%N)
asuser srun -w n1 -J C --gres=shard:1 python3 "$D/job.py" orphan "$D/out" 10 >"$D/out/C" 2>&1 &
PIDS+=($!)
wait_for 30 has_line C ORPHANED || fail "(3) job C did not start its orphan"
C=$(job_line C ORPHANED | awk '{ print $3 }')
[ "$(tenant n1 "job_$C" 't["sessions"]')" = 1 ] || fail "(3) job_$C has no session"
sock_c=$(tenant n1 "job_$C" 't["socket"]')
scancel "$C"
epilog_start() { grep -m1 "devq: job $C: evicting" "$D/log/slurmd.n1.log"; }
wait_for 30 epilog_start || fail "(3) the epilog of job $C never started"
gone_sessions() { [ "$(tenant n1 "job_$C" 't["sessions"]' 2>/dev/null || echo 0)" = 0 ]; }
wait_for 5 gone_sessions || fail "(3) job_$C's sessions still open"
t_closed=$(date +%s.%N)
t_epi=$(epilog_start | sed 's/^\[\([^]]*\)\].*/\1/')
d=$(python3 -c 'import datetime, sys; print(float(sys.argv[2]) - datetime.datetime.fromisoformat(sys.argv[1]).timestamp())' "$t_epi" "$t_closed")
awk -v d="$d" 'BEGIN { exit !(d < 2.0) }' || fail "(3) sessions closed $d s after the epilog started"
usage() { grep -m1 "devq: job $C GPU 0 usage:" "$D/log/slurmd.n1.log"; }
wait_for 10 usage || fail "(3) no usage line for job $C"
u=$(usage | sed 's/.* usage: //')
wait_for 10 grep -q '^end' "$D/out/orphan" || fail "(3) the orphan never saw its session end"
# The usage line: of the 11 ops of 1 s, those the orphan's 1 s ops could
# finish before the epilog began ran, and the one running then; the rest
# were cancelled.  The orphan's session was closed under it (its ops end
# "unavailable"), long before its 11 s.
python3 - "$u" "$D/out/orphan" "$t_epi" <<'EOF' || fail "(3) usage: $u; the orphan saw: $(cat "$D/out/orphan")"
import datetime, json, math, sys
u = json.loads(sys.argv[1])
seen = open(sys.argv[2]).read().split("\n")
submitted = float([x for x in seen if x.startswith("submitted ")][0].split()[1])
epilog = datetime.datetime.fromisoformat(sys.argv[3]).timestamp()
ran = u["ops"] - u["cancelled"]
assert u["ops"] == 11 and u["cancelled"] >= 1, u
assert ran <= math.floor(epilog - submitted) + 1, (ran, epilog - submitted)
assert u["still_running"] == 0 and u["device_ns"] >= ran * 900_000_000, u
assert seen.count("op ok") <= ran and "end" in seen, seen
EOF
[ ! -e "$sock_c" ] || fail "(3) $sock_c left behind"
st=$(dq n1 status --json)
python3 -c 'import json, sys; s = json.loads(sys.argv[1]); sys.exit(not (s["buffers"] == 0 and s["bytes_mapped"] == 0 and s["ops_in_flight"] == 0))' "$st" ||
	fail "(3) left on n1: $st"
log "(3) scancel: sessions closed $(printf %.2f "$d") s after the epilog started, $(python3 -c "import json, sys; print(json.loads(sys.argv[1])[\"cancelled\"])" "$u") queued ops cancelled, nothing left: $(elapsed "$t") s"

# ---- (4) devqd down: the prolog fails, the node drains; back again -------
t=$(date +%s.%N)
stop_devqd n1
! asuser timeout 60 srun -w n1 --gres=shard:1 python3 "$D/job.py" work >"$D/out/D" 2>&1 || fail "(4) a job ran on n1 without devqd"
node_drained() { case "$(node_state n1)" in drain*) true ;; *) false ;; esac; }
wait_for 20 node_drained || fail "(4) n1 not drained: $(sinfo -N)"
sinfo -h -N -n n1 -o %E | grep -q "Prolog error" || fail "(4) n1 drained for: $(sinfo -h -N -n n1 -o %E)"
grep -q "devq: job [0-9]*: devqd at $D/n1/gpu0.sock (GPU 0) did not grant job_" "$D/log/slurmd.n1.log" ||
	fail "(4) slurmd's log has no devq reason"
! dq n1 health >/dev/null 2>&1 || fail "(4) devctl health exits 0 without devqd"
scontrol update nodename=n1 state=resume
env -i SLURMD_NODENAME=n1 "$D/healthcheck" && fail "(4) the health check passed without devqd"
node_state n1 | grep -q drain || fail "(4) the health check did not drain n1"
sinfo -h -N -n n1 -o %E | grep -q "devq" || fail "(4) drain reason: $(sinfo -h -N -n n1 -o %E)"
start_devqd n1
dq n1 health >/dev/null || fail "(4) devctl health fails with devqd back"
env -i SLURMD_NODENAME=n1 "$D/healthcheck" || fail "(4) the health check fails with devqd back"
scontrol update nodename=n1 state=resume
wait_for 10 node_idle n1 || fail "(4) n1 not idle after resume: $(sinfo -N)"
asuser srun -w n1 --gres=shard:1 python3 "$D/job.py" work >"$D/out/D" 2>&1 || fail "(4) after resume: $(cat "$D/out/D")"
log "(4) devqd down: prolog failed, n1 drained, health non-zero; back and serving: $(elapsed "$t") s"

# ---- (5) a job on both nodes ---------------------------------------------
t=$(date +%s.%N)
asuser srun -N2 --gres=shard:1 python3 "$D/job.py" work >"$D/out/E" 2>&1 || fail "(5) srun -N2: $(cat "$D/out/E")"
E=$(awk '{ print $3 }' "$D/out/E" | head -1)
for n in n1 n2; do
	grep -q "^$n OK $E $D/$n/gpu0.tenants/job_$E.sock " "$D/out/E" || fail "(5) no work through $n's tenant: $(cat "$D/out/E")"
	wait_for 10 grep -q "devq: job $E GPU 0 usage:" "$D/log/slurmd.$n.log" || fail "(5) no usage line on $n"
done
log "(5) srun -N2: a tenant on each node: $(elapsed "$t") s"

# ---- bad options are refused where they are typed; a job without GPUs is
# no tenant -------------------------------------------------------------
t=$(date +%s.%N)
out=$(asuser srun -w n2 --gres=shard:1 --devq-memory=12X true 2>&1) && fail "--devq-memory=12X accepted"
case "$out" in *"--devq-memory=12X: not a size"*) ;; *) fail "--devq-memory=12X: $out" ;; esac
out=$(asuser sbatch --devq-shares=65 --wrap true 2>&1) && fail "--devq-shares=65 accepted"
case "$out" in *"--devq-shares=65: not a whole number from 1 to 64"*) ;; *) fail "--devq-shares=65: $out" ;; esac
out=$(asuser srun -w n2 --gres=shard:1 --devq-priority true 2>&1) && fail "--devq-priority accepted"
case "$out" in *"--devq-priority is not allowed"*) ;; *) fail "--devq-priority: $out" ;; esac
out=$(asuser srun -w n2 sh -c 'echo "${DEVQ_SOCKET:-none}"') || fail "a job without GPUs: $out"
[ "$out" = none ] || fail "a job without GPUs got DEVQ_SOCKET=$out"
log "bad --devq-* options refused by srun and sbatch; a job without GPUs left alone: $(elapsed "$t") s"

# ---- (8) sbatch: the options reach the batch step (id 0xFFFFFFFB), which
# sees the job's shard count, and gets its tenant socket too ---------------
t=$(date +%s.%N)
F=$(asuser sbatch --parsable -w n1 -J F --gres=shard:3 --devq-memory=16M -o "$D/out/F" \
	--wrap "python3 $D/job.py hold $D/out/F.go") || fail "(8) sbatch: $F"
wait_for 30 has_line F READY || fail "(8) the batch job did not start"
grep -q "^n1 READY $F $D/n1/gpu0.tenants/job_$F.sock " "$D/out/F" || fail "(8) $(cat "$D/out/F")"
[ "$(tenant n1 "job_$F" '(t["shares"], t["of"], t["memory_bytes"])')" = "(3, 4, 16777216)" ] ||
	fail "(8) job_$F: $(dq n1 admin tenants --json)"
touch "$D/out/F.go"
wait_for 30 has_line F OK-AFTER || fail "(8) $(cat "$D/out/F")"
wait_for 10 grep -q "devq: job $F GPU 0 usage:" "$D/log/slurmd.n1.log" || fail "(8) no usage line"
log "(8) sbatch --devq-memory: the batch step's tenant, 3 of 4 shares: $(elapsed "$t") s"

# ---- (9) a job with two GPUs: a tenant on each, DEVQ_SOCKETS naming both;
# one of them down: the prolog fails and the other's grant is undone -----
t=$(date +%s.%N)
out=$(asuser srun -w n2 --gres=gpu:2 python3 "$D/job.py" work) || fail "(9) srun --gres=gpu:2: $out"
G=$(echo "$out" | awk '{ print $3 }')
[ "$out" = "$(echo "$out" | awk '{ print $1, $2, $3, $4, $5 }') $D/n2/gpu0.tenants/job_$G.sock,$D/n2/gpu1.tenants/job_$G.sock" ] ||
	fail "(9) DEVQ_SOCKETS: $out"
for g in 0 1; do
	wait_for 10 grep -q "devq: job $G GPU $g usage: .*\"ops\":1," "$D/log/slurmd.n2.log" || fail "(9) usage on GPU $g"
done
stop_devqd n2 1
! asuser timeout 60 srun -w n2 --gres=gpu:2 python3 "$D/job.py" work >"$D/out/G" 2>&1 || fail "(9) ran without GPU 1's devqd"
H=$(sed -n 's/.*devq: job \([0-9]*\): devqd at [^ ]*gpu1.sock (GPU 1) did not grant.*/\1/p' "$D/log/slurmd.n2.log" | tail -1)
[ -n "$H" ] || fail "(9) no devq reason in n2's log"
wait_for 10 no_tenant n2 "job_$H" || fail "(9) job_$H's grant on GPU 0 left behind"
# The prolog undid its own grant (the epilog, which Slurm runs after a
# failed prolog too, evicts again and finds nothing).
wait_for 10 [ "$(grep -c "devq: job $H: evicting job_$H from devqd at $D/n2/gpu0.sock (GPU 0)" "$D/log/slurmd.n2.log")" = 2 ] ||
	fail "(9) job $H: $(grep "job $H" "$D/log/slurmd.n2.log")"
start_devqd n2 1
scontrol update nodename=n2 state=resume
wait_for 10 node_idle n2 || fail "(9) n2 not idle after resume: $(sinfo -N)"
log "(9) two GPUs: a tenant on each; one devqd down, the other grant undone: $(elapsed "$t") s"

# ---- (10) what decides a grant comes from slurmd, not from the job: GPUs,
# weight and cap.  Each value a job sets here itself is one the plugin once
# read from the task's environment. --------------------------------------
t=$(date +%s.%N)
# grant_of NODE GPU JOBID: "K of M shares, memory B", the same in every
# grant devqd made for the job's tenant (the prolog's and each task's).
grant_of() {
	grep "tenant job_$3 granted to uid" "$D/$1/devqd$2.log" |
		sed 's/.*: \([0-9]* of [0-9]* shares, memory [0-9]*\).*/\1/' | sort -u
}
# A job without GPUs that names one: Debian's Slurm 22.05 unsets
# SLURM_STEP_GPUS and SLURM_SHARDS_ON_NODE in a step without GPUs, but
# keeps the job's own SLURM_JOB_GPUS.
out=$(asuser env SLURM_JOB_GPUS=0 SLURM_STEP_GPUS=0 SLURM_SHARDS_ON_NODE=64 srun --export=ALL -w n1 \
	sh -c 'echo "$SLURM_JOB_ID ${DEVQ_SOCKET:-none} ${SLURM_JOB_GPUS:-unset}"') || fail "(10) $out"
set -- $out
[ "$2" = none ] || fail "(10) a job without GPUs that set SLURM_JOB_GPUS=0 got DEVQ_SOCKET=$2"
[ -z "$(grant_of n1 0 "$1")" ] || fail "(10) job $1 without GPUs granted: $(grant_of n1 0 "$1")"
grep -q "devq: job $1: no grant of its prolog on this node: .*SLURM_JOB_GPUS='0'" "$D/log/slurmd.n1.log" ||
	fail "(10) job $1: no line saying its SLURM_JOB_GPUS was ignored"
if [ "$3" = 0 ]; then forged="Slurm kept a job's SLURM_JOB_GPUS=0"; else forged="Slurm reset SLURM_JOB_GPUS to '$3'"; fi
# A batch job on GPU 0 of n2 naming GPUs 0 and 1 and 64 shards: Slurm
# keeps SLURM_STEP_GPUS in the batch step, and sets its own
# SLURM_SHARDS_ON_NODE there.
I=$(asuser env SLURM_STEP_GPUS=0,1 SLURM_SHARDS_ON_NODE=64 sbatch --parsable --export=ALL -w n2 \
	--gres=shard:1 -o "$D/out/I" --wrap 'echo "$SLURM_STEP_GPUS $SLURM_SHARDS_ON_NODE $DEVQ_SOCKETS"') ||
	fail "(10) sbatch: $I"
wait_for 30 test -s "$D/out/I" || fail "(10) batch job $I did not run"
wait_for 10 no_tenant n2 "job_$I" || fail "(10) job_$I outlived its job"
set -- $(cat "$D/out/I")
[ "$3" = "$D/n2/gpu0.tenants/job_$I.sock" ] || fail "(10) job $I's DEVQ_SOCKETS: $(cat "$D/out/I")"
[ "$("$DEVCTL" --socket "$D/n2/gpu1.sock" admin tenants --json)" = "[]" ] ||
	fail "(10) job $I, of GPU 0, left a grant on GPU 1: $("$DEVCTL" --socket "$D/n2/gpu1.sock" admin tenants --json)"
[ -z "$(grant_of n2 1 "$I")" ] || fail "(10) job $I granted on GPU 1: $(grant_of n2 1 "$I")"
[ "$(grant_of n2 0 "$I")" = "1 of 4 shares, memory 33554432" ] || fail "(10) job $I: $(grant_of n2 0 "$I")"
forged="$forged; in the batch step SLURM_STEP_GPUS='$1' (the job's), SLURM_SHARDS_ON_NODE='$2'"
# A whole GPU, its weight lowered by the job's --devq-shares=1: a step
# with GPUs keeps the job's own SLURM_SHARDS_ON_NODE, which cannot raise it.
out=$(asuser env SLURM_SHARDS_ON_NODE=64 srun --export=ALL -w n2 --gres=gpu:1 --devq-shares=1 \
	sh -c 'echo "$SLURM_JOB_ID ${SLURM_SHARDS_ON_NODE:-unset}"') || fail "(10) srun --gres=gpu:1: $out"
set -- $out
[ "$(grant_of n2 0 "$1")" = "1 of 4 shares, memory 100663296" ] ||
	fail "(10) job $1 (gpu:1, --devq-shares=1): $(grant_of n2 0 "$1")"
forged="$forged; in a GPU step SLURM_SHARDS_ON_NODE='$2'"
# --devq-shares above the job's shards, --devq-memory above max_memory;
# the admin's cap without --devq-memory, per shard and at most max_memory.
out=$(asuser srun -w n1 --gres=shard:1 --devq-shares=3 sh -c 'echo $SLURM_JOB_ID') || fail "(10) $out"
[ "$(grant_of n1 0 "$out")" = "1 of 4 shares, memory 33554432" ] ||
	fail "(10) job $out (shard:1, --devq-shares=3): $(grant_of n1 0 "$out")"
out=$(asuser srun -w n1 --gres=shard:4 --devq-memory=1G sh -c 'echo $SLURM_JOB_ID') || fail "(10) $out"
[ "$(grant_of n1 0 "$out")" = "4 of 4 shares, memory 100663296" ] ||
	fail "(10) job $out (shard:4, --devq-memory=1G): $(grant_of n1 0 "$out")"
grep -q "devq: job $out: --devq-memory=1073741824 is above the site's cap of 100663296 bytes on GPU 0" \
	"$D/log/slurmd.n1.log" || fail "(10) job $out: no line saying its --devq-memory was capped"
# On two nodes: each prolog finds its node in slurmctld's "Nodes=n[1-2]".
out=$(asuser srun -N2 --gres=shard:2 sh -c 'echo $SLURM_JOB_ID' | sort -u) || fail "(10) $out"
for n in n1 n2; do
	[ "$(grant_of $n 0 "$out")" = "2 of 4 shares, memory 67108864" ] ||
		fail "(10) job $out (-N2, shard:2) on $n: $(grant_of $n 0 "$out")"
done
log "(10) GPUs, weight and cap from slurmd and the site, the job's own values ignored ($forged); --devq-shares and --devq-memory only lower: $(elapsed "$t") s"

# ---- (11) the health check sweeps a grant whose job no longer runs ------
t=$(date +%s.%N)
hc() { env -i SLURMD_NODENAME=n1 "$@" "$TOP/slurm/devq-healthcheck"; }
uid=$(id -u "$JOBUSER")
# Grants a prolog made and no epilog evicted (as on a node that crashed),
# one of them with a session a process of its job still holds.
for j in 999990 999991 999992; do
	dq n1 admin grant "job_$j" --uid "$uid" --shares 1 --of 4 --json >/dev/null || fail "(11) grant job_$j"
done
# (At most 60 s: killing asuser's subshell at a failure does not reach it.)
asuser python3 -c '
import devq, os, sys, time
end = time.monotonic() + 60
with devq.connect(sys.argv[1]):
    print("HELD", flush=True)
    while not os.path.exists(sys.argv[2]) and time.monotonic() < end:
        time.sleep(0.05)' "$(tenant n1 job_999991 't["socket"]')" "$D/out/L.go" >"$D/out/L" 2>&1 &
PIDS+=($!)
# A running job's grant, without sessions.
asuser srun -w n1 --gres=shard:1 sh -c "echo \$SLURM_JOB_ID; while [ ! -e $D/out/K.go ]; do sleep 0.05; done" \
	>"$D/out/K" 2>&1 &
PIDS+=($!)
wait_for 30 test -s "$D/out/K" && K=$(cat "$D/out/K") && wait_for 30 tenant n1 "job_$K" 1 &&
	wait_for 10 has_line L HELD || fail "(11) job K ($(cat "$D/out/K")) or the holder not running"
# Younger than SWEEP_AGE_S (300 s): all kept.
hc DEVQ_HEALTHCHECK_CONF="$D/health.conf" 2>"$D/out/sweep" || fail "(11) health check: $(cat "$D/out/sweep")"
tenant n1 job_999990 1 >/dev/null || fail "(11) job_999990 swept younger than 300 s: $(cat "$D/out/sweep")"
# Slurm cannot be asked: said, every grant kept, the node healthy.
hc DEVQ_HEALTHCHECK_CONF="$D/health-noslurm.conf" DEVQ_SWEEP_AGE_S=0 2>"$D/out/sweep" ||
	fail "(11) health check without Slurm: $(cat "$D/out/sweep")"
grep -q "squeue cannot tell the jobs of n1 (.*): job grants left alone" "$D/out/sweep" || fail "(11) $(cat "$D/out/sweep")"
tenant n1 job_999990 1 >/dev/null || fail "(11) job_999990 swept without Slurm's word"
# Old enough (DEVQ_SWEEP_AGE_S=0): the idle grants of no running job go.
hc DEVQ_HEALTHCHECK_CONF="$D/health.conf" DEVQ_SWEEP_AGE_S=0 2>"$D/out/sweep" || fail "(11) $(cat "$D/out/sweep")"
no_tenant n1 job_999990 || fail "(11) job_999990 not swept: $(cat "$D/out/sweep")"
grep -q "swept job_999990 from devqd at $D/n1/gpu0.sock: job 999990 does not run here, no session, granted [0-9]* s ago: {\"tenant\":\"job_999990\"" \
	"$D/out/sweep" || fail "(11) no line for job_999990: $(cat "$D/out/sweep")"
no_tenant n1 job_999992 || fail "(11) job_999992 not swept"
tenant n1 job_999991 1 >/dev/null || fail "(11) job_999991 swept with a session"
tenant n1 "job_$K" 1 >/dev/null || fail "(11) job_$K swept while its job runs"
[ "$(grep -c swept "$D/out/sweep")" = 2 ] || fail "(11) $(cat "$D/out/sweep")"
touch "$D/out/K.go" "$D/out/L.go"
wait_for 30 no_tenant n1 "job_$K" || fail "(11) job_$K outlived its job"
let_go() { [ "$(tenant n1 job_999991 't["sessions"]')" = 0 ]; }
wait_for 10 let_go || fail "(11) the holder did not let go"
dq n1 admin evict job_999991 --json >/dev/null || fail "(11) evict job_999991"
# The prolog's records (state_dir=): root's alone, and gone with each job.
[ "$(stat -c %a:%U "$D/state")" = 700:root ] || fail "(11) state_dir is $(stat -c %a:%U "$D/state")"
no_records() { [ -z "$(ls -A "$D/state")" ]; }
wait_for 10 no_records || fail "(11) records left in state_dir: $(ls -A "$D/state")"
log "(11) the sweep: idle grants of no running job, old enough, evicted; young, held or running ones kept; none without Slurm's word: $(elapsed "$t") s"

# ---- (7) podman with devq's CDI specs ------------------------------------
t=$(date +%s.%N)
# A rootfs of devctl and sh and the libraries they load, imported: no
# registry.
R=$D/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp"
cp "$BUILD/devctl" "$R/bin/"
cp "$(command -v dash)" "$R/bin/sh"
for l in $(ldd "$BUILD/devctl" "$R/bin/sh" | grep -v ':$' | grep -o '/[^ ]*' | sort -u); do
	mkdir -p "$R$(dirname "$l")"
	cp -L "$l" "$R$l"
done
echo "root:x:0:0::/:/bin/devctl" >"$R/etc/passwd"
tar -C "$R" -cf "$D/rootfs.tar" .
podman import -q "$D/rootfs.tar" "$IMAGE" >/dev/null
mkdir -p /etc/cdi
if [ -e /etc/cdi/devq.yaml ]; then CDI_SAVED=$D/devq.yaml.saved; mv /etc/cdi/devq.yaml "$CDI_SAVED"; fi
dq n2 cdi generate >/dev/null 2>&1
grep -q "DEVQ_SOCKET=$D/n2/gpu0.sock" /etc/cdi/devq.yaml || fail "(7) $(cat /etc/cdi/devq.yaml)"
# runc: crun fails on this host's hybrid cgroups; explicit ulimits because
# podman's defaults exceed what an unprivileged-resource root may set here.
PODMAN="podman --runtime runc run --rm --network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024"
out=$($PODMAN --device devq.dev/gpu=gpu0 "$IMAGE" /bin/devctl submit fill_u32 n=4 value=7 --json) ||
	fail "(7) podman --device devq.dev/gpu=gpu0: $out"
case "$out" in *'"status":"ok"'*'"dst":[7,7,7,7]'*) ;; *) fail "(7) $out" ;; esac
out=$($PODMAN --device devq.dev/gpu=all "$IMAGE" /bin/sh -c 'echo "$DEVQ_SOCKETS"; /bin/devctl status >/dev/null && echo served') ||
	fail "(7) podman --device devq.dev/gpu=all: $out"
[ "$out" = "$D/n2/gpu0.sock
served" ] || fail "(7) devq.dev/gpu=all: $out"
uid=$(id -u "$JOBUSER")
T=ctr_$$
dq n2 admin grant "$T" --uid "$uid" --cdi --json >/dev/null || fail "(7) admin grant --cdi"
[ -f "/var/run/cdi/devq.dev-tenant_$T.json" ] || fail "(7) no /var/run/cdi/devq.dev-tenant_$T.json"
out=$($PODMAN --device "devq.dev/tenant=$T" --user "$uid" "$IMAGE" /bin/devctl submit spin ns=20000000 --json) ||
	fail "(7) podman --device devq.dev/tenant=$T --user $uid: $out"
[ "$(tenant n2 "$T" '(t["ops"], t["device_ns"] >= 20000000)')" = "(1, True)" ] || fail "(7) $T: $(dq n2 admin tenants --json)"
dq n2 admin evict "$T" --json >/dev/null || fail "(7) evict"
[ ! -e "/var/run/cdi/devq.dev-tenant_$T.json" ] || fail "(7) evict left the tenant's CDI spec"
log "(7) podman: gpu0 and all as root, tenant $T as uid $uid: $(elapsed "$t") s"

log "passed in $(elapsed "$T0") s"
