# SPDX-License-Identifier: Apache-2.0
# `make help` and `make check-help` (mk/help.mk): reads the Makefile and
# mk/*.mk.  A line "## text" right above a rule documents the rule's
# targets; a .PHONY line declares targets.
#   mode=help   every documented target with its text, under the name of
#               its file, in the order the files are given
#   mode=check  each .PHONY target without a "## " line, and exit 1 if any

FNR == 1 { doc = "" }

/^## / { doc = (doc == "" ? "" : doc " ") substr($0, 4); next }

/^\.PHONY:/ {
	n = split(substr($0, 8), t, " ")
	for (i = 1; i <= n; i++)
		if (!(t[i] in phony)) { phony[t[i]] = FILENAME; porder[++np] = t[i] }
	doc = ""
	next
}

# A rule line: targets, one colon, not an assignment.
doc != "" && /^[A-Za-z0-9_.-][A-Za-z0-9_. -]*:/ && !/^[^:]*:[:!?+]?=/ {
	split($0, a, ":")
	n = split(a[1], t, " ")
	for (i = 1; i <= n; i++)
		if (!(t[i] in text)) {
			text[t[i]] = doc; where[t[i]] = FILENAME; dorder[++nd] = t[i]
			if (!(FILENAME in seen)) { seen[FILENAME] = 1; forder[++nf] = FILENAME }
		}
}

{ doc = "" }

END {
	if (mode == "check") {
		bad = 0
		for (i = 1; i <= np; i++)
			if (!(porder[i] in text)) {
				printf "check-help: %s makes %s .PHONY, but no \"## text\" line above its rule says what it does\n",
					phony[porder[i]], porder[i]
				bad = 1
			}
		if (bad)
			exit 1
		printf "check-help: all %d .PHONY targets are in make help\n", np
		exit 0
	}
	w = 0
	for (i = 1; i <= nd; i++)
		if (length(dorder[i]) > w)
			w = length(dorder[i])
	for (f = 1; f <= nf; f++) {
		printf "%s%s\n", (f > 1 ? "\n" : ""), forder[f]
		for (i = 1; i <= nd; i++)
			if (where[dorder[i]] == forder[f])
				printf "  %-" w "s  %s\n", dorder[i], text[dorder[i]]
	}
}
