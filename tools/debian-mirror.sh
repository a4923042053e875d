#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Prints the Debian mirror this machine's apt already uses, for make
# check-systemd's debootstrap (mk/systemd.mk): which archive a machine may
# reach is its configuration, not the project's, so the tree names none.
#
#   tools/debian-mirror.sh        the URI, or nothing and exit status 1
#
# The first URI of a "deb" source whose suite is a release (a name without
# '-' or '/': not -security, -updates, -backports), from
# $APT_ETC/sources.list.d/*.sources (deb822, Debian 12's own format), else
# from $APT_ETC/sources.list and sources.list.d/*.list (one-line format).
# Sources marked "Enabled: no", and cdrom: ones, are skipped.  APT_ETC:
# /etc/apt unless set (the tests set it).
set -u
etc=${APT_ETC:-/etc/apt}

# deb822: stanzas split by blank lines; field names are case-insensitive;
# a line starting with a blank continues the field before it.
deb822() {
	awk '
	function flush() {
		if (types ~ /(^| )deb( |$)/ && enabled !~ /^(no|false|0)$/ && release(suites)) {
			n = split(uris, u, " ")
			for (i = 1; i <= n; i++)
				if (u[i] !~ /^cdrom:/) { print u[i]; found = 1; exit }
		}
		types = uris = suites = enabled = ""; last = ""
	}
	function release(s,   n, x, i) {
		n = split(s, x, " ")
		for (i = 1; i <= n; i++)
			if (x[i] !~ /[-\/]/) return 1
		return 0
	}
	FNR == 1 && NR > 1 { flush() }
	/^#/ { next }
	/^[ \t]*$/ { flush(); next }
	/^[ \t]/ { v = $0; gsub(/^[ \t]+|[ \t]+$/, "", v); val[last] = val[last] " " v; set(last); next }
	{
		k = tolower(substr($0, 1, index($0, ":") - 1)); v = substr($0, index($0, ":") + 1)
		gsub(/^[ \t]+|[ \t]+$/, "", v); val[k] = v; last = k; set(k)
	}
	function set(k) {
		if (k == "types") types = val[k]
		else if (k == "uris") uris = val[k]
		else if (k == "suites") suites = val[k]
		else if (k == "enabled") enabled = tolower(val[k])
	}
	END { if (!found) flush(); exit !found }
	' "$@"
}

# One-line format: "deb [OPTIONS] URI SUITE COMPONENT...".
oneline() {
	awk '
	$1 != "deb" { next }
	{
		i = 2
		if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
		uri = $i; suite = $(i + 1)
		if (uri != "" && uri !~ /^cdrom:/ && suite != "" && suite !~ /[-\/]/) { print uri; found = 1; exit }
	}
	END { exit !found }
	' "$@"
}

set -- "$etc"/sources.list.d/*.sources
if [ -e "$1" ] && deb822 "$@"; then
	exit 0
fi
set -- "$etc"/sources.list "$etc"/sources.list.d/*.list
for f; do
	[ -e "$f" ] && oneline "$f" && exit 0
done
exit 1
