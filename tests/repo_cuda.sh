#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The executable repository on the CUDA backend, against the driver
# simulator (tests/cudasim/; run by `make check-cuda-sim` as test_repo_cuda):
# the example's fatbin served on simulated sm_80 and sm_90 (SASS) and sm_100
# (its compute_90 PTX); an image without code for the device, an entry the
# image lacks and parameters the signature contradicts each refused with a
# log line naming the file; and a reload while a long op of the old version
# runs: the old module is unloaded only after the op (the simulator reports
# an unload with launches pending as a rule violation), the next submit
# runs the new version; a stop during such an op; 30 reloads under load
# leaving no module (a violation at exit) and no fd behind.  The simulator
# runs an entry's CPU stand-in, named
# by DEVQ_CUDASIM_CPU (see its header comment).
# Prints a Check-style summary line.
B=${DEVQ_BUILD:-build}
CC=${CC:-cc}
if [ -z "$DEVQ_CUDASIM_DIR" ]; then
	echo "test_repo_cuda: needs the CUDA simulator (make check-cuda-sim), skipped"
	echo "100%: Checks: 0, Failures: 0, Errors: 0"
	exit 0
fi
tmp=$(mktemp -d)
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { if eval "$2"; then ok; else bad "$1"; fi; }
dpid=
load=
cleanup() {
	[ -n "$load" ] && kill "$load" 2>/dev/null
	[ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	[ -n "${DEVQ_KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
ex=$B/examples/executables
report=$tmp/violations
u32s() { od -An -tu4 -v "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
put() { cp "$1" "$2.new" && chmod 0644 "$2.new" && mv -f "$2.new" "$2"; }
wait_log() {
	i=0
	while [ "$(grep -c -- "$1" "$tmp/devqd.log")" -lt "$2" ] && [ $i -lt 500 ]; do
		sleep 0.02; i=$((i + 1))
	done
	[ "$(grep -c -- "$1" "$tmp/devqd.log")" -ge "$2" ]
}
# start ARCH: devqd --backend cuda on a simulated sm_ARCH over $repo.
start() {
	rm -f "$tmp/s" "$tmp/stats"
	LD_LIBRARY_PATH="$DEVQ_CUDASIM_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	DEVQ_CUDASIM_ARCH=$1 DEVQ_CUDASIM_REPORT="$report" DEVQ_CUDASIM_STATS="$tmp/stats" \
	DEVQ_CUDASIM_CPU="scale_u32=$repo/scale_u32.so" \
		"$B/devqd" --backend cuda --socket "$tmp/s" --executables "$repo" -v \
		>"$tmp/devqd.log" 2>&1 &
	dpid=$!
	i=0
	while [ ! -S "$tmp/s" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
	export DEVQ_SOCKET="$tmp/s"
}
stop() {
	kill "$dpid"; wait "$dpid"; rc=$?; dpid=
	check "devqd on sm_$1 stops cleanly (rc $rc): $(tail -n 3 "$tmp/devqd.log")" '[ $rc = 0 ]'
}

repo=$tmp/repo
mkdir -m 0755 "$repo"
cp "$ex/scale_u32.so" "$ex/scale_u32.fatbin" examples/executables/scale_u32.exec "$repo/"
cp "$DEVQ_CUDASIM_DIR/scale_u32_sm80.fatbin" "$DEVQ_CUDASIM_DIR/scale_u32.cubin" \
	"$DEVQ_CUDASIM_DIR/scale_u32.ptx" "$repo/"
sig='signature = n:u64, k:u32, x:inout u32[n]'
printf '%s\ncuda = scale_u32_sm80.fatbin\ncuda-entry = scale_u32\n' "$sig" > "$repo/sm80only.exec"
printf '%s\ncuda = scale_u32.fatbin\ncuda-entry = nosuch\n' "$sig" > "$repo/noentry.exec"
printf 'signature = n:u64, k:u64, x:inout u32[n]\ncuda = scale_u32.fatbin\ncuda-entry = scale_u32\n' \
	> "$repo/widek.exec"
printf 'signature = n:u64, k:u32\ncuda = scale_u32.fatbin\ncuda-entry = scale_u32\n' > "$repo/fewer.exec"
printf '%s\ncuda = scale_u32.cubin\ncuda-entry = scale_u32\n' "$sig" > "$repo/bycubin.exec"
printf '%s\ncuda = scale_u32.ptx\ncuda-entry = scale_u32\n' "$sig" > "$repo/byptx.exec"
chmod 0644 "$repo"/*
nobin='cuModuleLoadData: CUDA_ERROR_NO_BINARY_FOR_GPU (209) (no SASS for this device and no PTX it can compile)'
printf '\001\000\000\000\002\000\000\000\003\000\000\000\004\000\000\000' > "$tmp/in"

# ---- image selection, entry lookup, parameter checks, per architecture ----
for arch in 80 90 100; do
	start $arch
	check "sm_$arch: devqd serves" '[ -S "$tmp/s" ]'
	"$B/devctl" submit scale_u32 k=3 x=@"$tmp/in" --out x="$tmp/out" >"$tmp/submit.out" 2>&1
	check "sm_$arch: scale_u32 k=3 on the cuda backend: $(cat "$tmp/submit.out")" \
		'[ "$(u32s "$tmp/out")" = "3 6 9 12" ]'
	check "sm_$arch: the backend is cuda" 'grep -q "backend cuda (cudasim sm_$arch" "$tmp/devqd.log"'
	check "sm_$arch: no entry nosuch" \
		"grep -q \"$repo/noentry.exec: cuda scale_u32.fatbin: no entry 'nosuch' in it\" \"\$tmp/devqd.log\""
	check "sm_$arch: a u64 k against the image's 4-byte parameter" \
		"grep -q \"$repo/widek.exec: cuda scale_u32.fatbin: entry scale_u32: parameter 1 is 4 bytes, the signature's 'k' 8\" \"\$tmp/devqd.log\""
	check "sm_$arch: two parameters against the image's three" \
		'grep -q "$repo/fewer.exec: cuda scale_u32.fatbin: entry scale_u32 takes 3 parameters, the signature has 2" "$tmp/devqd.log"'
	# served (each scale_u32 k=5 by its image), refused (by the reason)
	case $arch in
	80) served="sm80only"; refused="bycubin byptx" ;;
	90) served="bycubin byptx"; refused="sm80only" ;;
	100) served="byptx"; refused="sm80only bycubin" ;;
	esac
	for e in $served; do
		"$B/devctl" submit $e k=5 x=@"$tmp/in" --out x="$tmp/out" >"$tmp/submit.out" 2>&1
		check "sm_$arch: $e serves: $(cat "$tmp/submit.out")" '[ "$(u32s "$tmp/out")" = "5 10 15 20" ]'
	done
	for e in $refused; do
		case $e in
		sm80only) why="cuda scale_u32_sm80.fatbin: no code for sm_$arch: .*no SASS.*sm_80.* and no PTX" ;;
		bycubin) why="cuda scale_u32.cubin: $nobin" ;;
		byptx) why="cuda scale_u32.ptx: $nobin" ;;
		esac
		check "sm_$arch: $e refused, naming the file and why: $(grep "$e.exec" "$tmp/devqd.log")" \
			'grep -q "error: executables: $repo/$e.exec: $why" "$tmp/devqd.log"'
	done
	nref=$((3 + $(echo $refused | wc -w)))
	check "sm_$arch: $nref refused, the rest served" \
		'grep -q "executables: $((7 - nref)) served, $nref files refused" "$tmp/devqd.log"'
	stop $arch
	# The images the simulated driver loaded: from a fatbin the one
	# devq_fatbin_select picks, or the bare cubin or PTX.
	case $arch in
	80) img="sm_80 SASS" ;;
	90) img="sm_90 SASS|sm_90 cubin|sm_90 PTX" ;;
	100) img="compute_90 PTX|sm_90 PTX" ;;
	esac
	check "sm_$arch: the modules loaded $img: $(grep module_image "$tmp/stats" | tr '\n' ' ')" \
		'[ "$(grep -c "^module_image " "$tmp/stats")" = "$(echo "$img" | tr "|" "\n" | wc -l)" ] && ! grep "^module_image " "$tmp/stats" | grep -qvE "^module_image ($img) [0-9]+$"'
done

# ---- a reload while a long op of the old version runs --------------------
rm -f "$repo"/sm80only.exec "$repo"/noentry.exec "$repo"/widek.exec "$repo"/fewer.exec \
	"$repo"/bycubin.exec "$repo"/byptx.exec
"$CC" -std=c11 -O2 -Ikernels -shared -fPIC -DSLOW -o "$tmp/slow.so" tests/repo_kernels.c
"$CC" -std=c11 -O2 -Ikernels -shared -fPIC -DADD -o "$tmp/add.so" tests/repo_kernels.c
put "$tmp/slow.so" "$repo/scale_u32.so"
start 90
"$B/devctl" submit scale_u32 k=3 x=@"$tmp/in" --out x="$tmp/old.out" >"$tmp/old.log" 2>&1 &
old=$!
sleep 0.5 # launched: the simulator's stream runs the old module's entry
put "$tmp/add.so" "$repo/scale_u32.so"; kill -HUP "$dpid"
wait_log "scale_u32 (id [0-9]*) replaced" 1
check "the reload is done while the old op runs" 'kill -0 $old 2>/dev/null'
"$B/devctl" submit scale_u32 k=3 x=@"$tmp/in" --out x="$tmp/new.out" >"$tmp/new.log" 2>&1
check "the next submit runs the new module (adds k): $(cat "$tmp/new.log")" \
	'[ "$(u32s "$tmp/new.out")" = "4 5 6 7" ]'
wait $old
check "the running op completed with the old module (multiplies): $(cat "$tmp/old.log")" \
	'[ "$(u32s "$tmp/old.out")" = "3 6 9 12" ]'
stop 90
check "module_image counts: the built-in kernels, two scale_u32 versions" \
	'grep -q "^module_image sm_90 SASS 3$" "$tmp/stats"'

# ---- a stop while a long op of a repository image runs: the module goes
# after the op, and the daemon exits cleanly ---------------------------------
put "$tmp/slow.so" "$repo/scale_u32.so"
start 90
"$B/devctl" submit scale_u32 k=3 x=@"$tmp/in" --out x="$tmp/old.out" >"$tmp/old.log" 2>&1 &
old=$!
sleep 0.5
stop 90
wait $old
check "the op running at the stop completed: $(cat "$tmp/old.log")" '[ "$(u32s "$tmp/old.out")" = "3 6 9 12" ]'

# ---- 30 reloads under load: every old module unloaded (the simulator
# counts a module never unloaded at exit as a violation), none while a
# launch of it was pending, no fd left behind ---------------------------------
put "$ex/scale_u32.so" "$repo/scale_u32.so"
start 90
loadloop() {
	while [ ! -f "$tmp/stop" ]; do
		"$B/devctl" submit scale_u32 k=3 x=@"$tmp/in" :: scale_u32 k=2 x=@"$tmp/in" >/dev/null 2>&1
	done
}
nre=0
cycle() {
	j=0
	while [ $j -lt "$1" ]; do
		put "$ex/scale_u32.so" "$repo/scale_u32.so"
		kill -HUP "$dpid"; nre=$((nre + 1))
		wait_log "executables: reloaded:" $nre || { bad "reload $nre not applied"; break; }
		j=$((j + 1))
	done
}
rm -f "$tmp/stop"; loadloop & load=$!
cycle 3
touch "$tmp/stop"; wait $load
sleep 0.3; fds0=$(ls "/proc/$dpid/fd" | wc -l)
rm -f "$tmp/stop"; loadloop & load=$!
cycle 30
touch "$tmp/stop"; wait $load; load=
sleep 0.3; fds=$(ls "/proc/$dpid/fd" | wc -l)
check "30 reloads under load: no fd left behind ($fds0 -> $fds)" '[ "$fds" = "$fds0" ]'
"$B/devctl" submit scale_u32 k=3 x=@"$tmp/in" --out x="$tmp/out" >/dev/null 2>&1
check "still serving after them" '[ "$(u32s "$tmp/out")" = "3 6 9 12" ]'
stop 90
check "35 modules loaded: the built-ins and 34 versions of scale_u32 ($(grep module_image "$tmp/stats"))" \
	'grep -q "^module_image sm_90 SASS 35$" "$tmp/stats"'
check "no rule violations (no module unloaded under a pending launch or left loaded at exit): $(cat "$report" 2>/dev/null)" \
	'[ ! -s "$report" ]'
# Make check-cuda-sim's count see them too.
[ -s "$report" ] && [ -n "$DEVQ_CUDASIM_REPORT" ] && cat "$report" >> "$DEVQ_CUDASIM_REPORT"

total=$((pass + fail))
echo "$(( total ? pass * 100 / total : 0 ))%: Checks: $total, Failures: $fail, Errors: 0"
[ "$fail" = 0 ]
