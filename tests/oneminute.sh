#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# README.md's "in one minute" paths, run as they are written: a README
# whose quick start no longer works fails `make check` (as the program
# test_oneminute), not a new user.
#
# Each path is the fenced block right after a line
# "<!-- one-minute: NAME -->".  cli and python run verbatim under bash -e,
# each in a directory of its own that stands for the checkout: there
# `build` is a link to $DEVQ_BUILD, and `make` runs the tree's Makefile on
# that build (so it has nothing left to do after `make check` built it, and
# in `make distcheck`'s unpacked tarball it is a fresh clone's make).  The
# blocks put devqd's socket in $PWD, so each run is private.  A block
# passes when it exits 0 within 60 s, prints what the README promises,
# and leaves neither a process nor the socket behind.  admin needs root,
# apt and systemd: here it is checked for shell syntax and for make
# targets that exist; make check-systemd runs it, from `sudo adduser` on,
# in a booted container with the same packages installed (readme_admin).
# Prints a Check-style summary line for `make check`.
set -u
src=$(pwd)
B=${DEVQ_BUILD:-build}
case $B in /*) ;; *) B=$src/$B ;; esac
tmp=$(mktemp -d /tmp/devq-oneminute-XXXXXX)
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# The tree's make on $DEVQ_BUILD, whatever directory a block is in; without
# the outer make's flags (a `make check TESTS=...` would reach it).
realmake=$(command -v make)
mkdir -p "$tmp/bin"
cat > "$tmp/bin/make" <<EOF
#!/bin/sh
unset MAKEFLAGS MFLAGS MAKELEVEL
exec "$realmake" -C "$src" --no-print-directory BUILD="$B" ${DEVQ_SANITIZER:+SAN=$DEVQ_SANITIZER} "\$@"
EOF
chmod +x "$tmp/bin/make"

# block NAME: the lines of the fenced block after NAME's marker.
block() {
	awk -v m="<!-- one-minute: $1 -->" '
		$0 == m { seen++; want = 1; next }
		want && !inside && /^```/ { inside = 1; next }
		inside && /^```/ { inside = 0; want = 0; next }
		inside { print }
		END { if (seen != 1) exit 1 }' "$src/README.md"
}

# run NAME EXPECT: the block verbatim in $tmp/NAME; its output must have a
# line containing EXPECT (fixed string).
run() {
	name=$1 expect=$2 dir=$tmp/$1
	mkdir -p "$dir"
	ln -s "$B" "$dir/build"
	if ! block "$name" > "$tmp/$name.sh" || [ ! -s "$tmp/$name.sh" ]; then
		bad "$name: README.md has no single block after <!-- one-minute: $name -->"
		return
	fi
	# Its own session (setsid forks when it must; -w waits for that
	# child), whose id the block's shell writes first: whatever the block
	# started can then be found and stopped.
	(cd "$dir" && unset DEVQ_SOCKET DEVQ_SOCKETS DEVQ_LIBRARY PYTHONPATH &&
	 PATH="$tmp/bin:$PATH" exec setsid -w sh -c 'echo $$ > "$0"; exec bash -e "$1"' \
		"$tmp/$name.sid" "$tmp/$name.sh") > "$tmp/$name.log" 2>&1 &
	w=$!
	i=0
	while kill -0 "$w" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
	p=$(cat "$tmp/$name.sid" 2>/dev/null)
	case $p in ''|*[!0-9]*) bad "$name: the block's shell did not start"; wait "$w"; return ;; esac
	if kill -0 "$w" 2>/dev/null; then
		kill -KILL "-$p" 2>/dev/null
		wait "$w"
		bad "$name: still running after 60 s: $(tail -n 20 "$tmp/$name.log")"
		return
	fi
	wait "$w"
	rc=$?
	# `kill $!` does not wait: give devqd 5 s to stop and remove its socket.
	i=0
	while kill -0 "-$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
	left=no
	if kill -0 "-$p" 2>/dev/null; then
		left=yes
		kill -TERM "-$p" 2>/dev/null
		sleep 0.5
		kill -KILL "-$p" 2>/dev/null
	fi
	if [ "$rc" != 0 ]; then
		bad "$name: exit status $rc; its output: $(cat "$tmp/$name.log")"
	elif ! grep -qF -- "$expect" "$tmp/$name.log"; then
		bad "$name: no line with '$expect'; its output: $(cat "$tmp/$name.log")"
	elif [ $left = yes ]; then
		bad "$name: left processes running (devqd not stopped?)"
	elif [ -e "$dir/devq.sock" ]; then
		bad "$name: left its socket behind"
	else
		ok
	fi
}

run cli "spin queue 0 point 1: ok"
case "${DEVQ_SANITIZER:-}" in
1|tsan)	# A sanitizer's runtime must come first in the interpreter; test_python
	# covers the package under ASan, this path is the same without it.
	echo "oneminute: python skipped under SAN=$DEVQ_SANITIZER" ;;
*)	run python "[0. 2. 4. 6.]" ;;
esac

# admin: shell syntax, and every `make TARGET` it names exists (make help).
if ! block admin > "$tmp/admin.sh" || [ ! -s "$tmp/admin.sh" ]; then
	bad "admin: README.md has no single block after <!-- one-minute: admin -->"
elif ! bash -n "$tmp/admin.sh" 2> "$tmp/admin.err"; then
	bad "admin: not valid shell: $(cat "$tmp/admin.err")"
else
	targets=$("$tmp/bin/make" help | awk '/^  [a-z]/ { print $1 }')
	missing=
	for t in $(tr '&;|' '\n\n\n' < "$tmp/admin.sh" |
		   awk '{ for (i = 1; i <= NF; i++) if ($i == "make") {
			   for (j = i + 1; j <= NF && $j ~ /^[a-z][a-z0-9-]*$/; j++) print $j; i = j } }'); do
		echo "$targets" | grep -qx -- "$t" || missing="$missing $t"
	done
	if [ -n "$missing" ]; then bad "admin: make help lists no target:$missing"; else ok; fi
fi

rm -rf "$tmp"
total=$((pass + fail))
echo "$(( total ? pass * 100 / total : 0 ))%: Checks: $total, Failures: $fail, Errors: 0"
[ "$fail" = 0 ]
