#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Every source, script, unit, man page and packaging file the project wrote
# carries "SPDX-License-Identifier: Apache-2.0" in its first 5 lines; this
# lists the files that do not and fails if there are any.  Run from the top
# of the tree (make check runs it through tests/test_release).
#
# Which files: those git tracks or would track (untracked files that
# .gitignore does not exclude, so a new file counts before it is even
# committed), or, outside git (an unpacked `make dist` tarball), every file
# but build*/ and .git.  Of those, the kinds below by name (Markdown and
# READMEs too), plus any file that starts with "#!".  Left out: generated
# code (it lives in build/), the fuzz corpus and crashers (data), and the
# files whose format has no comments (LICENSE, VERSION, debian/changelog,
# debian/copyright — which states the licence itself — and
# debian/source/format).
set -eu
cd "${1:-.}"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
	[ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
	git ls-files --cached --others --exclude-standard
else
	find . \( -name 'build*' -o -name .git \) -prune -o -type f -print | sed 's|^\./||'
fi | sort | {
	n=0
	bad=0
	while IFS= read -r f; do
		[ -f "$f" ] || continue # deleted in the working tree
		case "$f" in
		tests/fuzz/regress/README) ;;
		tests/fuzz/corpus/* | tests/fuzz/regress/*) continue ;;
		LICENSE | VERSION) continue ;;
		*/debian/changelog | */debian/copyright | */debian/source/format) continue ;;
		*.c | *.h | *.cu | *.cuh | *.S | *.s | *.proto | *.def | *.py | *.pyx | *.pxd | \
			*.sh | *.mk | Makefile | */Makefile | *.in | *.service | *.socket | *.timer | \
			*.sysusers | *.supp | *.conf | *.toml | *.cfg | *.md | README | */README | \
			.gitignore | */.gitignore | .gitattributes | \
			man/*.[1-9] | */man/*.[1-9] | .ci/* | */debian/rules | */debian/control | \
			*/debian/*.install | */debian/*.docs | */debian/*.dirs | */debian/*.links | \
			*/debian/*.manpages | */debian/*.postinst | */debian/*.preinst | \
			*/debian/*.postrm | */debian/*.prerm | */debian/*.triggers | \
			*/debian/*.sysusers | */debian/*.tmpfiles) ;;
		*)
			# Scripts without a telling name.
			[ "$(head -c 2 "$f")" = '#!' ] || continue
			;;
		esac
		n=$((n + 1))
		if ! head -n 5 "$f" | grep -q 'SPDX-License-Identifier: Apache-2\.0'; then
			echo "$f"
			bad=$((bad + 1))
		fi
	done
	if [ "$bad" -gt 0 ]; then
		echo "check-spdx: $bad of $n files lack 'SPDX-License-Identifier: Apache-2.0' in their first 5 lines" >&2
		exit 1
	fi
	echo "check-spdx: $n files, each with its SPDX-License-Identifier"
}
