#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Installs the packages `make deb` built with dpkg -i, checks that devqd,
# devctl, the units, the user and the library are in place and work, then
# purges them.  Needs root; meant for CI containers and throwaway hosts.
#   tests/deploy/deb-install-check.sh DEB_DIR
set -euo pipefail
dir=${1:?usage: $0 DEB_DIR}
[ "$(id -u)" = 0 ] || { echo "deb-install-check: needs root" >&2; exit 1; }
fail() { echo "deb-install-check: FAIL: $*" >&2; exit 1; }
had_user=0; getent passwd devq >/dev/null && had_user=1
tmp=$(mktemp -d /tmp/devq-deb-XXXXXX)
cleanup() {
	[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
	dpkg --purge slurm-devq python3-devq devqd devctl libdevq-dev libdevq0 >/dev/null 2>&1 || true
	# The user and group are created by the package, not removed by it
	# (Debian keeps system users); drop them if this script made them.
	if [ "$had_user" = 0 ] && getent passwd devq >/dev/null; then
		userdel devq 2>/dev/null || true
		groupdel devq 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# python3-devq needs python3-numpy (make deps installs it; dpkg -i resolves nothing).
dpkg -i "$dir"/devqd_*.deb "$dir"/devctl_*.deb "$dir"/libdevq0_*.deb "$dir"/libdevq-dev_*.deb \
	"$dir"/python3-devq_*.deb "$dir"/slurm-devq_*.deb
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
# One version everywhere: the packages', the tree's VERSION file (the
# packages were built from it), the binaries', pkg-config's and Python's.
ver=$(dpkg-query -W -f '${Version}' libdevq0 | cut -d- -f1)
top=$(cd "$(dirname "$0")/../.." && pwd)
[ "$ver" = "$(cat "$top/VERSION")" ] || fail "package version $ver is not VERSION's $(cat "$top/VERSION")"
for p in devqd devctl libdevq-dev python3-devq slurm-devq; do
	[ "$(dpkg-query -W -f '${Version}' $p | cut -d- -f1)" = "$ver" ] || fail "$p: version differs from libdevq0's $ver"
done
[ "$(/usr/sbin/devqd --version | cut -d' ' -f1-2)" = "devqd $ver" ] || fail "devqd --version: $(/usr/sbin/devqd --version)"
[ "$(/usr/bin/devctl --socket "$tmp/none" --version | head -n1 | cut -d' ' -f1-2)" = "devctl $ver" ] ||
	fail "devctl --version: $(/usr/bin/devctl --socket "$tmp/none" --version)"
[ "$(cd / && /usr/bin/python3 -c 'import devq; print(devq.__version__)')" = "$ver" ] ||
	fail "python3 -c 'import devq; print(devq.__version__)' is not $ver"
for f in /usr/sbin/devqd /usr/bin/devctl /lib/systemd/system/devqd.service \
	 /lib/systemd/system/devqd.socket /lib/systemd/system/devqd@.service /lib/systemd/system/devqd@.socket \
	 /usr/lib/sysusers.d/devqd.conf /etc/devqd/devqd.conf \
	 /usr/lib/$ma/libdevq.so.$ver /usr/lib/$ma/libdevq.so.0 /usr/lib/$ma/libdevq.so \
	 /usr/include/devq.h /usr/lib/$ma/pkgconfig/devq.pc /usr/share/man/man8/devqd.8.gz \
	 /usr/share/man/man1/devctl.1.gz /usr/share/man/man5/devqd.conf.5.gz \
	 /usr/share/man/man3/libdevq.3.gz /usr/lib/python3/dist-packages/devq/__init__.py; do
	[ -e "$f" ] || fail "$f not installed"
done
getent passwd devq >/dev/null || fail "postinst did not create user devq"
getent group devq >/dev/null || fail "postinst did not create group devq"
[ -L /etc/systemd/system/sockets.target.wants/devqd.socket ] || fail "devqd.socket not enabled"
[ "$(pkg-config --modversion devq)" = "$(dpkg-query -W -f '${Version}' libdevq0 | cut -d- -f1)" ] ||
	fail "pkg-config devq: wrong version"
grep -q '^/etc/devqd/devqd.conf$' /var/lib/dpkg/info/devqd.conffiles || fail "devqd.conf is not a conffile"

# The installed daemon with the installed config, driven by the installed
# devctl and by a program built with the installed pkg-config file.
/usr/sbin/devqd --socket "$tmp/s.sock" --backend cpu 2>"$tmp/log" &
pid=$!
for _ in $(seq 300); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
devctl --socket "$tmp/s.sock" submit spin ns=1000000 >/dev/null || fail "devctl submit"
# The built-in gemm from the packaged host library (/usr/lib/devq) on the
# packaged OpenBLAS: 2x2 ones times ones is 2 everywhere.
printf '\000\000\200\077\000\000\200\077\000\000\200\077\000\000\200\077' >"$tmp/ones"
devctl --socket "$tmp/s.sock" submit gemm_f32 m=2 n=2 k=2 alpha=1 beta=0 a=@"$tmp/ones" \
	b=@"$tmp/ones" c=size:16 --out c="$tmp/c" >/dev/null 2>&1 &&
	[ "$(od -An -tf4 -v "$tmp/c" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')" = "2 2 2 2" ] ||
	fail "gemm_f32 from /usr/lib/devq: $(grep 'built-ins' "$tmp/log")"
here=$(cd "$(dirname "$0")" && pwd)
cc -std=c11 "$here/hello_devq.c" $(pkg-config --cflags --libs devq) -o "$tmp/hello" ||
	fail "building against libdevq-dev"
DEVQ_SOCKET="$tmp/s.sock" "$tmp/hello" | grep -q '^ok ' || fail "hello against the installed library"
# The installed Python package, with Debian's interpreter (not whatever
# python3 comes first on PATH), from a directory without a build tree.
(cd / && /usr/bin/python3 -c "import devq") || fail "python3 -c 'import devq'"
(cd / && DEVQ_SOCKET="$tmp/s.sock" /usr/bin/python3 -c '
import numpy as np, devq
with devq.connect() as c:
    x = c.array(np.arange(1024, dtype=np.float32))
    y = c.zeros((1024,), np.float32)
    c.submit("saxpy_f32", a=2.0, x=x, y=y).result(timeout=30)
    assert np.array_equal(y, 2 * np.arange(1024, dtype=np.float32))
    assert devq.LIBRARY == "libdevq.so.0", devq.LIBRARY
') || fail "python3-devq against the installed daemon"
kill "$pid"; wait "$pid" || fail "devqd did not stop cleanly: $(cat "$tmp/log")"
pid=

# slurm-devq: the plugin where Debian's slurmd looks, with the hooks it
# calls (make check-slurm runs it in a cluster), and the health check.
so=/usr/lib/$ma/slurm-wlm/spank_devq.so
for sym in slurm_spank_init slurm_spank_job_prolog slurm_spank_task_init_privileged \
	slurm_spank_job_epilog plugin_name plugin_type spank_plugin_version; do
	nm -D --defined-only "$so" | grep -q " $sym\$" || fail "$so does not define $sym"
done
[ -x /usr/libexec/slurm-devq/devq-healthcheck ] || fail "no /usr/libexec/slurm-devq/devq-healthcheck"

dpkg --purge slurm-devq python3-devq devqd devctl libdevq-dev libdevq0
[ ! -e "$so" ] && [ ! -e /usr/sbin/devqd ] && [ ! -e /usr/lib/python3/dist-packages/devq ] && [ ! -e /etc/devqd/devqd.conf ] || fail "purge left files behind"
echo "deb-install-check: ok"
