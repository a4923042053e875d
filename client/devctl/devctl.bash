# SPDX-License-Identifier: Apache-2.0
# bash completion for devctl: commands and options, the daemon's
# executables (devctl list) and each executable's parameter names (from its
# signature).  Installed as $(PREFIX)/share/bash-completion/completions/devctl,
# where bash-completion loads it on first use; or: source it.
#
# Words are split on whitespace from COMP_LINE, not COMP_WORDS, so that
# NAME=VALUE and '::' stay whole whatever COMP_WORDBREAKS holds.
_devctl()
{
	local line=${COMP_LINE:0:COMP_POINT} cur prev
	local -a w
	read -ra w <<< "$line"
	if [[ $line =~ [[:space:]]$ || ${#w[@]} -eq 0 ]]; then
		cur=
	else
		cur=${w[${#w[@]}-1]}
		unset "w[${#w[@]}-1]"
	fi
	prev=${w[${#w[@]}-1]}
	COMPREPLY=()
	# What is typed in the word being completed (bash replaces only the
	# part after its last word break).
	[[ $cur == *[=:]* ]] && return 0

	local prog=${w[0]:-devctl} cmd= ci=0 i
	local -a sock=()
	for ((i = 1; i < ${#w[@]}; i++)); do
		case ${w[i]} in
		--socket | -s) sock=(--socket "${w[i + 1]}"); ((i++)) ;;
		--socket=*) sock=("${w[i]}") ;;
		-*) ;;
		*) cmd=${w[i]}; ci=$i; break ;;
		esac
	done
	case $prev in
	--socket | -s | -o | --output | --svg | --socket-dir) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
	esac
	if [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W "submit list status metrics trace top admin health cdi help --socket --help" -- "$cur"))
		return 0
	fi
	case $cmd in
	list | status | health) COMPREPLY=($(compgen -W "--json --help" -- "$cur")) ;;
	admin)
		case $prev in
		--uid | --shares | --of | --memory | --grace) return 0 ;;
		esac
		case ${w[ci + 1]} in
		grant) COMPREPLY=($(compgen -W "--uid --shares --of --memory --priority --label --update-only --cdi --json" -- "$cur")) ;;
		evict) COMPREPLY=($(compgen -W "--grace --json" -- "$cur")) ;;
		tenants) COMPREPLY=($(compgen -W "--json" -- "$cur")) ;;
		*) COMPREPLY=($(compgen -W "grant evict tenants --help" -- "$cur")) ;;
		esac ;;
	cdi)
		case ${w[ci + 1]} in
		generate) COMPREPLY=($(compgen -W "--output --socket-dir" -- "$cur")) ;;
		*) COMPREPLY=($(compgen -W "generate --help" -- "$cur")) ;;
		esac ;;
	metrics) COMPREPLY=($(compgen -W "--sessions --help" -- "$cur")) ;;
	top)
		[[ $prev == --interval ]] && return 0
		COMPREPLY=($(compgen -W "--once --interval --all --help" -- "$cur")) ;;
	trace)
		[[ $prev == --duration || $prev == --last ]] && return 0
		COMPREPLY=($(compgen -W "--duration --last --all -o --svg --help" -- "$cur")) ;;
	submit)
		case $prev in
		--queue | --repeat | --wait | --out | --deadline-ms) return 0 ;;
		--priority) COMPREPLY=($(compgen -W "normal high" -- "$cur")); return 0 ;;
		esac
		# The executable of the op being written: the first word after
		# submit or after the last '::'.
		local exec= j
		for ((j = ci + 1; j < ${#w[@]}; j++)); do
			case ${w[j]} in
			::) exec= ;;
			--queue | --repeat | --wait | --out | --priority | --deadline-ms) ((j++)) ;;
			-*) ;;
			*) [[ -z $exec ]] && exec=${w[j]} ;;
			esac
		done
		if [[ -z $exec ]]; then
			COMPREPLY=($(compgen -W "$("$prog" "${sock[@]}" list 2>/dev/null | sed -n 's/^\([a-z_][a-z0-9_]*\)(.*/\1/p')" -- "$cur"))
		elif [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "--queue --priority --repeat --wait --reset --deadline-ms --out --json --help" -- "$cur"))
		else
			local sig
			sig=$("$prog" "${sock[@]}" list 2>/dev/null | sed -n "s/^$exec(\(.*\))\$/\1/p")
			COMPREPLY=($(compgen -S = -W "$(tr ',' '\n' <<< "$sig" | sed 's/^ *//; s/:.*//') ::" -- "$cur"))
			[[ ${#COMPREPLY[@]} -eq 1 && $COMPREPLY == *= ]] && compopt -o nospace 2>/dev/null
			local k
			for k in "${!COMPREPLY[@]}"; do
				[[ ${COMPREPLY[k]} == ::= ]] && COMPREPLY[k]=::
			done
		fi ;;
	esac
	return 0
}
complete -F _devctl devctl
