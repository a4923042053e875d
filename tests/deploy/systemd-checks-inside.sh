#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The checks of make check-systemd, run as root inside the booted Debian 12
# container (tests/deploy/systemd-check.sh copies this to /opt/devq-check/ with
# the .deb packages).  Each check prints "PASS name" or "FAIL name: why";
# the last line is "N passed, N failed"; exit status 1 when any failed.
set -uo pipefail
cd /opt/devq-check
SOCK=/run/devqd/devqd.sock
CONF=/etc/devqd/devqd.conf
passed=0 failed=0
export DEVQ_SOCKET=$SOCK

why=
# The first reason a check gives is the one reported; a check passes when
# it returns 0 and gave none.
no() { [ -n "$why" ] || why="$*"; return 1; }
# grep -q for the end of a pipeline: it reads all its input.  Under
# pipefail, grep -q's exit at the first match kills a writer still
# writing (a journal past the pipe's 64 KiB) with SIGPIPE, and the
# pipeline fails although it matched.
hasline() { grep -c "$@" >/dev/null; }
check() {
	local name=$1 t0 t1
	shift
	why=
	t0=$(date +%s%N)
	"$@"
	if [ $? = 0 ] && [ -z "$why" ]; then
		t1=$(date +%s%N)
		echo "PASS $name ($(((t1 - t0) / 1000000)) ms)${note:+: $note}"
		passed=$((passed + 1))
	else
		echo "FAIL $name: ${why:-failed}"
		failed=$((failed + 1))
		echo "--- journal of devqd (last 15 lines) ---"
		journalctl -q -u devqd.service -u devqd.socket -n 15 --no-pager | sed 's/^/    /'
	fi
	note=
}
note=
as() { local u=$1; shift; runuser -u "$u" -- "$@"; }
mainpid() { systemctl show -P MainPID devqd.service; }
# Waits up to $1 tenths of a second for a command to succeed.
until_ok() {
	local n=$1
	shift
	for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	return 1
}
# Probe connections in the background until the file stop exists:
# counts in probe.ok and probe.fail (with the errors in probe.err).
probe_start() {
	rm -f probe.stop probe.ok probe.fail probe.err
	(ok=0 bad=0
	 while [ ! -e probe.stop ]; do
		if timeout 20 devctl status >/dev/null 2>>probe.err; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
		sleep 0.02
	 done
	 echo $ok >probe.ok
	 echo $bad >probe.fail) &
	probe_pid=$!
}
probe_stop() {
	touch probe.stop
	wait "$probe_pid"
	pok=$(cat probe.ok) pfail=$(cat probe.fail)
}

# ---- setup ----------------------------------------------------------
dpkg -i ./devqd_*.deb ./devctl_*.deb ./libdevq0_*.deb ./python3-devq_*.deb >install.log 2>&1 ||
	{ cat install.log; echo "0 passed, 1 failed (dpkg -i)"; exit 1; }
useradd -m -G devq alice
useradd -m bob
ALICE=$(id -u alice) BOB=$(id -u bob)

socket_activation() {
	[ "$(systemctl is-active devqd.socket)" = active ] || no "devqd.socket is not active after install"
	[ -S $SOCK ] || no "$SOCK is not a socket"
	[ "$(systemctl is-active devqd.service)" != active ] || no "devqd.service runs before any client"
	as alice devctl status >out 2>&1 || no "alice: devctl status failed: $(cat out)"
	[ "$(systemctl is-active devqd.service)" = active ] || no "devqd.service not active after a client"
}
check socket_activation socket_activation

# README.md's "In one minute: an admin on a shared box", run as written by
# root (sudo and adduser are the real ones) once its first lines are done:
# make deb ran outside, and dpkg -i above installed the same packages as
# its `sudo apt install ./...deb` (apt needs no network for local files,
# but this container has no package lists).  Each later command must
# succeed and print what its comment promises.
readme_admin() {
	local rest
	rest=$(awk '/^make / { next }
		    /^sudo apt install/ { cont = /\\$/; next }
		    cont { cont = /\\$/; next }
		    { print }' readme-admin.sh)
	[ -n "$rest" ] || no "nothing left of README's admin block: $(cat readme-admin.sh)"
	grep -q '^sudo apt install ./build/deb/devqd_' readme-admin.sh ||
		no "README's admin block no longer installs the packages with apt install ./build/deb/..."
	(cd /tmp && bash -e -c "$rest") >out 2>&1 || no "README's admin block failed: $(tail -n 15 out)"
	# "(listening)" until the first client, "(running)" once devqd runs.
	hasline -F 'Active: active (' out || no "no 'Active: active': $(cat out)"
	hasline -F "Listen: $SOCK" out || no "no 'Listen: $SOCK': $(cat out)"
	hasline -E '^ok: devqd [0-9.]+ serves, .*ran an op' out || no "no 'ok: devqd ... ran an op': $(cat out)"
	id -nG alice | grep -qw devq || no "alice not in group devq: $(id -nG alice)"
}
check readme_admin readme_admin

ready_status() {
	[ "$(systemctl show -P SubState devqd.service)" = running ] || no "not running (Type=notify READY)"
	local st
	st=$(systemctl show -P StatusText devqd.service)
	case $st in *sessions*backend*) ;; *) no "StatusText '$st'" ;; esac
	as alice devctl submit spin ns=3000000000 >spin.out 2>&1 &
	local c=$!
	until_ok 40 sh -c 'systemctl show -P StatusText devqd.service | grep -q "sessions 1, ops in flight 1"' ||
		no "StatusText did not show the running op: '$(systemctl show -P StatusText devqd.service)'"
	wait $c || no "the spin op failed: $(cat spin.out)"
	until_ok 30 sh -c 'systemctl show -P StatusText devqd.service | grep -q "sessions 0, ops in flight 0"' ||
		no "StatusText after the op: '$(systemctl show -P StatusText devqd.service)'"
}
check ready_status ready_status

python_binding() {
	# python3-devq on a fresh Debian 12, against the packaged daemon.
	as alice python3 -c 'import devq, numpy as np
with devq.connect() as c:
    x = c.array(np.arange(16, dtype=np.float32)); y = c.empty((16,), np.float32); y[:] = 1
    c.submit("saxpy_f32", a=2.0, x=x, y=y).result(timeout=10)
    assert np.array_equal(y, 2 * np.arange(16, dtype=np.float32) + 1)
print(devq.__version__)' >py.out 2>&1 || no "python3 -c 'import devq' and a saxpy: $(tail -n 3 py.out)"
}
check python_binding python_binding

startup_journal() {
	# Logged once at the default verbosity: the socket, the backend, the limits.
	journalctl -q -b -u devqd.service -o cat >j.txt
	grep -q 'listening on' j.txt || no "no 'listening on' line at the default level: $(head -c 300 j.txt)"
	grep -q 'backend cpu' j.txt || no "no line naming the backend"
	grep -q 'limits' j.txt || no "no line with the limits"
}
check startup_journal startup_journal

access_group() {
	as alice devctl status >out 2>&1 || no "alice (group devq) refused: $(cat out)"
	if as bob devctl status >out 2>&1; then no "bob (not in devq) was served"; fi
	grep -q 'group devq' out || no "bob's error gives no hint about group devq: $(cat out)"
}
check access_group access_group

bob_refused() { journalctl -q -u devqd.service DEVQ_CLIENT_UID=$BOB -o cat | hasline refused; }
journal_fields() {
	# Per-client lines are at -v (verbose = 1, applied by a reload).
	cp $CONF conf.orig
	echo 'verbose = 1' >>$CONF
	systemctl reload devqd.service || no "reload with verbose = 1 failed"
	as alice devctl status >/dev/null 2>&1 || no "alice: devctl status failed"
	cp conf.orig $CONF
	systemctl reload devqd.service || no "reload back to the packaged file failed"
	# A refusal by the daemon's policy: the socket opened to everyone for a moment.
	chmod 0666 $SOCK
	as bob devctl status >out 2>&1
	chmod 0660 $SOCK
	grep -q 'access denied' out || no "bob was not refused by devqd's policy: $(cat out)"
	# journald indexes a line some time after devqd wrote it: a query at
	# once may miss it (seen once in about twenty runs).
	until_ok 30 bob_refused || no "journalctl -u devqd DEVQ_CLIENT_UID=$BOB shows no refusal"
	journalctl -q -u devqd.service DEVQ_CLIENT_UID=$ALICE -o cat >j.txt
	grep -q connected j.txt || no "journalctl -u devqd DEVQ_CLIENT_UID=$ALICE shows no connect line"
	grep -q hello j.txt || no "journalctl -u devqd DEVQ_CLIENT_UID=$ALICE shows no hello line"
	# The caller's location, not the log helper's.
	journalctl -q -u devqd.service DEVQ_CLIENT_UID=$BOB CODE_FILE=daemon/server/server.c \
		CODE_FUNC=admit -o cat | hasline refused ||
		no "the refusal's CODE_FILE/CODE_FUNC are not server.c's admit: $(journalctl -q \
			-u devqd.service DEVQ_CLIENT_UID=$BOB -o export | grep '^CODE_' | sort -u | tr '\n' ' ')"
	if journalctl -q -u devqd.service CODE_FILE=daemon/base/log.c -o cat | hasline .; then
		no "lines with CODE_FILE=daemon/base/log.c"
	fi
	journalctl -q -u devqd.service DEVQ_CLIENT_UID=$BOB -o export | hasline '^DEVQ_SESSION=' ||
		no "refusal without DEVQ_SESSION"
	journalctl -q -u devqd.service DEVQ_CLIENT_UID=$BOB -o export | hasline '^DEVQ_CLIENT_PID=' ||
		no "refusal without DEVQ_CLIENT_PID"
}
check journal_fields journal_fields

reload_config() {
	local pid
	pid=$(mainpid)
	cp $CONF conf.bak
	as alice devctl submit spin ns=2000000000 >spin.out 2>&1 &
	local c=$!
	sleep 0.5
	echo 'no-such-key = 1' >>$CONF
	if systemctl reload devqd.service >out 2>&1; then no "systemctl reload succeeded with a bad devqd.conf"; fi
	cp conf.bak $CONF
	echo 'max-queues = 8' >>$CONF
	systemctl reload devqd.service || no "reload of a good file failed"
	wait $c || no "the client's op failed across the reload: $(cat spin.out)"
	# systemd 252 does not wait for the daemon's READY=1 after a kill -HUP.
	until_ok 30 sh -c 'journalctl -q -u devqd.service -o cat | grep -q "reload: done;.* 8 queues per session"' ||
		no "the journal does not show max-queues = 8 applied"
	cp conf.bak $CONF
	systemctl reload devqd.service || no "reload after restoring the file failed"
	[ "$(mainpid)" = "$pid" ] || no "MainPID changed over the reloads ($pid -> $(mainpid))"
}
check reload_config reload_config

upgrade_keeps_serving() {
	as alice devctl status >/dev/null 2>&1
	local pid
	pid=$(mainpid)
	as alice devctl submit spin ns=3000000000 >spin.out 2>&1 &
	local c=$!
	probe_start
	sleep 0.5
	dpkg -i ./devqd_*.deb ./devctl_*.deb ./libdevq0_*.deb ./python3-devq_*.deb >up.log 2>&1 ||
		no "dpkg -i failed: $(tail -n 5 up.log)"
	sleep 0.5
	probe_stop
	wait $c || no "the client's op failed during the upgrade: $(cat spin.out)"
	note="$pok probes served, $pfail failed"
	[ "$pfail" = 0 ] || no "$pfail of $((pok + pfail)) probe connections failed: $(sort probe.err | uniq -c | head -n 3)"
	[ "$(mainpid)" = "$pid" ] || no "MainPID changed ($pid -> $(mainpid))"
	[ "$(systemctl is-active devqd.socket)" = active ] || no "devqd.socket not active after the upgrade"
}
check upgrade_keeps_serving upgrade_keeps_serving

sigsegv_restart() {
	as alice devctl status >/dev/null 2>&1
	local pid t0 t1
	pid=$(mainpid)
	probe_start
	sleep 0.3
	t0=$(date +%s%N)
	systemctl kill -s SEGV devqd.service
	until_ok 100 sh -c "p=\$(systemctl show -P MainPID devqd.service); [ \"\$p\" != 0 ] && [ \"\$p\" != $pid ] && devctl status" ||
		no "not serving again within 10 s of SIGSEGV"
	t1=$(date +%s%N)
	probe_stop
	# A probe that was talking to the daemon as it died loses that
	# connection; none may be refused (the socket belongs to systemd).
	local refused
	refused=$(grep -c -e 'Connection refused' -e 'cannot connect' probe.err)
	note="served again after $(((t1 - t0) / 1000000)) ms; $pok probes, $pfail failed, $refused refused"
	[ "$refused" = 0 ] || no "$refused probes refused: $(sort probe.err | uniq -c | head -n 3)"
}
check sigsegv_restart sigsegv_restart

# A host executable whose code crashes (tests/host_exes.c's crash_cpu, in
# the default repository) takes devqd down like any in-process code:
# systemd starts a fresh one, and the journal names the executable.
host_crash_restart() {
	local pid
	mkdir -p -m 0755 /etc/devqd/executables.d
	install -m 0644 host_exes.so /etc/devqd/executables.d/host_exes.so
	printf 'signature = n:u64, value:u32, dst:out u32[n]\ncpu-host = host_exes.so\ncpu-host-symbol = crash_cpu\n' \
		>/etc/devqd/executables.d/crash.exec
	chmod 0644 /etc/devqd/executables.d/crash.exec
	systemctl reload devqd.service
	until_ok 50 sh -c 'devctl list | grep -q "^crash("' || no "crash.exec not served after a reload"
	pid=$(mainpid)
	as alice devctl submit crash n=12345 value=0 dst=size:49380 >out 2>&1
	until_ok 100 sh -c "p=\$(systemctl show -P MainPID devqd.service); [ \"\$p\" != 0 ] && [ \"\$p\" != $pid ] && devctl status" ||
		no "not serving again within 10 s of the crash"
	until_ok 30 sh -c "journalctl -q -u devqd.service -o cat | grep -q 'fatal signal 11 in host executable crash'" ||
		no "the journal does not name the crashing executable"
	rm -f /etc/devqd/executables.d/crash.exec /etc/devqd/executables.d/host_exes.so
	systemctl reload devqd.service
	note="restarted (pid $pid -> $(mainpid)); journal: $(journalctl -q -u devqd.service -o cat | grep 'fatal signal 11 in host' | tail -n 1)"
}
check host_crash_restart host_crash_restart

# The fault executable; no uid refused after its losses here (lost-refuse-s 0):
# these checks are about the restarts (culprit_refused below is about that).
fault_dropin() {
	mkdir -p /etc/systemd/system/devqd.service.d
	printf '[Service]\nExecStart=\nExecStart=/usr/sbin/devqd --test-fault-injection %s\n' "$*" \
		>/etc/systemd/system/devqd.service.d/fault.conf
	systemctl daemon-reload
	systemctl restart devqd.service
}
fault_dropin --lost-refuse-s 0

device_lost_restart() {
	local t0 t1
	as alice devctl status >/dev/null 2>&1
	t0=$(date +%s%N)
	as alice devctl submit fault ns=0 >out 2>&1
	grep -qi 'lost' out || no "the fault op did not report a lost device: $(cat out)"
	until_ok 100 as alice devctl status || no "not serving again within 10 s of device loss"
	t1=$(date +%s%N)
	note="served again after $(((t1 - t0) / 1000000)) ms"
}
check device_lost_restart device_lost_restart

lost_long_op_restart() {
	# An 8 s op running when the device is lost: devqd waits at most 1 s for
	# it, then exits for its restart (it waited the whole 8 s).
	local t0 t1 c ms
	as alice devctl status >/dev/null 2>&1
	as alice devctl submit spin ns=8000000000 >spin.out 2>&1 &
	c=$!
	until_ok 50 sh -c 'systemctl show -P StatusText devqd.service | grep -q "ops in flight 1"' ||
		no "the 8 s op did not start"
	t0=$(date +%s%N)
	as alice devctl submit fault ns=0 >out 2>&1
	grep -qi 'lost' out || no "the fault op did not report a lost device: $(cat out)"
	until_ok 150 as alice devctl status || no "not serving again within 15 s of device loss"
	t1=$(date +%s%N)
	wait $c
	ms=$(((t1 - t0) / 1000000))
	note="served again after $ms ms with an 8 s op running"
	# 1 s for the running op, RestartSec=1s, a start: well under the 8 s.
	[ "$ms" -lt 5000 ] || no "served again only after $ms ms: the restart waited for the running op"
	until_ok 30 sh -c "journalctl -q -u devqd.service -o cat | grep -q 'ops still running after 1000 ms'" ||
		no "no journal line about the op left running"
}
check lost_long_op_restart lost_long_op_restart

six_losses() {
	local i
	for i in 1 2 3 4 5 6; do
		as alice timeout 20 devctl submit fault ns=0 >out 2>&1
		grep -qi 'lost' out || no "loss $i: the fault op did not report a lost device: $(cat out)"
	done
	until_ok 150 as alice devctl status ||
		no "not serving 15 s after six device losses: socket $(systemctl is-active devqd.socket), service $(systemctl is-active devqd.service)"
	[ "$(systemctl is-active devqd.socket)" = active ] ||
		no "devqd.socket is $(systemctl is-active devqd.socket) after six device losses"
}
check six_losses six_losses

# A uid whose work keeps losing the device is refused for a while, across
# the restarts (lost-refuse-after 2 here; the default is 3).
fault_dropin --lost-refuse-after 2
useradd -m -G devq carol
CAROL=$(id -u carol)
STATE=/var/lib/devqd/lost-uids.devqd
culprit_refused() {
	local i
	for i in 1 2; do
		as carol timeout 20 devctl submit fault ns=0 >out 2>&1
		grep -qi 'lost' out || no "carol's loss $i: no lost device: $(cat out)"
		until_ok 100 as alice devctl status || no "not serving again after carol's loss $i"
	done
	grep -q "uid $CAROL is refused for 600 s" out ||
		no "carol was not told at the second loss: $(cat out)"
	if as carol devctl status >out 2>&1; then no "carol was served after two losses"; fi
	grep -q "uid $CAROL is refused until" out || no "carol's refusal does not say why: $(cat out)"
	as alice devctl status >/dev/null 2>&1 || no "alice was refused too"
	[ -s $STATE ] || no "no $STATE"
	systemctl show -P StatusText devqd.service | hasline "uids refused after device losses: $CAROL" ||
		no "StatusText does not name uid $CAROL: '$(systemctl show -P StatusText devqd.service)'"
	# (journald may take a moment to store a line under load.)
	until_ok 30 sh -c "journalctl -q -u devqd.service DEVQ_CLIENT_UID=$CAROL -o cat | grep -q 'uid $CAROL refused for 600 s'" ||
		no "journalctl DEVQ_CLIENT_UID=$CAROL has no line for the refusal"
	# Remembered across a plain restart too, and said at start.
	systemctl restart devqd.service
	if as carol devctl status >out 2>&1; then no "carol was served after a restart"; fi
	until_ok 30 sh -c "journalctl -q -u devqd.service -p notice -o cat | grep -q 'uid $CAROL refused until'" ||
		no "no startup line naming uid $CAROL"
	note="$(grep -o 'refused until [^(]*UTC' out | head -n 1)"
}
check culprit_refused culprit_refused

corrupt_state_ignored() {
	printf 'devqd lost-uids 1\n%s\n' garbage >$STATE
	systemctl restart devqd.service || no "devqd.service did not start with a corrupt $STATE"
	as carol devctl status >out 2>&1 || no "carol refused after the state file was corrupted: $(cat out)"
	until_ok 30 sh -c "journalctl -q -u devqd.service -o cat | grep -q '$STATE: line 2: .*ignoring the file'" ||
		no "the journal does not say the corrupt file was ignored"
}
check corrupt_state_ignored corrupt_state_ignored
rm /etc/systemd/system/devqd.service.d/fault.conf
systemctl daemon-reload
systemctl reset-failed devqd.service devqd.socket 2>/dev/null
systemctl start devqd.socket

stop_long_op() {
	as alice devctl status >/dev/null 2>&1 || no "not serving before the op"
	as alice devctl submit spin ns=4000000000 >spin.out 2>&1 &
	local c=$! t0 t1
	until_ok 50 sh -c 'systemctl show -P StatusText devqd.service | grep -q "ops in flight 1"' ||
		no "the op did not start"
	sleep 0.5
	t0=$(date +%s%N)
	# (systemctl warns that the socket can still start it: expected.)
	systemctl stop devqd.service 2>stop.err || no "systemctl stop failed: $(cat stop.err)"
	t1=$(date +%s%N)
	wait $c || no "the running op did not complete: $(cat spin.out)"
	[ "$(systemctl show -P Result devqd.service)" = success ] ||
		no "stop result $(systemctl show -P Result devqd.service)"
	note="stop took $(((t1 - t0) / 1000000)) ms"
	# The 4 s op was running: the stop waits for it, within TimeoutStopSec.
	[ $(((t1 - t0) / 1000000)) -ge 1500 ] || no "stop took $(((t1 - t0) / 1000000)) ms: the op was not running"
	[ $(((t1 - t0) / 1000000000)) -lt 15 ] || no "stop took $(((t1 - t0) / 1000000)) ms"
}
check stop_long_op stop_long_op

template_instances() {
	# Two GPUs' worth of daemons (the CPU backend here), beside devqd.socket.
	systemctl start devqd@0.socket devqd@1.socket || no "cannot start devqd@0.socket devqd@1.socket"
	[ -S /run/devqd/gpu0.sock ] && [ -S /run/devqd/gpu1.sock ] || no "no /run/devqd/gpu{0,1}.sock"
	local n p0 p1
	for n in 0 1; do
		as alice devctl --device $n status >out 2>&1 || no "devctl --device $n status: $(cat out)"
		[ "$(systemctl is-active devqd@$n.service)" = active ] || no "devqd@$n.service not active"
		journalctl -q -u devqd@$n.service -o cat | hasline "listening on /run/devqd/gpu$n.sock" ||
			no "devqd@$n.service's journal does not say it listens on gpu$n.sock"
	done
	p0=$(systemctl show -P MainPID devqd@0.service) p1=$(systemctl show -P MainPID devqd@1.service)
	[ "$p0" != "$p1" ] && [ "$p0" != 0 ] || no "the instances share MainPID $p0"
	grep -q -- '--device 1' /proc/$p1/cmdline 2>/dev/null || tr '\0' ' ' </proc/$p1/cmdline | hasline -- '--device 1' ||
		no "devqd@1 runs '$(tr '\0' ' ' </proc/$p1/cmdline)'"
	as alice devctl status >out 2>&1 || no "the default instance stopped serving: $(cat out)"
	systemctl stop devqd@1.socket devqd@1.service 2>/dev/null || no "stopping devqd@1 failed"
	[ ! -e /run/devqd/gpu1.sock ] || no "gpu1.sock left after stop"
}
check template_instances template_instances

upgrade_keeps_instances() {
	# devqd@0 serving, devqd@1 enabled: an upgrade leaves them as they are.
	systemctl enable devqd@1.socket 2>/dev/null || no "cannot enable devqd@1.socket"
	as alice devctl --device 0 status >/dev/null 2>&1 || no "devqd@0 not serving"
	local pid c
	pid=$(systemctl show -P MainPID devqd@0.service)
	as alice devctl --device 0 submit spin ns=2000000000 >spin.out 2>&1 &
	c=$!
	sleep 0.3
	dpkg -i ./devqd_*.deb ./devctl_*.deb ./libdevq0_*.deb ./python3-devq_*.deb >up.log 2>&1 ||
		no "dpkg -i failed: $(tail -n 5 up.log)"
	wait $c || no "devqd@0's op failed during the upgrade: $(cat spin.out)"
	[ "$(systemctl show -P MainPID devqd@0.service)" = "$pid" ] ||
		no "devqd@0's MainPID changed ($pid -> $(systemctl show -P MainPID devqd@0.service))"
	[ "$(systemctl is-active devqd@0.socket)" = active ] || no "devqd@0.socket not active after the upgrade"
	[ "$(systemctl is-enabled devqd@1.socket 2>/dev/null)" = enabled ] || no "devqd@1.socket no longer enabled"
}
check upgrade_keeps_instances upgrade_keeps_instances

tenant_grant_restart() {
	# A grant under the shipped unit (User=devq, CAP_CHOWN only): the socket
	# is bob's (not in group devq), serves him alone, and is back after a
	# restart (grants.devqd in the state directory).
	local ts=/run/devqd/devqd.tenants/job_1.sock
	devctl admin grant job_1 --uid bob --shares 2 --of 4 --json >g.json 2>&1 ||
		no "grant: $(cat g.json)"
	grep -q "\"socket\":\"$ts\"" g.json || no "grant's reply: $(cat g.json)"
	[ "$(stat -c '%U %a' $ts 2>&1)" = "bob 600" ] || no "$ts: $(stat -c '%U %a' $ts 2>&1)"
	[ "$(stat -c '%U %a' /run/devqd/devqd.tenants 2>&1)" = "devq 711" ] ||
		no "tenant directory: $(stat -c '%U %a' /run/devqd/devqd.tenants 2>&1)"
	as bob devctl --socket $ts submit spin ns=1000 >out 2>&1 || no "bob on job_1's socket: $(cat out)"
	if as alice devctl --socket $ts status >out 2>&1; then no "alice was served on bob's tenant socket"; fi
	systemctl restart devqd.service || no "systemctl restart devqd failed"
	until_ok 50 test -S $ts || no "$ts not back after the restart"
	as bob devctl --socket $ts submit spin ns=1000 >out 2>&1 || no "bob after the restart: $(cat out)"
	devctl admin tenants --json >t.json 2>&1 || no "tenants: $(cat t.json)"
	grep -q '"tenant":"job_1","uid":'"$BOB"',.*"shares":2,"of":4' t.json || no "tenants: $(cat t.json)"
	devctl admin evict job_1 --json >e.json 2>&1 || no "evict: $(cat e.json)"
	grep -q '"still_running":0' e.json || no "evict: $(cat e.json)"
	[ ! -e $ts ] || no "$ts left after evict"
	journalctl -q -u devqd.service DEVQ_TENANT=job_1 -o cat | hasline 'evicted' ||
		no "no usage line with DEVQ_TENANT=job_1 in the journal"
	devctl health >out 2>&1 || no "devctl health: $(cat out)"
}
check tenant_grant_restart tenant_grant_restart

purge() {
	as alice devctl status >/dev/null 2>&1
	dpkg --purge python3-devq devctl devqd libdevq0 >purge.log 2>&1 || no "purge failed: $(tail -n 5 purge.log)"
	[ ! -e $SOCK ] || no "$SOCK left after purge"
	[ "$(systemctl is-active devqd.socket)" != active ] || no "devqd.socket still active"
}
check purge purge

purge_stops_instances() {
	# The purge above ran with devqd@0 serving and devqd@1 enabled.
	local u
	for u in devqd@0.service devqd@0.socket; do
		[ "$(systemctl is-active $u)" != active ] || no "$u still active after purge"
	done
	[ ! -e /run/devqd/gpu0.sock ] || no "/run/devqd/gpu0.sock left after purge"
	! pgrep -x devqd >/dev/null || no "a devqd still runs after purge: $(pgrep -a -x devqd)"
	! ls /etc/systemd/system/*.wants/devqd@* >/dev/null 2>&1 ||
		no "links left after purge: $(ls /etc/systemd/system/*.wants/devqd@*)"
	[ ! -e /var/lib/devqd ] || no "/var/lib/devqd left after purge: $(ls -A /var/lib/devqd)"
}
check purge_stops_instances purge_stops_instances

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
