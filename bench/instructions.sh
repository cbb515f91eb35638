#!/usr/bin/env bash
# bench/instructions.sh: instructions per packet of the IPsec engine's own
# work, counted by valgrind's callgrind, so that a change to the fast
# paths can be judged without the noise of a shared machine.
#
#   bench/instructions.sh [-f] [BENCHMARK ...]
#
# Each BENCHMARK (default: BenchmarkOverheadNoCryptoWall and
# BenchmarkOverheadNoCryptoInboundWall in ./ipsec, the engine through the
# framework's direct path with a provider that does no crypto) runs under
# callgrind twice, for N and 3N iterations of a 32-packet batch; the
# difference divided by 2N*32 is the cost per packet without the set-up.
# GOGC=off keeps collector work out of the count (the loop allocates
# nothing). -f also prints the 12 costliest functions of the longer run.
#
# Instructions are not time: stores to cache lines that are not in L1 cost
# more than their count says (bench/results/esp.md, session 3), so confirm
# a change with BenchmarkRatio. Needs valgrind (Debian: valgrind).
set -euo pipefail

TOP=0
if [[ ${1:-} == -f ]]; then
	TOP=1
	shift
fi
BENCHES=("$@")
if [[ ${#BENCHES[@]} -eq 0 ]]; then
	BENCHES=(BenchmarkOverheadNoCryptoWall BenchmarkOverheadNoCryptoInboundWall)
fi
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind not installed" >&2; exit 1; }

cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/ipsec.test" ./ipsec

N=10000
count() { # bench iterations -> total instructions
	GOGC=off valgrind --tool=callgrind --callgrind-out-file="$work/$1.$2.out" \
		"$work/ipsec.test" -test.run XXX -test.bench "^$1\$" -test.benchtime "$2x" -test.count 1 -test.cpu 1 2>&1 |
		awk '/I +refs:/ { gsub(",", "", $4); print $4 }'
}
for b in "${BENCHES[@]}"; do
	a=$(count "$b" $N)
	c=$(count "$b" $((3 * N)))
	echo "$b: $(((c - a) / (2 * N * 32))) instructions/packet"
	if [[ $TOP == 1 ]]; then
		callgrind_annotate --inclusive=no "$work/$b.$((3 * N)).out" | grep -E '^ *[0-9,]+ +\(' | grep -v 'PROGRAM TOTALS' | head -12
	fi
done
