#!/usr/bin/env bash
# bench/tunnel.sh: tunnel throughput of Keel against wireguard-go and plain
# veth, on one two-namespace veth topology, in one run.
#
#   sudo bench/tunnel.sh [-t SECONDS] [-o RESULTS.md] [contender ...]
#
# Contenders: veth (the ceiling), wireguard-go, keel (AES-128-GCM over
# UDP/4500). Default: all three. Each runs iperf3 with cubic congestion
# control, one TCP stream and then 4 streams, and reports Gbit/s and the
# CPU-seconds per GB used by the tunnel daemons (both ends together).
#
# Needs root, iperf3, and for wireguard-go Debian's wireguard-tools
# (apt-get install --no-install-recommends wireguard-tools). wireguard-go
# itself is built from the Go module proxy at a pinned pseudo-version.
# The script stops by itself (every step is bounded) and removes its
# namespaces and processes on success, failure and Ctrl-C.
set -euo pipefail
umask 077 # wg private keys

DUR=20
OUT=""
while getopts "t:o:" opt; do
	case $opt in
	t) DUR=$OPTARG ;;
	o) OUT=$OPTARG ;;
	*) echo "usage: $0 [-t seconds] [-o results.md] [veth|wireguard-go|keel ...]" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
CONTENDERS=("$@")
[ ${#CONTENDERS[@]} -gt 0 ] || CONTENDERS=(veth wireguard-go keel)

WG_VERSION=v0.0.0-20260522210424-ecfc5a8d5446
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/keel-tunnel.XXXXXX)
NSA=keelbenchA$$
NSB=keelbenchB$$
PIDS=()

[ "$(id -u)" = 0 ] || { echo "tunnel.sh: needs root (network namespaces)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "tunnel.sh: needs iperf3 (apt-get install iperf3)" >&2; exit 1; }

cleanup() {
	set +e
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.2
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	ip netns del "$NSA" 2>/dev/null
	ip netns del "$NSB" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# topology: A (10.99.0.1) <-veth-> B (10.99.0.2); tunnel inner 10.98.0.1/.2
topology() {
	ip netns del "$NSA" 2>/dev/null || true
	ip netns del "$NSB" 2>/dev/null || true
	ip netns add "$NSA"
	ip netns add "$NSB"
	ip link add vA netns "$NSA" type veth peer name vB netns "$NSB"
	ip -n "$NSA" addr add 10.99.0.1/24 dev vA
	ip -n "$NSB" addr add 10.99.0.2/24 dev vB
	for ns in "$NSA" "$NSB"; do
		ip -n "$ns" link set lo up
		ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control=cubic 2>/dev/null || true # per-socket -C cubic below is what counts
	done
	ip -n "$NSA" link set vA up
	ip -n "$NSB" link set vB up
}

# cpu_of PID...: user+system clock ticks of the given processes.
cpu_ticks() {
	local t=0 p
	for p in "$@"; do
		if [ -r "/proc/$p/stat" ]; then
			t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
		fi
	done
	echo "$t"
}

# measure NAME DST STREAMS PIDS...: runs iperf3 from A to DST in B.
measure() {
	local name=$1 dst=$2 streams=$3
	shift 3
	local hz; hz=$(getconf CLK_TCK)
	ip netns exec "$NSB" iperf3 -s -1 -D -p 5201 --logfile "$WORK/srv.log" 2>/dev/null
	sleep 0.3
	local before; before=$(cpu_ticks "$@")
	local json="$WORK/$name-$streams.json"
	timeout $((DUR + 30)) ip netns exec "$NSA" iperf3 -c "$dst" -p 5201 -t "$DUR" -P "$streams" -C cubic -J >"$json" || true
	local after; after=$(cpu_ticks "$@")
	pkill -f "iperf3 -s -1 -D -p 5201" 2>/dev/null || true
	local bps bytes
	bps=$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["end"]["sum_received"]["bits_per_second"])' "$json" 2>/dev/null || echo 0)
	bytes=$(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["end"]["sum_received"]["bytes"])' "$json" 2>/dev/null || echo 0)
	local gbps cpg
	gbps=$(awk -v b="$bps" 'BEGIN{printf "%.2f", b/1e9}')
	if [ "$#" -gt 0 ] && [ "$bytes" != 0 ]; then
		cpg=$(awk -v t=$((after - before)) -v hz="$hz" -v by="$bytes" 'BEGIN{printf "%.2f", (t/hz)/(by/1e9)}')
	else
		cpg="-"
	fi
	printf '| %s | %d | %s | %s |\n' "$name" "$streams" "$gbps" "$cpg" | tee -a "$WORK/results"
}

run_veth() {
	topology
	measure veth 10.99.0.2 1
	measure veth 10.99.0.2 4
}

build_wireguard_go() {
	if [ ! -x "$WORK/bin/wireguard-go" ]; then
		mkdir -p "$WORK/bin"
		(cd "$WORK" && GOBIN="$WORK/bin" GOFLAGS=-mod=mod timeout 300 go install "golang.zx2c4.com/wireguard@$WG_VERSION")
		mv "$WORK/bin/wireguard" "$WORK/bin/wireguard-go"
	fi
}

run_wireguard_go() {
	command -v wg >/dev/null || { echo "| wireguard-go | - | skipped: no wg (apt-get install --no-install-recommends wireguard-tools) | |"; return; }
	build_wireguard_go
	topology
	wg genkey >"$WORK/a.key"; wg pubkey <"$WORK/a.key" >"$WORK/a.pub"
	wg genkey >"$WORK/b.key"; wg pubkey <"$WORK/b.key" >"$WORK/b.pub"
	local ns side peer addr ep pids=()
	for side in A B; do
		if [ $side = A ]; then ns=$NSA peer=b addr=10.98.0.1 ep=10.99.0.2; else ns=$NSB peer=a addr=10.98.0.2 ep=10.99.0.1; fi
		mkdir -p "$WORK/run$side"
		# Each daemon gets a private /run so both can own /var/run/wireguard/wg0.sock.
		# (enter the netns first: a tmpfs over /run would hide /run/netns)
		ip netns exec "$ns" unshare --mount --propagation private sh -c "mount -t tmpfs tmpfs /run && mkdir -p /run/wireguard && WG_PROCESS_FOREGROUND=1 exec $WORK/bin/wireguard-go wg0" >"$WORK/wg$side.log" 2>&1 &
		pids+=($!)
		PIDS+=($!)
		for _ in $(seq 50); do
			nsenter -t "$!" -m -n test -S /run/wireguard/wg0.sock 2>/dev/null && break
			sleep 0.1
		done
		nsenter -t "$!" -m -n wg set wg0 listen-port 51820 private-key "$WORK/$(echo $side | tr AB ab).key" \
			peer "$(cat "$WORK/$peer.pub")" endpoint "$ep:51820" allowed-ips 10.98.0.0/24
		ip -n "$ns" addr add "$addr/24" dev wg0
		ip -n "$ns" link set wg0 mtu 1420 up
	done
	ip netns exec "$NSA" ping -c 1 -W 2 10.98.0.2 >/dev/null
	measure wireguard-go 10.98.0.2 1 "${pids[@]}"
	measure wireguard-go 10.98.0.2 4 "${pids[@]}"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait "${pids[@]}" 2>/dev/null || true
}

run_keel() {
	"$ROOT/bench/keel-tunnel-up.sh" "$WORK" "$NSA" "$NSB" >"$WORK/keel-up.log" 2>&1 || {
		echo "| keel | - | failed to start: $(tail -1 "$WORK/keel-up.log") | |"; return; }
	local pids; pids=($(cat "$WORK/keel.pids"))
	PIDS+=("${pids[@]}")
	measure keel 10.98.0.2 1 "${pids[@]}"
	measure keel 10.98.0.2 4 "${pids[@]}"
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}

{
	echo "tunnel.sh $(date -u +%FT%TZ) on $(nproc) cores, $(uname -r), ${DUR}s per run"
	echo "| contender | streams | Gbit/s | CPU-s per GB (daemons) |"
	echo "|---|---|---|---|"
} | tee "$WORK/results"
for c in "${CONTENDERS[@]}"; do
	case $c in
	veth) run_veth ;;
	wireguard-go) run_wireguard_go ;;
	keel) topology; run_keel ;;
	*) echo "unknown contender $c" >&2 ;;
	esac
done
[ -z "$OUT" ] || cp "$WORK/results" "$OUT"
